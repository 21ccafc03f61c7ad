// SPDX-License-Identifier: Apache-2.0
// Internal: the SHA-256 compression function on the x86 SHA extensions
// (SHA-NI), one message or two interleaved, and the CPU check. Used only by
// detail::Sha256Native (kvkey/detail/sha256_native.hpp). Not part of the API.
#ifndef KVKEY_DETAIL_SHA256_X86_HPP
#define KVKEY_DETAIL_SHA256_X86_HPP

#include <cstddef>
#include <cstdint>
#include <utility>

// KVKEY_SHA256_X86 is 1 where this code is compiled: x86-64 with GCC or Clang.
// Define KVKEY_NO_NATIVE_SHA256 (in every translation unit) to hash through
// OpenSSL's EVP only.
#if !defined(KVKEY_NO_NATIVE_SHA256) && defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define KVKEY_SHA256_X86 1
#include <cpuid.h>
#include <immintrin.h>
#else
#define KVKEY_SHA256_X86 0
#endif

#include "kvkey/config.hpp"
#include "kvkey/detail/sha256_portable.hpp"  // the round constants

KVKEY_BEGIN_NAMESPACE

namespace detail {

// FIPS 180-4, 5.3.3.
inline constexpr std::uint32_t sha256_iv[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                               0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};

#if KVKEY_SHA256_X86

// pshufb mask: big-endian message words.
alignas(16) inline constexpr std::uint8_t sha256_bswap_mask[16] = {3,  2,  1, 0, 7,  6,  5,  4,
                                                                   11, 10, 9, 8, 15, 14, 13, 12};

#define KVKEY_SHA_TARGET __attribute__((target("sha,sse4.1,ssse3")))

// Rounds 4i..4i+3. x[j % 4] holds message words 4j..4j+3; the schedule for
// group i+1 is finished here (sha256msg2) and the one for group i+3 started
// (sha256msg1), the usual interleaving for the SHA extensions.
template <int I>
KVKEY_SHA_TARGET __attribute__((always_inline)) inline void sha256_x86_group(__m128i& abef, __m128i& cdgh,
                                                                             __m128i (&x)[4], const std::uint8_t* block,
                                                                             __m128i bswap) {
  if constexpr (I < 4) {
    x[I] = _mm_shuffle_epi8(_mm_loadu_si128(reinterpret_cast<const __m128i*>(block + 16 * I)), bswap);
  }
  const auto* k = reinterpret_cast<const __m128i*>(sha256_round_constants + 4 * I);
  __m128i msg = _mm_add_epi32(x[I % 4], _mm_load_si128(k));
  cdgh = _mm_sha256rnds2_epu32(cdgh, abef, msg);
  if constexpr (I >= 3 && I <= 14) {
    const __m128i carry = _mm_alignr_epi8(x[I % 4], x[(I + 3) % 4], 4);
    x[(I + 1) % 4] = _mm_sha256msg2_epu32(_mm_add_epi32(x[(I + 1) % 4], carry), x[I % 4]);
  }
  msg = _mm_shuffle_epi32(msg, 0x0e);
  abef = _mm_sha256rnds2_epu32(abef, cdgh, msg);
  if constexpr (I >= 1 && I <= 12) {
    x[(I + 3) % 4] = _mm_sha256msg1_epu32(x[(I + 3) % 4], x[I % 4]);
  }
}

template <int... I>
KVKEY_SHA_TARGET __attribute__((always_inline)) inline void sha256_x86_rounds(__m128i& abef, __m128i& cdgh,
                                                                              const std::uint8_t* block, __m128i bswap,
                                                                              std::integer_sequence<int, I...>) {
  __m128i x[4];
  (sha256_x86_group<I>(abef, cdgh, x, block, bswap), ...);
}

// Two messages' rounds interleaved: each stream waits on its own round
// latency, so the pair takes little longer than one.
template <int... I>
KVKEY_SHA_TARGET __attribute__((always_inline)) inline void sha256_x86_rounds2(
    __m128i& abef1, __m128i& cdgh1, const std::uint8_t* block1, __m128i& abef2, __m128i& cdgh2,
    const std::uint8_t* block2, __m128i bswap, std::integer_sequence<int, I...>) {
  __m128i x1[4];
  __m128i x2[4];
  ((sha256_x86_group<I>(abef1, cdgh1, x1, block1, bswap), sha256_x86_group<I>(abef2, cdgh2, x2, block2, bswap)), ...);
}

// (a, b, c, d), (e, f, g, h) <-> (a, b, e, f), (c, d, g, h) as the instructions want them.
KVKEY_SHA_TARGET __attribute__((always_inline)) inline void sha256_x86_load(const std::uint32_t* state, __m128i& abef,
                                                                            __m128i& cdgh) {
  const __m128i dcba = _mm_loadu_si128(reinterpret_cast<const __m128i*>(state));
  const __m128i hgfe = _mm_loadu_si128(reinterpret_cast<const __m128i*>(state + 4));
  const __m128i cdab = _mm_shuffle_epi32(dcba, 0xb1);
  const __m128i efgh = _mm_shuffle_epi32(hgfe, 0x1b);
  abef = _mm_alignr_epi8(cdab, efgh, 8);
  cdgh = _mm_blend_epi16(efgh, cdab, 0xf0);
}

// Stores the state back as (a, ..., h) and, with `digest`, the big-endian digest.
KVKEY_SHA_TARGET __attribute__((always_inline)) inline void sha256_x86_store(__m128i abef, __m128i cdgh,
                                                                             std::uint32_t* state, std::uint8_t* digest,
                                                                             __m128i bswap) {
  const __m128i feba = _mm_shuffle_epi32(abef, 0x1b);
  const __m128i dchg = _mm_shuffle_epi32(cdgh, 0xb1);
  const __m128i dcba = _mm_blend_epi16(feba, dchg, 0xf0);
  const __m128i hgfe = _mm_alignr_epi8(dchg, feba, 8);
  if (state != nullptr) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(state), dcba);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(state + 4), hgfe);
  }
  if (digest != nullptr) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(digest), _mm_shuffle_epi8(dcba, bswap));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(digest + 16), _mm_shuffle_epi8(hgfe, bswap));
  }
}

