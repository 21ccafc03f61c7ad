// The block-hash chain: full blocks only, token types, token range, incremental
// extension, salt, per-block extras, and block sizes across the internal chunk.
#include "support/reference.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <set>
#include <string>
#include <vector>

namespace {

using kvkey::Digest;
using kvkey::ExtraKey;
using kvkey::HashOptions;
using kvkey_test::base_identity;
using kvkey_test::tokens;

kvkey::KeyNamespace<> make_ns(std::uint32_t block_size) {
  kvkey::Identity id = base_identity();
  id.kv.block_size = block_size;
  return kvkey::KeyNamespace<>(id);
}

// The reference chain (kvkey_test::ref) for the same inputs.
std::vector<Digest> reference(const kvkey::KeyNamespace<>& ns, const std::vector<std::int32_t>& toks,
                              const HashOptions& opt = {}) {
  const auto root = kvkey_test::ref::sha256(kvkey_test::ref::identity_encoding(ns.identity()));
  std::vector<Digest> out;
  for (const auto& h :
       kvkey_test::ref::block_hashes(root, kvkey_test::as_u32(toks), ns.block_size(), opt.salt, opt.extras)) {
    out.push_back(Digest::from_bytes(h.data(), h.size()));
  }
  return out;
}

bool disjoint(const std::vector<Digest>& a, const std::vector<Digest>& b) {
  std::set<Digest> s(a.begin(), a.end());
  for (const auto& d : b) {
    if (s.count(d) != 0) return false;
  }
  return true;
}

}  // namespace

TEST_CASE("Only full blocks are hashed", "[chain]") {
  const auto ns = make_ns(16);
  const auto t = tokens(100);
  CHECK(ns.block_hashes(std::vector<std::int32_t>{}).empty());
  CHECK(ns.block_hashes(std::vector<std::int32_t>(t.begin(), t.begin() + 15)).empty());
  const auto one = ns.block_hashes(std::vector<std::int32_t>(t.begin(), t.begin() + 16));
  REQUIRE(one.size() == 1);
  const auto all = ns.block_hashes(t);
  REQUIRE(all.size() == 6);  // 100 = 6 * 16 + 4: the 4-token tail is ignored
  CHECK(all == reference(ns, t));
  CHECK(all[0] == one[0]);
  // The tail does not influence any hash.
  auto other_tail = t;
  for (std::size_t i = 96; i < 100; ++i) other_tail[i] = 7;
  CHECK(ns.block_hashes(other_tail) == all);
  CHECK(ns.block_hashes(std::vector<std::int32_t>(t.begin(), t.begin() + 96)) == all);
  // Every block hash is distinct, and differs from the root.
  std::set<Digest> distinct(all.begin(), all.end());
  distinct.insert(ns.root());
  CHECK(distinct.size() == 7);
}

TEST_CASE("int32 int64 uint32 vectors and pointer+count give the same hashes", "[chain]") {
  const auto ns = make_ns(16);
  auto t32 = tokens(64);
  t32[3] = 0;
  t32[4] = std::numeric_limits<std::int32_t>::max();
  const std::vector<std::int64_t> t64(t32.begin(), t32.end());
  const std::vector<std::uint32_t> tu(t32.begin(), t32.end());
  const auto expected = ns.block_hashes(t32);
  REQUIRE(expected.size() == 4);
  CHECK(expected == reference(ns, t32));
  CHECK(ns.block_hashes(t64) == expected);
  CHECK(ns.block_hashes(tu) == expected);
  CHECK(ns.block_hashes(t32.data(), t32.size()) == expected);
  CHECK(ns.block_hashes(t64.data(), t64.size()) == expected);
  CHECK(ns.block_hashes(tu.data(), tu.size()) == expected);

  SECTION("the top of the range: 2^32 - 1 is a valid token") {
    std::vector<std::int64_t> hi64(16, 0xffffffffLL);
    std::vector<std::uint32_t> hiu(16, 0xffffffffu);
    CHECK(ns.block_hashes(hi64) == ns.block_hashes(hiu));
    CHECK(ns.block_hashes(hiu) != ns.block_hashes(std::vector<std::uint32_t>(16, 0)));
  }
}

