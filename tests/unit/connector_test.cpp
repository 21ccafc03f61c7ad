// kvkey::Connector (kvkey/connector.hpp): the one connector core. Its metrics
// follow docs/operations.md; python/tests/test_connector_core.py runs the same
// scenarios through the binding and expects the same numbers.
#include "support/fixtures.hpp"

#include <kvkey/any_key_namespace.hpp>
#include <kvkey/connector.hpp>
#include <kvkey/metrics.hpp>
#include <kvkey/store.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace {

using kvkey::Bytes;
using kvkey::Reason;

// A bf16 identity whose payload size the identity determines: 2 x 2 layers x 2 heads x 8 x 4 tokens x 2 bytes.
kvkey::Identity small_identity(std::uint32_t tp_size = 1, std::uint32_t tp_rank = 0) {
  kvkey::Identity id = kvkey_test::base_identity();
  id.kv = kvkey::Kv{kvkey::KvDtype::bf16, kvkey::Quant{}, 4, 2, 2, 8, "kvkey.test.v1", false};
  id.shard.tp_size = tp_size;
  id.shard.tp_rank = tp_rank;
  return id;
}
constexpr std::size_t payload_bytes = 2 * 2 * 2 * 8 * 4 * 2;  // per rank at TP=1

Bytes pattern(std::size_t n, std::uint8_t seed) {
  Bytes b(n);
  for (std::size_t i = 0; i < n; ++i) b[i] = static_cast<std::uint8_t>(seed + i * 7);
  return b;
}

std::vector<kvkey::Payload> views(const std::vector<Bytes>& ps) {
  std::vector<kvkey::Payload> out;
  for (const Bytes& p : ps) out.emplace_back(p.data(), p.size());
  return out;
}

// A store that hands out one arena for every read and overwrites it on the next:
// what zero-copy clients do. It says so (stable = false).
struct ArenaStore : kvkey::MemoryStore {
  Bytes arena;
  bool honest = true;
  std::vector<kvkey::StoreValue> read_many(const std::vector<std::string>& keys) override {
    std::vector<std::optional<Bytes>> got = get_many(keys);
    std::size_t total = 0;
    for (const auto& g : got) total += g ? g->size() : 0;
    arena.assign(total, 0);
    std::vector<kvkey::StoreValue> out(keys.size());
    std::size_t off = 0;
    for (std::size_t i = 0; i < keys.size(); ++i) {
      if (!got[i]) continue;
      std::memcpy(arena.data() + off, got[i]->data(), got[i]->size());
      out[i].present = true;
      out[i].data = arena.data() + off;
      out[i].size = got[i]->size();
      out[i].stable = !honest;
      off += got[i]->size();
    }
    return out;
  }
  void scribble() { std::fill(arena.begin(), arena.end(), std::uint8_t{0xEE}); }
};

struct FailingStore : kvkey::MemoryStore {
  bool fail = false;
  std::vector<kvkey::StoreValue> read_prefix_many(const std::vector<std::string>& keys, std::size_t n) override {
    if (fail) throw kvkey::store_error("timeout", "no reply in time");
    return kvkey::MemoryStore::read_prefix_many(keys, n);
  }
  std::vector<kvkey::StoreValue> read_many(const std::vector<std::string>& keys) override {
    if (fail) throw kvkey::store_error("connection", "refused");
    return kvkey::MemoryStore::read_many(keys);
  }
};

}  // namespace

TEST_CASE("Connector metrics: every rejected block counts, present values are never misses", "[connector]") {
  kvkey::MemoryStore store;
  const kvkey::KeyNamespace<> ns(small_identity());
  kvkey::Identity other_id = small_identity();
  other_id.tenant = "team-b";
  const kvkey::KeyNamespace<> other(other_id);
  const std::vector<kvkey::Digest> blocks = ns.block_hashes(kvkey_test::tokens(16));
  REQUIRE(blocks.size() == 4);
  kvkey::Metrics m;
  const kvkey::Connector<> c(store, ns, &m);
  std::vector<Bytes> ps;
  for (std::uint8_t i = 0; i < 4; ++i) ps.push_back(pattern(payload_bytes, i));
  REQUIRE(c.save(blocks, views(ps)) == 4);
  REQUIRE(c.lookup(blocks) == 4);
  for (std::size_t i = 1; i < 4; ++i) {  // [ok, foreign, foreign, foreign]
    const Bytes v = other.seal_value(blocks[i], kvkey::Payload(ps[i].data(), ps[i].size()));
    store.put(ns.store_key(blocks[i]), v.data(), v.size());
  }
  CHECK(c.lookup(blocks) == 1);
  kvkey::MetricsSnapshot s = m.snapshot();
  CHECK(s.lookup_hit == 4 + 1);
  CHECK(s.lookup_miss == 0);
  CHECK(s.lookup_rejected == 3);
  CHECK(s.rejected(Reason::identity_mismatch, "tenant") == 3);

  // The first lookup counted all four: the three refused at load are false hits.
  const auto loaded = c.load(blocks);
  CHECK(loaded[0] == ps[0]);
  s = m.snapshot();
  CHECK(s.load_loaded == 1);
  CHECK(s.load_rejected == 3);
  CHECK(s.load_missing == 0);
  CHECK(s.false_hits == 3);
  CHECK(s.payload_verified_bytes == payload_bytes);
  (void)c.load(blocks);  // told once
  CHECK(m.snapshot().false_hits == 3);
}

