// SPDX-License-Identifier: Apache-2.0
// kvkey::AnyKeyNamespace: a KeyNamespace whose kind, plain (SHA-256) or keyed
// (HMAC-SHA-256 under a TenantSecret), is chosen at run time, for front ends
// that decide it from configuration (the Python binding, a connector reading
// its settings). It holds one of the two templated namespaces and forwards to
// it, so hashing runs at the templated speed; visit() reaches every member of
// the namespace it holds, including ones this class does not forward.
#ifndef KVKEY_ANY_KEY_NAMESPACE_HPP
#define KVKEY_ANY_KEY_NAMESPACE_HPP

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "kvkey/config.hpp"
#include "kvkey/hmac.hpp"
#include "kvkey/key_namespace.hpp"

KVKEY_BEGIN_NAMESPACE

/// A KeyNamespace<Sha256> or a KeyNamespace<HmacSha256>, chosen at run time.
/// Every member has the meaning of the KeyNamespace member of the same name;
/// const members are safe to call from many threads at once.
class AnyKeyNamespace {
 public:
  using Plain = KeyNamespace<Sha256>;
  using Keyed = KeyNamespace<HmacSha256>;

  /// A plain namespace (throws identity_error as KeyNamespace does).
  explicit AnyKeyNamespace(const Identity& id, const Policy& policy = {})
      : ns_(std::in_place_type<Plain>, id, policy) {}
  /// A keyed namespace under secret (the namespace keeps the HMAC key, not the secret).
  AnyKeyNamespace(const Identity& id, const TenantSecret& secret, const Policy& policy = {})
      : ns_(std::in_place_type<Keyed>, id, HmacSha256(secret), policy) {}
  /// Takes an existing namespace.
  explicit AnyKeyNamespace(Plain ns) : ns_(std::move(ns)) {}
  explicit AnyKeyNamespace(Keyed ns) : ns_(std::move(ns)) {}

  /// f(ns) with the namespace held, as `const Plain&` or `const Keyed&`: every
  /// member of KeyNamespace is reachable through it.
  template <class F>
  decltype(auto) visit(F&& f) const {
    return std::visit(std::forward<F>(f), ns_);
  }
  [[nodiscard]] bool keyed() const noexcept { return std::holds_alternative<Keyed>(ns_); }
  [[nodiscard]] NamespaceKind namespace_kind() const noexcept {
    return keyed() ? NamespaceKind::keyed : NamespaceKind::plain;
  }

  [[nodiscard]] const Identity& identity() const noexcept {
    return visit([](const auto& n) -> const Identity& { return n.identity(); });
  }
  [[nodiscard]] const Policy& policy() const noexcept {
    return visit([](const auto& n) -> const Policy& { return n.policy(); });
  }
  [[nodiscard]] const Slice& slice() const noexcept {
    return visit([](const auto& n) -> const Slice& { return n.slice(); });
  }
  [[nodiscard]] const Bytes& encoding() const noexcept {
    return visit([](const auto& n) -> const Bytes& { return n.encoding(); });
  }
  [[nodiscard]] const Digest& root() const noexcept {
    return visit([](const auto& n) -> const Digest& { return n.root(); });
  }
  [[nodiscard]] std::uint32_t block_size() const noexcept { return identity().kv.block_size; }
  [[nodiscard]] const std::string& key_prefix() const noexcept {
    return visit([](const auto& n) -> const std::string& { return n.key_prefix(); });
  }
  [[nodiscard]] std::string tenant_prefix() const {
    return visit([](const auto& n) { return n.tenant_prefix(); });
  }
  [[nodiscard]] std::string secret_prefix() const {
    return visit([](const auto& n) { return n.secret_prefix(); });
  }
  [[nodiscard]] const std::optional<SecretId>& secret_id() const noexcept {
    return visit([](const auto& n) -> const std::optional<SecretId>& { return n.secret_id(); });
  }
  /// The same namespace (kind, secret, policy) under weights epoch `epoch`.
  [[nodiscard]] AnyKeyNamespace with_epoch(std::uint64_t epoch) const {
    return visit([&](const auto& n) { return AnyKeyNamespace(n.with_epoch(epoch)); });
  }
  /// The same namespace for tensor-parallel rank tp_rank (KeyNamespace::for_rank).
  [[nodiscard]] AnyKeyNamespace for_rank(std::uint32_t rank) const {
    return visit([&](const auto& n) { return AnyKeyNamespace(n.for_rank(rank)); });
  }
  [[nodiscard]] AnyKeyNamespace for_rank(std::uint32_t tp_rank, std::uint32_t pp_rank) const {
    return visit([&](const auto& n) { return AnyKeyNamespace(n.for_rank(tp_rank, pp_rank)); });
  }
  [[nodiscard]] std::vector<AnyKeyNamespace> all_ranks() const {
    return visit([](const auto& n) {
      std::vector<AnyKeyNamespace> out;
      for (auto& r : n.all_ranks()) out.emplace_back(std::move(r));
      return out;
    });
  }
  /// A keyed namespace built with Policy::confidential (KeyNamespace::confidential).
  [[nodiscard]] bool confidential() const noexcept {
    return visit([](const auto& n) { return n.confidential(); });
  }
  [[nodiscard]] IntegrityMode integrity_mode() const noexcept {
    return visit([](const auto& n) { return n.integrity_mode(); });
  }

