// SPDX-License-Identifier: Apache-2.0
#include "cli/report.hpp"

#include <kvkey/digest.hpp>

#include <fmt/format.h>

#include <iterator>
#include <optional>
#include <string_view>
#include <type_traits>

#include "cli/tool.hpp"

namespace kvkey_tool {

namespace {

struct Printer {
  std::vector<FieldValue>& out;

  void operator()(std::string_view path, const std::string& v) const { add(path, quote(v, no_limit)); }
  void operator()(std::string_view path, std::uint32_t v) const { add(path, std::to_string(v)); }
  void operator()(std::string_view path, std::uint64_t v) const { add(path, std::to_string(v)); }
  void operator()(std::string_view path, bool v) const { add(path, v ? "true" : "false"); }
  void operator()(std::string_view path, kvkey::KvDtype d) const { add(path, std::string(kvkey::to_string(d))); }
  void operator()(std::string_view path, const kvkey::Digest& d) const { add(path, d.hex()); }
  void operator()(std::string_view path, const std::optional<kvkey::KvDtype>& d) const {
    if (d) return (*this)(path, *d);
    add(path, "none");
  }
  void operator()(std::string_view path, const std::optional<kvkey::Digest>& d) const {
    if (d) return (*this)(path, *d);
    add(path, "none");
  }
  void operator()(std::string_view path, const std::optional<kvkey::Adapter>& a) const {
    add(path, a ? "present" : "none");
    if (a) kvkey::visit_adapter_fields(*a, *this);
  }

 private:
  void add(std::string_view path, std::string value) const { out.push_back({std::string(path), std::move(value)}); }
};

}  // namespace

std::vector<FieldValue> field_values(const kvkey::Identity& id) {
  std::vector<FieldValue> fields;
  kvkey::visit_identity_fields(id, Printer{fields});
  return fields;
}

std::string value_of(const std::vector<FieldValue>& fields, std::string_view path) {
  for (const auto& f : fields) {
    if (f.path == path) return f.value;
  }
  return "(absent)";
}

void append_row(std::string& out, std::string_view label, std::string_view value, std::size_t width) {
  fmt::format_to(std::back_inserter(out), "  {:<{}} {}\n", label, width, value);
}

void append_json(std::string& out, const Json& j) {
  // ASCII only: every non-ASCII or control character is a \u escape.
  out += j.dump(2, ' ', true, nlohmann::json::error_handler_t::replace);
  out += '\n';
}

std::string to_hex(const std::vector<std::uint8_t>& bytes) {
  static constexpr char digits[] = "0123456789abcdef";
  std::string s;
  s.reserve(2 * bytes.size());
  for (std::uint8_t b : bytes) {
    s.push_back(digits[b >> 4]);
    s.push_back(digits[b & 0x0f]);
  }
  return s;
}

void append_fields(std::string& out, const std::vector<FieldValue>& fields) {
  for (const auto& f : fields) append_row(out, f.path, f.value, label_width);
}

}  // namespace kvkey_tool
