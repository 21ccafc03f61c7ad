// SPDX-License-Identifier: Apache-2.0
#include "cli/identity_config.hpp"

#include <kvkey/errors.hpp>
#include <kvkey/identity_file.hpp>

#include <filesystem>
#include <string>
#include <utility>

#include "cli/inputs.hpp"
#include "cli/toml_config.hpp"
#include "cli/tool.hpp"

namespace kvkey_tool {

namespace {

// A field for a message: an unknown key (what follows its object's path) quoted
// as the tool quotes untrusted text, cut after quote_limit bytes.
std::string field_text(const std::string& field) {
  for (std::string_view object : {"kv.quant.", "model.", "kv.", "shard.", "adapter."}) {
    if (field.compare(0, object.size(), object) == 0) {
      return std::string(object) + escape(std::string_view(field).substr(object.size()), quote_limit);
    }
  }
  return escape(field, quote_limit);
}

}  // namespace

IdentityConfig parse_identity_config(std::string_view bytes, const std::string& path) {
  const std::string name = display_name(path);
  const std::string_view text = text_body(bytes, path);
  const bool toml = path.size() > 5 && path.compare(path.size() - 5, 5, ".toml") == 0;
  // *_file keys are relative to the file's directory (the working directory for stdin).
  const std::string base = path == "-" ? std::string() : std::filesystem::path(path).parent_path().string();
  kvkey::IdentityFile file;
  try {
    file = toml ? kvkey::identity_from_json(parse_toml(text, path), kvkey::IdentityJson::file, base)
                : kvkey::parse_identity_file(text, base);
  } catch (const kvkey::input_error& e) {
    if (e.field() != "identity_file") fail("{}: {}: {}", name, field_text(e.field()), e.detail());
    // "PATH:LINE:COLUMN: invalid JSON: ...", as every syntax error the tool reports
    const bool at = !e.detail().empty() && e.detail()[0] >= '0' && e.detail()[0] <= '9';
    fail("{}{}{}", name, at ? ":" : ": ", e.detail());
  }
  IdentityConfig c;
  c.path = path;
  c.identity = std::move(file.identity);
  c.policy = file.policy;
  c.fingerprinted_files = std::move(file.fingerprinted_files);
  return c;
}

IdentityConfig load_identity_config(const std::string& path) {
  return parse_identity_config(read_limited(path, max_config_size, "identity files"), path);
}

kvkey::KeyNamespace<> namespace_for(const IdentityConfig& config) {
  try {
    return kvkey::KeyNamespace<>(config.identity, config.policy);
  } catch (const kvkey::identity_error& e) {
    fail("{}: {}: {}", display_name(config.path), e.field(), e.detail());
  }
}

kvkey::AnyKeyNamespace reader_namespace_for(const IdentityConfig& config, const std::string& secret_file) {
  if (secret_file.empty()) return kvkey::AnyKeyNamespace(namespace_for(config));
  const kvkey::TenantSecret secret = kvkey::TenantSecret::from_file(secret_file);
  try {
    return kvkey::AnyKeyNamespace(config.identity, secret, config.policy);
  } catch (const kvkey::identity_error& e) {
    fail("{}: {}: {}", display_name(config.path), e.field(), e.detail());
  }
}

void require_secret_for(const kvkey::EnvelopeContents& header, const std::string& header_path,
                        const kvkey::AnyKeyNamespace& reader, const char* command) {
  if (header.namespace_kind != kvkey::NamespaceKind::keyed || reader.keyed()) return;
  fail(
      "{}: {} is sealed in a keyed namespace{}: give the deployment's tenant secret with --secret-file FILE "
      "to check it",
      command, display_name(header_path),
      header.secret_id ? " (secret id " + header.secret_id->hex() + ")" : std::string());
}

kvkey::Verdict verify_without_payload(const kvkey::AnyKeyNamespace& reader, const std::vector<std::uint8_t>& header,
                                      const kvkey::Digest& block, std::uint64_t payload_size) {
  const kvkey::Verdict v = reader.verify(header.data(), header.size(), block, payload_size);
  // payload_mismatch on "payload" is the keyed reader's refusal of bytes it cannot
  // authenticate, given after every other check passed.
  if (reader.keyed() && v.reason == kvkey::Reason::payload_mismatch && v.field == "payload") {
    return {kvkey::Reason::ok, ""};
  }
  return v;
}

kvkey::KeyNamespace<> load_namespace(const std::string& path) { return namespace_for(load_identity_config(path)); }

}  // namespace kvkey_tool