TEST_CASE("Token ids outside 0 to 2^32-1 raise input_error naming the index", "[chain]") {
  const auto ns = make_ns(16);
  auto check_bad = [&](const auto& toks, std::size_t index) {
    CHECK_THROWS_AS(ns.block_hashes(toks), kvkey::input_error);
    CHECK_THROWS_WITH(ns.block_hashes(toks),
                      Catch::Matchers::StartsWith("[kvkey.input_error] token " + std::to_string(index) + " is "));
  };
  {
    auto t = tokens(32);
    t[5] = -1;
    check_bad(t, 5);
    t[5] = std::numeric_limits<std::int32_t>::min();
    check_bad(t, 5);
  }
  for (std::int64_t bad : {std::int64_t{-1}, std::int64_t{1} << 32, std::numeric_limits<std::int64_t>::min(),
                           std::numeric_limits<std::int64_t>::max()}) {
    CAPTURE(bad);
    const auto t32 = tokens(48);
    std::vector<std::int64_t> t(t32.begin(), t32.end());
    t[17] = bad;  // second block
    check_bad(t, 17);
    t[17] = 5;
    t[47] = bad;  // last token of the last full block
    check_bad(t, 47);
  }
  {
    // The partial tail is not hashed but is still checked, on the call that receives it,
    // whether the blocks before it are hashed now or were hashed by an earlier call.
    auto t = tokens(40);
    t[37] = -3;
    check_bad(t, 37);
    std::vector<kvkey::Digest> prev = ns.block_hashes(std::vector<std::int32_t>(t.begin(), t.begin() + 32));
    CHECK_THROWS_WITH(ns.extend_block_hashes(prev, t), Catch::Matchers::StartsWith("[kvkey.input_error] token 37 is "));
    std::vector<std::int32_t> short_tail{1, 2, -1};  // no full block at all
    check_bad(short_tail, 2);
  }
  // The error carries the value.
  std::vector<std::int64_t> t(16, 1);
  t[0] = std::int64_t{1} << 32;
  CHECK_THROWS_WITH(ns.block_hashes(t), Catch::Contains("4294967296"));
}

TEST_CASE("Incremental extension equals a full recompute", "[chain]") {
  const auto ns = make_ns(16);
  const auto t = tokens(16 * 9 + 5);
  const HashOptions salted{"tenant-salt", {ExtraKey{20, 40, "img-1"}, ExtraKey{100, 101, "img-2"}}};
  for (const HashOptions& opt : {HashOptions{}, salted}) {
    CAPTURE(opt.salt);
    const auto full = ns.block_hashes(t, opt);
    REQUIRE(full.size() == 9);
    CHECK(full == reference(ns, t, opt));
    // From every split point.
    for (std::size_t k = 0; k <= full.size(); ++k) {
      CAPTURE(k);
      std::vector<Digest> h(full.begin(), full.begin() + static_cast<std::ptrdiff_t>(k));
      ns.extend_block_hashes(h, t, opt);
      CHECK(h == full);
    }
    // Token by token, as a decode loop would.
    std::vector<Digest> grown;
    for (std::size_t n = 0; n <= t.size(); ++n) {
      ns.extend_block_hashes(grown, t.data(), n, opt);
      REQUIRE(grown.size() == n / 16);
    }
    CHECK(grown == full);
    // With int64 tokens.
    const std::vector<std::int64_t> t64(t.begin(), t.end());
    std::vector<Digest> h(full.begin(), full.begin() + 4);
    ns.extend_block_hashes(h, t64, opt);
    CHECK(h == full);
  }
  SECTION("more previous hashes than full blocks throws") {
    auto h = ns.block_hashes(t);
    h.push_back(h.back());  // 10 hashes, 9 full blocks
    CHECK_THROWS_AS(ns.extend_block_hashes(h, t), kvkey::input_error);
    std::vector<Digest> one(1);
    CHECK_THROWS_AS(ns.extend_block_hashes(one, t.data(), 15), kvkey::input_error);
    CHECK_NOTHROW(ns.extend_block_hashes(one, t.data(), 16));  // one full block: nothing to add
    CHECK(one.size() == 1);
  }
}

