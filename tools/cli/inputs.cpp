// SPDX-License-Identifier: Apache-2.0
#include "cli/inputs.hpp"

#include <kvkey/errors.hpp>
#include <kvkey/geometry.hpp>
#include <kvkey/fingerprint.hpp>
#include <kvkey/identity_file.hpp>
#include <kvkey/input_file.hpp>
#include <kvkey/model_dir.hpp>

#include <algorithm>
#include <limits>
#include <set>

#include "cli/tool.hpp"

namespace kvkey_tool {

namespace {

// 1-based line and column of byte offset `pos` (0-based) in text.
std::pair<std::size_t, std::size_t> line_column(std::string_view text, std::size_t pos) {
  const kvkey::TextPosition at = kvkey::text_position(text, pos);
  return {at.line, at.column};
}

// nlohmann's message without its preamble (kvkey::json_error_reason); its
// "last read: '...'" quotes the input, so it is escaped and truncated.
std::string parse_error_detail(std::string_view what) {
  return escape(kvkey::json_error_reason(what), 2 * quote_limit + 60);
}

// Runs f, whose kvkey errors (from kvkey::InputFile: the library's messages
// name the file as display_name does) become the tool's failures.
template <class F>
auto reading(F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const kvkey::error& e) {
    fail("{}", e.message());
  }
}

// stdin for "-", else path opened without blocking (a FIFO would wait for a
// writer) and checked to be a regular file (kvkey::InputFile).
kvkey::InputFile open_input(const std::string& path) {
  if (path == "-") return kvkey::InputFile::standard_input(display_name(path));
  return kvkey::InputFile(path, display_name(path));
}

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

kvkey::KvDtype parse_dtype(const std::string& name, std::string_view where) {
  if (const auto d = kvkey::kv_dtype_from_string(name)) return *d;
  fail("{}: unknown dtype {} (known: {})", where, quote(name), kvkey::known_dtype_names());
}

kvkey::KvDtype parse_engine_dtype(const std::string& name, std::string_view where,
                                  const kvkey::EnginePlatform& platform) {
  try {
    return kvkey::kv_dtype_from_engine(name, platform);
  } catch (const kvkey::input_error& e) {
    fail("{}: {}", where, e.detail());
  }
}

std::uint64_t parse_uint_option(std::string_view text, int bits, std::string_view what) {
  const std::uint64_t max =
      bits == 32 ? std::numeric_limits<std::uint32_t>::max() : std::numeric_limits<std::uint64_t>::max();
  const auto v = parse_unsigned(text, max);
  if (!v) fail("{}: expected an integer in [0, 2^{}), got {}", what, bits, quote(text));
  return *v;
}

std::string display_name(const std::string& path) { return path == "-" ? "stdin" : escape(path, 4 * quote_limit); }

std::string read_at_most(const std::string& path, std::size_t max) {
  return reading([&] { return open_input(path).read_at_most(max); });
}

std::string read_at_most_then(const std::string& path, std::size_t head,
                              const std::function<std::size_t(const std::string&)>& more) {
  return reading([&] {
    kvkey::InputFile f = open_input(path);
    std::string s = f.read_at_most(head);
    const std::size_t n = more(s);
    if (n != 0) s += f.read_at_most(n);
    return s;
  });
}

std::string read_limited(const std::string& path, std::size_t limit, std::string_view what) {
  return reading([&] { return open_input(path).read_all(limit, what); });
}

std::string_view text_body(std::string_view bytes, const std::string& path) {
  constexpr std::string_view bom = "\xef\xbb\xbf";
  if (bytes.substr(0, bom.size()) == bom) bytes.remove_prefix(bom.size());
  const auto nul = bytes.find('\0');
  if (nul != std::string_view::npos) {
    const auto [line, column] = line_column(bytes, nul);
    fail("{}:{}:{}: NUL byte (byte {}): not a text file", display_name(path), line, column, nul);
  }
  return bytes;
}

kvkey::Digest fingerprint_regular_file(const std::string& path) {
  return reading([&] {
    kvkey::InputFile f = open_input(path);
    return kvkey::fingerprint_file(f);
  });
}

Json parse_json(std::string_view text, const std::string& path) {
  try {
    return kvkey::parse_strict_json<Json>(text, max_json_depth);
  } catch (const kvkey::input_error& e) {
    if (!e.field().empty()) fail("{}: {}: {}", display_name(path), e.field(), e.detail());
    const bool at = !e.detail().empty() && e.detail()[0] >= '0' && e.detail()[0] <= '9';  // LINE:COLUMN: ...
    fail("{}{}{}", display_name(path), at ? ":" : ": ", escape(e.detail(), 2 * quote_limit + 80));
  }
}

namespace {

constexpr std::uint64_t max_token = std::numeric_limits<std::uint32_t>::max();

// A JSON token list read as it is parsed (no document tree, so no nesting to
// build or to print): an array of unsigned integers and nothing else.
class TokenReader : public nlohmann::json_sax<Json> {
 public:
  explicit TokenReader(std::vector<std::int64_t>& tokens) : tokens_(tokens) {}
  std::string error;  // set when reading stopped: what is wrong
  std::size_t error_byte = 0;
  bool syntax_error = false;

