// The test fixtures: sample identities, token sequences, secrets and byte
// helpers, shared by the unit, integration and fuzz tests, the package
// consumers and the benchmarks. Written against kvkey's public names only.
// The hand-built reference of the byte formats is reference.hpp.
#ifndef KVKEY_TESTS_SUPPORT_FIXTURES_HPP
#define KVKEY_TESTS_SUPPORT_FIXTURES_HPP

#include <kvkey/kvkey.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kvkey_test {

using ByteVec = std::vector<std::uint8_t>;

// ---- identities --------------------------------------------------------------------

/// Revisions of the checkpoints the fixtures name.
inline constexpr const char* qwen_7b_revision = "a09a35458c702b33eeacc393d103063234e8bc28";
inline constexpr const char* qwen_05b_revision = "7ae557604adf67be50417f59c2c2f167def9a775";

/// The KV part of an identity.
struct KvShape {
  kvkey::KvDtype dtype;
  std::uint32_t block_size;
  std::uint32_t num_layers;
  std::uint32_t num_kv_heads;
  std::uint32_t head_dim;
  std::string layout;
};

/// A valid identity with no optionals, quant "none", weights epoch 0, tp = pp = 1.
inline kvkey::Identity make_identity(std::string tenant, std::string model, std::string revision, const KvShape& kv) {
  kvkey::Identity id;
  id.tenant = std::move(tenant);
  id.model.name = std::move(model);
  id.model.revision = std::move(revision);
  id.kv.dtype = kv.dtype;
  id.kv.block_size = kv.block_size;
  id.kv.num_layers = kv.num_layers;
  id.kv.num_kv_heads = kv.num_kv_heads;
  id.kv.head_dim = kv.head_dim;
  id.kv.layout = kv.layout;
  return id;
}

/// The optional fields with_optionals sets; fingerprints are of these strings.
struct Optionals {
  kvkey::KvDtype dtype;                    ///< an integer KV dtype, quantized per token
  std::string_view weights;                ///< model.weights_fingerprint
  std::optional<std::string_view> scales;  ///< kv.quant.scales_fingerprint, or none
  std::string adapter_name;
  std::string_view adapter_weights;
};

/// `id` quantized per token (asymmetric, groups of 64, fp16 scales, zero
/// point), with a weights fingerprint and an adapter.
inline kvkey::Identity with_optionals(kvkey::Identity id, Optionals o) {
  id.model.weights_fingerprint = kvkey::fingerprint(o.weights);
  id.kv.dtype = o.dtype;
  id.kv.quant.scheme = "per_token_asym";
  id.kv.quant.group_size = 64;
  id.kv.quant.scale_dtype = kvkey::KvDtype::fp16;
  id.kv.quant.zero_point = true;
  if (o.scales) id.kv.quant.scales_fingerprint = kvkey::fingerprint(*o.scales);
  id.adapter = kvkey::Adapter(std::move(o.adapter_name), kvkey::fingerprint(o.adapter_weights));
  return id;
}

/// A small valid identity: no optionals, quant "none", tp = pp = 1.
inline kvkey::Identity base_identity() {
  return make_identity("team-a", "Qwen/Qwen2.5-7B-Instruct", qwen_7b_revision,
                       {kvkey::KvDtype::fp16, 16, 28, 4, 128, "lmdeploy.v1.layer_major"});
}

/// base_identity in bf16 at the given block size.
inline kvkey::Identity bf16_identity(std::uint32_t block_size) {
  kvkey::Identity id = base_identity();
  id.kv.dtype = kvkey::KvDtype::bf16;
  id.kv.block_size = block_size;
  return id;
}

/// base_identity quantized (int8, per-token scales): its payload size is not
/// determined by the identity, so a connector checks none unless told.
inline kvkey::Identity unsized_identity() {
  return with_optionals(base_identity(), {kvkey::KvDtype::int8, "weights", "scales", "lora", "lora weights"});
}

/// A valid identity with every optional present, a quantization scheme and a
/// 2-way tensor-parallel shard.
inline kvkey::Identity rich_identity() {
  kvkey::Identity id = with_optionals(
      base_identity(), {kvkey::KvDtype::int8, "weights v7", "scales v1", "sql-lora", "sql-lora weights"});
  id.model.weights_epoch = 7;
  id.model.positional_fingerprint = kvkey::fingerprint("rope_theta 1000000");
  id.shard.tp_size = 2;
  id.shard.tp_rank = 1;
  return id;
}

/// An identity with every string at its limit and every optional present: the
/// largest encoding a valid identity can have.
inline kvkey::Identity largest_identity() {
  kvkey::Identity id = rich_identity();
  id.tenant = std::string(kvkey::limits::tenant, 'T');
  id.model.name = std::string(kvkey::limits::model_name, '/');  // also the longest store key segment
  id.model.revision = std::string(kvkey::limits::revision, 'r');
  id.model.weights_epoch = ~std::uint64_t{0};
  id.kv.quant.scheme = std::string(kvkey::limits::quant_scheme, 'q');
  id.kv.layout = std::string(kvkey::limits::layout, 'l');
  id.adapter = kvkey::Adapter(std::string(kvkey::limits::adapter_name, '\xff'), kvkey::fingerprint("adapter"));
  return id;
}

