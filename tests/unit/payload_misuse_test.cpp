// Misuse of the streaming sealers and verifiers is refused with an exception,
// never a crash: update() or finish() after finish(), or on a moved-from one.
#include "support/fixtures.hpp"

#include <catch2/catch.hpp>

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace {

using kvkey::Payload;
using kvkey_test::ByteVec;

kvkey::TenantSecret secret() { return kvkey::TenantSecret(std::string(32, 's')); }

template <class NS>
void check_streaming_misuse(const NS& ns) {
  const auto blocks = ns.block_hashes(kvkey_test::tokens(ns.block_size()));
  const ByteVec bytes(100, 9);

  auto s = ns.sealer(blocks[0]);
  s.update(bytes.data(), bytes.size());
  const kvkey::Envelope e = s.finish();
  CHECK(ns.verify(e, blocks[0], Payload(bytes.data(), bytes.size())).ok());
  CHECK_THROWS_AS(s.finish(), std::logic_error);
  CHECK_THROWS_AS(s.update(bytes.data(), bytes.size()), std::logic_error);
  CHECK_THROWS_AS(s.update(bytes.data(), 0), std::logic_error);
  CHECK_THROWS_WITH(s.finish(), Catch::Contains("finish"));

  auto v = ns.verifier(e.data(), e.size(), blocks[0]);
  v.update(bytes.data(), bytes.size());
  CHECK(v.finish().ok());
  CHECK_THROWS_AS(v.finish(), std::logic_error);
  CHECK_THROWS_AS(v.update(bytes.data(), bytes.size()), std::logic_error);

  // A verifier whose header has the wrong length finishes once too.
  auto shortheader = ns.verifier(e.data(), 10, blocks[0]);
  CHECK_FALSE(shortheader.finish().ok());
  CHECK_THROWS_AS(shortheader.finish(), std::logic_error);

  // A moved-from sealer or verifier is finished.
  auto a = ns.sealer(blocks[0]);
  auto b = std::move(a);
  CHECK_THROWS_AS(a.update(bytes.data(), bytes.size()), std::logic_error);  // NOLINT(bugprone-use-after-move)
  CHECK_THROWS_AS(a.finish(), std::logic_error);
  b.update(bytes.data(), bytes.size());
  const kvkey::Envelope moved = b.finish();
  CHECK(ns.verify(moved, blocks[0], Payload(bytes.data(), bytes.size())).ok());
  auto c = ns.verifier(moved.data(), moved.size(), blocks[0]);
  auto d = std::move(c);
  CHECK_THROWS_AS(c.finish(), std::logic_error);  // NOLINT(bugprone-use-after-move)
  d.update(bytes.data(), bytes.size());
  CHECK(d.finish().ok());
}

}  // namespace

TEST_CASE("streaming: a second finish() or an update() after finish() throws std::logic_error", "[payload][misuse]") {
  SECTION("plain") { check_streaming_misuse(kvkey::KeyNamespace<>{kvkey_test::base_identity()}); }
  SECTION("keyed") {
    check_streaming_misuse(kvkey::KeyNamespace<kvkey::HmacSha256>{kvkey_test::base_identity(), secret()});
  }
}
