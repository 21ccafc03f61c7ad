// SPDX-License-Identifier: Apache-2.0
// Internal: the block-hash chain of one namespace (docs/format.md, "Chain"):
// token packing, the block messages, the salted first parent, one chain or two
// in lockstep. KeyNamespace (kvkey/key_namespace.hpp) owns a Chain and is the
// API; BatchHasher (kvkey/batch.hpp) reaches it through detail::ChainAccess.
// Not part of the API.
#ifndef KVKEY_DETAIL_CHAIN_HPP
#define KVKEY_DETAIL_CHAIN_HPP

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "kvkey/config.hpp"
#include "kvkey/detail/endian.hpp"
#include "kvkey/detail/sha256_native.hpp"
#include "kvkey/digest.hpp"
#include "kvkey/encode.hpp"
#include "kvkey/errors.hpp"
#include "kvkey/hash_options.hpp"
#include "kvkey/sha256.hpp"

KVKEY_BEGIN_NAMESPACE

namespace detail {

// Message domains: the first byte of every message the namespace hashes, other
// than the identity encoding (which opens with 'k'). docs/format.md.
inline constexpr std::uint8_t domain_salt = 'S';
inline constexpr std::uint8_t domain_block = 'B';
inline constexpr std::uint8_t domain_object = 'O';
inline constexpr std::uint8_t domain_payload = 'P';       // keyed namespaces' payload key
inline constexpr std::uint8_t domain_secret_id = 'I';     // keyed namespaces' public secret id
inline constexpr std::uint8_t domain_scope = 'T';         // the transition out of a shared scope (format v4)
inline constexpr std::uint8_t domain_confidential = 'C';  // HKDF info of a confidential payload key
/// HKDF's salt for a confidential namespace's payload keys (docs/format.md,
/// "Mode aes256_gcm"); no other derivation uses HKDF.
inline constexpr std::string_view confidential_salt = "kvkey v4 confidential";
/// Reads a keyed hasher's confidential key source (defined in kvkey/payload.hpp).
struct ConfidentialAccess;

// A Hash whose result() returns it to its initial state can be reused for many
// messages; any other Hash (e.g. Boost.Hash2's) is copied afresh per message.
template <class Hash, class = void>
struct resets_after_result : std::false_type {};
template <class Hash>
struct resets_after_result<Hash, std::void_t<decltype(Hash::resets_after_result)>>
    : std::bool_constant<Hash::resets_after_result> {};

// A hasher with hash_padded(buf, size) (Sha256Native, HmacSha256) hashes a
// whole block message padded in place, from one stack buffer.
template <class H, class = void>
struct pads_in_place : std::false_type {};
template <class H>
struct pads_in_place<
    H, std::void_t<decltype(std::declval<const H&>().hash_padded(std::declval<std::uint8_t*>(), std::size_t{}))>>
    : std::true_type {};

template <class Hash>
Digest to_digest(Hash& h) {
  const auto r = h.result();
  static_assert(sizeof r == Digest::size_bytes || std::is_same_v<std::decay_t<decltype(r)>, Digest>,
                "KeyNamespace needs a hash with a 32-byte result");
  if constexpr (std::is_same_v<std::decay_t<decltype(r)>, Digest>) {
    return r;
  } else {
    return Digest::from_bytes(r.data(), r.size());
  }
}

inline void put_token(std::uint8_t* p, std::int32_t t, std::size_t index) {
  if (t < 0) throw input_error("token " + std::to_string(index) + " is " + std::to_string(t) + ", outside [0, 2^32)");
  store_u32(p, static_cast<std::uint32_t>(t));
}
inline void put_token(std::uint8_t* p, std::int64_t t, std::size_t index) {
  if (t < 0 || t > static_cast<std::int64_t>(std::numeric_limits<std::uint32_t>::max())) {
    throw input_error("token " + std::to_string(index) + " is " + std::to_string(t) + ", outside [0, 2^32)");
  }
  store_u32(p, static_cast<std::uint32_t>(t));
}
inline void put_token(std::uint8_t* p, std::uint32_t t, std::size_t) noexcept { store_u32(p, t); }

/// True when every id of t[0, n) lies in [0, 2^32): one branch-free pass.
template <class T>
bool tokens_in_range(const T* t, std::size_t n) noexcept {
  if constexpr (std::is_same_v<T, std::uint32_t>) {
    (void)t;
    (void)n;
    return true;
  } else {
    std::uint64_t out_of_range = 0;
    for (std::size_t i = 0; i < n; ++i) {
      if constexpr (std::is_same_v<T, std::int32_t>) {
        out_of_range |= static_cast<std::uint32_t>(t[i]) >> 31;
      } else {
        out_of_range |= static_cast<std::uint64_t>(t[i]) >> 32;
      }
    }
    return out_of_range == 0;
  }
}

/// Throws put_token's error for the first id of t[0, n) outside [0, 2^32)
/// (first_index is the index of t[0]).
template <class T>
void check_tokens(const T* t, std::size_t n, std::size_t first_index) {
  if (tokens_in_range(t, n)) return;
  std::uint8_t scratch[4];
  for (std::size_t i = 0; i < n; ++i) put_token(scratch, t[i], first_index + i);  // throws
}

/// Writes n token ids as u32le, or throws check_tokens' error. The range check
/// goes first, so both loops vectorize.
template <class T>
void put_tokens(std::uint8_t* p, const T* t, std::size_t n, std::size_t first_index) {
  check_tokens(t, n, first_index);
  store_u32_array(p, t, n);
}

/// The chain of one namespace: its root (the hash of the identity encoding),
/// the hasher and the block size. Every const member is safe to call from many
/// threads at once.
template <class Hash>
class Chain {
 public:
  /// native: hash with Sha256Native where Hash is Sha256 and the CPU has the
  /// SHA extensions (same digests, no allocation). A hasher the caller passed
  /// in may carry state, so it always hashes itself.
  Chain(Hash hasher, const Bytes& identity_encoding, std::uint32_t block_size, bool native)
      : hasher_(std::move(hasher)), block_size_(block_size) {
    if constexpr (std::is_same_v<Hash, Sha256>) native_ = native && sha256_native_available();
    root_ = hash_message(identity_encoding.data(), identity_encoding.size());
  }

