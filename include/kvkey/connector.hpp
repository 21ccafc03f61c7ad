// SPDX-License-Identifier: Apache-2.0
// kvkey::Connector: saves, looks up and loads one rank's KV blocks through any
// kvkey::Store (kvkey/store.hpp), one stored value per block (docs/format.md,
// "Stored values"). Lookups read each block's header and count a block only
// when the header verifies for this namespace and block; loads verify header
// and payload. A value that does not verify is a miss, never an error.
//
//   kvkey::MemoryStore store;
//   kvkey::Connector<> c(store, ns);
//   c.save(blocks, payloads);
//   std::size_t reusable = c.lookup(blocks);                 // leading blocks whose headers verify
//   std::size_t all = kvkey::lookup_all_ranks(store, {&rank0, &rank1}, blocks);  // ... on every rank
//   std::vector<std::optional<kvkey::Bytes>> kv = c.load(blocks);  // verified payloads, nullopt = miss
#ifndef KVKEY_CONNECTOR_HPP
#define KVKEY_CONNECTOR_HPP

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kvkey/config.hpp"
#include "kvkey/digest.hpp"
#include "kvkey/envelope.hpp"
#include "kvkey/errors.hpp"
#include "kvkey/key_namespace.hpp"
#include "kvkey/metrics.hpp"
#include "kvkey/payload.hpp"
#include "kvkey/sha256.hpp"
#include "kvkey/store.hpp"

KVKEY_BEGIN_NAMESPACE

template <class Hash>
std::size_t lookup_all_ranks(Store& store, const std::vector<const KeyNamespace<Hash>*>& ranks,
                             const std::vector<Digest>& blocks, Metrics* metrics = nullptr);

/// One rank's blocks in a Store. Holds references: the store, the namespace
/// and the metrics (if any) must outlive it. As thread-safe as the store
/// (MemoryStore: fully). Given a kvkey::Metrics, it records every save, lookup
/// and load: blocks by result, each rejection by reason and field, verified
/// payload bytes (kvkey/metrics.hpp).
template <class Hash = Sha256>
class Connector {
 public:
  Connector(Store& store, const KeyNamespace<Hash>& ns, Metrics* metrics = nullptr) noexcept
      : store_(&store), ns_(&ns), metrics_(metrics) {}

  const KeyNamespace<Hash>& key_namespace() const noexcept { return *ns_; }
  Store& store() const noexcept { return *store_; }

  /// Stores seal_value(block, payload) under store_key(block).
  void save(const Digest& block, Payload payload) const {
    put(block, payload);
    if (metrics_ != nullptr) metrics_->record_save(1, 0);
  }
  /// save for each (block, payload); input_error when the counts differ.
  void save(const std::vector<Digest>& blocks, const std::vector<Payload>& payloads) const {
    if (blocks.size() != payloads.size()) {
      throw input_error("save: " + std::to_string(blocks.size()) + " blocks but " + std::to_string(payloads.size()) +
                        " payloads");
    }
    for (std::size_t i = 0; i < blocks.size(); ++i) put(blocks[i], payloads[i]);
    if (metrics_ != nullptr) metrics_->record_save(blocks.size(), 0);
  }

  /// The number of leading blocks whose stored header verifies for this
  /// namespace and block (read with one get_prefix_many of envelope_size
  /// bytes). The payloads are checked by load.
  std::size_t lookup(const std::vector<Digest>& blocks) const {
    return lookup_all_ranks<Hash>(*store_, {ns_}, blocks, metrics_);
  }

  /// The number of leading blocks for which the store has some value, verified
  /// or not: the existence-only lookup, for comparison. A foreign or damaged
  /// value counts here; lookup() does not count it.
  std::size_t lookup_existing(const std::vector<Digest>& blocks) const {
    const std::vector<bool> found = store_->exists_many(keys(blocks));
    std::size_t n = 0;
    while (n < blocks.size() && n < found.size() && found[n]) ++n;
    return n;
  }

