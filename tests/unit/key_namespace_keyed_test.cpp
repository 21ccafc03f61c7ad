// Keyed namespaces: KeyNamespace<HmacSha256> built from a TenantSecret.
#include <catch2/catch.hpp>

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "support/fixtures.hpp"

namespace {

using kvkey::Digest;
using kvkey::HmacSha256;
using kvkey::KeyNamespace;
using kvkey::Reason;
using kvkey::TenantSecret;
using kvkey_test::prompt_tokens;
using kvkey_test::secret_bytes;
using kvkey_test::sharded_identity;

const std::vector<std::uint8_t> payload_bytes(24 * 2 * 16 * 64 * 2, 0x3c);
const kvkey::Payload payload(payload_bytes.data(), payload_bytes.size());

struct Outputs {
  Digest root;
  std::vector<Digest> hashes;
  std::vector<Digest> objects;
  std::vector<std::string> keys;
  std::vector<kvkey::Envelope> headers;
};

template <class Hash>
Outputs outputs(const KeyNamespace<Hash>& ns, const std::vector<std::int64_t>& tokens, const std::string& salt = {}) {
  Outputs o;
  o.root = ns.root();
  kvkey::HashOptions opt;
  opt.salt = salt;
  o.hashes = ns.block_hashes(tokens, opt);
  for (const Digest& h : o.hashes) {
    o.objects.push_back(ns.object_hash(h));
    o.keys.push_back(ns.store_key(h));
    o.headers.push_back(ns.seal(h, payload));
  }
  return o;
}

// No value of `a` equals any value of `b`: nothing one namespace computes can
// be found by computing in the other.
void check_disjoint(const Outputs& a, const Outputs& b) {
  CHECK(a.root != b.root);
  std::set<Digest> digests(a.hashes.begin(), a.hashes.end());
  digests.insert(a.objects.begin(), a.objects.end());
  digests.insert(a.root);
  for (const Digest& d : b.hashes) CHECK(digests.count(d) == 0);
  for (const Digest& d : b.objects) CHECK(digests.count(d) == 0);
  CHECK(digests.count(b.root) == 0);
  const std::set<std::string> keys(a.keys.begin(), a.keys.end());
  for (const std::string& k : b.keys) CHECK(keys.count(k) == 0);
}

}  // namespace

TEST_CASE("KeyNamespace<HmacSha256> is built from an identity and a TenantSecret", "[security][keyed]") {
  const std::string secret = secret_bytes('a');
  const kvkey::Identity id = sharded_identity();
  const KeyNamespace<HmacSha256> ns{id, TenantSecret{secret}};
  // The root is the HMAC of the canonical encoding under the secret: the same
  // chain as the unkeyed namespace, with the keyed hash.
  CHECK(ns.root() == HmacSha256::mac(TenantSecret{secret}, ns.encoding().data(), ns.encoding().size()));
  CHECK(ns.encoding() == KeyNamespace<>{id}.encoding());
  // The key names the secret's public id where a plain key has "p" (docs/format.md, section 5).
  const std::string plain_prefix = KeyNamespace<>{id}.key_prefix();
  const std::string id_segment = "/k" + kvkey::secret_id(TenantSecret{secret}).hex() + "/";
  CHECK(ns.key_prefix() == plain_prefix.substr(0, plain_prefix.find("/p/")) + id_segment +
                               plain_prefix.substr(plain_prefix.find("/p/") + 3));

  // Policies combine with a secret.
  auto single = id;
  single.tenant.clear();
  const KeyNamespace<HmacSha256> single_ns{single, TenantSecret{secret}, kvkey::single_tenant};
  CHECK(single_ns.identity().tenant == kvkey::single_tenant_name);

  // A short secret fails before anything is computed, naming the secret.
  try {
    KeyNamespace<HmacSha256> bad{id, TenantSecret{std::string(16, 's')}};
    FAIL("a 16-byte secret was accepted");
  } catch (const kvkey::identity_error& e) {
    CHECK(e.field() == "tenant_secret");
  }
}

TEST_CASE("The same identity and secret give the same keys in every process", "[security][keyed]") {
  const auto tokens = prompt_tokens(6, 16, 1);
  const KeyNamespace<HmacSha256> a{sharded_identity(), TenantSecret{secret_bytes('a')}};
  const KeyNamespace<HmacSha256> b{sharded_identity(), TenantSecret{secret_bytes('a')}};
  const Outputs oa = outputs(a, tokens);
  const Outputs ob = outputs(b, tokens);
  CHECK(oa.root == ob.root);
  CHECK(oa.hashes == ob.hashes);
  CHECK(oa.keys == ob.keys);
  // Headers agree but for the random nonce and the tag; each verifies in the other.
  namespace L = kvkey::envelope_layout;
  for (std::size_t i = 0; i < oa.hashes.size(); ++i) {
    CHECK(std::equal(oa.headers[i].begin(), oa.headers[i].begin() + L::nonce, ob.headers[i].begin()));
    CHECK(std::equal(oa.headers[i].begin() + L::identity, oa.headers[i].end(), ob.headers[i].begin() + L::identity));
    CHECK(b.verify(oa.headers[i], ob.hashes[i], payload).ok());
    CHECK(a.verify(ob.headers[i], oa.hashes[i], payload).ok());
  }

  // The incremental chain agrees with the full one under HMAC too (the hasher
  // is reused across blocks, so result() must reset to the keyed state).
  std::vector<Digest> incremental = a.block_hashes(prompt_tokens(2, 16, 1));
  a.extend_block_hashes(incremental, tokens);
  CHECK(incremental == oa.hashes);
}

