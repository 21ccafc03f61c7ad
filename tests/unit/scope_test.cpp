// Shared scopes (format v4, docs/format.md section 12 and "Scope transition"):
// a prefix shared on purpose, stored once under "_scope.<name>", read only by
// granted tenants, written only by publishers; the private blocks after it are
// bound to the scope's last block and to the tenant.
#include "support/fixtures.hpp"
#include "support/reference.hpp"

#include "kvkey/scope.hpp"

#include <catch2/catch.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace {

using kvkey::Bytes;
using kvkey::Digest;
using kvkey::Payload;
using kvkey::Reason;
using kvkey_test::ByteVec;
using Keyed = kvkey::KeyNamespace<kvkey::HmacSha256>;
using Plain = kvkey::KeyNamespace<>;

kvkey::Identity small_identity(const std::string& tenant) {
  kvkey::Identity id = kvkey_test::base_identity();
  id.tenant = tenant;
  id.kv.block_size = 4;
  id.kv.num_layers = 2;
  id.kv.num_kv_heads = 1;
  id.kv.head_dim = 8;
  return id;
}

kvkey::TenantSecret secret(char c) { return kvkey::TenantSecret(std::string(40, c)); }

std::vector<std::uint32_t> prompt(std::size_t n, std::uint32_t seed) {
  std::vector<std::uint32_t> t(n);
  for (std::size_t i = 0; i < n; ++i) t[i] = static_cast<std::uint32_t>(seed * 1000003u + i * 7919u);
  return t;
}

ByteVec bytes(const Digest& d) { return ByteVec(d.data(), d.data() + Digest::size_bytes); }

const kvkey::ScopeGrants grants{{"reader"}, {"alice", "bob"}};  // readers, publishers

// A shared system prompt of 8 tokens (2 blocks), then a private suffix per tenant.
std::vector<std::uint32_t> request(std::uint32_t suffix_seed) {
  std::vector<std::uint32_t> t = prompt(8, 1);
  const std::vector<std::uint32_t> s = prompt(9, suffix_seed);
  t.insert(t.end(), s.begin(), s.end());
  return t;
}

struct CountingStore : kvkey::MemoryStore {
  mutable std::size_t reads = 0;
  std::vector<kvkey::StoreValue> read_many(const std::vector<std::string>& keys) override {
    ++reads;
    return kvkey::MemoryStore::read_many(keys);
  }
  std::vector<kvkey::StoreValue> read_prefix_many(const std::vector<std::string>& keys, std::size_t n) override {
    ++reads;
    return kvkey::MemoryStore::read_prefix_many(keys, n);
  }
};

}  // namespace

TEST_CASE("scope: the chain follows docs/format.md, the transition bound to the scope and the tenant",
          "[scope][chain]") {
  const kvkey::SharedScope<> scope("sys", small_identity("x"), grants);
  CHECK(scope.ns().identity().tenant == "_scope.sys");
  CHECK(scope.ns().key_prefix().rfind("kvk4/_scope.sys/p/", 0) == 0);
  const Plain alice(small_identity("alice"));
  const std::vector<std::uint32_t> toks = request(2);
  const std::vector<Digest> h = kvkey::scoped_block_hashes(scope.ns(), alice, toks, 8);
  REQUIRE(h.size() == 4);

  // The reference, byte by byte: scope blocks from the scope's root, then
  // parent_2 = SHA-256('T' || alice's root || hash_1).
  const std::vector<ByteVec> s = kvkey_test::ref::block_hashes(bytes(scope.ns().root()), toks, 4);
  CHECK(bytes(h[0]) == s[0]);
  CHECK(bytes(h[1]) == s[1]);
  ByteVec t{'T'};
  kvkey_test::ref::raw(t, bytes(alice.root()));
  kvkey_test::ref::raw(t, s[1]);
  ByteVec parent = kvkey_test::ref::sha256(t);
  CHECK(bytes(kvkey::scope_transition(alice, h[1])) == parent);
  for (std::size_t i = 2; i < 4; ++i) {
    parent = kvkey_test::ref::sha256(kvkey_test::ref::block_message(parent, toks.data() + 4 * i, 4, i, {}));
    CHECK(bytes(h[i]) == parent);
  }

  // Another tenant: the same scope blocks, other private ones, even for the same suffix.
  const Plain bob(small_identity("bob"));
  const std::vector<Digest> hb = kvkey::scoped_block_hashes(scope.ns(), bob, toks, 8);
  CHECK(hb[0] == h[0]);
  CHECK(hb[1] == h[1]);
  CHECK(hb[2] != h[2]);
  CHECK(hb[3] != h[3]);
  // Without the scope, or after another prefix: other hashes.
  const std::vector<Digest> unscoped = alice.block_hashes(toks);
  CHECK(unscoped[2] != h[2]);
  std::vector<std::uint32_t> other = toks;
  other[0] ^= 1;
  CHECK(kvkey::scoped_block_hashes(scope.ns(), alice, other, 8)[2] != h[2]);
  // A salt enters the private blocks only.
  kvkey::HashOptions salted;
  salted.salt = "req-salt";
  const std::vector<Digest> hs = kvkey::scoped_block_hashes(scope.ns(), alice, toks, 8, salted);
  CHECK(hs[1] == h[1]);
  CHECK(hs[2] != h[2]);
  // No scope: the tenant's own chain; a scope covering everything: the scope's.
  CHECK(kvkey::scoped_block_hashes(scope.ns(), alice, toks, 0) == unscoped);
  CHECK(kvkey::scoped_block_hashes(scope.ns(), alice, toks, 16) == scope.ns().block_hashes(toks));
  CHECK_THROWS_AS(kvkey::scoped_block_hashes(scope.ns(), alice, toks, 6), kvkey::input_error);
}

