// SPDX-License-Identifier: Apache-2.0
#ifndef KVKEY_KEY_NAMESPACE_HPP
#define KVKEY_KEY_NAMESPACE_HPP

#include <algorithm>
#include <cstring>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "kvkey/config.hpp"
#include "kvkey/digest.hpp"
#include "kvkey/encode.hpp"
#include "kvkey/envelope.hpp"
#include "kvkey/errors.hpp"
#include "kvkey/identity.hpp"
#include "kvkey/payload.hpp"
#include "kvkey/prefix.hpp"
#include "kvkey/sha256.hpp"

KVKEY_BEGIN_NAMESPACE

/// A key that enters only the blocks overlapping tokens [token_begin, token_end)
/// of the sequence, e.g. the content hash of an image whose placeholder tokens
/// sit there. Positions are absolute token indices.
struct ExtraKey {
  std::uint64_t token_begin = 0;
  std::uint64_t token_end = 0;
  std::string key;
};

/// Per-request inputs of the chain besides the tokens.
struct HashOptions {
  /// Per-request salt (like vLLM's cache_salt): when non-empty it changes every
  /// block hash of the request. Empty means no salt.
  std::string salt;
  /// Per-block extra keys (multimodal content hashes and the like).
  std::vector<ExtraKey> extras;
};

/// The first bytes of every store key: the key format's tag.
inline constexpr std::string_view store_key_tag = "kvk1/";

/// Longest store key kvkey produces.
inline constexpr std::size_t max_store_key_size = 256;

/// "kvk1/<tenant>/": every key of one tenant starts with it (list or purge a
/// tenant by prefix). Throws identity_error if the tenant is not valid.
inline std::string tenant_key_prefix(std::string_view tenant) {
  if (tenant != single_tenant_name) detail::check_tenant(tenant);
  std::string p(store_key_tag);
  p.append(tenant).push_back('/');
  return p;
}

namespace detail {

// Message domains: the first byte of every message the namespace hashes, other
// than the identity encoding (which opens with 'k'). docs/format.md.
inline constexpr std::uint8_t domain_salt = 'S';
inline constexpr std::uint8_t domain_block = 'B';
inline constexpr std::uint8_t domain_object = 'O';
inline constexpr std::uint8_t domain_payload = 'P';  // keyed namespaces' payload key

// A hasher with `static constexpr bool keyed = true` (HmacSha256) makes a keyed namespace.
template <class Hash, class = void>
struct is_keyed_hash : std::false_type {};
template <class Hash>
struct is_keyed_hash<Hash, std::void_t<decltype(Hash::keyed)>> : std::bool_constant<Hash::keyed> {};

/// The readable model segment of a store key: bytes outside [A-Za-z0-9._-] are
/// percent-encoded (so '/', '@' and spaces cannot create ambiguity), cut to at
/// most 96 characters without splitting an escape. Readability only: the object
/// hash in the key carries the full identity.
inline std::string model_key_segment(std::string_view name) {
  static constexpr char hex[] = "0123456789ABCDEF";
  static constexpr std::size_t max_len = 96;
  std::string out;
  for (char ch : name) {
    const auto c = static_cast<unsigned char>(ch);
    const bool plain = is_alnum(ch) || ch == '.' || ch == '_' || ch == '-';
    const std::size_t need = plain ? 1 : 3;
    if (out.size() + need > max_len) break;
    if (plain) {
      out.push_back(ch);
    } else {
      out.push_back('%');
      out.push_back(hex[c >> 4]);
      out.push_back(hex[c & 0x0f]);
    }
  }
  return out;
}

// A Hash whose result() returns it to its initial state can be reused for many
// messages; any other Hash (e.g. Boost.Hash2's) is copied afresh per message.
template <class Hash, class = void>
struct resets_after_result : std::false_type {};
template <class Hash>
struct resets_after_result<Hash, std::void_t<decltype(Hash::resets_after_result)>>
    : std::bool_constant<Hash::resets_after_result> {};

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
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
  for (std::size_t i = 0; i < n; ++i) {
    const auto v = static_cast<std::uint32_t>(t[i]);
    std::memcpy(p + 4 * i, &v, 4);
  }
#else
  for (std::size_t i = 0; i < n; ++i) store_u32(p + 4 * i, static_cast<std::uint32_t>(t[i]));
#endif
}

}  // namespace detail

