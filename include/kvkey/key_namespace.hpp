// SPDX-License-Identifier: Apache-2.0
// kvkey::KeyNamespace: everything one deployment's rank derives from its
// Identity (kvkey/identity.hpp): the chain of block hashes, the store keys and
// the envelopes it seals and verifies. Build one per (identity, rank) and share
// it. For many prompts at once reach for BatchHasher (kvkey/batch.hpp); for a
// keyed namespace, KeyNamespace<HmacSha256> (kvkey/hmac.hpp); to count how much
// of a prompt the store can serve, reusable_prefix (kvkey/prefix.hpp). Stored
// values (envelope + payload as one store value): seal_value / open_value.
#ifndef KVKEY_KEY_NAMESPACE_HPP
#define KVKEY_KEY_NAMESPACE_HPP

#include <openssl/crypto.h>
#include <openssl/rand.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <algorithm>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "kvkey/config.hpp"
#include "kvkey/detail/chain.hpp"
#include "kvkey/detail/key_segment.hpp"
#include "kvkey/detail/endian.hpp"
#include "kvkey/digest.hpp"
#include "kvkey/encode.hpp"
#include "kvkey/envelope.hpp"
#include "kvkey/errors.hpp"
#include "kvkey/geometry.hpp"
#include "kvkey/hash_options.hpp"
#include "kvkey/identity.hpp"
#include "kvkey/payload.hpp"
#include "kvkey/prefix.hpp"
#include "kvkey/sha256.hpp"

KVKEY_BEGIN_NAMESPACE

template <class Hash>
class KeyNamespace;

namespace detail {
/// The chain engine (kvkey/detail/chain.hpp) of a namespace, for kvkey's own
/// BatchHasher; not part of the API.
struct ChainAccess {
  template <class Hash>
  static const Chain<Hash>& chain(const KeyNamespace<Hash>& ns) noexcept {
    return ns.chain_;
  }
};
}  // namespace detail

/// The first bytes of every store key: the key format's tag. Format v4 writes
/// "kvk4/"; format v3 wrote "kvk3/" and v2 "kvk1/", so the keys of different
/// formats never collide and an operator purges the leftovers of an older one
/// by its prefix (docs/operations.md, "Upgrading the format").
inline constexpr std::string_view store_key_tag = "kvk4/";

/// The store-key tag of format v3, which v4 never writes: "kvk3/*" selects
/// every v3 key (docs/operations.md, "Upgrading the format").
inline constexpr std::string_view previous_store_key_tag = "kvk3/";

/// Longest store key kvkey produces.
inline constexpr std::size_t max_store_key_size = 256;

/// "kvk4/<tenant>/": every key of one tenant starts with it (list or purge a
/// tenant by prefix; a shared scope's tenant is "_scope.<name>"). Throws
/// identity_error if the tenant is not valid.
[[nodiscard]] inline std::string tenant_key_prefix(std::string_view tenant) {
  if (tenant.substr(0, scope_tenant_prefix.size()) == scope_tenant_prefix) {
    detail::check_tenant(tenant.substr(scope_tenant_prefix.size()), limits::tenant - scope_tenant_prefix.size());
  } else if (tenant != single_tenant_name) {
    detail::check_tenant(tenant);
  }
  std::string p(store_key_tag);
  p.append(tenant).push_back('/');
  return p;
}

/// "kvk4/<tenant>/k<16 hex of secret_id>/" ("c<16 hex>" when confidential):
/// every key a keyed (or confidential) namespace seals under one tenant secret
/// starts with it, and no other key does (purge a retired secret's values by
/// the two prefixes; docs/operations.md, "Rotating a tenant secret"). Throws
/// identity_error if the tenant is not valid.
[[nodiscard]] inline std::string secret_key_prefix(std::string_view tenant, const SecretId& secret_id,
                                                   bool confidential = false) {
  std::string p = tenant_key_prefix(tenant);
  p.push_back(confidential ? 'c' : 'k');
  p.append(secret_id.hex()).push_back('/');
  return p;
}

