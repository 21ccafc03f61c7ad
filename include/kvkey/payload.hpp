// SPDX-License-Identifier: Apache-2.0
// Payload integrity: a view of an object's KV bytes (kvkey::Payload), their
// digest, and the streaming sealer and verifier that KeyNamespace hands out.
//
//   kvkey::Envelope h = ns.seal(block_hash, kvkey::Payload(kv.data(), kv.size()));
//   kvkey::Verdict v = ns.verify(h.data(), h.size(), block_hash, kvkey::Payload(kv.data(), kv.size()));
//
// Plain namespaces store XXH3-128 of the bytes followed by the header
// (libxxhash's runtime-dispatched entry points); keyed namespaces store a
// Poly1305 tag of the same under a one-time key derived from the tenant secret
// and a random nonce. docs/format.md specifies both, docs/security.md says
// what they protect against.
#ifndef KVKEY_PAYLOAD_HPP
#define KVKEY_PAYLOAD_HPP

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/rand.h>

#ifndef XXH_STATIC_LINKING_ONLY
#define XXH_STATIC_LINKING_ONLY  // XXH3_state_t by value: streaming without allocation
#endif
#if defined(__x86_64__) || defined(_M_X64)
#include <xxh_x86dispatch.h>
#define KVKEY_XXH3_128(p, n) XXH3_128bits_dispatch(p, n)
#define KVKEY_XXH3_128_UPDATE(s, p, n) XXH3_128bits_update_dispatch(s, p, n)
#else
#include <xxhash.h>
#define KVKEY_XXH3_128(p, n) XXH3_128bits(p, n)
#define KVKEY_XXH3_128_UPDATE(s, p, n) XXH3_128bits_update(s, p, n)
#endif

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include "kvkey/buffer.hpp"
#include "kvkey/detail/chain.hpp"  // domain_confidential
#include "kvkey/detail/hmac_sha256.hpp"
#include "kvkey/config.hpp"
#include "kvkey/digest.hpp"
#include "kvkey/envelope.hpp"
#include "kvkey/errors.hpp"
#include "kvkey/identity.hpp"

KVKEY_BEGIN_NAMESPACE

/// A non-owning view of one stored object's KV bytes: one range, or
/// scatter-gather parts (e.g. per-layer buffers) whose concatenation is the
/// object. The parts array and the bytes must outlive the call it is passed to.
///
/// Both constructors check the view: a null pointer with a nonzero size (the
/// range, the parts array, or any part) and parts whose sizes add up to more
/// than SIZE_MAX are input_error. A null pointer with size 0 is an empty payload.
class Payload {
 public:
  Payload(const void* data, std::size_t size) : one_{data, size}, size_(size) {
    if (data == nullptr && size != 0) {
      throw input_error("payload is a null pointer with size " + std::to_string(size));
    }
  }
  /// Payload(nullptr, n) is the range form.
  Payload(std::nullptr_t, std::size_t size) : Payload(static_cast<const void*>(nullptr), size) {}
  Payload(const ConstBuffer* parts, std::size_t count) : parts_(parts), count_(count) {
    if (parts == nullptr && count != 0) {
      throw input_error("payload parts array is a null pointer with " + std::to_string(count) + " parts");
    }
    for (std::size_t i = 0; i < count; ++i) {
      const ConstBuffer& b = parts[i];
      if (b.data == nullptr && b.size != 0) {
        throw input_error("payload part " + std::to_string(i) + " is a null pointer with size " +
                          std::to_string(b.size));
      }
      if (b.size > std::numeric_limits<std::size_t>::max() - size_) {
        throw input_error("payload parts overflow: the sizes up to part " + std::to_string(i) +
                          " add up to more than SIZE_MAX bytes");
      }
      size_ += b.size;
    }
  }

  const ConstBuffer* begin() const noexcept { return parts_ != nullptr ? parts_ : &one_; }
  const ConstBuffer* end() const noexcept { return begin() + count_; }
  /// Total bytes over all parts (checked at construction: it cannot wrap).
  std::uint64_t size() const noexcept { return size_; }

 private:
  ConstBuffer one_{};
  const ConstBuffer* parts_ = nullptr;
  std::size_t count_ = 1;
  std::size_t size_ = 0;
};

