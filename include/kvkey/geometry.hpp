// SPDX-License-Identifier: Apache-2.0
// Block geometry: the byte size of one stored block's KV bytes (one rank's
// slice) where it follows from the identity, the size of each KvDtype, and the
// mapping from the dtype names engines use (torch, vLLM, SGLang, lmdeploy) to
// KvDtype. KeyNamespace::payload_size() is the per-namespace form.
//
//   kvkey::Identity id;
//   id.kv.dtype = kvkey::kv_dtype_from_engine("torch.bfloat16");  // KvDtype::bf16
//   std::optional<std::uint64_t> n = kvkey::payload_size(id.kv, kvkey::resolve_slice(id.kv, id.shard));
#ifndef KVKEY_GEOMETRY_HPP
#define KVKEY_GEOMETRY_HPP

#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>

#include "kvkey/config.hpp"
#include "kvkey/errors.hpp"
#include "kvkey/identity.hpp"

KVKEY_BEGIN_NAMESPACE

/// Bits of one element of d: 32, 16, 8 or 4 (int4, uint4, fp4_e2m1). Throws
/// input_error for KvDtype::unset and for a value that is no enumerator.
[[nodiscard]] inline std::uint32_t dtype_bits(KvDtype d) {
  switch (d) {
    case KvDtype::fp32: return 32;
    case KvDtype::fp16:
    case KvDtype::bf16: return 16;
    case KvDtype::fp8_e4m3:
    case KvDtype::fp8_e5m2:
    case KvDtype::fp8_e4m3fnuz:
    case KvDtype::fp8_e5m2fnuz:
    case KvDtype::int8:
    case KvDtype::uint8: return 8;
    case KvDtype::int4:
    case KvDtype::uint4:
    case KvDtype::fp4_e2m1: return 4;
    case KvDtype::unset: break;
  }
  throw input_error(d == KvDtype::unset
                        ? "dtype is unset: it has no size"
                        : "dtype code " + std::to_string(static_cast<unsigned>(d)) + " is not a known dtype");
}

/// Bytes of one element of d: 4, 2 or 1. A 4-bit type (int4, uint4, fp4_e2m1)
/// has no whole-byte size: it throws input_error saying so (dtype_bits gives
/// 4; payload_size packs two such elements per byte). So do `unset` and a
/// value that is no enumerator.
[[nodiscard]] inline std::uint32_t dtype_itemsize(KvDtype d) {
  const std::uint32_t bits = dtype_bits(d);
  if (bits % 8 != 0) {
    throw input_error("dtype " + std::string(to_string(d)) + " is " + std::to_string(bits) +
                      " bits: it has no whole-byte item size (two values are packed per byte; use dtype_bits)");
  }
  return bits / 8;
}

namespace detail {

struct EngineDtypeName {
  std::string_view name;
  KvDtype dtype;
};

// Names as torch (str(torch.bfloat16), with or without "torch."), numpy, vLLM
// (--kv-cache-dtype, --dtype), SGLang (--kv-cache-dtype) and lmdeploy spell them;
// kvkey's own names (to_string) are accepted besides these.
inline constexpr EngineDtypeName engine_dtype_names[] = {
    {"float32", KvDtype::fp32},
    {"float", KvDtype::fp32},
    {"float16", KvDtype::fp16},
    {"half", KvDtype::fp16},
    {"bfloat16", KvDtype::bf16},
    {"fp8", KvDtype::fp8_e4m3},  // vLLM and SGLang: "fp8" is e4m3 (OCP e4m3fn); fnuz on ROCm gfx94x (EnginePlatform)
    {"float8_e4m3fn", KvDtype::fp8_e4m3},
    {"float8_e5m2", KvDtype::fp8_e5m2},
    {"float8_e4m3fnuz", KvDtype::fp8_e4m3fnuz},
    {"float8_e5m2fnuz", KvDtype::fp8_e5m2fnuz},
    {"float4_e2m1fn_x2", KvDtype::fp4_e2m1},
};

inline std::string_view strip_torch(std::string_view s) {
  constexpr std::string_view torch = "torch.";
  if (s.substr(0, torch.size()) == torch) s.remove_prefix(torch.size());
  return s;
}

inline std::string accepted_engine_dtypes() {
  std::string out;
  for (const KvDtype d : all_dtypes()) out.append(out.empty() ? "" : ", ").append(to_string(d));
  for (const EngineDtypeName& e : engine_dtype_names) out.append(", ").append(e.name);
  out.append(" (each also with a \"torch.\" prefix)");
  return out;
}

}  // namespace detail

