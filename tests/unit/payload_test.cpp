// Payload integrity (kvkey/payload.hpp, envelope format version 2): digests
// and tags of the KV bytes, the policy opt-out, the streaming forms, and the
// faults a store produces: bit flips, torn tails, transplanted headers, forgery.
#include "support/fixtures.hpp"
#include "support/reference.hpp"

#include <catch2/catch.hpp>

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

ByteVec pattern(std::size_t n, std::uint32_t seed) {
  ByteVec b(n);
  std::mt19937 rng(seed);
  for (auto& x : b) x = static_cast<std::uint8_t>(rng());
  return b;
}

kvkey::TenantSecret secret(char c) { return kvkey::TenantSecret(std::string(32, c)); }

template <class Hash>
struct Setup {
  kvkey::KeyNamespace<Hash> ns;
  std::vector<kvkey::Digest> blocks;
  ByteVec bytes = pattern(4096, 1);
  ByteVec other = pattern(4096, 2);

  template <class... Args>
  explicit Setup(Args&&... args) : ns(std::forward<Args>(args)...) {
    blocks = ns.block_hashes(kvkey_test::tokens(2 * ns.block_size()));
  }
  Payload view() const { return {bytes.data(), bytes.size()}; }
};

using Plain = Setup<kvkey::Sha256>;
using Keyed = Setup<kvkey::HmacSha256>;

void check_rejected(const kvkey::Verdict& v, Reason r, const std::string& field) {
  CHECK(kvkey::to_string(v.reason) == kvkey::to_string(r));
  CHECK(v.field == field);
}

}  // namespace

TEST_CASE("payload: the digest is XXH3-128 of the concatenated bytes, however split", "[payload]") {
  const ByteVec b = pattern(10000, 3);
  const auto whole = kvkey::xxh3_128_digest(Payload(b.data(), b.size()));
  CHECK(kvkey_test::to_hex(whole) == kvkey_test::to_hex(kvkey_test::ref::xxh3_128(b)));
  std::mt19937 rng(7);
  for (int round = 0; round < 200; ++round) {
    std::vector<kvkey::ConstBuffer> parts;
    std::size_t at = 0;
    while (at < b.size()) {
      const std::size_t n = std::min<std::size_t>(b.size() - at, rng() % (round % 2 ? 64 : 3000));
      parts.push_back({b.data() + at, n});  // empty parts too
      at += n;
    }
    CHECK(kvkey::xxh3_128_digest(Payload(parts.data(), parts.size())) == whole);
  }
  const void* none = nullptr;
  const kvkey::ConstBuffer* no_parts = nullptr;
  CHECK(kvkey::xxh3_128_digest(Payload(none, 0)) == kvkey::xxh3_128_digest(Payload(no_parts, 0)));
  CHECK(kvkey_test::to_hex(kvkey::xxh3_128_digest(Payload(none, 0))) ==
        kvkey_test::to_hex(kvkey_test::ref::xxh3_128({})));
}

TEST_CASE("payload: seal with the bytes verifies, split or whole, and records mode and digest", "[payload]") {
  Plain p{kvkey_test::rich_identity()};
  const Envelope e = p.ns.seal(p.blocks[0], p.view());
  CHECK(e[L::namespace_kind] == 1);
  CHECK(e[L::integrity_mode] == 1);
  CHECK(p.ns.integrity_mode() == kvkey::IntegrityMode::xxh3_128);
  CHECK(p.ns.verify(e, p.blocks[0], p.view()).ok());
  std::mt19937 rng(11);
  for (int round = 0; round < 100; ++round) {
    const std::size_t cut1 = rng() % 4097;
    const std::size_t cut2 = cut1 + rng() % (4097 - cut1);
    const kvkey::ConstBuffer parts[] = {
        {p.bytes.data(), cut1}, {p.bytes.data() + cut1, cut2 - cut1}, {p.bytes.data() + cut2, 4096 - cut2}};
    CHECK(p.ns.seal(p.blocks[0], Payload(parts, 3)) == e);
    CHECK(p.ns.verify(e, p.blocks[0], Payload(parts, 3)).ok());
    auto v = p.ns.verifier(e.data(), e.size(), p.blocks[0]);
    for (const auto& part : parts) v.update(part.data, part.size);
    CHECK(v.finish().ok());
    auto s = p.ns.sealer(p.blocks[0]);
    for (const auto& part : parts) s.update(part.data, part.size);
    CHECK(s.finish() == e);
  }
}