TEST_CASE("Another tenant secret cannot reproduce keys, block hashes, roots or headers", "[security][keyed]") {
  // Same identity (even the same tenant name), different secrets: the second
  // party knows everything but the secret.
  const auto tokens = prompt_tokens(6, 16, 2);
  const KeyNamespace<HmacSha256> owner{sharded_identity(), TenantSecret{secret_bytes('a')}};
  const KeyNamespace<HmacSha256> other{sharded_identity(), TenantSecret{secret_bytes('b')}};
  const Outputs mine = outputs(owner, tokens);
  const Outputs theirs = outputs(other, tokens);
  check_disjoint(mine, theirs);
  for (const std::string& salt : {std::string("victim-salt"), std::string()}) {
    // A salt known to the attacker (CVE-2025-46570's cache_salt spoofing)
    // does not help without the secret.
    check_disjoint(outputs(owner, tokens, salt), outputs(other, tokens, salt));
  }
  // The same readable prefix up to the secret's id, which differs.
  CHECK(owner.tenant_prefix() == other.tenant_prefix());
  CHECK(owner.secret_prefix() != other.secret_prefix());
  CHECK(owner.key_prefix() != other.key_prefix());

  for (std::size_t i = 0; i < mine.hashes.size(); ++i) {
    // The other secret's reader rejects the owner's header: the identity
    // agrees, the secret id does not (format v3 names it).
    const auto v = other.verify(mine.headers[i], theirs.hashes[i], payload);
    CHECK(v.reason == Reason::identity_mismatch);
    CHECK(v.field == "tenant.secret_id");
    // And the owner rejects a header the other secret forged for the block.
    CHECK(owner.verify(theirs.headers[i], mine.hashes[i], payload).field == "tenant.secret_id");
    CHECK(owner.verify(mine.headers[i], mine.hashes[i], payload).ok());
  }
}

TEST_CASE("Keyed and unkeyed namespaces of one identity share no key or header", "[security][keyed]") {
  const auto tokens = prompt_tokens(32, 16, 3);
  const KeyNamespace<> plain{sharded_identity()};
  const KeyNamespace<HmacSha256> keyed{sharded_identity(), TenantSecret{secret_bytes('a')}};
  const Outputs p = outputs(plain, tokens);
  const Outputs k = outputs(keyed, tokens);
  check_disjoint(p, k);
  for (std::size_t i = 0; i < p.hashes.size(); ++i) {
    // The header records which kind of namespace sealed it.
    for (const auto& v :
         {keyed.verify(p.headers[i], k.hashes[i], payload), plain.verify(k.headers[i], p.hashes[i], payload)}) {
      CHECK(v.reason == Reason::identity_mismatch);
      CHECK(v.field == "envelope.namespace_kind");
    }
  }
}

TEST_CASE("No secret byte sequence appears in keys or headers", "[security][keyed]") {
  const std::string secret = secret_bytes('a');
  const KeyNamespace<HmacSha256> ns{sharded_identity(), TenantSecret{secret}};
  const Outputs o = outputs(ns, prompt_tokens(8, 16, 4));
  // Any 8 consecutive secret bytes, raw or as hex, would be a leak.
  const std::string hex = kvkey::Digest::from_bytes(secret.data(), 32).hex();
  for (std::size_t i = 0; i + 8 <= secret.size(); ++i) {
    const std::string window = secret.substr(i, 8);
    for (const auto& h : o.headers) CHECK_FALSE(kvkey_test::contains_bytes(h, window));
    for (const auto& k : o.keys) CHECK_FALSE(kvkey_test::contains_bytes(k, window));
    CHECK_FALSE(kvkey_test::contains_bytes(ns.encoding(), window));
  }
  for (std::size_t i = 0; i + 16 <= hex.size(); i += 2) {
    for (const auto& k : o.keys) CHECK(k.find(hex.substr(i, 16)) == std::string::npos);
  }
}

TEST_CASE("A wrong-secret reader of a different identity still names the identity field", "[security][keyed]") {
  auto other_id = sharded_identity();
  other_id.kv.dtype = kvkey::KvDtype::fp8_e4m3;
  const auto tokens = prompt_tokens(2, 16, 5);
  const KeyNamespace<HmacSha256> writer{sharded_identity(), TenantSecret{secret_bytes('a')}};
  const KeyNamespace<HmacSha256> reader{other_id, TenantSecret{secret_bytes('b')}};
  const Digest w = writer.block_hashes(tokens).at(1);
  const Digest r = reader.block_hashes(tokens).at(1);
  const auto v = reader.verify(writer.seal(w, payload), r, payload);
  CHECK(v.reason == Reason::identity_mismatch);
  CHECK(v.field == "kv.dtype");
}
