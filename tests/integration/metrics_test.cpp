// SPDX-License-Identifier: Apache-2.0
// The Redis connector records into a kvkey::Metrics: saves, verified lookups
// and loads with their blocks by result, each rejection by reason and field,
// verified payload bytes, and store errors by kind.
#include <catch2/catch.hpp>

#include <kvkey/metrics.hpp>

#include <string>
#include <vector>

#include "support.hpp"

using it::Deployment;
using kvkey::Reason;

TEST_CASE("the connector records saves, lookups, loads and rejections", "[metrics]") {
  kvkey::Metrics metrics;
  kvkey_redis::Connector store(it::shared_server(), &metrics);
  const std::string tenant = it::unique_tenant("metrics");
  const Deployment d("metrics", it::base_identity(tenant));
  const auto blocks = d.rank(0).block_hashes(it::prompt(41, 0, 6));
  d.save(store, 0, blocks);
  REQUIRE(store.lookup(d.all_ranks(), blocks).prefix.blocks == 6);

  // Block 2: another tenant's object under this key; block 4: its payload cut; block 5: gone.
  const Deployment other("other", it::base_identity(tenant + "-b"));
  const auto other_blocks = other.rank(0).block_hashes(it::prompt(41, 0, 6));
  other.save(store, 0, {other_blocks[2]});
  it::set_raw(store, d.rank(0).store_key(blocks[2]), it::get_raw(store, other.rank(0).store_key(other_blocks[2])));
  const std::string value = it::get_raw(store, d.rank(0).store_key(blocks[4]));
  it::set_raw(store, d.rank(0).store_key(blocks[4]), value.substr(0, value.size() - 1));
  store.connection().command({"DEL", d.rank(0).store_key(blocks[5])});

  REQUIRE(store.lookup(d.all_ranks(), blocks).prefix.blocks == 2);  // stops at the foreign header
  const auto loaded = store.load(d.rank(0), blocks, d.payload_size(0));
  REQUIRE(loaded[2].status == kvkey_redis::LoadStatus::rejected);
  REQUIRE(loaded[4].status == kvkey_redis::LoadStatus::rejected);

  const kvkey::MetricsSnapshot s = metrics.snapshot();
  CHECK(s.saves == 2);  // this deployment's save; the other one's was through the same connector
  CHECK(s.save_saved == 7);
  CHECK(s.lookups == 2);
  CHECK(s.lookup_hit == 6 + 2);
  CHECK(s.lookup_rejected == 1);  // the foreign header; the cut payload's header still verifies
  CHECK(s.lookup_miss == 2 + 1);  // blocks 3 and 4 after the prefix ended, 5 missing
  CHECK(s.loads == 1);
  CHECK(s.load_loaded == 3);
  CHECK(s.load_missing == 1);
  CHECK(s.load_rejected == 2);
  CHECK(s.rejected(Reason::identity_mismatch, "tenant") == 2);  // at the lookup and at the load
  CHECK(s.rejected(Reason::malformed, "value.size") == 1);
  CHECK(s.rejected_total() == 3);
  CHECK(s.payload_verified_bytes == 3 * d.payload_size(0));
  CHECK(metrics.render().find("kvkey_rejected_blocks_total{reason=\"identity_mismatch\",field=\"tenant\"} 2") !=
        std::string::npos);
}

TEST_CASE("the connector records store errors by kind", "[metrics]") {
  kvkey::Metrics metrics;
  kvkey_redis::Options options = it::shared_server();
  options.port = it::free_port();  // nothing listens there
  kvkey_redis::Connector store(options, &metrics);
  const Deployment d("metrics-errors", it::base_identity(it::unique_tenant("metrics")));
  const auto blocks = d.rank(0).block_hashes(it::prompt(42, 0, 3));
  CHECK_THROWS_AS(store.lookup(d.all_ranks(), blocks), kvkey_redis::StoreError);
  CHECK_THROWS_AS(store.load(d.rank(0), blocks, d.payload_size(0)), kvkey_redis::StoreError);
  const kvkey::MetricsSnapshot s = metrics.snapshot();
  CHECK(s.store_error("connection") == 2);
  CHECK(s.lookup_miss == 3);
  CHECK(s.load_missing == 3);
  CHECK(s.load_loaded == 0);
}

TEST_CASE("a key of another type misses alone, counted as a store error", "[metrics][key_errors]") {
  kvkey::Metrics metrics;
  kvkey_redis::Connector store(it::shared_server(), &metrics);
  const Deployment d("key-errors", it::base_identity(it::unique_tenant("key-errors")));
  const auto blocks = d.rank(0).block_hashes(it::prompt(43, 0, 10));
  d.save(store, 0, blocks);
  const std::string key = d.rank(0).store_key(blocks[7]);
  store.connection().command({"DEL", key});
  store.connection().command({"RPUSH", key, "not a value"});  // GET and GETRANGE answer WRONGTYPE

  for (int round = 0; round < 2; ++round) {  // the second on the same connection: it stayed in step
    INFO("round " << round);
    const kvkey_redis::Lookup found = store.lookup(d.all_ranks(), blocks);
    CHECK(found.prefix.blocks == 7);
    CHECK(found.key_errors == 1);
    const auto loaded = store.load(d.rank(0), blocks, d.payload_size(0));
    for (std::size_t i = 0; i < blocks.size(); ++i) {
      INFO("block " << i);
      CHECK(loaded[i].status == (i == 7 ? kvkey_redis::LoadStatus::failed : kvkey_redis::LoadStatus::loaded));
      if (i != 7) CHECK(loaded[i].payload == d.payload(0, blocks[i]));
    }
    CHECK(store.connection().connected());
  }
  CHECK(store.lookup_existing(d.all_ranks(), blocks).prefix.blocks == 10);  // EXISTS answers for any type
  const kvkey::MetricsSnapshot s = metrics.snapshot();
  CHECK(s.store_error("server") == 4);  // 2 lookups and 2 loads, one key each
  CHECK(s.load_loaded == 18);
  CHECK(s.load_missing == 2);
  store.purge(d.rank(0).tenant_prefix());
}
