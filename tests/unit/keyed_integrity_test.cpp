// Keyed namespaces authenticate every payload: no header verifies unless its
// Poly1305 tag was checked over the payload bytes, whatever the Policy
// (docs/security.md, "The keyed payload rule"). Also the header-only check for lookups
// (verify_header) and the epoch rotation (with_epoch).
#include "support/fixtures.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace {

using kvkey::Envelope;
using kvkey::Payload;
using kvkey::Reason;
using kvkey_test::ByteVec;
namespace L = kvkey::envelope_layout;

const kvkey::Policy size_only{kvkey::TenantPolicy::required, kvkey::PayloadCheck::size_only};
using Keyed = kvkey::KeyNamespace<kvkey::HmacSha256>;
using Plain = kvkey::KeyNamespace<>;

ByteVec pattern(std::size_t n, std::uint32_t seed) {
  ByteVec b(n);
  std::mt19937 rng(seed);
  for (auto& x : b) x = static_cast<std::uint8_t>(rng());
  return b;
}

kvkey::TenantSecret secret(char c) { return kvkey::TenantSecret(std::string(40, c)); }

void check_rejected(const kvkey::Verdict& v, Reason r, const std::string& field) {
  CHECK(kvkey::to_string(v.reason) == kvkey::to_string(r));
  CHECK(v.field == field);
}

// What a writer without the secret can make of a genuine keyed header:
// mode none with the nonce and tag zeroed (a well-formed size-only header).
Envelope downgraded(Envelope e, std::uint64_t payload_size) {
  e[L::integrity_mode] = 0;
  std::fill(e.begin() + L::nonce, e.begin() + L::secret_id, std::uint8_t{0});
  kvkey::detail::store_u64(e.data() + L::payload_size, payload_size);
  return e;
}

}  // namespace

TEST_CASE("keyed: a header downgraded to integrity mode none never verifies, whatever the policy",
          "[keyed][security][payload]") {
  const kvkey::Identity id = kvkey_test::base_identity();
  const ByteVec bytes = pattern(3000, 1);
  const ByteVec forged = pattern(3000, 2);
  const ByteVec longer = pattern(5000, 3);
  for (const kvkey::Policy& policy : {kvkey::Policy{}, size_only}) {
    const Keyed ns{id, secret('k'), policy};
    const auto blocks = ns.block_hashes(kvkey_test::tokens(2 * ns.block_size()));
    const Envelope genuine = ns.seal(blocks[0], Payload(bytes.data(), bytes.size()));
    REQUIRE(ns.verify(genuine, blocks[0], Payload(bytes.data(), bytes.size())).ok());

    // Byte 73 to 0, nonce and tag zeroed, with the bytes the attacker chose.
    const Envelope none = downgraded(genuine, forged.size());
    REQUIRE(kvkey::parse_envelope(none.data(), none.size()).verdict.ok());  // well-formed
    check_rejected(ns.verify(none, blocks[0], Payload(forged.data(), forged.size())), Reason::payload_mismatch,
                   "envelope.integrity_mode");
    // ... with the genuine bytes too: nothing was authenticated.
    const Envelope none_same = downgraded(genuine, bytes.size());
    check_rejected(ns.verify(none_same, blocks[0], Payload(bytes.data(), bytes.size())), Reason::payload_mismatch,
                   "envelope.integrity_mode");
    // ... with another length, and with an empty payload.
    const Envelope none_long = downgraded(genuine, longer.size());
    check_rejected(ns.verify(none_long, blocks[0], Payload(longer.data(), longer.size())), Reason::payload_mismatch,
                   "envelope.integrity_mode");
    const Envelope none_empty = downgraded(genuine, 0);
    check_rejected(ns.verify(none_empty, blocks[0], Payload(nullptr, 0)), Reason::payload_mismatch,
                   "envelope.integrity_mode");
    // Mode none with the nonce and tag left in place is not even well-formed.
    Envelope kept = genuine;
    kept[L::integrity_mode] = 0;
    CHECK_FALSE(ns.verify(kept, blocks[0], Payload(bytes.data(), bytes.size())).ok());
    // The streaming verifier agrees.
    auto v = ns.verifier(none.data(), none.size(), blocks[0]);
    v.update(forged.data(), forged.size());
    check_rejected(v.finish(), Reason::payload_mismatch, "envelope.integrity_mode");
    // A size-only check authenticates nothing, so it is never ok in a keyed namespace,
    // for a downgraded header or a genuine one.
    check_rejected(ns.verify(none, blocks[0], forged.size()), Reason::payload_mismatch, "envelope.integrity_mode");
    check_rejected(ns.verify(genuine, blocks[0], bytes.size()), Reason::payload_mismatch, "payload");
    check_rejected(ns.verify(genuine, blocks[0], bytes.size() + 1), Reason::size_mismatch, "payload_size");
    // And the namespace never writes such a header.
    CHECK_THROWS_AS(ns.seal(blocks[0], std::uint64_t{4096}), kvkey::input_error);
    CHECK_THROWS_WITH(ns.seal(blocks[0], std::uint64_t{4096}), Catch::Contains("keyed"));
  }
}

