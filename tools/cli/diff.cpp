// SPDX-License-Identifier: Apache-2.0
// `kvkey diff CONFIG_A CONFIG_B`: the salient fields two configurations differ
// in, and whether they can share objects.
#include <kvkey/encode.hpp>
#include <kvkey/fmt.hpp>
#include <kvkey/key_namespace.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "cli/command.hpp"
#include "cli/identity_config.hpp"
#include "cli/inputs.hpp"
#include "cli/report.hpp"
#include "cli/tool.hpp"

namespace kvkey_tool {

namespace {

void compare(std::string& out, std::string_view what, const std::string& a, const std::string& b) {
  if (a == b) return print(out, "{}: same, {}\n", what, a);
  print(out, "{}: different\n  A: {}\n  B: {}\n", what, a, b);
}

int run_diff(const std::string& config_a, const std::string& config_b, std::string& out) {
  if (config_a == "-" && config_b == "-") fail("CONFIG_A and CONFIG_B cannot both be stdin");
  const kvkey::KeyNamespace<> a = load_namespace(config_a);
  const kvkey::KeyNamespace<> b = load_namespace(config_b);

  // Compare the encoded bytes field by field (the format's own list), print the values.
  const auto ea = kvkey::encoded_fields(a.identity());
  const auto eb = kvkey::encoded_fields(b.identity());
  std::vector<std::string_view> differing;
  for (const auto& f : ea) {
    const auto it = std::find_if(eb.begin(), eb.end(), [&](const kvkey::EncodedField& g) { return g.path == f.path; });
    if (it == eb.end() || it->bytes != f.bytes) differing.push_back(f.path);
  }
  for (const auto& g : eb) {
    if (std::none_of(ea.begin(), ea.end(), [&](const kvkey::EncodedField& f) { return f.path == g.path; })) {
      differing.push_back(g.path);
    }
  }
  const bool same_identity = a.encoding() == b.encoding();
  const bool same_slice = a.slice() == b.slice();

  print(out, "A: {}\nB: {}\n", display_name(config_a), display_name(config_b));
  const auto va = field_values(a.identity());
  const auto vb = field_values(b.identity());
  print(out, "differing salient fields: {}\n", differing.size());
  for (std::string_view path : differing) {
    append_row(out, path, "A: " + value_of(va, path), label_width);
    append_row(out, "", "B: " + value_of(vb, path), label_width);
  }
  compare(out, "slice", fmt::format("{}", a.slice()), fmt::format("{}", b.slice()));
  compare(out, "key prefix", a.key_prefix(), b.key_prefix());
  if (same_identity && same_slice) {
    print(out, "verdict: share: same identity and slice, so the same block hashes, store keys and objects\n");
    return exit_ok;
  }
  if (same_identity) {
    print(out,
          "verdict: same block hashes, different objects: same identity, different slice, so each deployment "
          "stores its own objects under its own keys\n");
  } else {
    print(out, "verdict: no sharing: the identities differ, so block hashes, store keys and objects all differ\n");
  }
  return exit_rejected;
}

}  // namespace

std::vector<Command> add_diff_command(CLI::App& app) {
  auto configs = std::make_shared<std::pair<std::string, std::string>>();
  auto* cmd = app.add_subcommand("diff",
                                 "List the salient fields two configurations differ in and say "
                                 "whether they can share objects");
  cmd->add_option("CONFIG_A", configs->first, "identity file (JSON or TOML)")->required();
  cmd->add_option("CONFIG_B", configs->second, "identity file (JSON or TOML)")->required();
  return {{cmd, [configs](std::string& out) { return run_diff(configs->first, configs->second, out); }}};
}

}  // namespace kvkey_tool
