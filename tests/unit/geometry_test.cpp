// Block geometry (kvkey/geometry.hpp): payload_size for dense, MLA, sharded
// and quantized identities against hand-computed sizes; dtype sizes; engine
// dtype names.
#include "support/fixtures.hpp"

#include <catch2/catch.hpp>

#include <cstdint>
#include <optional>
#include <string>

namespace {

std::optional<std::uint64_t> size_of(const kvkey::Identity& id) { return kvkey::KeyNamespace<>(id).payload_size(); }

}  // namespace

TEST_CASE("payload_size: dense, whole model", "[geometry]") {
  // base_identity: fp16, block 16, 28 layers, 4 KV heads, head_dim 128.
  CHECK(size_of(kvkey_test::base_identity()) == std::uint64_t{2} * 28 * 4 * 128 * 16 * 2);  // 917504
  CHECK(size_of(kvkey_test::base_identity()) == 917504u);
  kvkey::Identity id = kvkey_test::base_identity();
  id.kv.dtype = kvkey::KvDtype::fp32;
  CHECK(size_of(id) == 1835008u);
  id.kv.dtype = kvkey::KvDtype::fp8_e5m2;
  CHECK(size_of(id) == 458752u);
}

TEST_CASE("payload_size: this rank's slice", "[geometry]") {
  // sharded_identity: bf16, block 16, 24 layers, 2 KV heads, head_dim 64, tp 2.
  CHECK(size_of(kvkey_test::sharded_identity()) == std::uint64_t{2} * 24 * 1 * 64 * 16 * 2);  // 98304
  kvkey::Identity id = kvkey_test::base_identity();                                           // 4 heads, 28 layers
  id.shard = {2, 1, 2, 1};  // tp 2 -> 2 heads; pp 2 -> 14 layers
  CHECK(size_of(id) == std::uint64_t{2} * 14 * 2 * 128 * 16 * 2);
  id.shard = {8, 5, 1, 0};  // more ranks than heads: one replicated head
  CHECK(size_of(id) == std::uint64_t{2} * 28 * 1 * 128 * 16 * 2);
}

TEST_CASE("payload_size: MLA latent cache", "[geometry]") {
  kvkey::Identity id = kvkey_test::base_identity();
  id.kv.mla = true;
  id.kv.num_kv_heads = 1;
  id.kv.head_dim = 576;  // 512 latent + 64 rope
  id.kv.block_size = 64;
  id.kv.num_layers = 61;
  id.kv.dtype = kvkey::KvDtype::bf16;
  CHECK(size_of(id) == std::uint64_t{61} * 576 * 64 * 2);  // 4497408
  id.shard = {8, 3, 1, 0};                                 // whole on every TP rank
  CHECK(size_of(id) == 4497408u);
}

TEST_CASE("payload_size: quantized or sub-byte", "[geometry]") {
  CHECK(size_of(kvkey_test::rich_identity()) == std::nullopt);  // per_token_asym with scales
  kvkey::Identity id = kvkey_test::base_identity();
  id.kv.dtype = kvkey::KvDtype::int4;  // no scales: packed two per byte
  CHECK(size_of(id) == std::uint64_t{2} * 28 * 4 * 128 * 16 / 2);
  id.kv.mla = true;
  id.kv.num_kv_heads = 1;
  id.kv.head_dim = 1;
  id.kv.block_size = 1;
  id.kv.num_layers = 1;  // one 4-bit value: no whole byte
  CHECK(size_of(id) == std::nullopt);
  kvkey::Kv unset;
  CHECK(kvkey::payload_size(unset, kvkey::Slice{}) == std::nullopt);
}

TEST_CASE("dtype_itemsize and dtype_bits", "[geometry]") {
  CHECK(kvkey::dtype_itemsize(kvkey::KvDtype::fp32) == 4);
  CHECK(kvkey::dtype_itemsize(kvkey::KvDtype::bf16) == 2);
  CHECK(kvkey::dtype_itemsize(kvkey::KvDtype::fp16) == 2);
  CHECK(kvkey::dtype_itemsize(kvkey::KvDtype::fp8_e4m3) == 1);
  CHECK(kvkey::dtype_itemsize(kvkey::KvDtype::uint8) == 1);
  CHECK(kvkey::dtype_bits(kvkey::KvDtype::int4) == 4);
  CHECK_THROWS_WITH(kvkey::dtype_itemsize(kvkey::KvDtype::int4), Catch::Contains("int4 is 4 bits"));
  CHECK_THROWS_AS(kvkey::dtype_itemsize(kvkey::KvDtype::unset), kvkey::input_error);
  CHECK_THROWS_AS(kvkey::dtype_bits(static_cast<kvkey::KvDtype>(200)), kvkey::input_error);
  for (const kvkey::KvDtype d : kvkey::all_dtypes()) CHECK(kvkey::dtype_bits(d) % 4 == 0);
}

