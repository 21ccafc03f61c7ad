// SPDX-License-Identifier: Apache-2.0
// Shared scopes (format v4, docs/format.md section 12): a prefix (a system
// prompt) that several tenants share on purpose, stored once in the scope's
// own namespace, with the tenant's private blocks chained after it and the
// transition bound into their hashes.
//
//   kvkey::SharedScope<> scope("support-bot", id, {{"acme", "globex"}, {"acme"}});   // readers, publishers
//   kvkey::KeyNamespace<kvkey::HmacSha256> tenant(id, secret);
//   auto blocks = kvkey::scoped_block_hashes(scope.ns(), tenant, tokens, system_prompt_tokens);
//   kvkey::ScopedConnector<kvkey::Sha256, kvkey::HmacSha256> c(store, scope, tenant);
//   c.save(blocks, scope_blocks, payloads);        // scope_error unless the tenant publishes
//   auto kv = c.load(blocks, scope_blocks);        // scope blocks: a not_granted miss unless it reads
//
// The serving side (router, engine's per-request parameter) says how many
// tokens belong to the scope, never the prompt's text.
#ifndef KVKEY_SCOPE_HPP
#define KVKEY_SCOPE_HPP

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kvkey/config.hpp"
#include "kvkey/connector.hpp"
#include "kvkey/errors.hpp"
#include "kvkey/identity.hpp"
#include "kvkey/key_namespace.hpp"
#include "kvkey/sha256.hpp"

KVKEY_BEGIN_NAMESPACE

/// Who may use a shared scope: tenant names. A publisher may read too.
struct ScopeGrants {
  std::vector<std::string> readers;
  std::vector<std::string> publishers;
};

/// "_scope.<name>": a shared scope's tenant. identity_error ("scope.name")
/// unless name is 1..57 bytes of the tenant charset, first byte alphanumeric.
[[nodiscard]] inline std::string scope_tenant(std::string_view name) {
  try {
    detail::check_tenant(name, limits::tenant - scope_tenant_prefix.size());
  } catch (const identity_error& e) {
    throw identity_error("scope.name", std::string("the scope name ") + e.what());
  }
  std::string t(scope_tenant_prefix);
  t.append(name);
  return t;
}

/// A shared scope as the operator declares it: its name, its namespace (the
/// deployment's identity with tenant "_scope.<name>", plain, or keyed under
/// the scope's own secret and then optionally confidential) and its grants.
template <class ScopeHash = Sha256>
class SharedScope {
 public:
  /// A plain scope (ScopeHash = Sha256). base: the deployment's identity (its
  /// tenant is replaced). policy: its payload check and confidential flag
  /// (the tenant policy is the scope's own).
  SharedScope(std::string_view name, const Identity& base, ScopeGrants grants, const Policy& policy = {})
      : SharedScope(name, base, ScopeHash(), std::move(grants), policy, 0) {}
  /// A keyed scope: hasher keyed under the scope's own secret.
  SharedScope(std::string_view name, const Identity& base, ScopeHash hasher, ScopeGrants grants,
              const Policy& policy = {})
      : SharedScope(name, base, std::move(hasher), std::move(grants), policy, 0) {}

  const std::string& name() const noexcept { return name_; }
  /// The scope's namespace: its blocks are hashed, keyed, sealed and verified there.
  const KeyNamespace<ScopeHash>& ns() const noexcept { return ns_; }
  const ScopeGrants& grants() const noexcept { return grants_; }

  [[nodiscard]] bool may_publish(std::string_view tenant) const noexcept { return listed(grants_.publishers, tenant); }
  [[nodiscard]] bool may_read(std::string_view tenant) const noexcept {
    return listed(grants_.readers, tenant) || may_publish(tenant);
  }
  /// ok, or the miss of docs/format.md section 12: not_granted, "scope.readers".
  [[nodiscard]] Verdict check_read(std::string_view tenant) const {
    if (may_read(tenant)) return {Reason::ok, {}};
    return {Reason::not_granted, "scope.readers"};
  }
  /// Throws scope_error ("scope.publishers") unless tenant may publish.
  void check_publish(std::string_view tenant) const {
    if (!may_publish(tenant)) {
      throw scope_error("scope.publishers", "tenant '" + std::string(tenant) + "' may not publish to shared scope '" +
                                                name_ + "': it is not one of the scope's publishers");
    }
  }

