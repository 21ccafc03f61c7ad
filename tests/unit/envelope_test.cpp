// Envelopes: layout, verify's verdicts, and rejection of every damaged header
// (truncated, extended, random, each single bit flipped) without crashing.
#include "support/reference.hpp"

#include <catch2/catch.hpp>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

namespace {

using kvkey::Envelope;
using kvkey::Reason;
using kvkey_test::base_identity;
using kvkey_test::rich_identity;
namespace L = kvkey::envelope_layout;

struct Fixture {
  kvkey::KeyNamespace<> ns;
  kvkey::Digest block;
  kvkey::Digest other_block;
  std::uint64_t payload = 28 * 2 * 2 * 128 * 16 * 1;  // layers * K,V * heads * dim * tokens * int8
  std::vector<std::uint8_t> bytes = std::vector<std::uint8_t>(static_cast<std::size_t>(payload), 0x5a);
  Envelope header;

  explicit Fixture(const kvkey::Identity& id) : ns(id) {
    const auto hashes = ns.block_hashes(kvkey_test::tokens(2 * ns.block_size()));
    block = hashes.at(0);
    other_block = hashes.at(1);
    header = ns.seal(block, view());
  }
  kvkey::Payload view() const { return {bytes.data(), bytes.size()}; }
};

bool rejected_with_known_reason(const kvkey::Verdict& v) {
  switch (v.reason) {
    case Reason::malformed:
    case Reason::unsupported_version:
    case Reason::identity_mismatch:
    case Reason::block_mismatch:
    case Reason::size_mismatch:
    case Reason::payload_mismatch: return true;
    case Reason::ok:
    case Reason::not_granted: return false;  // a shared scope's grant, never an envelope's verdict
  }
  return false;
}

}  // namespace

TEST_CASE("seal writes the documented layout for identities of very different sizes", "[envelope]") {
  kvkey::Identity tiny = base_identity();
  tiny.tenant = "t";
  tiny.model.name = "m";
  tiny.model.revision = "r";
  tiny.kv.layout = "l";
  for (const kvkey::Identity& id : {tiny, base_identity(), rich_identity(), kvkey_test::largest_identity()}) {
    const Fixture f(id);
    const auto& enc = f.ns.encoding();
    CAPTURE(enc.size());
    STATIC_REQUIRE(std::tuple_size<Envelope>::value == kvkey::envelope_size);
    CHECK(kvkey::envelope_size == 1024);
    kvkey_test::ref::Integrity in;  // digest zero: header', which the digest covers
    const kvkey_test::ByteVec encoding(enc.begin(), enc.end());
    in.digest = kvkey_test::ref::plain_digest(
        f.bytes, kvkey_test::ref::envelope(encoding, kvkey_test::bytes_of(f.block), f.payload, f.ns.slice(), in));
    const auto expected =
        kvkey_test::ref::envelope(encoding, kvkey_test::bytes_of(f.block), f.payload, f.ns.slice(), in);
    CHECK(kvkey_test::to_hex(f.header) == kvkey_test::to_hex(expected));
    CHECK(std::memcmp(f.header.data() + L::magic, "KVKEYENV", 8) == 0);
    CHECK(std::memcmp(f.header.data() + L::identity, enc.data(), enc.size()) == 0);
    CHECK(std::memcmp(f.header.data() + L::block_hash, f.block.data(), 32) == 0);
  }
  CHECK(L::magic == 0);
  CHECK(L::version == 8);
  CHECK(L::size == 10);
  CHECK(L::identity_len == 12);
  CHECK(L::block_hash == 16);
  CHECK(L::payload_size == 48);
  CHECK(L::slice == 56);
  CHECK(L::namespace_kind == 72);
  CHECK(L::integrity_mode == 73);
  CHECK(L::reserved == 74);
  CHECK(L::nonce == 80);
  CHECK(L::payload_digest == 96);
  CHECK(L::secret_id == 112);
  CHECK(L::identity == 120);
}

TEST_CASE("verify: ok and block_mismatch and size_mismatch", "[envelope]") {
  const Fixture f(rich_identity());
  CHECK(f.ns.verify(f.header, f.block, f.view()).ok());
  CHECK(f.ns.verify(f.header, f.block, f.view()).field.empty());
  CHECK(f.ns.verify(f.header.data(), f.header.size(), f.block, f.view()).ok());

  const auto b = f.ns.verify(f.header, f.other_block, f.view());
  CHECK(b.reason == Reason::block_mismatch);
  CHECK(b.field == "block_hash");
  for (std::size_t size : {std::size_t{0}, f.bytes.size() - 1, f.bytes.size() + 1, 2 * f.bytes.size()}) {
    CAPTURE(size);
    std::vector<std::uint8_t> other = f.bytes;
    other.resize(size, 0x5a);
    const auto v = f.ns.verify(f.header, f.block, kvkey::Payload(other.data(), other.size()));
    CHECK(v.reason == Reason::size_mismatch);
    CHECK(v.field == "payload_size");
  }
  // A namespace built from an equal identity accepts the header.
  const kvkey::KeyNamespace<> again(rich_identity());
  CHECK(again.verify(f.header, f.block, f.view()).ok());
}

