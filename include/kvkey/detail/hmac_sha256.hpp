// SPDX-License-Identifier: Apache-2.0
// Internal: HMAC-SHA-256 (RFC 2104) with the key absorbed once, the engine of
// kvkey::HmacSha256 (kvkey/hmac.hpp). The key's inner and outer pads are
// compressed once into two SHA-256 midstates; each message then costs a copy
// of the inner state, the message's own blocks and one outer compression,
// through detail::Sha256Native (the SHA extensions, or portable C++ where the
// CPU lacks them). No allocation, no provider call. Not part of the API.
#ifndef KVKEY_DETAIL_HMAC_SHA256_HPP
#define KVKEY_DETAIL_HMAC_SHA256_HPP

#include <openssl/crypto.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "kvkey/config.hpp"
#include "kvkey/detail/sha256_native.hpp"
#include "kvkey/digest.hpp"

KVKEY_BEGIN_NAMESPACE

namespace detail {

/// HMAC-SHA-256 under one key, with the Sha256 hasher shape (update(),
/// result(), which returns the object to its keyed empty-message state) and
/// a one-shot hash_padded() for the chain's hot path.
///
/// The midstates are as secret as the key (either one lets anyone compute
/// MACs): they are never printed, and every copy is wiped (OPENSSL_cleanse)
/// when it is destroyed or moved from. A moved-from object holds no key.
class HmacSha256Core {
 public:
  /// Keys with key[0, size), any length (longer than a block: its SHA-256).
  HmacSha256Core(const void* key, std::size_t size) noexcept {
    alignas(16) std::uint8_t pad[block_size] = {};
    if (size > block_size) {
      const Digest k = Sha256Native::hash(key, size);
      std::memcpy(pad, k.data(), k.size());
    } else if (size != 0) {
      std::memcpy(pad, key, size);
    }
    for (std::uint8_t& b : pad) b ^= 0x36;
    absorb(inner_, pad);
    for (std::uint8_t& b : pad) b ^= 0x36 ^ 0x5c;
    absorb(outer_, pad);
    OPENSSL_cleanse(pad, sizeof pad);
    reset();
  }
  HmacSha256Core(const HmacSha256Core&) noexcept = default;
  HmacSha256Core& operator=(const HmacSha256Core&) noexcept = default;
  /// Takes other's key; other is wiped.
  HmacSha256Core(HmacSha256Core&& other) noexcept : HmacSha256Core(static_cast<const HmacSha256Core&>(other)) {
    other.wipe();
  }
  HmacSha256Core& operator=(HmacSha256Core&& other) noexcept {
    if (this != &other) {
      *this = static_cast<const HmacSha256Core&>(other);
      other.wipe();
    }
    return *this;
  }
  ~HmacSha256Core() { wipe(); }

  /// Back to the keyed empty-message state.
  void reset() noexcept { message_.reset(inner_, block_size); }
  void update(const void* data, std::size_t size) noexcept { message_.update(data, size); }
  /// The MAC of everything fed since the last reset; resets.
  Digest result() noexcept {
    const Digest inner = message_.result();
    reset();
    return outer(inner);
  }

  /// Bytes a buffer needs for hash_padded() of a size-byte message.
  static constexpr std::size_t padded_size(std::size_t size) noexcept { return Sha256Native::padded_size(size); }
  /// The MAC of buf[0, size), padding in place: buf must hold padded_size(size)
  /// bytes. Leaves the object's own message state alone.
  Digest hash_padded(std::uint8_t* buf, std::size_t size) const noexcept {
    return outer(Sha256Native::hash_padded_from(inner_, block_size, buf, size));
  }

 private:
  static constexpr std::size_t block_size = 64;

  static void absorb(std::uint32_t* state, const std::uint8_t* block) noexcept {
    std::memcpy(state, sha256_iv, 8 * sizeof(std::uint32_t));
    sha256_compress(state, block, 1);
  }
  Digest outer(const Digest& inner) const noexcept {
    alignas(16) std::uint8_t block[block_size];
    std::memcpy(block, inner.data(), inner.size());
    return Sha256Native::hash_padded_from(outer_, block_size, block, inner.size());
  }
  void wipe() noexcept {
    OPENSSL_cleanse(inner_, sizeof inner_);
    OPENSSL_cleanse(outer_, sizeof outer_);
    OPENSSL_cleanse(&message_, sizeof message_);
  }

  std::uint32_t inner_[8];  // SHA-256 state after (key ^ ipad)
  std::uint32_t outer_[8];  // SHA-256 state after (key ^ opad)
  Sha256Native message_;    // the inner hash of the current message
};

}  // namespace detail

KVKEY_END_NAMESPACE

#endif  // KVKEY_DETAIL_HMAC_SHA256_HPP
