// SPDX-License-Identifier: Apache-2.0
//
// File: kvkey/envelope.hpp
//
// The envelope: the fixed 1024-byte header stored with every object, its one
// parser (parse_envelope, used by decode_envelope, verify_envelope and the
// CLI's inspect), Verdict and Reason. Sealing and verifying go through a
// KeyNamespace (kvkey/key_namespace.hpp), which knows the identity; payload
// views and digests are in kvkey/payload.hpp. The bytes are specified in
// docs/format.md, "Envelope".
#ifndef KVKEY_ENVELOPE_HPP
#define KVKEY_ENVELOPE_HPP

#include <openssl/crypto.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <utility>
#include <string>
#include <string_view>

#include "kvkey/config.hpp"
#include "kvkey/detail/endian.hpp"
#include "kvkey/digest.hpp"
#include "kvkey/encode.hpp"
#include "kvkey/identity.hpp"

KVKEY_BEGIN_NAMESPACE

/// Size in bytes of every envelope (header), for every identity. A connector can
/// register one buffer of this size beside its KV buffers.
inline constexpr std::size_t envelope_size = 1024;

/// The header bytes written in front of (or beside) a stored object's KV bytes.
using Envelope = std::array<std::uint8_t, envelope_size>;

/// The 8 ASCII bytes that open every envelope.
inline constexpr char envelope_magic[8] = {'K', 'V', 'K', 'E', 'Y', 'E', 'N', 'V'};

/// Byte offsets inside an envelope (docs/format.md, "Envelope").
namespace envelope_layout {
inline constexpr std::size_t magic = 0;            // 8 bytes
inline constexpr std::size_t version = 8;          // u16le
inline constexpr std::size_t size = 10;            // u16le, == envelope_size
inline constexpr std::size_t identity_len = 12;    // u32le
inline constexpr std::size_t block_hash = 16;      // 32 bytes
inline constexpr std::size_t payload_size = 48;    // u64le
inline constexpr std::size_t slice = 56;           // 4 x u32le
inline constexpr std::size_t namespace_kind = 72;  // u8, NamespaceKind
inline constexpr std::size_t integrity_mode = 73;  // u8, IntegrityMode
inline constexpr std::size_t reserved = 74;        // 6 zero bytes
inline constexpr std::size_t nonce = 80;           // 16 bytes, poly1305 and aes256_gcm modes only
inline constexpr std::size_t payload_digest = 96;  // 16 bytes: digest or tag, zero in mode none
inline constexpr std::size_t secret_id = 112;      // 8 bytes: keyed namespaces' secret id, zero in plain ones
inline constexpr std::size_t identity = 120;       // identity_len bytes, then zeros
}  // namespace envelope_layout

/// Which kind of namespace sealed a header. Codes are part of the byte format.
enum class NamespaceKind : std::uint8_t {
  plain = 1,  ///< KeyNamespace<Sha256> (or any unkeyed hasher)
  keyed = 2,  ///< KeyNamespace<HmacSha256>: hashes and payload tags under a tenant secret
};

/// How the payload (the KV bytes behind a header) is protected. Codes are part
/// of the byte format; names (to_string) are stable.
enum class IntegrityMode : std::uint8_t {
  none = 0,        ///< size only: sealed without the bytes (PayloadCheck::size_only)
  xxh3_128 = 1,    ///< plain namespaces: XXH3-128 of the payload
  poly1305 = 2,    ///< keyed namespaces: Poly1305 tag under a one-time key (docs/security.md)
  aes256_gcm = 3,  ///< confidential (keyed) namespaces: the payload is AES-256-GCM ciphertext, the tag its GCM tag
};

constexpr std::string_view to_string(NamespaceKind k) noexcept {
  return k == NamespaceKind::plain ? "plain" : k == NamespaceKind::keyed ? "keyed" : "invalid";
}
constexpr std::string_view to_string(IntegrityMode m) noexcept {
  switch (m) {
    case IntegrityMode::none: return "none";
    case IntegrityMode::xxh3_128: return "xxh3_128";
    case IntegrityMode::poly1305: return "poly1305";
    case IntegrityMode::aes256_gcm: return "aes256_gcm";
  }
  return "invalid";
}

