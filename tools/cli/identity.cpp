// SPDX-License-Identifier: Apache-2.0
// `kvkey identity CONFIG`: a configuration's validated identity, encoding,
// root, slice and key prefixes.
#include <kvkey/fmt.hpp>
#include <kvkey/key_namespace.hpp>

#include <fmt/format.h>

#include <memory>
#include <string>
#include <vector>

#include "cli/command.hpp"
#include "cli/identity_config.hpp"
#include "cli/inputs.hpp"
#include "cli/report.hpp"
#include "cli/tool.hpp"

namespace kvkey_tool {

namespace {

std::string shard_text(const kvkey::Shard& s) {
  return fmt::format("tp_rank {} of tp_size {}, pp_rank {} of pp_size {}", s.tp_rank, s.tp_size, s.pp_rank, s.pp_size);
}

int run_identity(const std::string& config_path, std::string& out) {
  const IdentityConfig config = load_identity_config(config_path);
  const kvkey::KeyNamespace<> ns = namespace_for(config);
  print(out, "config: {}\n", display_name(config_path));
  print(out, "identity (validated; salient fields in encoding order):\n");
  append_fields(out, field_values(ns.identity()));
  if (!config.fingerprinted_files.empty()) {
    print(out, "fingerprinted files (SHA-256 of the contents):\n");
    for (const auto& [field, file] : config.fingerprinted_files)
      append_row(out, field, display_name(file), label_width);
  }
  print(out, "namespace:\n");
  append_row(out, "policy", ns.policy().tenant == kvkey::TenantPolicy::single_tenant ? "single_tenant" : "required",
             label_width);
  append_row(out, "shard", shard_text(ns.identity().shard), label_width);
  append_row(out, "slice", fmt::format("{}", ns.slice()), label_width);
  append_row(out, "encoding", fmt::format("{} bytes", ns.encoding().size()), label_width);
  append_row(out, "", to_hex(ns.encoding()), label_width);
  append_row(out, "root", ns.root().hex(), label_width);
  append_row(out, "key prefix", ns.key_prefix(), label_width);
  append_row(out, "tenant prefix", ns.tenant_prefix(), label_width);
  return exit_ok;
}

}  // namespace

std::vector<Command> add_identity_command(CLI::App& app) {
  auto config = std::make_shared<std::string>();
  auto* cmd = app.add_subcommand("identity",
                                 "Print a configuration's validated identity, encoding, root, "
                                 "slice and key prefixes");
  cmd->add_option("CONFIG", *config, "identity file (JSON or TOML)")->required();
  return {{cmd, [config](std::string& out) { return run_identity(*config, out); }}};
}

}  // namespace kvkey_tool
