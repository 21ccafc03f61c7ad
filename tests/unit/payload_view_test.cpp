// kvkey::Payload refuses views it cannot read: a null pointer with a nonzero
// size (the range, the parts array or a part) and parts whose sizes overflow.
#include "support/fixtures.hpp"

#include <catch2/catch.hpp>

#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>

namespace {

using kvkey::ConstBuffer;
using kvkey::Payload;
using kvkey_test::ByteVec;

kvkey::TenantSecret secret() { return kvkey::TenantSecret(std::string(32, 's')); }

}  // namespace

TEST_CASE("Payload: a null pointer with a nonzero size is an input_error", "[payload][misuse]") {
  CHECK_THROWS_AS(Payload(nullptr, 16), kvkey::input_error);
  CHECK_THROWS_WITH(Payload(nullptr, 16), Catch::Contains("null"));
  CHECK_THROWS_AS(Payload(static_cast<const ConstBuffer*>(nullptr), 4), kvkey::input_error);
  const ByteVec bytes(8, 1);
  const ConstBuffer with_null[] = {{bytes.data(), bytes.size()}, {nullptr, 3}};
  CHECK_THROWS_AS(Payload(with_null, 2), kvkey::input_error);
  CHECK_THROWS_WITH(Payload(with_null, 2), Catch::Contains("part 1"));

  // Null with size zero is an empty payload.
  CHECK(Payload(nullptr, 0).size() == 0);
  CHECK(Payload(static_cast<const ConstBuffer*>(nullptr), 0).size() == 0);
  const ConstBuffer empty_parts[] = {{nullptr, 0}, {bytes.data(), bytes.size()}, {nullptr, 0}};
  CHECK(Payload(empty_parts, 3).size() == bytes.size());

  // Neither namespace kind seals or verifies anything for a null payload: the view is refused first.
  const kvkey::KeyNamespace<> plain{kvkey_test::base_identity()};
  const kvkey::KeyNamespace<kvkey::HmacSha256> keyed{kvkey_test::base_identity(), secret()};
  const auto hp = plain.block_hashes(kvkey_test::tokens(plain.block_size()));
  const auto hk = keyed.block_hashes(kvkey_test::tokens(keyed.block_size()));
  CHECK_THROWS_AS(plain.seal(hp[0], Payload(nullptr, 16)), kvkey::input_error);
  CHECK_THROWS_AS(keyed.seal(hk[0], Payload(nullptr, 16)), kvkey::input_error);
  const kvkey::Envelope e = plain.seal(hp[0], Payload(bytes.data(), 0));
  CHECK(plain.verify(e, hp[0], Payload(nullptr, 0)).ok());
}

TEST_CASE("Payload: sizes whose sum overflows are an input_error", "[payload][misuse]") {
  constexpr std::size_t max = std::numeric_limits<std::size_t>::max();
  const ByteVec bytes(8, 1);
  const ConstBuffer wraps[] = {{bytes.data(), max}, {bytes.data(), 2}};
  CHECK_THROWS_AS(Payload(wraps, 2), kvkey::input_error);
  CHECK_THROWS_WITH(Payload(wraps, 2), Catch::Contains("overflow"));
  const ConstBuffer three[] = {{bytes.data(), max / 2}, {bytes.data(), max / 2}, {bytes.data(), 2}};
  CHECK_THROWS_AS(Payload(three, 3), kvkey::input_error);
  // The largest sum that fits is accepted (it is only counted, never read here).
  const ConstBuffer fits[] = {{bytes.data(), max - 1}, {bytes.data(), 1}};
  CHECK(Payload(fits, 2).size() == max);
}