/// The 16 bytes of a payload digest (XXH3-128, canonical big-endian form) or tag.
using PayloadDigest = std::array<std::uint8_t, 16>;

/// A keyed namespace's secret id: the first 8 bytes of HMAC-SHA-256(tenant
/// secret, 'I'), a public fingerprint of the secret that reveals nothing about
/// it (docs/format.md, "Secret id"). It is written in every keyed envelope and,
/// as 16 lowercase hex digits after a 'k', in every keyed store key, so the
/// values of one retired secret can be selected and purged.
struct SecretId {
  static constexpr std::size_t size_bytes = 8;
  std::array<std::uint8_t, size_bytes> bytes{};

  /// 16 lowercase hex digits.
  [[nodiscard]] std::string hex() const {
    static constexpr char digits[] = "0123456789abcdef";
    std::string out(2 * size_bytes, '0');
    for (std::size_t i = 0; i < size_bytes; ++i) {
      out[2 * i] = digits[bytes[i] >> 4];
      out[2 * i + 1] = digits[bytes[i] & 0x0f];
    }
    return out;
  }
  /// Parses 16 hex digits (either case); nullopt on any other input.
  [[nodiscard]] static std::optional<SecretId> try_from_hex(std::string_view hex) noexcept {
    if (hex.size() != 2 * size_bytes) return std::nullopt;
    SecretId id;
    for (std::size_t i = 0; i < size_bytes; ++i) {
      const int hi = detail::hex_digit_value(hex[2 * i]);
      const int lo = detail::hex_digit_value(hex[2 * i + 1]);
      if (hi < 0 || lo < 0) return std::nullopt;
      id.bytes[i] = static_cast<std::uint8_t>((hi << 4) | lo);
    }
    return id;
  }
  friend bool operator==(const SecretId& a, const SecretId& b) noexcept { return a.bytes == b.bytes; }
  friend bool operator!=(const SecretId& a, const SecretId& b) noexcept { return !(a == b); }
};

/// Why a header was accepted or rejected. Names (to_string) are stable API.
enum class Reason : std::uint8_t {
  ok = 0,
  malformed,            ///< not a kvkey envelope, truncated, or not parseable
  unsupported_version,  ///< a kvkey envelope of another format version
  identity_mismatch,    ///< produced under another identity (or namespace kind); field names the first difference
  block_mismatch,       ///< same identity and secret, another block
  size_mismatch,        ///< the payload size differs from what the reader expects
  payload_mismatch,     ///< the payload bytes do not match the header's digest/tag, or cannot be checked
  not_granted,          ///< a shared scope this tenant may not read (field "scope.readers"); the store was not asked
};

[[nodiscard]] constexpr std::string_view to_string(Reason r) noexcept {
  switch (r) {
    case Reason::ok: return "ok";
    case Reason::malformed: return "malformed";
    case Reason::unsupported_version: return "unsupported_version";
    case Reason::identity_mismatch: return "identity_mismatch";
    case Reason::block_mismatch: return "block_mismatch";
    case Reason::size_mismatch: return "size_mismatch";
    case Reason::payload_mismatch: return "payload_mismatch";
    case Reason::not_granted: return "not_granted";
  }
  return "invalid";
}

/// The outcome of verifying a header: a value, not an exception. Anything but
/// ok() means the object must be treated as a miss.
struct [[nodiscard]] Verdict {
  Reason reason = Reason::malformed;
  /// Where the difference is: for identity_mismatch the dotted path of the
  /// first differing field ("kv.dtype", "model.weights_epoch", "tenant",
  /// "adapter.weights_fingerprint", "tenant.secret_id", "shard",
  /// "envelope.namespace_kind", ...);
  /// for the other reasons the part of the envelope ("envelope.size",
  /// "envelope.magic", "block_hash", "payload_size", "payload",
  /// "envelope.integrity_mode", ...). Empty when ok.
  std::string field;

