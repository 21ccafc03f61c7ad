// SPDX-License-Identifier: Apache-2.0
// How the tool's subcommands are wired: each command's file defines one
// add_*_command function that adds its subcommand (with its options) to the
// app and returns what main runs when it was given. main.cpp lists these
// functions in one table and loops over it.
#ifndef KVKEY_TOOL_COMMAND_HPP
#define KVKEY_TOOL_COMMAND_HPP

#include <CLI/CLI.hpp>

#include <functional>
#include <string>
#include <vector>

namespace kvkey_tool {

/// One runnable (sub)command. run appends the whole output to `out` and returns
/// the exit status; on bad input it throws Failure before anything is printed.
struct Command {
  CLI::App* app = nullptr;
  std::function<int(std::string& out)> run;
};

/// Adds a command (a command with subcommands gives one Command per leaf) to app.
using AddCommand = std::vector<Command> (*)(CLI::App& app);

std::vector<Command> add_identity_command(CLI::App& app);     // identity.cpp
std::vector<Command> add_keys_command(CLI::App& app);         // keys.cpp
std::vector<Command> add_seal_command(CLI::App& app);         // seal.cpp
std::vector<Command> add_inspect_command(CLI::App& app);      // inspect.cpp
std::vector<Command> add_verify_command(CLI::App& app);       // verify.cpp
std::vector<Command> add_diff_command(CLI::App& app);         // diff.cpp
std::vector<Command> add_legacy_command(CLI::App& app);       // legacy.cpp
std::vector<Command> add_init_command(CLI::App& app);         // init.cpp
std::vector<Command> add_purge_command(CLI::App& app);        // purge.cpp: purge, secret-id
std::vector<Command> add_conformance_command(CLI::App& app);  // conformance.cpp: conformance, conformance-testee
std::vector<Command> add_schema_command(CLI::App& app);       // schema.cpp

}  // namespace kvkey_tool

#endif  // KVKEY_TOOL_COMMAND_HPP