namespace detail {

// A hasher with `static constexpr bool keyed = true` (HmacSha256) makes a keyed namespace.
template <class Hash, class = void>
struct is_keyed_hash : std::false_type {};
template <class Hash>
struct is_keyed_hash<Hash, std::void_t<decltype(Hash::keyed)>> : std::bool_constant<Hash::keyed> {};

/// The confidential key source of a keyed hasher (HmacSha256), for KeyNamespace.
struct ConfidentialAccess {
  template <class H>
  static const HmacSha256Core& kdf(const H& h) noexcept {
    return h.confidential_;
  }
};

inline PayloadDigest canonical(XXH128_hash_t h) noexcept {
  XXH128_canonical_t c;
  XXH128_canonicalFromHash(&c, h);
  PayloadDigest d;
  std::memcpy(d.data(), c.digest, d.size());
  return d;
}

/// The one-time-key source of a keyed namespace: K_p = H('P' || root) under
/// the tenant secret (docs/format.md). Wiped on destruction.
struct PayloadKey {
  std::array<std::uint8_t, 32> bytes{};
  PayloadKey() = default;
  PayloadKey(const PayloadKey&) = default;
  PayloadKey& operator=(const PayloadKey&) = default;
  ~PayloadKey() { OPENSSL_cleanse(bytes.data(), bytes.size()); }
};

inline EVP_MAC* poly1305_mac() {
  static EVP_MAC* const mac = EVP_MAC_fetch(nullptr, "POLY1305", nullptr);
  if (mac == nullptr) throw crypto_error("EVP_MAC_fetch(POLY1305) failed: no provider offers Poly1305");
  return mac;
}
inline const EVP_CIPHER* chacha20_cipher() {
  static EVP_CIPHER* const cipher = EVP_CIPHER_fetch(nullptr, "ChaCha20", nullptr);
  if (cipher == nullptr) throw crypto_error("EVP_CIPHER_fetch(ChaCha20) failed: no provider offers ChaCha20");
  return cipher;
}

inline const EVP_CIPHER* aes256_gcm_cipher() {
  static EVP_CIPHER* const cipher = EVP_CIPHER_fetch(nullptr, "AES-256-GCM", nullptr);
  if (cipher == nullptr) throw crypto_error("EVP_CIPHER_fetch(AES-256-GCM) failed: no provider offers AES-256-GCM");
  return cipher;
}

inline EVP_MAC_CTX* new_poly1305_ctx() {
  EVP_MAC_CTX* ctx = EVP_MAC_CTX_new(poly1305_mac());
  if (ctx == nullptr) throw crypto_error("EVP_MAC_CTX_new(POLY1305) failed");
  return ctx;
}

/// Contexts each thread allocates once and reuses for every one-shot keyed
/// seal and verify (so those never allocate after the thread's first one).
/// Neither holds key material between calls.
struct ThreadCrypto {
  EVP_CIPHER_CTX* chacha = nullptr;
  EVP_MAC_CTX* poly = nullptr;
  EVP_CIPHER_CTX* gcm = nullptr;
  ThreadCrypto() = default;
  ThreadCrypto(const ThreadCrypto&) = delete;
  ThreadCrypto& operator=(const ThreadCrypto&) = delete;
  ~ThreadCrypto() {
    EVP_CIPHER_CTX_free(chacha);
    EVP_MAC_CTX_free(poly);
    EVP_CIPHER_CTX_free(gcm);
  }
};
inline ThreadCrypto& thread_crypto() {
  thread_local ThreadCrypto t;
  return t;
}

/// The Poly1305 one-time key of one seal: the first 32 bytes of the ChaCha20
/// keystream (RFC 8439 block function) under K_p with the 16-byte nonce as
/// OpenSSL's ChaCha20 IV (u32le block counter || 96-bit nonce).
inline void one_time_key(const PayloadKey& key, const std::uint8_t* nonce, std::uint8_t* out) {
  ThreadCrypto& t = thread_crypto();
  if (t.chacha == nullptr) {
    t.chacha = EVP_CIPHER_CTX_new();
    if (t.chacha == nullptr || EVP_EncryptInit_ex2(t.chacha, chacha20_cipher(), nullptr, nullptr, nullptr) != 1) {
      throw crypto_error("EVP_EncryptInit_ex2(ChaCha20) failed");
    }
  }
  static constexpr std::uint8_t zeros[32] = {};
  int len = 0;
  const bool ok = EVP_EncryptInit_ex2(t.chacha, nullptr, key.bytes.data(), nonce, nullptr) == 1 &&
                  EVP_EncryptUpdate(t.chacha, out, &len, zeros, 32) == 1 && len == 32;
  // Leave no key schedule behind in the thread's context.
  EVP_EncryptInit_ex2(t.chacha, nullptr, zeros, zeros, nullptr);
  if (!ok) throw crypto_error("ChaCha20 one-time key derivation failed");
}

// ---- confidential namespaces: AES-256-GCM (docs/format.md, "Mode aes256_gcm") ----

/// A 32-byte AES key that wipes itself.
struct GcmKey {
  std::uint8_t bytes[32] = {};
  GcmKey() = default;
  GcmKey(const GcmKey&) = delete;
  GcmKey& operator=(const GcmKey&) = delete;
  ~GcmKey() { OPENSSL_cleanse(bytes, sizeof bytes); }
};

/// K_c = HKDF-Expand(PRK, 'C' || root || selector, 32) = HMAC(PRK, info || 0x01),
/// with kdf the HMAC core keyed by the PRK (HmacSha256's confidential key).
inline void confidential_key(const HmacSha256Core& kdf, const Digest& root, const std::uint8_t* selector,
                             GcmKey& out) noexcept {
  std::uint8_t info[1 + Digest::size_bytes + 4 + 1];
  info[0] = domain_confidential;
  std::memcpy(info + 1, root.data(), Digest::size_bytes);
  std::memcpy(info + 1 + Digest::size_bytes, selector, 4);
  info[sizeof info - 1] = 0x01;  // HKDF's first output block
  HmacSha256Core h = kdf;
  h.update(info, sizeof info);
  Digest k = h.result();
  std::memcpy(out.bytes, k.data(), sizeof out.bytes);
  OPENSSL_cleanse(k.data(), k.size());
}

/// One AES-256-GCM pass in the thread's cipher context. The context holds the
/// key schedule only between start() and the destructor, which wipes it.
class GcmPass {
 public:
  /// encrypt: true to encrypt; iv: 12 bytes; aad: the header with its tag zero.
  GcmPass(bool encrypt, const GcmKey& key, const std::uint8_t* iv, const Envelope& aad) : encrypt_(encrypt) {
    ThreadCrypto& t = thread_crypto();
    if (t.gcm == nullptr) {
      t.gcm = EVP_CIPHER_CTX_new();
      if (t.gcm == nullptr) throw crypto_error("EVP_CIPHER_CTX_new failed");
    }
    ctx_ = t.gcm;
    const int rc = encrypt ? EVP_EncryptInit_ex2(ctx_, aes256_gcm_cipher(), key.bytes, iv, nullptr)
                           : EVP_DecryptInit_ex2(ctx_, aes256_gcm_cipher(), key.bytes, iv, nullptr);
    if (rc != 1) throw crypto_error("AES-256-GCM init failed");
    int len = 0;
    if ((encrypt ? EVP_EncryptUpdate(ctx_, nullptr, &len, aad.data(), static_cast<int>(aad.size()))
                 : EVP_DecryptUpdate(ctx_, nullptr, &len, aad.data(), static_cast<int>(aad.size()))) != 1) {
      throw crypto_error("AES-256-GCM associated data failed");
    }
  }
  GcmPass(const GcmPass&) = delete;
  GcmPass& operator=(const GcmPass&) = delete;
  ~GcmPass() {
    // Leave no key schedule behind in the thread's context.
    static constexpr std::uint8_t zeros[32] = {};
    EVP_CipherInit_ex2(ctx_, nullptr, zeros, zeros, -1, nullptr);
  }