TEST_CASE("Connector over every rank, with max_tokens, for any namespace type", "[connector]") {
  kvkey::MemoryStore store;
  std::vector<kvkey::AnyKeyNamespace> ranks;
  for (std::uint32_t r = 0; r < 2; ++r) ranks.emplace_back(small_identity(2, r));
  kvkey::Metrics m;
  kvkey::Connector<kvkey::AnyKeyNamespace>::Options opt;
  opt.metrics = &m;
  opt.lookup_batch = 2;
  const kvkey::Connector<kvkey::AnyKeyNamespace> c(store, ranks, opt);
  const std::vector<kvkey::Digest> blocks = ranks[0].block_hashes(kvkey_test::tokens(24));
  REQUIRE(blocks.size() == 6);
  REQUIRE(c.payload_size(0) == payload_bytes / 2);
  std::vector<Bytes> ps(6, pattern(payload_bytes / 2, 1));
  CHECK(c.save(blocks, views(ps), 0) == 6);
  CHECK(c.lookup(blocks) == 0);  // rank 1 has nothing
  CHECK(c.save({blocks[0], blocks[1], blocks[2]}, views({ps[0], ps[1], ps[2]}), 1) == 3);
  CHECK(c.lookup(blocks) == 3);
  CHECK(c.lookup(blocks, 11) == 2);  // 11 tokens: two whole blocks of 4
  CHECK(c.lookup_existing(blocks) == 3);
  // rank 0's value under rank 1's key of block 1: another slice, refused
  const Bytes v = ranks[0].seal_value(blocks[1], kvkey::Payload(ps[1].data(), ps[1].size()));
  store.put(ranks[1].store_key(blocks[1]), v.data(), v.size());
  const kvkey::MetricsSnapshot before = m.snapshot();
  CHECK(c.lookup(blocks) == 1);
  const kvkey::MetricsSnapshot s = m.snapshot();
  CHECK(s.lookup_hit - before.lookup_hit == 1);
  CHECK(s.lookup_rejected - before.lookup_rejected == 1);
  CHECK(s.lookup_miss - before.lookup_miss == 4);  // blocks 2 and 3 were read, 4 and 5 were not
  CHECK(s.rejected(Reason::identity_mismatch, "shard") == 1);
  CHECK_THROWS_AS(c.save({blocks[0]}, views({pattern(3, 1)}), 0), kvkey::input_error);  // not the payload size
  CHECK_THROWS_AS(c.load(blocks, 2), kvkey::input_error);                               // no rank 2
  kvkey::Identity foreign = small_identity(2, 1);
  foreign.tenant = "team-b";
  ranks.emplace_back(foreign);
  CHECK_THROWS_AS(kvkey::Connector<kvkey::AnyKeyNamespace>(store, ranks), kvkey::input_error);
}

