// HmacSha256, TenantSecret and constant_time_equal (include/kvkey/hmac.hpp).
#include <catch2/catch.hpp>
#include <fmt/format.h>
#include <kvkey/fmt.hpp>

#include <new>
#include <ostream>
#include <string>
#include <type_traits>
#include <utility>

#include "support/fixtures.hpp"

namespace {

using kvkey::Digest;
using kvkey::HmacSha256;
using kvkey::TenantSecret;

template <class T, class = void>
struct is_streamable : std::false_type {};
template <class T>
struct is_streamable<T, std::void_t<decltype(std::declval<std::ostream&>() << std::declval<const T&>())>>
    : std::true_type {};

Digest mac(const TenantSecret& key, std::string_view msg) { return HmacSha256::mac(key, msg.data(), msg.size()); }

std::string bytes_0_to(int n) {
  std::string s;
  for (int i = 0; i < n; ++i) s.push_back(static_cast<char>(i));
  return s;
}

}  // namespace

// The type-level promises: the secret can be moved but not copied, printed,
// streamed or formatted, and it keys an HmacSha256 implicitly (so that
// KeyNamespace<HmacSha256>{id, TenantSecret{...}} works) while a plain string
// does not turn into a secret by accident.
static_assert(!std::is_copy_constructible_v<TenantSecret>);
static_assert(!std::is_copy_assignable_v<TenantSecret>);
static_assert(std::is_nothrow_move_constructible_v<TenantSecret>);
static_assert(!std::is_convertible_v<std::string, TenantSecret>);
static_assert(std::is_convertible_v<const TenantSecret&, HmacSha256>);
static_assert(!std::is_convertible_v<std::string, HmacSha256>);
static_assert(!std::is_default_constructible_v<HmacSha256>);
static_assert(!fmt::is_formattable<TenantSecret>::value);
static_assert(!is_streamable<TenantSecret>::value);
static_assert(HmacSha256::resets_after_result);
static_assert(std::is_same_v<HmacSha256::result_type, Digest>);

