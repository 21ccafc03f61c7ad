// Every salient field matters: changing it changes the encoding, the root,
// every block hash and every store key, and verify names it.
//
// The table below must hold a mutation for every path that encoded_fields()
// (i.e. visit_identity_fields) produces; a field added to the identity without
// a row here fails the coverage test.
#include "support/fixtures.hpp"

#include <catch2/catch.hpp>

#include <cstdint>
#include <functional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace {

using kvkey::Identity;
using kvkey::KvDtype;
using kvkey_test::base_identity;
using kvkey_test::rich_identity;

struct Mutation {
  std::string_view path;  // the field it changes
  const char* what;
  Identity (*base)();
  std::function<void(Identity&)> mutate;
};

const std::vector<Mutation>& mutations() {
  static const std::vector<Mutation> table = {
      {"tenant", "another tenant", base_identity, [](Identity& i) { i.tenant = "team-b"; }},
      {"tenant", "case matters", base_identity, [](Identity& i) { i.tenant = "Team-a"; }},
      {"tenant", "a longer tenant sharing the prefix", base_identity, [](Identity& i) { i.tenant = "team-ab"; }},
      {"model.name", "another model name", base_identity, [](Identity& i) { i.model.name += "-AWQ"; }},
      {"model.name", "case matters", base_identity, [](Identity& i) { i.model.name = "qwen/Qwen2.5-7B-Instruct"; }},
      {"model.revision", "another revision", base_identity, [](Identity& i) { i.model.revision.back() = '9'; }},
      {"model.weights_epoch", "epoch 0 -> 1", base_identity, [](Identity& i) { i.model.weights_epoch = 1; }},
      {"model.weights_epoch", "epoch 7 -> 2^32 + 7", rich_identity,
       [](Identity& i) { i.model.weights_epoch += std::uint64_t{1} << 32; }},
      {"model.weights_fingerprint", "absent -> present", base_identity,
       [](Identity& i) { i.model.weights_fingerprint = kvkey::fingerprint("weights"); }},
      {"model.weights_fingerprint", "absent -> all-zero digest", base_identity,
       [](Identity& i) { i.model.weights_fingerprint = kvkey::Digest(); }},
      {"model.weights_fingerprint", "another fingerprint", rich_identity,
       [](Identity& i) { i.model.weights_fingerprint = kvkey::fingerprint("weights v8"); }},
      {"model.positional_fingerprint", "absent -> present", base_identity,
       [](Identity& i) { i.model.positional_fingerprint = kvkey::fingerprint("rope_theta 500000"); }},
      {"model.positional_fingerprint", "another RoPE configuration", rich_identity,
       [](Identity& i) { i.model.positional_fingerprint = kvkey::fingerprint("rope_scaling yarn x4"); }},
      {"model.positional_fingerprint", "present -> absent", rich_identity,
       [](Identity& i) { i.model.positional_fingerprint.reset(); }},
      {"kv.dtype", "fp16 -> bf16", base_identity, [](Identity& i) { i.kv.dtype = KvDtype::bf16; }},
      {"kv.dtype", "fp16 -> fp8_e4m3", base_identity, [](Identity& i) { i.kv.dtype = KvDtype::fp8_e4m3; }},
      {"kv.dtype", "int8 -> int4", rich_identity, [](Identity& i) { i.kv.dtype = KvDtype::int4; }},
      {"kv.quant.scheme", "none -> per_tensor", base_identity, [](Identity& i) { i.kv.quant.scheme = "per_tensor"; }},
      {"kv.quant.scheme", "asym -> sym", rich_identity, [](Identity& i) { i.kv.quant.scheme = "per_token_sym"; }},
      {"kv.quant.group_size", "64 -> 128", rich_identity, [](Identity& i) { i.kv.quant.group_size = 128; }},
      {"kv.quant.group_size", "64 -> 0", rich_identity, [](Identity& i) { i.kv.quant.group_size = 0; }},
      {"kv.quant.scale_dtype", "fp16 -> bf16", rich_identity,
       [](Identity& i) { i.kv.quant.scale_dtype = KvDtype::bf16; }},
      {"kv.quant.scale_dtype", "fp16 -> absent", rich_identity, [](Identity& i) { i.kv.quant.scale_dtype.reset(); }},
      {"kv.quant.zero_point", "true -> false", rich_identity, [](Identity& i) { i.kv.quant.zero_point = false; }},
      {"kv.quant.scales_fingerprint", "another fingerprint", rich_identity,
       [](Identity& i) { i.kv.quant.scales_fingerprint = kvkey::fingerprint("scales v2"); }},
      {"kv.quant.scales_fingerprint", "present -> absent", rich_identity,
       [](Identity& i) { i.kv.quant.scales_fingerprint.reset(); }},
      {"kv.block_size", "16 -> 32", base_identity, [](Identity& i) { i.kv.block_size = 32; }},
      {"kv.block_size", "16 -> 8", rich_identity, [](Identity& i) { i.kv.block_size = 8; }},
      {"kv.num_layers", "28 -> 56", base_identity, [](Identity& i) { i.kv.num_layers = 56; }},
      {"kv.num_kv_heads", "4 -> 8", base_identity, [](Identity& i) { i.kv.num_kv_heads = 8; }},
      {"kv.num_kv_heads", "4 -> 2 at tp 2", rich_identity, [](Identity& i) { i.kv.num_kv_heads = 2; }},
      {"kv.head_dim", "128 -> 64", base_identity, [](Identity& i) { i.kv.head_dim = 64; }},
      {"kv.layout", "another layout", base_identity, [](Identity& i) { i.kv.layout = "lmdeploy.v1.head_major"; }},
      {"kv.mla", "false -> true, same slice", base_identity, [](Identity& i) { i.kv.mla = true; }},
      {"kv.mla", "false -> true at tp 2", rich_identity, [](Identity& i) { i.kv.mla = true; }},
      {"adapter", "absent -> present", base_identity,
       [](Identity& i) { i.adapter = kvkey::Adapter("sql-lora", kvkey::fingerprint("sql-lora weights")); }},
      {"adapter", "present -> absent", rich_identity, [](Identity& i) { i.adapter.reset(); }},
      {"adapter.name", "same weights, another name", rich_identity,
       [](Identity& i) { i.adapter->name = "sql-lora-2"; }},
      {"adapter.weights_fingerprint", "same name, other weights", rich_identity,
       [](Identity& i) { i.adapter->weights_fingerprint = kvkey::fingerprint("sql-lora weights, retrained"); }},
  };
  return table;
}

