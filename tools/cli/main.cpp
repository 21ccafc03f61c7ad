// SPDX-License-Identifier: Apache-2.0
// kvkey: inspect kvkey identities, keys and envelopes from the command line
// (docs/cli.md).
#include <kvkey/config.hpp>
#include <kvkey/errors.hpp>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <exception>
#include <string>

#include "cli/commands.hpp"
#include "cli/conformance.hpp"
#include "cli/init.hpp"
#include "cli/tool.hpp"

namespace {

using namespace kvkey_tool;

// Longest message printed; the tool's own quote untrusted text far shorter,
// this bounds what CLI11 and the library echo.
constexpr std::size_t max_message = 4096;

// One printable line on stderr, whatever the message holds.
int report_error(std::string message) {
  std::replace(message.begin(), message.end(), '\n', ' ');
  fmt::print(stderr, "kvkey: error: {}\n", escape(message, max_message));
  return exit_error;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Inspect kvkey identities, store keys and envelopes (docs/cli.md).\n"
               "Exit status: 0 ok; 1 verify rejected / diff cannot share; 2 usage or input error.",
               "kvkey"};
  app.set_version_flag("--version", fmt::format("kvkey {}.{}.{} (byte format version {})", KVKEY_VERSION_MAJOR,
                                                KVKEY_VERSION_MINOR, KVKEY_VERSION_PATCH, kvkey::format_version));
  app.require_subcommand(1);

  std::string config, config_b, header;
  KeysOptions keys;
  SealOptions seal;
  VerifyOptions verify;
  LegacyOptions legacy;
  InitOptions init;

  auto* identity_cmd = app.add_subcommand("identity", "Print a configuration's validated identity, encoding, root, "
                                                      "slice and key prefixes");
  identity_cmd->add_option("CONFIG", config, "identity file (JSON)")->required();

  auto* keys_cmd = app.add_subcommand("keys", "Print the block hashes and store keys of a token list");
  keys_cmd->add_option("CONFIG", keys.config, "identity file (JSON)")->required();
  keys_cmd->add_option("--tokens", keys.tokens,
                       "token ids: a JSON array, or integers separated by whitespace or commas; - reads stdin")
      ->required();
  keys_cmd->add_option("--salt", keys.salt, "per-request salt (default: none)");
  keys_cmd->add_option("--extra", keys.extras, "per-block extra key BEGIN:END:KEY (token positions); repeatable")
      ->allow_extra_args(false);
  keys_cmd->add_flag("--json", keys.json, "machine-readable output");

  auto* seal_cmd = app.add_subcommand("seal", "Write the envelope (header) a deployment stores with a block");
  seal_cmd->add_option("CONFIG", seal.config, "identity file (JSON)")->required();
  seal_cmd->add_option("--block", seal.block, "block hash (64 hex)")->required();
  auto* seal_payload = seal_cmd->add_option("--payload", seal.payload, "the payload (KV bytes) file: its digest is sealed");
  auto* seal_size = seal_cmd->add_option("--size", seal.size, "size-only envelope (integrity mode none) for this payload size")
      ->excludes(seal_payload);
  seal_cmd->callback([seal_payload, seal_size] {
    if (seal_payload->count() + seal_size->count() == 0) throw CLI::ValidationError("give --payload FILE (or --size N)");
  });
  seal_cmd->add_option("-o,--output", seal.output, "file to write; - writes the envelope to stdout")->required();

  auto* inspect_cmd = app.add_subcommand("inspect", "Decode an envelope: the producer's identity, slice, block "
                                                    "hash, payload size and digest");
  inspect_cmd->add_option("HEADER_FILE", header, "envelope file (1024 bytes)")->required();

  auto* verify_cmd = app.add_subcommand("verify", "Verify an envelope against a configuration, as a reader would");
  verify_cmd->add_option("CONFIG", verify.config, "the reader's identity file (JSON)")->required();
  verify_cmd->add_option("HEADER_FILE", verify.header, "envelope file")->required();
  verify_cmd->add_option("--block", verify.block, "the block hash the reader looks up (64 hex)")->required();
  auto* verify_payload = verify_cmd->add_option(
      "--payload", verify.payload, "the payload (KV bytes) file read with the header: checks size and digest");
  auto* verify_size = verify_cmd->add_option("--size", verify.size,
                                             "size-only check without the bytes: the payload size the reader "
                                             "expects (the digest is not checked)")
      ->excludes(verify_payload);
  verify_cmd->callback([verify_payload, verify_size] {
    if (verify_payload->count() + verify_size->count() == 0) throw CLI::ValidationError("give --payload FILE (or --size N)");
  });

  auto* diff_cmd = app.add_subcommand("diff", "List the salient fields two configurations differ in and say "
                                              "whether they can share objects");
  diff_cmd->add_option("CONFIG_A", config, "identity file (JSON)")->required();
  diff_cmd->add_option("CONFIG_B", config_b, "identity file (JSON)")->required();