/// Where an engine runs, as far as the meaning of its dtype names depends on
/// it. vLLM resolves its "fp8" KV cache dtype per platform:
/// current_platform.fp8_dtype() is torch.float8_e4m3fnuz where
/// RocmPlatform.is_fp8_fnuz() ("gfx94" in the GPU's gcnArchName: MI300, MI325),
/// torch.float8_e4m3fn everywhere else (vllm/platforms/rocm.py,
/// RocmPlatform.is_fp8_fnuz and fp8_dtype; vllm/platforms/interface.py,
/// Platform.fp8_dtype). The two store other bytes for the same values, so
/// their identities must differ.
struct EnginePlatform {
  /// The GPU architecture: a ROCm gcnArchName ("gfx942:sramecc+:xnack-",
  /// torch.cuda.get_device_properties(0).gcnArchName), or empty for CUDA and
  /// other platforms (OCP fp8).
  std::string gpu_arch;

  /// Whether the engine's "fp8" is fnuz here (the arch names gfx94x).
  [[nodiscard]] bool fp8_fnuz() const noexcept { return gpu_arch.find("gfx94") != std::string::npos; }
};

/// The KvDtype of a dtype name as an engine spells it: kvkey's own names
/// ("bf16", "fp8_e4m3", ...), torch's ("bfloat16", "torch.float16", "half",
/// "float8_e4m3fn", "float8_e4m3fnuz", "torch.float8_e5m2", "int8", ...), vLLM's and SGLang's
/// --kv-cache-dtype values ("fp8", "fp8_e4m3", "fp8_e5m2", "bfloat16", "bf16",
/// "fp4_e2m1") and torch's "float4_e2m1fn_x2". Exact, lowercase. "fp8" and
/// vLLM's "fp8_e4m3" are resolved for `platform` as vLLM resolves them:
/// fp8_e4m3fnuz on ROCm gfx94x, fp8_e4m3 elsewhere. Throws input_error: for
/// "auto" (the engine resolves it to the model's dtype: pass that instead),
/// for formats that carry scales inside the cache ("fp8_ds_mla", "fp8_inc":
/// describe them with a Quant), and for an unknown name, listing the accepted ones.
[[nodiscard]] inline KvDtype kv_dtype_from_engine(std::string_view name, const EnginePlatform& platform = {}) {
  if (name == "auto") {
    throw input_error(
        "kv dtype \"auto\" means the model's dtype: resolve it first (e.g. the model config's "
        "torch_dtype, such as \"bfloat16\") and pass that");
  }
  const std::string_view bare = detail::strip_torch(name);
  if (platform.fp8_fnuz() && (bare == "fp8" || bare == "fp8_e4m3")) return KvDtype::fp8_e4m3fnuz;
  if (auto d = kv_dtype_from_string(bare)) return *d;
  for (const detail::EngineDtypeName& e : detail::engine_dtype_names) {
    if (e.name == bare) return e.dtype;
  }
  if (bare == "fp8_ds_mla" || bare == "fp8_inc") {
    throw input_error("kv dtype \"" + std::string(name) +
                      "\" stores scales inside the cache: name its element "
                      "dtype (fp8_e4m3) and describe the scales with kv.quant");
  }
  const std::string shown = name.size() <= 64 ? std::string(name) : std::string(name.substr(0, 64)) + "...";
  throw input_error("unknown kv dtype \"" + shown + "\" (accepted: " + detail::accepted_engine_dtypes() + ")");
}

/// Whether d is an integer type (int8, uint8, int4, uint4): KV stored so is
/// quantized in every engine, and its identity needs the quant layout.
[[nodiscard]] constexpr bool is_integer_dtype(KvDtype d) noexcept {
  return d == KvDtype::int8 || d == KvDtype::uint8 || d == KvDtype::int4 || d == KvDtype::uint4;
}

