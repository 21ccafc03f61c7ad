// SPDX-License-Identifier: Apache-2.0
// kvkey::KeyNamespace: everything one deployment's rank derives from its
// Identity (kvkey/identity.hpp): the chain of block hashes, the store keys and
// the envelopes it seals and verifies. Build one per (identity, rank) and share
// it. For many prompts at once reach for BatchHasher (kvkey/batch.hpp); for a
// keyed namespace, KeyNamespace<HmacSha256> (kvkey/hmac.hpp); to count how much
// of a prompt the store can serve, reusable_prefix (kvkey/prefix.hpp).
#ifndef KVKEY_KEY_NAMESPACE_HPP
#define KVKEY_KEY_NAMESPACE_HPP

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "kvkey/config.hpp"
#include "kvkey/detail/chain.hpp"
#include "kvkey/detail/endian.hpp"
#include "kvkey/digest.hpp"
#include "kvkey/encode.hpp"
#include "kvkey/envelope.hpp"
#include "kvkey/errors.hpp"
#include "kvkey/hash_options.hpp"
#include "kvkey/identity.hpp"
#include "kvkey/prefix.hpp"
#include "kvkey/sha256.hpp"

KVKEY_BEGIN_NAMESPACE

/// The first bytes of every store key: the key format's tag.
inline constexpr std::string_view store_key_tag = "kvk1/";

/// Longest store key kvkey produces.
inline constexpr std::size_t max_store_key_size = 256;

/// "kvk1/<tenant>/": every key of one tenant starts with it (list or purge a
/// tenant by prefix). Throws identity_error if the tenant is not valid.
[[nodiscard]] inline std::string tenant_key_prefix(std::string_view tenant) {
  if (tenant != single_tenant_name) detail::check_tenant(tenant);
  std::string p(store_key_tag);
  p.append(tenant).push_back('/');
  return p;
}

