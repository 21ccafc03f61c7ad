// The store protocol (kvkey/store.hpp), the generic connector
// (kvkey/connector.hpp) and the conformance kit (kvkey/testing.hpp): a correct
// store passes every case; stores that lose, truncate or mix up values fail
// the cases that catch them, and none of them ever yields a wrong load.
#include "support/fixtures.hpp"

#include <kvkey/connector.hpp>
#include <kvkey/store.hpp>
#include <kvkey/testing.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
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

// A zero-copy store whose reads land in one arena, reused by the next read.
// `honest`: it says so (stable = false, the connector copies); otherwise it
// claims the bytes are stable.
template <bool honest>
class RecyclingStore : public kvkey::MemoryStore {
 public:
  std::vector<kvkey::StoreValue> read_many(const std::vector<std::string>& keys) override {
    return into_arena(get_many(keys));
  }
  std::vector<kvkey::StoreValue> read_prefix_many(const std::vector<std::string>& keys, std::size_t n) override {
    return into_arena(get_prefix_many(keys, n));
  }

 private:
  std::vector<kvkey::StoreValue> into_arena(const std::vector<std::optional<Bytes>>& values) {
    const std::lock_guard<std::mutex> lock(mu_);
    std::vector<kvkey::StoreValue> out(values.size());
    std::size_t at = 0;
    for (std::size_t i = 0; i < values.size(); ++i) {
      if (!values[i]) continue;
      if (arena_->size() < at + values[i]->size()) arena_->resize(at + values[i]->size() + (1 << 16));
      std::copy(values[i]->begin(), values[i]->end(), arena_->begin() + static_cast<std::ptrdiff_t>(at));
      out[i].present = true;
      out[i].data = arena_->data() + at;
      out[i].size = values[i]->size();
      out[i].stable = !honest;
      out[i].owner = arena_;
      at += values[i]->size();
    }
    return out;
  }
  struct Arena : kvkey::StoreValue::Owner, Bytes {
    Arena() : Bytes(1 << 20) {}
  };
  std::mutex mu_;
  std::shared_ptr<Arena> arena_ = std::make_shared<Arena>();
};

// A connector that checks nothing of rank 1: a load of rank 1 serves the bytes
// after the header (payload checks skipped), a lookup counts rank 1 by
// existence (header checks skipped). Everything of rank 0 goes through kvkey::Connector.
class SkipsRank1 : public kvkey::testing::ConnectorAdapter {
 public:
  SkipsRank1(kvkey::Store& store, const std::vector<kvkey::AnyKeyNamespace>& ranks, bool skip_payload, bool skip_header)
      : ConnectorAdapter(store, ranks),
        rank0_(store, std::vector<kvkey::AnyKeyNamespace>{ranks[0]}),
        store_(store),
        ranks_(ranks),
        skip_payload_(skip_payload),
        skip_header_(skip_header) {}
  std::size_t lookup(const std::vector<kvkey::Digest>& blocks) override {
    if (!skip_header_) return ConnectorAdapter::lookup(blocks);
    const std::size_t n = rank0_.lookup(blocks);
    std::size_t i = 0;
    while (i < n && store_.exists(ranks_[1].store_key(blocks[i]))) ++i;
    return i;
  }
  std::vector<kvkey::LoadedView> load(const std::vector<kvkey::Digest>& blocks, std::size_t rank) override {
    if (rank != 1 || !skip_payload_) return ConnectorAdapter::load(blocks, rank);
    std::vector<kvkey::LoadedView> out(blocks.size());
    for (std::size_t i = 0; i < blocks.size(); ++i) {
      std::optional<Bytes> v = store_.get(ranks_[1].store_key(blocks[i]));
      if (!v || v->size() < kvkey::envelope_size) continue;
      auto owned = std::make_shared<kvkey::StoreValue::OwnedBytes>(Bytes(v->begin() + kvkey::envelope_size, v->end()));
      out[i].payload = {owned->bytes.data(), owned->bytes.size()};
      out[i].owner = owned;
      out[i].result.status = kvkey::LoadResult::Status::loaded;
    }
    return out;
  }

 private:
  kvkey::Connector<kvkey::AnyKeyNamespace> rank0_;
  kvkey::Store& store_;
  std::vector<kvkey::AnyKeyNamespace> ranks_;
  bool skip_payload_, skip_header_;
};