  const Digest& root() const noexcept { return root_; }
  std::uint32_t block_size() const noexcept { return block_size_; }
  /// The hasher every message starts from (copied per message).
  const Hash& hasher() const noexcept { return hasher_; }
  /// True when it hashes with Sha256Native.
  bool native() const noexcept { return native_; }

  /// H(data[0, n)).
  Digest hash_message(const void* data, std::size_t n) const {
    if constexpr (std::is_same_v<Hash, Sha256>) {
      if (native_) return Sha256Native::hash(data, n);
    }
    Hash h = hasher_;
    h.update(data, n);
    return to_digest(h);
  }

  /// The parent of block 0: root() without salt, H('S', root, salt) with one.
  Digest first_parent(std::string_view salt) const {
    if (salt.empty()) return root_;
    Bytes m;
    m.reserve(1 + Digest::size_bytes + 4 + salt.size());
    put_u8(m, domain_salt);
    put_bytes(m, root_.data(), root_.size());
    put_str(m, salt);
    return hash_message(m.data(), m.size());
  }

  /// KeyNamespace::extend_block_hashes.
  template <class T>
  void extend(std::vector<Digest>& hashes, const T* tokens, std::size_t count, const HashOptions& opt) const {
    static_assert(
        std::is_same_v<T, std::int32_t> || std::is_same_v<T, std::int64_t> || std::is_same_v<T, std::uint32_t>,
        "token ids must be int32_t, int64_t or uint32_t");
    const std::size_t bs = block_size_;
    const std::size_t full = count / bs;
    if (hashes.size() > full) {
      throw input_error("extend_block_hashes: " + std::to_string(hashes.size()) + " previous hashes but only " +
                        std::to_string(full) + " full blocks in " + std::to_string(count) + " tokens");
    }
    // The partial tail is not hashed, but its ids must be valid too: bad input
    // is reported on the call that receives it, not on a later one.
    check_tokens(tokens + full * bs, count - full * bs, full * bs);
    const auto extras = sorted_extras(opt.extras);
    if (hashes.size() == full) return;
    // Geometric growth: a sequence extended block by block must not copy its
    // hashes on every call.
    if (full > hashes.capacity()) hashes.reserve(std::max(full, 2 * hashes.capacity()));
    if constexpr (std::is_same_v<Hash, Sha256>) {
      if (native_) {
        Sha256Native h;
        return extend_chain(h, hashes, tokens, full, opt.salt, extras);
      }
    }
    Hash h = hasher_;
    extend_chain(h, hashes, tokens, full, opt.salt, extras);
  }