  /// out[0, n) = the transform of in[0, n); out == in is allowed, other overlaps are not.
  void update(const std::uint8_t* in, std::size_t n, std::uint8_t* out) {
    constexpr std::size_t piece = std::size_t{1} << 30;  // EVP counts in int
    for (std::size_t off = 0; off < n; off += piece) {
      const int len = static_cast<int>(std::min(piece, n - off));
      int done = 0;
      if ((encrypt_ ? EVP_EncryptUpdate(ctx_, out + off, &done, in + off, len)
                    : EVP_DecryptUpdate(ctx_, out + off, &done, in + off, len)) != 1 ||
          done != len) {
        throw crypto_error("AES-256-GCM update failed");
      }
    }
  }
  /// Encrypting: writes the tag.
  void seal(std::uint8_t* tag) {
    int len = 0;
    if (EVP_EncryptFinal_ex(ctx_, nullptr, &len) != 1 ||
        EVP_CIPHER_CTX_ctrl(ctx_, EVP_CTRL_GCM_GET_TAG, 16, tag) != 1) {
      throw crypto_error("AES-256-GCM final failed");
    }
  }
  /// Decrypting: true when tag authenticates the header and everything decrypted.
  bool open(const std::uint8_t* tag) {
    std::uint8_t t[16];
    std::memcpy(t, tag, sizeof t);
    if (EVP_CIPHER_CTX_ctrl(ctx_, EVP_CTRL_GCM_SET_TAG, 16, t) != 1) throw crypto_error("AES-256-GCM set tag failed");
    int len = 0;
    return EVP_DecryptFinal_ex(ctx_, nullptr, &len) == 1;
  }

