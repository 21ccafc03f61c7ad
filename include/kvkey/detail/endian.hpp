// SPDX-License-Identifier: Apache-2.0
// Internal: fixed-width integers to and from bytes in a pinned byte order.
// Every byte format in docs/format.md is little-endian; SHA-256's length field
// and lmdeploy's legacy messages are big-endian. Not part of the API.
#ifndef KVKEY_DETAIL_ENDIAN_HPP
#define KVKEY_DETAIL_ENDIAN_HPP

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "kvkey/config.hpp"

KVKEY_BEGIN_NAMESPACE

namespace detail {

// Little-endian (the kvkey formats). Compilers turn these loops into one load
// or store on little-endian machines.

template <class U>
void store_le(std::uint8_t* p, U v) noexcept {
  for (std::size_t i = 0; i < sizeof(U); ++i) p[i] = static_cast<std::uint8_t>(v >> (8 * i));
}
template <class U>
U load_le(const std::uint8_t* p) noexcept {
  U v = 0;
  for (std::size_t i = sizeof(U); i-- > 0;) v = static_cast<U>((v << 8) | p[i]);
  return v;
}

inline void store_u16(std::uint8_t* p, std::uint16_t v) noexcept { store_le(p, v); }
inline void store_u32(std::uint8_t* p, std::uint32_t v) noexcept { store_le(p, v); }
inline void store_u64(std::uint8_t* p, std::uint64_t v) noexcept { store_le(p, v); }
inline std::uint16_t load_u16(const std::uint8_t* p) noexcept { return load_le<std::uint16_t>(p); }
inline std::uint32_t load_u32(const std::uint8_t* p) noexcept { return load_le<std::uint32_t>(p); }
inline std::uint64_t load_u64(const std::uint8_t* p) noexcept { return load_le<std::uint64_t>(p); }

/// v[0, n) as consecutive u32le; each value must fit in 32 bits. On a
/// little-endian machine it is one memcpy per value, a loop that vectorizes.
template <class T>
void store_u32_array(std::uint8_t* p, const T* v, std::size_t n) noexcept {
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
  for (std::size_t i = 0; i < n; ++i) {
    const auto x = static_cast<std::uint32_t>(v[i]);
    std::memcpy(p + 4 * i, &x, 4);
  }
#else
  for (std::size_t i = 0; i < n; ++i) store_u32(p + 4 * i, static_cast<std::uint32_t>(v[i]));
#endif
}

// Big-endian.

template <class U>
void store_be(std::uint8_t* p, U v) noexcept {
  for (std::size_t i = 0; i < sizeof(U); ++i) p[i] = static_cast<std::uint8_t>(v >> (8 * (sizeof(U) - 1 - i)));
}

inline void store_u32_be(std::uint8_t* p, std::uint32_t v) noexcept { store_be(p, v); }
inline void store_u64_be(std::uint8_t* p, std::uint64_t v) noexcept { store_be(p, v); }

}  // namespace detail

KVKEY_END_NAMESPACE

#endif  // KVKEY_DETAIL_ENDIAN_HPP