class BatchHasher;

/// Keys, block hashes and envelopes of one deployment's rank.
///
/// Build one per (identity, rank) and share it: every const member is safe to
/// call from many threads at once. Hash is any hasher with the Boost.Hash2
/// shape, update(const void*, size_t) and result(), returning 32 bytes;
/// copies must be independent. kvkey::Sha256 is the default.
template <class Hash = Sha256>
class KeyNamespace {
 public:
  using hash_type = Hash;

  /// Validates id (throws identity_error naming the field) and precomputes the
  /// root, the rank's slice, the key prefix and the envelope template.
  explicit KeyNamespace(const Identity& id, const Policy& policy = {}) : KeyNamespace(id, Hash(), policy) {
    // A default Sha256 is plain SHA-256: the hot paths may use the CPU's SHA
    // instructions for it (same digests, no allocation). A hasher passed in
    // may carry state, so it always hashes itself.
    if constexpr (std::is_same_v<Hash, Sha256>) native_ = detail::sha256_native_available();
  }

  /// As above with a configured hasher (e.g. a keyed one); the namespace keeps a copy.
  KeyNamespace(const Identity& id, Hash hasher, const Policy& policy = {})
      : id_(validated(id, policy)),
        policy_(policy),
        slice_(resolve_slice(id_.kv, id_.shard)),
        encoding_(encode_identity(id_)),
        hasher_(std::move(hasher)) {
    root_ = hash_message(encoding_.data(), encoding_.size());
    key_prefix_ = tenant_key_prefix(id_.tenant);
    key_prefix_.append(detail::model_key_segment(id_.model.name));
    key_prefix_.append("/e").append(std::to_string(id_.model.weights_epoch)).push_back('/');
    envelope_ = detail::envelope_template(encoding_, slice_, namespace_kind);
    if constexpr (namespace_kind == NamespaceKind::keyed) {
      std::uint8_t m[1 + Digest::size_bytes] = {detail::domain_payload};
      std::memcpy(m + 1, root_.data(), Digest::size_bytes);
      const Digest k = hash_message(m, sizeof m);
      std::memcpy(payload_key_.bytes.data(), k.data(), k.size());
    }
  }

  /// The validated identity as encoded (single-tenant policy applied).
  const Identity& identity() const noexcept { return id_; }
  const Policy& policy() const noexcept { return policy_; }
  /// The KV-head and layer range this rank holds.
  const Slice& slice() const noexcept { return slice_; }
  /// The canonical identity encoding (docs/format.md), without the shard.
  const Bytes& encoding() const noexcept { return encoding_; }
  /// H(encoding): the parent of block 0 for unsalted requests.
  const Digest& root() const noexcept { return root_; }
  std::uint32_t block_size() const noexcept { return id_.kv.block_size; }

  // ---- the chain ------------------------------------------------------------

  /// Hashes of every full block of tokens (a partial tail is not hashed).
  /// Every token id, the partial tail's included, must lie in [0, 2^32); others throw input_error naming the index.
  std::vector<Digest> block_hashes(const std::vector<std::int32_t>& tokens, const HashOptions& opt = {}) const {
    return block_hashes(tokens.data(), tokens.size(), opt);
  }
  std::vector<Digest> block_hashes(const std::vector<std::int64_t>& tokens, const HashOptions& opt = {}) const {
    return block_hashes(tokens.data(), tokens.size(), opt);
  }
  std::vector<Digest> block_hashes(const std::vector<std::uint32_t>& tokens, const HashOptions& opt = {}) const {
    return block_hashes(tokens.data(), tokens.size(), opt);
  }
  template <class T>
  std::vector<Digest> block_hashes(const T* tokens, std::size_t count, const HashOptions& opt = {}) const {
    std::vector<Digest> out;
    extend_block_hashes(out, tokens, count, opt);
    return out;
  }

