// SPDX-License-Identifier: Apache-2.0
// Keyed namespaces: HMAC-SHA-256 keyed with a per-tenant secret.
//
//   kvkey::KeyNamespace<kvkey::HmacSha256> ns{id, kvkey::TenantSecret::from_file("/run/secrets/kvkey")};
//
// Every root, block hash, object hash and store key of such a namespace is an
// HMAC under the tenant's secret, so nobody without the secret can compute
// them, probe the store for them or forge a header that verifies.
// docs/security.md says when to use it and how to deploy and rotate secrets.
#ifndef KVKEY_HMAC_HPP
#define KVKEY_HMAC_HPP

#include <fcntl.h>
#include <openssl/crypto.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <utility>

#include "kvkey/config.hpp"
#include "kvkey/detail/chain.hpp"
#include "kvkey/detail/hmac_sha256.hpp"
#include "kvkey/digest.hpp"
#include "kvkey/envelope.hpp"
#include "kvkey/errors.hpp"
#include "kvkey/input_file.hpp"

KVKEY_BEGIN_NAMESPACE

/// Compares two digests in time independent of where they differ (one
/// CRYPTO_memcmp over all 32 bytes). Use it whenever one side is secret or
/// derived from a secret, e.g. a keyed block hash compared with one an attacker
/// supplied. Digest::operator== is an ordinary early-exit comparison for maps
/// and tests; KeyNamespace::verify never uses it (docs/security.md).
[[nodiscard]] inline bool constant_time_equal(const Digest& a, const Digest& b) noexcept {
  return CRYPTO_memcmp(a.data(), b.data(), Digest::size_bytes) == 0;
}

class HmacSha256;

/// A tenant's secret key for HmacSha256: between min_size and max_size bytes.
///
/// The bytes are held inside the object and overwritten (OPENSSL_cleanse) when
/// it is destroyed and when it is moved from (the moved-from secret is empty).
/// It cannot be copied, printed, streamed or formatted, and no error message
/// quotes it; only HmacSha256 reads the bytes. The std::string a secret is built
/// from is wiped too when it is passed as an rvalue (std::move or a temporary);
/// a caller that passes an lvalue still owns, and must wipe, its own copy.
class TenantSecret {
 public:
  /// Fewer bytes than this is an identity_error: 256 bits of key.
  static constexpr std::size_t min_size = 32;
  /// More bytes than this is an identity_error (HMAC hashes longer keys first
  /// anyway; the bound keeps the secret in a fixed buffer).
  static constexpr std::size_t max_size = 256;

  /// Takes the secret's raw bytes. Throws identity_error (field "tenant_secret")
  /// when there are fewer than min_size or more than max_size.
  explicit TenantSecret(std::string secret) {
    try {
      assign(secret.data(), secret.size());
    } catch (...) {
      OPENSSL_cleanse(secret.data(), secret.size());
      throw;
    }
    OPENSSL_cleanse(secret.data(), secret.size());
  }
  TenantSecret(const void* data, std::size_t size) { assign(data, size); }

  TenantSecret(const TenantSecret&) = delete;
  TenantSecret& operator=(const TenantSecret&) = delete;
  /// Takes other's bytes and wipes other, which is left empty.
  TenantSecret(TenantSecret&& other) noexcept { take(other); }
  TenantSecret& operator=(TenantSecret&& other) noexcept {
    if (this != &other) {
      wipe();
      take(other);
    }
    return *this;
  }
  ~TenantSecret() { wipe(); }

  /// Number of secret bytes; 0 only for a moved-from secret.
  std::size_t size() const noexcept { return size_; }
  bool empty() const noexcept { return size_ == 0; }

  /// Reads a secret from a file, in one of two forms:
  ///  - hex text: the file holds only hex digits (either case, an even number),
  ///    optionally followed by one "\n" or "\r\n"; the secret is the decoded
  ///    bytes. `openssl rand -hex 32 > FILE` writes this form.
  ///  - raw bytes: any other content is the secret exactly as stored, every byte
  ///    included (`head -c 32 /dev/urandom > FILE`).
  /// The file must be a regular file (symbolic links are followed) that neither
  /// others can read or write nor its group can write: mode 0600 or 0640, as
  /// for an SSH private key. It is opened without blocking and checked before
  /// any read (InputFile), so a FIFO or a device is refused, never waited on.
  /// Throws io_error naming the path when the file cannot be opened or read,
  /// is not a regular file or has looser permissions;
  /// identity_error ("tenant_secret") when its content is not a valid secret.
  /// No message quotes the content.
  [[nodiscard]] static TenantSecret from_file(const std::string& path);

