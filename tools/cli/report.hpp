// SPDX-License-Identifier: Apache-2.0
// Human-readable views of identities, shared by the subcommands.
#ifndef KVKEY_TOOL_REPORT_HPP
#define KVKEY_TOOL_REPORT_HPP

#include <kvkey/identity.hpp>

#include <fmt/format.h>

#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include "cli/inputs.hpp"

namespace kvkey_tool {

/// One salient field, printable: strings quoted, optionals "none".
struct FieldValue {
  std::string path;
  std::string value;
};

/// Every salient field of id, in encoding order (kvkey::visit_identity_fields):
/// "adapter" is "none" or "present", followed by the adapter's members when present.
std::vector<FieldValue> field_values(const kvkey::Identity& id);

/// The value printed for path in fields, or "(absent)".
std::string value_of(const std::vector<FieldValue>& fields, std::string_view path);

/// The label column of the identity listings.
inline constexpr std::size_t label_width = 28;

/// Appends formatted text to out.
template <class... Args>
void print(std::string& out, fmt::format_string<Args...> f, Args&&... args) {
  fmt::format_to(std::back_inserter(out), f, std::forward<Args>(args)...);
}

/// Appends every field as a row (append_row, label_width).
void append_fields(std::string& out, const std::vector<FieldValue>& fields);

/// Appends "  <label padded to width> <value>\n".
void append_row(std::string& out, std::string_view label, std::string_view value, std::size_t width = 30);

/// Appends j as indented JSON text, ASCII only (escapes for the rest), and a newline.
void append_json(std::string& out, const Json& j);

/// Lowercase hex of bytes.
std::string to_hex(const std::vector<std::uint8_t>& bytes);

}  // namespace kvkey_tool

#endif  // KVKEY_TOOL_REPORT_HPP