  /// Incremental form: `hashes` holds the hashes of the first hashes.size()
  /// blocks of this same sequence (from an earlier call); appends the hashes of
  /// the remaining full blocks of `tokens` (the whole sequence so far). The
  /// result equals block_hashes(tokens, opt). Throws input_error if hashes has
  /// more entries than tokens has full blocks.
  template <class T>
  void extend_block_hashes(std::vector<Digest>& hashes, const T* tokens, std::size_t count,
                           const HashOptions& opt = {}) const {
    static_assert(std::is_same_v<T, std::int32_t> || std::is_same_v<T, std::int64_t> ||
                      std::is_same_v<T, std::uint32_t>,
                  "token ids must be int32_t, int64_t or uint32_t");
    const std::size_t bs = block_size();
    const std::size_t full = count / bs;
    if (hashes.size() > full) {
      throw input_error("extend_block_hashes: " + std::to_string(hashes.size()) + " previous hashes but only " +
                        std::to_string(full) + " full blocks in " + std::to_string(count) + " tokens");
    }
    // The partial tail is not hashed, but its ids must be valid too: bad input
    // is reported on the call that receives it, not on a later one.
    detail::check_tokens(tokens + full * bs, count - full * bs, full * bs);
    const auto extras = sorted_extras(opt.extras);
    if (hashes.size() == full) return;
    // Geometric growth: a sequence extended block by block must not copy its
    // hashes on every call.
    if (full > hashes.capacity()) hashes.reserve(std::max(full, 2 * hashes.capacity()));
    if constexpr (std::is_same_v<Hash, Sha256>) {
      if (native_) {
        detail::Sha256Native h;
        return extend_chain(h, hashes, tokens, full, opt.salt, extras);
      }
    }
    Hash h = hasher_;
    extend_chain(h, hashes, tokens, full, opt.salt, extras);
  }
  template <class T>
  void extend_block_hashes(std::vector<Digest>& hashes, const std::vector<T>& tokens,
                           const HashOptions& opt = {}) const {
    extend_block_hashes(hashes, tokens.data(), tokens.size(), opt);
  }

  /// The parent of block 0: root() without salt, H('S', root, salt) with one.
  Digest first_parent(std::string_view salt) const {
    if (salt.empty()) return root_;
    Bytes m;
    m.reserve(1 + Digest::size_bytes + 4 + salt.size());
    detail::put_u8(m, detail::domain_salt);
    detail::put_bytes(m, root_.data(), root_.size());
    detail::put_str(m, salt);
    return hash_message(m.data(), m.size());
  }

  // ---- store keys -------------------------------------------------------------

  /// H('O', block_hash, slice): the content address of this rank's object for
  /// the block. Ranks holding the same slice get the same object hash.
  Digest object_hash(const Digest& block_hash) const {
    std::uint8_t m[1 + Digest::size_bytes + 16];
    m[0] = detail::domain_object;
    std::memcpy(m + 1, block_hash.data(), Digest::size_bytes);
    detail::store_u32(m + 33, slice_.kv_head_begin);
    detail::store_u32(m + 37, slice_.kv_head_end);
    detail::store_u32(m + 41, slice_.layer_begin);
    detail::store_u32(m + 45, slice_.layer_end);
    return hash_message(m, sizeof m);
  }

  /// "kvk1/<tenant>/<model>/e<epoch>/<64 hex of object_hash>": printable ASCII,
  /// at most max_store_key_size bytes.
  std::string store_key(const Digest& block_hash) const {
    std::string key;
    key.reserve(key_prefix_.size() + 2 * Digest::size_bytes);
    key.append(key_prefix_);
    key.resize(key_prefix_.size() + 2 * Digest::size_bytes);
    object_hash(block_hash).write_hex(key.data() + key_prefix_.size());
    return key;
  }