  bool null() override { return bad("null"); }
  bool boolean(bool v) override { return bad(v ? "true" : "false"); }
  bool number_integer(number_integer_t v) override { return bad(v == 0 ? "-0" : std::to_string(v)); }
  bool number_unsigned(number_unsigned_t v) override {
    if (depth_ != 1 || v > max_token) return bad(std::to_string(v));
    tokens_.push_back(static_cast<std::int64_t>(v));
    return true;
  }
  bool number_float(number_float_t, const string_t& text) override { return bad(escape(text, quote_limit)); }
  bool string(string_t& v) override { return bad("the string " + quote(v)); }
  bool binary(binary_t&) override { return bad("binary data"); }
  bool start_object(std::size_t) override { return bad("an object"); }
  bool key(string_t&) override { return false; }
  bool end_object() override { return false; }
  bool start_array(std::size_t) override {
    if (depth_ != 0) return bad("an array");
    depth_ = 1;
    return true;
  }
  bool end_array() override {
    depth_ = 0;
    return true;
  }
  bool parse_error(std::size_t position, const std::string&, const nlohmann::json::exception& e) override {
    syntax_error = true;
    error_byte = position;
    error = parse_error_detail(e.what());
    return false;
  }

 private:
  bool bad(const std::string& got) {
    if (depth_ != 1) {  // unreachable: the text starts with '[' and a second value is a syntax error
      error = "expected a JSON array of token ids, got " + got;
    } else {
      error = fmt::format("token {}: expected an integer in [0, 2^32), got {}", tokens_.size(), got);
    }
    return false;
  }

  std::vector<std::int64_t>& tokens_;
  int depth_ = 0;
};

std::vector<std::int64_t> tokens_from_json(std::string_view text, const std::string& path) {
  std::vector<std::int64_t> tokens;
  TokenReader reader(tokens);
  if (Json::sax_parse(text.begin(), text.end(), &reader)) return tokens;
  if (reader.syntax_error) {
    const auto [line, column] = line_column(text, reader.error_byte == 0 ? 0 : reader.error_byte - 1);
    fail("{}:{}:{}: invalid JSON: {}", display_name(path), line, column, reader.error);
  }
  fail("{}: {}", display_name(path), reader.error);
}

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

std::vector<std::int64_t> tokens_from_text(std::string_view text, const std::string& path) {
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
    const std::string_view word = text.substr(i, end - i);
    const auto v = parse_unsigned(word, max_token);
    if (!v) {
      const auto [line, column] = line_column(text, i);
      fail("{}:{}:{}: token {}: expected an integer in [0, 2^32), got {}", display_name(path), line, column,
           tokens.size(), quote(word));
    }
    tokens.push_back(static_cast<std::int64_t>(*v));
    comma_allowed = true;
    i = end;
  }
  return tokens;
}

}  // namespace

std::vector<std::int64_t> parse_tokens(std::string_view bytes, const std::string& path) {
  const std::string_view text = text_body(bytes, path);
  const auto first = text.find_first_not_of(" \t\r\n\v\f");
  if (first != std::string_view::npos && text[first] == '[') return tokens_from_json(text, path);
  return tokens_from_text(text, path);
}

std::vector<std::int64_t> read_tokens(const std::string& path) {
  return parse_tokens(read_limited(path, max_token_file_size, "token files"), path);
}

kvkey::Digest parse_digest(std::string_view hex, std::string_view what) {
  try {
    return kvkey::Digest::from_hex(hex);
  } catch (const kvkey::input_error& e) {
    fail("{}: {}", what, e.message());
  }
}

}  // namespace kvkey_tool
