// SPDX-License-Identifier: Apache-2.0
#include "kvkey/inputs.hpp"

#include <kvkey/errors.hpp>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <iterator>
#include <limits>
#include <set>
#include <sstream>

#include "kvkey/tool.hpp"

namespace kvkey_tool {

namespace {

constexpr std::uint64_t max_token = std::numeric_limits<std::uint32_t>::max();

// 1-based line and column of byte offset `pos` (0-based) in text.
std::pair<std::size_t, std::size_t> line_column(const std::string& text, std::size_t pos) {
  std::size_t line = 1, column = 1;
  for (std::size_t i = 0; i < pos && i < text.size(); ++i) {
    if (text[i] == '\n') {
      ++line;
      column = 1;
    } else {
      ++column;
    }
  }
  return {line, column};
}

// nlohmann's message without its "[json.exception...] parse error at line L, column C: " preamble.
std::string_view parse_error_detail(std::string_view what) {
  const auto column = what.find("column ");
  if (column != std::string_view::npos) {
    const auto colon = what.find(": ", column);
    if (colon != std::string_view::npos) return what.substr(colon + 2);
  }
  const auto id_end = what.find("] ");
  return id_end == std::string_view::npos ? what : what.substr(id_end + 2);
}

// Rejects duplicate object keys (nlohmann keeps the last one silently, which
// would hide a mistake in a configuration file).
struct DuplicateKeyCheck {
  struct Frame {
    bool object;
    std::set<std::string> keys;
    std::string current;
  };
  std::vector<Frame> frames;
  std::string duplicate;  // dotted path of the first duplicate

  bool operator()(int, nlohmann::json::parse_event_t event, Json& parsed) {
    using Event = nlohmann::json::parse_event_t;
    switch (event) {
      case Event::object_start: frames.push_back({true, {}, {}}); break;
      case Event::array_start: frames.push_back({false, {}, {}}); break;
      case Event::object_end:
      case Event::array_end:
        if (!frames.empty()) frames.pop_back();
        break;
      case Event::key: {
        Frame& f = frames.back();
        f.current = parsed.get<std::string>();
        if (!f.keys.insert(f.current).second && duplicate.empty()) {
          for (const Frame& outer : frames) {
            if (!outer.object) continue;
            if (!duplicate.empty()) duplicate += '.';
            duplicate += outer.current;
          }
        }
        break;
      }
      case Event::value: break;
    }
    return true;
  }
};

}  // namespace

std::optional<std::uint64_t> parse_unsigned(std::string_view text, std::uint64_t max) {
  if (text.empty()) return std::nullopt;
  std::uint64_t v = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return std::nullopt;
    const auto d = static_cast<std::uint64_t>(c - '0');
    if (v > (max - d) / 10) return std::nullopt;
    v = v * 10 + d;
  }
  return v;
}

std::uint64_t parse_uint_option(std::string_view text, int bits, std::string_view what) {
  const std::uint64_t max = bits == 32 ? std::numeric_limits<std::uint32_t>::max() : std::numeric_limits<std::uint64_t>::max();
  const auto v = parse_unsigned(text, max);
  if (!v) fail("{}: expected an integer in [0, 2^{}), got {}", what, bits, quote(text));
  return *v;
}

std::string display_name(const std::string& path) { return path == "-" ? "stdin" : path; }

std::string read_file(const std::string& path, std::size_t limit) {
  if (path == "-") {
    std::ostringstream s;
    s << std::cin.rdbuf();
    if (std::cin.bad()) fail("cannot read stdin");
    return s.str().substr(0, limit);
  }
  errno = 0;
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) fail("cannot open {}: {}", path, errno != 0 ? std::strerror(errno) : "unknown error");
  std::string text;
  char buf[1 << 16];
  std::size_t n;
  while (text.size() < limit && (n = std::fread(buf, 1, std::min(sizeof buf, limit - text.size()), f)) > 0) {
    text.append(buf, n);
  }
  const bool failed = std::ferror(f) != 0;
  const int err = errno;
  std::fclose(f);
  if (failed) fail("cannot read {}: {}", path, std::strerror(err));  // e.g. a directory
  return text;
}

Json parse_json(const std::string& text, const std::string& path) {
  DuplicateKeyCheck check;
  Json j;
  try {
    j = Json::parse(text, std::ref(check));
  } catch (const nlohmann::json::parse_error& e) {
    const auto [line, column] = line_column(text, e.byte == 0 ? 0 : e.byte - 1);
    fail("{}:{}:{}: invalid JSON: {}", display_name(path), line, column, parse_error_detail(e.what()));
  }
  if (!check.duplicate.empty()) fail("{}: {}: duplicate key", display_name(path), check.duplicate);
  return j;
}

namespace {

std::vector<std::int64_t> tokens_from_json(const std::string& text, const std::string& path) {
  const Json j = parse_json(text, path);
  if (!j.is_array()) fail("{}: expected a JSON array of token ids, got {}", display_name(path), j.type_name());
  std::vector<std::int64_t> tokens;
  tokens.reserve(j.size());
  for (std::size_t i = 0; i < j.size(); ++i) {
    const Json& t = j[i];
    if (!t.is_number_unsigned() || t.get<std::uint64_t>() > max_token) {
      fail("{}: token {}: expected an integer in [0, 2^32), got {}", display_name(path), i, t.dump());
    }
    tokens.push_back(static_cast<std::int64_t>(t.get<std::uint64_t>()));
  }
  return tokens;
}

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

std::vector<std::int64_t> tokens_from_text(const std::string& text, const std::string& path) {
  std::vector<std::int64_t> tokens;
  bool comma_allowed = false;  // one comma may follow each id
  for (std::size_t i = 0; i < text.size();) {
    const char c = text[i];
    if (is_space(c)) {
      ++i;
      continue;
    }
    if (c == ',') {
      if (!comma_allowed) {
        const auto [line, column] = line_column(text, i);
        fail("{}:{}:{}: unexpected ',' (expected a token id)", display_name(path), line, column);
      }
      comma_allowed = false;
      ++i;
      continue;
    }
    std::size_t end = i;
    while (end < text.size() && !is_space(text[end]) && text[end] != ',') ++end;
    const std::string_view word(text.data() + i, end - i);
    const auto v = parse_unsigned(word, max_token);
    if (!v) {
      const auto [line, column] = line_column(text, i);
      fail("{}:{}:{}: token {}: expected an integer in [0, 2^32), got '{}'", display_name(path), line, column,
           tokens.size(), word.substr(0, 40));
    }
    tokens.push_back(static_cast<std::int64_t>(*v));
    comma_allowed = true;
    i = end;
  }
  return tokens;
}

}  // namespace

std::vector<std::int64_t> read_tokens(const std::string& path) {
  const std::string text = read_file(path);
  const auto first = text.find_first_not_of(" \t\r\n\v\f");
  if (first != std::string::npos && text[first] == '[') return tokens_from_json(text, path);
  return tokens_from_text(text, path);
}

kvkey::Digest parse_digest(std::string_view hex, std::string_view what) {
  try {
    return kvkey::Digest::from_hex(hex);
  } catch (const kvkey::input_error& e) {
    fail("{}: {}", what, without_error_id(e.what()));
  }
}

std::string quote(std::string_view s) {
  return Json(std::string(s)).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace kvkey_tool
