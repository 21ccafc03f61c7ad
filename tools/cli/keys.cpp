// SPDX-License-Identifier: Apache-2.0
// `kvkey keys CONFIG --tokens FILE`: the block hashes and store keys of a token list.
#include <kvkey/fmt.hpp>
#include <kvkey/key_namespace.hpp>

#include <fmt/format.h>

#include <cstdint>
#include <limits>
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

struct KeysOptions {
  std::string config;
  std::string tokens;               ///< token file, "-" = stdin
  std::string salt;                 ///< per-request salt; empty = none
  std::vector<std::string> extras;  ///< "BEGIN:END:KEY" per-block extra keys
  bool json = false;
};

Json slice_json(const kvkey::Slice& s) {
  return Json{{"kv_head_begin", s.kv_head_begin},
              {"kv_head_end", s.kv_head_end},
              {"layer_begin", s.layer_begin},
              {"layer_end", s.layer_end}};
}

Json extras_json(const std::vector<kvkey::ExtraKey>& extras) {
  Json j = Json::array();
  for (const auto& e : extras)
    j.push_back(Json{{"token_begin", e.token_begin}, {"token_end", e.token_end}, {"key", e.key}});
  return j;
}

// "BEGIN:END:KEY" (the key may contain ':').
kvkey::ExtraKey parse_extra(const std::string& spec) {
  const auto a = spec.find(':');
  const auto b = a == std::string::npos ? a : spec.find(':', a + 1);
  auto number = [&](std::string_view s) {
    const auto v = parse_unsigned(s, std::numeric_limits<std::uint64_t>::max());
    if (!v) fail("--extra {}: expected BEGIN:END:KEY with token positions", quote(spec));
    return *v;
  };
  if (b == std::string::npos) fail("--extra {}: expected BEGIN:END:KEY", quote(spec));
  kvkey::ExtraKey e;
  e.token_begin = number(std::string_view(spec).substr(0, a));
  e.token_end = number(std::string_view(spec).substr(a + 1, b - a - 1));
  e.key = spec.substr(b + 1);
  if (e.token_begin >= e.token_end) fail("--extra {}: BEGIN must be below END", quote(spec));
  return e;
}

int run_keys(const KeysOptions& o, std::string& out) {
  if (o.config == "-" && o.tokens == "-") fail("CONFIG and --tokens cannot both be stdin");
  const kvkey::KeyNamespace<> ns = load_namespace(o.config);
  const std::vector<std::int64_t> tokens = read_tokens(o.tokens);
  kvkey::HashOptions opt;
  opt.salt = o.salt;
  for (const auto& spec : o.extras) opt.extras.push_back(parse_extra(spec));
  const std::vector<kvkey::Digest> hashes = ns.block_hashes(tokens, opt);
  const std::uint32_t bs = ns.block_size();

  if (o.json) {
    Json blocks = Json::array();
    for (std::size_t i = 0; i < hashes.size(); ++i) {
      blocks.push_back(Json{{"index", i},
                            {"token_begin", i * bs},
                            {"token_end", (i + 1) * bs},
                            {"block_hash", hashes[i].hex()},
                            {"object_hash", ns.object_hash(hashes[i]).hex()},
                            {"store_key", ns.store_key(hashes[i])}});
    }
    const Json j{{"config", display_name(o.config)},
                 {"root", ns.root().hex()},
                 {"salt", o.salt},
                 {"extras", extras_json(opt.extras)},
                 {"first_parent", ns.first_parent(o.salt).hex()},
                 {"block_size", bs},
                 {"token_count", tokens.size()},
                 {"slice", slice_json(ns.slice())},
                 {"key_prefix", ns.key_prefix()},
                 {"tenant_prefix", ns.tenant_prefix()},
                 {"blocks", std::move(blocks)}};
    append_json(out, j);
    return exit_ok;
  }

  print(out, "config: {}\n", display_name(o.config));
  append_row(out, "root", ns.root().hex(), 14);
  append_row(out, "salt", o.salt.empty() ? std::string("none") : quote(o.salt, no_limit), 14);
  for (const auto& e : opt.extras) {
    append_row(out, "extra", fmt::format("tokens [{}, {}) key {}", e.token_begin, e.token_end, quote(e.key, no_limit)),
               14);
  }
  append_row(out, "first parent", ns.first_parent(o.salt).hex(), 14);
  append_row(out, "tokens",
             fmt::format("{} ({} full blocks of {}; {} trailing tokens not hashed)", tokens.size(), hashes.size(), bs,
                         tokens.size() - hashes.size() * bs),
             14);
  append_row(out, "slice", fmt::format("{}", ns.slice()), 14);
  append_row(out, "key prefix", ns.key_prefix(), 14);
  for (std::size_t i = 0; i < hashes.size(); ++i) {
    print(out, "block {} (tokens [{}, {})):\n", i, i * bs, (i + 1) * bs);
    append_row(out, "block hash", hashes[i].hex(), 14);
    append_row(out, "store key", ns.store_key(hashes[i]), 14);
  }
  return exit_ok;
}

}  // namespace

std::vector<Command> add_keys_command(CLI::App& app) {
  auto o = std::make_shared<KeysOptions>();
  auto* cmd = app.add_subcommand("keys", "Print the block hashes and store keys of a token list");
  cmd->add_option("CONFIG", o->config, "identity file (JSON or TOML)")->required();
  cmd->add_option("--tokens", o->tokens,
                  "token ids: a JSON array, or integers separated by whitespace or commas; - reads stdin")
      ->required();
  cmd->add_option("--salt", o->salt, "per-request salt (default: none)");
  cmd->add_option("--extra", o->extras, "per-block extra key BEGIN:END:KEY (token positions); repeatable")
      ->allow_extra_args(false);
  cmd->add_flag("--json", o->json, "machine-readable output");
  return {{cmd, [o](std::string& out) { return run_keys(*o, out); }}};
}

}  // namespace kvkey_tool