/// Compresses `blocks` 64-byte blocks into state (a, b, ..., h); with `digest`,
/// also writes the big-endian digest of the final state there.
KVKEY_SHA_TARGET inline void sha256_compress_x86(std::uint32_t* state, const std::uint8_t* data, std::size_t blocks,
                                                 std::uint8_t* digest = nullptr) noexcept {
  const __m128i bswap = _mm_load_si128(reinterpret_cast<const __m128i*>(sha256_bswap_mask));
  __m128i abef, cdgh;
  sha256_x86_load(state, abef, cdgh);
  for (; blocks != 0; --blocks, data += 64) {
    const __m128i abef_in = abef;
    const __m128i cdgh_in = cdgh;
    sha256_x86_rounds(abef, cdgh, data, bswap, std::make_integer_sequence<int, 16>{});
    abef = _mm_add_epi32(abef, abef_in);
    cdgh = _mm_add_epi32(cdgh, cdgh_in);
  }
  sha256_x86_store(abef, cdgh, state, digest, bswap);
}

/// The digests of two padded messages of `blocks` blocks each, computed together.
KVKEY_SHA_TARGET inline void sha256_digest2_x86(const std::uint8_t* data1, const std::uint8_t* data2,
                                                std::size_t blocks, std::uint8_t* digest1,
                                                std::uint8_t* digest2) noexcept {
  const __m128i bswap = _mm_load_si128(reinterpret_cast<const __m128i*>(sha256_bswap_mask));
  __m128i abef1, cdgh1;
  sha256_x86_load(sha256_iv, abef1, cdgh1);
  __m128i abef2 = abef1, cdgh2 = cdgh1;
  for (; blocks != 0; --blocks, data1 += 64, data2 += 64) {
    const __m128i abef1_in = abef1, cdgh1_in = cdgh1, abef2_in = abef2, cdgh2_in = cdgh2;
    sha256_x86_rounds2(abef1, cdgh1, data1, abef2, cdgh2, data2, bswap, std::make_integer_sequence<int, 16>{});
    abef1 = _mm_add_epi32(abef1, abef1_in);
    cdgh1 = _mm_add_epi32(cdgh1, cdgh1_in);
    abef2 = _mm_add_epi32(abef2, abef2_in);
    cdgh2 = _mm_add_epi32(cdgh2, cdgh2_in);
  }
  sha256_x86_store(abef1, cdgh1, nullptr, digest1, bswap);
  sha256_x86_store(abef2, cdgh2, nullptr, digest2, bswap);
}

#undef KVKEY_SHA_TARGET

inline bool cpu_has_sha_extensions() noexcept {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (__get_cpuid(1, &a, &b, &c, &d) == 0) return false;
  const bool ssse3 = (c & (1u << 9)) != 0;
  const bool sse41 = (c & (1u << 19)) != 0;
  if (__get_cpuid_max(0, nullptr) < 7) return false;
  __cpuid_count(7, 0, a, b, c, d);
  const bool sha = (b & (1u << 29)) != 0;
  return ssse3 && sse41 && sha;
}

#endif  // KVKEY_SHA256_X86

}  // namespace detail

KVKEY_END_NAMESPACE

#endif  // KVKEY_DETAIL_SHA256_X86_HPP
