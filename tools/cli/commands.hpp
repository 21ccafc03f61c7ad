// SPDX-License-Identifier: Apache-2.0
// The subcommands. Each one appends its whole output to `out` and returns the
// exit status; on bad input it throws Failure before anything is printed.
#ifndef KVKEY_TOOL_COMMANDS_HPP
#define KVKEY_TOOL_COMMANDS_HPP

#include <cstdint>
#include <string>
#include <vector>

namespace kvkey_tool {

struct KeysOptions {
  std::string config;
  std::string tokens;               ///< token file, "-" = stdin
  std::string salt;                 ///< per-request salt; empty = none
  std::vector<std::string> extras;  ///< "BEGIN:END:KEY" per-block extra keys
  bool json = false;
};

struct SealOptions {
  std::string config;
  std::string block;  ///< 64 hex
  std::string size;     ///< payload size in bytes, decimal (size-only envelope), or
  std::string payload;  ///< the payload file (an envelope with its digest)
  std::string output;
};

struct VerifyOptions {
  std::string config;
  std::string header;
  std::string block;  ///< 64 hex
  std::string size;  ///< payload size in bytes, decimal (size-only check), or
  std::string payload;  ///< the payload file (checks the digest)
};

/// `kvkey legacy ...`: lmdeploy's legacy Mooncake store keys (kvkey/compat/lmdeploy.hpp).
struct LegacyOptions {
  std::string cache_prefix;
  std::string model_name;
  std::string tokens;  ///< keys: token file, "-" = stdin
  std::string block_size;
  std::string adapter;  ///< the request's adapter name ("" = none), lmdeploy's extra_identity
  std::string tp_size = "1";
  std::string num_kv_heads;  ///< needed when tp_size > 1
  std::vector<std::string> keys;   ///< parse: the keys to split
  bool json = false;
};

int run_identity(const std::string& config, std::string& out);
int run_keys(const KeysOptions& o, std::string& out);
int run_seal(const SealOptions& o, std::string& out);
int run_inspect(const std::string& header, std::string& out);
int run_verify(const VerifyOptions& o, std::string& out);
int run_diff(const std::string& config_a, const std::string& config_b, std::string& out);
int run_legacy_keys(const LegacyOptions& o, std::string& out);
int run_legacy_pattern(const LegacyOptions& o, std::string& out);
int run_legacy_parse(const LegacyOptions& o, std::string& out);

}  // namespace kvkey_tool

#endif  // KVKEY_TOOL_COMMANDS_HPP
