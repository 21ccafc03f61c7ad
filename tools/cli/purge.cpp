// SPDX-License-Identifier: Apache-2.0
// `kvkey secret-id`: a tenant secret's public id and key prefix.
// `kvkey purge`: the store-key pattern that selects exactly the values to purge
// (one tenant, one retired secret, the plain values, or format v2 leftovers).
// The tool talks to no store: its output goes to the store's own scan-and-delete
// (docs/operations.md, "Rotating a tenant secret" and "Upgrading the format").
#include <kvkey/hmac.hpp>
#include <kvkey/key_namespace.hpp>
#include <kvkey/text.hpp>

#include <fmt/format.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cli/command.hpp"
#include "cli/report.hpp"
#include "cli/tool.hpp"

namespace kvkey_tool {

namespace {

/// The store-key tag format version 2 wrote (docs/format.md, section 5).
constexpr std::string_view format_v2_key_tag = "kvk1/";

struct PurgeOptions {
  std::string tenant;
  std::string secret_file;
  std::string secret_id;
  bool plain = false;
  bool format_v2 = false;
  bool format_v3 = false;
  bool confidential = false;
  std::string as = "glob";
};

kvkey::SecretId load_secret_id(const std::string& path) {
  return kvkey::secret_id(kvkey::TenantSecret::from_file(path));
}

/// s as a literal inside a POSIX extended / ECMAScript regex.
std::string regex_escape(std::string_view s) {
  std::string out;
  for (const char c : s) {
    if (std::string_view("\\^$.|?*+()[]{}").find(c) != std::string_view::npos) out.push_back('\\');
    out.push_back(c);
  }
  return out;
}

std::string purge_prefix(const PurgeOptions& o) {
  const int selectors = int(!o.secret_file.empty()) + int(!o.secret_id.empty()) + int(o.plain);
  if (selectors > 1) fail("purge: give at most one of --secret-file, --secret-id and --plain");
  if (o.format_v2 && o.format_v3) fail("purge: give one of --format-v2 and --format-v3");
  if (o.confidential && o.secret_file.empty() && o.secret_id.empty()) {
    fail("purge: --confidential selects one secret's confidential values: give --secret-file or --secret-id");
  }
  if (o.format_v3) {  // kvk3/: the layout of v4 under the v3 tag (docs/operations.md, "Upgrading the format")
    if (selectors != 0 || o.confidential)
      fail("purge: --format-v3 selects every v3 key, or one tenant's: use --tenant alone");
    std::string p(kvkey::previous_store_key_tag);
    if (!o.tenant.empty()) p.append(kvkey::tenant_key_prefix(o.tenant).substr(kvkey::store_key_tag.size()));
    return p;
  }
  if (o.format_v2) {
    if (selectors != 0) fail("purge: format v2 keys carry no secret id or namespace segment; use --tenant alone");
    std::string p(format_v2_key_tag);
    if (!o.tenant.empty()) {
      (void)kvkey::tenant_key_prefix(o.tenant);  // validates the tenant, as v2 did
      p.append(o.tenant).push_back('/');
    }
    return p;
  }
  if (o.tenant.empty()) fail("purge: --tenant is required (or --format-v2 for every format v2 key)");
  if (!o.secret_file.empty()) {
    return kvkey::secret_key_prefix(o.tenant, load_secret_id(o.secret_file), o.confidential);
  }
  if (!o.secret_id.empty()) {
    const auto id = kvkey::SecretId::try_from_hex(o.secret_id);
    if (!id) fail("purge: --secret-id {}: expected 16 hex digits (from kvkey secret-id)", quote(o.secret_id));
    return kvkey::secret_key_prefix(o.tenant, *id, o.confidential);
  }
  std::string p = kvkey::tenant_key_prefix(o.tenant);
  if (o.plain) p += "p/";
  return p;
}

int run_purge(const PurgeOptions& o, std::string& out) {
  const std::string prefix = purge_prefix(o);
  if (o.as == "glob") {
    print(out, "{}*\n", kvkey::glob_escape(prefix));
  } else if (o.as == "regex") {
    print(out, "^{}\n", regex_escape(prefix));
  } else {
    print(out, "{}\n", prefix);
  }
  return exit_ok;
}

int run_secret_id(const std::string& secret_file, const std::string& tenant, std::string& out) {
  const kvkey::SecretId id = load_secret_id(secret_file);
  append_row(out, "secret id", id.hex(), 12);
  if (!tenant.empty()) append_row(out, "key prefix", kvkey::secret_key_prefix(tenant, id), 12);
  return exit_ok;
}

}  // namespace

std::vector<Command> add_purge_command(CLI::App& app) {
  auto o = std::make_shared<PurgeOptions>();
  auto* purge =
      app.add_subcommand("purge",
                         "Print the store-key pattern that selects exactly the values to purge: a tenant, one tenant "
                         "secret's values, the tenant's plain values, or format v2 and v3 leftovers");
  purge->add_option("--tenant", o->tenant, "the tenant whose values to select");
  purge->add_option("--secret-file", o->secret_file, "only the values sealed under this tenant secret (file)");
  purge->add_option("--secret-id", o->secret_id, "only the values sealed under the secret with this id (16 hex)");
  purge->add_flag("--plain", o->plain, "only the tenant's plain (unkeyed) values");
  purge->add_flag("--format-v2", o->format_v2, "format v2 keys (kvk1/...), all or one tenant's");
  purge->add_flag("--format-v3", o->format_v3, "format v3 keys (kvk3/...), all or one tenant's");
  purge->add_flag(
      "--confidential", o->confidential,
      "with --secret-file or --secret-id: the secret's confidential values (c<id>) instead of its keyed ones");
  purge->add_option("--as", o->as, "glob (SCAN MATCH, default), regex (Mooncake remove_by_regex) or prefix")
      ->check(CLI::IsMember({"glob", "regex", "prefix"}));
  auto secret_file = std::make_shared<std::string>();
  auto tenant = std::make_shared<std::string>();
  auto* sid = app.add_subcommand("secret-id", "Print a tenant secret's public id (and its key prefix with --tenant)");
  sid->add_option("--secret-file", *secret_file, "the tenant secret file (hex or raw bytes, mode 0600)")->required();
  sid->add_option("--tenant", *tenant, "also print the key prefix of this tenant's values under the secret");
  return {{purge, [o](std::string& out) { return run_purge(*o, out); }},
          {sid, [secret_file, tenant](std::string& out) { return run_secret_id(*secret_file, *tenant, out); }}};
}

}  // namespace kvkey_tool
