// SPDX-License-Identifier: Apache-2.0
// TOML identity files: parsed with toml++ and converted to the same JSON tree
// the JSON reader produces, so both formats share one validator.
#ifndef KVKEY_TOOL_TOML_CONFIG_HPP
#define KVKEY_TOOL_TOML_CONFIG_HPP

#include <string>
#include <string_view>

#include "cli/inputs.hpp"

namespace kvkey_tool {

/// Parses TOML text read from path. A syntax error throws Failure
/// "PATH:LINE:COLUMN: invalid TOML: ..."; dates and times (which no identity
/// field takes) and nesting deeper than max_json_depth throw Failure naming the key.
Json parse_toml(std::string_view text, const std::string& path);

}  // namespace kvkey_tool

#endif  // KVKEY_TOOL_TOML_CONFIG_HPP
