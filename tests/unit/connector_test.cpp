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
}

TEST_CASE("Connector::load_into: destinations that cannot hold a payload are the caller's error", "[connector]") {
  kvkey::MemoryStore store;
  const kvkey::KeyNamespace<> ns(small_identity());
  kvkey::Metrics m;
  const kvkey::Connector<> c(store, ns, &m);
  const std::vector<kvkey::Digest> blocks = ns.block_hashes(kvkey_test::tokens(8));
  const Bytes p = pattern(payload_bytes, 3);
  REQUIRE(c.save(blocks, views({p, p})) == 2);
  REQUIRE(c.lookup(blocks) == 2);
  const kvkey::MetricsSnapshot before = m.snapshot();
  Bytes good(payload_bytes, 0x11), small(payload_bytes - 1, 0x11), big(payload_bytes + 1, 0x11);
  for (Bytes* wrong : {&small, &big}) {
    const std::vector<kvkey::MutableBuffer> d = {{good.data(), good.size()}, {wrong->data(), wrong->size()}};
    try {
      (void)c.load_into(blocks, d);
      FAIL("no input_error");
    } catch (const kvkey::input_error& e) {
      CHECK(e.field() == "buffers");
      CHECK(std::string(e.what()).find("buffers[1] holds " + std::to_string(wrong->size())) != std::string::npos);
    }
  }
  // Nothing was read, nothing written, nothing counted (no rejection, no false hit).
  CHECK(good == Bytes(payload_bytes, 0x11));
  const kvkey::MetricsSnapshot s = m.snapshot();
  CHECK(s.load_loaded == before.load_loaded);
  CHECK(s.load_rejected == before.load_rejected);
  CHECK(s.load_missing == before.load_missing);
  CHECK(s.false_hits == before.false_hits);
}

