// kvkey::Sha256: known answers and the hasher contract (independent copies,
// result() resets).
//
// Known answers: FIPS 180-2 Appendix B (B.1 "abc", B.2 the 448-bit message,
// B.3 one million 'a'), the 896-bit message of NIST's "Cryptographic Standards
// and Guidelines: Examples with Intermediate Values" (SHA256.pdf, FIPS 180-4
// companion), and the empty message (CAVP SHA256ShortMsg, Len = 0).
#include <kvkey/sha256.hpp>

#include <catch2/catch.hpp>

#include <cstddef>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

namespace {

kvkey::Digest sha(std::string_view s) { return kvkey::Sha256::hash(s.data(), s.size()); }

constexpr std::string_view empty_sha = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";
constexpr std::string_view abc_sha = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";
constexpr std::string_view msg448 = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
constexpr std::string_view msg448_sha = "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1";
constexpr std::string_view msg896 =
    "abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopqklmnopqrlmnopqrsmnopqrstnopqrstu";
constexpr std::string_view msg896_sha = "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1";
constexpr std::string_view million_a_sha = "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0";

}  // namespace

TEST_CASE("Sha256 matches the NIST known answers", "[sha256]") {
  CHECK(sha("").hex() == empty_sha);
  CHECK(sha("abc").hex() == abc_sha);
  CHECK(msg448.size() * 8 == 448);
  CHECK(sha(msg448).hex() == msg448_sha);
  CHECK(msg896.size() * 8 == 896);
  CHECK(sha(msg896).hex() == msg896_sha);
}

TEST_CASE("Sha256 of one million 'a' fed in odd-sized chunks", "[sha256]") {
  const std::string million(1000000, 'a');
  SECTION("one update") {
    kvkey::Sha256 h;
    h.update(million.data(), million.size());
    CHECK(h.result().hex() == million_a_sha);
  }
  SECTION("chunks of 1, 3, 7, 63, 64, 65, 1000, 4099 bytes in turn, and empty updates") {
    static constexpr std::size_t sizes[] = {1, 3, 7, 0, 63, 64, 65, 1000, 4099};
    kvkey::Sha256 h;
    std::size_t pos = 0;
    std::size_t k = 0;
    while (pos < million.size()) {
      const std::size_t want = sizes[k++ % std::size(sizes)];
      const std::size_t n = want < million.size() - pos ? want : million.size() - pos;
      h.update(million.data() + pos, n);
      pos += n;
    }
    CHECK(h.result().hex() == million_a_sha);
  }
}

TEST_CASE("Sha256 result() returns the hasher to the empty-message state", "[sha256]") {
  STATIC_REQUIRE(kvkey::Sha256::resets_after_result);
  kvkey::Sha256 h;
  h.update("ab", 2);
  h.update("c", 1);
  CHECK(h.result().hex() == abc_sha);
  CHECK(h.result().hex() == empty_sha);  // nothing absorbed since
  h.update(msg448.data(), msg448.size());
  CHECK(h.result().hex() == msg448_sha);
  h.update("abc", 3);
  h.reset();
  CHECK(h.result().hex() == empty_sha);
}

TEST_CASE("Sha256 copies are independent", "[sha256]") {
  kvkey::Sha256 h;
  h.update(msg448.data(), 20);

  SECTION("copy construction mid-stream, both continue differently") {
    kvkey::Sha256 c = h;
    c.update("xyz", 3);
    h.update(msg448.data() + 20, msg448.size() - 20);
    CHECK(h.result().hex() == msg448_sha);
    CHECK(c.result() == sha(std::string(msg448.substr(0, 20)) + "xyz"));
  }
  SECTION("the copy finishes first; the original is unaffected") {
    kvkey::Sha256 c(h);
    CHECK(c.result() == sha(msg448.substr(0, 20)));
    h.update(msg448.data() + 20, msg448.size() - 20);
    CHECK(h.result().hex() == msg448_sha);
  }
  SECTION("copy assignment over a used hasher") {
    kvkey::Sha256 c;
    c.update("junk", 4);
    c = h;
    c.update(msg448.data() + 20, msg448.size() - 20);
    h.update("!", 1);
    CHECK(c.result().hex() == msg448_sha);
    CHECK(h.result() == sha(std::string(msg448.substr(0, 20)) + "!"));
  }
  SECTION("a moved-from hasher can be assigned again") {
    kvkey::Sha256 m = std::move(h);
    m.update(msg448.data() + 20, msg448.size() - 20);
    CHECK(m.result().hex() == msg448_sha);
    h = m;  // h was moved from: copy assignment must give it a working context
    h.update("abc", 3);
    CHECK(h.result().hex() == abc_sha);
  }
  SECTION("move assignment") {
    kvkey::Sha256 m;
    m.update("junk", 4);
    m = std::move(h);
    m.update(msg448.data() + 20, msg448.size() - 20);
    CHECK(m.result().hex() == msg448_sha);
  }
}

TEST_CASE("Sha256 has the Boost.Hash2 hasher shape", "[sha256]") {
  STATIC_REQUIRE(std::is_same_v<kvkey::Sha256::result_type, kvkey::Digest>);
  STATIC_REQUIRE(kvkey::Sha256::block_size == 64);
  STATIC_REQUIRE(std::is_copy_constructible_v<kvkey::Sha256>);
  STATIC_REQUIRE(std::is_nothrow_move_constructible_v<kvkey::Sha256>);
  kvkey::Sha256 h;
  const void* p = "abc";
  h.update(p, 3);
  h.update(nullptr, 0);  // an empty update is allowed and changes nothing
  CHECK(h.result().hex() == abc_sha);
}