 private:
  EVP_CIPHER_CTX* ctx_ = nullptr;
  bool encrypt_;
};

/// Bytes of plaintext the thread may hold while authenticating without a
/// destination (verify): decrypted piecewise and wiped.
inline constexpr std::size_t gcm_scratch_size = std::size_t{1} << 16;

/// Streaming digest (XXH3-128) or tag (Poly1305) of a payload. Holds no heap
/// memory of its own; a keyed one borrows a Poly1305 context.
class PayloadHasher {
 public:
  PayloadHasher() noexcept = default;

  IntegrityMode mode() const noexcept { return mode_; }

  void start_plain() noexcept {
    mode_ = IntegrityMode::xxh3_128;
    XXH3_128bits_reset(&xxh_);
  }
  /// Keys ctx with the one-time key derived from key and nonce.
  void start_keyed(EVP_MAC_CTX* ctx, const PayloadKey& key, const std::uint8_t* nonce) {
    std::uint8_t otk[32];
    one_time_key(key, nonce, otk);
    const int rc = EVP_MAC_init(ctx, otk, sizeof otk, nullptr);
    OPENSSL_cleanse(otk, sizeof otk);
    if (rc != 1) throw crypto_error("EVP_MAC_init(POLY1305) failed");
    poly_ = ctx;
    mode_ = IntegrityMode::poly1305;
  }
  /// Hashes nothing: the result will not be used.
  void start_none() noexcept { mode_ = IntegrityMode::none; }

  void update(const void* data, std::size_t size) {
    if (size == 0) return;
    if (mode_ == IntegrityMode::xxh3_128) {
      KVKEY_XXH3_128_UPDATE(&xxh_, data, size);
    } else if (mode_ == IntegrityMode::poly1305) {
      if (EVP_MAC_update(poly_, static_cast<const unsigned char*>(data), size) != 1) {
        throw crypto_error("EVP_MAC_update(POLY1305) failed");
      }
    }
  }

  /// The digest or tag over everything fed and then the header, whose digest
  /// field must be zero (format v3: both modes cover the whole header).
  PayloadDigest finish(const Envelope& header) {
    PayloadDigest d{};
    if (mode_ == IntegrityMode::xxh3_128) {
      KVKEY_XXH3_128_UPDATE(&xxh_, header.data(), header.size());
      return canonical(XXH3_128bits_digest(&xxh_));
    }
    if (mode_ == IntegrityMode::poly1305) {
      update(header.data(), header.size());
      std::size_t len = 0;
      if (EVP_MAC_final(poly_, d.data(), &len, d.size()) != 1 || len != d.size()) {
        throw crypto_error("EVP_MAC_final(POLY1305) failed");
      }
    }
    return d;
  }