  /// Reads a secret from an environment variable holding either hex digits
  /// (either case, an even number) or "base64:" followed by standard base64
  /// (RFC 4648 section 4, '=' padding required, no whitespace). Throws
  /// identity_error ("tenant_secret") naming the variable when it is unset,
  /// empty or malformed; no message quotes the value. The value stays in the
  /// process environment (readable in /proc/PID/environ by the same user):
  /// prefer from_file where the platform can mount secrets as files.
  [[nodiscard]] static TenantSecret from_env(const std::string& name);

 private:
  friend class HmacSha256;
  const std::uint8_t* data() const noexcept { return bytes_.data(); }

  // what: the secret's source as the error message names it ("is", or
  // "environment variable X holds").
  static void check_size(std::size_t size, std::string_view what) {
    if (size < min_size || size > max_size) {
      throw identity_error("tenant_secret", std::string(what) + " " + std::to_string(size) +
                                                " bytes; a tenant secret has " + std::to_string(min_size) + " to " +
                                                std::to_string(max_size) + " bytes (e.g. `openssl rand -hex 32`)");
    }
  }
  void assign(const void* data, std::size_t size) {
    check_size(size, "is");
    std::memcpy(bytes_.data(), data, size);
    size_ = size;
  }
  void wipe() noexcept {
    OPENSSL_cleanse(bytes_.data(), bytes_.size());
    size_ = 0;
  }
  void take(TenantSecret& other) noexcept {
    std::memcpy(bytes_.data(), other.bytes_.data(), other.size_);
    size_ = other.size_;
    other.wipe();
  }

  std::array<std::uint8_t, max_size> bytes_{};
  std::size_t size_ = 0;
};

namespace detail {

/// Fixed-capacity byte buffer that wipes itself: the loaders' scratch space.
template <std::size_t N>
struct WipedBuffer {
  std::array<std::uint8_t, N> bytes{};
  std::size_t size = 0;
  WipedBuffer() = default;
  WipedBuffer(const WipedBuffer&) = delete;
  WipedBuffer& operator=(const WipedBuffer&) = delete;
  ~WipedBuffer() { OPENSSL_cleanse(bytes.data(), bytes.size()); }
};

inline bool all_hex(std::string_view s) noexcept {
  for (char c : s) {
    if (hex_digit_value(c) < 0) return false;
  }
  return true;
}

// Decodes hex digits (already checked by all_hex, even count) into out.
template <std::size_t N>
bool decode_secret_hex(std::string_view s, WipedBuffer<N>& out) noexcept {
  if (s.size() % 2 != 0 || s.size() / 2 > N) return false;
  for (std::size_t i = 0; i < s.size() / 2; ++i) {
    out.bytes[i] = static_cast<std::uint8_t>((hex_digit_value(s[2 * i]) << 4) | hex_digit_value(s[2 * i + 1]));
  }
  out.size = s.size() / 2;
  return true;
}

inline int base64_value(char c) noexcept {
  return (c >= 'A' && c <= 'Z')   ? c - 'A'
         : (c >= 'a' && c <= 'z') ? c - 'a' + 26
         : (c >= '0' && c <= '9') ? c - '0' + 52
         : c == '+'               ? 62
         : c == '/'               ? 63
                                  : -1;
}

// Strict RFC 4648 base64: length a multiple of 4, '=' only as the last one or
// two characters, no whitespace, unused bits of the last symbol zero.
template <std::size_t N>
bool decode_secret_base64(std::string_view s, WipedBuffer<N>& out) noexcept {
  if (s.empty() || s.size() % 4 != 0) return false;
  std::size_t pad = 0;
  if (s.back() == '=') pad = s[s.size() - 2] == '=' ? 2 : 1;
  const std::size_t n = s.size() / 4 * 3 - pad;
  if (n > N) return false;
  std::size_t o = 0;
  for (std::size_t i = 0; i < s.size(); i += 4) {
    const bool last = i + 4 == s.size();
    std::uint32_t v = 0;
    for (std::size_t j = 0; j < 4; ++j) {
      const char c = s[i + j];
      int d;
      if (c == '=' && last && j >= 4 - pad) {
        d = 0;
      } else {
        d = base64_value(c);
        if (d < 0) return false;
      }
      v = (v << 6) | static_cast<std::uint32_t>(d);
    }
    if (last && ((pad == 1 && (v & 0xffu) != 0) || (pad == 2 && (v & 0xffffu) != 0))) return false;
    const std::size_t k = last ? 3 - pad : 3;
    for (std::size_t j = 0; j < k; ++j) out.bytes[o++] = static_cast<std::uint8_t>(v >> (16 - 8 * j));
  }
  out.size = o;
  return true;
}

}  // namespace detail