TEST_CASE("payload: every single-bit flip of a 4 KiB payload is rejected", "[payload][faults]") {
  Plain p{kvkey_test::base_identity()};
  Keyed k{kvkey_test::base_identity(), secret('k')};
  const Envelope pe = p.ns.seal(p.blocks[0], p.view());
  const Envelope ke = k.ns.seal(k.blocks[0], k.view());
  ByteVec b = p.bytes;
  for (std::size_t bit = 0; bit < 8 * b.size(); ++bit) {
    b[bit / 8] ^= static_cast<std::uint8_t>(1u << (bit % 8));
    const auto v = p.ns.verify(pe, p.blocks[0], Payload(b.data(), b.size()));
    const auto w = k.ns.verify(ke, k.blocks[0], Payload(b.data(), b.size()));
    b[bit / 8] ^= static_cast<std::uint8_t>(1u << (bit % 8));
    if (v.reason != Reason::payload_mismatch || v.field != "payload" || w.reason != Reason::payload_mismatch) {
      FAIL_CHECK("bit " << bit << ": " << kvkey::to_string(v.reason) << " / " << kvkey::to_string(w.reason));
    }
  }
  CHECK(p.ns.verify(pe, p.blocks[0], Payload(b.data(), b.size())).ok());
}

TEST_CASE("payload: a torn payload of the right length is rejected", "[payload][faults]") {
  Plain p{kvkey_test::base_identity()};
  const Envelope e = p.ns.seal(p.blocks[0], p.view());
  for (std::size_t torn : {std::size_t{1}, std::size_t{512}, std::size_t{4095}}) {
    ByteVec b = p.bytes;
    std::fill(b.end() - static_cast<std::ptrdiff_t>(torn), b.end(), std::uint8_t{0});
    check_rejected(p.ns.verify(e, p.blocks[0], Payload(b.data(), b.size())), Reason::payload_mismatch, "payload");
  }
}

TEST_CASE("payload: a header transplanted onto another block's payload is rejected", "[payload][faults]") {
  Plain p{kvkey_test::base_identity()};
  Keyed k{kvkey_test::base_identity(), secret('k')};
  const Envelope p0 = p.ns.seal(p.blocks[0], p.view());
  const Envelope k0 = k.ns.seal(k.blocks[0], k.view());
  const Payload theirs(p.other.data(), p.other.size());  // block 1's bytes, same size
  // Read as block 0 (the header's own block) with block 1's bytes.
  check_rejected(p.ns.verify(p0, p.blocks[0], theirs), Reason::payload_mismatch, "payload");
  check_rejected(k.ns.verify(k0, k.blocks[0], theirs), Reason::payload_mismatch, "payload");
  // Read as block 1: the block hash differs first.
  check_rejected(p.ns.verify(p0, p.blocks[1], theirs), Reason::block_mismatch, "block_hash");
  check_rejected(k.ns.verify(k0, k.blocks[1], theirs), Reason::block_mismatch, "block_hash");
}