 private:
  XXH3_state_t xxh_;
  EVP_MAC_CTX* poly_ = nullptr;
  IntegrityMode mode_ = IntegrityMode::none;
};

/// Owns a Poly1305 context (streaming objects) or borrows the thread's.
class MacSlot {
 public:
  explicit MacSlot(bool owned) : owned_(owned) {}
  MacSlot(MacSlot&& o) noexcept : ctx_(std::exchange(o.ctx_, nullptr)), owned_(o.owned_) {}
  MacSlot& operator=(MacSlot&&) = delete;
  MacSlot(const MacSlot&) = delete;
  ~MacSlot() {
    if (owned_) EVP_MAC_CTX_free(ctx_);
  }
  EVP_MAC_CTX* get() {
    if (ctx_ != nullptr) return ctx_;
    if (owned_) return ctx_ = new_poly1305_ctx();
    ThreadCrypto& t = thread_crypto();
    if (t.poly == nullptr) t.poly = new_poly1305_ctx();
    return ctx_ = t.poly;
  }

 private:
  EVP_MAC_CTX* ctx_ = nullptr;
  bool owned_;
};

/// The finish() state of a streaming sealer or verifier: after finish(), and
/// once moved from, every further update() or finish() throws
/// std::logic_error (the hash state is spent; reusing it must not crash).
class StreamState {
 public:
  StreamState() noexcept = default;
  StreamState(StreamState&& o) noexcept : finished_(std::exchange(o.finished_, true)) {}
  StreamState& operator=(StreamState&&) = delete;
  StreamState(const StreamState&) = delete;

  void check(const char* call) const {
    if (finished_) {
      throw std::logic_error(std::string(call) +
                             " after finish(): a sealer or verifier checks one object; make "
                             "a new one for the next");
    }
  }
  /// check(), then marks the stream finished.
  void finish(const char* call) {
    check(call);
    finished_ = true;
  }

 private:
  bool finished_ = false;
};

/// What a namespace hands its sealer and verifier.
struct PayloadScheme {
  IntegrityMode mode;     ///< xxh3_128 or poly1305
  const PayloadKey* key;  ///< poly1305 only
  PayloadCheck check;     ///< the reader's policy
};

}  // namespace detail

/// XXH3-128 of a payload's concatenated bytes, in canonical (big-endian) form,
/// as `xxh128sum` prints it. Since format v3 a plain namespace stores the
/// digest of the payload followed by the header (docs/format.md, "Mode
/// xxh3_128"), so this is a building block and a checksum for tools, not the
/// stored digest.
inline PayloadDigest xxh3_128_digest(const Payload& payload) noexcept {
  if (payload.end() - payload.begin() == 1)
    return detail::canonical(KVKEY_XXH3_128(payload.begin()->data, payload.begin()->size));
  XXH3_state_t s;
  XXH3_128bits_reset(&s);
  for (const ConstBuffer& b : payload) {
    if (b.size != 0) KVKEY_XXH3_128_UPDATE(&s, b.data, b.size);
  }
  return detail::canonical(XXH3_128bits_digest(&s));
}

/// Seals one object whose bytes arrive in pieces: update() each piece in
/// order, then finish() returns the header (payload size = the bytes fed).
/// Made by KeyNamespace::sealer(); the namespace must outlive it. A keyed
/// sealer owns one Poly1305 context (allocated when it is made); one-shot
/// KeyNamespace::seal never allocates.
class PayloadSealer {
 public:
  PayloadSealer(PayloadSealer&&) noexcept = default;

  /// Throws std::logic_error after finish() (or on a moved-from sealer).
  void update(const void* data, std::size_t size) {
    state_.check("PayloadSealer::update()");
    hasher_.update(data, size);
    size_ += size;
  }
  /// Once only: a second call throws std::logic_error.
  [[nodiscard]] Envelope finish() {
    state_.finish("PayloadSealer::finish()");
    detail::store_u64(header_.data() + envelope_layout::payload_size, size_);
    const PayloadDigest d = hasher_.finish(header_);
    std::memcpy(header_.data() + envelope_layout::payload_digest, d.data(), d.size());
    return header_;
  }