TEST_CASE("verify: damaged headers are malformed or unsupported and never ok", "[envelope]") {
  const Fixture f(rich_identity());
  auto verdict = [&](const Envelope& e) { return f.ns.verify(e, f.block, f.view()); };

  SECTION("nullptr") {
    CHECK(f.ns.verify(nullptr, 0, f.block, f.view()).reason == Reason::malformed);
    CHECK(f.ns.verify(nullptr, kvkey::envelope_size, f.block, f.view()).reason == Reason::malformed);
  }
  SECTION("magic changed") {
    for (std::size_t i = 0; i < 8; ++i) {
      Envelope e = f.header;
      e[L::magic + i] ^= 0x20;
      const auto v = verdict(e);
      CHECK(v.reason == Reason::malformed);
      CHECK(v.field == "envelope.magic");
    }
  }
  SECTION("format version changed") {
    for (std::uint16_t version : {0, 1, 2, 3, 5, 0x0400, 0xffff}) {  // 1 to 3: nothing reads them any more
      CAPTURE(version);
      Envelope e = f.header;
      e[L::version] = static_cast<std::uint8_t>(version);
      e[L::version + 1] = static_cast<std::uint8_t>(version >> 8);
      const auto v = verdict(e);
      CHECK(v.reason == Reason::unsupported_version);
      CHECK(v.field == "envelope.format_version");
    }
  }
  SECTION("size field changed") {
    Envelope e = f.header;
    e[L::size + 1] = 8;  // 1024 (0x0400) -> 2048
    CHECK(verdict(e).reason == Reason::malformed);
    CHECK(verdict(e).field == "envelope.size");
    e[L::size + 1] = 4;
    e[L::size] = 1;  // 1025
    CHECK(verdict(e).reason == Reason::malformed);
  }
  SECTION("identity length out of range or wrong") {
    const std::uint32_t n = static_cast<std::uint32_t>(f.ns.encoding().size());
    for (std::uint32_t len : {0u, 1u, n - 1, n + 1, 1024u - 112u, 1024u - 111u, 0xffffffffu}) {
      CAPTURE(len);
      Envelope e = f.header;
      for (int i = 0; i < 4; ++i) e[L::identity_len + i] = static_cast<std::uint8_t>(len >> (8 * i));
      CHECK(verdict(e).reason == Reason::malformed);
      CHECK(verdict(e).field == "envelope.identity");
    }
  }
  SECTION("nonzero padding") {
    const std::size_t end = L::identity + f.ns.encoding().size();
    for (std::size_t i : {end, end + 1, std::size_t{1000}, kvkey::envelope_size - 1, L::reserved, L::nonce - 1}) {
      CAPTURE(i);
      Envelope e = f.header;
      e[i] = 1;
      const auto v = verdict(e);
      CHECK(v.reason == Reason::malformed);
      CHECK(v.field == "envelope.padding");
    }
  }
  SECTION("truncated at every length") {
    for (std::size_t len = 0; len < kvkey::envelope_size; ++len) {
      CAPTURE(len);
      // A copy of exactly len bytes, so reading past it would be caught by sanitizers.
      std::vector<std::uint8_t> part(f.header.begin(), f.header.begin() + static_cast<std::ptrdiff_t>(len));
      const auto v = f.ns.verify(part.data(), part.size(), f.block, f.view());
      CHECK(v.reason == Reason::malformed);
      CHECK(v.field == "envelope.size");
      CHECK_FALSE(kvkey::decode_envelope(part.data(), part.size()).has_value());
    }
  }
  SECTION("extended") {
    for (std::size_t extra : {1, 7, 1024}) {
      std::vector<std::uint8_t> longer(f.header.begin(), f.header.end());
      longer.resize(longer.size() + extra, 0);
      const auto v = f.ns.verify(longer.data(), longer.size(), f.block, f.view());
      CHECK(v.reason == Reason::malformed);
      CHECK_FALSE(kvkey::decode_envelope(longer.data(), longer.size()).has_value());
    }
  }
}

TEST_CASE("verify: every single bit flip is rejected", "[envelope]") {
  for (const kvkey::Identity& id : {base_identity(), rich_identity()}) {
    const Fixture f(id);
    std::size_t by_reason[7] = {};
    for (std::size_t bit = 0; bit < 8 * kvkey::envelope_size; ++bit) {
      Envelope e = f.header;
      e[bit / 8] = static_cast<std::uint8_t>(e[bit / 8] ^ (1u << (bit % 8)));
      const auto v = f.ns.verify(e, f.block, f.view());
      if (!rejected_with_known_reason(v)) {
        FAIL_CHECK("bit " << bit << " (byte " << bit / 8 << ") flipped gives reason " << kvkey::to_string(v.reason));
      }
      ++by_reason[static_cast<int>(v.reason)];
    }
    // Each part of the header is checked: flips in it produce its own reason.
    CHECK(by_reason[static_cast<int>(Reason::ok)] == 0);
    CHECK(by_reason[static_cast<int>(Reason::block_mismatch)] == 8 * 32);
    CHECK(by_reason[static_cast<int>(Reason::size_mismatch)] == 8 * 8);
    CHECK(by_reason[static_cast<int>(Reason::payload_mismatch)] == 8 * 16);  // the digest
    CHECK(by_reason[static_cast<int>(Reason::unsupported_version)] == 16);
    CHECK(by_reason[static_cast<int>(Reason::identity_mismatch)] > 8 * 16);  // slice bits and identity bytes
    CHECK(by_reason[static_cast<int>(Reason::malformed)] > 8 * 8);
  }
}