namespace detail {

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

}  // namespace detail

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
  explicit KeyNamespace(const Identity& id, const Policy& policy = {}) : KeyNamespace(id, Hash(), policy, true) {}

  /// As above with a configured hasher (e.g. a keyed one); the namespace keeps a copy.
  KeyNamespace(const Identity& id, Hash hasher, const Policy& policy = {})
      : KeyNamespace(id, std::move(hasher), policy, false) {}

  /// The validated identity as encoded (single-tenant policy applied).
  const Identity& identity() const noexcept { return id_; }
  const Policy& policy() const noexcept { return policy_; }
  /// The KV-head and layer range this rank holds.
  const Slice& slice() const noexcept { return slice_; }
  /// The canonical identity encoding (docs/format.md), without the shard.
  const Bytes& encoding() const noexcept { return encoding_; }
  /// H(encoding): the parent of block 0 for unsalted requests.
  const Digest& root() const noexcept { return chain_.root(); }
  std::uint32_t block_size() const noexcept { return id_.kv.block_size; }

  // ---- the chain ------------------------------------------------------------

  /// Hashes of every full block of tokens (a partial tail is not hashed).
  /// Every token id, the partial tail's included, must lie in [0, 2^32); others throw input_error naming the index.
  [[nodiscard]]
  std::vector<Digest> block_hashes(const std::vector<std::int32_t>& tokens, const HashOptions& opt = {}) const {
    return block_hashes(tokens.data(), tokens.size(), opt);
  }
  [[nodiscard]]
  std::vector<Digest> block_hashes(const std::vector<std::int64_t>& tokens, const HashOptions& opt = {}) const {
    return block_hashes(tokens.data(), tokens.size(), opt);
  }
  [[nodiscard]]
  std::vector<Digest> block_hashes(const std::vector<std::uint32_t>& tokens, const HashOptions& opt = {}) const {
    return block_hashes(tokens.data(), tokens.size(), opt);
  }
  template <class T>
  [[nodiscard]]
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
    chain_.extend(hashes, tokens, count, opt);
  }
  template <class T>
  void extend_block_hashes(std::vector<Digest>& hashes, const std::vector<T>& tokens,
                           const HashOptions& opt = {}) const {
    extend_block_hashes(hashes, tokens.data(), tokens.size(), opt);
  }

  /// The parent of block 0: root() without salt, H('S', root, salt) with one.
  [[nodiscard]] Digest first_parent(std::string_view salt) const { return chain_.first_parent(salt); }

  /// The chain engine (kvkey/detail/chain.hpp), for kvkey's own BatchHasher.
  /// Internal: not part of the documented API.
  const detail::Chain<Hash>& chain() const noexcept { return chain_; }

  // ---- store keys -------------------------------------------------------------

  /// H('O', block_hash, slice): the content address of this rank's object for
  /// the block. Ranks holding the same slice get the same object hash.
  [[nodiscard]] Digest object_hash(const Digest& block_hash) const {
    std::uint8_t m[1 + Digest::size_bytes + 16];
    m[0] = detail::domain_object;
    std::memcpy(m + 1, block_hash.data(), Digest::size_bytes);
    detail::store_u32(m + 33, slice_.kv_head_begin);
    detail::store_u32(m + 37, slice_.kv_head_end);
    detail::store_u32(m + 41, slice_.layer_begin);
    detail::store_u32(m + 45, slice_.layer_end);
    return chain_.hash_message(m, sizeof m);
  }

  /// "kvk1/<tenant>/<model>/e<epoch>/<64 hex of object_hash>": printable ASCII,
  /// at most max_store_key_size bytes.
  [[nodiscard]] std::string store_key(const Digest& block_hash) const {
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
  [[nodiscard]] std::string tenant_prefix() const { return tenant_key_prefix(id_.tenant); }

  // ---- envelopes ----------------------------------------------------------------

  /// The header to store with this rank's object for block_hash, whose KV bytes
  /// are payload_size long. Always envelope_size bytes.
  [[nodiscard]] Envelope seal(const Digest& block_hash, std::uint64_t payload_size) const noexcept {
    Envelope e = envelope_;
    detail::envelope_fill(e, block_hash, payload_size);
    return e;
  }

  /// Checks a header read from the store against what this namespace would have
  /// sealed for block_hash and payload_size. Fail closed: anything but ok()
  /// means the object is a miss. Never reads outside [header, header +
  /// header_len). Whatever the header's bytes, the outcome is a Verdict, never
  /// a kvkey::error; the only exception is std::bad_alloc, when naming the
  /// reason for a rejected header (decoding its identity) runs out of memory.
  /// Accepting a header allocates nothing.
  Verdict verify(const std::uint8_t* header, std::size_t header_len, const Digest& block_hash,
                 std::uint64_t payload_size) const {
    if (header != nullptr && header_len == envelope_size) {
      // One constant-time pass against what seal() would write, without
      // building it. It settles the common outcomes; any other difference is
      // diagnosed (field by field) by verify_envelope.
      const auto diff = compare_sealed(header, block_hash, payload_size);
      if (diff.rest == 0) {
        if (diff.block == 0 && diff.payload == 0) return {Reason::ok, {}};
        // Same identity and slice: what verify_envelope would conclude too.
        return diff.block != 0 ? Verdict{Reason::block_mismatch, "block_hash"}
                               : Verdict{Reason::size_mismatch, "payload_size"};
      }
    }
    const Envelope expected = seal(block_hash, payload_size);
    return detail::verify_envelope(header, header_len, expected, id_);
  }
  Verdict verify(const Envelope& header, const Digest& block_hash, std::uint64_t payload_size) const {
    return verify(header.data(), header.size(), block_hash, payload_size);
  }

  // ---- accounting -----------------------------------------------------------------

  /// reusable_prefix() with this namespace's block size.
  template <class Results>
  [[nodiscard]]
  ReusablePrefix reusable_prefix(const Results& block_major_results, std::size_t shards_per_block,
                                 std::size_t max_tokens = std::numeric_limits<std::size_t>::max()) const {
    return kvkey::reusable_prefix(block_major_results, shards_per_block, block_size(), max_tokens);
  }

 private:
  KeyNamespace(const Identity& id, Hash hasher, const Policy& policy, bool native)
      : id_(validated(id, policy)),
        policy_(policy),
        slice_(resolve_slice(id_.kv, id_.shard)),
        encoding_(encode_identity(id_)),
        chain_(std::move(hasher), encoding_, id_.kv.block_size, native) {
    key_prefix_ = tenant_key_prefix(id_.tenant);
    key_prefix_.append(detail::model_key_segment(id_.model.name));
    key_prefix_.append("/e").append(std::to_string(id_.model.weights_epoch)).push_back('/');
    envelope_ = detail::envelope_template(encoding_, slice_);
  }

  // XOR-OR of header against seal(block_hash, payload_size), split by region:
  // the block hash, the payload size and everything else. No data-dependent
  // branch, like CRYPTO_memcmp.
  struct SealedDiff {
    std::uint64_t block, payload, rest;
  };
  SealedDiff compare_sealed(const std::uint8_t* header, const Digest& block_hash,
                            std::uint64_t payload_size) const noexcept {
    namespace L = envelope_layout;
    static_assert(L::block_hash % 8 == 0 && L::payload_size == L::block_hash + Digest::size_bytes &&
                      L::slice == L::payload_size + 8 && envelope_size % 8 == 0,
                  "compare_sealed assumes 8-byte aligned fields");
    const auto word = [](const std::uint8_t* p) noexcept {
      std::uint64_t w;
      std::memcpy(&w, p, sizeof w);
      return w;
    };
    SealedDiff d{0, 0, 0};
    for (std::size_t i = 0; i < L::block_hash; i += 8) d.rest |= word(header + i) ^ word(envelope_.data() + i);
    for (std::size_t i = 0; i < Digest::size_bytes; i += 8) {
      d.block |= word(header + L::block_hash + i) ^ word(block_hash.data() + i);
    }
    std::uint8_t size_le[8];
    detail::store_u64(size_le, payload_size);
    d.payload = word(header + L::payload_size) ^ word(size_le);
    for (std::size_t i = L::slice; i < envelope_size; i += 8) d.rest |= word(header + i) ^ word(envelope_.data() + i);
    return d;
  }

  Identity id_;
  Policy policy_;
  Slice slice_;
  Bytes encoding_;
  detail::Chain<Hash> chain_;
  std::string key_prefix_;
  Envelope envelope_;
};

KVKEY_END_NAMESPACE

#endif  // KVKEY_KEY_NAMESPACE_HPP