TEST_CASE("keyed: a plain namespace keeps the size-only opt-out", "[keyed][payload][policy]") {
  const Plain loose{kvkey_test::base_identity(), size_only};
  const auto blocks = loose.block_hashes(kvkey_test::tokens(loose.block_size()));
  const Envelope e = loose.seal(blocks[0], std::uint64_t{64});
  CHECK(loose.verify(e, blocks[0], std::uint64_t{64}).ok());
  const ByteVec bytes(64, 7);
  CHECK(loose.verify(e, blocks[0], Payload(bytes.data(), bytes.size())).ok());
}

TEST_CASE("verify_header: checks what a header alone shows, for counting lookups", "[keyed][envelope]") {
  const kvkey::Identity id = kvkey_test::base_identity();
  const ByteVec bytes = pattern(2048, 4);
  const Payload payload(bytes.data(), bytes.size());

  SECTION("plain") {
    const Plain ns{id};
    const Plain loose{id, size_only};
    const auto blocks = ns.block_hashes(kvkey_test::tokens(2 * ns.block_size()));
    const Envelope e = ns.seal(blocks[0], payload);
    CHECK(ns.verify_header(e, blocks[0]).ok());
    CHECK(ns.verify_header(e.data(), e.size(), blocks[0]).ok());
    // Any payload size, any digest: the header alone cannot show them wrong.
    Envelope other_size = e;
    kvkey::detail::store_u64(other_size.data() + L::payload_size, 12345);
    CHECK(ns.verify_header(other_size, blocks[0]).ok());
    check_rejected(ns.verify_header(e, blocks[1]), Reason::block_mismatch, "block_hash");
    check_rejected(ns.verify_header(e.data(), 1023, blocks[0]), Reason::malformed, "envelope.size");
    check_rejected(ns.verify_header(nullptr, 1024, blocks[0]), Reason::malformed, "envelope.size");
    ByteVec longer(e.begin(), e.end());
    longer.push_back(0);
    check_rejected(ns.verify_header(longer.data(), longer.size(), blocks[0]), Reason::malformed, "envelope.size");
    Envelope bad_magic = e;
    bad_magic[0] ^= 1;
    check_rejected(ns.verify_header(bad_magic, blocks[0]), Reason::malformed, "envelope.magic");
    kvkey::Identity other_id = id;
    other_id.model.weights_epoch = 3;
    check_rejected(Plain{other_id}.verify_header(e, blocks[0]), Reason::identity_mismatch, "model.weights_epoch");
    // Mode none: as the payload check would say it under each policy.
    const Envelope none = loose.seal(blocks[0], std::uint64_t{2048});
    CHECK(loose.verify_header(none, blocks[0]).ok());
    check_rejected(ns.verify_header(none, blocks[0]), Reason::payload_mismatch, "envelope.integrity_mode");
    // A keyed header is another namespace kind.
    const Keyed keyed{id, secret('k')};
    const Envelope ke = keyed.seal(blocks[0], payload);
    check_rejected(ns.verify_header(ke, blocks[0]), Reason::identity_mismatch, "envelope.namespace_kind");
  }
  SECTION("keyed") {
    for (const kvkey::Policy& policy : {kvkey::Policy{}, size_only}) {
      const Keyed ns{id, secret('k'), policy};
      const auto blocks = ns.block_hashes(kvkey_test::tokens(2 * ns.block_size()));
      const Envelope e = ns.seal(blocks[0], payload);
      CHECK(ns.verify_header(e, blocks[0]).ok());
      check_rejected(ns.verify_header(e, blocks[1]), Reason::block_mismatch, "block_hash");
      // A downgraded header is refused, under either policy.
      check_rejected(ns.verify_header(downgraded(e, bytes.size()), blocks[0]), Reason::payload_mismatch,
                     "envelope.integrity_mode");
      // A plain header of the same identity is another kind.
      const Plain plain{id};
      check_rejected(ns.verify_header(plain.seal(blocks[0], payload), blocks[0]), Reason::identity_mismatch,
                     "envelope.namespace_kind");
      // Another secret: the header names the secret that sealed it.
      const Keyed other{id, secret('x'), policy};
      check_rejected(other.verify_header(e, other.block_hashes(kvkey_test::tokens(ns.block_size()))[0]),
                     Reason::identity_mismatch, "tenant.secret_id");
    }
  }
}