  bool ok() const noexcept { return reason == Reason::ok; }
};

/// Decoded contents of an envelope, for inspection tools. Verify never needs it.
struct EnvelopeContents {
  std::uint16_t version = 0;
  Identity identity;  ///< shard left at defaults; see slice
  Slice slice;
  Digest block_hash;
  std::uint64_t payload_size = 0;
  NamespaceKind namespace_kind = NamespaceKind::plain;
  IntegrityMode integrity = IntegrityMode::none;
  std::array<std::uint8_t, 16> nonce{};  ///< poly1305 and aes256_gcm modes only; zero otherwise
  PayloadDigest payload_digest{};        ///< XXH3-128 digest, Poly1305 or GCM tag; zero in mode none
  std::optional<SecretId> secret_id;     ///< the sealing secret's id; keyed envelopes only
};

/// The result of parse_envelope: the contents, or the Verdict saying why not
/// (malformed or unsupported_version, naming the field).
struct ParsedEnvelope {
  std::optional<EnvelopeContents> contents;
  Verdict verdict;  ///< ok exactly when contents holds a value
};

namespace detail {

/// Writes the parts of an envelope that do not depend on the block.
inline Envelope envelope_template(const Bytes& identity_encoding, const Slice& s, NamespaceKind kind,
                                  const SecretId& secret_id) {
  static_assert(envelope_layout::identity + max_identity_encoding_size <= envelope_size,
                "every valid identity must fit in an envelope");
  Envelope e{};
  std::memcpy(e.data() + envelope_layout::magic, envelope_magic, sizeof envelope_magic);
  store_u16(e.data() + envelope_layout::version, format_version);
  store_u16(e.data() + envelope_layout::size, static_cast<std::uint16_t>(envelope_size));
  store_u32(e.data() + envelope_layout::identity_len, static_cast<std::uint32_t>(identity_encoding.size()));
  store_u32(e.data() + envelope_layout::slice + 0, s.kv_head_begin);
  store_u32(e.data() + envelope_layout::slice + 4, s.kv_head_end);
  store_u32(e.data() + envelope_layout::slice + 8, s.layer_begin);
  store_u32(e.data() + envelope_layout::slice + 12, s.layer_end);
  e[envelope_layout::namespace_kind] = static_cast<std::uint8_t>(kind);
  std::memcpy(e.data() + envelope_layout::secret_id, secret_id.bytes.data(), SecretId::size_bytes);
  std::memcpy(e.data() + envelope_layout::identity, identity_encoding.data(), identity_encoding.size());
  return e;
}

inline void envelope_fill(Envelope& e, const Digest& block_hash, std::uint64_t payload_size) noexcept {
  std::memcpy(e.data() + envelope_layout::block_hash, block_hash.data(), Digest::size_bytes);
  store_u64(e.data() + envelope_layout::payload_size, payload_size);
}

inline Slice load_slice(const std::uint8_t* p) noexcept {
  return Slice{load_u32(p), load_u32(p + 4), load_u32(p + 8), load_u32(p + 12)};
}

inline bool all_zero(const std::uint8_t* p, std::size_t n) noexcept {
  std::uint8_t acc = 0;
  for (std::size_t i = 0; i < n; ++i) acc = static_cast<std::uint8_t>(acc | p[i]);
  return acc == 0;
}

/// a[0, n) == b[0, n), n a multiple of 8, in time independent of the bytes
/// (XOR-OR of 8-byte words: several times faster than CRYPTO_memcmp's byte
/// loop over a whole envelope, and just as free of data-dependent branches).
inline bool equal_ct(const std::uint8_t* a, const std::uint8_t* b, std::size_t n) noexcept {
  std::uint64_t diff = 0;
  for (std::size_t i = 0; i < n; i += 8) {
    std::uint64_t x;
    std::uint64_t y;
    std::memcpy(&x, a + i, 8);
    std::memcpy(&y, b + i, 8);
    diff |= x ^ y;
  }
  return diff == 0;
}

/// True when mode is one a namespace of this kind writes.
constexpr bool integrity_allowed(NamespaceKind kind, std::uint8_t mode) noexcept {
  return mode == static_cast<std::uint8_t>(IntegrityMode::none) ||
         (kind == NamespaceKind::plain && mode == static_cast<std::uint8_t>(IntegrityMode::xxh3_128)) ||
         (kind == NamespaceKind::keyed && (mode == static_cast<std::uint8_t>(IntegrityMode::poly1305) ||
                                           mode == static_cast<std::uint8_t>(IntegrityMode::aes256_gcm)));
}

/// True when a header of this mode carries a random nonce.
constexpr bool has_nonce(std::uint8_t mode) noexcept {
  return mode == static_cast<std::uint8_t>(IntegrityMode::poly1305) ||
         mode == static_cast<std::uint8_t>(IntegrityMode::aes256_gcm);
}

/// The parser's first stage, shared with verify's constant-time accept path:
/// length, magic, format version. Empty field when they are right.
inline Verdict envelope_preamble(const std::uint8_t* header, std::size_t len) {
  namespace L = envelope_layout;
  if (header == nullptr || len != envelope_size) return {Reason::malformed, "envelope.size"};
  if (std::memcmp(header + L::magic, envelope_magic, sizeof envelope_magic) != 0) {
    return {Reason::malformed, "envelope.magic"};
  }
  if (load_u16(header + L::version) != format_version) {
    return {Reason::unsupported_version, "envelope.format_version"};
  }
  return {Reason::ok, {}};
}

}  // namespace detail

