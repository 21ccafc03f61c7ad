// kvkey::Digest: hex round trip, strict parsing with clear errors, value semantics.
#include <kvkey/digest.hpp>
#include <kvkey/sha256.hpp>

#include <catch2/catch.hpp>

#include <cctype>
#include <cstdint>
#include <functional>
#include <string>
#include <unordered_map>
#include <unordered_set>

namespace {

// SHA-256("abc") (FIPS 180-2 B.1): a digest with every nibble value somewhere.
const std::string abc_hex = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";

kvkey::Digest sample(std::uint8_t first) {
  kvkey::Digest d;
  for (std::size_t i = 0; i < d.size(); ++i) d[i] = static_cast<std::uint8_t>(first + 7 * i);
  return d;
}

}  // namespace

TEST_CASE("Digest hex round trip", "[digest]") {
  const kvkey::Digest d = kvkey::Sha256::hash("abc", 3);
  CHECK(d.hex() == abc_hex);
  CHECK(kvkey::Digest::from_hex(abc_hex) == d);
  CHECK(d[0] == 0xba);
  CHECK(d[31] == 0xad);

  for (int first : {0, 1, 0x7f, 0xf0, 0xff}) {
    const kvkey::Digest s = sample(static_cast<std::uint8_t>(first));
    const std::string hex = s.hex();
    REQUIRE(hex.size() == 64);
    CHECK(hex.find_first_not_of("0123456789abcdef") == std::string::npos);
    CHECK(kvkey::Digest::from_hex(hex) == s);
    CHECK(kvkey::Digest::try_from_hex(hex) == s);
  }

  CHECK(kvkey::Digest().hex() == std::string(64, '0'));
  CHECK(kvkey::Digest::from_hex(std::string(64, 'f')).bytes() ==
        kvkey::Digest::storage{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
                               0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
                               0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff});
}

TEST_CASE("Digest::from_hex accepts upper and mixed case", "[digest]") {
  std::string upper = abc_hex;
  for (auto& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  REQUIRE(upper != abc_hex);
  CHECK(kvkey::Digest::from_hex(upper) == kvkey::Digest::from_hex(abc_hex));
  CHECK(kvkey::Digest::from_hex(upper).hex() == abc_hex);  // printing is always lowercase
  std::string mixed = abc_hex;
  for (std::size_t i = 0; i < mixed.size(); i += 2) mixed[i] = upper[i];
  CHECK(kvkey::Digest::from_hex(mixed) == kvkey::Digest::from_hex(abc_hex));
}

TEST_CASE("Digest::from_hex rejects a wrong length and says so", "[digest]") {
  for (std::size_t len : {0, 1, 62, 63, 65, 66, 128}) {
    CAPTURE(len);
    const std::string hex(len, 'a');
    CHECK_FALSE(kvkey::Digest::try_from_hex(hex).has_value());
    CHECK_THROWS_MATCHES(kvkey::Digest::from_hex(hex), kvkey::input_error,
                         Catch::Matchers::Message("[kvkey.input_error] hex digest must be 64 hex characters, got " +
                                                  std::to_string(len) + " characters"));
  }
}

TEST_CASE("Digest::from_hex rejects a non-hex character and names its position", "[digest]") {
  for (char bad : {'g', 'G', 'x', ' ', '-', '\0', ':', '/', '@', '`', '\xff'}) {
    for (std::size_t pos : {0, 1, 31, 62, 63}) {
      CAPTURE(static_cast<int>(bad), pos);
      std::string hex = abc_hex;
      hex[pos] = bad;
      CHECK_FALSE(kvkey::Digest::try_from_hex(hex).has_value());
      CHECK_THROWS_MATCHES(
          kvkey::Digest::from_hex(hex), kvkey::input_error,
          Catch::Matchers::Message("[kvkey.input_error] hex digest has a non-hex character at position " +
                                   std::to_string(pos)));
    }
  }
  // A "0x" prefix is not part of the format.
  CHECK_THROWS_AS(kvkey::Digest::from_hex("0x" + abc_hex.substr(2)), kvkey::input_error);
}

TEST_CASE("Digest::from_bytes takes exactly 32 bytes", "[digest]") {
  const kvkey::Digest d = sample(3);
  CHECK(kvkey::Digest::from_bytes(d.data(), 32) == d);
  std::string ones(32, '\x01');
  ones[31] = '\x80';
  std::string expected_hex;
  for (int i = 0; i < 31; ++i) expected_hex += "01";
  expected_hex += "80";
  CHECK(kvkey::Digest::from_bytes(ones).hex() == expected_hex);
  for (std::size_t n : {0, 16, 31, 33, 64}) {
    CAPTURE(n);
    const std::string bytes(n, 'x');
    CHECK_THROWS_MATCHES(
        kvkey::Digest::from_bytes(bytes), kvkey::input_error,
        Catch::Matchers::Message("[kvkey.input_error] digest must be 32 bytes, got " + std::to_string(n)));
  }
}

TEST_CASE("Digest equality ordering and std::hash", "[digest]") {
  const kvkey::Digest a = sample(0);
  kvkey::Digest b = a;
  CHECK(a == b);
  CHECK_FALSE(a != b);
  for (std::size_t i : {0, 7, 8, 31}) {
    CAPTURE(i);
    kvkey::Digest c = a;
    c[i] = static_cast<std::uint8_t>(c[i] ^ 0x01);
    CHECK(a != c);
    CHECK_FALSE(a == c);
    CHECK((a < c) != (c < a));
  }
  kvkey::Digest lo;
  kvkey::Digest hi;
  hi[0] = 1;
  CHECK(lo < hi);
  CHECK_FALSE(hi < lo);

  std::hash<kvkey::Digest> h;
  CHECK(h(a) == h(b));
  std::unordered_set<kvkey::Digest> set;
  for (int i = 0; i < 1000; ++i) {
    const std::string s = std::to_string(i);
    set.insert(kvkey::Sha256::hash(s.data(), s.size()));
  }
  CHECK(set.size() == 1000);
  CHECK(set.count(kvkey::Sha256::hash("7", 1)) == 1);
  CHECK(set.count(kvkey::Sha256::hash("1000", 4)) == 0);
  std::unordered_map<kvkey::Digest, int> map{{a, 1}};
  CHECK(map.at(b) == 1);
}