/// A valid identity of a small GQA model, 2 TP ranks.
inline kvkey::Identity sharded_identity(std::string tenant = "tenant-a") {
  kvkey::Identity id = make_identity(std::move(tenant), "Qwen/Qwen2.5-0.5B-Instruct", qwen_05b_revision,
                                     {kvkey::KvDtype::bf16, 16, 24, 2, 64, "test.layer_major.v1"});
  id.model.weights_epoch = 3;
  id.shard.tp_size = 2;
  id.shard.tp_rank = 1;
  return id;
}

/// Member-by-member equality of the salient fields (the shard is not compared:
/// it is not part of the identity encoding). Written out by hand so it does not
/// depend on kvkey's field list.
inline bool same_salient_fields(const kvkey::Identity& a, const kvkey::Identity& b) {
  const bool adapters_equal = a.adapter.has_value() == b.adapter.has_value() &&
                              (!a.adapter || (a.adapter->name == b.adapter->name &&
                                              a.adapter->weights_fingerprint == b.adapter->weights_fingerprint));
  return a.tenant == b.tenant && a.model.name == b.model.name && a.model.revision == b.model.revision &&
         a.model.weights_epoch == b.model.weights_epoch && a.model.weights_fingerprint == b.model.weights_fingerprint &&
         a.model.positional_fingerprint == b.model.positional_fingerprint && a.kv.dtype == b.kv.dtype &&
         a.kv.quant.scheme == b.kv.quant.scheme && a.kv.quant.group_size == b.kv.quant.group_size &&
         a.kv.quant.scale_dtype == b.kv.quant.scale_dtype && a.kv.quant.zero_point == b.kv.quant.zero_point &&
         a.kv.quant.scales_fingerprint == b.kv.quant.scales_fingerprint && a.kv.block_size == b.kv.block_size &&
         a.kv.num_layers == b.kv.num_layers && a.kv.num_kv_heads == b.kv.num_kv_heads &&
         a.kv.head_dim == b.kv.head_dim && a.kv.layout == b.kv.layout && a.kv.mla == b.kv.mla && adapters_equal;
}

// ---- tokens and secrets ---------------------------------------------------------------

/// n deterministic token ids in [0, 151936), varied by seed.
inline std::vector<std::int32_t> tokens(std::size_t n, std::uint32_t seed = 1) {
  std::vector<std::int32_t> t(n);
  std::uint64_t x = 0x9e3779b97f4a7c15ull * (seed + 1);
  for (auto& v : t) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    v = static_cast<std::int32_t>(x % 151936);
  }
  return t;
}

/// Deterministic token ids: `blocks` full blocks of block_size tokens.
inline std::vector<std::int64_t> prompt_tokens(std::size_t blocks, std::size_t block_size, std::int64_t seed) {
  std::vector<std::int64_t> t(blocks * block_size);
  for (std::size_t i = 0; i < t.size(); ++i) t[i] = (seed * 7919 + static_cast<std::int64_t>(i) * 104729) % 151643;
  return t;
}

inline std::vector<std::uint32_t> as_u32(const std::vector<std::int32_t>& t) {
  return std::vector<std::uint32_t>(t.begin(), t.end());
}

/// 48 distinct bytes, none of them zero, for a TenantSecret.
inline std::string secret_bytes(char first) {
  std::string s;
  for (int i = 0; i < 48; ++i) s.push_back(static_cast<char>(first + (i * 7) % 50));
  return s;
}

// ---- bytes and hex -----------------------------------------------------------------------

inline std::string to_hex(const std::uint8_t* p, std::size_t n) {
  static constexpr char digits[] = "0123456789abcdef";
  std::string s;
  s.reserve(2 * n);
  for (std::size_t i = 0; i < n; ++i) {
    s.push_back(digits[p[i] >> 4]);
    s.push_back(digits[p[i] & 0x0f]);
  }
  return s;
}
template <class C>
std::string to_hex(const C& c) {
  return to_hex(c.data(), c.size());
}

inline ByteVec bytes_from_hex(std::string_view hex) {
  auto nib = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    throw std::invalid_argument("not lowercase hex");
  };
  if (hex.size() % 2 != 0) throw std::invalid_argument("odd hex length");
  ByteVec out(hex.size() / 2);
  for (std::size_t i = 0; i < out.size(); ++i) {
    out[i] = static_cast<std::uint8_t>(nib(hex[2 * i]) << 4 | nib(hex[2 * i + 1]));
  }
  return out;
}

inline ByteVec bytes_of(const kvkey::Digest& d) { return ByteVec(d.begin(), d.end()); }

/// True when `needle` occurs anywhere in haystack's bytes.
template <class Haystack>
bool contains_bytes(const Haystack& haystack, std::string_view needle) {
  const auto* begin = reinterpret_cast<const char*>(haystack.data());
  const auto* end = begin + haystack.size();
  return std::search(begin, end, needle.begin(), needle.end()) != end;
}

/// A view of the first n bytes (at most 4 MiB) of a fixed byte pattern: the
/// payload the tests seal and verify.
inline kvkey::Payload test_payload(std::size_t n) {
  static const std::vector<std::uint8_t> bytes = [] {
    std::vector<std::uint8_t> b(std::size_t{4} << 20);
    for (std::size_t i = 0; i < b.size(); ++i) b[i] = static_cast<std::uint8_t>((i * 131 + 7) >> 3);
    return b;
  }();
  if (n > bytes.size()) throw std::invalid_argument("test_payload: at most 4 MiB");
  return {bytes.data(), n};
}

}  // namespace kvkey_test

#endif  // KVKEY_TESTS_SUPPORT_FIXTURES_HPP