  auto* legacy_cmd = app.add_subcommand("legacy", "lmdeploy's legacy Mooncake store keys: list, match and split them");
  legacy_cmd->require_subcommand(1);
  auto legacy_head = [&legacy](CLI::App* cmd) {
    cmd->add_option("--model-name", legacy.model_name, "lmdeploy's model_name (default there: the model "
                                                       "directory's basename)")
        ->required();
    cmd->add_option("--cache-prefix", legacy.cache_prefix, "lmdeploy's cache_prefix (default: none)");
  };
  auto* legacy_keys_cmd = legacy_cmd->add_subcommand("keys", "Print the legacy block hashes and keys of a token list");
  legacy_head(legacy_keys_cmd);
  legacy_keys_cmd->add_option("--block-size", legacy.block_size, "tokens per block")->required();
  legacy_keys_cmd->add_option("--tokens", legacy.tokens, "token ids, as for kvkey keys; - reads stdin")->required();
  legacy_keys_cmd->add_option("--adapter", legacy.adapter, "the request's adapter name (default: none)");
  legacy_keys_cmd->add_option("--tp-size", legacy.tp_size, "tensor-parallel size (default 1)");
  legacy_keys_cmd->add_option("--num-kv-heads", legacy.num_kv_heads, "KV heads of the model (needed when "
                                                                      "--tp-size > 1)");
  legacy_keys_cmd->add_flag("--json", legacy.json, "machine-readable output");
  auto* legacy_pattern_cmd = legacy_cmd->add_subcommand("pattern", "Print the regex and the Redis glob that match "
                                                                   "every legacy key of a model (for purging)");
  legacy_head(legacy_pattern_cmd);
  legacy_pattern_cmd->add_flag("--json", legacy.json, "machine-readable output");
  auto* legacy_parse_cmd = legacy_cmd->add_subcommand("parse", "Split legacy keys into their parts");
  legacy_parse_cmd->add_option("KEY", legacy.keys, "legacy keys")->required();
  legacy_parse_cmd->add_flag("--json", legacy.json, "machine-readable output");

  auto* init_cmd = add_init_command(app, init);
  ConformanceOptions conformance;
  const ConformanceCommands conformance_cmds = add_conformance_commands(app, conformance);

  // CLI11 would report a mistyped subcommand as "A subcommand is required".
  const CLI::App* level = &app;
  for (int i = 1; i < argc && argv[i][0] != '-'; ++i) {
    const auto subs = level->get_subcommands([](const CLI::App*) { return true; });
    if (subs.empty()) break;
    const std::string_view name = argv[i];
    const CLI::App* next = nullptr;
    std::string known;
    for (const auto* sub : subs) {
      if (sub->get_name() == name) next = sub;
      known += (known.empty() ? "" : ", ") + sub->get_name();
    }
    const std::string parent = level == &app ? "" : level->get_name() + " ";
    if (next == nullptr) {
      return report_error(fmt::format("unknown subcommand '{}{}' (known: {})", parent, escape(name, quote_limit), known));
    }
    level = next;
  }

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help, --version
    std::string where;  // "legacy keys", the innermost subcommand given
    for (const CLI::App* sub = &app; !sub->get_subcommands().empty(); sub = sub->get_subcommands().front()) {
      where += (where.empty() ? "" : " ") + sub->get_subcommands().front()->get_name();
    }
    return report_error(fmt::format("{}{} (see kvkey {}--help)", where.empty() ? "" : where + ": ", e.what(),
                                    where.empty() ? "" : where + " "));
  }

  std::string out;
  int status = exit_error;
  try {
    if (identity_cmd->parsed()) status = run_identity(config, out);
    if (init_cmd->parsed()) status = run_init(init, out);
    if (keys_cmd->parsed()) status = run_keys(keys, out);
    if (seal_cmd->parsed()) status = run_seal(seal, out);
    if (inspect_cmd->parsed()) status = run_inspect(header, out);
    if (verify_cmd->parsed()) status = run_verify(verify, out);
    if (diff_cmd->parsed()) status = run_diff(config, config_b, out);
    if (legacy_keys_cmd->parsed()) status = run_legacy_keys(legacy, out);
    if (legacy_pattern_cmd->parsed()) status = run_legacy_pattern(legacy, out);
    if (legacy_parse_cmd->parsed()) status = run_legacy_parse(legacy, out);
    if (conformance_cmds.runner->parsed()) status = run_conformance(conformance, out);
    if (conformance_cmds.testee->parsed()) status = run_conformance_testee(conformance, out);
  } catch (const Failure& e) {
    return report_error(e.what());
  } catch (const kvkey::error& e) {
    return report_error(e.what());
  } catch (const std::exception& e) {
    return report_error(fmt::format("unexpected failure: {}", e.what()));
  }
  std::fwrite(out.data(), 1, out.size(), stdout);
  if (std::fflush(stdout) != 0) return report_error("cannot write to stdout");
  return status;
}