  template <class T>
  [[nodiscard]] std::vector<Digest> block_hashes(const T* tokens, std::size_t count,
                                                 const HashOptions& opt = {}) const {
    return visit([&](const auto& n) { return n.block_hashes(tokens, count, opt); });
  }
  template <class T>
  [[nodiscard]] std::vector<Digest> block_hashes(const std::vector<T>& tokens, const HashOptions& opt = {}) const {
    return block_hashes(tokens.data(), tokens.size(), opt);
  }
  template <class T>
  void extend_block_hashes(std::vector<Digest>& hashes, const T* tokens, std::size_t count,
                           const HashOptions& opt = {}) const {
    visit([&](const auto& n) { n.extend_block_hashes(hashes, tokens, count, opt); });
  }
  [[nodiscard]] Digest first_parent(std::string_view salt) const {
    return visit([&](const auto& n) { return n.first_parent(salt); });
  }

  [[nodiscard]] Digest object_hash(const Digest& block_hash) const {
    return visit([&](const auto& n) { return n.object_hash(block_hash); });
  }
  [[nodiscard]] std::string store_key(const Digest& block_hash) const {
    return visit([&](const auto& n) { return n.store_key(block_hash); });
  }

  [[nodiscard]] Envelope seal(const Digest& block_hash, Payload payload) const {
    return visit([&](const auto& n) { return n.seal(block_hash, payload); });
  }
  [[nodiscard]] Envelope seal(const Digest& block_hash, std::uint64_t payload_size) const {
    return visit([&](const auto& n) { return n.seal(block_hash, payload_size); });
  }
  [[nodiscard]] Verdict verify(const std::uint8_t* header, std::size_t header_len, const Digest& block_hash,
                               Payload payload) const {
    return visit([&](const auto& n) { return n.verify(header, header_len, block_hash, payload); });
  }
  [[nodiscard]] Verdict verify(const std::uint8_t* header, std::size_t header_len, const Digest& block_hash,
                               std::uint64_t payload_size) const {
    return visit([&](const auto& n) { return n.verify(header, header_len, block_hash, payload_size); });
  }
  [[nodiscard]] Verdict verify_header(const std::uint8_t* header, std::size_t header_len,
                                      const Digest& block_hash) const {
    return visit([&](const auto& n) { return n.verify_header(header, header_len, block_hash); });
  }
  [[nodiscard]] Bytes seal_value(const Digest& block_hash, Payload payload) const {
    return visit([&](const auto& n) { return n.seal_value(block_hash, payload); });
  }
  std::size_t seal_value(const Digest& block_hash, Payload payload, std::uint8_t* out, std::size_t capacity) const {
    return visit([&](const auto& n) { return n.seal_value(block_hash, payload, out, capacity); });
  }
  [[nodiscard]] OpenedValue open_value(const std::uint8_t* value, std::size_t size, const Digest& block_hash) const {
    return visit([&](const auto& n) { return n.open_value(value, size, block_hash); });
  }
  [[nodiscard]] OpenedValue open_in_place(std::uint8_t* value, std::size_t size, const Digest& block_hash) const {
    return visit([&](const auto& n) { return n.open_in_place(value, size, block_hash); });
  }
  [[nodiscard]] std::optional<std::uint64_t> payload_size() const noexcept {
    return visit([](const auto& n) { return n.payload_size(); });
  }
  [[nodiscard]] PayloadSealer sealer(const Digest& block_hash) const {
    return visit([&](const auto& n) { return n.sealer(block_hash); });
  }
  [[nodiscard]] PayloadVerifier verifier(const std::uint8_t* header, std::size_t header_len,
                                         const Digest& block_hash) const {
    return visit([&](const auto& n) { return n.verifier(header, header_len, block_hash); });
  }

  template <class Results>
  [[nodiscard]] ReusablePrefix reusable_prefix(const Results& block_major_results, std::size_t shards_per_block,
                                               std::size_t max_tokens = std::numeric_limits<std::size_t>::max()) const {
    return visit([&](const auto& n) { return n.reusable_prefix(block_major_results, shards_per_block, max_tokens); });
  }

 private:
  std::variant<Plain, Keyed> ns_;
};

KVKEY_END_NAMESPACE

#endif  // KVKEY_ANY_KEY_NAMESPACE_HPP