TEST_CASE("A salt changes every hash", "[chain]") {
  const auto ns = make_ns(16);
  const auto t = tokens(16 * 6);
  const auto plain = ns.block_hashes(t);
  const auto salted = ns.block_hashes(t, HashOptions{"salt-a", {}});
  REQUIRE(salted.size() == plain.size());
  CHECK(disjoint(plain, salted));
  CHECK(salted == reference(ns, t, HashOptions{"salt-a", {}}));
  CHECK(ns.block_hashes(t, HashOptions{"salt-a", {}}) == salted);  // reproducible
  CHECK(disjoint(salted, ns.block_hashes(t, HashOptions{"salt-b", {}})));
  CHECK(disjoint(salted, ns.block_hashes(t, HashOptions{"salt-a ", {}})));
  CHECK(disjoint(salted, ns.block_hashes(t, HashOptions{std::string("salt-a\0", 7), {}})));
  CHECK(ns.block_hashes(t, HashOptions{"", {}}) == plain);  // empty salt == no salt
  CHECK(ns.first_parent("") == ns.root());
  CHECK(ns.first_parent("salt-a") != ns.root());
  // Salted keys differ too.
  CHECK(ns.store_key(plain[0]) != ns.store_key(salted[0]));
}

TEST_CASE("Extra keys enter exactly the blocks they overlap", "[chain]") {
  const auto ns = make_ns(16);
  const auto t = tokens(16 * 6);  // blocks [0,16) [16,32) [32,48) [48,64) [64,80) [80,96)
  const auto plain = ns.block_hashes(t);

  // Whether extras enter block b: extend from the with-extras hashes of blocks
  // [0, b) without extras and see if block b comes out the same.
  auto entered = [&](const std::vector<ExtraKey>& extras) {
    const HashOptions opt{"", extras};
    const auto with = ns.block_hashes(t, opt);
    CHECK(with == reference(ns, t, opt));
    std::vector<bool> in;
    for (std::size_t b = 0; b < with.size(); ++b) {
      std::vector<Digest> h(with.begin(), with.begin() + static_cast<std::ptrdiff_t>(b));
      ns.extend_block_hashes(h, t.data(), (b + 1) * 16);
      in.push_back(h.back() != with[b]);
    }
    return in;
  };
  using V = std::vector<bool>;
  CHECK(entered({}) == V{false, false, false, false, false, false});
  CHECK(entered({{20, 40, "img"}}) == V{false, true, true, false, false, false});
  CHECK(entered({{32, 48, "img"}}) == V{false, false, true, false, false, false});  // exactly block 2
  CHECK(entered({{31, 32, "img"}}) == V{false, true, false, false, false, false});  // last token of block 1
  CHECK(entered({{48, 49, "img"}}) == V{false, false, false, true, false, false});  // first token of block 3
  CHECK(entered({{0, 96, "video"}}) == V{true, true, true, true, true, true});
  CHECK(entered({{5, 6, "a"}, {90, 1000, "b"}}) == V{true, false, false, false, false, true});
  CHECK(entered({{96, 200, "after the last full block"}}) == V{false, false, false, false, false, false});

  SECTION("blocks before the first overlapped block are unchanged; from it on, all change") {
    const auto with = ns.block_hashes(t, HashOptions{"", {{40, 41, "img"}}});
    CHECK(with[0] == plain[0]);
    CHECK(with[1] == plain[1]);
    for (std::size_t b = 2; b < with.size(); ++b) CHECK(with[b] != plain[b]);
  }
  SECTION("extras are order-independent") {
    std::vector<ExtraKey> e = {{20, 40, "x"}, {20, 40, "a"}, {5, 60, "long"}, {20, 30, "x"}, {70, 71, "z"}};
    const auto expected = ns.block_hashes(t, HashOptions{"", e});
    std::sort(e.begin(), e.end(), [](const ExtraKey& a, const ExtraKey& b) { return a.key < b.key; });
    CHECK(ns.block_hashes(t, HashOptions{"", e}) == expected);
    std::reverse(e.begin(), e.end());
    CHECK(ns.block_hashes(t, HashOptions{"", e}) == expected);
    std::rotate(e.begin(), e.begin() + 2, e.end());
    CHECK(ns.block_hashes(t, HashOptions{"", e}) == expected);
  }
  SECTION("the key, its range and the number of extras all count") {
    const auto a = ns.block_hashes(t, HashOptions{"", {{20, 40, "img"}}});
    CHECK(a != ns.block_hashes(t, HashOptions{"", {{20, 40, "img2"}}}));
    CHECK(a != ns.block_hashes(t, HashOptions{"", {{21, 40, "img"}}}));
    CHECK(a != ns.block_hashes(t, HashOptions{"", {{20, 39, "img"}}}));
    CHECK(a != ns.block_hashes(t, HashOptions{"", {{20, 40, "img"}, {20, 40, "img"}}}));
    CHECK(a != ns.block_hashes(t, HashOptions{"", {{20, 40, ""}}}));
    // Framing: ("ab", "c") is not ("a", "bc").
    CHECK(ns.block_hashes(t, HashOptions{"", {{20, 40, "ab"}, {20, 40, "c"}}}) !=
          ns.block_hashes(t, HashOptions{"", {{20, 40, "a"}, {20, 40, "bc"}}}));
  }
  SECTION("an empty or reversed range throws") {
    CHECK_THROWS_AS(ns.block_hashes(t, HashOptions{"", {{10, 10, "x"}}}), kvkey::input_error);
    CHECK_THROWS_AS(ns.block_hashes(t, HashOptions{"", {{0, 1, "ok"}, {11, 10, "x"}}}), kvkey::input_error);
    CHECK_THROWS_WITH(ns.block_hashes(t, HashOptions{"", {{0, 1, "ok"}, {11, 10, "x"}}}),
                      Catch::Contains("extra key 1"));
  }
}