TEST_CASE("scope: names and tenants", "[scope][identity]") {
  CHECK(kvkey::scope_tenant("sys") == "_scope.sys");
  CHECK_THROWS_AS(kvkey::scope_tenant(""), kvkey::identity_error);
  CHECK_THROWS_AS(kvkey::scope_tenant("a/b"), kvkey::identity_error);
  CHECK_THROWS_AS(kvkey::scope_tenant(std::string(58, 'a')), kvkey::identity_error);
  CHECK_NOTHROW(kvkey::scope_tenant(std::string(57, 'a')));
  // No tenant's own namespace can be a scope's.
  CHECK_THROWS_AS(Plain(small_identity("_scope.sys")), kvkey::identity_error);
  CHECK_THROWS_AS(kvkey::SharedScope<>("sys", small_identity("x"), kvkey::ScopeGrants{{"bad/name"}, {}}),
                  kvkey::identity_error);
}

TEST_CASE("scope: readers read, publishers publish, others get a named miss or an error", "[scope][connector]") {
  CountingStore store;
  const kvkey::SharedScope<kvkey::HmacSha256> scope("sys", small_identity("x"), kvkey::HmacSha256(secret('s')), grants,
                                                    [] {
                                                      kvkey::Policy p;
                                                      p.confidential = true;
                                                      return p;
                                                    }());
  CHECK(scope.ns().confidential());
  const Keyed alice_ns(small_identity("alice"), secret('a'));
  const Keyed reader_ns(small_identity("reader"), secret('r'));
  const Keyed eve_ns(small_identity("eve"), secret('e'));
  const kvkey::ScopedConnector<kvkey::HmacSha256, kvkey::HmacSha256> alice(store, scope, alice_ns);
  const kvkey::ScopedConnector<kvkey::HmacSha256, kvkey::HmacSha256> reader(store, scope, reader_ns);
  const kvkey::ScopedConnector<kvkey::HmacSha256, kvkey::HmacSha256> eve(store, scope, eve_ns);
  const std::size_t n = static_cast<std::size_t>(*alice_ns.payload_size());
  std::vector<Bytes> ps;
  for (std::uint8_t i = 0; i < 4; ++i) ps.push_back(Bytes(n, static_cast<std::uint8_t>(0x10 + i)));
  std::vector<Payload> views;
  for (const Bytes& p : ps) views.emplace_back(p.data(), p.size());

  const std::vector<std::uint32_t> ta = request(2);
  const std::vector<Digest> ha = kvkey::scoped_block_hashes(scope.ns(), alice_ns, ta, 8);
  REQUIRE(alice.save(ha, 2, views) == 4);
  CHECK(store.size() == 4);
  CHECK(alice.lookup(ha, 2) == 4);
  std::vector<kvkey::LoadResult> r;
  const auto got = alice.load(ha, 2, &r);
  for (std::size_t i = 0; i < 4; ++i) CHECK(got[i] == ps[i]);

  // A reader shares the scope blocks: hits on the prefix, its own suffix missing.
  const std::vector<std::uint32_t> tr = request(3);
  const std::vector<Digest> hr = kvkey::scoped_block_hashes(scope.ns(), reader_ns, tr, 8);
  CHECK(reader.lookup(hr, 2) == 2);
  const auto rg = reader.load(hr, 2);
  CHECK(rg[0] == ps[0]);
  CHECK(rg[1] == ps[1]);
  CHECK(!rg[2]);
  // ... but may not publish: an error, and nothing of the request is written.
  try {
    (void)reader.save(hr, 2, views);
    FAIL("a reader published to the scope");
  } catch (const kvkey::scope_error& e) {
    CHECK(e.field() == "scope.publishers");
  }
  CHECK(store.size() == 4);
  CHECK(reader.save_private(hr, 2, {views[2], views[3]}) == 2);
  CHECK(store.size() == 6);

  // An ungranted tenant: a named miss on every scope block, the store not asked for them.
  const std::vector<Digest> he = kvkey::scoped_block_hashes(scope.ns(), eve_ns, ta, 8);
  const std::size_t reads = store.reads;
  CHECK(eve.lookup(he, 2) == 0);
  CHECK(store.reads == reads);
  std::vector<kvkey::LoadResult> er;
  const auto eg = eve.load(he, 2, &er);
  REQUIRE(er.size() == 4);
  for (std::size_t i = 0; i < 2; ++i) {
    CHECK(!eg[i]);
    CHECK(er[i].verdict.reason == Reason::not_granted);
    CHECK(er[i].verdict.field == "scope.readers");
  }
  CHECK(!eg[2]);  // and alice's private blocks are not eve's, for the same tokens
  std::vector<Bytes> dst(4, Bytes(n, 0xEE));
  std::vector<std::vector<kvkey::MutableBuffer>> d;
  for (Bytes& b : dst) d.push_back({{b.data(), b.size()}});
  const auto ei = eve.load_into(he, 2, d);
  CHECK(ei[0].verdict.reason == Reason::not_granted);
  CHECK(dst[0] == Bytes(n, 0xEE));
  try {
    (void)eve.save(he, 2, views);
    FAIL("an ungranted tenant published to the scope");
  } catch (const kvkey::scope_error& e) {
    CHECK(e.field() == "scope.publishers");
  }

  // A private block spliced onto another tenant's scope prefix: alice's value
  // copied under bob's key for the same tokens never verifies for bob.
  const Keyed bob_ns(small_identity("bob"), secret('b'));
  const kvkey::ScopedConnector<kvkey::HmacSha256, kvkey::HmacSha256> bob(store, scope, bob_ns);
  const std::vector<Digest> hb = kvkey::scoped_block_hashes(scope.ns(), bob_ns, ta, 8);
  const std::optional<Bytes> stolen = store.get(alice_ns.store_key(ha[2]));
  REQUIRE(stolen);
  store.put(bob_ns.store_key(hb[2]), stolen->data(), stolen->size());
  std::vector<kvkey::LoadResult> br;
  const auto bg = bob.load(hb, 2, &br);
  CHECK(bg[0] == ps[0]);
  CHECK(!bg[2]);
  CHECK(br[2].status == kvkey::LoadResult::Status::rejected);
  CHECK(br[2].verdict.reason == Reason::identity_mismatch);

  // Zero-copy: the scope blocks into the first slots.
  kvkey::Slots slots(store, 4, n);
  const auto z = alice.load_into(ha, 2, slots);
  for (std::size_t i = 0; i < 4; ++i) {
    CHECK(z[i].loaded());
    const auto* q = static_cast<const std::uint8_t*>(slots.payload(i).data);
    CHECK(Bytes(q, q + n) == ps[i]);
  }
}

