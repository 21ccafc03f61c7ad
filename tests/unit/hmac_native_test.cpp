// HMAC-SHA-256 from the key's midstates (kvkey/detail/hmac_sha256.hpp), the
// engine of kvkey::HmacSha256, against OpenSSL's HMAC on random keys and
// messages around the padding boundaries; the portable compression function
// against the SHA-extension one; and the wiping of the midstates.
#include <catch2/catch.hpp>

#include <kvkey/hmac.hpp>

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <new>
#include <random>
#include <string>
#include <vector>

namespace {

using Bytes = std::vector<std::uint8_t>;

Bytes random_bytes(std::mt19937& rng, std::size_t n) {
  Bytes b(n);
  for (auto& x : b) x = static_cast<std::uint8_t>(rng());
  return b;
}

kvkey::Digest openssl_hmac(const Bytes& key, const Bytes& msg) {
  static const std::uint8_t empty = 0;
  kvkey::Digest out;
  unsigned int len = 0;
  const unsigned char* r = HMAC(EVP_sha256(), key.empty() ? &empty : key.data(), static_cast<int>(key.size()),
                                msg.empty() ? &empty : msg.data(), msg.size(), out.data(), &len);
  REQUIRE(r != nullptr);
  REQUIRE(len == 32);
  return out;
}

// hash_padded needs the message in a buffer of padded_size bytes.
kvkey::Digest padded(const kvkey::detail::HmacSha256Core& h, const Bytes& msg) {
  Bytes buf(kvkey::detail::HmacSha256Core::padded_size(msg.size()));
  std::copy(msg.begin(), msg.end(), buf.begin());
  return h.hash_padded(buf.data(), msg.size());
}

const std::size_t key_sizes[] = {0, 1, 31, 32, 55, 56, 63, 64, 65, 127, 128, 200, 256};
const std::size_t message_sizes[] = {0,   1,   31,  32,  54,  55,  56,  57,  63,  64,   65,
                                     118, 119, 120, 127, 128, 129, 183, 184, 293, 1000, 4096 + 7};

}  // namespace

TEST_CASE("HMAC-SHA-256 from midstates equals OpenSSL's HMAC", "[hmac][keyed]") {
  std::mt19937 rng(20261201);
  for (std::size_t key_size : key_sizes) {
    for (int trial = 0; trial < 3; ++trial) {
      const Bytes key = random_bytes(rng, key_size);
      kvkey::detail::HmacSha256Core h(key.data(), key.size());
      for (std::size_t msg_size : message_sizes) {
        const Bytes msg = random_bytes(rng, msg_size);
        const kvkey::Digest want = openssl_hmac(key, msg);
        INFO("key " << key_size << " bytes, message " << msg_size << " bytes");
        h.update(msg.data(), msg.size());
        CHECK(h.result() == want);
        CHECK(padded(h, msg) == want);
        // In pieces of random sizes: the same MAC.
        for (std::size_t at = 0; at < msg.size();) {
          const std::size_t n = std::min<std::size_t>(rng() % 70, msg.size() - at);
          h.update(msg.data() + at, n);
          at += n;
        }
        CHECK(h.result() == want);
      }
    }
  }
}

TEST_CASE("HmacSha256 under a TenantSecret equals OpenSSL's HMAC; copies are independent", "[hmac][keyed]") {
  std::mt19937 rng(7);
  for (std::size_t key_size :
       {std::size_t{32}, std::size_t{63}, std::size_t{64}, std::size_t{65}, std::size_t{200}, std::size_t{256}}) {
    const Bytes key = random_bytes(rng, key_size);
    const Bytes msg = random_bytes(rng, 300);
    kvkey::HmacSha256 h(kvkey::TenantSecret(key.data(), key.size()));
    CHECK(kvkey::HmacSha256::mac(kvkey::TenantSecret(key.data(), key.size()), msg.data(), msg.size()) ==
          openssl_hmac(key, msg));
    h.update(msg.data(), 100);
    kvkey::HmacSha256 copy = h;  // mid-message
    h.update(msg.data() + 100, msg.size() - 100);
    CHECK(h.result() == openssl_hmac(key, msg));
    copy.update(msg.data() + 100, 10);
    CHECK(copy.result() == openssl_hmac(key, Bytes(msg.begin(), msg.begin() + 110)));
    h.update(msg.data(), 5);
    h.reset();
    CHECK(h.result() == openssl_hmac(key, {}));
  }
}

TEST_CASE("HMAC midstates are wiped when moved from and when destroyed", "[hmac][keyed][security]") {
  const std::string secret(40, 'w');
  kvkey::HmacSha256 a{kvkey::TenantSecret(secret)};
  a.update("abc", 3);
  const kvkey::HmacSha256 b = std::move(a);
  Bytes raw(sizeof a);
  std::memcpy(raw.data(), static_cast<const void*>(&a), sizeof a);  // NOLINT(bugprone-use-after-move)
  CHECK(std::all_of(raw.begin(), raw.end(), [](std::uint8_t x) { return x == 0; }));
  kvkey::HmacSha256 c{kvkey::TenantSecret(std::string(40, 'x'))};
  c = kvkey::HmacSha256(b);
  // b took a's key and its message so far; c, assigned a copy of b, too.
  CHECK(c.result() == kvkey::HmacSha256::mac(kvkey::TenantSecret(secret), "abc", 3));

  alignas(kvkey::HmacSha256) unsigned char storage[sizeof(kvkey::HmacSha256)];
  auto* p = new (storage) kvkey::HmacSha256(kvkey::TenantSecret(secret));
  p->update("abc", 3);
  bool nonzero = false;
  for (unsigned char x : storage) nonzero |= x != 0;
  CHECK(nonzero);
  p->~HmacSha256();
  bool zero = true;
  for (unsigned char x : storage) zero &= x == 0;
  CHECK(zero);
}

TEST_CASE("the portable SHA-256 compression equals the SHA-extension one", "[hmac][sha256]") {
  std::mt19937 rng(99);
  for (int trial = 0; trial < 20; ++trial) {
    const Bytes data = random_bytes(rng, 64 * static_cast<std::size_t>(1 + trial % 5));
    std::uint32_t portable[8];
    std::memcpy(portable, kvkey::detail::sha256_iv, sizeof portable);
    std::uint8_t portable_digest[32];
    kvkey::detail::sha256_compress_portable(portable, data.data(), data.size() / 64, portable_digest);
    std::uint32_t dispatched[8];
    std::memcpy(dispatched, kvkey::detail::sha256_iv, sizeof dispatched);
    std::uint8_t dispatched_digest[32];
    kvkey::detail::sha256_compress(dispatched, data.data(), data.size() / 64, dispatched_digest);
    CHECK(std::memcmp(portable, dispatched, sizeof portable) == 0);
    CHECK(std::memcmp(portable_digest, dispatched_digest, 32) == 0);
  }
  // The portable function is a correct SHA-256: one padded block of "abc".
  std::uint8_t block[64] = {'a', 'b', 'c', 0x80};
  block[63] = 24;
  std::uint32_t state[8];
  std::memcpy(state, kvkey::detail::sha256_iv, sizeof state);
  std::uint8_t digest[32];
  kvkey::detail::sha256_compress_portable(state, block, 1, digest);
  kvkey::Digest d;
  std::memcpy(d.data(), digest, 32);
  CHECK(d.hex() == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}
