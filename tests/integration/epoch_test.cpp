// SPDX-License-Identifier: Apache-2.0
// A weight update bumps the epoch: from then on no object of the old epoch is
// counted or loaded, and the old epoch can be dropped by its key prefix.
#include <catch2/catch.hpp>

#include <fmt/format.h>

#include "support.hpp"

using it::Deployment;
using it::Status;

TEST_CASE("after a weight update no old-epoch object is counted or loaded", "[epoch]") {
  it::Store store(it::shared_server());
  const std::string tenant = it::unique_tenant("epoch");
  auto id = it::base_identity(tenant);
  id.shard.tp_size = 2;
  const Deployment old_epoch("epoch-0", id);
  id.model.weights_epoch = 1;
  const Deployment new_epoch("epoch-1", id);
  const auto tokens = it::prompt(3, 1, 4);

  const auto old_blocks = old_epoch.rank(0).block_hashes(tokens);
  old_epoch.save_all_ranks(store, old_blocks);
  REQUIRE(it::lookup(store, old_epoch.all_ranks(), tokens) == 4);

  // Every load of the new epoch below: none may return the old epoch's bytes.
  std::size_t loads = 0;
  std::size_t old_bytes_loaded = 0;
  auto load_new = [&](std::size_t r, const std::vector<kvkey::Digest>& blocks) {
    auto got = it::load(store, new_epoch.rank(r), blocks);
    for (std::size_t i = 0; i < got.size(); ++i) {
      ++loads;
      if (got[i].status != Status::loaded) continue;
      for (const auto& old_block : old_blocks) old_bytes_loaded += got[i].payload == old_epoch.payload(r, old_block);
    }
    return got;
  };

  // The update: nothing of the new epoch exists yet.
  CHECK(it::lookup(store, new_epoch.all_ranks(), tokens) == 0);
  const auto blocks = new_epoch.rank(0).block_hashes(tokens);
  for (std::size_t r = 0; r < 2; ++r) {
    for (const auto& got : load_new(r, blocks)) CHECK(got.status == Status::missing);
  }

  // A straggler still on the old weights keeps writing the old epoch: the new
  // epoch still counts nothing.
  old_epoch.save_all_ranks(store, old_blocks);
  CHECK((it::lookup(store, new_epoch.all_ranks(), tokens) * 8) == 0);

  // The new epoch computes blocks 0 and 1 on both ranks, block 2 on rank 0 only.
  new_epoch.save_all_ranks(store, {blocks[0], blocks[1]});
  new_epoch.save(store, 0, {blocks[2]});
  CHECK(it::lookup(store, new_epoch.all_ranks(), tokens) == 2);

  // Old bytes forced under new keys (a store bug, a writer with a stale key
  // function): rejected, naming the epoch.
  for (std::size_t r = 0; r < 2; ++r) {
    it::set_raw(store, new_epoch.rank(r).store_key(blocks[3]),
                it::get_raw(store, old_epoch.rank(r).store_key(old_blocks[3])));
    const auto got = load_new(r, {blocks[3]}).front();
    CHECK(got.status == Status::rejected);
    CHECK(got.verdict.reason == kvkey::Reason::identity_mismatch);
    CHECK(got.verdict.field == "model.weights_epoch");
  }
  new_epoch.save_all_ranks(store, {blocks[2], blocks[3]});  // recompute
  CHECK(it::lookup(store, new_epoch.all_ranks(), tokens) == 4);
  for (std::size_t r = 0; r < 2; ++r) CHECK(new_epoch.count_exact_loads(store, r, blocks) == 4);
  for (std::size_t r = 0; r < 2; ++r) load_new(r, blocks);
  CHECK(old_bytes_loaded == 0);

  // Drop the old epoch by its prefix: exactly its 2 ranks x 4 blocks go.
  REQUIRE(old_epoch.rank(0).key_prefix() != new_epoch.rank(0).key_prefix());
  CHECK(store.keys(old_epoch.rank(0).key_prefix()).size() == 8);
  CHECK(store.purge(old_epoch.rank(0).key_prefix()) == 8);
  CHECK(store.keys(old_epoch.rank(0).key_prefix()).empty());
  CHECK(store.keys(new_epoch.rank(0).key_prefix()).size() == 8);
  CHECK(it::lookup(store, old_epoch.all_ranks(), tokens) == 0);
  for (std::size_t r = 0; r < 2; ++r) CHECK(new_epoch.count_exact_loads(store, r, blocks) == 4);
  fmt::print("epoch: {} new-epoch loads, {} returned old-epoch bytes; old epoch purged by prefix {}\n", loads,
             old_bytes_loaded, old_epoch.rank(0).key_prefix());
}
