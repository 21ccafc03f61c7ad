// SPDX-License-Identifier: Apache-2.0
// `kvkey init`: an identity file from the model (and adapter) directory an
// engine loads (kvkey/model_dir.hpp).
#ifndef KVKEY_TOOL_INIT_HPP
#define KVKEY_TOOL_INIT_HPP

#include <CLI/CLI.hpp>

#include <string>

namespace kvkey_tool {

struct InitOptions {
  std::string model;    ///< model directory (plain, HF repo root or snapshot)
  std::string adapter;  ///< PEFT adapter directory; empty = none
  std::string adapter_name;
  std::string name;      ///< model name; empty = from the directory
  std::string revision;  ///< empty = from the HF cache
  std::string tenant;
  std::string kv_dtype;
  std::string block_size;
  std::string layout;
  std::string tp_size = "1";
  std::string tp_rank = "0";
  std::string weights_epoch = "0";
  std::string overrides;  ///< JSON object, or @FILE
  std::string output;     ///< empty = stdout
  bool verify = false;
  bool progress = false;  ///< always show the progress bar (default: on a terminal, for >= 1 GiB)
  bool sources = false;   ///< print where each value came from on stderr
};

/// Adds the `init` subcommand to app.
CLI::App* add_init_command(CLI::App& app, InitOptions& o);

/// Runs it: the identity file goes to o.output (atomically) or into out.
int run_init(const InitOptions& o, std::string& out);

}  // namespace kvkey_tool

#endif  // KVKEY_TOOL_INIT_HPP