TEST_CASE("scope: two tenants with a common system prompt share its blocks, never their private ones",
          "[scope][connector][soak]") {
  // 40 requests, the two tenants alternating: a 32-token system prompt (8 blocks) then an
  // 8-token private suffix (2 blocks) drawn from 5 per tenant. Each request looks up,
  // loads what it can, checks every loaded payload against what it would have computed
  // itself, and saves the rest. Isolated: every block in the tenant's own namespace.
  const std::vector<std::uint32_t> system_prompt = prompt(32, 77);
  const kvkey::SharedScope<> scope("sys", small_identity("x"), kvkey::ScopeGrants{{"bob"}, {"alice"}});
  const std::size_t n = static_cast<std::size_t>(*scope.ns().payload_size());
  const auto kv_of = [n](const std::string& writer, const Digest& block) {  // what the writer computes
    Bytes b(n);
    for (std::size_t i = 0; i < n; ++i) b[i] = static_cast<std::uint8_t>(block[i % 32] ^ writer[i % writer.size()]);
    return b;
  };
  struct Run {
    std::size_t blocks = 0, hits = 0, wrong = 0, cross = 0;
  };
  const auto run = [&](bool scoped) {
    kvkey::MemoryStore store;
    Run r;
    const Plain alice_ns(small_identity("alice"));
    const Plain bob_ns(small_identity("bob"));
    const kvkey::ScopedConnector<kvkey::Sha256, kvkey::Sha256> alice(store, scope, alice_ns);
    const kvkey::ScopedConnector<kvkey::Sha256, kvkey::Sha256> bob(store, scope, bob_ns);
    for (std::uint32_t q = 0; q < 40; ++q) {
      const bool is_alice = q % 2 == 0;
      const std::string me = is_alice ? "alice" : "bob";
      const Plain& ns = is_alice ? alice_ns : bob_ns;
      const auto& conn = is_alice ? alice : bob;
      std::vector<std::uint32_t> toks = system_prompt;
      const std::vector<std::uint32_t> suffix = prompt(8, 1000 + (q / 2) % 5);  // the same suffixes for both tenants
      toks.insert(toks.end(), suffix.begin(), suffix.end());
      const std::size_t k = scoped ? 8 : 0;
      const std::vector<Digest> h = kvkey::scoped_block_hashes(scope.ns(), ns, toks, k * 4);
      std::vector<kvkey::LoadResult> res;
      const auto got = conn.load(h, k, &res);
      std::size_t used = 0;
      while (used < h.size() && got[used]) ++used;
      for (std::size_t i = 0; i < used; ++i) {
        const std::string writer = i < k ? "alice" : me;  // the scope's publisher wrote scope blocks
        if (*got[i] != kv_of(writer, h[i])) ++r.wrong;
        if (i >= k && *got[i] == kv_of(me == "alice" ? "bob" : "alice", h[i])) ++r.cross;
      }
      r.blocks += h.size();
      r.hits += used;
      std::vector<Bytes> ps;
      for (std::size_t i = 0; i < h.size(); ++i) ps.push_back(kv_of(i < k ? "alice" : me, h[i]));
      std::vector<Payload> views;
      for (std::size_t i = k; i < h.size(); ++i) views.emplace_back(ps[i].data(), ps[i].size());
      if (is_alice) {
        std::vector<Payload> all;
        for (const Bytes& p : ps) all.emplace_back(p.data(), p.size());
        (void)conn.save(h, k, all);
      } else {
        (void)conn.save_private(h, k, views);
      }
    }
    return r;
  };
  const Run isolated = run(false);
  const Run shared = run(true);
  CHECK(isolated.wrong == 0);
  CHECK(shared.wrong == 0);
  CHECK(shared.cross == 0);
  CHECK(isolated.cross == 0);
  // Isolated: each tenant's first request misses all 10 blocks; scoped: bob's first request already
  // hits the 8 system-prompt blocks alice published.
  CHECK(shared.hits > isolated.hits);
  WARN("shared system prompt, 2 tenants x 20 requests: hit rate "
       << 100.0 * static_cast<double>(shared.hits) / static_cast<double>(shared.blocks) << "% with a shared scope, "
       << 100.0 * static_cast<double>(isolated.hits) / static_cast<double>(isolated.blocks)
       << "% isolated; cross-tenant private loads " << shared.cross);
}