  /// The same scope for tensor-parallel rank tp_rank.
  [[nodiscard]] SharedScope for_rank(std::uint32_t tp_rank) const {
    SharedScope s = *this;
    s.ns_ = ns_.for_rank(tp_rank);
    return s;
  }

 private:
  static KeyNamespace<ScopeHash> make(const Identity& id, ScopeHash hasher, const Policy& policy) {
    if constexpr (detail::is_keyed_hash<ScopeHash>::value) {
      return KeyNamespace<ScopeHash>(id, std::move(hasher), policy);
    } else {
      return KeyNamespace<ScopeHash>(id, policy);  // the native SHA-256 path
    }
  }
  SharedScope(std::string_view name, const Identity& base, ScopeHash hasher, ScopeGrants grants, Policy policy, int)
      : name_(name),
        ns_(make(scoped(base, name), std::move(hasher), scope_policy(policy))),
        grants_(std::move(grants)) {
    for (const auto* list : {&grants_.readers, &grants_.publishers}) {
      for (const std::string& t : *list) detail::check_tenant(t);
    }
  }
  static Identity scoped(Identity id, std::string_view name) {
    id.tenant = scope_tenant(name);
    return id;
  }
  static Policy scope_policy(Policy p) {
    p.tenant = TenantPolicy::shared_scope;
    return p;
  }
  static bool listed(const std::vector<std::string>& list, std::string_view t) noexcept {
    return std::find(list.begin(), list.end(), t) != list.end();
  }

  std::string name_;
  KeyNamespace<ScopeHash> ns_;
  ScopeGrants grants_;
};

/// The parent of the tenant's first private block after a scope prefix whose
/// last block hash is last_scope_block: H_t('T' || p_t || last_scope_block),
/// p_t = tenant.first_parent(salt) (docs/format.md, "Scope transition").
template <class T>
[[nodiscard]] Digest scope_transition(const KeyNamespace<T>& tenant, const Digest& last_scope_block,
                                      std::string_view salt = {}) {
  std::uint8_t m[1 + 2 * Digest::size_bytes];
  m[0] = detail::domain_scope;
  const Digest p = tenant.first_parent(salt);
  std::memcpy(m + 1, p.data(), Digest::size_bytes);
  std::memcpy(m + 1 + Digest::size_bytes, last_scope_block.data(), Digest::size_bytes);
  return detail::ChainAccess::chain(tenant).hash_message(m, sizeof m);
}

/// The block hashes of a request whose first scope_tokens tokens belong to a
/// shared scope (the serving side says so): blocks [0, k), k = scope_tokens /
/// block size (fewer when the request is shorter), in the scope's chain
/// (unsalted), the rest in the tenant's, bound to the transition. The
/// request's extras enter both by absolute position; its salt the private
/// blocks only. input_error when scope_tokens is not a multiple of the block
/// size or the two namespaces' block sizes differ. scope_tokens = 0 gives
/// tenant.block_hashes(tokens, opt).
template <class S, class T, class Tok>
[[nodiscard]] std::vector<Digest> scoped_block_hashes(const KeyNamespace<S>& scope, const KeyNamespace<T>& tenant,
                                                      const Tok* tokens, std::size_t count, std::size_t scope_tokens,
                                                      const HashOptions& opt = {}) {
  const std::size_t bs = tenant.block_size();
  if (scope.block_size() != bs) {
    throw input_error("scope", "the scope's block size is " + std::to_string(scope.block_size()) + ", the tenant's " +
                                   std::to_string(bs));
  }
  if (scope_tokens % bs != 0) {
    throw input_error("scope_tokens", "scope_tokens is " + std::to_string(scope_tokens) +
                                          ", not a multiple of the block size " + std::to_string(bs) +
                                          ": a block would belong to the scope and to the tenant");
  }
  if (scope_tokens == 0) return tenant.block_hashes(tokens, count, opt);
  HashOptions scoped = opt;
  scoped.salt.clear();
  std::vector<Digest> hashes = scope.block_hashes(tokens, std::min(count, scope_tokens), scoped);
  const std::size_t k = scope_tokens / bs;
  if (count / bs <= k) {  // no private block: the tail's token ids are checked all the same
    if (count > scope_tokens) (void)tenant.block_hashes(tokens + scope_tokens, count - scope_tokens);
    return hashes;
  }
  const Digest last = hashes.back();
  hashes.back() = scope_transition(tenant, last, opt.salt);  // the parent of block k
  tenant.extend_block_hashes(hashes, tokens, count, opt);
  hashes[k - 1] = last;
  return hashes;
}
template <class S, class T, class Tok>
[[nodiscard]] std::vector<Digest> scoped_block_hashes(const KeyNamespace<S>& scope, const KeyNamespace<T>& tenant,
                                                      const std::vector<Tok>& tokens, std::size_t scope_tokens,
                                                      const HashOptions& opt = {}) {
  return scoped_block_hashes(scope, tenant, tokens.data(), tokens.size(), scope_tokens, opt);
}

