// reusable_prefix: block-major per-shard results -> leading reusable blocks.
#include "support/fixtures.hpp"

#include <catch2/catch.hpp>

#include <array>
#include <cstddef>
#include <deque>
#include <limits>
#include <vector>

namespace {

using kvkey::Reason;
using kvkey::ReusablePrefix;
using kvkey::Verdict;

const Verdict ok{Reason::ok, {}};
const Verdict miss{Reason::block_mismatch, "block_hash"};

ReusablePrefix rp(std::size_t blocks, std::size_t tokens) { return ReusablePrefix{blocks, tokens}; }

}  // namespace

TEST_CASE("reusable_prefix with bool results", "[prefix]") {
  using V = std::vector<bool>;
  CHECK(kvkey::reusable_prefix(V{}, 1, 16) == rp(0, 0));
  CHECK(kvkey::reusable_prefix(V{true, true, true}, 1, 16) == rp(3, 48));
  CHECK(kvkey::reusable_prefix(V{false, true, true}, 1, 16) == rp(0, 0));
  CHECK(kvkey::reusable_prefix(V{true, false, true}, 1, 16) == rp(1, 16));  // a later hit does not count

  // Block-major, 2 shards per block: entry b*2 + s.
  const V two = {true, true, /* block 1 */ true, true, /* block 2 */ true, false, /* block 3 */ true, true};
  CHECK(kvkey::reusable_prefix(two, 2, 64) == rp(2, 128));
  // The same flags read as 4 shards per block: block 1 has a miss.
  CHECK(kvkey::reusable_prefix(two, 4, 64) == rp(1, 64));
  // A miss on the first shard of a block stops as well.
  CHECK(kvkey::reusable_prefix(V{true, true, false, true}, 2, 64) == rp(1, 64));

  // Other containers: std::array, std::deque, a C array.
  const std::array<bool, 6> arr = {true, true, true, true, true, true};
  CHECK(kvkey::reusable_prefix(arr, 3, 10) == rp(2, 20));
  const std::deque<bool> dq = {true, true, true, false};
  CHECK(kvkey::reusable_prefix(dq, 1, 10) == rp(3, 30));
  const bool c_array[4] = {true, true, true, true};
  CHECK(kvkey::reusable_prefix(c_array, 4, 7) == rp(1, 7));
}

TEST_CASE("reusable_prefix with Verdict results counts only ok()", "[prefix]") {
  const std::vector<Verdict> all_ok(8, ok);
  CHECK(kvkey::reusable_prefix(all_ok, 4, 16) == rp(2, 32));
  for (Reason bad : {Reason::malformed, Reason::unsupported_version, Reason::identity_mismatch, Reason::block_mismatch,
                     Reason::size_mismatch}) {
    CAPTURE(kvkey::to_string(bad));
    for (std::size_t at = 0; at < 12; ++at) {
      CAPTURE(at);
      std::vector<Verdict> v(12, ok);  // 3 blocks x 4 shards
      v[at] = Verdict{bad, {}};
      const std::size_t blocks = at / 4;
      CHECK(kvkey::reusable_prefix(v, 4, 16) == rp(blocks, blocks * 16));
    }
  }
  CHECK(kvkey::reusable_prefix(std::vector<Verdict>{ok, miss, ok, ok}, 1, 16) == rp(1, 16));
  CHECK(kvkey::reusable_prefix(std::vector<Verdict>{Verdict{}}, 1, 16) == rp(0, 0));  // default is a miss
}

TEST_CASE("reusable_prefix honours max_tokens", "[prefix]") {
  const std::vector<bool> hits(10, true);
  CHECK(kvkey::reusable_prefix(hits, 1, 16) == rp(10, 160));
  CHECK(kvkey::reusable_prefix(hits, 1, 16, 160) == rp(10, 160));
  CHECK(kvkey::reusable_prefix(hits, 1, 16, 159) == rp(9, 144));  // prompt_len - 1 for a 160-token prompt
  CHECK(kvkey::reusable_prefix(hits, 1, 16, 48) == rp(3, 48));
  CHECK(kvkey::reusable_prefix(hits, 1, 16, 15) == rp(0, 0));
  CHECK(kvkey::reusable_prefix(hits, 1, 16, 0) == rp(0, 0));
  CHECK(kvkey::reusable_prefix(hits, 2, 16, 50) == rp(3, 48));
  CHECK(kvkey::reusable_prefix(hits, 1, 16, std::numeric_limits<std::size_t>::max()) == rp(10, 160));
}

TEST_CASE("reusable_prefix rejects bad arguments", "[prefix]") {
  const std::vector<bool> hits(6, true);
  CHECK_THROWS_AS(kvkey::reusable_prefix(hits, 0, 16), kvkey::input_error);
  CHECK_THROWS_AS(kvkey::reusable_prefix(hits, 1, 0), kvkey::input_error);
  CHECK_THROWS_AS(kvkey::reusable_prefix(hits, 4, 16), kvkey::input_error);  // 6 is not a multiple of 4
  CHECK_THROWS_WITH(kvkey::reusable_prefix(hits, 4, 16), Catch::Contains("6 results") && Catch::Contains("4 shards"));
  CHECK_THROWS_AS(kvkey::reusable_prefix(std::vector<bool>{}, 0, 16), kvkey::input_error);
  CHECK_NOTHROW(kvkey::reusable_prefix(hits, 3, 16));
}

TEST_CASE("KeyNamespace::reusable_prefix uses the namespace's block size", "[prefix]") {
  kvkey::Identity id = kvkey_test::base_identity();
  id.kv.block_size = 64;
  id.shard = {2, 0, 1, 0};
  const kvkey::KeyNamespace<> ns(id);

  // Verify a header per (block, shard) the way a connector would, then count.
  const auto toks = kvkey_test::tokens(4 * 64);
  const auto blocks = ns.block_hashes(toks);
  REQUIRE(blocks.size() == 4);
  std::vector<Verdict> results;
  for (std::size_t b = 0; b < blocks.size(); ++b) {
    for (int s = 0; s < 2; ++s) {
      // Shard 1's block 2 holds a header of another block: it must stop the count.
      const auto& sealed_for = (b == 2 && s == 1) ? blocks[3] : blocks[b];
      results.push_back(
          ns.verify(ns.seal(sealed_for, kvkey_test::test_payload(100)), blocks[b], kvkey_test::test_payload(100)));
    }
  }
  CHECK(results[5].reason == Reason::block_mismatch);
  CHECK(ns.reusable_prefix(results, 2) == rp(2, 128));
  CHECK(ns.reusable_prefix(results, 2, 100) == rp(1, 64));
  CHECK_THROWS_AS(ns.reusable_prefix(results, 0), kvkey::input_error);
  CHECK_THROWS_AS(ns.reusable_prefix(results, 3), kvkey::input_error);
}
