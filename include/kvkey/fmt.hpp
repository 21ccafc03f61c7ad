// SPDX-License-Identifier: Apache-2.0
// Opt-in {fmt} formatters for kvkey's value types:
//   fmt::format("{}", digest)    -> 64 lowercase hex characters
//   fmt::format("{}", dtype)     -> "fp8_e4m3"
//   fmt::format("{}", verdict)   -> "ok" or "identity_mismatch (kv.dtype)"
//   fmt::format("{}", slice)     -> "heads [0, 4) layers [0, 28)"
//   fmt::format("{}", identity)  -> describe(identity): every salient field, then the shard
#ifndef KVKEY_FMT_HPP
#define KVKEY_FMT_HPP

#include <fmt/format.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "kvkey/digest.hpp"
#include "kvkey/envelope.hpp"
#include "kvkey/identity.hpp"
#include "kvkey/text.hpp"

KVKEY_BEGIN_NAMESPACE

namespace detail {

// Appends s with every byte that could garble a log line escaped as \xHH: the
// unsafe code points of kvkey/text.hpp (each of their bytes), bytes that are
// not UTF-8, and the backslash itself (so the escaping is unambiguous).
inline void append_escaped(std::string& out, std::string_view s) {
  static constexpr char hex[] = "0123456789abcdef";
  for (std::size_t i = 0; i < s.size();) {
    const Utf8Char u = decode_utf8(s, i);
    const std::size_t n = u.size == 0 ? 1 : u.size;
    if (u.size != 0 && !is_unsafe_code_point(u.code_point) && s[i] != '\\') {
      out.append(s.substr(i, n));
    } else {
      for (std::size_t k = i; k < i + n; ++k) {
        const auto c = static_cast<unsigned char>(s[k]);
        out.append("\\x").push_back(hex[c >> 4]);
        out.push_back(hex[c & 0x0f]);
      }
    }
    i += n;
  }
}

// Appends " path=value" for every field it visits.
struct Describer {
  std::string& out;

  void operator()(std::string_view path, const std::string& s) const {
    key(path);
    append_escaped(out, s);
  }
  void operator()(std::string_view path, std::uint32_t v) const { key(path).append(std::to_string(v)); }
  void operator()(std::string_view path, std::uint64_t v) const { key(path).append(std::to_string(v)); }
  void operator()(std::string_view path, bool v) const { key(path).append(v ? "true" : "false"); }
  void operator()(std::string_view path, KvDtype d) const { key(path).append(to_string(d)); }
  void operator()(std::string_view path, const Digest& d) const { key(path).append(d.hex()); }
  template <class T>
  void operator()(std::string_view path, const std::optional<T>& v) const {
    if (v) return present(path, *v);
    key(path).append("none");
  }

 private:
  std::string& key(std::string_view path) const {
    if (!out.empty()) out.push_back(' ');
    return out.append(path).append("=");
  }
  void present(std::string_view path, KvDtype d) const { (*this)(path, d); }
  void present(std::string_view path, const Digest& d) const { (*this)(path, d); }
  void present(std::string_view, const Adapter& a) const { visit_adapter_fields(a, *this); }
};

}  // namespace detail

/// One line naming every salient field (visit_identity_fields: "path=value",
/// absent optionals "none", an absent adapter "adapter=none") and then the
/// shard, for logs and tools. Strings are printed as they are, except that
/// unsafe code points (kvkey/text.hpp), bytes that are not UTF-8 and '\' are
/// escaped as \xHH.
[[nodiscard]] inline std::string describe(const Identity& id) {
  std::string out;
  visit_identity_fields(id, detail::Describer{out});
  out += fmt::format(" shard.tp={}/{} shard.pp={}/{}", id.shard.tp_rank, id.shard.tp_size, id.shard.pp_rank,
                     id.shard.pp_size);
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
    const std::string str =
        fmt::format("heads [{}, {}) layers [{}, {})", s.kv_head_begin, s.kv_head_end, s.layer_begin, s.layer_end);
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
