// SPDX-License-Identifier: Apache-2.0
// kvkey::Connector over kvkey_redis::RedisStore (the example's hiredis
// connection as a kvkey::Store) against the shared redis-server: two ranks
// saved, looked up, loaded and loaded into per-layer parts; a foreign value
// refused; a key of another type failing alone (the conformance kit on the
// same store: store_conformance_test.cpp).
#include "redis_store.hpp"
#include "support.hpp"

#include <kvkey/connector.hpp>

#include <catch2/catch.hpp>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

TEST_CASE("kvkey::Connector over the hiredis store adapter", "[redis][connector]") {
  kvkey_redis::RedisStore store(it::shared_server());
  kvkey::Identity id = it::base_identity(it::unique_tenant("core"));
  id.shard.tp_size = 2;
  const it::Deployment d("core", id);
  const std::vector<kvkey::KeyNamespace<>> ranks = {d.rank(0), d.rank(0).for_rank(1)};
  kvkey::Metrics m;
  kvkey::Connector<>::Options opt;
  opt.metrics = &m;
  const kvkey::Connector<> conn(store, ranks, opt);
  const std::vector<kvkey::Digest> blocks = d.rank(0).block_hashes(it::prompt(1, 1, 6));
  REQUIRE(blocks.size() == 6);
  for (std::size_t r = 0; r < 2; ++r) {
    std::vector<std::vector<std::uint8_t>> payloads;
    std::vector<kvkey::Payload> views;
    for (const kvkey::Digest& b : blocks) payloads.push_back(d.payload(r, b));
    for (const auto& p : payloads) views.emplace_back(p.data(), p.size());
    REQUIRE(conn.save(blocks, views, r) == blocks.size());
  }
  CHECK(conn.lookup(blocks) == 6);
  const auto loaded = conn.load(blocks, 1);
  for (std::size_t i = 0; i < blocks.size(); ++i) CHECK(loaded[i] == d.payload(1, blocks[i]));
  // Per-layer parts: the payload in two halves.
  const std::size_t half = d.payload_size(0) / 2;
  std::vector<std::vector<std::uint8_t>> parts(2 * blocks.size(), std::vector<std::uint8_t>(half, 0));
  std::vector<std::vector<kvkey::MutableBuffer>> dest(blocks.size());
  for (std::size_t i = 0; i < parts.size(); ++i) dest[i / 2].push_back({parts[i].data(), half});
  const auto results = conn.load_into(blocks, dest, 0);
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    REQUIRE(results[i].loaded());
    std::vector<std::uint8_t> joined = parts[2 * i];
    joined.insert(joined.end(), parts[2 * i + 1].begin(), parts[2 * i + 1].end());
    CHECK(joined == d.payload(0, blocks[i]));
  }
  // Another tenant's value under rank 1's key of block 3: the count stops there.
  kvkey::Identity other = id;
  other.tenant = it::unique_tenant("core-other");
  other.shard.tp_rank = 1;
  const kvkey::KeyNamespace<> foreign(other);
  const auto p = d.payload(1, blocks[3]);
  const kvkey::Bytes v = foreign.seal_value(blocks[3], kvkey::Payload(p.data(), p.size()));
  store.put(ranks[1].store_key(blocks[3]), v.data(), v.size());
  CHECK(conn.lookup(blocks) == 3);
  CHECK(m.snapshot().rejected(kvkey::Reason::identity_mismatch, "tenant") == 1);
  CHECK(conn.load(blocks, 1)[3] == std::nullopt);
  CHECK(m.snapshot().false_hits == 1);
}

TEST_CASE("The hiredis store adapter lists and purges keys by prefix", "[redis][connector]") {
  kvkey_redis::RedisStore store(it::shared_server());
  kvkey::Identity id = it::base_identity(it::unique_tenant("purge-adapter"));
  const it::Deployment d("purge-adapter", id);
  const kvkey::Connector<> conn(store, d.rank(0));
  const std::vector<kvkey::Digest> blocks = d.rank(0).block_hashes(it::prompt(1, 1, 3));
  std::vector<std::vector<std::uint8_t>> payloads;
  std::vector<kvkey::Payload> views;
  for (const kvkey::Digest& b : blocks) payloads.push_back(d.payload(0, b));
  for (const auto& p : payloads) views.emplace_back(p.data(), p.size());
  REQUIRE(conn.save(blocks, views) == 3);
  const kvkey::KeyNamespace<> epoch1 = d.rank(0).with_epoch(1);
  const kvkey::Connector<> conn1(store, epoch1);
  REQUIRE(conn1.save(blocks[0], views[0]));
  const std::vector<std::string> keys = store.keys(d.rank(0).key_prefix());
  REQUIRE(keys.size() == 3);
  CHECK(keys[0].rfind(d.rank(0).key_prefix(), 0) == 0);
  CHECK(store.keys(d.rank(0).tenant_prefix()).size() == 4);
  CHECK_THROWS_AS(store.purge(""), kvkey::input_error);
  CHECK(store.purge(d.rank(0).key_prefix()) == 3);  // one epoch of the model
  CHECK(conn.lookup(blocks) == 0);
  CHECK(conn1.lookup({blocks[0]}) == 1);
  CHECK(store.purge(d.rank(0).tenant_prefix()) == 1);  // the rest of the tenant
  CHECK(store.keys(d.rank(0).tenant_prefix()).empty());
}

TEST_CASE("hiredis store adapter: a WRONGTYPE key fails that key alone, not the batch", "[redis][connector]") {
  kvkey_redis::RedisStore store(it::shared_server());
  const it::Deployment d("wrongtype", it::base_identity(it::unique_tenant("wrongtype")));
  kvkey::Metrics m;
  const kvkey::Connector<> conn(store, d.rank(0), &m);
  const std::vector<kvkey::Digest> blocks = d.rank(0).block_hashes(it::prompt(1, 1, 4));
  REQUIRE(blocks.size() == 4);
  std::vector<std::vector<std::uint8_t>> payloads;
  std::vector<kvkey::Payload> views;
  for (const kvkey::Digest& b : blocks) payloads.push_back(d.payload(0, b));
  for (const auto& p : payloads) views.emplace_back(p.data(), p.size());
  REQUIRE(conn.save(blocks, views) == 4);
  // A list under block 2's key: GET, GETRANGE and STRLEN answer WRONGTYPE for it alone.
  const std::string key = d.rank(0).store_key(blocks[2]);
  (void)store.connection().command({"DEL", key});
  (void)store.connection().command({"RPUSH", key, "x"});
  CHECK(conn.lookup(blocks) == 2);  // the count stops at the failed key
  const auto loaded = conn.load(blocks);
  CHECK(loaded[0] == payloads[0]);
  CHECK(loaded[1] == payloads[1]);
  CHECK_FALSE(loaded[2]);
  CHECK(loaded[3] == payloads[3]);                 // the rest of the batch is served
  CHECK(store.connection().connected());           // the connection stayed in step
  CHECK(m.snapshot().store_error("server") == 2);  // one per failed key, of its kind
  CHECK(conn.last_error() == nullptr);
  (void)store.purge(d.rank(0).tenant_prefix());
}
