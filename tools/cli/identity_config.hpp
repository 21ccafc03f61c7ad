// SPDX-License-Identifier: Apache-2.0
// Identity configuration files: JSON (or TOML, for names ending in .toml)
// whose keys mirror kvkey::Identity's members (docs/cli.md, "Identity files").
#ifndef KVKEY_TOOL_IDENTITY_CONFIG_HPP
#define KVKEY_TOOL_IDENTITY_CONFIG_HPP

#include <kvkey/identity.hpp>
#include <kvkey/key_namespace.hpp>

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "cli/inputs.hpp"

namespace kvkey_tool {

/// An identity as a configuration file describes it (not yet validated).
struct IdentityConfig {
  std::string path;  ///< as given on the command line
  kvkey::Identity identity;
  kvkey::Policy policy;
  /// Fingerprints computed from files: (field, resolved path), e.g.
  /// ("adapter.weights_fingerprint", "examples/identities/adapter-weights.txt").
  std::vector<std::pair<std::string, std::string>> fingerprinted_files;
};

/// Parses the contents of the identity file `path` (TOML when the name ends in
/// ".toml", else JSON): what load_identity_config does after reading it.
IdentityConfig parse_identity_config(std::string_view text, const std::string& path);

/// Reads (at most max_config_size bytes) and parses path. Throws Failure (one line naming the file and the
/// field, or the line and column of a syntax error) on any problem other than
/// an invalid identity, which namespace_for() reports.
IdentityConfig load_identity_config(const std::string& path);

/// The namespace of a loaded configuration. Throws Failure naming the file and
/// the field when the identity is invalid (kvkey::identity_error).
kvkey::KeyNamespace<> namespace_for(const IdentityConfig& config);

/// load_identity_config + namespace_for.
kvkey::KeyNamespace<> load_namespace(const std::string& path);

}  // namespace kvkey_tool

#endif  // KVKEY_TOOL_IDENTITY_CONFIG_HPP
