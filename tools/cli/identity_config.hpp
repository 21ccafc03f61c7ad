// SPDX-License-Identifier: Apache-2.0
// Identity configuration files: JSON (or TOML, for names ending in .toml)
// whose keys mirror kvkey::Identity's members (docs/cli.md, "Identity files").
#ifndef KVKEY_TOOL_IDENTITY_CONFIG_HPP
#define KVKEY_TOOL_IDENTITY_CONFIG_HPP

#include <kvkey/any_key_namespace.hpp>
#include <kvkey/envelope.hpp>
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

/// The reader's namespace of a loaded configuration: keyed under the tenant
/// secret in secret_file (TenantSecret::from_file) when one is given, else
/// plain. Throws Failure naming the file, as namespace_for.
kvkey::AnyKeyNamespace reader_namespace_for(const IdentityConfig& config, const std::string& secret_file);

/// Fails, naming the file and the option, when header (the envelope at
/// header_path) is sealed in a keyed namespace but the reader has no secret
/// (no --secret-file): a plain reader cannot check it, and calling it a
/// namespace_kind mismatch would send the user after the wrong problem.
void require_secret_for(const kvkey::EnvelopeContents& header, const std::string& header_path,
                        const kvkey::AnyKeyNamespace& reader, const char* command);

/// The reader's verdict on a header whose payload is not given (inspect of a
/// header file, verify --size): every check but the digest or tag over the
/// bytes. A keyed reader's own size-only check never accepts (it authenticates
/// every payload it serves), which would call a valid header a payload
/// mismatch; here that check alone is left out, so a header without a tag is
/// still refused.
kvkey::Verdict verify_without_payload(const kvkey::AnyKeyNamespace& reader, const std::vector<std::uint8_t>& header,
                                      const kvkey::Digest& block, std::uint64_t payload_size);

/// load_identity_config + namespace_for.
kvkey::KeyNamespace<> load_namespace(const std::string& path);

}  // namespace kvkey_tool

#endif  // KVKEY_TOOL_IDENTITY_CONFIG_HPP
