// Format v3: no mix of two sealed objects verifies (docs/security.md, "No mix of
// two objects verifies"). Every assembly of header fields from two objects of
// one namespace, followed by either object's payload (or a torn mix of both),
// read as either block, is a miss unless it is exactly one of the two objects.
// Also the secret id: a value sealed under another secret of the tenant is
// identity_mismatch on tenant.secret_id, and each secret has its own keys.
#include "support/fixtures.hpp"

#include <catch2/catch.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <random>
#include <string>
#include <utility>
#include <vector>

namespace {

using kvkey::Payload;
using kvkey::Reason;
using kvkey_test::ByteVec;
namespace L = kvkey::envelope_layout;

ByteVec pattern(std::size_t n, std::uint32_t seed) {
  ByteVec b(n);
  std::mt19937 rng(seed);
  for (auto& x : b) x = static_cast<std::uint8_t>(rng());
  return b;
}

// The envelope's fields as byte ranges [begin, end), in layout order.
constexpr std::array<std::pair<std::size_t, std::size_t>, 9> field_ranges = {
    {{L::magic, L::block_hash},             // magic, version, size, identity length
     {L::block_hash, L::payload_size},      // block hash
     {L::payload_size, L::slice},           // payload size
     {L::slice, L::namespace_kind},         // slice
     {L::namespace_kind, L::nonce},         // kind, mode, reserved
     {L::nonce, L::payload_digest},         // nonce
     {L::payload_digest, L::secret_id},     // digest or tag
     {L::secret_id, L::identity},           // secret id
     {L::identity, kvkey::envelope_size}},  // identity encoding and padding
};

struct Object {
  kvkey::Digest block;
  ByteVec header;
  ByteVec payload;
};

template <class Ns>
Object seal(const Ns& ns, const kvkey::Digest& block, ByteVec payload) {
  const kvkey::Envelope h = ns.seal(block, Payload(payload.data(), payload.size()));
  return {block, ByteVec(h.begin(), h.end()), std::move(payload)};
}

// Every header that takes each field from a or b, with every payload candidate,
// read as either block: ok exactly when header, payload and block are one object's.
template <class Ns>
void check_no_mix_verifies(const Ns& ns, const Object& a, const Object& b) {
  std::vector<ByteVec> payloads = {a.payload, b.payload};
  {  // torn: the first half of one write, the rest of the other (as long as the shorter one)
    ByteVec torn = a.payload;
    for (std::size_t i = torn.size() / 2; i < torn.size() && i < b.payload.size(); ++i) torn[i] = b.payload[i];
    payloads.push_back(torn);
  }
  std::size_t accepted = 0;
  for (unsigned mask = 0; mask < (1u << field_ranges.size()); ++mask) {
    ByteVec header = a.header;
    for (std::size_t f = 0; f < field_ranges.size(); ++f) {
      if ((mask & (1u << f)) == 0) continue;
      for (std::size_t i = field_ranges[f].first; i < field_ranges[f].second; ++i) header[i] = b.header[i];
    }
    for (const ByteVec& p : payloads) {
      for (const Object* as : {&a, &b}) {
        const kvkey::Verdict v = ns.verify(header.data(), header.size(), as->block, Payload(p.data(), p.size()));
        bool genuine = false;  // exactly one sealed object, read under its own block hash
        for (const Object* o : {&a, &b}) genuine |= header == o->header && p == o->payload && as->block == o->block;
        if (v.ok()) ++accepted;
        if (v.ok() != genuine) {
          CAPTURE(mask, kvkey::to_string(v.reason), v.field, genuine, p == a.payload, p == b.payload, as == &a);
          FAIL("a mix of two objects' fields verified, or a genuine object did not");
        }
      }
    }
  }
  CHECK(accepted >= 2);  // a as a and b as b (more when a and b share a block and their bytes)
}

kvkey::Identity identity() {
  kvkey::Identity id = kvkey_test::make_identity("team-a", "m", "r", {kvkey::KvDtype::fp16, 16, 2, 2, 8, "l"});
  return id;
}

}  // namespace