TEST_CASE("Connector::load_into: destinations that share memory are the caller's error", "[connector]") {
  kvkey::MemoryStore store;
  const kvkey::KeyNamespace<> ns(small_identity());
  kvkey::Metrics m;
  const kvkey::Connector<> c(store, ns, &m);
  const std::vector<kvkey::Digest> blocks = ns.block_hashes(kvkey_test::tokens(8));
  REQUIRE(c.save(blocks, views({pattern(payload_bytes, 3), pattern(payload_bytes, 4)})) == 2);
  const kvkey::MetricsSnapshot before = m.snapshot();
  Bytes mem(3 * payload_bytes, 0x11);
  std::uint8_t* b = mem.data();
  const std::size_t half = payload_bytes / 2;
  struct Case {
    std::vector<std::vector<kvkey::MutableBuffer>> d;
    std::string named;
  };
  const std::vector<Case> cases = {
      {{{{b, payload_bytes}}, {{b, payload_bytes}}}, "buffers[1] overlaps buffers[0]"},         // one buffer twice
      {{{{b + half, payload_bytes}}, {{b, payload_bytes}}}, "buffers[1] overlaps buffers[0]"},  // a half
      {{{{b, half}, {b + half - 1, payload_bytes - half}}, {{b + payload_bytes, payload_bytes}}},
       "buffers[0][1] overlaps buffers[0][0]"},  // one byte, two parts of one block
      {{{{b + 2 * half, half}, {b + 3 * half, half}}, {{b, half}, {b + 3 * half + 1, half}}},
       "buffers[1][1] overlaps buffers[0][1]"},  // one block's part reaching into another's
  };
  for (const Case& k : cases) {
    try {
      (void)c.load_into(blocks, k.d);
      FAIL("no input_error for " + k.named);
    } catch (const kvkey::input_error& e) {
      CHECK(e.field() == "buffers");
      CHECK(std::string(e.what()).find(k.named) != std::string::npos);
    }
  }
  CHECK(mem == Bytes(3 * payload_bytes, 0x11));
  const kvkey::MetricsSnapshot s = m.snapshot();
  CHECK(s.load_loaded == before.load_loaded);
  CHECK(s.load_rejected == before.load_rejected);
  CHECK(s.false_hits == before.false_hits);
  // Adjacent, not overlapping: loaded.
  const std::vector<kvkey::MutableBuffer> adjacent = {{b, payload_bytes}, {b + payload_bytes, payload_bytes}};
  const auto r = c.load_into(blocks, adjacent);
  CHECK((r[0].loaded() && r[1].loaded()));
  CHECK(Bytes(b, b + payload_bytes) == pattern(payload_bytes, 3));
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

namespace {

// A store with registered memory: values move only between its map and memory
// registered with it (a write from, or a read into, anything else fails the
// test), as Mooncake's batch_upsert_from and batch_get_into do.
struct RegisteringStore : kvkey::MemoryStore {
  struct Region : kvkey::RegisteredMemory {
    Region(RegisteringStore& s, kvkey::MutableBuffer b, std::shared_ptr<void> keep)
        : kvkey::RegisteredMemory(b, std::move(keep)), store(&s) {
      store->live.push_back(this);
    }
    ~Region() override { store->live.erase(std::find(store->live.begin(), store->live.end(), this)); }
    RegisteringStore* store;
  };
  std::vector<const Region*> live;
  std::size_t writes = 0, reads = 0, outside = 0;
  bool fail = false;

  bool registers_memory() const noexcept override { return true; }
  std::shared_ptr<kvkey::RegisteredMemory> register_memory(kvkey::MutableBuffer m) override {
    return std::make_shared<Region>(*this, m, nullptr);
  }
  std::shared_ptr<kvkey::RegisteredMemory> allocate_memory(std::size_t size) override {
    std::shared_ptr<std::uint8_t[]> bytes(new std::uint8_t[size]());
    return std::make_shared<Region>(*this, kvkey::MutableBuffer{bytes.get(), size}, bytes);
  }
  bool registered(const void* p, std::size_t n) const {
    return std::any_of(live.begin(), live.end(), [&](const Region* r) { return r->contains(p, n); });
  }
  std::vector<kvkey::StoreWrite> write_from(const std::vector<std::string>& keys,
                                            const std::vector<kvkey::ConstBuffer>& values) override {
    ++writes;
    if (fail) throw kvkey::store_error("connection", "gone");
    for (std::size_t i = 0; i < keys.size(); ++i) {
      if (!registered(values[i].data, values[i].size)) ++outside;
      put(keys[i], static_cast<const std::uint8_t*>(values[i].data), values[i].size);
    }
    return std::vector<kvkey::StoreWrite>(keys.size());
  }
  std::vector<kvkey::StoreValue> read_into(const std::vector<std::string>& keys,
                                           const std::vector<kvkey::MutableBuffer>& into) override {
    ++reads;
    if (fail) throw kvkey::store_error("timeout", "late");
    std::vector<kvkey::StoreValue> out(keys.size());
    for (std::size_t i = 0; i < keys.size(); ++i) {
      if (!registered(into[i].data, into[i].size)) ++outside;
      const std::optional<Bytes> v = get(keys[i]);
      if (!v) continue;
      std::memcpy(into[i].data, v->data(), std::min(v->size(), into[i].size));
      out[i].present = true;
      out[i].data = static_cast<const std::uint8_t*>(into[i].data);
      out[i].size = v->size();
    }
    return out;
  }
};

}  // namespace

TEST_CASE("Connector zero-copy path: sealed in place, written from and read into registered memory", "[connector]") {
  RegisteringStore store;
  const kvkey::KeyNamespace<> ns(small_identity());
  kvkey::Metrics m;
  const kvkey::Connector<> c(store, ns, &m);
  const std::vector<kvkey::Digest> blocks = ns.block_hashes(kvkey_test::tokens(16));
  REQUIRE(blocks.size() == 4);
  kvkey::Slots out(store, 4, payload_bytes);
  CHECK(store.live.size() == 1);
  CHECK(out.stride() == kvkey::envelope_size + payload_bytes);
  std::vector<Bytes> ps;
  for (std::uint8_t i = 0; i < 4; ++i) {
    ps.push_back(pattern(payload_bytes, static_cast<std::uint8_t>(10 + i)));
    std::memcpy(out.payload(i).data, ps[i].data(), payload_bytes);
  }
  // Block n in slot 3 - n: the indices say which.
  CHECK(c.save_from(blocks, out, {3, 2, 1, 0}) == 4);
  CHECK(store.writes == 1);
  CHECK(store.outside == 0);
  for (std::size_t n = 0; n < 4; ++n) {
    const std::optional<Bytes> v = store.get(ns.store_key(blocks[n]));
    REQUIRE(v);
    CHECK(ns.open_value(*v, blocks[n]).ok());
    CHECK(Bytes(v->begin() + kvkey::envelope_size, v->end()) == ps[3 - n]);  // the payload as it lay, not copied
    const auto* h = static_cast<const std::uint8_t*>(out.header(3 - n).data);
    CHECK(Bytes(h, h + kvkey::envelope_size) == Bytes(v->begin(), v->begin() + kvkey::envelope_size));
  }
  CHECK(c.lookup(blocks) == 4);

  // Damage: block 1's payload flipped, block 2 too long, block 3 removed.
  std::optional<Bytes> v1 = store.get(ns.store_key(blocks[1]));
  v1->back() ^= 1;
  store.put(ns.store_key(blocks[1]), v1->data(), v1->size());
  std::optional<Bytes> v2 = store.get(ns.store_key(blocks[2]));
  v2->push_back(0);
  store.put(ns.store_key(blocks[2]), v2->data(), v2->size());
  (void)store.remove(ns.store_key(blocks[3]));
  kvkey::Slots in(store, 4, payload_bytes);
  const kvkey::MetricsSnapshot before = m.snapshot();
  const std::vector<kvkey::LoadResult> r = c.load_into(blocks, in);
  CHECK(store.reads == 1);
  CHECK(store.outside == 0);
  REQUIRE(r.size() == 4);
  CHECK(r[0].loaded());
  CHECK(r[0].nbytes == payload_bytes);
  const auto* p0 = static_cast<const std::uint8_t*>(in.payload(0).data);
  CHECK(Bytes(p0, p0 + payload_bytes) == ps[3]);
  CHECK(r[1].verdict.reason == Reason::payload_mismatch);
  CHECK(r[2].verdict.reason == Reason::size_mismatch);
  CHECK(r[3].status == kvkey::LoadResult::Status::missing);
  // The one metrics rule: three of the four counted by the lookup are false hits.
  const kvkey::MetricsSnapshot s = m.snapshot();
  CHECK(s.load_loaded - before.load_loaded == 1);
  CHECK(s.load_rejected - before.load_rejected == 2);
  CHECK(s.load_missing - before.load_missing == 1);
  CHECK(s.false_hits - before.false_hits == 3);
  CHECK(s.payload_verified_bytes - before.payload_verified_bytes == payload_bytes);

  // The caller's errors, before anything is read or written.
  const std::size_t reads = store.reads;
  CHECK_THROWS_AS(c.load_into(blocks, in, {0, 1, 2}), kvkey::input_error);      // 3 indices for 4 blocks
  CHECK_THROWS_AS(c.load_into(blocks, in, {0, 1, 1, 2}), kvkey::input_error);   // a slot twice
  CHECK_THROWS_AS(c.save_from(blocks, out, {0, 1, 2, 4}), kvkey::input_error);  // out of range
  kvkey::Slots other(store, 4, payload_bytes + 8);
  CHECK_THROWS_AS(c.save_from(blocks, other), kvkey::input_error);  // not this deployment's payload size
  CHECK(store.reads == reads);
  CHECK(store.writes == 1);

  // The one last-error rule: a failed call is a miss for every block, kept.
  store.fail = true;
  CHECK(c.save_from(blocks, out) == 0);
  const std::vector<kvkey::LoadResult> f = c.load_into(blocks, in);
  CHECK(std::none_of(f.begin(), f.end(), [](const kvkey::LoadResult& x) { return x.loaded(); }));
  REQUIRE(c.last_error());
  CHECK(m.snapshot().store_error("timeout") == 1);
  CHECK(m.snapshot().store_error("connection") == 1);
}

TEST_CASE("Connector through staging slots: gathered into them, verified there, scattered out", "[connector]") {
  RegisteringStore store;
  const kvkey::KeyNamespace<> ns(small_identity());
  kvkey::Metrics m;
  const kvkey::Connector<> c(store, ns, &m);
  const std::vector<kvkey::Digest> blocks = ns.block_hashes(kvkey_test::tokens(12));
  REQUIRE(blocks.size() == 3);
  // An engine's KV rows: block n's payload is its slice of each of two rows.
  constexpr std::size_t half = payload_bytes / 2;
  Bytes row0 = pattern(3 * half, 1), row1 = pattern(3 * half, 77);
  const auto parts_of = [&](Bytes& r0, Bytes& r1, std::size_t n) {
    return std::vector<kvkey::MutableBuffer>{{r0.data() + n * half, half}, {r1.data() + n * half, half}};
  };
  std::vector<std::vector<kvkey::ConstBuffer>> src;
  for (std::size_t n = 0; n < 3; ++n) {
    src.push_back({{row0.data() + n * half, half}, {row1.data() + n * half, half}});
  }
  std::vector<kvkey::Payload> payloads;
  for (const auto& s : src) payloads.emplace_back(s.data(), s.size());
  kvkey::Slots staging(store, 4, payload_bytes);
  CHECK(c.save(blocks, payloads, staging, {2, 0, 3}) == 3);
  CHECK(store.writes == 1);
  CHECK(store.outside == 0);  // written from the registered slots
  for (std::size_t n = 0; n < 3; ++n) {
    const std::optional<Bytes> v = store.get(ns.store_key(blocks[n]));
    REQUIRE(v);
    Bytes want(payload_bytes);
    std::memcpy(want.data(), row0.data() + n * half, half);
    std::memcpy(want.data() + half, row1.data() + n * half, half);
    CHECK(v == ns.seal_value(blocks[n], kvkey::Payload(want.data(), want.size())));  // what save would store
  }

  // Block 1 damaged: blocks 0 and 2 land in their slices of the rows, block 1's stay as they were.
  std::optional<Bytes> v1 = store.get(ns.store_key(blocks[1]));
  v1->back() ^= 1;
  store.put(ns.store_key(blocks[1]), v1->data(), v1->size());
  Bytes in0(3 * half, 0xEE), in1(3 * half, 0xEE);
  std::vector<std::vector<kvkey::MutableBuffer>> dest;
  for (std::size_t n = 0; n < 3; ++n) dest.push_back(parts_of(in0, in1, n));
  const std::size_t reads = store.reads;
  const std::vector<kvkey::LoadResult> r = c.load_into(blocks, dest, staging, {3, 1, 0});
  CHECK(store.reads == reads + 1);
  CHECK(store.outside == 0);  // read into the registered slots
  REQUIRE(r.size() == 3);
  CHECK(r[0].loaded());
  CHECK(r[1].verdict.reason == Reason::payload_mismatch);
  CHECK(r[2].loaded());
  for (std::size_t n : {0, 2}) {
    CHECK(std::equal(in0.begin() + static_cast<std::ptrdiff_t>(n * half),
                     in0.begin() + static_cast<std::ptrdiff_t>((n + 1) * half),
                     row0.begin() + static_cast<std::ptrdiff_t>(n * half)));
    CHECK(std::equal(in1.begin() + static_cast<std::ptrdiff_t>(n * half),
                     in1.begin() + static_cast<std::ptrdiff_t>((n + 1) * half),
                     row1.begin() + static_cast<std::ptrdiff_t>(n * half)));
  }
  CHECK(std::all_of(in0.begin() + static_cast<std::ptrdiff_t>(half),
                    in0.begin() + static_cast<std::ptrdiff_t>(2 * half), [](std::uint8_t b) { return b == 0xEE; }));
  CHECK(std::all_of(in1.begin() + static_cast<std::ptrdiff_t>(half),
                    in1.begin() + static_cast<std::ptrdiff_t>(2 * half), [](std::uint8_t b) { return b == 0xEE; }));
  CHECK(m.snapshot().load_rejected == 1);

  // The caller's errors, before anything is read or written.
  const std::size_t before_reads = store.reads, before_writes = store.writes;
  auto in_slots = dest;
  in_slots[2][1] = {static_cast<std::uint8_t*>(staging.payload(3).data), half};  // a destination inside the slots
  CHECK_THROWS_WITH(c.load_into(blocks, in_slots, staging), Catch::Contains("buffers[2][1] lies in the staging slots"));
  std::vector<kvkey::ConstBuffer> inside{{staging.payload(1).data, payload_bytes}};
  std::vector<kvkey::Payload> bad = payloads;
  bad[0] = kvkey::Payload(inside.data(), inside.size());
  CHECK_THROWS_WITH(c.save(blocks, bad, staging), Catch::Contains("payloads[0][0] lies in the staging slots"));
  auto short_dest = dest;
  short_dest[1].pop_back();
  CHECK_THROWS_AS(c.load_into(blocks, short_dest, staging), kvkey::input_error);       // not a payload's size
  CHECK_THROWS_AS(c.load_into(blocks, dest, staging, {0, 0, 1}), kvkey::input_error);  // a slot twice
  kvkey::Slots two(store, 2, payload_bytes);
  CHECK_THROWS_AS(c.save(blocks, payloads, two), kvkey::input_error);  // 3 blocks, 2 slots
  kvkey::Slots other(store, 4, payload_bytes + 8);
  CHECK_THROWS_AS(c.load_into(blocks, dest, other), kvkey::input_error);  // not this deployment's payload size
  CHECK(store.reads == before_reads);
  CHECK(store.writes == before_writes);
}

TEST_CASE("Connector digest_threads: the same values, verdicts, bytes and counts as one thread", "[connector]") {
  // 128 KiB blocks: a save or load of twelve is past parallel_digest_bytes.
  kvkey::Identity id = kvkey_test::base_identity();
  id.kv = kvkey::Kv{kvkey::KvDtype::bf16, kvkey::Quant{}, 16, 4, 4, 128, "kvkey.test.v1", false};
  const kvkey::KeyNamespace<> ns(id);
  const std::size_t size = 2 * 4 * 4 * 128 * 16 * 2;
  REQUIRE(ns.payload_size() == size);
  REQUIRE(12 * size >= kvkey::Connector<>::parallel_digest_bytes);
  RegisteringStore store;
  const std::vector<kvkey::Digest> blocks = ns.block_hashes(kvkey_test::tokens(12 * 16));
  std::vector<Bytes> ps;
  for (std::uint8_t i = 0; i < 12; ++i) ps.push_back(pattern(size, static_cast<std::uint8_t>(3 * i + 1)));
  REQUIRE(kvkey::Connector<>(store, ns).save(blocks, views(ps)) == 12);
  for (std::size_t n : {3, 7}) {  // a flipped byte, a value one byte short
    std::optional<Bytes> v = store.get(ns.store_key(blocks[n]));
    if (n == 3) v->at(kvkey::envelope_size + 5) ^= 0x10;
    if (n == 7) v->pop_back();
    store.put(ns.store_key(blocks[n]), v->data(), v->size());
  }
  (void)store.remove(ns.store_key(blocks[10]));

  struct Run {
    std::vector<kvkey::LoadResult> slots, staged, plain;
    std::vector<Bytes> staged_out, plain_out;
    kvkey::MetricsSnapshot metrics;
    std::vector<std::optional<Bytes>> saved_staged, saved_from;  // what each save path stored
  };
  const auto run = [&](unsigned threads) {
    kvkey::Metrics m;
    kvkey::Connector<>::Options o;
    o.metrics = &m;
    o.digest_threads = threads;
    const kvkey::Connector<> c(store, {ns}, o);
    Run out;
    kvkey::Slots slots(store, 12, size);
    out.slots = c.load_into(blocks, slots);
    out.staged_out.assign(12, Bytes(size, 0xEE));
    out.plain_out.assign(12, Bytes(size, 0xEE));
    std::vector<std::vector<kvkey::MutableBuffer>> a, b;
    for (std::size_t n = 0; n < 12; ++n) {
      a.push_back({{out.staged_out[n].data(), size / 2}, {out.staged_out[n].data() + size / 2, size / 2}});
      b.push_back({{out.plain_out[n].data(), size}});
    }
    out.staged = c.load_into(blocks, a, slots);
    out.plain = c.load_into(blocks, b);
    out.metrics = m.snapshot();
    RegisteringStore written;
    const kvkey::Connector<> w(written, {ns}, o);
    kvkey::Slots staging(written, 12, size);
    std::vector<std::vector<kvkey::ConstBuffer>> halves;
    for (const Bytes& p : ps) halves.push_back({{p.data(), size / 2}, {p.data() + size / 2, size / 2}});
    std::vector<kvkey::Payload> parts;
    for (const auto& h : halves) parts.emplace_back(h.data(), h.size());
    REQUIRE(w.save(blocks, parts, staging) == 12);
    for (const kvkey::Digest& h : blocks) out.saved_staged.push_back(written.get(ns.store_key(h)));
    for (std::size_t n = 0; n < 12; ++n) std::memcpy(staging.payload(11 - n).data, ps[n].data(), size);
    std::vector<std::size_t> reversed;
    for (std::size_t n = 0; n < 12; ++n) reversed.push_back(11 - n);
    REQUIRE(w.save_from(blocks, staging, reversed) == 12);
    for (const kvkey::Digest& h : blocks) out.saved_from.push_back(written.get(ns.store_key(h)));
    return out;
  };
  const Run one = run(1);
  for (unsigned threads : {2U, 3U}) {
    const Run many = run(threads);
    for (auto which : {&Run::slots, &Run::staged, &Run::plain}) {
      const std::vector<kvkey::LoadResult>& x = one.*which;
      const std::vector<kvkey::LoadResult>& y = many.*which;
      REQUIRE(x.size() == y.size());
      for (std::size_t n = 0; n < x.size(); ++n) {
        CHECK(x[n].status == y[n].status);
        CHECK(x[n].verdict.reason == y[n].verdict.reason);
        CHECK(x[n].verdict.field == y[n].verdict.field);
        CHECK(x[n].nbytes == y[n].nbytes);
      }
    }
    CHECK(many.saved_staged == one.saved_staged);
    CHECK(many.saved_from == one.saved_from);
    CHECK(many.staged_out == one.staged_out);
    CHECK(many.plain_out == one.plain_out);
    CHECK(many.metrics.load_loaded == one.metrics.load_loaded);
    CHECK(many.metrics.load_rejected == one.metrics.load_rejected);
    CHECK(many.metrics.load_missing == one.metrics.load_missing);
    CHECK(many.metrics.payload_verified_bytes == one.metrics.payload_verified_bytes);
  }
  CHECK(one.metrics.load_loaded == 3 * 9);
  CHECK(one.metrics.load_rejected == 3 * 2);
  CHECK(one.staged_out[3] == Bytes(size, 0xEE));
  CHECK(one.staged_out[4] == ps[4]);
  CHECK(one.plain_out[11] == ps[11]);
  for (std::size_t n = 0; n < 12; ++n) {
    CHECK(one.saved_staged[n] == ns.seal_value(blocks[n], kvkey::Payload(ps[n].data(), size)));
    CHECK(one.saved_from[n] == one.saved_staged[n]);
  }
  kvkey::Connector<>::Options zero;
  zero.digest_threads = 0;
  CHECK_THROWS_WITH(kvkey::Connector<>(store, {ns}, zero), Catch::Contains("digest_threads"));
}

TEST_CASE("Connector zero-copy path over a store without registered memory", "[connector]") {
  kvkey::MemoryStore store;
  const kvkey::KeyNamespace<> ns(small_identity());
  const kvkey::Connector<> c(store, ns);
  const std::vector<kvkey::Digest> blocks = ns.block_hashes(kvkey_test::tokens(8));
  Bytes engine(2 * (kvkey::envelope_size + payload_bytes), 0);
  kvkey::Slots slots(store, kvkey::MutableBuffer{engine.data(), engine.size()}, 2, payload_bytes);
  const Bytes p = pattern(payload_bytes, 9);
  std::memcpy(slots.payload(0).data, p.data(), p.size());
  std::memcpy(slots.payload(1).data, p.data(), p.size());
  CHECK(c.save_from(blocks, slots) == 2);
  CHECK(c.load(blocks[1]) == p);
  std::memset(engine.data(), 0, engine.size());
  const auto r = c.load_into(blocks, slots);
  CHECK(r[0].loaded());
  CHECK(r[1].loaded());
  CHECK(Bytes(engine.end() - static_cast<std::ptrdiff_t>(payload_bytes), engine.end()) == p);
  CHECK_THROWS_AS(kvkey::Slots(store, kvkey::MutableBuffer{engine.data(), engine.size() - 1}, 2, payload_bytes),
                  kvkey::input_error);
  CHECK_THROWS_AS(kvkey::Slots(store, 0, payload_bytes), kvkey::input_error);
}

TEST_CASE("seal_value in place seals the payload where it lies, as a copy would", "[connector]") {
  const kvkey::KeyNamespace<> ns(small_identity());
  const kvkey::Digest block = ns.block_hashes(kvkey_test::tokens(4))[0];
  const Bytes p = pattern(payload_bytes, 4);
  Bytes value(kvkey::envelope_size + payload_bytes, 0);
  std::memcpy(value.data() + kvkey::envelope_size, p.data(), p.size());
  CHECK(ns.seal_value(block, kvkey::Payload(value.data() + kvkey::envelope_size, p.size()), value.data(),
                      value.size()) == value.size());
  CHECK(Bytes(value.begin() + kvkey::envelope_size, value.end()) == p);
  CHECK(ns.open_value(value, block).ok());
  CHECK(ns.open_value(ns.seal_value(block, kvkey::Payload(p.data(), p.size())), block).ok());
}
