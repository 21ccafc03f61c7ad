// SPDX-License-Identifier: Apache-2.0
// Many deployments on one Redis server: no deployment sees another's objects,
// forced cross-reads are rejected naming the field, identical deployments and
// head replicas share objects.
#include <catch2/catch.hpp>

#include <fmt/format.h>

#include <map>
#include <set>
#include <utility>

#include "support.hpp"

namespace {

using it::Deployment;
using it::Status;

kvkey::Identity int4_grouped(kvkey::Identity id, std::uint32_t group_size) {
  id.kv.dtype = kvkey::KvDtype::int4;
  id.kv.quant.scheme = "per_group_sym";
  id.kv.quant.group_size = group_size;
  id.kv.quant.scale_dtype = kvkey::KvDtype::fp16;
  return id;
}

template <class Change>
kvkey::Identity with(kvkey::Identity id, Change change) {
  change(id);
  return id;
}

// The deployments of one tenant (and one of another tenant) that differ from
// "base" in one salient property each, plus an identical "twin".
std::vector<Deployment> deployments(const std::string& tenant, const std::string& other_tenant) {
  const kvkey::Identity base = it::base_identity(tenant);
  using I = kvkey::Identity;
  return {
      {"base", base},
      {"twin", base},
      {"bf16", with(base, [](I& id) { id.kv.dtype = kvkey::KvDtype::bf16; })},
      {"int4-g32", int4_grouped(base, 32)},
      {"int4-g64", int4_grouped(base, 64)},
      {"epoch-1", with(base, [](I& id) { id.model.weights_epoch = 1; })},
      {"tenant-b", with(base, [&](I& id) { id.tenant = other_tenant; })},
      {"lora-v1", with(base, [](I& id) { id.adapter = kvkey::Adapter("sql", kvkey::fingerprint("sql weights v1")); })},
      {"lora-v2", with(base, [](I& id) { id.adapter = kvkey::Adapter("sql", kvkey::fingerprint("sql weights v2")); })},
      {"tp2", with(base, [](I& id) { id.shard.tp_size = 2; })},
      {"tp4", with(base, [](I& id) { id.shard.tp_size = 4; })},
      {"replicas", with(base,
                        [](I& id) {
                          id.kv.num_kv_heads = 2;
                          id.shard.tp_size = 4;
                        })},
  };
}

}  // namespace

