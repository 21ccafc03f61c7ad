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
#include <utility>
#include <vector>

#include "cli/command.hpp"
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
  CLI::App app{
      "Inspect kvkey identities, store keys and envelopes (docs/cli.md).\n"
      "Exit status: 0 ok; 1 verify rejected / diff cannot share; 2 usage or input error.",
      "kvkey"};
  app.set_version_flag("--version", fmt::format("kvkey {}.{}.{} (byte format version {})", KVKEY_VERSION_MAJOR,
                                                KVKEY_VERSION_MINOR, KVKEY_VERSION_PATCH, kvkey::format_version));
  app.require_subcommand(1);

  // Every command, in the order `--help` lists them. A command's file adds its
  // subcommand and options and says what runs when it is given (command.hpp).
  constexpr AddCommand table[] = {&add_identity_command,    &add_keys_command,   &add_seal_command,
                                  &add_inspect_command,     &add_verify_command, &add_diff_command,
                                  &add_legacy_command,      &add_init_command,   &add_purge_command,
                                  &add_conformance_command, &add_schema_command};
  std::vector<Command> commands;
  for (const AddCommand add : table) {
    for (Command& c : add(app)) commands.push_back(std::move(c));
  }

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
      return report_error(
          fmt::format("unknown subcommand '{}{}' (known: {})", parent, escape(name, quote_limit), known));
    }
    level = next;
  }

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help, --version
    std::string where;                               // "legacy keys", the innermost subcommand given
    for (const CLI::App* sub = &app; !sub->get_subcommands().empty(); sub = sub->get_subcommands().front()) {
      where += (where.empty() ? "" : " ") + sub->get_subcommands().front()->get_name();
    }
    return report_error(fmt::format("{}{} (see kvkey {}--help)", where.empty() ? "" : where + ": ", e.what(),
                                    where.empty() ? "" : where + " "));
  }

  std::string out;
  int status = exit_error;
  try {
    for (const Command& c : commands) {
      if (c.app->parsed()) status = c.run(out);
    }
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
