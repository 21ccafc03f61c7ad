// SPDX-License-Identifier: Apache-2.0
// Reading the tool's inputs: files, JSON, token lists, hex digests. Every read
// is bounded and takes regular files (or stdin) only (docs/cli.md, "Limits").
#ifndef KVKEY_TOOL_INPUTS_HPP
#define KVKEY_TOOL_INPUTS_HPP

#include <kvkey/digest.hpp>
#include <kvkey/geometry.hpp>
#include <kvkey/identity.hpp>

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kvkey_tool {

using Json = nlohmann::ordered_json;

/// Limits on what the tool reads (docs/cli.md, "Limits").
inline constexpr std::size_t max_config_size = std::size_t{1} << 20;       ///< identity files: 1 MiB
inline constexpr std::size_t max_token_file_size = std::size_t{32} << 20;  ///< token files: 32 MiB
inline constexpr std::size_t max_payload_size = std::size_t{1} << 30;  ///< payload files (one object's KV bytes): 1 GiB
inline constexpr std::size_t max_json_depth = 32;  ///< nesting of arrays and objects in an identity file

/// At most max bytes of a regular file, or of stdin for "-" (nothing more is
/// read). Throws Failure "cannot open PATH: reason", or "PATH: not a regular
/// file (a FIFO)" for directories, devices, FIFOs and sockets, which could
/// block or never end.
std::string read_at_most(const std::string& path, std::size_t max);

/// At most `head` bytes of a regular file or stdin (as read_at_most), then at most
/// more(those bytes) further bytes: a header first, then as much of the rest as
/// the header says. Nothing beyond them is read.
std::string read_at_most_then(const std::string& path, std::size_t head,
                              const std::function<std::size_t(const std::string&)>& more);

/// The whole input, which must be at most `limit` bytes: Failure "PATH: larger
/// than the LIMIT-byte limit for WHAT" otherwise.
std::string read_limited(const std::string& path, std::size_t limit, std::string_view what);

/// The text of a file read from path without a leading UTF-8 byte order mark.
/// A NUL byte anywhere is a Failure "PATH:LINE:COLUMN: NUL byte ..." (the
/// parsers would stop there and ignore the rest).
std::string_view text_body(std::string_view bytes, const std::string& path);

/// SHA-256 of a regular file's contents (what sha256sum prints), streamed.
/// Failure as read_at_most.
kvkey::Digest fingerprint_regular_file(const std::string& path);

/// Parses JSON text read from path. A syntax error, nesting deeper than
/// max_json_depth or a duplicate key throws Failure
/// "PATH:LINE:COLUMN: invalid JSON: ..." or "PATH: ...".
Json parse_json(std::string_view text, const std::string& path);

/// Token ids in text read from path: a JSON array of integers, or integers
/// separated by whitespace and/or commas. Every id must lie in [0, 2^32).
std::vector<std::int64_t> parse_tokens(std::string_view text, const std::string& path);

/// parse_tokens of a token file ("-" = stdin) of at most max_token_file_size bytes.
std::vector<std::int64_t> read_tokens(const std::string& path);

/// A 64-hex-character digest given as `what` (e.g. "--block"); Failure otherwise.
kvkey::Digest parse_digest(std::string_view hex, std::string_view what);

/// A KV dtype name as kvkey::to_string prints it; Failure "WHERE: unknown
/// dtype NAME (known: ...)" otherwise ("unset" is no type).
kvkey::KvDtype parse_dtype(const std::string& name, std::string_view where);
// A dtype as kvkey or an engine names it (kvkey::kv_dtype_from_engine: "bfloat16", "fp8", ...).
kvkey::KvDtype parse_engine_dtype(const std::string& name, std::string_view where,
                                  const kvkey::EnginePlatform& platform = {});

/// Decimal digits only (no sign, no spaces) with a value <= max; nullopt otherwise.
std::optional<std::uint64_t> parse_unsigned(std::string_view text, std::uint64_t max);

/// An integer option `what` in [0, 2^bits) (bits 32 or 64); Failure otherwise.
std::uint64_t parse_uint_option(std::string_view text, int bits, std::string_view what);

/// How messages and output name an input: "stdin" for "-", the path (escaped,
/// truncated) otherwise.
std::string display_name(const std::string& path);

}  // namespace kvkey_tool

#endif  // KVKEY_TOOL_INPUTS_HPP