  /// Two requests' chains from scratch, in lockstep on one thread: the batch's
  /// fast path (two SHA streams per core). Returns false, having done nothing,
  /// unless both can take it: plain SHA-256 on the SHA extensions, blocks of at
  /// most buffered_tokens, no extras, empty outputs and only valid token ids (so
  /// any error comes from the ordinary path, for its own request).
  template <class T>
  bool block_hashes_pair(std::vector<Digest>& out1, const T* tokens1, std::size_t count1, const HashOptions& opt1,
                         std::vector<Digest>& out2, const T* tokens2, std::size_t count2,
                         const HashOptions& opt2) const {
    if constexpr (!std::is_same_v<Hash, Sha256>) {
      return false;
    } else {
      const std::size_t bs = block_size_;
      if (!native_ || bs > buffered_tokens || !opt1.extras.empty() || !opt2.extras.empty() || !out1.empty() ||
          !out2.empty()) {
        return false;
      }
      const std::size_t full1 = count1 / bs;
      const std::size_t full2 = count2 / bs;
      if (!tokens_in_range(tokens1, count1) || !tokens_in_range(tokens2, count2)) {
        return false;
      }
      out1.reserve(full1);
      out2.reserve(full2);
      alignas(16) std::uint8_t m1[message_capacity];
      alignas(16) std::uint8_t m2[message_capacity];
      Digest p1 = first_parent(opt1.salt);
      Digest p2 = first_parent(opt2.salt);
      const std::size_t both = std::min(full1, full2);
      for (std::size_t b = 0; b < both; ++b) {
        const std::size_t len = block_message(m1, p1, tokens1 + b * bs, b * bs);
        block_message(m2, p2, tokens2 + b * bs, b * bs);
        Sha256Native::hash_padded2(m1, m2, len, p1, p2);
        out1.push_back(p1);
        out2.push_back(p2);
      }
      // The longer chain goes on alone.
      if (full1 > both) extend(out1, tokens1, count1, opt1);
      if (full2 > both) extend(out2, tokens2, count2, opt2);
      return true;
    }
  }

 private:
  using ExtraRef = const ExtraKey*;

  // Blocks up to this many tokens are hashed from one stack buffer.
  static constexpr std::size_t buffered_tokens = 256;
  static constexpr std::size_t message_head = 1 + Digest::size_bytes;  // 'B', parent
  // A block message without extras, padded (Sha256Native::hash_padded).
  static constexpr std::size_t message_capacity = Sha256Native::padded_size(message_head + 4 * buffered_tokens + 4);

  // The message of a block no extra overlaps: 'B', parent, the tokens as
  // u32le, u32le 0. Returns its length; msg holds message_capacity bytes.
  template <class T>
  std::size_t block_message(std::uint8_t* msg, const Digest& parent, const T* tokens, std::size_t first_token) const {
    const std::size_t bs = block_size_;
    msg[0] = domain_block;
    std::memcpy(msg + 1, parent.data(), Digest::size_bytes);
    put_tokens(msg + message_head, tokens, bs, first_token);
    store_u32(msg + message_head + 4 * bs, 0);
    return message_head + 4 * bs + 4;
  }

