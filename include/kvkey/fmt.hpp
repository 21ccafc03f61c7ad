// SPDX-License-Identifier: Apache-2.0
// Opt-in {fmt} formatters for kvkey's value types:
//   fmt::format("{}", digest)    -> 64 lowercase hex characters
//   fmt::format("{}", dtype)     -> "fp8_e4m3"
//   fmt::format("{}", verdict)   -> "ok" or "identity_mismatch (kv.dtype)"
//   fmt::format("{}", slice)     -> "heads [0, 4) layers [0, 28)"
//   fmt::format("{}", identity)  -> one line naming every salient field
#ifndef KVKEY_FMT_HPP
#define KVKEY_FMT_HPP

#include <fmt/format.h>

#include <string>
#include <string_view>

#include "kvkey/digest.hpp"
#include "kvkey/envelope.hpp"
#include "kvkey/identity.hpp"

KVKEY_BEGIN_NAMESPACE

namespace detail {
inline std::string describe_optional_digest(const std::optional<Digest>& d) {
  return d ? d->hex() : std::string("none");
}
}  // namespace detail

/// One line naming every salient field and the shard, for logs and tools.
inline std::string describe(const Identity& id) {
  std::string out = fmt::format(
      "tenant={} model.name={} model.revision={} model.weights_epoch={} model.weights_fingerprint={} "
      "model.positional_fingerprint={} kv.dtype={} kv.quant.scheme={} kv.quant.group_size={} kv.quant.scale_dtype={} kv.quant.zero_point={} "
      "kv.quant.scales_fingerprint={} kv.block_size={} kv.num_layers={} kv.num_kv_heads={} kv.head_dim={} "
      "kv.layout={} kv.mla={} shard.tp={}/{} shard.pp={}/{}",
      id.tenant, id.model.name, id.model.revision, id.model.weights_epoch,
      detail::describe_optional_digest(id.model.weights_fingerprint),
      detail::describe_optional_digest(id.model.positional_fingerprint), to_string(id.kv.dtype), id.kv.quant.scheme,
      id.kv.quant.group_size, id.kv.quant.scale_dtype ? to_string(*id.kv.quant.scale_dtype) : "none",
      id.kv.quant.zero_point, detail::describe_optional_digest(id.kv.quant.scales_fingerprint), id.kv.block_size,
      id.kv.num_layers, id.kv.num_kv_heads, id.kv.head_dim, id.kv.layout, id.kv.mla, id.shard.tp_rank,
      id.shard.tp_size, id.shard.pp_rank, id.shard.pp_size);
  if (id.adapter) {
    out += fmt::format(" adapter.name={} adapter.weights_fingerprint={}", id.adapter->name,
                       id.adapter->weights_fingerprint.hex());
  } else {
    out += " adapter=none";
  }
  return out;
}

KVKEY_END_NAMESPACE

template <>
struct fmt::formatter<kvkey::Digest> : fmt::formatter<fmt::string_view> {
  template <class Ctx>
  auto format(const kvkey::Digest& d, Ctx& ctx) const -> decltype(ctx.out()) {
    char hex[2 * kvkey::Digest::size_bytes];
    d.write_hex(hex);
    return fmt::formatter<fmt::string_view>::format(fmt::string_view(hex, sizeof hex), ctx);
  }
};

template <>
struct fmt::formatter<kvkey::KvDtype> : fmt::formatter<fmt::string_view> {
  template <class Ctx>
  auto format(kvkey::KvDtype d, Ctx& ctx) const -> decltype(ctx.out()) {
    const std::string_view s = kvkey::to_string(d);
    return fmt::formatter<fmt::string_view>::format(fmt::string_view(s.data(), s.size()), ctx);
  }
};

template <>
struct fmt::formatter<kvkey::Reason> : fmt::formatter<fmt::string_view> {
  template <class Ctx>
  auto format(kvkey::Reason r, Ctx& ctx) const -> decltype(ctx.out()) {
    const std::string_view s = kvkey::to_string(r);
    return fmt::formatter<fmt::string_view>::format(fmt::string_view(s.data(), s.size()), ctx);
  }
};

template <>
struct fmt::formatter<kvkey::Verdict> : fmt::formatter<fmt::string_view> {
  template <class Ctx>
  auto format(const kvkey::Verdict& v, Ctx& ctx) const -> decltype(ctx.out()) {
    std::string s(kvkey::to_string(v.reason));
    if (!v.field.empty()) s.append(" (").append(v.field).append(")");
    return fmt::formatter<fmt::string_view>::format(fmt::string_view(s), ctx);
  }
};

template <>
struct fmt::formatter<kvkey::Slice> : fmt::formatter<fmt::string_view> {
  template <class Ctx>
  auto format(const kvkey::Slice& s, Ctx& ctx) const -> decltype(ctx.out()) {
    const std::string str = fmt::format("heads [{}, {}) layers [{}, {})", s.kv_head_begin, s.kv_head_end,
                                        s.layer_begin, s.layer_end);
    return fmt::formatter<fmt::string_view>::format(fmt::string_view(str), ctx);
  }
};

template <>
struct fmt::formatter<kvkey::Identity> : fmt::formatter<fmt::string_view> {
  template <class Ctx>
  auto format(const kvkey::Identity& id, Ctx& ctx) const -> decltype(ctx.out()) {
    const std::string s = kvkey::describe(id);
    return fmt::formatter<fmt::string_view>::format(fmt::string_view(s), ctx);
  }
};

#endif  // KVKEY_FMT_HPP
