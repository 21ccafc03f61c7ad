// SPDX-License-Identifier: Apache-2.0
// The verified lookup counts a block only when the header stored under its key
// verifies for the block on every rank: another identity's object, another
// format version, garbage or a cut value under a live key is a miss, while
// lookup_existing (EXISTS) still counts it.
#include <catch2/catch.hpp>

#include <fmt/format.h>

#include <string>
#include <vector>

#include "support.hpp"

using it::Deployment;

namespace {

kvkey::Identity tp2(const std::string& tenant) {
  kvkey::Identity id = it::base_identity(tenant);
  id.shard.tp_size = 2;
  return id;
}

}  // namespace

TEST_CASE("a lookup counts no block whose header fails, on any rank", "[lookup]") {
  namespace L = kvkey::envelope_layout;
  it::Store store(it::shared_server());
  const std::string tenant = it::unique_tenant("lookup");
  const Deployment d("lookup", tp2(tenant));
  const auto blocks = d.rank(0).block_hashes(it::prompt(31, 0, 4));
  d.save_all_ranks(store, blocks);
  REQUIRE(it::lookup(store, d.all_ranks(), blocks) == 4);

  // Another deployment of the same tenant and model, in fp8: its own object
  // for the same position, stored under this deployment's key.
  kvkey::Identity fp8 = tp2(tenant);
  fp8.kv.dtype = kvkey::KvDtype::fp8_e4m3;
  const Deployment other("fp8", fp8);
  const auto other_blocks = other.rank(1).block_hashes(it::prompt(31, 0, 4));
  other.save(store, 1, {other_blocks[2]});
  const std::string foreign = it::get_raw(store, other.rank(1).store_key(other_blocks[2]));
  // Rank 1 of block 2 under a key of this deployment: everything else is intact.
  const std::string key = d.rank(1).store_key(blocks[2]);
  const std::string good = it::get_raw(store, key);
  REQUIRE(good.size() == kvkey::envelope_size + d.payload_size(1));
  std::string other_version = good;
  other_version[L::version] = static_cast<char>(other_version[L::version] + 1);
  std::string garbage(good.size(), '\0');
  for (std::size_t i = 0; i < garbage.size(); ++i) garbage[i] = static_cast<char>(i * 151 + 3);
  std::string other_rank = it::get_raw(store, d.rank(0).store_key(blocks[2]));
  std::string other_block = it::get_raw(store, d.rank(1).store_key(blocks[1]));

  struct Case {
    std::string name;
    std::string value;
  };
  const std::vector<Case> cases = {
      {"another identity (fp8)", foreign},
      {"another format version", other_version},
      {"garbage", garbage},
      {"a value cut inside the header", good.substr(0, 1000)},
      {"an empty value", std::string()},
      {"rank 0's object", other_rank},
      {"another block's object", other_block},
  };
  for (const Case& c : cases) {
    INFO("under rank 1's key of block 2: " << c.name);
    it::set_raw(store, key, c.value);
    CHECK(it::lookup_existing(store, d.all_ranks(), blocks) == 4);  // the key exists
    CHECK(it::lookup(store, d.all_ranks(), blocks) == 2);
    CHECK(it::lookup(store, {&d.rank(1)}, blocks) == 2);
    CHECK(it::lookup(store, {&d.rank(0)}, blocks) == 4);  // rank 0's objects are intact
    // The load rejects it too: the lookup never counts what the load refuses.
    const auto loaded = it::load(store, d.rank(1), {blocks[2]});
    CHECK(loaded[0].status == it::Status::rejected);
  }
  it::set_raw(store, key, good);
  CHECK(it::lookup(store, d.all_ranks(), blocks) == 4);
  fmt::print("lookup: {} kinds of foreign header under a live key, none counted\n", cases.size());
}

TEST_CASE("a lookup of the token form verifies too", "[lookup]") {
  it::Store store(it::shared_server());
  const Deployment d("lookup-tokens", it::base_identity(it::unique_tenant("lookup-tokens")));
  const auto tokens = it::prompt(32, 0, 3);
  const auto blocks = d.rank(0).block_hashes(tokens);
  d.save(store, 0, blocks);
  CHECK(it::lookup(store, d.all_ranks(), tokens) == 3);
  it::set_raw(store, d.rank(0).store_key(blocks[0]), "not an envelope");
  CHECK(it::lookup(store, d.all_ranks(), tokens) == 0);
  CHECK(it::lookup_existing(store, d.all_ranks(), tokens) == 3);
}