kvkey::testing::CheckOptions quick() {
  kvkey::testing::CheckOptions options;
  options.race_rounds = 5;
  return options;
}

template <class S>
kvkey::testing::Report check(kvkey::testing::CheckOptions options = quick()) {
  return kvkey::testing::check_store([] { return std::make_unique<S>(); }, options);
}

}  // namespace

TEST_CASE("check_store: MemoryStore passes every case of the table", "[store]") {
  const kvkey::testing::Report r = check<kvkey::MemoryStore>();
  INFO(r.summary());
  CHECK(r.ok());
  CHECK(r.wrong_loads() == 0);
  CHECK(r.counted_rejected() == 0);
  CHECK(r.lost() == 0);
  REQUIRE(r.cases.size() == kvkey::testing::cases().size());
  for (std::size_t i = 0; i < r.cases.size(); ++i) CHECK(r.cases[i].name == kvkey::testing::cases()[i].name);
  // every fault case damaged something on each rank: loads of the damaged block were refused
  for (const kvkey::testing::CaseSpec& spec : kvkey::testing::cases()) {
    if (spec.scenario != kvkey::testing::Scenario::fault) continue;
    INFO(spec.name);
    const kvkey::testing::CaseResult* c = r.find(spec.name);
    REQUIRE(c != nullptr);
    CHECK(c->rejected + c->missing >= kvkey::testing::ranks_per_deployment);
    // both paths, and both again with every keyed deployment confidential
    CHECK(c->lookups == (spec.keyed ? 4 : 2) * 3 * kvkey::testing::ranks_per_deployment);
  }
  // one foreign case per salient field of the identity that the base identity can differ in
  for (const std::string& field : kvkey::testing::foreign_fields()) CHECK(r.find("foreign " + field) != nullptr);
  CHECK(r.find("no such case") == nullptr);
}

TEST_CASE("check_store: the foreign fields come from the identity's field table", "[store]") {
  const std::vector<std::string>& fields = kvkey::testing::foreign_fields();
  // every salient field (the adapter as a whole), in encoding order, then the shard's layout before the adapter
  std::vector<std::string> salient;
  kvkey::Identity id;
  kvkey::visit_identity_fields(id, [&](std::string_view path, const auto&) { salient.emplace_back(path); });
  std::vector<std::string> without_shard;
  for (const std::string& f : fields) {
    if (f.rfind("shard.", 0) != 0) without_shard.push_back(f);
  }
  CHECK(without_shard == salient);
  CHECK(std::count(fields.begin(), fields.end(), "shard.tp_size") == 1);
  CHECK(std::set<std::string>(fields.begin(), fields.end()).size() == fields.size());
  // each has a foreign writer that differs from the base identity
  for (const std::string& f : fields) {
    INFO(f);
    kvkey::Identity changed = kvkey::testing::detail::identity("t", 2, 0);
    const kvkey::Identity base = changed;
    kvkey::testing::detail::change_field(changed, f);
    if (f != "tenant") CHECK_FALSE(changed == base);
  }
}

TEST_CASE("check_store: a case filter runs only the cases named", "[store]") {
  kvkey::testing::CheckOptions options = quick();
  options.only = {"payload bit flip"};
  const kvkey::testing::Report r = check<kvkey::MemoryStore>(options);
  CHECK(r.cases.size() == 6);
  CHECK(r.ok());
}

TEST_CASE("check_store: a shared store passes too (cases use their own tenants)", "[store]") {
  auto shared = std::make_shared<kvkey::MemoryStore>();
  const kvkey::testing::Report r = kvkey::testing::check_store([shared] { return shared; }, quick());
  INFO(r.summary());
  CHECK(r.ok());
  CHECK(shared->size() > 100);
}

TEST_CASE("check_store: a store without ranged reads passes", "[store]") {
  const kvkey::testing::Report r = check<WholeValueStore>();
  INFO(r.summary());
  CHECK(r.ok());
}