  static std::vector<ExtraRef> sorted_extras(const std::vector<ExtraKey>& extras) {
    std::vector<ExtraRef> out;
    out.reserve(extras.size());
    for (std::size_t i = 0; i < extras.size(); ++i) {
      const ExtraKey& e = extras[i];
      if (e.token_begin >= e.token_end) {
        throw input_error("extra key " + std::to_string(i) + ": token_begin must be below token_end");
      }
      if (e.key.size() > std::numeric_limits<std::uint32_t>::max()) {
        throw input_error("extra key " + std::to_string(i) + " is too long");
      }
      out.push_back(&e);
    }
    std::sort(out.begin(), out.end(), [](ExtraRef a, ExtraRef b) {
      return std::tie(a->token_begin, a->token_end, a->key) < std::tie(b->token_begin, b->token_end, b->key);
    });
    return out;
  }

  // Appends the hashes of blocks hashes.size() .. full-1. H is Hash (a copy of
  // hasher_, e.g. HmacSha256) or, for plain SHA-256, Sha256Native.
  template <class H, class T>
  void extend_chain(H& h, std::vector<Digest>& hashes, const T* tokens, std::size_t full, std::string_view salt,
                    const std::vector<ExtraRef>& extras) const {
    const std::size_t bs = block_size_;
    Digest parent = hashes.empty() ? first_parent(salt) : hashes.back();
    for (std::size_t b = hashes.size(); b < full; ++b) {
      if constexpr (!resets_after_result<H>::value) h = hasher_;
      parent = hash_block(h, parent, tokens + b * bs, b * bs, extras);
      hashes.push_back(parent);
    }
  }

  // H('B', parent, tokens as u32le, u32le count of overlapping extras, extras).
  template <class H, class T>
  Digest hash_block(H& h, const Digest& parent, const T* tokens, std::size_t first_token,
                    const std::vector<ExtraRef>& extras) const {
    constexpr std::size_t chunk_tokens = buffered_tokens;
    const std::size_t bs = block_size_;
    // Trailer: the extras that overlap [first_token, first_token + bs).
    const std::uint64_t lo = first_token;
    const std::uint64_t hi = first_token + bs;
    std::uint32_t count = 0;
    for (ExtraRef e : extras) count += (e->token_begin < hi && e->token_end > lo) ? 1 : 0;
    if constexpr (pads_in_place<H>::value) {
      // The whole message in one buffer, padded in place: one compression call.
      static_assert(H::padded_size(message_head + 4 * buffered_tokens + 4) <= message_capacity);
      if (count == 0 && bs <= chunk_tokens) {
        alignas(16) std::uint8_t msg[message_capacity];
        return h.hash_padded(msg, block_message(msg, parent, tokens, first_token));
      }
    }
    std::uint8_t buf[message_head + 4 * chunk_tokens + 4];  // + trailer count
    buf[0] = domain_block;
    std::memcpy(buf + 1, parent.data(), Digest::size_bytes);
    std::size_t used = message_head;
    for (std::size_t i = 0; i < bs;) {
      const std::size_t n = std::min(chunk_tokens, bs - i);
      put_tokens(buf + used, tokens + i, n, first_token + i);
      used += 4 * n;
      i += n;
      if (i < bs) {
        h.update(buf, used);
        used = 0;
      }
    }
    store_u32(buf + used, count);
    h.update(buf, used + 4);
    if (count != 0) {
      for (ExtraRef e : extras) {  // u64le begin, u64le end, u32le length, key
        if (!(e->token_begin < hi && e->token_end > lo)) continue;
        std::uint8_t frame[20];
        store_u64(frame, e->token_begin);
        store_u64(frame + 8, e->token_end);
        store_u32(frame + 16, static_cast<std::uint32_t>(e->key.size()));
        h.update(frame, sizeof frame);
        h.update(e->key.data(), e->key.size());
      }
    }
    return to_digest(h);
  }

  Hash hasher_;
  std::uint32_t block_size_;
  Digest root_;
  bool native_ = false;  // hash with Sha256Native (see the constructor)
};

}  // namespace detail

KVKEY_END_NAMESPACE

#endif  // KVKEY_DETAIL_CHAIN_HPP
