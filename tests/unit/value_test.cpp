// Stored values (docs/format.md, "Stored values"): KeyNamespace::seal_value
// and open_value, plain and keyed, against the store's faults.
#include "support/fixtures.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace {

using kvkey::Payload;
using kvkey::Reason;
using kvkey_test::ByteVec;

ByteVec pattern(std::size_t n, std::uint32_t seed) {
  ByteVec b(n);
  std::mt19937 rng(seed);
  for (auto& x : b) x = static_cast<std::uint8_t>(rng());
  return b;
}

const kvkey::Digest block_a = kvkey::fingerprint("block a");
const kvkey::Digest block_b = kvkey::fingerprint("block b");

template <class Ns>
void check_value_framing(const Ns& ns) {
  const ByteVec kv = pattern(5000, 7);
  const kvkey::Bytes value = ns.seal_value(block_a, Payload(kv.data(), kv.size()));

  SECTION("the value is the envelope, then the payload") {
    REQUIRE(value.size() == kvkey::envelope_size + kv.size());
    CHECK(std::memcmp(value.data() + kvkey::envelope_size, kv.data(), kv.size()) == 0);
    CHECK(ns.verify(value.data(), kvkey::envelope_size, block_a, Payload(kv.data(), kv.size())).ok());
    CHECK(kvkey::value_size(kv.size()) == value.size());
  }
  SECTION("open_value returns a view of the verified payload inside the value") {
    const kvkey::OpenedValue o = ns.open_value(value.data(), value.size(), block_a);
    REQUIRE(o.ok());
    CHECK(o.payload.data == value.data() + kvkey::envelope_size);
    CHECK(o.payload.size == kv.size());
    CHECK(ns.open_value(value, block_a).ok());
  }
  SECTION("another block's key") {
    const kvkey::OpenedValue o = ns.open_value(value.data(), value.size(), block_b);
    CHECK(o.verdict.reason == Reason::block_mismatch);
    CHECK(o.payload.data == nullptr);
    CHECK(o.payload.size == 0);
  }
  SECTION("empty, shorter than an envelope, null") {
    CHECK(ns.open_value(value.data(), 0, block_a).verdict.field == "envelope.size");
    CHECK(ns.open_value(nullptr, 0, block_a).verdict.reason == Reason::malformed);
    const kvkey::OpenedValue o = ns.open_value(value.data(), kvkey::envelope_size - 1, block_a);
    CHECK(o.verdict.reason == Reason::malformed);
    CHECK(o.verdict.field == "envelope.size");
    CHECK(o.payload.data == nullptr);
  }
  SECTION("truncated and oversized payloads are size_mismatch") {
    for (const std::size_t size : {kvkey::envelope_size, value.size() - 1}) {
      const kvkey::OpenedValue o = ns.open_value(value.data(), size, block_a);
      CHECK(o.verdict.reason == Reason::size_mismatch);
      CHECK(o.payload.data == nullptr);
    }
    kvkey::Bytes longer = value;
    longer.push_back(0);
    CHECK(ns.open_value(longer, block_a).verdict.reason == Reason::size_mismatch);
  }
  SECTION("a flipped bit anywhere is a miss") {
    for (const std::size_t at :
         {std::size_t{0}, std::size_t{20}, std::size_t{100}, kvkey::envelope_size, value.size() - 1}) {
      kvkey::Bytes bad = value;
      bad[at] ^= 0x10;
      const kvkey::OpenedValue o = ns.open_value(bad, block_a);
      CHECK_FALSE(o.ok());
      CHECK(o.payload.data == nullptr);
    }
  }
  SECTION("an empty payload round-trips") {
    const kvkey::Bytes empty = ns.seal_value(block_a, Payload(kv.data(), 0));
    CHECK(empty.size() == kvkey::envelope_size);
    const kvkey::OpenedValue o = ns.open_value(empty, block_a);
    CHECK(o.ok());
    CHECK(o.payload.size == 0);
  }
  SECTION("scatter-gather parts make the same payload") {
    const kvkey::ConstBuffer parts[] = {{kv.data(), 1000}, {kv.data() + 1000, 0}, {kv.data() + 1000, 4000}};
    const kvkey::Bytes v2 = ns.seal_value(block_a, Payload(parts, 3));
    CHECK(std::memcmp(v2.data() + kvkey::envelope_size, kv.data(), kv.size()) == 0);
    CHECK(ns.open_value(v2, block_a).ok());
  }
}

}  // namespace

TEST_CASE("seal_value and open_value: plain namespace", "[value]") {
  const kvkey::KeyNamespace<> ns(kvkey_test::base_identity());
  check_value_framing(ns);
}

TEST_CASE("seal_value and open_value: keyed namespace", "[value]") {
  const kvkey::KeyNamespace<kvkey::HmacSha256> ns(
      kvkey_test::base_identity(), kvkey::HmacSha256(kvkey::TenantSecret(kvkey_test::secret_bytes('a'))));
  check_value_framing(ns);
}

TEST_CASE("seal_value into a caller's buffer", "[value]") {
  const kvkey::KeyNamespace<> ns(kvkey_test::base_identity());
  const ByteVec kv = pattern(300000, 3);  // several copy pieces
  const Payload payload(kv.data(), kv.size());

  SECTION("exact size: writes the whole value and returns its size") {
    ByteVec out(kvkey::envelope_size + kv.size());
    CHECK(ns.seal_value(block_a, payload, out.data(), out.size()) == out.size());
    CHECK(ns.open_value(out.data(), out.size(), block_a).ok());
    CHECK(std::memcmp(out.data() + kvkey::envelope_size, kv.data(), kv.size()) == 0);
  }
  SECTION("a larger buffer: only the value's bytes are written") {
    ByteVec out(kvkey::envelope_size + kv.size() + 10, 0xab);
    const std::size_t n = ns.seal_value(block_a, payload, out.data(), out.size());
    CHECK(n == kvkey::envelope_size + kv.size());
    CHECK(out.back() == 0xab);
    CHECK(ns.open_value(out.data(), n, block_a).ok());
  }
  SECTION("too small a buffer is input_error, and nothing is written") {
    for (const std::size_t size :
         {std::size_t{0}, kvkey::envelope_size - 1, kvkey::envelope_size, kvkey::envelope_size + kv.size() - 1}) {
      ByteVec out(size + 1, 0xcd);
      CHECK_THROWS_AS(ns.seal_value(block_a, payload, out.data(), size), kvkey::input_error);
      CHECK(std::all_of(out.begin(), out.end(), [](std::uint8_t b) { return b == 0xcd; }));
    }
    CHECK_THROWS_WITH(ns.seal_value(block_a, payload, nullptr, 0), Catch::Contains("the value needs 1024 + 300000"));
  }
  SECTION("the value opens equal to seal_value's, whichever form wrote it") {
    ByteVec out(kvkey::envelope_size + kv.size());
    (void)ns.seal_value(block_a, payload, out.data(), out.size());
    const kvkey::Bytes v = ns.seal_value(block_a, payload);
    CHECK(ByteVec(v.begin(), v.end()) == out);  // plain: deterministic
  }
}

TEST_CASE("value_size refuses what cannot be held in memory", "[value]") {
  CHECK(kvkey::value_size(0) == kvkey::envelope_size);
  CHECK_THROWS_AS(kvkey::value_size(~std::uint64_t{0}), kvkey::input_error);
}
