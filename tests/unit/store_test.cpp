// The store protocol (kvkey/store.hpp), the generic connector
// (kvkey/connector.hpp) and the conformance kit (kvkey/testing.hpp): a correct
// store passes every case; stores that lose, truncate or mix up values fail
// the cases that catch them, and none of them ever yields a wrong load.
#include "support/fixtures.hpp"

#include <kvkey/connector.hpp>
#include <kvkey/store.hpp>
#include <kvkey/testing.hpp>

#include <catch2/catch.hpp>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace {

using kvkey::Bytes;

// A store that forgets every put.
class ForgetfulStore : public kvkey::MemoryStore {
 public:
  void put(std::string_view, const std::uint8_t*, std::size_t) override {}
};

// A store that keeps only the first 1500 bytes of each value (the header and most of the payload).
class TruncatingStore : public kvkey::MemoryStore {
 public:
  void put(std::string_view key, const std::uint8_t* data, std::size_t size) override {
    MemoryStore::put(key, data, size < 1500 ? size : 1500);
  }
};

// A store whose reads return the value of whichever key was written last.
class LastValueStore : public kvkey::MemoryStore {
 public:
  void put(std::string_view key, const std::uint8_t* data, std::size_t size) override {
    MemoryStore::put(key, data, size);
    MemoryStore::put("last", data, size);
  }
  std::optional<Bytes> get(std::string_view key) override {
    return MemoryStore::exists(key) ? MemoryStore::get("last") : std::nullopt;
  }
  std::optional<Bytes> get_prefix(std::string_view key, std::size_t n) override {
    return MemoryStore::exists(key) ? MemoryStore::get_prefix("last", n) : std::nullopt;
  }
};

// A store without ranged reads: get_prefix returns the whole value (allowed).
class WholeValueStore : public kvkey::MemoryStore {
 public:
  std::optional<Bytes> get_prefix(std::string_view key, std::size_t) override { return get(key); }
};

template <class S>
kvkey::testing::StoreReport check() {
  kvkey::testing::CheckOptions options;
  options.race_rounds = 5;
  return kvkey::testing::check_store([] { return std::make_unique<S>(); }, options);
}

}  // namespace

TEST_CASE("check_store: MemoryStore passes every case", "[store]") {
  const kvkey::testing::StoreReport r = check<kvkey::MemoryStore>();
  INFO(r.summary());
  CHECK(r.ok);
  CHECK(r.wrong_loads == 0);
  CHECK(r.bad_headers_counted == 0);
  CHECK(r.lost == 0);
  // the matrix: one foreign-object case per salient field and the shard, and the named faults
  for (const std::string_view field : kvkey::identity_field_names()) {
    CHECK(r.find("foreign_object." + std::string(field)) != nullptr);
  }
  for (const char* name :
       {"foreign_object.shard", "roundtrip", "roundtrip_keyed", "epoch_bump", "cross_tenant", "keyed_reads_plain",
        "plain_reads_keyed", "header_bit_flip", "payload_bit_flip", "torn_value", "truncated_value", "empty_value",
        "non_kvkey_value", "transplanted_header", "swapped_values", "other_format_version",
        "stale_writer_races_epoch_bump", "concurrent_writers"}) {
    INFO(name);
    CHECK(r.find(name) != nullptr);
  }
  CHECK(r.find("no such case") == nullptr);
}

TEST_CASE("check_store: a shared store passes too (cases use distinct keys)", "[store]") {
  auto shared = std::make_shared<kvkey::MemoryStore>();
  const kvkey::testing::StoreReport r = kvkey::testing::check_store([shared] { return shared; });
  INFO(r.summary());
  CHECK(r.ok);
  CHECK(shared->size() > 100);
}

TEST_CASE("check_store: a store without ranged reads passes", "[store]") {
  const kvkey::testing::StoreReport r = check<WholeValueStore>();
  INFO(r.summary());
  CHECK(r.ok);
}

TEST_CASE("check_store: stores that lose data fail, without a wrong load", "[store]") {
  SECTION("forgetful") {
    const kvkey::testing::StoreReport r = check<ForgetfulStore>();
    CHECK_FALSE(r.ok);
    CHECK(r.lost > 0);
    CHECK_FALSE(r.find("roundtrip")->ok);
    CHECK(r.find("roundtrip")->detail == "lookup counted 0 blocks, 6 are intact");
    CHECK(r.wrong_loads == 0);
    CHECK(r.bad_headers_counted == 0);
  }
  SECTION("truncating") {
    const kvkey::testing::StoreReport r = check<TruncatingStore>();
    CHECK_FALSE(r.find("roundtrip")->ok);
    // MemoryStore reports each value's size, so the lookup already refuses the cut values.
    CHECK(r.find("roundtrip")->detail == "lookup counted 0 blocks, 6 are intact");
    CHECK(r.wrong_loads == 0);
  }
  SECTION("mixing up keys") {
    const kvkey::testing::StoreReport r = check<LastValueStore>();
    CHECK_FALSE(r.find("roundtrip")->ok);
    CHECK(r.wrong_loads == 0);
    CHECK(r.bad_headers_counted == 0);
  }
}