TEST_CASE("check_store: stores that lose or mix up data fail", "[store]") {
  SECTION("forgetful") {
    const kvkey::testing::Report r = check<ForgetfulStore>();
    CHECK_FALSE(r.ok());
    CHECK(r.lost() > 0);
    CHECK_FALSE(r.find("baseline")->ok());
    // baseline, on both paths: 4 blocks x 2 ranks saved twice, each missed by load and load_into
    CHECK(r.find("baseline")->lost == 2 * 2 * 2 * 4 * 2);
    CHECK(r.wrong_loads() == 0);
    CHECK(r.counted_rejected() == 0);
  }
  SECTION("truncating") {
    const kvkey::testing::Report r = check<TruncatingStore>();
    CHECK_FALSE(r.find("baseline")->ok());
    CHECK(r.find("baseline")->lost > 0);
    CHECK(r.wrong_loads() == 0);
  }
  SECTION("mixing up keys") {
    const kvkey::testing::Report r = check<LastValueStore>();
    CHECK_FALSE(r.find("baseline")->ok());
    // Only a replaced value of the block itself verifies: it is served where the
    // swap put it back as "last", and that is a stale, wrong load.
    CHECK(r.find("swapped values (blocks)")->wrong_loads > 0);
    CHECK(r.find("foreign tenant")->wrong_loads == 0);
    CHECK(r.counted_rejected() == 0);
  }
}

TEST_CASE("check_store: an exception from the store fails its case", "[store]") {
  struct Broken : kvkey::MemoryStore {
    std::optional<Bytes> get(std::string_view) override { throw std::runtime_error("connection refused"); }
  };
  const kvkey::testing::Report r = check<Broken>();
  CHECK_FALSE(r.ok());
  REQUIRE_FALSE(r.find("baseline")->errors.empty());
  CHECK(r.find("baseline")->errors.front() == "exception: connection refused");
}

TEST_CASE("check_store: damage the store refused is not a wrong load", "[store]") {
  // Refuses empty values, as Mooncake does: the key keeps its old value.
  struct RefusesEmpty : kvkey::MemoryStore {
    void put(std::string_view key, const std::uint8_t* data, std::size_t size) override {
      if (size > 0) MemoryStore::put(key, data, size);
    }
    std::vector<kvkey::StoreWrite> put_many(const std::vector<std::string>& keys,
                                            const std::vector<kvkey::StoreValue>& values) override {
      std::vector<kvkey::StoreWrite> out(keys.size());
      for (std::size_t i = 0; i < keys.size(); ++i) {
        out[i].stored = values[i].size > 0;
        if (out[i].stored) put(keys[i], values[i].data, values[i].size);
      }
      return out;
    }
  };
  kvkey::testing::CheckOptions options = quick();
  options.only = {"empty value", "baseline"};
  const kvkey::testing::Report r = check<RefusesEmpty>(options);
  INFO(r.summary());
  CHECK(r.ok());
  const kvkey::testing::CaseResult* empty = r.find("empty value");
  REQUIRE(empty != nullptr);
  CHECK(empty->wrong_loads == 0);
  CHECK(empty->rejected == 0);
  CHECK(empty->loaded > 0);
}

TEST_CASE("check_store: a connector that skips rank 1's checks fails", "[store]") {
  for (const bool payload : {true, false}) {
    INFO((payload ? "payload checks skipped" : "header checks skipped"));
    kvkey::testing::CheckOptions options = quick();
    options.make_connector = [payload](kvkey::Store& s, const std::vector<kvkey::AnyKeyNamespace>& ranks) {
      return std::make_unique<SkipsRank1>(s, ranks, payload, !payload);
    };
    const kvkey::testing::Report r = check<kvkey::MemoryStore>(options);
    CHECK_FALSE(r.ok());
    if (payload) {
      CHECK(r.wrong_loads() > 0);
      CHECK_FALSE(r.find("payload bit flip (middle byte)")->ok());
    } else {
      CHECK(r.counted_rejected() > 0);
      CHECK_FALSE(r.find("foreign model.name")->ok());
    }
  }
}

TEST_CASE("check_store: a store that recycles its buffers under a zero-copy connector fails", "[store]") {
  const kvkey::testing::Report bad = check<RecyclingStore<false>>();
  CHECK_FALSE(bad.ok());
  CHECK(bad.wrong_loads() > 0);
  CHECK_FALSE(bad.find("baseline")->ok());
  // The same arena, declared unstable: the connector copies, and every case passes.
  const kvkey::testing::Report honest = check<RecyclingStore<true>>();
  INFO(honest.summary());
  CHECK(honest.ok());
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