/// A tenant's connector for requests that may start with a shared scope's
/// blocks: the first scope_blocks of each call go to (and come from) the
/// scope's namespace under its grants, the rest to the tenant's. One rank.
template <class S, class T>
class ScopedConnector {
 public:
  ScopedConnector(Store& store, SharedScope<S> scope, KeyNamespace<T> tenant, Metrics* metrics = nullptr)
      : scope_(std::move(scope)),
        tenant_name_(tenant.identity().tenant),
        scope_conn_(store, scope_.ns(), metrics),
        tenant_conn_(store, tenant, metrics) {}

  const SharedScope<S>& scope() const noexcept { return scope_; }

  /// Stores every block: scope_error ("scope.publishers"), nothing written,
  /// when scope_blocks > 0 and the tenant may not publish. Returns the number stored.
  std::size_t save(const std::vector<Digest>& blocks, std::size_t scope_blocks,
                   const std::vector<Payload>& payloads) const {
    check(blocks.size(), scope_blocks);
    if (payloads.size() != blocks.size()) {
      throw input_error("payloads", "save: " + std::to_string(blocks.size()) + " blocks but " +
                                        std::to_string(payloads.size()) + " payloads");
    }
    if (scope_blocks > 0) scope_.check_publish(tenant_name_);
    std::size_t n = 0;
    if (scope_blocks > 0) n += scope_conn_.save(head(blocks, scope_blocks), head(payloads, scope_blocks));
    if (scope_blocks < blocks.size()) n += tenant_conn_.save(tail(blocks, scope_blocks), tail(payloads, scope_blocks));
    return n;
  }
  /// Stores only the private blocks (blocks[scope_blocks..], one payload each):
  /// what a tenant that reads the scope but does not publish saves.
  std::size_t save_private(const std::vector<Digest>& blocks, std::size_t scope_blocks,
                           const std::vector<Payload>& private_payloads) const {
    check(blocks.size(), scope_blocks);
    return tenant_conn_.save(tail(blocks, scope_blocks), private_payloads);
  }

  /// Leading blocks verified: 0 when the scope part is not granted.
  std::size_t lookup(const std::vector<Digest>& blocks, std::size_t scope_blocks) const {
    check(blocks.size(), scope_blocks);
    std::size_t n = 0;
    if (scope_blocks > 0) {
      if (!scope_.may_read(tenant_name_)) return 0;
      n = scope_conn_.lookup(head(blocks, scope_blocks));
      if (n < scope_blocks) return n;
    }
    return n + tenant_conn_.lookup(tail(blocks, scope_blocks));
  }

  /// Per block, a copy of the verified payload or nullopt; results (when
  /// given) receives each block's LoadResult: a scope block the tenant may not
  /// read is a miss not_granted ("scope.readers"), the store not asked.
  std::vector<std::optional<Bytes>> load(const std::vector<Digest>& blocks, std::size_t scope_blocks,
                                         std::vector<LoadResult>* results = nullptr) const {
    check(blocks.size(), scope_blocks);
    std::vector<std::optional<Bytes>> out;
    std::vector<LoadResult> r;
    if (scope_blocks > 0) {
      if (scope_.may_read(tenant_name_)) {
        copies(scope_conn_.load_views(head(blocks, scope_blocks)), out, r);
      } else {
        not_granted(scope_blocks, r);
        out.resize(scope_blocks);
      }
    }
    if (scope_blocks < blocks.size()) copies(tenant_conn_.load_views(tail(blocks, scope_blocks)), out, r);
    if (results != nullptr) *results = std::move(r);
    return out;
  }