  /// "kvk1/<tenant>/<model>/e<epoch>/": the prefix of every key of this
  /// namespace's epoch (all ranks, all adapters and formats of that model name).
  const std::string& key_prefix() const noexcept { return key_prefix_; }
  /// "kvk1/<tenant>/": the prefix of every key of this tenant.
  std::string tenant_prefix() const { return tenant_key_prefix(id_.tenant); }

  // ---- envelopes ----------------------------------------------------------------

  /// Size-only header (IntegrityMode::none) for callers that cannot see the
  /// bytes. Only under PayloadCheck::size_only; otherwise throws input_error.
  Envelope seal(const Digest& block_hash, std::uint64_t payload_size) const {
    if (policy_.payload == PayloadCheck::required) {
      throw input_error("seal(block_hash, payload_size) writes no payload digest, and this namespace's Policy "
                        "requires one: pass the bytes as a kvkey::Payload, or opt out with "
                        "Policy::payload = PayloadCheck::size_only");
    }
    return header_for(block_hash, payload_size);
  }

  /// Size-only check of a header read from the store against what this
  /// namespace would have sealed for block_hash and payload_size. A digest in
  /// the header is not checked (the bytes are not here): so under
  /// PayloadCheck::required the result is never ok (payload_mismatch). Never
  /// throws, never reads outside [header, header + header_len).
  Verdict verify(const std::uint8_t* header, std::size_t header_len, const Digest& block_hash,
                 std::uint64_t payload_size) const {
    namespace L = envelope_layout;
    Envelope expected = header_for(block_hash, payload_size);
    const bool sized = header != nullptr && header_len == envelope_size;
    const std::uint8_t mode = sized ? header[L::integrity_mode] : 0;
    if (sized && detail::integrity_allowed(namespace_kind, mode)) {  // take the header's digest as it is
      expected[L::integrity_mode] = mode;
      if (mode == static_cast<std::uint8_t>(IntegrityMode::poly1305)) std::memcpy(&expected[L::nonce], header + L::nonce, 16);
      if (mode != 0) std::memcpy(&expected[L::payload_digest], header + L::payload_digest, 16);
    }
    Verdict v = detail::verify_envelope(header, header_len, expected, id_);
    if (v.ok() && policy_.payload == PayloadCheck::required) {
      return {Reason::payload_mismatch, mode == 0 ? "envelope.integrity_mode" : "payload"};
    }
    return v;
  }
  Verdict verify(const Envelope& header, const Digest& block_hash, std::uint64_t payload_size) const {
    return verify(header.data(), header.size(), block_hash, payload_size);
  }

  // ---- payload integrity --------------------------------------------------------

  /// plain, or keyed when Hash declares `keyed` (HmacSha256).
  static constexpr NamespaceKind namespace_kind =
      detail::is_keyed_hash<Hash>::value ? NamespaceKind::keyed : NamespaceKind::plain;
  /// What seal(block_hash, Payload) stores: xxh3_128 (plain) or poly1305 (keyed).
  IntegrityMode integrity_mode() const noexcept { return scheme().mode; }

  /// The header to store with this rank's object for block_hash, whose KV bytes
  /// are payload: it records their size and digest (keyed: a Poly1305 tag under
  /// a fresh random nonce). No heap allocation.
  Envelope seal(const Digest& block_hash, Payload payload) const {
    PayloadSealer s(header_for(block_hash, 0), scheme(), false);
    for (const ConstBuffer& b : payload) s.update(b.data, b.size);
    return s.finish();
  }

  /// Checks a header and the payload read with it. Fail closed: anything but
  /// ok() is a miss; bytes that do not match the header's digest or tag are
  /// payload_mismatch ("payload"). No heap allocation when it accepts.
  Verdict verify(const std::uint8_t* header, std::size_t header_len, const Digest& block_hash,
                 Payload payload) const {
    PayloadVerifier v(header, header_len, header_for(block_hash, 0), id_, scheme(), false);
    for (const ConstBuffer& b : payload) v.update(b.data, b.size);
    return v.finish();
  }
  Verdict verify(const Envelope& header, const Digest& block_hash, Payload payload) const {
    return verify(header.data(), header.size(), block_hash, payload);
  }

