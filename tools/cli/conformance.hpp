// SPDX-License-Identifier: Apache-2.0
// The conformance protocol (docs/conformance.md): `kvkey conformance-testee`,
// the C++ library's side of the line protocol, and `kvkey conformance`, the
// runner that drives any testee with the library as the oracle.
#ifndef KVKEY_TOOL_CONFORMANCE_HPP
#define KVKEY_TOOL_CONFORMANCE_HPP

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kvkey_tool {

namespace conformance {

using Json = nlohmann::json;

/// bytes as lowercase hex digits.
std::string hex(std::string_view bytes);

/// The response the C++ library gives to one request (a parsed request line).
/// perturb names a deliberate defect to emulate ("" = none; see
/// docs/conformance.md), for testing that the runner catches wrong testees.
Json respond(const Json& request, const std::string& perturb = {});

/// How deep a request line's objects and arrays may nest (the request object is level 1).
inline constexpr std::size_t max_request_depth = 32;

/// The C++ library's answer to one line of input, whatever its bytes: a line
/// that is not a valid request (not UTF-8, not one JSON object, a byte order
/// mark, a lone surrogate, a number beyond a double, nesting deeper than
/// max_request_depth, a duplicate key) is an input_error on "request".
Json respond_line(std::string_view line, const std::string& perturb = {});

/// The envelope the namespace of `writer` (a request: identity, policy,
/// secret_hex for a keyed one, tokens, salt, extras) seals for its block
/// `block_index`: with the digest of `payload` when given, else size-only
/// (integrity mode none) for `payload_size`. Throws kvkey::error when the
/// writer's request is refused.
std::string seal(const Json& writer, std::size_t block_index, const std::string* payload, std::uint64_t payload_size);

/// `count` random requests from `seed`, each spanning the identity fields,
/// namespaces, inputs and headers of docs/conformance.md.
std::vector<Json> random_requests(std::uint64_t seed, std::size_t count);

/// `count` hostile lines from `seed` (docs/conformance.md, "Lines that are not
/// requests"), each with a label naming its mutation: lines that are not
/// requests, and requests a strict decoder must name the right field of.
std::vector<std::pair<std::string, std::string>> hostile_lines(std::uint64_t seed, std::size_t count);

/// The requests that replay the committed vectors file (tests/vectors/format-v4.json).
/// Throws Failure when the file does not match the library.
std::vector<Json> vector_requests(const std::string& path);

}  // namespace conformance

struct ConformanceOptions {
  std::string testee;  ///< runner: the testee's command line (run by /bin/sh -c)
  std::string cases = "1000";
  std::string seed;     ///< empty: a fresh one, printed
  std::string vectors;  ///< replay this vectors file too
  std::string perturb;  ///< testee: a deliberate defect (tests of the runner)
  std::string show = "5";
  std::string timeout = "60";  ///< runner: seconds to wait for one answer
  bool mutate = false;         ///< runner: hostile lines instead of random requests
};

struct ConformanceCommands {
  CLI::App* runner;
  CLI::App* testee;
};

/// Adds `conformance` and `conformance-testee` to app.
ConformanceCommands add_conformance_commands(CLI::App& app, ConformanceOptions& o);

/// Runs the runner: exit_ok when every response matched, exit_rejected otherwise.
int run_conformance(const ConformanceOptions& o, std::string& out);

/// Runs the testee loop over stdin/stdout until end of input.
int run_conformance_testee(const ConformanceOptions& o, std::string& out);

}  // namespace kvkey_tool

#endif  // KVKEY_TOOL_CONFORMANCE_HPP
