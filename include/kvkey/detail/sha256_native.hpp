// SPDX-License-Identifier: Apache-2.0
// Internal: plain SHA-256 with its state on the stack, for the chain's hot path
// (kvkey/detail/chain.hpp) on CPUs with SHA extensions. The public hasher is
// kvkey::Sha256 (kvkey/sha256.hpp). Not part of the API.
#ifndef KVKEY_DETAIL_SHA256_NATIVE_HPP
#define KVKEY_DETAIL_SHA256_NATIVE_HPP

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "kvkey/config.hpp"
#include "kvkey/detail/endian.hpp"
#include "kvkey/detail/sha256_x86.hpp"
#include "kvkey/digest.hpp"

KVKEY_BEGIN_NAMESPACE

namespace detail {

// EVP re-creates its provider context on every EVP_DigestInit_ex2 and
// EVP_MD_CTX_copy_ex (OpenSSL 3.0), which costs a heap allocation and about a
// quarter of the time of a 64-token block (docs/performance.md). Sha256Native keeps its state on the
// stack and runs the compression function on the SHA extensions; it exists
// only where the CPU has them (sha256_native_available()), and produces the
// same digests as EVP (tests/unit/perf_sha256_native_test.cpp).

/// True when Sha256Native can run on this CPU (checked once per process).
inline bool sha256_native_available() noexcept {
#if KVKEY_SHA256_X86
  static const bool available = cpu_has_sha_extensions();
  return available;
#else
  return false;
#endif
}

/// Plain SHA-256 with the Sha256 hasher shape, its state on the stack: no
/// allocation, no provider call. Only valid where sha256_native_available().
class Sha256Native {
 public:
  using result_type = Digest;
  static constexpr bool resets_after_result = true;

  Sha256Native() noexcept { reset(); }

  void reset() noexcept {
    std::memcpy(state_, sha256_iv, sizeof state_);
    used_ = 0;
    total_ = 0;
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
    const std::size_t total = pad(buf, size);
    std::uint32_t state[8];
    std::memcpy(state, sha256_iv, sizeof state);
    Digest out;
    compress(state, buf, total / 64, out.data());
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
  // Appends the padding to buf[0, size); returns the padded size.
  static std::size_t pad(std::uint8_t* buf, std::size_t size) noexcept {
    const std::size_t total = padded_size(size);
    buf[size] = 0x80;
    std::memset(buf + size + 1, 0, total - 8 - size - 1);
    put_length(buf + total - 8, std::uint64_t{size} * 8);
    return total;
  }
  static void compress(std::uint32_t* state, const std::uint8_t* blocks, std::size_t count,
                       std::uint8_t* digest = nullptr) noexcept {
#if KVKEY_SHA256_X86
    sha256_compress_x86(state, blocks, count, digest);
#else
    (void)state;  // unreachable: sha256_native_available() is false
    (void)blocks;
    (void)count;
    (void)digest;
#endif
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
