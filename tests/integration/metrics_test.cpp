// SPDX-License-Identifier: Apache-2.0
// kvkey::Connector over the hiredis store records into a kvkey::Metrics: saves, verified lookups
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
  it::Store store(it::shared_server());
  const std::string tenant = it::unique_tenant("metrics");
  const Deployment d("metrics", it::base_identity(tenant));
  const auto blocks = d.rank(0).block_hashes(it::prompt(41, 0, 6));
  d.save(store, 0, blocks, &metrics);
  REQUIRE(it::lookup(store, d.all_ranks(), blocks, &metrics) == 6);

  // Block 2: another tenant's object under this key; block 4: its payload cut; block 5: gone.
  const Deployment other("other", it::base_identity(tenant + "-b"));
  const auto other_blocks = other.rank(0).block_hashes(it::prompt(41, 0, 6));
  other.save(store, 0, {other_blocks[2]}, &metrics);
  it::set_raw(store, d.rank(0).store_key(blocks[2]), it::get_raw(store, other.rank(0).store_key(other_blocks[2])));
  const std::string value = it::get_raw(store, d.rank(0).store_key(blocks[4]));
  it::set_raw(store, d.rank(0).store_key(blocks[4]), value.substr(0, value.size() - 1));
  store.connection().command({"DEL", d.rank(0).store_key(blocks[5])});

  REQUIRE(it::lookup(store, d.all_ranks(), blocks, &metrics) == 2);  // stops at the foreign header
  const auto loaded = it::load(store, d.rank(0), blocks, &metrics);
  REQUIRE(loaded[2].status == it::Status::rejected);
  REQUIRE(loaded[4].status == it::Status::rejected);

  const kvkey::MetricsSnapshot s = metrics.snapshot();
  CHECK(s.saves == 2);  // this deployment's save and the other one's, recorded into the same Metrics
  CHECK(s.save_saved == 7);
  CHECK(s.lookups == 2);
  CHECK(s.lookup_hit == 6 + 2);
  CHECK(s.lookup_rejected == 2);  // the foreign header, and the cut value (its size, from STRLEN)
  CHECK(s.lookup_miss == 1 + 1);  // block 3 after the prefix ended, 5 missing
  CHECK(s.loads == 1);
  CHECK(s.load_loaded == 3);
  CHECK(s.load_missing == 1);
  CHECK(s.load_rejected == 2);
  CHECK(s.rejected(Reason::identity_mismatch, "tenant") == 2);    // at the lookup and at the load
  CHECK(s.rejected(Reason::size_mismatch, "payload_size") == 2);  // the cut value, at the lookup and at the load
  CHECK(s.rejected_total() == 4);
  CHECK(s.payload_verified_bytes == 3 * d.payload_size(0));
  CHECK(metrics.render().find("kvkey_rejected_blocks_total{reason=\"identity_mismatch\",field=\"tenant\"} 2") !=
        std::string::npos);
}

TEST_CASE("the connector records store errors by kind", "[metrics]") {
  kvkey::Metrics metrics;
  kvkey_redis::Options options = it::shared_server();
  options.port = it::free_port();  // nothing listens there
  it::Store store(options);
  const Deployment d("metrics-errors", it::base_identity(it::unique_tenant("metrics")));
  const auto blocks = d.rank(0).block_hashes(it::prompt(42, 0, 3));
  CHECK_THROWS_AS(it::lookup(store, d.all_ranks(), blocks, &metrics), kvkey_redis::StoreError);
  CHECK_THROWS_AS(it::load(store, d.rank(0), blocks, &metrics), kvkey_redis::StoreError);
  const kvkey::MetricsSnapshot s = metrics.snapshot();
  CHECK(s.store_error("connection") == 2);
  CHECK(s.lookup_miss == 3);
  CHECK(s.load_missing == 3);
  CHECK(s.load_loaded == 0);
}

TEST_CASE("a key of another type misses alone, counted as a store error", "[metrics][key_errors]") {
  kvkey::Metrics metrics;
  it::Store store(it::shared_server());
  const Deployment d("key-errors", it::base_identity(it::unique_tenant("key-errors")));
  const auto blocks = d.rank(0).block_hashes(it::prompt(43, 0, 10));
  d.save(store, 0, blocks);
  const std::string key = d.rank(0).store_key(blocks[7]);
  store.connection().command({"DEL", key});
  store.connection().command({"RPUSH", key, "not a value"});  // GET and GETRANGE answer WRONGTYPE

  for (int round = 0; round < 2; ++round) {  // the second on the same connection: it stayed in step
    INFO("round " << round);
    const std::uint64_t before = metrics.snapshot().store_error("server");
    CHECK(it::lookup(store, d.all_ranks(), blocks, &metrics) == 7);
    CHECK(metrics.snapshot().store_error("server") == before + 1);  // the one key, counted
    const auto loaded = it::load(store, d.rank(0), blocks, &metrics);
    for (std::size_t i = 0; i < blocks.size(); ++i) {
      INFO("block " << i);
      CHECK(loaded[i].status == (i == 7 ? it::Status::missing : it::Status::loaded));
      if (i != 7) CHECK(loaded[i].payload == d.payload(0, blocks[i]));
    }
    CHECK(store.connection().connected());
  }
  CHECK(it::lookup_existing(store, d.all_ranks(), blocks) == 10);  // EXISTS answers for any type
  const kvkey::MetricsSnapshot s = metrics.snapshot();
  CHECK(s.store_error("server") == 4);  // 2 lookups and 2 loads, one key each
  CHECK(s.load_loaded == 18);
  CHECK(s.load_missing == 2);
  store.purge(d.rank(0).tenant_prefix());
}
