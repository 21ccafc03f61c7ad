// SPDX-License-Identifier: Apache-2.0
// Escaping untrusted text for messages and output (tool.hpp).
#include <kvkey/text.hpp>

#include <fmt/format.h>

#include <cstdint>
#include <iterator>
#include <string>
#include <string_view>

#include "cli/tool.hpp"

namespace kvkey_tool {

namespace {

// The escaped text of s's first max bytes (whole characters); `done` is how
// many bytes of s it covers.
std::string escape_prefix(std::string_view s, std::size_t max, bool quoted, std::size_t& done) {
  std::string out;
  auto put = [&out](auto&&... args) { fmt::format_to(std::back_inserter(out), args...); };
  std::size_t i = 0;
  while (i < s.size()) {
    const kvkey::Utf8Char u = kvkey::decode_utf8(s, i);
    const std::size_t len = u.size == 0 ? 1 : u.size;
    if (i + len > max) break;
    if (u.size == 0) {
      put("\\x{:02x}", static_cast<unsigned char>(s[i]));
    } else if (quoted && (u.code_point == '"' || u.code_point == '\\')) {
      out.push_back('\\');
      out.push_back(static_cast<char>(u.code_point));
    } else if (u.code_point == '\n') {
      out += "\\n";
    } else if (u.code_point == '\t') {
      out += "\\t";
    } else if (u.code_point == '\r') {
      out += "\\r";
    } else if (kvkey::is_unsafe_code_point(u.code_point)) {
      put("\\u{:04x}", u.code_point);
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