TEST_CASE("deployments sharing a server get no hits and accept no loads from each other", "[isolation]") {
  it::Store store(it::shared_server());
  const std::string tenant = it::unique_tenant("iso");
  const std::string other_tenant = it::unique_tenant("iso-b");
  const std::vector<Deployment> deps = deployments(tenant, other_tenant);
  const auto tokens = it::prompt(1, 1, 4);  // 4 full blocks of 8 tokens, the same prompt for all
  constexpr std::size_t full = 32;

  // Each deployment asks for the prompt after every earlier one has stored it:
  // only the twin (identical identity) may hit.
  std::size_t cross_hits = 0;
  std::map<std::string, std::vector<kvkey::Digest>> blocks;
  for (const Deployment& d : deps) {
    INFO("deployment " << d.name());
    const std::size_t before = it::lookup(store, d.all_ranks(), tokens) * d.identity().kv.block_size;
    const std::vector<kvkey::Digest> hashes = d.rank(0).block_hashes(tokens);
    if (d.name() == "twin") {
      CHECK(before == full);
    } else {
      cross_hits += before;
    }
    if (d.name() != "twin") d.save_all_ranks(store, hashes);
    CHECK(it::lookup(store, d.all_ranks(), tokens) * d.identity().kv.block_size == full);
    blocks[d.name()] = hashes;
  }
  CHECK(cross_hits == 0);

  // Every rank of every deployment loads exactly its own bytes (the twin, the
  // bytes base wrote, which are the same by construction).
  for (const Deployment& d : deps) {
    for (std::size_t r = 0; r < d.rank_count(); ++r) {
      INFO("deployment " << d.name() << " rank " << r);
      CHECK(d.count_exact_loads(store, r, blocks[d.name()]) == 4);
    }
  }
  // Distinct objects per block: base(=twin) bf16 int4-g32 int4-g64 epoch-1
  // lora-v1 lora-v2 = 7, tp2 2 slices, tp4 4, replicas 2 heads: 15 in this
  // tenant, 1 in the other.
  CHECK(store.keys(kvkey::tenant_key_prefix(tenant)).size() == 15 * 4);
  CHECK(store.keys(kvkey::tenant_key_prefix(other_tenant)).size() == 1 * 4);

  // Forced cross-reads: deployment A's stored value copied under B's key.
  const std::map<std::pair<std::string, std::string>, std::string> named = {
      {{"base", "bf16"}, "kv.dtype"},
      {{"int4-g32", "int4-g64"}, "kv.quant.group_size"},
      {{"base", "epoch-1"}, "model.weights_epoch"},
      {{"base", "tenant-b"}, "tenant"},
      {{"lora-v1", "lora-v2"}, "adapter.weights_fingerprint"},
      {{"base", "lora-v1"}, "adapter"},
      {{"tp2", "tp4"}, "shard"},
      {{"base", "tp2"}, "shard"},
      {{"base", "replicas"}, "kv.num_kv_heads"},
  };
  std::size_t forced = 0;
  std::size_t accepted = 0;
  std::size_t named_checked = 0;
  for (const Deployment& a : deps) {
    for (const Deployment& b : deps) {
      const bool base_or_twin =
          (a.name() == "base" || a.name() == "twin") && (b.name() == "base" || b.name() == "twin");
      if (&a == &b || base_or_twin) continue;  // same identity
      INFO("writer " << a.name() << ", reader " << b.name());
      const kvkey::Digest& block_a = blocks[a.name()][0];
      const kvkey::Digest& block_b = blocks[b.name()][0];
      const std::string key_b = b.rank(0).store_key(block_b);
      it::set_raw(store, key_b, it::get_raw(store, a.rank(0).store_key(block_a)));
      const auto got = it::load(store, b.rank(0), {block_b}).front();
      ++forced;
      accepted += got.status == Status::loaded;
      CHECK(got.status == Status::rejected);
      CHECK(got.verdict.reason == kvkey::Reason::identity_mismatch);
      for (const auto& key : {std::make_pair(a.name(), b.name()), std::make_pair(b.name(), a.name())}) {
        const auto it = named.find(key);
        if (it == named.end()) continue;
        CHECK(got.verdict.field == it->second);
        ++named_checked;
      }
      // The reader recomputes the block, and it loads again.
      b.save(store, 0, {block_b});
      CHECK(b.count_exact_loads(store, 0, {block_b}) == 1);
    }
  }
  CHECK(named_checked == 2 * named.size());
  CHECK(accepted == 0);

  std::string names;
  for (const Deployment& d : deps) names += (names.empty() ? "" : ", ") + d.name();
  fmt::print(
      "isolation: {} deployments ({}) on one server; cross-deployment hits: {}; "
      "forced cross-reads: {}, accepted: {}\n",
      deps.size(), names, cross_hits, forced, accepted);
}

TEST_CASE("head replicas share one object per KV head", "[isolation]") {
  it::Store store(it::shared_server());
  const std::string tenant = it::unique_tenant("replica");
  auto id = it::base_identity(tenant);
  id.kv.num_kv_heads = 2;
  id.shard.tp_size = 4;  // ranks 0, 1 hold head 0; ranks 2, 3 hold head 1
  const Deployment d("replicas", id);
  const auto tokens = it::prompt(2, 1, 4);
  const auto blocks = d.rank(0).block_hashes(tokens);

  d.save(store, 0, blocks);  // only rank 0 writes
  CHECK(it::lookup(store, {&d.rank(0), &d.rank(1)}, blocks) == 4);
  CHECK(it::lookup(store, d.all_ranks(), blocks) == 0);  // head 1 is missing
  CHECK(d.count_exact_loads(store, 1, blocks) == 4);     // rank 1 reads rank 0's objects
  for (const auto& got : it::load(store, d.rank(2), blocks)) CHECK(got.status == Status::missing);

  d.save(store, 3, blocks);  // rank 3 writes head 1, for rank 2 too
  CHECK(it::lookup(store, d.all_ranks(), blocks) == 4);
  CHECK(d.count_exact_loads(store, 2, blocks) == 4);
  CHECK(store.keys(kvkey::tenant_key_prefix(tenant)).size() == 2 * 4);  // 2 heads x 4 blocks, not 4 ranks x 4
}