/// The one envelope parser: decodes every field of a header without judging it
/// against any identity, or says why the bytes are not a well-formed envelope
/// of the current format version (malformed / unsupported_version and the
/// field, in the order of docs/format.md). Never reads outside
/// [header, header + len), never throws for any input bytes.
[[nodiscard]] inline ParsedEnvelope parse_envelope(const std::uint8_t* header, std::size_t len) {
  namespace L = envelope_layout;
  ParsedEnvelope out;
  const auto fail = [&out](Reason r, const char* field) {
    out.verdict = {r, field};
    return std::move(out);
  };
  out.verdict = detail::envelope_preamble(header, len);
  if (!out.verdict.ok()) return out;
  if (detail::load_u16(header + L::size) != envelope_size) return fail(Reason::malformed, "envelope.size");
  const std::uint32_t n = detail::load_u32(header + L::identity_len);
  if (n > envelope_size - L::identity) return fail(Reason::malformed, "envelope.identity");
  auto id = decode_identity(header + L::identity, n);
  if (!id) return fail(Reason::malformed, "envelope.identity");
  if (!detail::all_zero(header + L::identity + n, envelope_size - L::identity - n) ||
      !detail::all_zero(header + L::reserved, L::nonce - L::reserved)) {
    return fail(Reason::malformed, "envelope.padding");
  }
  const std::uint8_t kind = header[L::namespace_kind];
  const std::uint8_t mode = header[L::integrity_mode];
  if (kind != static_cast<std::uint8_t>(NamespaceKind::plain) &&
      kind != static_cast<std::uint8_t>(NamespaceKind::keyed)) {
    return fail(Reason::malformed, "envelope.namespace_kind");
  }
  if (!detail::integrity_allowed(static_cast<NamespaceKind>(kind), mode)) {
    return fail(Reason::malformed, "envelope.integrity_mode");
  }
  if (!detail::has_nonce(mode) && !detail::all_zero(header + L::nonce, 16)) {
    return fail(Reason::malformed, "envelope.nonce");
  }
  if (mode == static_cast<std::uint8_t>(IntegrityMode::none) && !detail::all_zero(header + L::payload_digest, 16)) {
    return fail(Reason::malformed, "envelope.payload_digest");
  }
  if (kind == static_cast<std::uint8_t>(NamespaceKind::plain) &&
      !detail::all_zero(header + L::secret_id, SecretId::size_bytes)) {
    return fail(Reason::malformed, "envelope.secret_id");
  }
  EnvelopeContents& c = out.contents.emplace();
  c.version = format_version;
  c.identity = std::move(*id);
  c.slice = detail::load_slice(header + L::slice);
  std::memcpy(c.block_hash.data(), header + L::block_hash, Digest::size_bytes);
  c.payload_size = detail::load_u64(header + L::payload_size);
  c.namespace_kind = static_cast<NamespaceKind>(kind);
  c.integrity = static_cast<IntegrityMode>(mode);
  std::memcpy(c.nonce.data(), header + L::nonce, c.nonce.size());
  std::memcpy(c.payload_digest.data(), header + L::payload_digest, c.payload_digest.size());
  if (kind == static_cast<std::uint8_t>(NamespaceKind::keyed)) {
    std::memcpy(c.secret_id.emplace().bytes.data(), header + L::secret_id, SecretId::size_bytes);
  }
  return out;
}