  /// The verified payload of block, or nullopt (absent, or it does not verify).
  std::optional<Bytes> load(const Digest& block) const {
    std::vector<std::optional<Bytes>> values;
    values.push_back(store_->get(ns_->store_key(block)));
    return std::move(opened_all(std::move(values), {block}).front());
  }
  /// load for each block, fetched with one get_many.
  std::vector<std::optional<Bytes>> load(const std::vector<Digest>& blocks) const {
    return opened_all(store_->get_many(keys(blocks)), blocks);
  }

 private:
  std::vector<std::string> keys(const std::vector<Digest>& blocks) const {
    std::vector<std::string> out;
    out.reserve(blocks.size());
    for (const Digest& b : blocks) out.push_back(ns_->store_key(b));
    return out;
  }

  void put(const Digest& block, Payload payload) const {
    const Bytes value = ns_->seal_value(block, payload);
    store_->put(ns_->store_key(block), value.data(), value.size());
  }

  // The verified payload of each block (nullopt: absent or rejected), and the load recorded.
  std::vector<std::optional<Bytes>> opened_all(std::vector<std::optional<Bytes>> values,
                                               const std::vector<Digest>& blocks) const {
    std::vector<std::optional<Bytes>> out(blocks.size());
    std::size_t missing = 0;
    std::size_t loaded = 0;
    std::uint64_t bytes = 0;
    for (std::size_t i = 0; i < blocks.size(); ++i) {
      if (i >= values.size() || !values[i]) {
        ++missing;
        continue;
      }
      out[i] = opened(std::move(values[i]), blocks[i]);
      if (out[i]) {
        ++loaded;
        bytes += out[i]->size();
      }
    }
    if (metrics_ != nullptr) {
      metrics_->record_load(loaded, missing, blocks.size() - loaded - missing);
      metrics_->record_payload_bytes(bytes);
    }
    return out;
  }

  // The verified payload of a present value; a rejection is recorded.
  std::optional<Bytes> opened(std::optional<Bytes> value, const Digest& block) const {
    const Verdict v = ns_->open_value(value->data(), value->size(), block).verdict;
    if (!v.ok()) {
      if (metrics_ != nullptr) metrics_->record_rejection(v);
      return std::nullopt;
    }
    value->erase(value->begin(), value->begin() + static_cast<std::ptrdiff_t>(envelope_size));
    return value;
  }

  Store* store_;
  const KeyNamespace<Hash>* ns_;
  Metrics* metrics_ = nullptr;
};

/// Connector::lookup over a deployment's ranks: the number of leading blocks
/// whose stored header verifies on every rank in `ranks` (each rank's
/// namespace; block hashes are the same on every rank of a deployment), read
/// with one get_prefix_many of all ranks' keys, block-major. With metrics, one
/// lookup is recorded: the counted blocks as hits, the first block that failed
/// as rejected (and its verdict) when a header was there, everything else as
/// misses.
template <class Hash>
std::size_t lookup_all_ranks(Store& store, const std::vector<const KeyNamespace<Hash>*>& ranks,
                             const std::vector<Digest>& blocks, Metrics* metrics) {
  if (ranks.empty()) return 0;
  std::vector<std::string> keys;
  keys.reserve(blocks.size() * ranks.size());
  for (const Digest& b : blocks) {
    for (const KeyNamespace<Hash>* ns : ranks) keys.push_back(ns->store_key(b));
  }
  const std::vector<std::optional<Bytes>> headers = store.get_prefix_many(keys, envelope_size);
  std::size_t n = 0;
  Verdict refused{Reason::ok, {}};
  for (; n < blocks.size() && refused.ok(); ++n) {
    bool missing = false;
    for (std::size_t r = 0; r < ranks.size() && refused.ok() && !missing; ++r) {
      const std::size_t k = n * ranks.size() + r;
      missing = k >= headers.size() || !headers[k];
      if (!missing) {
        refused = ranks[r]->verify_header(headers[k]->data(), std::min(headers[k]->size(), envelope_size), blocks[n]);
      }
    }
    if (missing || !refused.ok()) break;
  }
  if (metrics != nullptr) {
    const std::size_t rejected = refused.ok() ? 0 : 1;
    metrics->record_rejection(refused);
    metrics->record_lookup(n, blocks.size() - n - rejected, rejected);
  }
  return n;
}

KVKEY_END_NAMESPACE

#endif  // KVKEY_CONNECTOR_HPP
