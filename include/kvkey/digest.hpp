// SPDX-License-Identifier: Apache-2.0
// kvkey::Digest: the 32-byte value of every root, block hash, object hash and
// fingerprint, with hex printing and parsing (from_hex throws, try_from_hex does not).
// To compute one reach for Sha256 (kvkey/sha256.hpp), fingerprint()
// (kvkey/fingerprint.hpp) or a KeyNamespace.
#ifndef KVKEY_DIGEST_HPP
#define KVKEY_DIGEST_HPP

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>

#include "kvkey/config.hpp"
#include "kvkey/errors.hpp"

KVKEY_BEGIN_NAMESPACE

namespace detail {
/// The value of one hex digit (either case), or -1 for any other character.
constexpr int hex_digit_value(char c) noexcept {
  return (c >= '0' && c <= '9')   ? c - '0'
         : (c >= 'a' && c <= 'f') ? c - 'a' + 10
         : (c >= 'A' && c <= 'F') ? c - 'A' + 10
                                  : -1;
}
}  // namespace detail

/// A 32-byte digest (SHA-256 or HMAC-SHA-256 output): block hashes, roots,
/// object hashes and fingerprints. A regular value type: copyable, comparable,
/// hashable with std::hash, printable as 64 lowercase hex characters.
class Digest {
 public:
  static constexpr std::size_t size_bytes = 32;
  using value_type = std::uint8_t;
  using storage = std::array<std::uint8_t, size_bytes>;

  /// All-zero digest.
  constexpr Digest() noexcept : bytes_{} {}
  constexpr explicit Digest(const storage& bytes) noexcept : bytes_(bytes) {}

  /// Copies exactly 32 bytes; any other length is an input_error.
  [[nodiscard]] static Digest from_bytes(const void* data, std::size_t size) {
    if (size != size_bytes) {
      throw input_error("digest must be 32 bytes, got " + std::to_string(size));
    }
    Digest d;
    std::memcpy(d.bytes_.data(), data, size_bytes);
    return d;
  }
  [[nodiscard]] static Digest from_bytes(std::string_view bytes) { return from_bytes(bytes.data(), bytes.size()); }

  /// Parses 64 hex characters (either case). Returns nullopt on any other input.
  [[nodiscard]] static std::optional<Digest> try_from_hex(std::string_view hex) noexcept {
    if (hex.size() != 2 * size_bytes) return std::nullopt;
    Digest d;
    for (std::size_t i = 0; i < size_bytes; ++i) {
      const int hi = detail::hex_digit_value(hex[2 * i]);
      const int lo = detail::hex_digit_value(hex[2 * i + 1]);
      if (hi < 0 || lo < 0) return std::nullopt;
      d.bytes_[i] = static_cast<std::uint8_t>((hi << 4) | lo);
    }
    return d;
  }

  /// Parses 64 hex characters (either case); anything else is an input_error
  /// that says what is wrong (length or the first bad character's position).
  [[nodiscard]] static Digest from_hex(std::string_view hex) {
    if (hex.size() != 2 * size_bytes) {
      throw input_error("hex digest must be 64 hex characters, got " + std::to_string(hex.size()) + " characters");
    }
    for (std::size_t i = 0; i < hex.size(); ++i) {
      if (detail::hex_digit_value(hex[i]) < 0) {
        throw input_error("hex digest has a non-hex character at position " + std::to_string(i));
      }
    }
    return *try_from_hex(hex);
  }

  /// 64 lowercase hex characters.
  [[nodiscard]] std::string hex() const {
    std::string out(2 * size_bytes, '\0');
    write_hex(out.data());
    return out;
  }
  /// Writes 64 lowercase hex characters to out (no terminator).
  void write_hex(char* out) const noexcept {
    static constexpr char digits[] = "0123456789abcdef";
    for (std::size_t i = 0; i < size_bytes; ++i) {
      out[2 * i] = digits[bytes_[i] >> 4];
      out[2 * i + 1] = digits[bytes_[i] & 0x0f];
    }
  }

  const std::uint8_t* data() const noexcept { return bytes_.data(); }
  std::uint8_t* data() noexcept { return bytes_.data(); }
  static constexpr std::size_t size() noexcept { return size_bytes; }
  const storage& bytes() const noexcept { return bytes_; }
  auto begin() const noexcept { return bytes_.begin(); }
  auto end() const noexcept { return bytes_.end(); }
  std::uint8_t operator[](std::size_t i) const noexcept { return bytes_[i]; }
  std::uint8_t& operator[](std::size_t i) noexcept { return bytes_[i]; }

  friend bool operator==(const Digest& a, const Digest& b) noexcept { return a.bytes_ == b.bytes_; }
  friend bool operator!=(const Digest& a, const Digest& b) noexcept { return !(a == b); }
  friend bool operator<(const Digest& a, const Digest& b) noexcept { return a.bytes_ < b.bytes_; }

 private:
  storage bytes_;
};

/// The 64-bit projection of a digest for indexes keyed on u64 (docs/format.md,
/// section 11): its first 8 bytes read big-endian, so the value's 16 hex digits
/// are the first 16 hex digits of the digest. Routers and cache indexers take it
/// of block hashes; it is a lossy index key, never a store key.
[[nodiscard]] inline std::uint64_t u64_projection(const Digest& d) noexcept {
  std::uint64_t v = 0;
  for (std::size_t i = 0; i < 8; ++i) v = (v << 8) | std::uint64_t{d[i]};
  return v;
}

KVKEY_END_NAMESPACE

template <>
struct std::hash<kvkey::Digest> {
  std::size_t operator()(const kvkey::Digest& d) const noexcept {
    // The bytes are already uniformly distributed; the first word suffices.
    std::size_t h;
    std::memcpy(&h, d.data(), sizeof h);
    return h;
  }
};

#endif  // KVKEY_DIGEST_HPP
