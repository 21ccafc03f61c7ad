// detail::Sha256Native (the SHA-extension compression used by the chain's hot
// path) against OpenSSL's SHA-256 on many random messages, every length around
// the padding boundaries, and random splits into update() calls.
#include <kvkey/detail/sha256_native.hpp>

#include <openssl/evp.h>

#include <catch2/catch.hpp>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace {

kvkey::Digest openssl_sha256(const std::vector<std::uint8_t>& m) {
  kvkey::Digest d;
  unsigned int len = 0;
  REQUIRE(EVP_Digest(m.data(), m.size(), d.data(), &len, EVP_sha256(), nullptr) == 1);
  return d;
}

std::vector<std::uint8_t> random_bytes(std::mt19937_64& rng, std::size_t n) {
  std::vector<std::uint8_t> m(n);
  for (auto& b : m) b = static_cast<std::uint8_t>(rng() >> 56);
  return m;
}

}  // namespace

TEST_CASE("The native SHA-256 is there exactly when the CPU has SHA extensions", "[sha256][native]") {
#if KVKEY_SHA256_X86
  unsigned a = 0, b = 0, c = 0, d = 0;
  bool sha = false;
  if (__get_cpuid_max(0, nullptr) >= 7) {
    __cpuid_count(7, 0, a, b, c, d);
    sha = (b >> 29) & 1u;
  }
  CHECK(kvkey::detail::sha256_native_available() == sha);
#else
  CHECK_FALSE(kvkey::detail::sha256_native_available());
#endif
}

TEST_CASE("Native SHA-256 equals OpenSSL on random messages", "[sha256][native]") {
  if (!kvkey::detail::sha256_native_available()) {
    // Nothing native to check on this CPU; the chain uses EVP here, and the
    // equivalence test covers it.
    SUCCEED("no SHA extensions: the native path is never taken");
    return;
  }
  // Known answers (FIPS 180-4 examples), so the comparison below is not
  // between two wrong implementations.
  CHECK(kvkey::detail::Sha256Native::hash("", 0).hex() ==
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  CHECK(kvkey::detail::Sha256Native::hash("abc", 3).hex() ==
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  const std::string two_blocks = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
  CHECK(kvkey::detail::Sha256Native::hash(two_blocks.data(), two_blocks.size()).hex() ==
        "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");

  std::mt19937_64 rng(20261);
  // Every length up to 4 blocks past a padding boundary, in one update.
  for (std::size_t n = 0; n <= 300; ++n) {
    const auto m = random_bytes(rng, n);
    CAPTURE(n);
    REQUIRE(kvkey::detail::Sha256Native::hash(m.data(), m.size()) == openssl_sha256(m));
  }
  // Random lengths (up to 20 KiB) absorbed in random pieces; one object reused
  // across messages (result() resets).
  kvkey::detail::Sha256Native h;
  for (int round = 0; round < 2000; ++round) {
    const std::size_t n = rng() % (round % 10 == 0 ? 20000 : 1200);
    const auto m = random_bytes(rng, n);
    std::size_t pos = 0;
    while (pos < n) {
      const std::size_t piece = std::min<std::size_t>(n - pos, rng() % 150);
      h.update(m.data() + pos, piece);
      pos += piece;
    }
    CAPTURE(round, n);
    REQUIRE(h.result() == openssl_sha256(m));
  }
  // One million 'a' (FIPS 180-4's long example), fed 1000 bytes at a time.
  const std::string thousand(1000, 'a');
  for (int i = 0; i < 1000; ++i) h.update(thousand.data(), thousand.size());
  CHECK(h.result().hex() == "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}