  /// Streaming forms for bytes that arrive in pieces (update, then finish).
  PayloadSealer sealer(const Digest& block_hash) const {
    return PayloadSealer(header_for(block_hash, 0), scheme(), true);
  }
  PayloadVerifier verifier(const std::uint8_t* header, std::size_t header_len, const Digest& block_hash) const {
    return PayloadVerifier(header, header_len, header_for(block_hash, 0), id_, scheme(), true);
  }

  // ---- accounting -----------------------------------------------------------------

  /// reusable_prefix() with this namespace's block size.
  template <class Results>
  ReusablePrefix reusable_prefix(const Results& block_major_results, std::size_t shards_per_block,
                                 std::size_t max_tokens = std::numeric_limits<std::size_t>::max()) const {
    return kvkey::reusable_prefix(block_major_results, shards_per_block, block_size(), max_tokens);
  }

 private:
  friend class BatchHasher;
  using ExtraRef = const ExtraKey*;

  // Blocks up to this many tokens are hashed from one stack buffer.
  static constexpr std::size_t buffered_tokens = 256;
  static constexpr std::size_t message_head = 1 + Digest::size_bytes;  // 'B', parent
  // A block message without extras, padded (detail::Sha256Native::hash_padded).
  static constexpr std::size_t message_capacity =
      detail::Sha256Native::padded_size(message_head + 4 * buffered_tokens + 4);