  /// Connector::load_into (destinations), scope blocks under the grants.
  std::vector<LoadResult> load_into(const std::vector<Digest>& blocks, std::size_t scope_blocks,
                                    const std::vector<std::vector<MutableBuffer>>& destinations) const {
    check(blocks.size(), scope_blocks);
    if (destinations.size() != blocks.size()) {
      throw input_error("buffers", "load_into: " + std::to_string(blocks.size()) + " blocks but " +
                                       std::to_string(destinations.size()) + " destinations");
    }
    std::vector<LoadResult> r;
    if (scope_blocks > 0) {
      if (scope_.may_read(tenant_name_)) {
        r = scope_conn_.load_into(head(blocks, scope_blocks), head(destinations, scope_blocks));
      } else {
        not_granted(scope_blocks, r);
      }
    }
    if (scope_blocks < blocks.size()) {
      for (LoadResult& x : tenant_conn_.load_into(tail(blocks, scope_blocks), tail(destinations, scope_blocks))) {
        r.push_back(std::move(x));
      }
    }
    return r;
  }

  /// Connector::load_into (Slots, the zero-copy path): block n into slot n.
  std::vector<LoadResult> load_into(const std::vector<Digest>& blocks, std::size_t scope_blocks,
                                    const Slots& slots) const {
    check(blocks.size(), scope_blocks);
    std::vector<std::size_t> first(scope_blocks);
    std::vector<std::size_t> rest(blocks.size() - scope_blocks);
    for (std::size_t i = 0; i < first.size(); ++i) first[i] = i;
    for (std::size_t i = 0; i < rest.size(); ++i) rest[i] = scope_blocks + i;
    std::vector<LoadResult> r;
    if (scope_blocks > 0) {
      if (scope_.may_read(tenant_name_)) {
        r = scope_conn_.load_into(head(blocks, scope_blocks), slots, first);
      } else {
        not_granted(scope_blocks, r);
      }
    }
    if (!rest.empty()) {
      for (LoadResult& x : tenant_conn_.load_into(tail(blocks, scope_blocks), slots, rest)) r.push_back(std::move(x));
    }
    return r;
  }

 private:
  static void check(std::size_t n, std::size_t scope_blocks) {
    if (scope_blocks > n) {
      throw input_error("scope_blocks", "scope_blocks is " + std::to_string(scope_blocks) + " but the request has " +
                                            std::to_string(n) + " blocks");
    }
  }
  template <class V>
  static std::vector<V> head(const std::vector<V>& v, std::size_t n) {
    return std::vector<V>(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(n));
  }
  template <class V>
  static std::vector<V> tail(const std::vector<V>& v, std::size_t n) {
    return std::vector<V>(v.begin() + static_cast<std::ptrdiff_t>(n), v.end());
  }
  static void not_granted(std::size_t n, std::vector<LoadResult>& r) {
    for (std::size_t i = 0; i < n; ++i) {
      LoadResult x;
      x.status = LoadResult::Status::missing;
      x.verdict = {Reason::not_granted, "scope.readers"};
      r.push_back(std::move(x));
    }
  }
  static void copies(const std::vector<LoadedView>& views, std::vector<std::optional<Bytes>>& out,
                     std::vector<LoadResult>& r) {
    for (const LoadedView& x : views) {
      r.push_back(x.result);
      const auto* p = static_cast<const std::uint8_t*>(x.payload.data);
      out.push_back(x.result.loaded() ? std::optional<Bytes>(Bytes(p, p + x.payload.size)) : std::nullopt);
    }
  }

  SharedScope<S> scope_;
  std::string tenant_name_;
  Connector<S> scope_conn_;
  Connector<T> tenant_conn_;
};

KVKEY_END_NAMESPACE

#endif  // KVKEY_SCOPE_HPP