struct Observed {
  kvkey::KeyNamespace<> ns;
  std::vector<kvkey::Digest> blocks;
  std::vector<std::string> keys;
  kvkey::Envelope header;  // for blocks[0]
};

const kvkey::Payload payload = kvkey_test::test_payload(65536);

Observed observe(const Identity& id, const std::vector<std::int32_t>& toks) {
  kvkey::KeyNamespace<> ns(id);
  auto blocks = ns.block_hashes(toks);
  REQUIRE(blocks.size() >= 2);
  std::vector<std::string> keys;
  for (const auto& b : blocks) keys.push_back(ns.store_key(b));
  auto header = ns.seal(blocks[0], payload);
  return Observed{std::move(ns), std::move(blocks), std::move(keys), header};
}

template <class T>
bool disjoint(const std::vector<T>& a, const std::vector<T>& b) {
  std::set<T> s(a.begin(), a.end());
  for (const auto& x : b) {
    if (s.count(x) != 0) return false;
  }
  return true;
}

void check_names(const Observed& reader, const Observed& writer, std::string_view path) {
  // Whichever block hash the reader passes, the identity difference is reported first.
  for (const auto& block : {reader.blocks[0], writer.blocks[0]}) {
    const auto v = reader.ns.verify(writer.header, block, payload);
    CHECK(v.reason == kvkey::Reason::identity_mismatch);
    CHECK(v.field == path);
  }
}

}  // namespace

