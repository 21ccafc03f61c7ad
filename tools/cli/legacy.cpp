// SPDX-License-Identifier: Apache-2.0
// `kvkey legacy`: the keys lmdeploy's Mooncake store connector writes today,
// so operators can find, list and purge them (docs/integration/lmdeploy.md).
#include <kvkey/compat/lmdeploy.hpp>
#include <kvkey/errors.hpp>

#include <fmt/format.h>

#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "cli/command.hpp"
#include "cli/inputs.hpp"
#include "cli/report.hpp"
#include "cli/tool.hpp"

namespace kvkey_tool {

namespace lmdeploy = kvkey::compat::lmdeploy;

namespace {

/// `kvkey legacy ...`: lmdeploy's legacy Mooncake store keys (kvkey/compat/lmdeploy.hpp).
struct LegacyOptions {
  std::string cache_prefix;
  std::string model_name;
  std::string tokens;  ///< keys: token file, "-" = stdin
  std::string block_size;
  std::string adapter;  ///< the request's adapter name ("" = none), lmdeploy's extra_identity
  std::string tp_size = "1";
  std::string num_kv_heads;       ///< needed when tp_size > 1
  std::vector<std::string> keys;  ///< parse: the keys to split
  bool json = false;
};

constexpr std::size_t width = 16;

// Keys per block the tool lists: lmdeploy's TP sizes are far below this, and
// tp_size up to 2^32 - 1 would make billions of keys per block.
constexpr std::uint32_t max_keys_per_block = 1024;

void check_model_name(const LegacyOptions& o) {
  if (o.model_name.empty()) {
    fail("--model-name: must not be empty (lmdeploy never writes one: it uses the model path's basename, or {})",
         quote(lmdeploy::default_model_name));
  }
}

// Keys per block, from the TP size and KV heads (lmdeploy's num_kv_head_shards).
std::uint32_t positive(const std::string& text, std::string_view what) {
  const auto v = static_cast<std::uint32_t>(parse_uint_option(text, 32, what));
  if (v == 0) fail("{}: must be greater than 0", what);
  return v;
}

std::uint32_t shard_keys(const LegacyOptions& o) {
  const std::uint32_t tp_size = positive(o.tp_size, "--tp-size");
  if (tp_size == 1) return 1;
  if (o.num_kv_heads.empty()) fail("--num-kv-heads: required when --tp-size is above 1");
  const std::uint32_t heads = positive(o.num_kv_heads, "--num-kv-heads");
  std::uint32_t keys = 0;
  try {
    keys = lmdeploy::shard_key_count(tp_size, heads);
  } catch (const kvkey::input_error& e) {
    fail("--tp-size: {}", e.message());
  }
  if (keys > max_keys_per_block) {
    fail("--tp-size: {} with {} KV heads gives {} keys per block, above the tool's limit of {}", tp_size, heads, keys,
         max_keys_per_block);
  }
  return keys;
}

int run_legacy_keys(const LegacyOptions& o, std::string& out) {
  check_model_name(o);
  const std::uint32_t block_size = positive(o.block_size, "--block-size");
  const std::uint32_t shards = shard_keys(o);
  const std::vector<std::int64_t> tokens = read_tokens(o.tokens);
  const std::vector<kvkey::Digest> hashes = lmdeploy::block_hashes(tokens, block_size, o.adapter);
  const std::size_t bs = block_size;

  if (o.json) {
    Json blocks = Json::array();
    for (std::size_t i = 0; i < hashes.size(); ++i) {
      Json keys = Json::array();
      for (std::uint32_t k = 0; k < shards; ++k)
        keys.push_back(lmdeploy::store_key(o.cache_prefix, o.model_name, k, hashes[i]));
      blocks.push_back(Json{{"index", i},
                            {"token_begin", i * bs},
                            {"token_end", (i + 1) * bs},
                            {"block_hash", hashes[i].hex()},
                            {"keys", std::move(keys)}});
    }
    const Json j{{"cache_prefix", o.cache_prefix}, {"model_name", o.model_name},   {"extra_identity", o.adapter},
                 {"block_size", block_size},       {"token_count", tokens.size()}, {"keys_per_block", shards},
                 {"blocks", std::move(blocks)}};
    append_json(out, j);
    return exit_ok;
  }

  fmt::format_to(std::back_inserter(out), "lmdeploy legacy keys (no tenant, dtype, revision or epoch in them)\n");
  append_row(out, "cache prefix", o.cache_prefix.empty() ? std::string("none") : quote(o.cache_prefix, no_limit),
             width);
  append_row(out, "model name", quote(o.model_name, no_limit), width);
  append_row(out, "extra identity", o.adapter.empty() ? std::string("none (adapter name)") : quote(o.adapter, no_limit),
             width);
  append_row(out, "tokens",
             fmt::format("{} ({} full blocks of {}; {} trailing tokens not hashed)", tokens.size(), hashes.size(), bs,
                         tokens.size() - hashes.size() * bs),
             width);
  append_row(out, "keys per block", std::to_string(shards), width);
  for (std::size_t i = 0; i < hashes.size(); ++i) {
    fmt::format_to(std::back_inserter(out), "block {} (tokens [{}, {})):\n", i, i * bs, (i + 1) * bs);
    append_row(out, "block hash", hashes[i].hex(), width);
    for (std::uint32_t k = 0; k < shards; ++k) {
      append_row(out, "key", escape(lmdeploy::store_key(o.cache_prefix, o.model_name, k, hashes[i])), width);
    }
  }
  return exit_ok;
}

int run_legacy_pattern(const LegacyOptions& o, std::string& out) {
  check_model_name(o);
  const std::string regex = lmdeploy::purge_pattern(o.cache_prefix, o.model_name);
  const std::string glob = lmdeploy::purge_glob(o.cache_prefix, o.model_name);
  if (o.json) {
    append_json(out,
                Json{{"cache_prefix", o.cache_prefix}, {"model_name", o.model_name}, {"regex", regex}, {"glob", glob}});
    return exit_ok;
  }
  fmt::format_to(std::back_inserter(out), "every legacy key of cache prefix {} and model name {}:\n",
                 o.cache_prefix.empty() ? std::string("none") : quote(o.cache_prefix, no_limit),
                 quote(o.model_name, no_limit));
  append_row(out, "regex", escape(regex), 7);
  append_row(out, "glob", escape(glob), 7);
  fmt::format_to(
      std::back_inserter(out),
      "the regex matches exactly these keys (ECMAScript and POSIX ERE: Mooncake remove_by_regex, "
      "grep -E);\nthe glob (Redis SCAN MATCH) also matches some non-keys: check each match with the regex\n");
  return exit_ok;
}

int run_legacy_parse(const LegacyOptions& o, std::string& out) {
  // Every key is checked before anything is printed.
  std::vector<lmdeploy::LegacyKey> parsed;
  for (const std::string& key : o.keys) {
    auto k = lmdeploy::parse_key(key);
    if (!k)
      fail("{}: not an lmdeploy legacy key ([<cache_prefix>@]<model_name>@tp_rank:<K>@group:0@<64 hex>)",
           quote(key, 4 * quote_limit));
    parsed.push_back(std::move(*k));
  }
  Json all = Json::array();
  for (std::size_t i = 0; i < parsed.size(); ++i) {
    const lmdeploy::LegacyKey& k = parsed[i];
    if (o.json) {
      all.push_back(Json{{"key", o.keys[i]},
                         {"cache_prefix", k.cache_prefix},
                         {"model_name", k.model_name},
                         {"kv_head_rank", k.kv_head_rank},
                         {"block_hash", k.block_hash.hex()},
                         {"ambiguous", k.ambiguous}});
      continue;
    }
    fmt::format_to(std::back_inserter(out), "{}\n", quote(o.keys[i], no_limit));
    append_row(out, "cache prefix", k.cache_prefix.empty() ? std::string("none") : quote(k.cache_prefix, no_limit),
               width);
    append_row(out, "model name", quote(k.model_name, no_limit), width);
    append_row(out, "kv head rank", std::to_string(k.kv_head_rank), width);
    append_row(out, "block hash", k.block_hash.hex(), width);
    if (k.ambiguous) {
      append_row(out, "ambiguous",
                 "yes: the head contains '@', so another (cache prefix, model name) split wrote the same key", width);
    }
  }
  if (o.json) {
    append_json(out, all);
  }
  return exit_ok;
}

}  // namespace

std::vector<Command> add_legacy_command(CLI::App& app) {
  auto o = std::make_shared<LegacyOptions>();
  auto* legacy = app.add_subcommand("legacy", "lmdeploy's legacy Mooncake store keys: list, match and split them");
  legacy->require_subcommand(1);
  const auto head = [&o](CLI::App* cmd) {
    cmd->add_option("--model-name", o->model_name,
                    "lmdeploy's model_name (default there: the model "
                    "directory's basename)")
        ->required();
    cmd->add_option("--cache-prefix", o->cache_prefix, "lmdeploy's cache_prefix (default: none)");
  };
  auto* keys = legacy->add_subcommand("keys", "Print the legacy block hashes and keys of a token list");
  head(keys);
  keys->add_option("--block-size", o->block_size, "tokens per block")->required();
  keys->add_option("--tokens", o->tokens, "token ids, as for kvkey keys; - reads stdin")->required();
  keys->add_option("--adapter", o->adapter, "the request's adapter name (default: none)");
  keys->add_option("--tp-size", o->tp_size, "tensor-parallel size (default 1)");
  keys->add_option("--num-kv-heads", o->num_kv_heads, "KV heads of the model (needed when --tp-size > 1)");
  keys->add_flag("--json", o->json, "machine-readable output");
  auto* pattern = legacy->add_subcommand("pattern",
                                         "Print the regex and the Redis glob that match "
                                         "every legacy key of a model (for purging)");
  head(pattern);
  pattern->add_flag("--json", o->json, "machine-readable output");
  auto* parse = legacy->add_subcommand("parse", "Split legacy keys into their parts");
  parse->add_option("KEY", o->keys, "legacy keys")->required();
  parse->add_flag("--json", o->json, "machine-readable output");
  return {{keys, [o](std::string& out) { return run_legacy_keys(*o, out); }},
          {pattern, [o](std::string& out) { return run_legacy_pattern(*o, out); }},
          {parse, [o](std::string& out) { return run_legacy_parse(*o, out); }}};
}

}  // namespace kvkey_tool