TEST_CASE("Splice: no header assembled from two plain objects verifies", "[envelope][splice]") {
  const kvkey::KeyNamespace<> ns(identity());
  const std::vector<std::uint32_t> tokens(48, 7);
  const auto blocks = ns.block_hashes(tokens);
  REQUIRE(blocks.size() == 3);
  SECTION("two blocks, payloads of different sizes") {
    check_no_mix_verifies(ns, seal(ns, blocks[0], pattern(4096, 1)), seal(ns, blocks[1], pattern(3000, 2)));
  }
  SECTION("two blocks, payloads of one size (the v2 splice: A's block hash, B's size and digest)") {
    check_no_mix_verifies(ns, seal(ns, blocks[0], pattern(4096, 1)), seal(ns, blocks[1], pattern(4096, 2)));
  }
  SECTION("two writes of one key with different bytes (a store mixing two writes of a value)") {
    check_no_mix_verifies(ns, seal(ns, blocks[2], pattern(4096, 3)), seal(ns, blocks[2], pattern(4096, 4)));
  }
}

TEST_CASE("Splice: the v2 splice is a named miss in v3", "[envelope][splice]") {
  const kvkey::KeyNamespace<> ns(identity());
  const auto blocks = ns.block_hashes(std::vector<std::uint32_t>(32, 9));
  const Object b = seal(ns, blocks[1], pattern(1000, 5));
  ByteVec spliced = b.header;  // B's size and digest, A's block hash
  std::copy(blocks[0].data(), blocks[0].data() + 32, spliced.begin() + L::block_hash);
  const kvkey::Verdict v =
      ns.verify(spliced.data(), spliced.size(), blocks[0], Payload(b.payload.data(), b.payload.size()));
  CHECK(v.reason == Reason::payload_mismatch);
  CHECK(v.field == "payload");
  // The same bytes as a stored value, through open_value.
  ByteVec value = spliced;
  value.insert(value.end(), b.payload.begin(), b.payload.end());
  CHECK(ns.open_value(value.data(), value.size(), blocks[0]).verdict.reason == Reason::payload_mismatch);
}

TEST_CASE("Splice: no header assembled from two keyed objects verifies", "[envelope][splice][keyed]") {
  const kvkey::KeyNamespace<kvkey::HmacSha256> ns(identity(), kvkey::TenantSecret(std::string(40, 's')));
  const auto blocks = ns.block_hashes(std::vector<std::uint32_t>(48, 7));
  check_no_mix_verifies(ns, seal(ns, blocks[0], pattern(2048, 1)), seal(ns, blocks[1], pattern(2048, 2)));
}

