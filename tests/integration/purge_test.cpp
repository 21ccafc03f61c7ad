// SPDX-License-Identifier: Apache-2.0
// Purging by key prefix (SCAN + UNLINK) removes exactly one tenant's, or one
// epoch's, objects.
#include <catch2/catch.hpp>

#include <fmt/format.h>

#include <map>

#include "support.hpp"

using it::Deployment;

TEST_CASE("purging a tenant by prefix removes exactly that tenant's objects", "[purge]") {
  it::Store store(it::shared_server());
  const std::string a = it::unique_tenant("purge-a");
  const std::string b = it::unique_tenant("purge-b");
  const std::string b2 = b + "2";  // b is a string prefix of b2: the '/' after the tenant must keep them apart

  std::vector<Deployment> deps;
  for (const std::string& tenant : {a, b, b2}) {
    auto id = it::base_identity(tenant);
    deps.emplace_back(tenant + "/fp16", id);
    id.kv.dtype = kvkey::KvDtype::fp8_e4m3;
    id.shard.tp_size = 2;
    deps.emplace_back(tenant + "/fp8-tp2", id);
    id.model.name = "meta-llama/Llama-3.1-8B";
    id.model.weights_epoch = 7;
    deps.emplace_back(tenant + "/llama-e7", id);
  }
  // Per tenant: 3 prompts x 3 blocks, on 1 + 2 + 2 ranks = 45 objects.
  std::map<std::string, std::vector<std::vector<kvkey::Digest>>> blocks;
  for (const Deployment& d : deps) {
    for (std::uint32_t p = 0; p < 3; ++p) {
      blocks[d.name()].push_back(d.rank(0).block_hashes(it::prompt(4, p, 3)));
      d.save_all_ranks(store, blocks[d.name()].back());
    }
  }
  auto count = [&](const std::string& tenant) { return store.keys(kvkey::tenant_key_prefix(tenant)).size(); };
  CHECK(count(a) == 45);
  CHECK(count(b) == 45);
  CHECK(count(b2) == 45);

  CHECK(store.purge(kvkey::tenant_key_prefix(b)) == 45);

  CHECK(count(a) == 45);
  CHECK(count(b) == 0);
  CHECK(count(b2) == 45);
  for (const Deployment& d : deps) {
    const bool purged = d.identity().tenant == b;
    for (const auto& prompt_blocks : blocks[d.name()]) {
      for (std::size_t r = 0; r < d.rank_count(); ++r) {
        INFO(d.name() << " rank " << r);
        CHECK(d.count_exact_loads(store, r, prompt_blocks) == (purged ? 0 : 3));
      }
    }
  }
  fmt::print("purge: tenants {} / {} / {} had 45 / 45 / 45 objects; after purging {}: {} / {} / {}\n", a, b, b2, b,
             count(a), count(b), count(b2));
}

TEST_CASE("purging an epoch by prefix keeps the other epochs", "[purge]") {
  it::Store store(it::shared_server());
  const std::string tenant = it::unique_tenant("purge-epoch");
  std::vector<Deployment> deps;
  for (std::uint64_t epoch : {1, 10, 11}) {  // "e1/" is a string prefix of neither "e10/" nor "e11/"
    auto id = it::base_identity(tenant);
    id.model.weights_epoch = epoch;
    deps.emplace_back("e" + std::to_string(epoch), id);
  }
  const auto tokens = it::prompt(5, 0, 4);
  for (const Deployment& d : deps) d.save(store, 0, d.rank(0).block_hashes(tokens));
  CHECK(store.keys(kvkey::tenant_key_prefix(tenant)).size() == 12);
  CHECK(store.purge(deps[0].rank(0).key_prefix()) == 4);
  CHECK(store.keys(deps[0].rank(0).key_prefix()).empty());
  CHECK(store.keys(deps[1].rank(0).key_prefix()).size() == 4);
  CHECK(store.keys(deps[2].rank(0).key_prefix()).size() == 4);
}

TEST_CASE("purge escapes glob characters in the prefix", "[purge]") {
  it::Store store(it::shared_server());
  const std::string base = "kvkey-it/" + it::unique_tenant("glob") + "/";
  // Each pair: a key under the literal prefix, and one that the prefix would
  // match if it were used as an unescaped glob.
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"a*", "abc"}, {"[x]", "x"}, {"q?", "qz"}, {"b\\", "b*"}};
  for (const auto& [prefix, decoy] : cases) {
    INFO("prefix " << prefix);
    it::set_raw(store, base + prefix + "1", "v");
    it::set_raw(store, base + decoy + "1", "v");
    CHECK(store.purge(base + prefix) == 1);
    CHECK(it::get_raw(store, base + prefix + "1").empty());
    CHECK(it::get_raw(store, base + decoy + "1") == "v");
  }
  CHECK(store.purge(base) == cases.size());  // the decoys
  CHECK_THROWS_AS(store.purge(""), kvkey::input_error);
}
