// SPDX-License-Identifier: Apache-2.0
// Text helpers with one definition each. is_unsafe_code_point: the code points
// that make printed text read differently from what it holds (controls,
// invisible and bidirectional formatting characters); identity validation
// refuses them in names (kvkey/identity.hpp), describe() (kvkey/fmt.hpp) and
// the kvkey tool escape them, so what is refused and what is escaped cannot
// disagree. glob_escape: a literal inside a Redis glob (SCAN MATCH, KEYS).
#ifndef KVKEY_TEXT_HPP
#define KVKEY_TEXT_HPP

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "kvkey/config.hpp"

KVKEY_BEGIN_NAMESPACE

/// True for the code points a terminal or log viewer does not show as
/// themselves: C0 controls, DEL and C1 controls (U+0000..U+001F,
/// U+007F..U+009F), the Arabic letter mark U+061C, zero-width and directional
/// marks U+200B..U+200F, line and paragraph separators and the bidirectional
/// embeddings and overrides U+2028..U+202E, word joiner, invisible operators
/// and bidirectional isolates U+2060..U+206F, the byte order mark U+FEFF and the
/// interlinear annotation characters U+FFF9..U+FFFB.
[[nodiscard]] constexpr bool is_unsafe_code_point(std::uint32_t cp) noexcept {
  return cp < 0x20 || (cp >= 0x7f && cp <= 0x9f) || cp == 0x061c || (cp >= 0x200b && cp <= 0x200f) ||
         (cp >= 0x2028 && cp <= 0x202e) || (cp >= 0x2060 && cp <= 0x206f) || cp == 0xfeff ||
         (cp >= 0xfff9 && cp <= 0xfffb);
}

/// One UTF-8 character of a string: its code point and its length in bytes.
/// size 0 means the byte there does not start a well-formed UTF-8 sequence
/// (RFC 3629: no overlong forms, surrogates, truncation or values above
/// U+10FFFF); code_point is then that byte's value.
struct Utf8Char {
  std::uint32_t code_point = 0;
  std::size_t size = 0;
};

/// The UTF-8 character starting at s[i] (i < s.size()).
[[nodiscard]] constexpr Utf8Char decode_utf8(std::string_view s, std::size_t i) noexcept {
  const auto at = [s](std::size_t k) -> std::uint32_t { return k < s.size() ? static_cast<unsigned char>(s[k]) : 0U; };
  const std::uint32_t c = at(i);
  if (c < 0x80) return {c, 1};
  // Lead byte: sequence length, its payload bits and the smallest code point
  // that needs this length (anything below is an overlong form).
  const std::size_t len = c >= 0xc2 && c <= 0xdf ? 2 : c >= 0xe0 && c <= 0xef ? 3 : c >= 0xf0 && c <= 0xf4 ? 4 : 0;
  if (len == 0) return {c, 0};
  std::uint32_t cp = c & (0x7fU >> len);
  const std::uint32_t min = len == 2 ? 0x80 : len == 3 ? 0x800 : 0x10000;
  for (std::size_t k = 1; k < len; ++k) {
    if ((at(i + k) & 0xc0U) != 0x80) return {c, 0};
    cp = (cp << 6) | (at(i + k) & 0x3fU);
  }
  if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return {c, 0};
  return {cp, len};
}

/// The first unsafe code point of s: its byte offset and code point.
struct UnsafeCodePoint {
  std::size_t offset = 0;
  std::uint32_t code_point = 0;
};

/// Finds the first well-formed character of s for which is_unsafe_code_point
/// holds; offset == s.size() when there is none. Bytes that are not UTF-8 are
/// skipped (they are not code points; printers escape them byte by byte).
[[nodiscard]] constexpr UnsafeCodePoint find_unsafe_code_point(std::string_view s) noexcept {
  for (std::size_t i = 0; i < s.size();) {
    const Utf8Char u = decode_utf8(s, i);
    if (u.size != 0 && is_unsafe_code_point(u.code_point)) return {i, u.code_point};
    i += u.size == 0 ? 1 : u.size;
  }
  return {s.size(), 0};
}

/// s as a literal inside a Redis glob (SCAN MATCH, KEYS): '*', '?', '[', ']'
/// and '\\' get a backslash in front. `glob_escape(ns.key_prefix()) + "*"`
/// matches every key under the prefix and nothing else.
[[nodiscard]] inline std::string glob_escape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (const char c : s) {
    if (c == '*' || c == '?' || c == '[' || c == ']' || c == '\\') out.push_back('\\');
    out.push_back(c);
  }
  return out;
}

KVKEY_END_NAMESPACE

#endif  // KVKEY_TEXT_HPP