TEST_CASE("Secret id: public, per secret, in the header and the key", "[envelope][keyed][secret_id]") {
  const kvkey::TenantSecret s1(std::string(40, 'a'));
  const kvkey::TenantSecret s2(std::string(40, 'b'));
  const kvkey::KeyNamespace<kvkey::HmacSha256> old_ns(identity(), kvkey::HmacSha256(s1));
  const kvkey::KeyNamespace<kvkey::HmacSha256> new_ns(identity(), kvkey::HmacSha256(s2));
  const kvkey::KeyNamespace<> plain(identity());
  REQUIRE(old_ns.secret_id().has_value());
  CHECK(*old_ns.secret_id() == kvkey::secret_id(s1));
  CHECK(*new_ns.secret_id() == kvkey::secret_id(s2));
  CHECK(*old_ns.secret_id() != *new_ns.secret_id());
  CHECK(!plain.secret_id().has_value());
  // The id depends on the secret alone: another tenant, model or epoch under s1 has the same one.
  kvkey::Identity other = identity();
  other.tenant = "team-b";
  other.model.weights_epoch = 9;
  CHECK(*kvkey::KeyNamespace<kvkey::HmacSha256>(other, kvkey::HmacSha256(s1)).secret_id() == *old_ns.secret_id());

  // Keys: kvk4/<tenant>/k<id>/... for keyed, kvk4/<tenant>/p/... for plain.
  const auto ob = old_ns.block_hashes(std::vector<std::uint32_t>(16, 1));
  const auto nb = new_ns.block_hashes(std::vector<std::uint32_t>(16, 1));
  const std::string old_prefix = "kvk4/team-a/k" + old_ns.secret_id()->hex() + "/";
  CHECK(old_ns.secret_prefix() == old_prefix);
  CHECK(kvkey::secret_key_prefix("team-a", *old_ns.secret_id()) == old_prefix);
  CHECK(old_ns.store_key(ob[0]).rfind(old_prefix, 0) == 0);
  CHECK(new_ns.store_key(nb[0]).rfind(old_prefix, 0) != 0);
  CHECK(new_ns.store_key(nb[0]).rfind(new_ns.secret_prefix(), 0) == 0);
  CHECK(plain.secret_prefix() == "kvk4/team-a/p/");
  CHECK(plain.key_prefix() == "kvk4/team-a/p/m/e0/");
  CHECK(old_ns.store_key(ob[0]).rfind(plain.tenant_prefix(), 0) == 0);  // the tenant prefix covers every secret
  CHECK(kvkey::SecretId::try_from_hex(old_ns.secret_id()->hex()) == old_ns.secret_id());
  CHECK(!kvkey::SecretId::try_from_hex("0123456789abcde").has_value());
  CHECK(!kvkey::SecretId::try_from_hex("0123456789abcdeg").has_value());

  // A value sealed under the old secret, read by the new one under its own block hash
  // (copied under the new key): named on tenant.secret_id, not a generic tag failure.
  const ByteVec payload = pattern(512, 3);
  const kvkey::Envelope h = old_ns.seal(ob[0], Payload(payload.data(), payload.size()));
  ByteVec moved(h.begin(), h.end());
  std::copy(nb[0].data(), nb[0].data() + 32, moved.begin() + L::block_hash);
  kvkey::Verdict v = new_ns.verify(moved.data(), moved.size(), nb[0], Payload(payload.data(), payload.size()));
  CHECK(v.reason == Reason::identity_mismatch);
  CHECK(v.field == "tenant.secret_id");
  v = new_ns.verify(h.data(), h.size(), ob[0], Payload(payload.data(), payload.size()));
  CHECK(v.reason == Reason::identity_mismatch);
  CHECK(v.field == "tenant.secret_id");
  CHECK(new_ns.verify_header(h.data(), h.size(), ob[0]).field == "tenant.secret_id");
  // And the header carries the id, which decode_envelope returns.
  const auto c = kvkey::decode_envelope(h.data(), h.size());
  REQUIRE(c.has_value());
  REQUIRE(c->secret_id.has_value());
  CHECK(*c->secret_id == *old_ns.secret_id());

  // A plain header with a non-zero secret id is malformed.
  const kvkey::Envelope ph = plain.seal(ob[0], Payload(payload.data(), payload.size()));
  ByteVec bad(ph.begin(), ph.end());
  bad[L::secret_id + 3] = 1;
  const auto parsed = kvkey::parse_envelope(bad.data(), bad.size());
  CHECK(parsed.verdict.reason == Reason::malformed);
  CHECK(parsed.verdict.field == "envelope.secret_id");
}

TEST_CASE("Format v2 envelopes are unsupported_version", "[envelope][version]") {
  const kvkey::KeyNamespace<> ns(identity());
  const auto blocks = ns.block_hashes(std::vector<std::uint32_t>(16, 1));
  const ByteVec payload = pattern(256, 1);
  const kvkey::Envelope h = ns.seal(blocks[0], Payload(payload.data(), payload.size()));
  ByteVec v2(h.begin(), h.end());
  v2[L::version] = 2;
  const kvkey::Verdict v = ns.verify(v2.data(), v2.size(), blocks[0], Payload(payload.data(), payload.size()));
  CHECK(v.reason == Reason::unsupported_version);
  CHECK(v.field == "envelope.format_version");
  CHECK(ns.verify_header(v2.data(), v2.size(), blocks[0]).reason == Reason::unsupported_version);
}
