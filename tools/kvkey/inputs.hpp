// SPDX-License-Identifier: Apache-2.0
// Reading the tool's inputs: files, JSON, token lists, hex digests.
#ifndef KVKEY_TOOL_INPUTS_HPP
#define KVKEY_TOOL_INPUTS_HPP

#include <kvkey/digest.hpp>

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kvkey_tool {

using Json = nlohmann::ordered_json;

/// The file's first `limit` bytes, by default all of it ("-" reads stdin).
/// Throws Failure "cannot open PATH: reason".
std::string read_file(const std::string& path, std::size_t limit = std::string::npos);

/// Parses JSON text read from path. A syntax error or a duplicate key throws
/// Failure "PATH:LINE:COLUMN: invalid JSON: ...".
Json parse_json(const std::string& text, const std::string& path);

/// Token ids from a file ("-" = stdin): a JSON array of integers, or integers
/// separated by whitespace and/or commas. Every id must lie in [0, 2^32).
std::vector<std::int64_t> read_tokens(const std::string& path);

/// A 64-hex-character digest given as `what` (e.g. "--block"); Failure otherwise.
kvkey::Digest parse_digest(std::string_view hex, std::string_view what);

/// Decimal digits only (no sign, no spaces) with a value <= max; nullopt otherwise.
std::optional<std::uint64_t> parse_unsigned(std::string_view text, std::uint64_t max);

/// An integer option `what` in [0, 2^bits) (bits 32 or 64); Failure otherwise.
std::uint64_t parse_uint_option(std::string_view text, int bits, std::string_view what);

/// "stdin" for "-", the path otherwise: how messages name an input.
std::string display_name(const std::string& path);

}  // namespace kvkey_tool

#endif  // KVKEY_TOOL_INPUTS_HPP