  /// Used by KeyNamespace: `header` is the namespace's envelope for the block.
  PayloadSealer(const Envelope& header, const detail::PayloadScheme& scheme, bool own_context)
      : header_(header), mac_(own_context) {
    header_[envelope_layout::integrity_mode] = static_cast<std::uint8_t>(scheme.mode);
    if (scheme.mode == IntegrityMode::poly1305) {
      std::uint8_t* nonce = header_.data() + envelope_layout::nonce;
      if (RAND_bytes(nonce, 16) != 1) throw crypto_error("RAND_bytes failed: no nonce for the payload tag");
      hasher_.start_keyed(mac_.get(), *scheme.key, nonce);
    } else {
      hasher_.start_plain();
    }
  }

 private:
  Envelope header_;
  detail::MacSlot mac_;
  detail::PayloadHasher hasher_;
  std::uint64_t size_ = 0;
  detail::StreamState state_;
};

/// Verifies one object whose bytes arrive in pieces: update() each piece in
/// order, then finish() gives the Verdict of KeyNamespace::verify over the
/// whole payload. The header is copied at construction. Made by
/// KeyNamespace::verifier(); the namespace must outlive it.
class PayloadVerifier {
 public:
  PayloadVerifier(PayloadVerifier&&) noexcept = default;

  /// Throws std::logic_error after finish() (or on a moved-from verifier).
  void update(const void* data, std::size_t size) {
    state_.check("PayloadVerifier::update()");
    hasher_.update(data, size);
    size_ += size;
  }
  /// Once only: a second call throws std::logic_error.
  [[nodiscard]] Verdict finish() {
    state_.finish("PayloadVerifier::finish()");
    if (!length_ok_) return {Reason::malformed, "envelope.size"};
    detail::store_u64(expected_.data() + envelope_layout::payload_size, size_);
    if (hasher_.mode() != IntegrityMode::none) {
      const PayloadDigest d = hasher_.finish(expected_);
      std::memcpy(expected_.data() + envelope_layout::payload_digest, d.data(), d.size());
    }
    return detail::verify_envelope(header_.data(), header_.size(), expected_, *own_);
  }

  /// Used by KeyNamespace: `expected` is the namespace's envelope for the block.
  PayloadVerifier(const std::uint8_t* header, std::size_t len, const Envelope& expected, const Identity& own,
                  const detail::PayloadScheme& scheme, bool own_context)
      : expected_(expected), own_(&own), mac_(own_context) {
    namespace L = envelope_layout;
    length_ok_ = header != nullptr && len == envelope_size;
    if (length_ok_) std::memcpy(header_.data(), header, envelope_size);
    const std::uint8_t theirs = length_ok_ ? header_[L::integrity_mode] : 0;
    // A plain reader that opted out accepts a header sealed without a digest.
    // A keyed reader never does: its tag is the only proof that someone holding
    // the secret wrote the header (docs/security.md, "Payload MAC").
    if (theirs == static_cast<std::uint8_t>(IntegrityMode::none) && scheme.check == PayloadCheck::size_only &&
        scheme.mode != IntegrityMode::poly1305) {
      hasher_.start_none();  // opted out, and sealed without a digest: nothing to check
      return;
    }
    expected_[L::integrity_mode] = static_cast<std::uint8_t>(scheme.mode);
    if (scheme.mode == IntegrityMode::xxh3_128) {
      hasher_.start_plain();
    } else if (theirs == static_cast<std::uint8_t>(IntegrityMode::poly1305)) {
      std::memcpy(expected_.data() + L::nonce, header_.data() + L::nonce, 16);
      hasher_.start_keyed(mac_.get(), *scheme.key, expected_.data() + L::nonce);
    } else {
      hasher_.start_none();  // no tag to check: the comparison fails and names the field
    }
  }

 private:
  Envelope header_{};
  Envelope expected_;
  const Identity* own_;
  bool length_ok_ = false;
  detail::MacSlot mac_;
  detail::PayloadHasher hasher_;
  std::uint64_t size_ = 0;
  detail::StreamState state_;
};

KVKEY_END_NAMESPACE

#undef KVKEY_XXH3_128
#undef KVKEY_XXH3_128_UPDATE

#endif  // KVKEY_PAYLOAD_HPP