TEST_CASE("HmacSha256 matches RFC 4231 test cases 6 and 7 (131-byte key)", "[security][hmac]") {
  // RFC 4231 section 4.7 and 4.8: key = 131 bytes of 0xaa, HMAC-SHA-256 values
  // as printed in the RFC.
  const TenantSecret key(std::string(131, '\xaa'));
  CHECK(mac(key, "Test Using Larger Than Block-Size Key - Hash Key First").hex() ==
        "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
  CHECK(mac(key,
            "This is a test using a larger than block-size key and a larger than block-size data. The key needs "
            "to be hashed before being used by the HMAC algorithm.")
            .hex() == "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2");
}

TEST_CASE("HmacSha256 matches an independent HMAC for 32-, 64- and 65-byte keys", "[security][hmac]") {
  // Expected values computed with a direct RFC 2104 construction in Python,
  // sha256((K ^ opad) || sha256((K ^ ipad) || m)) with K zero-padded to 64
  // bytes (hashed first when longer), not with an HMAC library; the key is the
  // bytes 0, 1, ..., n-1. 32 bytes is the shortest secret, 64 exactly one
  // block, 65 the shortest key that is hashed first.
  CHECK(mac(TenantSecret(bytes_0_to(32)), "kvkey").hex() ==
        "7ac2f66d7582bc2f71b0acdddbf949112a5a43ca67ddb9b099983dac949595da");
  CHECK(mac(TenantSecret(bytes_0_to(64)), "The quick brown fox jumps over the lazy dog").hex() ==
        "4903b1fc9f41bc1abe3ff7119c4e523b91288b11c03dab1e975816150df38144");
  CHECK(mac(TenantSecret(bytes_0_to(65)), "").hex() ==
        "93ff3114f20ef700222fc1c0334737a51a88740dc0dd2ce0ab3151f0a4a0e85a");
}

TEST_CASE("HmacSha256 result() resets to the keyed state and copies are independent", "[security][hmac]") {
  const TenantSecret key(bytes_0_to(32));
  const std::string expected = "7ac2f66d7582bc2f71b0acdddbf949112a5a43ca67ddb9b099983dac949595da";  // "kvkey"
  HmacSha256 h(key);
  h.update("kv", 2);
  h.update("key", 3);
  CHECK(h.result().hex() == expected);
  // The same object again: result() must have restored the keyed empty state
  // (not the unkeyed one, not the midstate).
  h.update("kvkey", 5);
  CHECK(h.result().hex() == expected);
  h.update(nullptr, 0);
  CHECK(h.result() == mac(key, ""));

  // A copy taken mid-message continues independently of the original.
  HmacSha256 a(key);
  a.update("kv", 2);
  HmacSha256 b = a;
  a.update("key", 3);
  b.update("keykvkey", 8);
  CHECK(a.result().hex() == expected);
  CHECK(b.result().hex() == "cd834e23b33a6efeadae51978cf69d70e172d03643a8b358ca36b768d6f1b05e");  // "kvkeykvkey"

  // Copy assignment replaces the state; a moved-to object keeps working.
  HmacSha256 c(TenantSecret(bytes_0_to(64)));
  c.update("junk", 4);
  c = b;
  c.update("kvkey", 5);
  CHECK(c.result().hex() == expected);
  HmacSha256 d(std::move(c));
  d.update("kvkey", 5);
  CHECK(d.result().hex() == expected);
  HmacSha256 e(TenantSecret(bytes_0_to(64)));
  e = std::move(d);
  e.update("kvkey", 5);
  CHECK(e.result().hex() == expected);
}

TEST_CASE("HmacSha256 under different secrets gives unrelated MACs, and differs from SHA-256", "[security][hmac]") {
  const TenantSecret a(kvkey_test::secret_bytes('A'));
  const TenantSecret b(kvkey_test::secret_bytes('B'));
  CHECK(mac(a, "message") != mac(b, "message"));
  CHECK(mac(a, "message") != kvkey::Sha256::hash("message", 7));
  CHECK(mac(a, "message") == mac(TenantSecret(kvkey_test::secret_bytes('A')), "message"));
}

TEST_CASE("TenantSecret refuses fewer than 32 or more than 256 bytes without quoting them", "[security][secret]") {
  const std::string short_secret = "0123456789-secret-material-30b";  // 30 bytes
  REQUIRE(short_secret.size() == 30);
  try {
    TenantSecret s(short_secret);
    FAIL("a 30-byte secret was accepted");
  } catch (const kvkey::identity_error& e) {
    CHECK(e.field() == "tenant_secret");
    CHECK(std::string(e.what()).find("[kvkey.identity_error] tenant_secret: is 30 bytes") == 0);
    CHECK(std::string(e.what()).find("secret-material") == std::string::npos);
  }
  CHECK_THROWS_AS(TenantSecret(std::string(31, 'x')), kvkey::identity_error);
  CHECK_THROWS_AS(TenantSecret(std::string(257, 'x')), kvkey::identity_error);
  CHECK_THROWS_AS(TenantSecret(std::string()), kvkey::identity_error);
  CHECK(TenantSecret(std::string(32, 'x')).size() == 32);
  CHECK(TenantSecret(std::string(256, 'x')).size() == 256);
  CHECK(TenantSecret("\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0", 32).size() == 32);
}

TEST_CASE("TenantSecret is wiped when moved from and when destroyed", "[security][secret]") {
  const std::string marker(40, 'Z');
  const auto object_bytes = [](const TenantSecret& s) {
    return std::string_view(reinterpret_cast<const char*>(&s), sizeof s);
  };

  TenantSecret a{std::string(marker)};
  REQUIRE(kvkey_test::contains_bytes(object_bytes(a), marker));
  TenantSecret b(std::move(a));
  CHECK(a.empty());  // NOLINT(bugprone-use-after-move): the moved-from state is the point
  CHECK(a.size() == 0);
  CHECK(b.size() == 40);
  CHECK_FALSE(kvkey_test::contains_bytes(object_bytes(a), std::string(8, 'Z')));
  CHECK(kvkey_test::contains_bytes(object_bytes(b), marker));
  // A moved-from secret keys nothing.
  CHECK_THROWS_AS(HmacSha256(a), kvkey::identity_error);

  // Move assignment wipes the target's old bytes and the source.
  TenantSecret c{std::string(48, 'Y')};
  c = std::move(b);
  CHECK(b.empty());
  CHECK_FALSE(kvkey_test::contains_bytes(object_bytes(b), std::string(8, 'Z')));
  CHECK_FALSE(kvkey_test::contains_bytes(object_bytes(c), std::string(8, 'Y')));
  CHECK(kvkey_test::contains_bytes(object_bytes(c), marker));

  // Destruction: build the secret in storage we keep looking at afterwards.
  alignas(TenantSecret) unsigned char storage[sizeof(TenantSecret)];
  const std::string_view view(reinterpret_cast<const char*>(storage), sizeof storage);
  auto* d = new (storage) TenantSecret{std::string(marker)};
  REQUIRE(kvkey_test::contains_bytes(view, marker));
  d->~TenantSecret();
  CHECK_FALSE(kvkey_test::contains_bytes(view, std::string(8, 'Z')));

  // An lvalue string stays the caller's: it is copied, not wiped.
  const std::string mine(marker);
  const TenantSecret e(mine);
  CHECK(mine == marker);
}

TEST_CASE("constant_time_equal agrees with == on equal and unequal digests", "[security][hmac]") {
  const Digest a = kvkey::Sha256::hash("a", 1);
  Digest b = a;
  CHECK(kvkey::constant_time_equal(a, b));
  for (std::size_t i : {std::size_t{0}, std::size_t{17}, std::size_t{31}}) {
    b = a;
    b[i] ^= 0x01;
    CHECK_FALSE(kvkey::constant_time_equal(a, b));
    CHECK(a != b);
  }
  CHECK(kvkey::constant_time_equal(Digest{}, Digest{}));
}