TEST_CASE("payload: keyed tags need the secret and bind the header", "[payload][keyed][faults]") {
  Keyed k{kvkey_test::base_identity(), secret('k')};
  const Envelope e = k.ns.seal(k.blocks[0], k.view());
  CHECK(k.ns.integrity_mode() == kvkey::IntegrityMode::poly1305);
  CHECK(e[L::namespace_kind] == 2);
  CHECK(e[L::integrity_mode] == 2);
  CHECK(k.ns.verify(e, k.blocks[0], k.view()).ok());

  SECTION("resealing the same block draws a fresh nonce; both verify") {
    const Envelope again = k.ns.seal(k.blocks[0], k.view());
    CHECK(!std::equal(e.begin() + L::nonce, e.begin() + L::nonce + 16, again.begin() + L::nonce));
    CHECK(k.ns.verify(again, k.blocks[0], k.view()).ok());
    const Envelope different = k.ns.seal(k.blocks[0], Payload(k.other.data(), k.other.size()));
    CHECK(k.ns.verify(different, k.blocks[0], Payload(k.other.data(), k.other.size())).ok());
    check_rejected(k.ns.verify(different, k.blocks[0], k.view()), Reason::payload_mismatch, "payload");
  }
  SECTION("the tag matches the independent reference") {
    const ByteVec header(e.begin(), e.end());
    const ByteVec tag =
        kvkey_test::ref::keyed_tag(ByteVec(32, 'k'), kvkey_test::bytes_of(k.ns.root()),
                                   ByteVec(e.begin() + L::nonce, e.begin() + L::nonce + 16), k.bytes, header);
    CHECK(kvkey_test::to_hex(tag) ==
          kvkey_test::to_hex(ByteVec(e.begin() + L::payload_digest, e.begin() + L::secret_id)));
  }
  SECTION("a reader with another secret rejects it") {
    Keyed other{kvkey_test::base_identity(), secret('x')};
    // The header names the secret that sealed it (format v3): another secret's reader says so.
    check_rejected(other.ns.verify(e, other.blocks[0], k.view()), Reason::identity_mismatch, "tenant.secret_id");
    check_rejected(other.ns.verify(e, k.blocks[0], k.view()), Reason::identity_mismatch, "tenant.secret_id");
    // Even with its secret id rewritten to the reader's, the tag does not verify under another secret.
    Envelope relabelled = e;
    std::copy(other.ns.secret_id()->bytes.begin(), other.ns.secret_id()->bytes.end(),
              relabelled.begin() + L::secret_id);
    check_rejected(other.ns.verify(relabelled, k.blocks[0], k.view()), Reason::payload_mismatch, "payload");
  }
  SECTION("forged payloads: anything but the sealed bytes fails") {
    ByteVec forged = k.other;
    check_rejected(k.ns.verify(e, k.blocks[0], Payload(forged.data(), forged.size())), Reason::payload_mismatch,
                   "payload");
    // A forger who can write the store recomputes XXH3 freely, but not the tag:
    // swapping in a plain-style digest, a new nonce or a zero tag fails.
    Envelope f = e;
    f[L::nonce] ^= 1;
    check_rejected(k.ns.verify(f, k.blocks[0], k.view()), Reason::payload_mismatch, "payload");
    f = e;
    std::fill(f.begin() + L::payload_digest, f.begin() + L::secret_id, std::uint8_t{0});
    check_rejected(k.ns.verify(f, k.blocks[0], k.view()), Reason::payload_mismatch, "payload");
    f = e;
    f[L::integrity_mode] = 1;
    check_rejected(k.ns.verify(f, k.blocks[0], k.view()), Reason::malformed, "envelope.integrity_mode");
  }
}

TEST_CASE("payload: plain and keyed readers reject each other's headers naming the field", "[payload][keyed]") {
  Plain p{kvkey_test::base_identity()};
  Keyed k{kvkey_test::base_identity(), secret('k')};
  const Envelope pe = p.ns.seal(p.blocks[0], p.view());
  const Envelope ke = k.ns.seal(k.blocks[0], k.view());
  check_rejected(k.ns.verify(pe, k.blocks[0], k.view()), Reason::identity_mismatch, "envelope.namespace_kind");
  check_rejected(p.ns.verify(ke, p.blocks[0], p.view()), Reason::identity_mismatch, "envelope.namespace_kind");
  // Same, with the other namespace's block hash: the kind is named first.
  check_rejected(p.ns.verify(ke, k.blocks[0], p.view()), Reason::identity_mismatch, "envelope.namespace_kind");
  auto parsed = kvkey::parse_envelope(ke.data(), ke.size());
  REQUIRE(parsed.contents.has_value());
  CHECK(parsed.contents->namespace_kind == kvkey::NamespaceKind::keyed);
  CHECK(parsed.contents->integrity == kvkey::IntegrityMode::poly1305);
}