  // The message of a block no extra overlaps: 'B', parent, the tokens as
  // u32le, u32le 0. Returns its length; msg holds message_capacity bytes.
  template <class T>
  std::size_t block_message(std::uint8_t* msg, const Digest& parent, const T* tokens,
                            std::size_t first_token) const {
    const std::size_t bs = block_size();
    msg[0] = detail::domain_block;
    std::memcpy(msg + 1, parent.data(), Digest::size_bytes);
    detail::put_tokens(msg + message_head, tokens, bs, first_token);
    detail::store_u32(msg + message_head + 4 * bs, 0);
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

  Digest hash_message(const void* data, std::size_t n) const {
    if constexpr (std::is_same_v<Hash, Sha256>) {
      if (native_) return detail::Sha256Native::hash(data, n);
    }
    Hash h = hasher_;
    h.update(data, n);
    return detail::to_digest(h);
  }

  // Two requests' chains from scratch, in lockstep on one thread: the batch's
  // fast path (two SHA streams per core). Returns false, having done nothing,
  // unless both can take it: plain SHA-256 on the SHA extensions, blocks of at
  // most buffered_tokens, no extras, empty outputs and only valid token ids (so
  // any error comes from the ordinary path, for its own request).
  template <class T>
  bool block_hashes_pair(std::vector<Digest>& out1, const T* tokens1, std::size_t count1, const HashOptions& opt1,
                         std::vector<Digest>& out2, const T* tokens2, std::size_t count2,
                         const HashOptions& opt2) const {
    if constexpr (!std::is_same_v<Hash, Sha256>) {
      return false;
    } else {
      const std::size_t bs = block_size();
      if (!native_ || bs > buffered_tokens || !opt1.extras.empty() || !opt2.extras.empty() || !out1.empty() ||
          !out2.empty()) {
        return false;
      }
      const std::size_t full1 = count1 / bs;
      const std::size_t full2 = count2 / bs;
      if (!detail::tokens_in_range(tokens1, count1) || !detail::tokens_in_range(tokens2, count2)) {
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
        detail::Sha256Native::hash_padded2(m1, m2, len, p1, p2);
        out1.push_back(p1);
        out2.push_back(p2);
      }
      // The longer chain goes on alone.
      if (full1 > both) extend_block_hashes(out1, tokens1, count1, opt1);
      if (full2 > both) extend_block_hashes(out2, tokens2, count2, opt2);
      return true;
    }
  }

  // Appends the hashes of blocks hashes.size() .. full-1. H is Hash (a copy of
  // hasher_) or, for plain SHA-256, detail::Sha256Native.
  template <class H, class T>
  void extend_chain(H& h, std::vector<Digest>& hashes, const T* tokens, std::size_t full, std::string_view salt,
                    const std::vector<ExtraRef>& extras) const {
    const std::size_t bs = block_size();
    Digest parent = hashes.empty() ? first_parent(salt) : hashes.back();
    for (std::size_t b = hashes.size(); b < full; ++b) {
      if constexpr (!detail::resets_after_result<H>::value) h = hasher_;
      parent = hash_block(h, parent, tokens + b * bs, b * bs, extras);
      hashes.push_back(parent);
    }
  }

  // H('B', parent, tokens as u32le, u32le count of overlapping extras, extras).
  template <class H, class T>
  Digest hash_block(H& h, const Digest& parent, const T* tokens, std::size_t first_token,
                    const std::vector<ExtraRef>& extras) const {
    constexpr std::size_t chunk_tokens = buffered_tokens;
    const std::size_t bs = block_size();
    // Trailer: the extras that overlap [first_token, first_token + bs).
    const std::uint64_t lo = first_token;
    const std::uint64_t hi = first_token + bs;
    std::uint32_t count = 0;
    for (ExtraRef e : extras) count += (e->token_begin < hi && e->token_end > lo) ? 1 : 0;
    if constexpr (std::is_same_v<H, detail::Sha256Native>) {
      // The whole message in one buffer, padded in place: one compression call.
      if (count == 0 && bs <= chunk_tokens) {
        alignas(16) std::uint8_t msg[message_capacity];
        return detail::Sha256Native::hash_padded(msg, block_message(msg, parent, tokens, first_token));
      }
    }
    std::uint8_t buf[message_head + 4 * chunk_tokens + 4];  // + trailer count
    buf[0] = detail::domain_block;
    std::memcpy(buf + 1, parent.data(), Digest::size_bytes);
    std::size_t used = message_head;
    for (std::size_t i = 0; i < bs;) {
      const std::size_t n = std::min(chunk_tokens, bs - i);
      detail::put_tokens(buf + used, tokens + i, n, first_token + i);
      used += 4 * n;
      i += n;
      if (i < bs) {
        h.update(buf, used);
        used = 0;
      }
    }
    detail::store_u32(buf + used, count);
    h.update(buf, used + 4);
    if (count != 0) {
      for (ExtraRef e : extras) {  // u64le begin, u64le end, u32le length, key
        if (!(e->token_begin < hi && e->token_end > lo)) continue;
        std::uint8_t frame[20];
        detail::store_u64(frame, e->token_begin);
        detail::store_u64(frame + 8, e->token_end);
        detail::store_u32(frame + 16, static_cast<std::uint32_t>(e->key.size()));
        h.update(frame, sizeof frame);
        h.update(e->key.data(), e->key.size());
      }
    }
    return detail::to_digest(h);
  }

  Envelope header_for(const Digest& block_hash, std::uint64_t payload_size) const noexcept {
    Envelope e = envelope_;
    detail::envelope_fill(e, block_hash, payload_size);
    return e;
  }
  detail::PayloadScheme scheme() const noexcept {
    return {namespace_kind == NamespaceKind::keyed ? IntegrityMode::poly1305 : IntegrityMode::xxh3_128, &payload_key_,
            policy_.payload};
  }

  Identity id_;
  Policy policy_;
  Slice slice_;
  Bytes encoding_;
  Hash hasher_;
  Digest root_;
  std::string key_prefix_;
  Envelope envelope_;
  detail::PayloadKey payload_key_;  // keyed namespaces only
  bool native_ = false;  // hash with detail::Sha256Native (see the constructor)
};

KVKEY_END_NAMESPACE

#endif  // KVKEY_KEY_NAMESPACE_HPP