/// The KvDtype of lmdeploy's TurboMind quant_policy: 8 is int8 KV, 4 is int4
/// KV (both with per-token scales: the identity also needs a kv.quant). 0 stores
/// the model's dtype, which quant_policy does not name: input_error, as for
/// any other value.
[[nodiscard]] inline KvDtype kv_dtype_from_quant_policy(std::uint32_t quant_policy) {
  if (quant_policy == 8) return KvDtype::int8;
  if (quant_policy == 4) return KvDtype::int4;
  if (quant_policy == 0) {
    throw input_error("quant_policy 0 stores the KV in the model's dtype: pass that dtype (e.g. \"bfloat16\")");
  }
  throw input_error("quant_policy " + std::to_string(quant_policy) + " is not one of lmdeploy's 0, 4, 8");
}

/// The KV quant layout of lmdeploy's quant_policy 4 and 8: one scale and one
/// zero point per token and KV head, in the model's dtype. lmdeploy 0.18
/// (lmdeploy/pytorch/engine/cache_engine/schema.py, build_quant_cache_descs):
/// for INT4 and INT8, `key_scale_zero_shape = k_cache_desc.shape[:-1] + [2]`
/// and `val_scale_zero_shape = v_cache_desc.shape[:-1] + [2]` with
/// `dtype = model_config.dtype`; the K and V caches themselves are uint8
/// (_resolve_kv_cache_dtype), int4 packed two per byte (head_size // 2). So:
/// scheme "per_token_head_asym", group_size head_dim (one group per head
/// vector), scale_dtype the model's dtype, zero_point true. input_error for a
/// quant_policy other than 4 and 8, an unset or integer scale dtype, or head_dim 0.
[[nodiscard]] inline Quant quant_from_quant_policy(std::uint32_t quant_policy, KvDtype scale_dtype,
                                                   std::uint32_t head_dim) {
  (void)kv_dtype_from_quant_policy(quant_policy);  // 4 or 8, else input_error
  if (!is_valid(scale_dtype) || is_integer_dtype(scale_dtype) || dtype_bits(scale_dtype) < 16) {
    throw input_error("quant_scale_dtype", "lmdeploy's quant_policy " + std::to_string(quant_policy) +
                                               " keeps its scales and zero points in the model's dtype (fp16, bf16 "
                                               "or fp32), not " +
                                               std::string(to_string(scale_dtype)));
  }
  if (head_dim == 0) throw input_error("kv.head_dim", "quant_policy layout: head_dim is 0");
  Quant q;
  q.scheme = "per_token_head_asym";
  q.group_size = head_dim;
  q.scale_dtype = scale_dtype;
  q.zero_point = true;
  return q;
}

/// One block's KV bytes in `slice` (a rank's heads and layers, resolve_slice),
/// for layouts whose size follows from the identity:
///  - dense K and V: 2 x layers x heads x head_dim x block_size x bits / 8;
///  - MLA (kv.mla, one latent per token and layer): layers x head_dim x block_size x bits / 8;
/// with layers and heads counted in the slice and 4-bit types packed two per
/// byte. nullopt when kv.quant.scheme is not "none" (where and how scales are
/// stored is engine-specific), when the bits do not fill whole bytes, when the
/// size in bits exceeds 2^64 - 1, or when kv.dtype is not a valid dtype.
[[nodiscard]] inline std::optional<std::uint64_t> payload_size(const Kv& kv, const Slice& slice) noexcept {
  if (kv.quant.scheme != "none" || !is_valid(kv.dtype)) return std::nullopt;
  if (slice.layer_end < slice.layer_begin || slice.kv_head_end < slice.kv_head_begin) return std::nullopt;
  const std::uint64_t factors[] = {
      kv.mla ? 1u : 2u,
      slice.layer_end - slice.layer_begin,
      kv.mla ? 1u : slice.kv_head_end - slice.kv_head_begin,
      kv.head_dim,
      kv.block_size,
      dtype_bits(kv.dtype),
  };
  std::uint64_t bits = 1;
  for (const std::uint64_t f : factors) {
    if (f != 0 && bits > std::numeric_limits<std::uint64_t>::max() / f) return std::nullopt;
    bits *= f;
  }
  if (bits % 8 != 0) return std::nullopt;
  return bits / 8;
}

KVKEY_END_NAMESPACE

#endif  // KVKEY_GEOMETRY_HPP
