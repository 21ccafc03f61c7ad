// SPDX-License-Identifier: Apache-2.0
#ifndef KVKEY_ENVELOPE_HPP
#define KVKEY_ENVELOPE_HPP

#include <openssl/crypto.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
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
inline constexpr std::size_t magic = 0;           // 8 bytes
inline constexpr std::size_t version = 8;         // u16le
inline constexpr std::size_t size = 10;           // u16le, == envelope_size
inline constexpr std::size_t identity_len = 12;   // u32le
inline constexpr std::size_t block_hash = 16;     // 32 bytes
inline constexpr std::size_t payload_size = 48;   // u64le
inline constexpr std::size_t slice = 56;          // 4 x u32le
inline constexpr std::size_t identity = 72;       // identity_len bytes, then zeros
}  // namespace envelope_layout

/// Why a header was accepted or rejected. Names (to_string) are stable API.
enum class Reason : std::uint8_t {
  ok = 0,
  malformed,            ///< not a kvkey envelope, truncated, or not parseable
  unsupported_version,  ///< a kvkey envelope of another format version
  identity_mismatch,    ///< produced under another identity; field names the first difference
  block_mismatch,       ///< same identity, another block (or another tenant secret)
  size_mismatch,        ///< the payload size differs from what the reader expects
};

[[nodiscard]] constexpr std::string_view to_string(Reason r) noexcept {
  switch (r) {
    case Reason::ok: return "ok";
    case Reason::malformed: return "malformed";
    case Reason::unsupported_version: return "unsupported_version";
    case Reason::identity_mismatch: return "identity_mismatch";
    case Reason::block_mismatch: return "block_mismatch";
    case Reason::size_mismatch: return "size_mismatch";
  }
  return "invalid";
}

/// The outcome of verifying a header: a value, not an exception. Anything but
/// ok() means the object must be treated as a miss.
struct [[nodiscard]] Verdict {
  Reason reason = Reason::malformed;
  /// Where the difference is: for identity_mismatch the dotted path of the
  /// first differing field ("kv.dtype", "model.weights_epoch", "tenant",
  /// "adapter.weights_fingerprint", "shard", ...); for the other reasons the
  /// part of the envelope ("envelope.size", "envelope.magic", "block_hash",
  /// "payload_size", ...). Empty when ok.
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
};

namespace detail {

/// Writes the parts of an envelope that do not depend on the block.
inline Envelope envelope_template(const Bytes& identity_encoding, const Slice& s) {
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

}  // namespace detail

/// Parses an envelope's fields without judging them against any identity.
/// Returns nullopt (never undefined behaviour) when the bytes are not a
/// well-formed envelope of the current format version.
[[nodiscard]] inline std::optional<EnvelopeContents> decode_envelope(const std::uint8_t* header, std::size_t len) {
  namespace L = envelope_layout;
  if (header == nullptr || len != envelope_size) return std::nullopt;
  if (std::memcmp(header + L::magic, envelope_magic, sizeof envelope_magic) != 0) return std::nullopt;
  EnvelopeContents c;
  c.version = detail::load_u16(header + L::version);
  if (c.version != format_version || detail::load_u16(header + L::size) != envelope_size) return std::nullopt;
  const std::uint32_t n = detail::load_u32(header + L::identity_len);
  if (n > envelope_size - L::identity) return std::nullopt;
  auto id = decode_identity(header + L::identity, n);
  if (!id) return std::nullopt;
  for (std::size_t i = L::identity + n; i < envelope_size; ++i) {
    if (header[i] != 0) return std::nullopt;
  }
  c.identity = std::move(*id);
  c.slice = detail::load_slice(header + L::slice);
  std::memcpy(c.block_hash.data(), header + L::block_hash, Digest::size_bytes);
  c.payload_size = detail::load_u64(header + L::payload_size);
  return c;
}

namespace detail {

/// Verifies header against the envelope the reader would have written
/// (`expected`, built from its own identity, block hash and payload size).
/// The accept path is one constant-time comparison of all envelope_size bytes;
/// only a rejected header is parsed, to name the reason.
inline Verdict verify_envelope(const std::uint8_t* header, std::size_t len, const Envelope& expected,
                               const Identity& own) {
  namespace L = envelope_layout;
  if (header == nullptr || len != envelope_size) return {Reason::malformed, "envelope.size"};
  if (std::memcmp(header + L::magic, envelope_magic, sizeof envelope_magic) != 0) {
    return {Reason::malformed, "envelope.magic"};
  }
  if (load_u16(header + L::version) != format_version) {
    return {Reason::unsupported_version, "envelope.format_version"};
  }
  if (CRYPTO_memcmp(header, expected.data(), envelope_size) == 0) return {Reason::ok, {}};

  if (load_u16(header + L::size) != envelope_size) return {Reason::malformed, "envelope.size"};
  const std::uint32_t n = load_u32(header + L::identity_len);
  if (n > envelope_size - L::identity) return {Reason::malformed, "envelope.identity"};
  const auto theirs = decode_identity(header + L::identity, n);
  if (!theirs) return {Reason::malformed, "envelope.identity"};
  for (std::size_t i = L::identity + n; i < envelope_size; ++i) {
    if (header[i] != 0) return {Reason::malformed, "envelope.padding"};
  }
  const std::string_view field = first_difference(*theirs, own);
  if (!field.empty()) return {Reason::identity_mismatch, std::string(field)};
  if (std::memcmp(header + L::slice, expected.data() + L::slice, 16) != 0) {
    return {Reason::identity_mismatch, "shard"};
  }
  if (CRYPTO_memcmp(header + L::block_hash, expected.data() + L::block_hash, Digest::size_bytes) != 0) {
    return {Reason::block_mismatch, "block_hash"};
  }
  if (std::memcmp(header + L::payload_size, expected.data() + L::payload_size, 8) != 0) {
    return {Reason::size_mismatch, "payload_size"};
  }
  return {Reason::malformed, "envelope"};  // unreachable: some byte differed
}

}  // namespace detail

KVKEY_END_NAMESPACE

#endif  // KVKEY_ENVELOPE_HPP