/// parse_envelope's contents alone: nullopt (never undefined behaviour) when
/// the bytes are not a well-formed envelope of the current format version.
[[nodiscard]] inline std::optional<EnvelopeContents> decode_envelope(const std::uint8_t* header, std::size_t len) {
  return parse_envelope(header, len).contents;
}

namespace detail {

/// Verifies header against the envelope the reader would have written
/// (`expected`: its own identity, kind, block hash, payload size and the
/// payload digest or tag it computed). The accept path is one constant-time
/// comparison of all envelope_size bytes, without allocation; only a rejected
/// header is parsed (parse_envelope), to name the reason.
[[nodiscard]] inline Verdict verify_envelope(const std::uint8_t* header, std::size_t len, const Envelope& expected,
                                             const Identity& own) {
  namespace L = envelope_layout;
  Verdict pre = envelope_preamble(header, len);
  if (!pre.ok()) return pre;
  static_assert(envelope_size % 8 == 0 && L::payload_digest % 8 == 0 && L::secret_id % 8 == 0,
                "equal_ct compares 8-byte words");
  if (equal_ct(header, expected.data(), envelope_size)) return {Reason::ok, {}};
  // Only the digest differs (the payload was damaged or replaced): say so
  // without parsing, so this common rejection does not allocate either.
  if (expected[L::integrity_mode] != static_cast<std::uint8_t>(IntegrityMode::none) &&
      equal_ct(header, expected.data(), L::payload_digest) &&
      equal_ct(header + L::secret_id, expected.data() + L::secret_id, envelope_size - L::secret_id)) {
    return {Reason::payload_mismatch, "payload"};
  }

  ParsedEnvelope parsed = parse_envelope(header, len);
  if (!parsed.contents) return std::move(parsed.verdict);
  if (header[L::namespace_kind] != expected[L::namespace_kind]) {
    return {Reason::identity_mismatch, "envelope.namespace_kind"};
  }
  const std::string_view field = first_difference(parsed.contents->identity, own);
  if (!field.empty()) return {Reason::identity_mismatch, std::string(field)};
  if (CRYPTO_memcmp(header + L::secret_id, expected.data() + L::secret_id, SecretId::size_bytes) != 0) {
    return {Reason::identity_mismatch, "tenant.secret_id"};  // sealed under another secret of the tenant
  }
  if (std::memcmp(header + L::slice, expected.data() + L::slice, 16) != 0) {
    return {Reason::identity_mismatch, "shard"};
  }
  if (CRYPTO_memcmp(header + L::block_hash, expected.data() + L::block_hash, Digest::size_bytes) != 0) {
    return {Reason::block_mismatch, "block_hash"};
  }
  if (std::memcmp(header + L::payload_size, expected.data() + L::payload_size, 8) != 0) {
    return {Reason::size_mismatch, "payload_size"};
  }
  if (header[L::integrity_mode] != expected[L::integrity_mode]) {
    return {Reason::payload_mismatch, "envelope.integrity_mode"};
  }
  return {Reason::payload_mismatch, "payload"};  // the nonce or the digest/tag differs
}

}  // namespace detail

KVKEY_END_NAMESPACE

#endif  // KVKEY_ENVELOPE_HPP