TEST_CASE("check_store: an exception from the store fails its case", "[store]") {
  struct Broken : kvkey::MemoryStore {
    std::optional<Bytes> get(std::string_view) override { throw std::runtime_error("connection refused"); }
  };
  const kvkey::testing::StoreReport r = check<Broken>();
  CHECK_FALSE(r.ok);
  CHECK(r.find("roundtrip")->detail == "exception: connection refused");
}

TEST_CASE("Connector over a MemoryStore", "[store]") {
  kvkey::MemoryStore store;
  const kvkey::KeyNamespace<> ns(kvkey_test::unsized_identity());  // payloads of any size
  const kvkey::Connector<> c(store, ns);
  const std::vector<kvkey::Digest> blocks = ns.block_hashes(kvkey_test::tokens(64));
  REQUIRE(blocks.size() == 4);
  const Bytes p0(100, 1), p1(200, 2), p2(300, 3);
  c.save({blocks[0], blocks[1], blocks[2]}, {kvkey::Payload(p0.data(), p0.size()), kvkey::Payload(p1.data(), p1.size()),
                                             kvkey::Payload(p2.data(), p2.size())});
  CHECK(c.lookup(blocks) == 3);
  CHECK(c.lookup_existing(blocks) == 3);
  const auto loads = c.load(blocks);
  CHECK(loads[0] == p0);
  CHECK(loads[2] == p2);
  CHECK_FALSE(loads[3]);
  CHECK(c.load(blocks[1]) == p1);

  SECTION("a foreign value counts for existence only") {
    kvkey::Identity other = kvkey_test::unsized_identity();
    other.kv.dtype = kvkey::KvDtype::uint8;
    const Bytes foreign = kvkey::KeyNamespace<>(other).seal_value(blocks[1], kvkey::Payload(p1.data(), p1.size()));
    store.put(ns.store_key(blocks[1]), foreign.data(), foreign.size());
    CHECK(c.lookup(blocks) == 1);
    CHECK(c.lookup_existing(blocks) == 3);
    CHECK_FALSE(c.load(blocks[1]));
  }
  SECTION("MemoryStore basics") {
    CHECK(store.exists(ns.store_key(blocks[0])));
    CHECK(store.get_prefix(ns.store_key(blocks[0]), 10)->size() == 10);
    CHECK(store.get_prefix(ns.store_key(blocks[0]), 1 << 20)->size() == kvkey::envelope_size + 100);
    CHECK(store.remove(ns.store_key(blocks[0])));
    CHECK_FALSE(store.remove(ns.store_key(blocks[0])));
    CHECK_FALSE(store.get(ns.store_key(blocks[0])));
    CHECK(c.lookup(blocks) == 0);
  }
  CHECK_THROWS_AS(c.save({blocks[0]}, {}), kvkey::input_error);
}

TEST_CASE("lookup_all_ranks counts a block only when every rank's header verifies", "[store]") {
  kvkey::MemoryStore store;
  kvkey::Identity id = kvkey_test::unsized_identity();  // 4 KV heads
  id.shard.tp_size = 2;
  const kvkey::KeyNamespace<> rank0(id);
  id.shard.tp_rank = 1;
  const kvkey::KeyNamespace<> rank1(id);
  const std::vector<kvkey::Digest> blocks = rank0.block_hashes(kvkey_test::tokens(64));
  REQUIRE(blocks == rank1.block_hashes(kvkey_test::tokens(64)));
  const Bytes p(64, 9);
  const kvkey::Connector<> c0(store, rank0), c1(store, rank1);
  for (std::size_t i = 0; i < blocks.size(); ++i) c0.save(blocks[i], kvkey::Payload(p.data(), p.size()));
  for (std::size_t i = 0; i < 2; ++i) c1.save(blocks[i], kvkey::Payload(p.data(), p.size()));
  CHECK(c0.lookup(blocks) == 4);
  CHECK(c1.lookup(blocks) == 2);
  CHECK(kvkey::lookup_all_ranks<kvkey::Sha256>(store, {&rank0, &rank1}, blocks) == 2);
  // rank 0's value under rank 1's key for block 2: the slice differs, so it does not count
  const Bytes v = rank0.seal_value(blocks[2], kvkey::Payload(p.data(), p.size()));
  store.put(rank1.store_key(blocks[2]), v.data(), v.size());
  CHECK(kvkey::lookup_all_ranks<kvkey::Sha256>(store, {&rank0, &rank1}, blocks) == 2);
  c1.save(blocks[2], kvkey::Payload(p.data(), p.size()));
  CHECK(kvkey::lookup_all_ranks<kvkey::Sha256>(store, {&rank0, &rank1}, blocks) == 3);
  CHECK(kvkey::lookup_all_ranks<kvkey::Sha256>(store, {}, blocks) == 0);
}
