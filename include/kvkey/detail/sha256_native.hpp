// SPDX-License-Identifier: Apache-2.0
// Internal: plain SHA-256 with its state on the stack, for the chain's hot path
// (kvkey/detail/chain.hpp) on CPUs with SHA extensions, and for HMAC-SHA-256
// (kvkey/detail/hmac_sha256.hpp) on every CPU. The public hasher is
// kvkey::Sha256 (kvkey/sha256.hpp). Not part of the API.
#ifndef KVKEY_DETAIL_SHA256_NATIVE_HPP
#define KVKEY_DETAIL_SHA256_NATIVE_HPP

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "kvkey/config.hpp"
#include "kvkey/detail/endian.hpp"
#include "kvkey/detail/sha256_portable.hpp"
#include "kvkey/detail/sha256_x86.hpp"
#include "kvkey/digest.hpp"

KVKEY_BEGIN_NAMESPACE

namespace detail {

// EVP re-creates its provider context on every EVP_DigestInit_ex2 and
// EVP_MD_CTX_copy_ex (OpenSSL 3.0), which costs a heap allocation and about a
// quarter of the time of a 64-token block (docs/performance.md). Sha256Native keeps its state on the
// stack and runs the compression function on the SHA extensions where the CPU
// has them (sha256_native_available()), else in portable C++; it produces the
// same digests as EVP (tests/unit/sha256_native_test.cpp). The plain chain
// takes it only on the SHA extensions (elsewhere OpenSSL's assembly is faster).

/// True when Sha256Native can run on this CPU (checked once per process).
inline bool sha256_native_available() noexcept {
#if KVKEY_SHA256_X86
  static const bool available = cpu_has_sha_extensions();
  return available;
#else
  return false;
#endif
}

/// Compresses `blocks` 64-byte blocks into state (a, b, ..., h), on the SHA
/// extensions where the CPU has them, else in portable C++; with `digest`,
/// also writes the big-endian digest of the final state there.
inline void sha256_compress(std::uint32_t* state, const std::uint8_t* data, std::size_t blocks,
                            std::uint8_t* digest = nullptr) noexcept {
#if KVKEY_SHA256_X86
  if (sha256_native_available()) return sha256_compress_x86(state, data, blocks, digest);
#endif
  sha256_compress_portable(state, data, blocks, digest);
}

/// Plain SHA-256 with the Sha256 hasher shape, its state on the stack: no
/// allocation, no provider call. hash_padded2() needs sha256_native_available().
class Sha256Native {
 public:
  using result_type = Digest;
  static constexpr bool resets_after_result = true;

  Sha256Native() noexcept { reset(); }

  void reset() noexcept { reset(sha256_iv, 0); }
  /// Continues from a midstate: `state` after absorbing `absorbed` bytes (a
  /// multiple of 64), e.g. an HMAC key's pad.
  void reset(const std::uint32_t* state, std::uint64_t absorbed) noexcept {
    std::memcpy(state_, state, sizeof state_);
    used_ = 0;
    total_ = absorbed;
  }

  void update(const void* data, std::size_t size) noexcept {
    const auto* p = static_cast<const std::uint8_t*>(data);
    total_ += size;
    if (used_ != 0) {
      const std::size_t take = size < 64 - used_ ? size : 64 - used_;
      std::memcpy(buf_ + used_, p, take);
      used_ += take;
      p += take;
      size -= take;
      if (used_ < 64) return;
      compress(state_, buf_, 1);
      used_ = 0;
    }
    if (size >= 64) {
      compress(state_, p, size / 64);
      p += size & ~std::size_t{63};
      size &= 63;
    }
    if (size != 0) std::memcpy(buf_, p, size);
    used_ = size;
  }

  /// Finalizes, returns the digest and resets.
  Digest result() noexcept {
    const std::uint64_t bits = total_ * 8;
    buf_[used_++] = 0x80;
    if (used_ > 56) {
      std::memset(buf_ + used_, 0, 64 - used_);
      compress(state_, buf_, 1);
      used_ = 0;
    }
    std::memset(buf_ + used_, 0, 56 - used_);
    put_length(buf_ + 56, bits);
    Digest out;
    compress(state_, buf_, 1, out.data());
    reset();
    return out;
  }

  /// One-shot digest of a byte range.
  static Digest hash(const void* data, std::size_t size) noexcept {
    Sha256Native h;
    h.update(data, size);
    return h.result();
  }

  /// Bytes a buffer needs for hash_padded() of a size-byte message.
  static constexpr std::size_t padded_size(std::size_t size) noexcept { return (size + 9 + 63) / 64 * 64; }

  /// Digest of buf[0, size), padding in place: buf must hold padded_size(size)
  /// bytes. Saves the copy through the block buffer on the hottest path.
  static Digest hash_padded(std::uint8_t* buf, std::size_t size) noexcept {
    return hash_padded_from(sha256_iv, 0, buf, size);
  }
  /// As hash_padded(), continuing from `state` after `absorbed` bytes (a
  /// multiple of 64): the digest of those bytes followed by buf[0, size).
  static Digest hash_padded_from(const std::uint32_t* state, std::uint64_t absorbed, std::uint8_t* buf,
                                 std::size_t size) noexcept {
    const std::size_t total = pad(buf, size, absorbed);
    std::uint32_t s[8];
    std::memcpy(s, state, sizeof s);
    Digest out;
    compress(s, buf, total / 64, out.data());
    return out;
  }

  /// hash_padded() of two equally long messages at once, in about the time of
  /// one: the SHA instructions' latency, not their throughput, bounds a single
  /// message.
  static void hash_padded2(std::uint8_t* buf1, std::uint8_t* buf2, std::size_t size, Digest& out1,
                           Digest& out2) noexcept {
    const std::size_t total = pad(buf1, size);
    pad(buf2, size);
#if KVKEY_SHA256_X86
    sha256_digest2_x86(buf1, buf2, total / 64, out1.data(), out2.data());
#else
    (void)total;  // unreachable: sha256_native_available() is false
    (void)out1;
    (void)out2;
#endif
  }

 private:
  // Appends the padding to buf[0, size), after `absorbed` bytes hashed
  // before it; returns the padded size.
  static std::size_t pad(std::uint8_t* buf, std::size_t size, std::uint64_t absorbed = 0) noexcept {
    const std::size_t total = padded_size(size);
    buf[size] = 0x80;
    std::memset(buf + size + 1, 0, total - 8 - size - 1);
    put_length(buf + total - 8, (absorbed + size) * 8);
    return total;
  }
  static void compress(std::uint32_t* state, const std::uint8_t* blocks, std::size_t count,
                       std::uint8_t* digest = nullptr) noexcept {
    sha256_compress(state, blocks, count, digest);
  }
  static void put_length(std::uint8_t* p, std::uint64_t bits) noexcept { store_u64_be(p, bits); }

  std::uint32_t state_[8];
  std::uint8_t buf_[64];
  std::size_t used_;
  std::uint64_t total_;
};

}  // namespace detail

KVKEY_END_NAMESPACE

#endif  // KVKEY_DETAIL_SHA256_NATIVE_HPP
