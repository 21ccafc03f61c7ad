// SPDX-License-Identifier: Apache-2.0
// kvkey::Sha256: plain SHA-256 over OpenSSL 3's EVP API, with the Boost.Hash2
// hasher shape (update(), result()). It is KeyNamespace's default hasher.
// For a keyed namespace reach for HmacSha256 (kvkey/hmac.hpp); for the
// fingerprint of weights or a file, fingerprint() (kvkey/fingerprint.hpp).
//
// The chain's hot path hashes plain SHA-256 on the CPU's SHA extensions when it
// can (kvkey/detail/sha256_native.hpp, same digests). Define
// KVKEY_NO_NATIVE_SHA256 (in every translation unit) to hash through EVP only.
#ifndef KVKEY_SHA256_HPP
#define KVKEY_SHA256_HPP

#include <openssl/evp.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <utility>

#include "kvkey/config.hpp"
#include "kvkey/digest.hpp"
#include "kvkey/errors.hpp"

KVKEY_BEGIN_NAMESPACE

namespace detail {

/// SHA-256 implementation fetched from the default provider once per process.
/// Fetching per context is the most expensive part of a one-shot EVP digest.
/// The object is intentionally never freed: it lives until process exit and must
/// outlive any static kvkey object.
inline const EVP_MD* sha256_md() {
  static const EVP_MD* const md = EVP_MD_fetch(nullptr, "SHA256", nullptr);
  if (md == nullptr) throw crypto_error("EVP_MD_fetch(SHA256) failed: no provider offers SHA-256");
  return md;
}

}  // namespace detail

/// SHA-256 over the OpenSSL 3 EVP API, with the Boost.Hash2 hasher shape:
/// update(const void*, size_t) absorbs bytes, result() returns the Digest.
///
/// Differences from Boost.Hash2 worth knowing: result() finalizes and returns
/// the object to its freshly constructed state, so one object can hash many
/// messages. Copies are independent (the midstate is duplicated), which is how a
/// constant prefix is absorbed once and reused.
class Sha256 {
 public:
  using result_type = Digest;
  static constexpr std::size_t block_size = 64;
  /// result() leaves the object ready for the next message (see above).
  static constexpr bool resets_after_result = true;

  Sha256() : ctx_(new_ctx()) {
    try {
      reset();
    } catch (...) {
      EVP_MD_CTX_free(ctx_);  // the destructor does not run for a throwing constructor
      throw;
    }
  }
  Sha256(const Sha256& other) : ctx_(new_ctx()) {
    try {
      copy_from(other);
    } catch (...) {
      EVP_MD_CTX_free(ctx_);
      throw;
    }
  }
  Sha256(Sha256&& other) noexcept : ctx_(std::exchange(other.ctx_, nullptr)) {}
  Sha256& operator=(const Sha256& other) {
    if (this != &other) {
      if (ctx_ == nullptr) {
        ctx_ = new_ctx();
      }
      copy_from(other);
    }
    return *this;
  }
  Sha256& operator=(Sha256&& other) noexcept {
    std::swap(ctx_, other.ctx_);
    return *this;
  }
  ~Sha256() { EVP_MD_CTX_free(ctx_); }

  void update(const void* data, std::size_t size) {
    if (size != 0 && EVP_DigestUpdate(ctx_, data, size) != 1) {
      throw crypto_error("EVP_DigestUpdate(SHA256) failed");
    }
  }

  /// Finalizes, returns the digest and resets to the empty-message state.
  Digest result() {
    Digest out;
    unsigned int len = 0;
    if (EVP_DigestFinal_ex(ctx_, out.data(), &len) != 1 || len != Digest::size_bytes) {
      throw crypto_error("EVP_DigestFinal_ex(SHA256) failed");
    }
    reset();
    return out;
  }

  /// Returns to the empty-message state without reallocating.
  void reset() {
    if (EVP_DigestInit_ex2(ctx_, detail::sha256_md(), nullptr) != 1) {
      throw crypto_error("EVP_DigestInit_ex2(SHA256) failed");
    }
  }

  /// One-shot SHA-256 of a byte range.
  [[nodiscard]] static Digest hash(const void* data, std::size_t size) {
    Sha256 h;
    h.update(data, size);
    return h.result();
  }

 private:
  static EVP_MD_CTX* new_ctx() {
    EVP_MD_CTX* ctx = EVP_MD_CTX_new();
    if (ctx == nullptr) throw crypto_error("EVP_MD_CTX_new failed");
    return ctx;
  }
  void copy_from(const Sha256& other) {
    if (EVP_MD_CTX_copy_ex(ctx_, other.ctx_) != 1) throw crypto_error("EVP_MD_CTX_copy_ex failed");
  }
  EVP_MD_CTX* ctx_;
};

KVKEY_END_NAMESPACE

#endif  // KVKEY_SHA256_HPP