TEST_CASE("with_epoch: the same namespace under another weights epoch", "[keyed][identity]") {
  const kvkey::Identity id = kvkey_test::sharded_identity();
  kvkey::Identity id7 = id;
  id7.model.weights_epoch = id.model.weights_epoch + 7;
  const auto tokens = kvkey_test::tokens(3 * id.kv.block_size);
  const ByteVec bytes = pattern(512, 5);
  const Payload payload(bytes.data(), bytes.size());

  SECTION("keyed: keeps the secret and the policy") {
    for (const kvkey::Policy& policy : {kvkey::Policy{}, size_only}) {
      const Keyed ns{id, secret('k'), policy};
      const Keyed rotated = ns.with_epoch(id7.model.weights_epoch);
      const Keyed direct{id7, secret('k'), policy};
      CHECK(rotated.identity().model.weights_epoch == id7.model.weights_epoch);
      CHECK(rotated.root() == direct.root());
      CHECK(rotated.key_prefix() == direct.key_prefix());
      CHECK(rotated.slice() == direct.slice());
      CHECK(rotated.policy().payload == policy.payload);
      CHECK(rotated.block_hashes(tokens) == direct.block_hashes(tokens));
      const auto h = rotated.block_hashes(tokens);
      CHECK(rotated.store_key(h[0]) == direct.store_key(h[0]));
      CHECK(rotated.store_key(h[0]) != Plain{id7}.store_key(Plain{id7}.block_hashes(tokens)[0]));
      const Envelope e = rotated.seal(h[0], payload);
      CHECK(e[L::integrity_mode] == static_cast<std::uint8_t>(kvkey::IntegrityMode::poly1305));
      CHECK(direct.verify(e, h[0], payload).ok());
      // The old epoch's headers are refused.
      const Envelope old = ns.seal(ns.block_hashes(tokens)[0], payload);
      check_rejected(rotated.verify(old, h[0], payload), Reason::identity_mismatch, "model.weights_epoch");
      // Back to the same epoch: the same namespace.
      CHECK(rotated.with_epoch(id.model.weights_epoch).root() == ns.root());
    }
  }
  SECTION("plain and single tenant") {
    kvkey::Identity single = id;
    single.tenant.clear();
    const Plain ns{single, kvkey::single_tenant};
    const Plain rotated = ns.with_epoch(id7.model.weights_epoch);
    kvkey::Identity single7 = single;
    single7.model.weights_epoch = id7.model.weights_epoch;
    const Plain direct{single7, kvkey::single_tenant};
    CHECK(rotated.root() == direct.root());
    CHECK(rotated.policy().tenant == kvkey::TenantPolicy::single_tenant);
    CHECK(rotated.identity().tenant == direct.identity().tenant);
    CHECK(rotated.block_hashes(tokens) == direct.block_hashes(tokens));
  }
}