TEST_CASE("kv_dtype_from_engine", "[geometry]") {
  using kvkey::KvDtype;
  const std::pair<const char*, KvDtype> names[] = {
      {"bfloat16", KvDtype::bf16},
      {"torch.bfloat16", KvDtype::bf16},
      {"bf16", KvDtype::bf16},
      {"float16", KvDtype::fp16},
      {"half", KvDtype::fp16},
      {"torch.float16", KvDtype::fp16},
      {"torch.half", KvDtype::fp16},
      {"float32", KvDtype::fp32},
      {"float", KvDtype::fp32},
      {"torch.float32", KvDtype::fp32},
      {"fp8", KvDtype::fp8_e4m3},
      {"fp8_e4m3", KvDtype::fp8_e4m3},
      {"fp8_e5m2", KvDtype::fp8_e5m2},
      {"float8_e4m3fn", KvDtype::fp8_e4m3},
      {"float8_e5m2", KvDtype::fp8_e5m2},
      {"torch.float8_e4m3fn", KvDtype::fp8_e4m3},
      {"torch.float8_e5m2", KvDtype::fp8_e5m2},
      {"int8", KvDtype::int8},
      {"torch.int8", KvDtype::int8},
      {"int4", KvDtype::int4},
      {"uint8", KvDtype::uint8},
      {"fp4_e2m1", KvDtype::fp4_e2m1},
  };
  for (const auto& [name, dtype] : names) {
    INFO(name);
    CHECK(kvkey::kv_dtype_from_engine(name) == dtype);
  }
  CHECK_THROWS_WITH(kvkey::kv_dtype_from_engine("auto"), Catch::Contains("resolve it first"));
  CHECK(kvkey::kv_dtype_from_engine("float8_e4m3fnuz") == KvDtype::fp8_e4m3fnuz);
  CHECK(kvkey::kv_dtype_from_engine("torch.float8_e5m2fnuz") == KvDtype::fp8_e5m2fnuz);
  CHECK(kvkey::kv_dtype_from_engine("fp8_e4m3fnuz") == KvDtype::fp8_e4m3fnuz);
  CHECK_THROWS_WITH(kvkey::kv_dtype_from_engine("fp8_ds_mla"), Catch::Contains("kv.quant"));
  CHECK_THROWS_WITH(kvkey::kv_dtype_from_engine("float64"), Catch::Contains("unknown kv dtype \"float64\"") &&
                                                                Catch::Contains("bfloat16") &&
                                                                Catch::Contains("float8_e4m3fn"));
  CHECK_THROWS_AS(kvkey::kv_dtype_from_engine(""), kvkey::input_error);
  CHECK(kvkey::kv_dtype_from_quant_policy(8) == KvDtype::int8);
  CHECK(kvkey::kv_dtype_from_quant_policy(4) == KvDtype::int4);
  CHECK_THROWS_WITH(kvkey::kv_dtype_from_quant_policy(0), Catch::Contains("model's dtype"));
  CHECK_THROWS_AS(kvkey::kv_dtype_from_quant_policy(2), kvkey::input_error);
}

TEST_CASE("fp8 is resolved per platform, as vLLM resolves it", "[geometry]") {
  using kvkey::KvDtype;
  kvkey::EnginePlatform cuda;
  kvkey::EnginePlatform mi300;
  mi300.gpu_arch = "gfx942:sramecc+:xnack-";
  kvkey::EnginePlatform mi355;
  mi355.gpu_arch = "gfx950";
  CHECK_FALSE(cuda.fp8_fnuz());
  CHECK(mi300.fp8_fnuz());
  CHECK_FALSE(mi355.fp8_fnuz());
  CHECK(kvkey::kv_dtype_from_engine("fp8", cuda) == KvDtype::fp8_e4m3);
  CHECK(kvkey::kv_dtype_from_engine("fp8", mi355) == KvDtype::fp8_e4m3);
  CHECK(kvkey::kv_dtype_from_engine("fp8", mi300) == KvDtype::fp8_e4m3fnuz);
  CHECK(kvkey::kv_dtype_from_engine("fp8_e4m3", mi300) == KvDtype::fp8_e4m3fnuz);
  CHECK(kvkey::kv_dtype_from_engine("float8_e4m3fn", mi300) == KvDtype::fp8_e4m3);  // an explicit torch dtype
  CHECK(kvkey::kv_dtype_from_engine("bfloat16", mi300) == KvDtype::bf16);
  // The two deployments' identities differ: their values never verify for each other.
  kvkey::Identity a =
      kvkey_test::make_identity("t", "m", kvkey_test::qwen_7b_revision, {KvDtype::fp8_e4m3, 4, 2, 16, 8, "x"});
  kvkey::Identity b = a;
  b.kv.dtype = kvkey::kv_dtype_from_engine("fp8", mi300);
  CHECK(kvkey::first_difference(a, b) == "kv.dtype");
  CHECK(kvkey::dtype_bits(KvDtype::fp8_e4m3fnuz) == 8);
}

TEST_CASE("quant_from_quant_policy is lmdeploy's layout", "[geometry]") {
  using kvkey::KvDtype;
  const kvkey::Quant q = kvkey::quant_from_quant_policy(8, KvDtype::bf16, 128);
  CHECK(q.scheme == "per_token_head_asym");
  CHECK(q.group_size == 128);
  CHECK(q.scale_dtype == KvDtype::bf16);
  CHECK(q.zero_point);
  CHECK(kvkey::quant_from_quant_policy(4, KvDtype::fp16, 64).group_size == 64);
  CHECK_THROWS_AS(kvkey::quant_from_quant_policy(0, KvDtype::fp16, 64), kvkey::input_error);
  CHECK_THROWS_AS(kvkey::quant_from_quant_policy(8, KvDtype::int8, 64), kvkey::input_error);
  CHECK_THROWS_AS(kvkey::quant_from_quant_policy(8, KvDtype::unset, 64), kvkey::input_error);
  CHECK(kvkey::is_integer_dtype(KvDtype::int4));
  CHECK(kvkey::is_integer_dtype(KvDtype::uint8));
  CHECK_FALSE(kvkey::is_integer_dtype(KvDtype::fp8_e4m3));
}