TEST_CASE("The mutation table covers every salient field", "[fields]") {
  std::set<std::string_view> paths;
  for (const Identity& id : {base_identity(), rich_identity()}) {
    for (const auto& f : kvkey::encoded_fields(id)) paths.insert(f.path);
  }
  // Both bases together expose every path, including the adapter's members.
  CHECK(paths.count("adapter.name") == 1);
  CHECK(paths.count("adapter.weights_fingerprint") == 1);
  std::set<std::string_view> covered;
  for (const auto& m : mutations()) {
    CAPTURE(m.path, m.what);
    CHECK(paths.count(m.path) == 1);  // no row for a field that does not exist
    covered.insert(m.path);
  }
  for (const auto& p : paths) {
    CAPTURE(p);
    CHECK(covered.count(p) == 1);
  }
}

TEST_CASE("Changing any salient field changes everything and verify names it", "[fields]") {
  const auto toks = kvkey_test::tokens(64);  // at least 2 blocks for every block size in the table
  for (const auto& m : mutations()) {
    CAPTURE(m.path, m.what);
    const Identity before = m.base();
    Identity after = before;
    m.mutate(after);
    REQUIRE(kvkey::first_difference(before, after) == m.path);

    const Observed x = observe(before, toks);
    const Observed y = observe(after, toks);
    CHECK(x.ns.encoding() != y.ns.encoding());
    CHECK(x.ns.root() != y.ns.root());
    CHECK(disjoint(x.blocks, y.blocks));
    CHECK(disjoint(x.keys, y.keys));
    // Both directions: the new reader rejects the old header and vice versa.
    check_names(y, x, m.path);
    check_names(x, y, m.path);
    // Each namespace still accepts its own header.
    CHECK(x.ns.verify(x.header, x.blocks[0], payload).ok());
    CHECK(y.ns.verify(y.header, y.blocks[0], payload).ok());
  }
}

TEST_CASE("A shard holding another slice: same chain and other keys and verify names shard", "[fields]") {
  const auto toks = kvkey_test::tokens(64);
  struct ShardChange {
    const char* what;
    kvkey::Shard from, to;
  };
  for (const auto& c :
       {ShardChange{"tp rank 1 -> 0", {2, 1, 1, 0}, {2, 0, 1, 0}}, ShardChange{"tp 2 -> 4", {2, 0, 1, 0}, {4, 0, 1, 0}},
        ShardChange{"tp 1 -> 2", {1, 0, 1, 0}, {2, 0, 1, 0}},
        ShardChange{"pp stage 0 -> 1", {1, 0, 2, 0}, {1, 0, 2, 1}},
        ShardChange{"pp 1 -> 4", {1, 0, 1, 0}, {1, 0, 4, 0}}}) {
    CAPTURE(c.what);
    Identity a = rich_identity();
    a.shard = c.from;
    Identity b = a;
    b.shard = c.to;
    CHECK(kvkey::first_difference(a, b).empty());
    const Observed x = observe(a, toks);
    const Observed y = observe(b, toks);
    REQUIRE(x.ns.slice() != y.ns.slice());
    CHECK(x.ns.encoding() == y.ns.encoding());
    CHECK(x.ns.root() == y.ns.root());
    CHECK(x.blocks == y.blocks);
    CHECK(disjoint(x.keys, y.keys));
    check_names(y, x, "shard");
    check_names(x, y, "shard");
  }
}

TEST_CASE("The single-tenant policy is a tenant of its own", "[fields]") {
  const auto toks = kvkey_test::tokens(64);
  Identity single = base_identity();
  single.tenant.clear();
  const kvkey::KeyNamespace<> s(single, kvkey::single_tenant);
  const Observed named = observe(base_identity(), toks);
  const auto blocks = s.block_hashes(toks);
  CHECK(disjoint(blocks, named.blocks));
  const auto v = s.verify(named.header, blocks[0], payload);
  CHECK(v.reason == kvkey::Reason::identity_mismatch);
  CHECK(v.field == "tenant");
  const auto w = named.ns.verify(s.seal(blocks[0], payload), named.blocks[0], payload);
  CHECK(w.reason == kvkey::Reason::identity_mismatch);
  CHECK(w.field == "tenant");
}
