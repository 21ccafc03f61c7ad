// SPDX-License-Identifier: Apache-2.0
// Escaping untrusted text for messages and output (tool.hpp).
#include <fmt/format.h>

#include <cstdint>
#include <iterator>
#include <string>
#include <string_view>

#include "cli/tool.hpp"

namespace kvkey_tool {

namespace {

// The UTF-8 sequence at s[i]: its code point and length, or length 0 when the
// bytes there are not well-formed UTF-8 (overlong, surrogate, truncated, > U+10FFFF).
struct Utf8 {
  std::uint32_t cp;
  std::size_t len;
};
Utf8 decode(std::string_view s, std::size_t i) {
  const auto b = [&](std::size_t k) { return k < s.size() ? static_cast<unsigned char>(s[k]) : 0u; };
  const unsigned c = b(i);
  if (c < 0x80) return {c, 1};
  std::size_t len = 0;
  std::uint32_t cp = 0, min = 0;
  if (c >= 0xc2 && c <= 0xdf) len = 2, cp = c & 0x1fu, min = 0x80;
  else if (c >= 0xe0 && c <= 0xef) len = 3, cp = c & 0x0fu, min = 0x800;
  else if (c >= 0xf0 && c <= 0xf4) len = 4, cp = c & 0x07u, min = 0x10000;
  else return {0, 0};
  for (std::size_t k = 1; k < len; ++k) {
    if ((b(i + k) & 0xc0u) != 0x80) return {0, 0};
    cp = (cp << 6) | (b(i + k) & 0x3fu);
  }
  if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return {0, 0};
  return {cp, len};
}

// Characters that a terminal does not show as themselves: controls, and the
// invisible or bidirectional formatting characters (ALM, ZWSP..RLM, LS, PS,
// LRE..RLO, WJ..U+206F, BOM, interlinear annotations).
bool hidden(std::uint32_t cp) {
  return cp < 0x20 || (cp >= 0x7f && cp <= 0x9f) || cp == 0x061c || (cp >= 0x200b && cp <= 0x200f) ||
         (cp >= 0x2028 && cp <= 0x202e) || (cp >= 0x2060 && cp <= 0x206f) || cp == 0xfeff ||
         (cp >= 0xfff9 && cp <= 0xfffb);
}

// The escaped text of s's first max bytes (whole characters); `done` is how
// many bytes of s it covers.
std::string escape_prefix(std::string_view s, std::size_t max, bool quoted, std::size_t& done) {
  std::string out;
  auto put = [&out](auto&&... args) { fmt::format_to(std::back_inserter(out), args...); };
  std::size_t i = 0;
  while (i < s.size()) {
    const Utf8 u = decode(s, i);
    const std::size_t len = u.len == 0 ? 1 : u.len;
    if (i + len > max) break;
    if (u.len == 0) {
      put("\\x{:02x}", static_cast<unsigned char>(s[i]));
    } else if (quoted && (u.cp == '"' || u.cp == '\\')) {
      out.push_back('\\');
      out.push_back(static_cast<char>(u.cp));
    } else if (u.cp == '\n') {
      out += "\\n";
    } else if (u.cp == '\t') {
      out += "\\t";
    } else if (u.cp == '\r') {
      out += "\\r";
    } else if (hidden(u.cp)) {
      put("\\u{:04x}", u.cp);
    } else {
      out.append(s.substr(i, len));
    }
    i += len;
  }
  done = i;
  return out;
}

std::string truncation(std::string_view s, std::size_t done) {
  return done < s.size() ? fmt::format("... ({} bytes)", s.size()) : std::string();
}

}  // namespace

std::string escape(std::string_view s, std::size_t max) {
  std::size_t done = 0;
  std::string out = escape_prefix(s, max, false, done);
  return out + truncation(s, done);
}

std::string quote(std::string_view s, std::size_t max) {
  std::size_t done = 0;
  const std::string body = escape_prefix(s, max, true, done);
  return "\"" + body + "\"" + truncation(s, done);
}

}  // namespace kvkey_tool