TEST_CASE("Connector::load_into verifies, then scatters into per-layer parts", "[connector]") {
  kvkey::MemoryStore store;
  const kvkey::KeyNamespace<> ns(small_identity());
  const kvkey::Connector<> c(store, ns);
  const std::vector<kvkey::Digest> blocks = ns.block_hashes(kvkey_test::tokens(8));
  // Saved from four parts (K0, V0, K1, V1): the value holds their concatenation.
  const Bytes whole = pattern(payload_bytes, 3);
  const std::size_t q = payload_bytes / 4;
  const kvkey::ConstBuffer parts[4] = {
      {whole.data(), q}, {whole.data() + q, q}, {whole.data() + 2 * q, q}, {whole.data() + 3 * q, q}};
  REQUIRE(c.save({blocks[0], blocks[1]}, {kvkey::Payload(parts, 4), kvkey::Payload(parts, 4)}) == 2);
  REQUIRE(c.load(blocks[0]) == whole);

  std::vector<Bytes> dst(8, Bytes(q, 0xA5));
  std::vector<std::vector<kvkey::MutableBuffer>> dests(2);
  for (std::size_t i = 0; i < 8; ++i) dests[i / 4].push_back({dst[i].data(), q});
  // Block 1's payload flipped: its parts stay untouched.
  std::optional<Bytes> v1 = store.get(ns.store_key(blocks[1]));
  v1->back() ^= 1;
  store.put(ns.store_key(blocks[1]), v1->data(), v1->size());
  const std::vector<kvkey::LoadResult> r = c.load_into(blocks, dests);
  CHECK(r[0].loaded());
  CHECK(r[0].nbytes == payload_bytes);
  for (std::size_t i = 0; i < 4; ++i) CHECK(std::equal(dst[i].begin(), dst[i].end(), whole.begin() + i * q));
  CHECK(r[1].status == kvkey::LoadResult::Status::rejected);
  CHECK(r[1].verdict.reason == Reason::payload_mismatch);
  for (std::size_t i = 4; i < 8; ++i) CHECK(dst[i] == Bytes(q, 0xA5));
  // A destination of another size: size_mismatch, untouched.
  Bytes small(payload_bytes - 1, 0x11);
  const auto r2 = c.load_into({blocks[0]}, std::vector<kvkey::MutableBuffer>{{small.data(), small.size()}});
  CHECK(r2[0].verdict.reason == Reason::size_mismatch);
  CHECK(small == Bytes(payload_bytes - 1, 0x11));
}

TEST_CASE("Connector serves the bytes it verified, whatever the store does with its buffers", "[connector]") {
  ArenaStore store;
  const kvkey::KeyNamespace<> ns(small_identity());
  const kvkey::Connector<> c(store, ns);
  const std::vector<kvkey::Digest> blocks = ns.block_hashes(kvkey_test::tokens(8));
  const Bytes p = pattern(payload_bytes, 9);
  REQUIRE(c.save(blocks, views({p, p})) == 2);
  std::vector<kvkey::LoadedView> got = c.load_views(blocks);
  store.scribble();  // the store reuses its arena
  REQUIRE(got[0].result.loaded());
  const auto* bytes = static_cast<const std::uint8_t*>(got[0].payload.data);
  CHECK(Bytes(bytes, bytes + got[0].payload.size) == p);  // copied before it was verified
  // A store that claims stability and then reuses its buffers breaks zero-copy.
  store.honest = false;
  got = c.load_views(blocks);
  store.scribble();
  bytes = static_cast<const std::uint8_t*>(got[0].payload.data);
  CHECK(Bytes(bytes, bytes + got[0].payload.size) != p);
}

TEST_CASE("Connector: store failures are misses, kept, logged at a bounded rate, or raised", "[connector]") {
  FailingStore store;
  const kvkey::KeyNamespace<> ns(small_identity());
  std::vector<kvkey::StoreFailureLog> lines;
  kvkey::Metrics m;
  kvkey::Connector<>::Options opt;
  opt.metrics = &m;
  opt.log = [&](const kvkey::StoreFailureLog& l) { lines.push_back(l); };
  opt.log_interval = std::chrono::hours(1);
  const kvkey::Connector<> c(store, {ns}, opt);
  const std::vector<kvkey::Digest> blocks = ns.block_hashes(kvkey_test::tokens(8));
  const Bytes p = pattern(payload_bytes, 2);
  REQUIRE(c.save(blocks, views({p, p})) == 2);
  CHECK(c.lookup(blocks) == 2);
  CHECK_FALSE(c.last_error());
  store.fail = true;
  CHECK(c.lookup(blocks) == 0);
  CHECK(c.load(blocks) == std::vector<std::optional<Bytes>>(2));
  CHECK(c.lookup(blocks) == 0);
  const kvkey::MetricsSnapshot s = m.snapshot();
  CHECK(s.store_error("timeout") == 2);
  CHECK(s.store_error("connection") == 1);
  CHECK(s.false_hits == 2);
  REQUIRE(lines.size() == 1);  // the first at once, the rest within the interval
  CHECK(lines[0].kind == "timeout");
  CHECK(lines[0].count == 1);
  REQUIRE(c.last_error());
  CHECK_THROWS_AS(std::rethrow_exception(c.last_error()), kvkey::store_error);

  opt.raise_errors = true;
  opt.log = nullptr;
  const kvkey::Connector<> raising(store, {ns}, opt);
  CHECK_THROWS_AS(raising.lookup(blocks), kvkey::store_error);
}

