// SPDX-License-Identifier: Apache-2.0
// Internal: the SHA-256 round constants and the compression function in
// portable C++ (FIPS 180-4, 6.2.2), for detail::Sha256Native
// (kvkey/detail/sha256_native.hpp) on CPUs without the SHA extensions. Not
// part of the API.
#ifndef KVKEY_DETAIL_SHA256_PORTABLE_HPP
#define KVKEY_DETAIL_SHA256_PORTABLE_HPP

#include <cstddef>
#include <cstdint>

#include "kvkey/config.hpp"
#include "kvkey/detail/endian.hpp"

KVKEY_BEGIN_NAMESPACE

namespace detail {

// FIPS 180-4, 4.2.2 (aligned for the SHA-extension code's 16-byte loads).
alignas(16) inline constexpr std::uint32_t sha256_round_constants[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

constexpr std::uint32_t sha256_rotr(std::uint32_t x, int n) noexcept { return (x >> n) | (x << (32 - n)); }

inline std::uint32_t sha256_load_be(const std::uint8_t* p) noexcept {
  return (std::uint32_t{p[0]} << 24) | (std::uint32_t{p[1]} << 16) | (std::uint32_t{p[2]} << 8) | std::uint32_t{p[3]};
}

/// Compresses `blocks` 64-byte blocks into state (a, b, ..., h); with `digest`,
/// also writes the big-endian digest of the final state there.
inline void sha256_compress_portable(std::uint32_t* state, const std::uint8_t* data, std::size_t blocks,
                                     std::uint8_t* digest = nullptr) noexcept {
  std::uint32_t w[64];
  for (; blocks != 0; --blocks, data += 64) {
    for (int i = 0; i < 16; ++i) w[i] = sha256_load_be(data + 4 * i);
    for (int i = 16; i < 64; ++i) {
      const std::uint32_t s0 = sha256_rotr(w[i - 15], 7) ^ sha256_rotr(w[i - 15], 18) ^ (w[i - 15] >> 3);
      const std::uint32_t s1 = sha256_rotr(w[i - 2], 17) ^ sha256_rotr(w[i - 2], 19) ^ (w[i - 2] >> 10);
      w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    std::uint32_t a = state[0], b = state[1], c = state[2], d = state[3];
    std::uint32_t e = state[4], f = state[5], g = state[6], h = state[7];
    for (int i = 0; i < 64; ++i) {
      const std::uint32_t t1 = h + (sha256_rotr(e, 6) ^ sha256_rotr(e, 11) ^ sha256_rotr(e, 25)) +
                               ((e & f) ^ (~e & g)) + sha256_round_constants[i] + w[i];
      const std::uint32_t t2 =
          (sha256_rotr(a, 2) ^ sha256_rotr(a, 13) ^ sha256_rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
      h = g;
      g = f;
      f = e;
      e = d + t1;
      d = c;
      c = b;
      b = a;
      a = t1 + t2;
    }
    state[0] += a;
    state[1] += b;
    state[2] += c;
    state[3] += d;
    state[4] += e;
    state[5] += f;
    state[6] += g;
    state[7] += h;
  }
  if (digest != nullptr) {
    for (int i = 0; i < 8; ++i) store_u32_be(digest + 4 * i, state[i]);
  }
}

}  // namespace detail

KVKEY_END_NAMESPACE

#endif  // KVKEY_DETAIL_SHA256_PORTABLE_HPP