inline TenantSecret TenantSecret::from_file(const std::string& path) {
  const std::string where = "tenant secret file '" + path + "'";
  InputFile file(path, where);  // never blocks; anything but a regular file is refused before a read
  if ((file.mode() & (S_IROTH | S_IWOTH | S_IWGRP)) != 0) {
    throw io_error(where + " is readable or writable by others or writable by its group; chmod 600 (or 640) it");
  }
  // Longest valid file: hex of max_size bytes and "\r\n". Read one byte more to
  // tell a file that is too long.
  constexpr std::size_t max_file = 2 * max_size + 2;
  detail::WipedBuffer<max_file + 1> raw;
  raw.size = file.read(raw.bytes.data(), raw.bytes.size());
  if (raw.size > max_file) {
    throw identity_error("tenant_secret", where + " is longer than " + std::to_string(max_file) + " bytes");
  }
  std::string_view text(reinterpret_cast<const char*>(raw.bytes.data()), raw.size);
  if (text.size() >= 1 && text.back() == '\n') text.remove_suffix(1);
  if (text.size() >= 1 && text.back() == '\r') text.remove_suffix(1);
  if (!text.empty() && detail::all_hex(text)) {
    detail::WipedBuffer<max_size> bytes;
    if (!detail::decode_secret_hex(text, bytes)) {
      throw identity_error("tenant_secret", where + " holds hex text of " + std::to_string(text.size()) +
                                                " digits; a hex secret has an even number of digits, at most " +
                                                std::to_string(2 * max_size));
    }
    check_size(bytes.size, where + " holds hex text of");
    return TenantSecret(bytes.bytes.data(), bytes.size);
  }
  check_size(raw.size, where + " holds");
  return TenantSecret(raw.bytes.data(), raw.size);
}

inline TenantSecret TenantSecret::from_env(const std::string& name) {
  const std::string where = "environment variable " + name;
  const char* value = name.empty() ? nullptr : std::getenv(name.c_str());
  if (value == nullptr) throw identity_error("tenant_secret", where + " is not set");
  const std::string_view text(value);
  if (text.empty()) throw identity_error("tenant_secret", where + " is empty");
  constexpr std::string_view base64_prefix = "base64:";
  detail::WipedBuffer<max_size> bytes;
  if (text.substr(0, base64_prefix.size()) == base64_prefix) {
    if (!detail::decode_secret_base64(text.substr(base64_prefix.size()), bytes)) {
      throw identity_error("tenant_secret", where +
                                                " starts with \"base64:\" but the rest is not padded "
                                                "standard base64 of at most " +
                                                std::to_string(max_size) + " bytes");
    }
  } else if (!detail::all_hex(text) || !detail::decode_secret_hex(text, bytes)) {
    throw identity_error("tenant_secret", where + " is neither an even number of hex digits (at most " +
                                              std::to_string(2 * max_size) + ") nor \"base64:\" followed by base64");
  }
  check_size(bytes.size, where + " holds");
  return TenantSecret(bytes.bytes.data(), bytes.size);
}