TEST_CASE("verify: random and random-but-plausible headers never verify", "[envelope]") {
  const Fixture f(rich_identity());
  std::mt19937_64 rng(20240611);
  auto fill_random = [&](std::uint8_t* p, std::size_t n) {
    for (std::size_t i = 0; i < n; ++i) p[i] = static_cast<std::uint8_t>(rng());
  };
  for (int seed = 0; seed < 2000; ++seed) {
    CAPTURE(seed);
    Envelope e;
    fill_random(e.data(), e.size());
    switch (seed % 4) {
      case 0:  // pure noise
        break;
      case 1:  // a real fixed part, noise after it
        std::memcpy(e.data(), f.header.data(), L::identity);
        break;
      case 2:  // the real header with a random run of bytes overwritten
      {
        e = f.header;
        const std::size_t at = rng() % kvkey::envelope_size;
        const std::size_t n = 1 + rng() % 64;
        for (std::size_t i = at; i < at + n && i < e.size(); ++i) e[i] = static_cast<std::uint8_t>(rng());
        if (e == f.header) continue;
        break;
      }
      case 3:  // the real header, identity bytes replaced by random bytes of the same length
        e = f.header;
        fill_random(e.data() + L::identity, f.ns.encoding().size());
        break;
    }
    const auto v = f.ns.verify(e, f.block, f.view());
    CHECK(rejected_with_known_reason(v));
    // Random lengths too, reading only the first len bytes.
    const std::size_t len = rng() % (2 * kvkey::envelope_size);
    std::vector<std::uint8_t> buf(len);
    fill_random(buf.data(), len);
    if (len >= 8) std::memcpy(buf.data(), "KVKEYENV", 8);
    CHECK(rejected_with_known_reason(f.ns.verify(buf.data(), buf.size(), f.block, f.view())));
  }
}

TEST_CASE("decode_envelope round-trips the contents", "[envelope]") {
  kvkey::Identity id = rich_identity();
  id.shard = {4, 3, 2, 1};  // 4 heads, tp 4 rank 3 -> head 3; 28 layers, pp 2 rank 1 -> [14, 28)
  const Fixture f(id);
  const auto c = kvkey::decode_envelope(f.header.data(), f.header.size());
  REQUIRE(c.has_value());
  CHECK(c->version == 4);
  CHECK(kvkey_test::same_salient_fields(c->identity, id));
  CHECK(c->slice == kvkey::Slice{3, 4, 14, 28});
  CHECK(c->block_hash == f.block);
  CHECK(c->payload_size == f.payload);
  CHECK(c->namespace_kind == kvkey::NamespaceKind::plain);
  CHECK(c->integrity == kvkey::IntegrityMode::xxh3_128);
  CHECK(!c->secret_id.has_value());
  CHECK(kvkey_test::to_hex(c->payload_digest) == kvkey_test::to_hex(kvkey_test::ref::plain_digest(
                                                     f.bytes, kvkey_test::ByteVec(f.header.begin(), f.header.end()))));

  Envelope e = f.header;
  e[L::magic] = 'X';
  CHECK_FALSE(kvkey::decode_envelope(e.data(), e.size()).has_value());
  e = f.header;
  e[L::version] = 1;
  CHECK_FALSE(kvkey::decode_envelope(e.data(), e.size()).has_value());
  e = f.header;
  e[kvkey::envelope_size - 1] = 1;
  CHECK_FALSE(kvkey::decode_envelope(e.data(), e.size()).has_value());
  CHECK_FALSE(kvkey::decode_envelope(nullptr, kvkey::envelope_size).has_value());
}

TEST_CASE("Reason names are stable", "[envelope]") {
  CHECK(kvkey::to_string(Reason::ok) == "ok");
  CHECK(kvkey::to_string(Reason::malformed) == "malformed");
  CHECK(kvkey::to_string(Reason::unsupported_version) == "unsupported_version");
  CHECK(kvkey::to_string(Reason::identity_mismatch) == "identity_mismatch");
  CHECK(kvkey::to_string(Reason::block_mismatch) == "block_mismatch");
  CHECK(kvkey::to_string(Reason::size_mismatch) == "size_mismatch");
  CHECK(kvkey::to_string(Reason::payload_mismatch) == "payload_mismatch");
  CHECK_FALSE(kvkey::Verdict{}.ok());  // a default verdict is a miss
}