TEST_CASE("Block sizes across the internal 256-token chunk", "[chain]") {
  for (std::uint32_t bs : {1u, 2u, 16u, 64u, 255u, 256u, 257u, 300u, 512u, 513u, 600u, 1000u}) {
    CAPTURE(bs);
    const auto ns = make_ns(bs);
    const auto t = tokens(3 * bs + bs / 2);
    const auto h = ns.block_hashes(t);
    REQUIRE(h.size() == 3);
    CHECK(h == reference(ns, t));
    const HashOptions opt{"s", {{bs + 1, bs + 2, "x"}}};
    CHECK(ns.block_hashes(t, opt) == reference(ns, t, opt));
    // A change to the last token of a block changes that block.
    auto u = t;
    u[bs - 1] ^= 1;
    CHECK(ns.block_hashes(u)[0] != h[0]);
    u = t;
    u[2 * bs] ^= 1;
    const auto h2 = ns.block_hashes(u);
    CHECK(h2[1] == h[1]);
    CHECK(h2[2] != h[2]);
  }
}

TEST_CASE("The parent chain binds each block to its position", "[chain]") {
  const auto ns = make_ns(16);
  const auto t = tokens(64);
  const auto h = ns.block_hashes(t);
  // Swapping two blocks does not just permute the hashes: the parent chain binds position.
  std::vector<std::int32_t> swapped(t.begin() + 16, t.begin() + 32);
  swapped.insert(swapped.end(), t.begin(), t.begin() + 16);
  swapped.insert(swapped.end(), t.begin() + 32, t.end());
  const auto hs = ns.block_hashes(swapped);
  CHECK(disjoint(h, hs));
  // A namespace built from an equal identity reproduces the hashes.
  CHECK(make_ns(16).block_hashes(t) == h);
}