/// HMAC-SHA-256 (RFC 2104) keyed with a TenantSecret, with the same hasher
/// shape as Sha256: update(const void*, size_t) absorbs bytes, result() returns
/// the Digest and returns the object to its freshly keyed state; copies are
/// independent.
///
/// Implicitly constructible from a TenantSecret, so that
/// `KeyNamespace<HmacSha256> ns{id, TenantSecret{secret}}` works. The key is
/// absorbed once, into the SHA-256 states after its inner and outer pads
/// (kvkey/detail/hmac_sha256.hpp): a message then costs its own blocks and one
/// more compression, on the CPU's SHA extensions where it has them, without
/// allocating. Those two states are as secret as the key and are held like it:
/// never printed, overwritten (OPENSSL_cleanse) when the object is destroyed
/// and when it is moved from (a moved-from HmacSha256 holds no key: assign to
/// it before use). The TenantSecret it was built from may be destroyed right
/// away. The digests are RFC 2104's (tests/unit/hmac_test.cpp checks them
/// against OpenSSL's HMAC).
class HmacSha256 {
 public:
  using result_type = Digest;
  static constexpr std::size_t block_size = 64;
  /// result() leaves the object keyed and ready for the next message.
  static constexpr bool resets_after_result = true;
  /// Keyed by a tenant secret: a KeyNamespace over it is NamespaceKind::keyed
  /// and authenticates payloads (docs/security.md).
  static constexpr bool keyed = true;

  /// Absorbs the secret. An empty (moved-from) secret is an identity_error
  /// ("tenant_secret").
  HmacSha256(const TenantSecret& secret)  // NOLINT(google-explicit-constructor): implicit by design
      : core_(checked(secret).data(), secret.size()), confidential_(confidential_prk(secret)) {}

  void update(const void* data, std::size_t size) noexcept { core_.update(data, size); }

  /// Finalizes, returns the MAC and resets to the keyed empty-message state.
  Digest result() noexcept { return core_.result(); }

  /// Returns to the keyed empty-message state (the key is kept).
  void reset() noexcept { core_.reset(); }

  /// Bytes a buffer needs for hash_padded() of a size-byte message.
  static constexpr std::size_t padded_size(std::size_t size) noexcept {
    return detail::HmacSha256Core::padded_size(size);
  }
  /// The MAC of buf[0, size), padded in place (buf holds padded_size(size)
  /// bytes), without touching the object's own message: the chain's hot path.
  Digest hash_padded(std::uint8_t* buf, std::size_t size) const noexcept { return core_.hash_padded(buf, size); }

  /// One-shot HMAC-SHA-256 of a byte range under secret.
  [[nodiscard]] static Digest mac(const TenantSecret& secret, const void* data, std::size_t size) {
    HmacSha256 h(secret);
    h.update(data, size);
    return h.result();
  }

 private:
  friend struct detail::ConfidentialAccess;

  static const TenantSecret& checked(const TenantSecret& secret) {
    if (secret.empty()) throw identity_error("tenant_secret", "is empty (it was moved from)");
    return secret;
  }
  // HKDF-Extract(salt "kvkey v4 confidential", IKM = the secret) (RFC 5869),
  // keyed into an HMAC core: HKDF-Expand of the confidential key is then one
  // MAC of that core (docs/format.md, "Mode aes256_gcm"). The PRK is wiped.
  static detail::HmacSha256Core confidential_prk(const TenantSecret& secret) {
    detail::HmacSha256Core extract(detail::confidential_salt.data(), detail::confidential_salt.size());
    extract.update(secret.data(), secret.size());
    Digest prk = extract.result();
    detail::HmacSha256Core expand(prk.data(), prk.size());
    OPENSSL_cleanse(prk.data(), prk.size());
    return expand;
  }
  detail::HmacSha256Core core_;
  detail::HmacSha256Core confidential_;  // HMAC keyed with the confidential PRK
};

/// The public id of a tenant secret (docs/format.md, "Secret id"): the first 8
/// bytes of HMAC-SHA-256(secret, 'I'). KeyNamespace<HmacSha256>::secret_id()
/// of any identity under this secret returns it; secret_key_prefix(tenant, id)
/// (kvkey/key_namespace.hpp) selects the keys sealed under it. Throws
/// identity_error ("tenant_secret") for an empty (moved-from) secret.
[[nodiscard]] inline SecretId secret_id(const TenantSecret& secret) {
  const std::uint8_t tag = detail::domain_secret_id;
  const Digest d = HmacSha256::mac(secret, &tag, 1);
  SecretId id;
  std::memcpy(id.bytes.data(), d.data(), SecretId::size_bytes);
  return id;
}

KVKEY_END_NAMESPACE

#endif  // KVKEY_HMAC_HPP