TEST_CASE("payload: the policy states the check; size-only is an explicit opt-out", "[payload][policy]") {
  CHECK(kvkey::Policy{}.payload == kvkey::PayloadCheck::required);
  Plain strict{kvkey_test::base_identity()};
  Plain loose{kvkey_test::base_identity(), size_only};
  const Envelope with_digest = strict.ns.seal(strict.blocks[0], strict.view());

  // The default refuses to seal without the bytes, and never accepts a size-only check.
  CHECK_THROWS_AS(strict.ns.seal(strict.blocks[0], 4096), kvkey::input_error);
  check_rejected(strict.ns.verify(with_digest, strict.blocks[0], 4096), Reason::payload_mismatch, "payload");

  // A header sealed without digest records it (mode none) ...
  const Envelope no_digest = loose.ns.seal(loose.blocks[0], 4096);
  CHECK(no_digest[L::integrity_mode] == 0);
  CHECK(kvkey::decode_envelope(no_digest.data(), no_digest.size())->integrity == kvkey::IntegrityMode::none);
  // ... the opted-out reader accepts it, by size or with the bytes ...
  CHECK(loose.ns.verify(no_digest, loose.blocks[0], 4096).ok());
  CHECK(loose.ns.verify(no_digest, loose.blocks[0], loose.view()).ok());
  check_rejected(loose.ns.verify(no_digest, loose.blocks[0], 4095), Reason::size_mismatch, "payload_size");
  // ... and a reader that requires digests rejects it, naming the field.
  check_rejected(strict.ns.verify(no_digest, strict.blocks[0], strict.view()), Reason::payload_mismatch,
                 "envelope.integrity_mode");
  check_rejected(strict.ns.verify(no_digest, strict.blocks[0], 4096), Reason::payload_mismatch,
                 "envelope.integrity_mode");
  // The opted-out reader still checks a digest when it has the bytes.
  CHECK(loose.ns.verify(with_digest, loose.blocks[0], loose.view()).ok());
  CHECK(loose.ns.verify(with_digest, loose.blocks[0], 4096).ok());
  ByteVec bad = strict.bytes;
  bad[100] ^= 4;
  check_rejected(loose.ns.verify(with_digest, loose.blocks[0], Payload(bad.data(), bad.size())),
                 Reason::payload_mismatch, "payload");
}

TEST_CASE("payload: malformed integrity fields are named", "[payload][envelope]") {
  Plain p{kvkey_test::base_identity()};
  const Envelope e = p.ns.seal(p.blocks[0], p.view());
  const auto field_of = [&](const Envelope& h) { return kvkey::parse_envelope(h.data(), h.size()).verdict.field; };
  Envelope f = e;
  f[L::namespace_kind] = 0;
  CHECK(field_of(f) == "envelope.namespace_kind");
  f = e;
  f[L::integrity_mode] = 2;  // poly1305 in a plain header
  CHECK(field_of(f) == "envelope.integrity_mode");
  f = e;
  f[L::nonce + 5] = 1;
  CHECK(field_of(f) == "envelope.nonce");
  f = e;
  f[L::integrity_mode] = 0;  // none, with a digest left behind
  CHECK(field_of(f) == "envelope.payload_digest");
  f = e;
  f[L::reserved + 2] = 1;
  CHECK(field_of(f) == "envelope.padding");
  for (const Envelope& h : {e}) CHECK(kvkey::parse_envelope(h.data(), h.size()).verdict.ok());
}

TEST_CASE("payload: version-1 headers are unsupported", "[payload][envelope]") {
  Plain p{kvkey_test::base_identity()};
  Envelope e = p.ns.seal(p.blocks[0], p.view());
  e[L::version] = 1;
  check_rejected(p.ns.verify(e, p.blocks[0], p.view()), Reason::unsupported_version, "envelope.format_version");
  const auto parsed = kvkey::parse_envelope(e.data(), e.size());
  CHECK_FALSE(parsed.contents.has_value());
  CHECK(parsed.verdict.reason == Reason::unsupported_version);
}

TEST_CASE("payload: streaming keyed sealer and verifier agree with the one-shot forms", "[payload][keyed]") {
  Keyed k{kvkey_test::rich_identity(), secret('s')};
  auto s = k.ns.sealer(k.blocks[1]);
  for (std::size_t at = 0; at < k.bytes.size(); at += 1000)
    s.update(k.bytes.data() + at, std::min<std::size_t>(1000, k.bytes.size() - at));
  const Envelope e = s.finish();
  CHECK(k.ns.verify(e, k.blocks[1], k.view()).ok());
  auto v = k.ns.verifier(e.data(), e.size(), k.blocks[1]);
  v.update(k.bytes.data(), 17);
  v.update(k.bytes.data() + 17, k.bytes.size() - 17);
  CHECK(v.finish().ok());
  auto torn = k.ns.verifier(e.data(), e.size(), k.blocks[1]);
  torn.update(k.bytes.data(), k.bytes.size() - 1);
  check_rejected(torn.finish(), Reason::size_mismatch, "payload_size");
  auto shortheader = k.ns.verifier(e.data(), 100, k.blocks[1]);
  check_rejected(shortheader.finish(), Reason::malformed, "envelope.size");
}