TEST_CASE("Connector checks replies: lengths, per-key failures, sizes", "[connector]") {
  struct Hostile : kvkey::MemoryStore {
    int mode = 0;
    std::vector<kvkey::StoreValue> read_prefix_many(const std::vector<std::string>& keys, std::size_t n) override {
      std::vector<kvkey::StoreValue> v = kvkey::MemoryStore::read_prefix_many(keys, n);
      if (mode == 1) v.pop_back();                                // one reply short
      if (mode == 2) v[1] = kvkey::StoreValue::failed("server");  // one key failed
      if (mode == 3) v[0].total_size = kvkey::envelope_size + 1;  // a size the header disagrees with
      return v;
    }
    std::vector<kvkey::StoreWrite> put_many(const std::vector<std::string>& keys,
                                            const std::vector<kvkey::StoreValue>& values) override {
      std::vector<kvkey::StoreWrite> w = kvkey::MemoryStore::put_many(keys, values);
      if (mode == 4) w.push_back({});  // too many entries
      return w;
    }
  };
  Hostile store;
  const kvkey::KeyNamespace<> ns(small_identity());
  kvkey::Metrics m;
  const kvkey::Connector<> c(store, ns, &m);
  const std::vector<kvkey::Digest> blocks = ns.block_hashes(kvkey_test::tokens(8));
  const Bytes p = pattern(payload_bytes, 4);
  REQUIRE(c.save(blocks, views({p, p})) == 2);
  store.mode = 1;
  CHECK(c.lookup(blocks) == 0);
  CHECK(m.snapshot().store_error("protocol") == 1);
  store.mode = 2;
  CHECK(c.lookup(blocks) == 1);  // block 0 stands
  CHECK(m.snapshot().store_error("server") == 1);
  store.mode = 3;
  CHECK(c.lookup(blocks) == 0);
  CHECK(m.snapshot().rejected(Reason::size_mismatch, "payload_size") == 1);
  store.mode = 4;
  CHECK(c.save(blocks, views({p, p})) == 0);
  CHECK(m.snapshot().save_failed == 2);
}

TEST_CASE("Connector::load_into: a store that reads into staging never writes the destinations", "[connector]") {
  struct IntoStore : kvkey::MemoryStore {
    std::vector<std::size_t> staged;
    bool reads_into() const noexcept override { return true; }
    std::vector<kvkey::StoreValue> read_into(const std::vector<std::string>& keys,
                                             const std::vector<kvkey::MutableBuffer>& staging) override {
      std::vector<kvkey::StoreValue> out(keys.size());
      for (std::size_t i = 0; i < keys.size(); ++i) {
        staged.push_back(staging[i].size);
        const std::optional<Bytes> v = get(keys[i]);
        if (!v) continue;
        std::memcpy(staging[i].data, v->data(), std::min(v->size(), staging[i].size));
        out[i].present = true;
        out[i].data = static_cast<const std::uint8_t*>(staging[i].data);
        out[i].size = v->size();
      }
      return out;
    }
  };
  IntoStore store;
  const kvkey::KeyNamespace<> ns(small_identity());
  const kvkey::Connector<> c(store, ns);
  const std::vector<kvkey::Digest> blocks = ns.block_hashes(kvkey_test::tokens(12));
  const Bytes p = pattern(payload_bytes, 6);
  REQUIRE(c.save(blocks, views({p, p, p})) == 3);
  std::optional<Bytes> v1 = store.get(ns.store_key(blocks[1]));
  v1->back() ^= 1;  // a flipped payload bit
  store.put(ns.store_key(blocks[1]), v1->data(), v1->size());
  std::optional<Bytes> v2 = store.get(ns.store_key(blocks[2]));
  v2->push_back(0);  // one byte longer than staging
  store.put(ns.store_key(blocks[2]), v2->data(), v2->size());
  std::vector<Bytes> dst(3, Bytes(payload_bytes, 0xEE));
  std::vector<kvkey::MutableBuffer> d;
  for (Bytes& b : dst) d.push_back({b.data(), b.size()});
  const auto r = c.load_into(blocks, d);
  CHECK(store.staged == std::vector<std::size_t>(3, kvkey::envelope_size + payload_bytes));
  CHECK(r[0].loaded());
  CHECK(dst[0] == p);
  CHECK(r[1].verdict.reason == Reason::payload_mismatch);
  CHECK(r[2].verdict.reason == Reason::size_mismatch);
  CHECK(dst[1] == Bytes(payload_bytes, 0xEE));
  CHECK(dst[2] == Bytes(payload_bytes, 0xEE));
}