/// The size of a stored value (docs/format.md, "Stored values") whose payload
/// has payload_size bytes: envelope_size + payload_size. Throws input_error
/// when that does not fit a std::size_t.
[[nodiscard]] inline std::size_t value_size(std::uint64_t payload_size) {
  if (payload_size > std::numeric_limits<std::size_t>::max() - envelope_size) {
    throw input_error("a payload of " + std::to_string(payload_size) + " bytes does not fit a value in memory");
  }
  return envelope_size + static_cast<std::size_t>(payload_size);
}

/// What KeyNamespace::open_value found in a stored value.
struct [[nodiscard]] OpenedValue {
  /// ok, or why the value is a miss (as KeyNamespace::verify; a value shorter
  /// than envelope_size is malformed, "envelope.size").
  Verdict verdict;
  /// The verified payload: a view into the value (valid as long as the value's
  /// bytes are), {nullptr, 0} unless ok. A confidential namespace's
  /// open_value: a view into `plaintext`.
  ConstBuffer payload;
  /// Confidential namespaces' open_value(const ...): the decrypted payload
  /// (set only when ok), which `payload` views. Null otherwise.
  std::shared_ptr<const Bytes> plaintext;

  bool ok() const noexcept { return verdict.ok(); }
};

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

  /// This namespace under weights epoch `epoch`: identical in every other
  /// respect (identity, hasher, so a keyed namespace keeps its tenant secret,
  /// and Policy). The rotation of docs/security.md, "Rotating": switch every
  /// rank to ns.with_epoch(n) together.
  [[nodiscard]] KeyNamespace with_epoch(std::uint64_t epoch) const {
    Identity id = id_;
    if (policy_.tenant == TenantPolicy::single_tenant) id.tenant.clear();  // validated() names it again
    id.model.weights_epoch = epoch;
    return KeyNamespace(id, chain_.hasher(), policy_, chain_.native());
  }

  /// The namespace of rank `rank` of this deployment, ranks numbered as
  /// engines number them, stage-major: rank = pp_rank * tp_size + tp_rank
  /// (with pp_size 1, the tensor-parallel rank). Identical but for the shard's
  /// ranks (hasher and Policy kept). identity_error when rank is not below
  /// tp_size * pp_size.
  [[nodiscard]] KeyNamespace for_rank(std::uint32_t rank) const {
    const std::uint32_t tp = id_.shard.tp_size == 0 ? 1 : id_.shard.tp_size;
    if (id_.shard.pp_size <= 1) return for_rank(rank, id_.shard.pp_rank);
    return for_rank(rank % tp, rank / tp);
  }
  /// The namespace of tensor-parallel rank tp_rank in pipeline stage pp_rank.
  [[nodiscard]] KeyNamespace for_rank(std::uint32_t tp_rank, std::uint32_t pp_rank) const {
    Identity id = id_;
    if (policy_.tenant == TenantPolicy::single_tenant) id.tenant.clear();
    id.shard.tp_rank = tp_rank;
    id.shard.pp_rank = pp_rank;
    return KeyNamespace(id, chain_.hasher(), policy_, chain_.native());
  }
  /// Every rank of the deployment, for_rank(0) to for_rank(tp_size * pp_size
  /// - 1): what a Connector takes, so a lookup verifies every pipeline stage
  /// and every tensor-parallel rank.
  [[nodiscard]] std::vector<KeyNamespace> all_ranks() const {
    const std::uint64_t n = std::uint64_t{id_.shard.tp_size == 0 ? 1u : id_.shard.tp_size} *
                            (id_.shard.pp_size == 0 ? 1u : id_.shard.pp_size);
    std::vector<KeyNamespace> out;
    out.reserve(static_cast<std::size_t>(n));
    for (std::uint64_t r = 0; r < n; ++r) out.push_back(for_rank(static_cast<std::uint32_t>(r)));
    return out;
  }

  // ---- the chain ------------------------------------------------------------

  /// Hashes of every full block of tokens (a partial tail is not hashed).
  /// Every token id, the partial tail's included, must lie in [0, 2^32); others throw input_error naming the index.
  [[nodiscard]] std::vector<Digest> block_hashes(const std::vector<std::int32_t>& tokens,
                                                 const HashOptions& opt = {}) const {
    return block_hashes(tokens.data(), tokens.size(), opt);
  }
  [[nodiscard]] std::vector<Digest> block_hashes(const std::vector<std::int64_t>& tokens,
                                                 const HashOptions& opt = {}) const {
    return block_hashes(tokens.data(), tokens.size(), opt);
  }
  [[nodiscard]] std::vector<Digest> block_hashes(const std::vector<std::uint32_t>& tokens,
                                                 const HashOptions& opt = {}) const {
    return block_hashes(tokens.data(), tokens.size(), opt);
  }
  template <class T>
  [[nodiscard]] std::vector<Digest> block_hashes(const T* tokens, std::size_t count,
                                                 const HashOptions& opt = {}) const {
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

  /// "kvk4/<tenant>/<p | k<secret id> | c<secret id>>/<model>/e<epoch>/<64 hex of object_hash>":
  /// printable ASCII, at most max_store_key_size bytes.
  [[nodiscard]] std::string store_key(const Digest& block_hash) const {
    std::string key;
    key.reserve(key_prefix_.size() + 2 * Digest::size_bytes);
    key.append(key_prefix_);
    key.resize(key_prefix_.size() + 2 * Digest::size_bytes);
    object_hash(block_hash).write_hex(key.data() + key_prefix_.size());
    return key;
  }

  /// "kvk4/<tenant>/<p | k<secret id> | c<secret id>>/<model>/e<epoch>/": the prefix of every
  /// key of this namespace's epoch (all ranks, all adapters and formats of that
  /// model name, under this secret).
  const std::string& key_prefix() const noexcept { return key_prefix_; }
  /// "kvk4/<tenant>/": the prefix of every key of this tenant, plain or keyed
  /// under any secret.
  [[nodiscard]] std::string tenant_prefix() const { return tenant_key_prefix(id_.tenant); }
  /// Keyed: "kvk4/<tenant>/k<secret id>/" ("c<secret id>" when confidential),
  /// the prefix of every key sealed under this namespace's tenant secret (any
  /// model, epoch or rank). Plain: "kvk4/<tenant>/p/", the prefix of every
  /// plain key of the tenant.
  [[nodiscard]] std::string secret_prefix() const {
    if (secret_id_) return secret_key_prefix(id_.tenant, *secret_id_, confidential());
    return tenant_prefix() + "p/";
  }
  /// The tenant secret's public id (docs/format.md, "Secret id"); nullopt in a
  /// plain namespace.
  const std::optional<SecretId>& secret_id() const noexcept { return secret_id_; }

  // ---- envelopes ----------------------------------------------------------------

  /// The header to store with this rank's object for block_hash, whose KV bytes
  /// are payload: it records their size and digest (keyed: a Poly1305 tag under
  /// a fresh random nonce). No heap allocation. A confidential namespace
  /// stores ciphertext, not these bytes: input_error (use seal_value).
  [[nodiscard]] Envelope seal(const Digest& block_hash, Payload payload) const {
    refuse_header_only("seal(block_hash, payload)");
    PayloadSealer s(header_for(block_hash, 0), scheme(), false);
    for (const ConstBuffer& b : payload) s.update(b.data, b.size);
    return s.finish();
  }

  /// Checks a header and the payload read with it. Fail closed: anything but
  /// ok() is a miss; bytes that do not match the header's digest or tag are
  /// payload_mismatch ("payload"). Never reads outside [header, header +
  /// header_len); whatever the bytes, the outcome is a Verdict, never a
  /// kvkey::error (std::bad_alloc can escape only while naming the reason for a
  /// rejected header). No heap allocation when it accepts.
  /// In a confidential namespace the payload is the ciphertext: it is
  /// authenticated (decrypted piecewise into wiped scratch memory, never
  /// returned); open_value and open_in_place return the plaintext.
  Verdict verify(const std::uint8_t* header, std::size_t header_len, const Digest& block_hash, Payload payload) const {
    if (confidential()) return confidential_verify(header, header_len, block_hash, payload);
    PayloadVerifier v(header, header_len, header_for(block_hash, 0), id_, scheme(), false);
    for (const ConstBuffer& b : payload) v.update(b.data, b.size);
    return v.finish();
  }
  Verdict verify(const Envelope& header, const Digest& block_hash, Payload payload) const {
    return verify(header.data(), header.size(), block_hash, payload);
  }

  /// Streaming forms for bytes that arrive in pieces (update, then finish).
  /// A confidential namespace has none (input_error): the bytes are
  /// encrypted, so use seal_value / open_value / open_in_place.
  [[nodiscard]] PayloadSealer sealer(const Digest& block_hash) const {
    refuse_header_only("sealer()");
    return PayloadSealer(header_for(block_hash, 0), scheme(), true);
  }
  [[nodiscard]] PayloadVerifier verifier(const std::uint8_t* header, std::size_t header_len,
                                         const Digest& block_hash) const {
    refuse_header_only("verifier()");
    return PayloadVerifier(header, header_len, header_for(block_hash, 0), id_, scheme(), true);
  }

  /// plain, or keyed when Hash declares `keyed` (HmacSha256).
  static constexpr NamespaceKind namespace_kind =
      detail::is_keyed_hash<Hash>::value ? NamespaceKind::keyed : NamespaceKind::plain;
  /// What seal_value stores: xxh3_128 (plain), poly1305 (keyed) or aes256_gcm (confidential).
  IntegrityMode integrity_mode() const noexcept { return scheme().mode; }
  /// True for a keyed namespace built with Policy::confidential: its payloads
  /// are stored as AES-256-GCM ciphertext (docs/format.md, "Mode aes256_gcm").
  bool confidential() const noexcept { return namespace_kind == NamespaceKind::keyed && policy_.confidential; }

  /// Size-only header (IntegrityMode::none) for callers that cannot see the
  /// bytes (GPU-direct transfers). Only in a plain namespace under
  /// PayloadCheck::size_only; otherwise throws input_error. A keyed namespace
  /// authenticates every payload (docs/security.md, "Payload MAC"): seal the
  /// bytes, as a Payload or through sealer().
  [[nodiscard]] Envelope seal(const Digest& block_hash, std::uint64_t payload_size) const {
    if constexpr (namespace_kind == NamespaceKind::keyed) {
      throw input_error(
          "seal(block_hash, payload_size) writes no payload tag, and a keyed namespace authenticates "
          "the payload bytes under every Policy: pass the bytes as a kvkey::Payload (or stream them "
          "through sealer())");
    }
    if (policy_.payload == PayloadCheck::required) {
      throw input_error(
          "seal(block_hash, payload_size) writes no payload digest, and this namespace's Policy "
          "requires one: pass the bytes as a kvkey::Payload, or opt out with "
          "Policy::payload = PayloadCheck::size_only");
    }
    return header_for(block_hash, payload_size);
  }

  /// Size-only check of a header against what this namespace would have sealed
  /// for block_hash and payload_size. A digest in the header is not checked
  /// (the bytes are not here), so the result is ok only in a plain namespace
  /// under PayloadCheck::size_only; otherwise a header that passes every other
  /// check is payload_mismatch ("payload", or "envelope.integrity_mode" for a
  /// header without a digest). A keyed namespace never accepts a payload it
  /// did not authenticate.
  Verdict verify(const std::uint8_t* header, std::size_t header_len, const Digest& block_hash,
                 std::uint64_t payload_size) const {
    Verdict v = verify_except_payload(header, header_len, header_for(block_hash, payload_size));
    if (v.ok() && (namespace_kind == NamespaceKind::keyed || policy_.payload == PayloadCheck::required)) {
      return {Reason::payload_mismatch,
              header[envelope_layout::integrity_mode] == 0 ? "envelope.integrity_mode" : "payload"};
    }
    return v;
  }
  Verdict verify(const Envelope& header, const Digest& block_hash, std::uint64_t payload_size) const {
    return verify(header.data(), header.size(), block_hash, payload_size);
  }

  // ---- stored values (docs/format.md, "Stored values") -------------------------

  /// One store value for this rank's object of block_hash: the header
  /// seal(block_hash, payload) would give, followed by the payload's bytes
  /// (value_size(payload.size()) bytes in all). The digest or tag is computed
  /// over the copied bytes, so the value is consistent even if the source
  /// changes meanwhile.
  [[nodiscard]] Bytes seal_value(const Digest& block_hash, Payload payload) const {
    Bytes value(value_size(payload.size()));
    (void)seal_value(block_hash, payload, value.data(), value.size());
    return value;
  }

  /// As above, written to out[0, capacity); returns the bytes written,
  /// value_size(payload.size()). out must not overlap the payload, except that
  /// the payload may lie exactly at out + envelope_size: the value is then
  /// sealed in place (only the header is written; the zero-copy path,
  /// Connector::save_from). Throws input_error, writing nothing, when capacity
  /// is too small. No heap allocation.
  std::size_t seal_value(const Digest& block_hash, Payload payload, std::uint8_t* out, std::size_t capacity) const {
    const std::uint64_t n = payload.size();
    if (out == nullptr || capacity < envelope_size || capacity - envelope_size < n) {
      throw input_error("seal_value: the buffer holds " + std::to_string(out == nullptr ? 0 : capacity) +
                        " bytes, the value needs " + std::to_string(envelope_size) + " + " + std::to_string(n));
    }
    if (confidential()) return confidential_seal(block_hash, payload, out);
    constexpr std::size_t piece = std::size_t{1} << 16;  // copy, then hash the copy while it is in cache
    PayloadSealer s(header_for(block_hash, 0), scheme(), false);
    std::uint8_t* dst = out + envelope_size;
    for (const ConstBuffer& b : payload) {
      const auto* src = static_cast<const std::uint8_t*>(b.data);
      for (std::size_t off = 0; off < b.size; off += piece) {
        const std::size_t len = std::min(piece, b.size - off);
        if (dst != src + off) std::memcpy(dst, src + off, len);  // in place: nothing to copy
        s.update(dst, len);
        dst += len;
      }
    }
    const Envelope header = s.finish();
    std::memcpy(out, header.data(), envelope_size);
    return envelope_size + static_cast<std::size_t>(n);
  }

  /// Verifies a stored value (header, then payload) for block_hash: the
  /// Verdict of verify(value, envelope_size, block_hash, rest of the value),
  /// and, when ok, a view of the verified payload inside the value. A value
  /// shorter than an envelope is malformed ("envelope.size"); a payload shorter
  /// or longer than the header says is size_mismatch ("payload_size"). Never
  /// reads outside [value, value + size); never throws for any bytes.
  OpenedValue open_value(const std::uint8_t* value, std::size_t size, const Digest& block_hash) const {
    OpenedValue out;
    if (value == nullptr || size < envelope_size) {
      out.verdict = {Reason::malformed, "envelope.size"};
      return out;
    }
    const std::uint8_t* payload = value + envelope_size;
    const std::size_t n = size - envelope_size;
    if (confidential()) {  // decrypted into new memory, kept only when it authenticates
      auto plain = std::make_shared<Bytes>(n);
      out.verdict = confidential_open(value, payload, n, plain->data(), block_hash);
      if (out.verdict.ok()) {
        out.payload = {plain->data(), n};
        out.plaintext = std::move(plain);
      }
      return out;
    }
    out.verdict = verify(value, envelope_size, block_hash, Payload(payload, n));
    if (out.verdict.ok()) out.payload = {payload, n};
    return out;
  }
  OpenedValue open_value(const Bytes& value, const Digest& block_hash) const {
    return open_value(value.data(), value.size(), block_hash);
  }

  /// open_value on a value the caller may change (the zero-copy path,
  /// Connector::load_into with Slots): in a confidential namespace the payload
  /// is decrypted in place, and the view is value + envelope_size. The header
  /// is checked before any byte is decrypted; a payload whose tag does not
  /// verify is encrypted back (AES-GCM's keystream is its own inverse), so a
  /// rejected value holds exactly the bytes it held before the call and no
  /// unauthenticated plaintext is left in it. Other namespaces: open_value.
  OpenedValue open_in_place(std::uint8_t* value, std::size_t size, const Digest& block_hash) const {
    if (!confidential()) return open_value(value, size, block_hash);
    OpenedValue out;
    if (value == nullptr || size < envelope_size) {
      out.verdict = {Reason::malformed, "envelope.size"};
      return out;
    }
    std::uint8_t* payload = value + envelope_size;
    out.verdict = confidential_open(value, payload, size - envelope_size, payload, block_hash);
    if (out.verdict.ok()) out.payload = {payload, size - envelope_size};
    return out;
  }

  // ---- geometry (kvkey/geometry.hpp) ----------------------------------------------

  /// One block's KV bytes in this rank's slice (kvkey::payload_size of the
  /// identity's kv and slice()): dense 2 x layers x heads x head_dim x
  /// block_size x itemsize, MLA layers x head_dim x block_size x itemsize;
  /// nullopt where quantization scales make the size engine-specific.
  std::optional<std::uint64_t> payload_size() const noexcept { return kvkey::payload_size(id_.kv, slice_); }

  /// Header-only check, for counting lookups only, never sufficient to serve a
  /// block: loading verifies the payload (verify() with the bytes). `header`
  /// must be exactly the envelope_size envelope bytes (e.g. a GETRANGE 0 1023
  /// reply); any other length is malformed ("envelope.size"). Checks what the
  /// header alone shows: magic, format version, namespace kind, identity,
  /// shard, block hash and an integrity mode this namespace accepts (a header
  /// without a digest is payload_mismatch "envelope.integrity_mode" in a keyed
  /// namespace and under PayloadCheck::required). The payload size and the
  /// digest or tag are not checked. Never throws for any header bytes.
  Verdict verify_header(const std::uint8_t* header, std::size_t header_len, const Digest& block_hash) const {
    namespace L = envelope_layout;
    Envelope expected = header_for(block_hash, 0);
    if (header != nullptr && header_len == envelope_size) {  // any size: the bytes are not here
      std::memcpy(&expected[L::payload_size], header + L::payload_size, 8);
    }
    Verdict v = verify_except_payload(header, header_len, expected);
    if (v.ok() && header[L::integrity_mode] == 0 &&
        (namespace_kind == NamespaceKind::keyed || policy_.payload == PayloadCheck::required)) {
      return {Reason::payload_mismatch, "envelope.integrity_mode"};
    }
    return v;
  }
  Verdict verify_header(const Envelope& header, const Digest& block_hash) const {
    return verify_header(header.data(), header.size(), block_hash);
  }

  // ---- accounting -----------------------------------------------------------------

  /// reusable_prefix() with this namespace's block size.
  template <class Results>
  [[nodiscard]] ReusablePrefix reusable_prefix(const Results& block_major_results, std::size_t shards_per_block,
                                               std::size_t max_tokens = std::numeric_limits<std::size_t>::max()) const {
    return kvkey::reusable_prefix(block_major_results, shards_per_block, block_size(), max_tokens);
  }

 private:
  friend struct detail::ChainAccess;  // BatchHasher (kvkey/batch.hpp) runs the chain engine directly

  KeyNamespace(const Identity& id, Hash hasher, const Policy& policy, bool native)
      : id_(validated(id, policy)),
        policy_(policy),
        slice_(resolve_slice(id_.kv, id_.shard)),
        encoding_(encode_identity(id_)),
        chain_(std::move(hasher), encoding_, id_.kv.block_size, native) {
    if constexpr (namespace_kind == NamespaceKind::keyed) {
      // docs/format.md, "Secret id": H('I'), the first 8 bytes.
      const std::uint8_t tag = detail::domain_secret_id;
      const Digest sid = chain_.hash_message(&tag, 1);
      std::memcpy(secret_id_.emplace().bytes.data(), sid.data(), SecretId::size_bytes);
    }
    key_prefix_ = secret_prefix();
    key_prefix_.append(detail::model_key_segment(id_.model.name));
    key_prefix_.append("/e").append(std::to_string(id_.model.weights_epoch)).push_back('/');
    envelope_ = detail::envelope_template(encoding_, slice_, namespace_kind, secret_id_.value_or(SecretId{}));
    if constexpr (namespace_kind == NamespaceKind::keyed) {  // docs/security.md, "Payload MAC"
      std::uint8_t m[1 + Digest::size_bytes] = {detail::domain_payload};
      std::memcpy(m + 1, chain_.root().data(), Digest::size_bytes);
      const Digest k = chain_.hash_message(m, sizeof m);
      std::memcpy(payload_key_.bytes.data(), k.data(), k.size());
      if (policy_.confidential) kdf_.emplace(detail::ConfidentialAccess::kdf(chain_.hasher()));
    } else if (policy_.confidential) {
      throw identity_error("confidential",
                           "a confidential namespace encrypts under a key derived from the tenant secret: build a "
                           "keyed namespace (KeyNamespace<HmacSha256> with a TenantSecret)");
    }
  }

  void refuse_header_only(const char* call) const {
    if (confidential()) {
      throw input_error(std::string(call) +
                        " seals or checks a header beside bytes it cannot change, and a confidential namespace "
                        "stores its payloads encrypted: use seal_value, and open_value or open_in_place");
    }
  }

  // ---- confidential namespaces (docs/format.md, "Mode aes256_gcm") ----

  // The header of a confidential value checked for block and an n-byte
  // payload (everything but the tag, in constant time when it matches); aad
  // receives it with the tag zero.
  Verdict confidential_header(const std::uint8_t* header, std::size_t len, const Digest& block, std::uint64_t n,
                              Envelope& aad) const {
    namespace L = envelope_layout;
    Verdict v = verify_except_payload(header, len, header_for(block, n));
    if (!v.ok()) return v;
    if (header[L::integrity_mode] != static_cast<std::uint8_t>(IntegrityMode::aes256_gcm)) {
      return {Reason::payload_mismatch, "envelope.integrity_mode"};
    }
    std::memcpy(aad.data(), header, envelope_size);
    std::memset(aad.data() + L::payload_digest, 0, 16);
    return v;
  }

  std::size_t confidential_seal(const Digest& block, Payload payload, std::uint8_t* out) const {
    namespace L = envelope_layout;
    Envelope h = header_for(block, payload.size());
    h[L::integrity_mode] = static_cast<std::uint8_t>(IntegrityMode::aes256_gcm);
    if (RAND_bytes(h.data() + L::nonce, 16) != 1) throw crypto_error("RAND_bytes failed: no nonce for the payload");
    detail::GcmKey key;
    detail::confidential_key(*kdf_, root(), h.data() + L::nonce, key);
    {
      detail::GcmPass pass(true, key, h.data() + L::nonce + 4, h);
      std::uint8_t* dst = out + envelope_size;
      for (const ConstBuffer& b : payload) {
        if (b.size == 0) continue;
        pass.update(static_cast<const std::uint8_t*>(b.data), b.size, dst);  // in place when dst == b.data
        dst += b.size;
      }
      pass.seal(h.data() + L::payload_digest);
    }
    std::memcpy(out, h.data(), envelope_size);
    return envelope_size + static_cast<std::size_t>(payload.size());
  }

  // Decrypts src[0, n) into dst[0, n) (dst == src: in place) when header is
  // this namespace's for block and the tag authenticates; otherwise leaves no
  // plaintext behind: dst is wiped, or, in place, encrypted back.
  Verdict confidential_open(const std::uint8_t* header, const std::uint8_t* src, std::size_t n, std::uint8_t* dst,
                            const Digest& block) const {
    namespace L = envelope_layout;
    Envelope aad;
    Verdict v = confidential_header(header, envelope_size, block, n, aad);
    if (!v.ok()) return v;
    detail::GcmKey key;
    detail::confidential_key(*kdf_, root(), aad.data() + L::nonce, key);
    const std::uint8_t* iv = aad.data() + L::nonce + 4;
    bool ok = false;
    {
      detail::GcmPass pass(false, key, iv, aad);
      pass.update(src, n, dst);
      ok = pass.open(header + L::payload_digest);
    }
    if (ok) return v;
    if (dst == src) {
      detail::GcmPass back(true, key, iv, aad);
      back.update(dst, n, dst);
    } else {
      OPENSSL_cleanse(dst, n);
    }
    return {Reason::payload_mismatch, "payload"};
  }

  Verdict confidential_verify(const std::uint8_t* header, std::size_t len, const Digest& block, Payload payload) const {
    namespace L = envelope_layout;
    Envelope aad;
    Verdict v = confidential_header(header, len, block, payload.size(), aad);
    if (!v.ok()) return v;
    detail::GcmKey key;
    detail::confidential_key(*kdf_, root(), aad.data() + L::nonce, key);
    thread_local std::array<std::uint8_t, detail::gcm_scratch_size> scratch;
    bool ok = false;
    {
      detail::GcmPass pass(false, key, aad.data() + L::nonce + 4, aad);
      for (const ConstBuffer& b : payload) {
        const auto* p = static_cast<const std::uint8_t*>(b.data);
        for (std::size_t off = 0; off < b.size; off += scratch.size()) {
          pass.update(p + off, std::min(scratch.size(), b.size - off), scratch.data());
        }
      }
      OPENSSL_cleanse(scratch.data(), scratch.size());
      ok = pass.open(header + L::payload_digest);
    }
    return ok ? v : Verdict{Reason::payload_mismatch, "payload"};
  }

  // Verifies header against `expected` (this namespace's envelope for the
  // block and payload size) taking the header's integrity mode, nonce and
  // digest as they are, when this kind of namespace writes that mode: all
  // but the payload is checked.
  Verdict verify_except_payload(const std::uint8_t* header, std::size_t header_len, Envelope expected) const {
    namespace L = envelope_layout;
    const bool sized = header != nullptr && header_len == envelope_size;
    const std::uint8_t mode = sized ? header[L::integrity_mode] : 0;
    // Only the modes this namespace writes (none aside): a keyed header read
    // by a confidential reader, or the reverse, is named by its mode.
    if (sized && (mode == 0 || mode == static_cast<std::uint8_t>(scheme().mode))) {
      expected[L::integrity_mode] = mode;
      if (detail::has_nonce(mode)) {
        std::memcpy(&expected[L::nonce], header + L::nonce, 16);
      }
      if (mode != 0) std::memcpy(&expected[L::payload_digest], header + L::payload_digest, 16);
    }
    return detail::verify_envelope(header, header_len, expected, id_);
  }

  Envelope header_for(const Digest& block_hash, std::uint64_t payload_size) const noexcept {
    Envelope e = envelope_;
    detail::envelope_fill(e, block_hash, payload_size);
    return e;
  }
  detail::PayloadScheme scheme() const noexcept {
    return {namespace_kind == NamespaceKind::keyed ? (kdf_ ? IntegrityMode::aes256_gcm : IntegrityMode::poly1305)
                                                   : IntegrityMode::xxh3_128,
            &payload_key_, policy_.payload};
  }

  Identity id_;
  Policy policy_;
  Slice slice_;
  Bytes encoding_;
  detail::Chain<Hash> chain_;
  std::optional<SecretId> secret_id_;  // keyed namespaces only
  std::string key_prefix_;
  Envelope envelope_;
  detail::PayloadKey payload_key_;             // keyed namespaces only
  std::optional<detail::HmacSha256Core> kdf_;  // confidential namespaces: HKDF-Expand's HMAC under the PRK
};

KVKEY_END_NAMESPACE

#endif  // KVKEY_KEY_NAMESPACE_HPP
