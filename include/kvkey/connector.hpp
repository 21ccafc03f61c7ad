// SPDX-License-Identifier: Apache-2.0
// kvkey::Connector: saves, looks up and loads a deployment's KV blocks through
// any kvkey::Store (kvkey/store.hpp), one stored value per block and rank
// (docs/format.md, "Stored values"). The one implementation of the connector
// semantics: the Python kvkey.Connector and kvkey.aio.Connector are this class
// with Python stores plugged in (docs/connectors.md).
//
//   kvkey::MemoryStore store;
//   kvkey::Connector<> c(store, {rank0, rank1});                // one namespace per rank
//   c.save(blocks, payloads, /*rank=*/0);                       // sealed, batched put
//   std::size_t reusable = c.lookup(blocks);                    // leading blocks verified on every rank
//   auto kv = c.load(blocks, 0);                                // verified payloads, nullopt = miss
//   auto res = c.load_into(blocks, destinations, 0);            // verified, then scattered per layer
//   kvkey::Slots slots(store, blocks.size(), payload_size);     // registered memory: the zero-copy path
//   c.save_from(blocks, slots);                                 // sealed in place, written from the slots
//   c.save(blocks, payloads, slots);                            // gathered into the slots, then as save_from
//   auto in = c.load_into(blocks, slots);                       // read into the slots, verified there
//   c.load_into(blocks, destinations, slots);                   // through the slots into destinations
//
// Lookups read each value's header and count a block only when its header
// verifies on every rank; loads verify header and payload. A value that does
// not verify is a miss, never an error; a store error is a miss too (kept in
// last_error(), raised on request).
#ifndef KVKEY_CONNECTOR_HPP
#define KVKEY_CONNECTOR_HPP

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <functional>
#include <limits>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

#include "kvkey/any_key_namespace.hpp"
#include "kvkey/config.hpp"
#include "kvkey/detail/work_pool.hpp"
#include "kvkey/digest.hpp"
#include "kvkey/envelope.hpp"
#include "kvkey/errors.hpp"
#include "kvkey/key_namespace.hpp"
#include "kvkey/metrics.hpp"
#include "kvkey/payload.hpp"
#include "kvkey/sha256.hpp"
#include "kvkey/store.hpp"

KVKEY_BEGIN_NAMESPACE

/// What one connector call did, by the rule of docs/operations.md ("What to
/// monitor"): the numbers a Metrics records for it. Connector::Options::observer
/// receives one per call (front ends with their own recorders replay it).
struct ConnectorCall {
  enum class Op : std::uint8_t { save, lookup, load };
  Op op = Op::lookup;
  /// save: saved, failed; lookup: hit, miss, rejected; load: loaded, missing, rejected.
  std::size_t counts[3] = {0, 0, 0};
  std::vector<Verdict> rejections;        ///< one per rejected block: the first rank's verdict that refused it
  std::size_t false_hits = 0;             ///< blocks a lookup counted that this load found missing or rejected
  std::uint64_t payload_bytes = 0;        ///< verified payload bytes served
  std::vector<std::string> store_errors;  ///< the kind of each failed store call or key

  /// Records the call in m, as every kvkey connector does.
  void record(Metrics& m) const {
    if (op == Op::lookup) {
      for (const Verdict& v : rejections) m.record_rejection(v);
      m.record_lookup(counts[0], counts[1], counts[2]);
    } else if (op == Op::load) {
      m.record_load(counts[0], counts[1], counts[2]);
      for (const Verdict& v : rejections) m.record_rejection(v);
      if (false_hits != 0) m.record_false_hits(false_hits);
      if (payload_bytes != 0) m.record_payload_bytes(payload_bytes);
    } else {
      m.record_save(counts[0], counts[1]);
    }
    for (const std::string& k : store_errors) m.record_store_error(k);
  }
};

/// What a connector logs about a store that keeps failing (Options::log).
struct StoreFailureLog {
  std::string kind;         ///< the kind of the latest failure
  std::uint64_t count = 0;  ///< failures since the previous log line (this one included)
  std::uint64_t total = 0;  ///< failures since the connector was made
  std::string message;      ///< the latest failure's message
};

/// What load_into did for one block.
struct LoadResult {
  enum class Status : std::uint8_t { loaded, missing, rejected };
  Status status = Status::missing;
  Verdict verdict{Reason::ok, {}};  ///< rejected: why (loaded: ok)
  std::size_t nbytes = 0;           ///< bytes written into the destinations
  bool loaded() const noexcept { return status == Status::loaded; }
};

/// A verified payload inside a value the store returned (Connector::load_views).
struct LoadedView {
  ConstBuffer payload;                             ///< the verified bytes (empty unless loaded)
  std::shared_ptr<const StoreValue::Owner> owner;  ///< keeps them alive
  LoadResult result;
};

/// Value slots in registered memory, the zero-copy path (Connector::save_from,
/// Connector::load_into with Slots; docs/connectors.md, "Registered memory"):
/// count slots of value_size(payload_size) bytes, slot i at i * stride(), each
/// the stored value of one block (header, then payload). The engine writes a
/// block's KV into payload(i) before save_from and uses it after a load_into
/// whose result for the block is loaded; a slot whose result is not loaded may
/// hold rejected bytes (header and payload): it must not be used.
class Slots {
 public:
  /// count slots in new memory the store registers (Store::allocate_memory).
  Slots(Store& store, std::size_t count, std::uint64_t payload_size)
      : Slots(nullptr, count, payload_size, &store, nullptr, false) {}
  /// count slots in the engine's memory (at least count * stride() bytes),
  /// registered with the store (Store::register_memory) unless registered:
  /// the engine registered it itself. The engine keeps it alive while the
  /// slots live.
  Slots(Store& store, MutableBuffer memory, std::size_t count, std::uint64_t payload_size, bool registered = false)
      : Slots(nullptr, count, payload_size, &store, &memory, registered) {}
  /// count slots over memory registered already.
  Slots(std::shared_ptr<RegisteredMemory> memory, std::size_t count, std::uint64_t payload_size)
      : Slots(std::move(memory), count, payload_size, nullptr, nullptr, false) {}

  std::size_t count() const noexcept { return count_; }
  std::size_t payload_size() const noexcept { return stride_ - envelope_size; }
  /// Bytes per slot: value_size(payload_size()).
  std::size_t stride() const noexcept { return stride_; }
  /// Slot i: its whole value, its header, its payload (input_error out of range).
  MutableBuffer value(std::size_t i) const { return {base(i), stride_}; }
  MutableBuffer header(std::size_t i) const { return {base(i), envelope_size}; }
  MutableBuffer payload(std::size_t i) const { return {base(i) + envelope_size, stride_ - envelope_size}; }
  const RegisteredMemory& memory() const noexcept { return *memory_; }

 private:
  Slots(std::shared_ptr<RegisteredMemory> memory, std::size_t count, std::uint64_t payload_size, Store* store,
        const MutableBuffer* given, bool registered)
      : memory_(std::move(memory)), count_(count) {
    if (count == 0 || payload_size == 0) {
      throw input_error("slots", "Slots: count " + std::to_string(count) + " and payload_size " +
                                     std::to_string(payload_size) + " must be at least 1");
    }
    stride_ = value_size(payload_size);
    if (count > std::numeric_limits<std::size_t>::max() / stride_) {
      throw input_error("slots", "Slots: " + std::to_string(count) + " slots of " + std::to_string(stride_) +
                                     " bytes do not fit in memory");
    }
    const std::size_t need = count * stride_;
    if (given != nullptr) {
      if (given->data == nullptr || given->size < need) {
        throw input_error("buffer", "Slots: the buffer has " + std::to_string(given->data ? given->size : 0) +
                                        " bytes, " + std::to_string(count) + " slots of " + std::to_string(stride_) +
                                        " need " + std::to_string(need));
      }
      memory_ = registered ? std::make_shared<RegisteredMemory>(*given) : store->register_memory(*given);
    } else if (store != nullptr) {
      memory_ = store->allocate_memory(need);
    }
    if (!memory_ || memory_->buffer().data == nullptr || memory_->buffer().size < need) {
      throw input_error("slots", "Slots: the registered memory holds " +
                                     std::to_string(memory_ ? memory_->buffer().size : 0) + " bytes, " +
                                     std::to_string(count) + " slots of " + std::to_string(stride_) + " need " +
                                     std::to_string(need));
    }
  }
  std::uint8_t* base(std::size_t i) const {
    if (i >= count_) {
      throw input_error("indices",
                        "slot " + std::to_string(i) + " is out of range [0, " + std::to_string(count_) + ")");
    }
    return static_cast<std::uint8_t*>(memory_->buffer().data) + i * stride_;
  }

  std::shared_ptr<RegisteredMemory> memory_;
  std::size_t count_ = 0;
  std::size_t stride_ = 0;
};

namespace detail {
template <class N>
struct connector_namespace {
  using type = KeyNamespace<N>;
};
template <class H>
struct connector_namespace<KeyNamespace<H>> {
  using type = KeyNamespace<H>;
};
template <>
struct connector_namespace<AnyKeyNamespace> {
  using type = AnyKeyNamespace;
};

struct DigestHash {
  std::size_t operator()(const Digest& d) const noexcept {
    std::size_t h = 0;
    std::memcpy(&h, d.data(), sizeof h);
    return h;
  }
};
}  // namespace detail

/// A deployment's blocks in a Store. N is the hash (Sha256, HmacSha256: the
/// namespace is KeyNamespace<N>) or the namespace type itself (AnyKeyNamespace).
/// Holds a reference to the store (and the metrics), which must outlive it,
/// and copies of the namespaces. As thread-safe as the store.
template <class N = Sha256>
class Connector {
 public:
  using Namespace = typename detail::connector_namespace<N>::type;

  struct Options {
    /// Records every call (ConnectorCall::record); nullptr: none.
    Metrics* metrics = nullptr;
    /// Every rank's payload size; nullopt: each rank's ns.payload_size() where
    /// the identity determines it, else unchecked. A save of another size is
    /// input_error; a value of another size is rejected (size_mismatch).
    std::optional<std::uint64_t> payload_size;
    /// Store errors are misses (kept in last_error()); true: rethrown.
    bool raise_errors = false;
    /// Blocks per store call of a lookup (it stops after the batch where the count ends).
    std::size_t lookup_batch = 512;
    /// Called once per call with what it did (after metrics are recorded).
    std::function<void(const ConnectorCall&)> observer;
    /// Called when the store fails, rate-limited: the first failure at once,
    /// then at most one line per log_interval, with the count since the last.
    std::function<void(const StoreFailureLog&)> log;
    std::chrono::milliseconds log_interval{10000};
    /// Threads that digest a call's values, the calling thread included:
    /// a load's after its one read (verified, and copied into their
    /// destinations), a save's from slots before its one write (gathered into
    /// them, sealed). 1: the calling thread alone. More start with the
    /// connector and take calls of at least parallel_digest_bytes; a call that
    /// finds them busy with another works on its own thread.
    unsigned digest_threads = 1;
  };
  /// Calls of fewer payload bytes are digested on the calling thread alone:
  /// waking a worker costs tens of microseconds.
  static constexpr std::size_t parallel_digest_bytes = std::size_t{1} << 18;

  /// One rank (rank 0).
  Connector(Store& store, const Namespace& ns, Metrics* metrics = nullptr)
      : Connector(store, std::vector<Namespace>{ns}, with_metrics(metrics)) {}
  /// A deployment's ranks, in rank order (one per distinct KV slice is
  /// enough): lookup counts a block only when every rank's header verifies;
  /// save and load act on one rank. input_error when ranks is empty, when the
  /// ranks are of different deployments, or lookup_batch is 0.
  Connector(Store& store, std::vector<Namespace> ranks, Options options = {})
      : store_(&store), ranks_(std::move(ranks)), opt_(std::move(options)), state_(std::make_shared<State>()) {
    if (ranks_.empty()) throw input_error("Connector: no namespace given");
    for (std::size_t i = 1; i < ranks_.size(); ++i) {
      if (!(ranks_[i].root() == ranks_[0].root()) || ranks_[i].key_prefix() != ranks_[0].key_prefix() ||
          keyed(ranks_[i]) != keyed(ranks_[0])) {
        throw input_error("ns", "Connector: ns[" + std::to_string(i) +
                                    "] belongs to another deployment than ns[0] (the ranks of one deployment differ "
                                    "only in their shard)");
      }
    }
    if (opt_.lookup_batch == 0) throw input_error("lookup_batch", "Connector: lookup_batch is 0, must be at least 1");
    if (opt_.digest_threads == 0) {
      throw input_error("digest_threads", "Connector: digest_threads is 0, must be at least 1");
    }
    if (opt_.digest_threads > 1) pool_ = std::make_shared<detail::WorkPool>(opt_.digest_threads);
  }

  const Namespace& key_namespace(std::size_t rank = 0) const { return ranks_.at(rank); }
  const std::vector<Namespace>& ranks() const noexcept { return ranks_; }
  Store& store() const noexcept { return *store_; }
  const Options& options() const noexcept { return opt_; }

  /// The same connector (store, options) for weights epoch `epoch`; false-hit
  /// memory and last_error start afresh.
  [[nodiscard]] Connector with_epoch(std::uint64_t epoch) const {
    std::vector<Namespace> rotated;
    rotated.reserve(ranks_.size());
    for (const Namespace& ns : ranks_) rotated.push_back(ns.with_epoch(epoch));
    return Connector(*store_, std::move(rotated), opt_);
  }

  /// The payload size this connector expects of rank's values, if any.
  std::optional<std::uint64_t> payload_size(std::size_t rank = 0) const {
    if (opt_.payload_size) return opt_.payload_size;
    return ranks_.at(rank).payload_size();
  }

  /// The latest store failure (nullptr: none), as thrown by the store.
  std::exception_ptr last_error() const {
    const std::lock_guard<std::mutex> lock(state_->mu);
    return state_->last_error;
  }

  /// Forgets the latest store failure (last_error() is nullptr until the next one).
  void clear_last_error() const {
    const std::lock_guard<std::mutex> lock(state_->mu);
    state_->last_error = nullptr;
  }

  // ---- save ---------------------------------------------------------------------

  /// Stores seal_value(block, payload) of rank under store_key(block), one
  /// put_many for all. Returns how many values the store took.
  std::size_t save(const std::vector<Digest>& blocks, const std::vector<Payload>& payloads,
                   std::size_t rank = 0) const {
    const Namespace& ns = at(rank);
    if (blocks.size() != payloads.size()) {
      throw input_error("payloads", "save: " + std::to_string(blocks.size()) + " block hashes but " +
                                        std::to_string(payloads.size()) + " payloads");
    }
    const std::optional<std::uint64_t> want = payload_size(rank);
    for (std::size_t i = 0; i < payloads.size() && want; ++i) {
      if (payloads[i].size() != *want) {
        throw input_error("payloads", "save: payloads[" + std::to_string(i) + "] has " +
                                          std::to_string(payloads[i].size()) +
                                          " bytes, this deployment's blocks have " + std::to_string(*want));
      }
    }
    const std::vector<std::string> keys = keys_of(ns, blocks);
    return put(keys, [&] {
      std::vector<StoreValue> values;
      values.reserve(blocks.size());
      for (std::size_t i = 0; i < blocks.size(); ++i) {
        values.push_back(store_->allocate_value(static_cast<std::size_t>(value_size(payloads[i].size()))));
        auto* out = const_cast<std::uint8_t*>(values.back().data);  // allocate_value's memory is writable
        seal(ns, blocks[i], payloads[i], out, values.back().size);
      }
      return store_->put_many(keys, values);
    });
  }
  /// One block.
  bool save(const Digest& block, Payload payload, std::size_t rank = 0) const {
    return save(std::vector<Digest>{block}, std::vector<Payload>{payload}, rank) == 1;
  }

  /// save through registered staging memory the caller keeps (the engine's
  /// path: nothing allocated or registered per call, no copy by the store):
  /// block n's payload (its parts, gathered) is copied into
  /// staging.payload(indices[n]) (indices empty: slot n), sealed there while
  /// in cache, and the slots' values written with one write_from. Returns how
  /// many values the store took. input_error, before anything is written, as
  /// for save and save_from, and when a payload does not hold the slots'
  /// payload size or a part lies in the staging memory.
  std::size_t save(const std::vector<Digest>& blocks, const std::vector<Payload>& payloads, const Slots& staging,
                   const std::vector<std::size_t>& indices = {}, std::size_t rank = 0) const {
    const Namespace& ns = at(rank);
    if (blocks.size() != payloads.size()) {
      throw input_error("payloads", "save: " + std::to_string(blocks.size()) + " block hashes but " +
                                        std::to_string(payloads.size()) + " payloads");
    }
    const std::vector<std::size_t> idx = slot_indices(blocks.size(), staging, indices, rank, "save");
    for (std::size_t i = 0; i < payloads.size(); ++i) {
      if (payloads[i].size() != staging.payload_size()) {
        throw input_error("payloads", "save: payloads[" + std::to_string(i) + "] has " +
                                          std::to_string(payloads[i].size()) + " bytes, the staging slots hold " +
                                          std::to_string(staging.payload_size()));
      }
      outside(staging, payloads[i].begin(), payloads[i].end(), "payloads", "save", i);
    }
    auto gather = [&](std::size_t i) {
      auto* at = static_cast<std::uint8_t*>(staging.payload(idx[i]).data);
      for (const ConstBuffer& part : payloads[i]) {
        if (part.size != 0) std::memcpy(at, part.data, part.size);
        at += part.size;
      }
    };
    return seal_and_write(ns, blocks, staging, idx, gather);
  }

  /// The zero-copy save: block n's payload is in slots.payload(indices[n])
  /// (indices empty: slot n). Seals each header in place (the payload is
  /// digested where it lies, nothing is copied) and writes the slots' values
  /// with one write_from. Returns how many values the store took. input_error
  /// when an index is out of range or given twice, or the slots' payload size
  /// is not this deployment's.
  std::size_t save_from(const std::vector<Digest>& blocks, const Slots& slots,
                        const std::vector<std::size_t>& indices = {}, std::size_t rank = 0) const {
    const Namespace& ns = at(rank);
    const std::vector<std::size_t> idx = slot_indices(blocks.size(), slots, indices, rank, "save_from");
    auto in_place = [](std::size_t) {};
    return seal_and_write(ns, blocks, slots, idx, in_place);
  }

  // ---- lookup -------------------------------------------------------------------

  /// The number of leading blocks whose header verifies, for this deployment
  /// and that block, on every rank (and, where the store reports the value's
  /// size or the payload size is known, whose sizes agree): reads the first
  /// envelope_size bytes of each value, lookup_batch blocks per read_prefix_many,
  /// stopping after the batch where the count ends. max_tokens caps the count
  /// at max_tokens / block_size blocks (pass prompt_len - 1).
  std::size_t lookup(const std::vector<Digest>& blocks, std::optional<std::size_t> max_tokens = std::nullopt) const {
    const std::size_t n = max_blocks(blocks.size(), max_tokens);
    ConnectorCall call;
    call.op = ConnectorCall::Op::lookup;
    std::size_t hits = 0;
    std::size_t rejected_blocks = 0;
    const std::size_t shards = ranks_.size();
    for (std::size_t start = 0; start < n; start += opt_.lookup_batch) {
      const std::size_t end = std::min(n, start + opt_.lookup_batch);
      std::vector<std::string> keys;
      keys.reserve((end - start) * shards);
      for (std::size_t b = start; b < end; ++b) {
        for (const Namespace& ns : ranks_) keys.push_back(ns.store_key(blocks[b]));
      }
      std::vector<StoreValue> headers;
      try {
        headers = checked(store_->read_prefix_many(keys, envelope_size), keys.size(), "get_prefix");
      } catch (const store_error&) {
        call.counts[0] = 0;
        call.counts[1] = blocks.size() - rejected_blocks;
        call.counts[2] = rejected_blocks;
        failed(call, std::current_exception());
        return 0;
      }
      bool counting = hits == start;
      for (std::size_t b = start; b < end; ++b) {
        bool block_ok = true;
        std::optional<Verdict> refused;
        for (std::size_t r = 0; r < shards; ++r) {
          StoreValue& h = headers[(b - start) * shards + r];
          if (!h.error.empty()) key_failed(call, h.error, "get_prefix: a key failed");
          if (!h.present) {
            block_ok = false;
            continue;
          }
          Verdict v = check_header(r, h, blocks[b]);
          if (!v.ok()) {
            block_ok = false;
            if (!refused) refused = std::move(v);
          }
        }
        if (refused) {
          ++rejected_blocks;
          call.rejections.push_back(std::move(*refused));
        }
        if (counting && block_ok) {
          ++hits;
        } else {
          counting = false;
        }
      }
      if (hits < end) break;  // the count ended in this batch
    }
    remember(blocks, hits);
    call.counts[0] = hits;
    call.counts[1] = blocks.size() - hits - rejected_blocks;
    call.counts[2] = rejected_blocks;
    done(call);
    return hits;
  }

  /// Like lookup, but counts a block when its keys exist (probe_many), without
  /// reading a header: cheaper, and it counts foreign, stale and damaged values
  /// that a load then rejects. For comparison.
  std::size_t lookup_existing(const std::vector<Digest>& blocks,
                              std::optional<std::size_t> max_tokens = std::nullopt) const {
    const std::size_t n = max_blocks(blocks.size(), max_tokens);
    ConnectorCall call;
    call.op = ConnectorCall::Op::lookup;
    std::vector<std::string> keys;
    keys.reserve(n * ranks_.size());
    for (std::size_t b = 0; b < n; ++b) {
      for (const Namespace& ns : ranks_) keys.push_back(ns.store_key(blocks[b]));
    }
    std::vector<StoreValue> found;
    try {
      if (!keys.empty()) found = checked(store_->probe_many(keys), keys.size(), "exists");
    } catch (const store_error&) {
      call.counts[1] = blocks.size();
      failed(call, std::current_exception());
      return 0;
    }
    std::size_t hits = 0;
    bool counting = true;
    for (std::size_t b = 0; b < n; ++b) {
      for (std::size_t r = 0; r < ranks_.size(); ++r) {
        const StoreValue& v = found[b * ranks_.size() + r];
        if (!v.error.empty()) key_failed(call, v.error, "exists: a key failed");
        counting = counting && v.present;
      }
      if (counting) ++hits;
    }
    remember(blocks, hits);
    call.counts[0] = hits;
    call.counts[1] = blocks.size() - hits;
    done(call);
    return hits;
  }

  // ---- load ---------------------------------------------------------------------

  /// Per block, the verified payload of rank's value inside the value the
  /// store returned (no copy; a value from an unstable store was copied first)
  /// and what happened. One read_many.
  std::vector<LoadedView> load_views(const std::vector<Digest>& blocks, std::size_t rank = 0) const {
    const Namespace& ns = at(rank);
    std::vector<LoadedView> out(blocks.size());
    ConnectorCall call;
    call.op = ConnectorCall::Op::load;
    const std::vector<std::string> keys = keys_of(ns, blocks);
    std::vector<StoreValue> values;
    try {
      if (!keys.empty()) values = checked(store_->read_many(keys), keys.size(), "get");
    } catch (const store_error&) {
      finish_load(call, blocks, out, std::current_exception());
      return out;
    }
    const std::optional<std::uint64_t> want = payload_size(rank);
    serve(
        call, ns, blocks, values, {}, [&](std::size_t) { return want; }, "get: a key failed", out);
    finish_load(call, blocks, out, nullptr);
    return out;
  }

  /// Per block, a copy of the verified payload, or nullopt (missing, rejected,
  /// or the store failed).
  std::vector<std::optional<Bytes>> load(const std::vector<Digest>& blocks, std::size_t rank = 0) const {
    std::vector<std::optional<Bytes>> out(blocks.size());
    std::vector<LoadedView> views = load_views(blocks, rank);
    for (std::size_t i = 0; i < views.size(); ++i) {
      if (!views[i].result.loaded()) continue;
      const auto* p = static_cast<const std::uint8_t*>(views[i].payload.data);
      out[i].emplace(p, p + views[i].payload.size);
    }
    return out;
  }
  std::optional<Bytes> load(const Digest& block, std::size_t rank = 0) const {
    return std::move(load(std::vector<Digest>{block}, rank).front());
  }

  /// Writes each block's verified payload into its destination: the parts
  /// (per-layer K and V, say) whose concatenation is the payload, of exactly
  /// the payload's size in all. Each value is read (read_into, staged in
  /// connector memory, registered with the store where it registers memory)
  /// and verified whole before anything is written; a block that is missing or
  /// rejected (a payload of another size than its destination included:
  /// size_mismatch) leaves every part of its destination untouched.
  /// input_error, before anything is read, when the destinations are not one
  /// per block, a part is null, two parts share memory (two blocks, or two
  /// parts of one, written into the same bytes), or (where this deployment's
  /// payload size is known) a destination does not hold exactly one payload.
  std::vector<LoadResult> load_into(const std::vector<Digest>& blocks,
                                    const std::vector<std::vector<MutableBuffer>>& destinations,
                                    std::size_t rank = 0) const {
    const Namespace& ns = at(rank);
    const std::vector<std::size_t> sizes = destination_sizes(blocks.size(), destinations, payload_size(rank));
    // Staging for a store that reads into memory: connector-owned (registered where the store registers memory).
    std::unique_ptr<std::uint8_t[]> heap;
    std::shared_ptr<RegisteredMemory> registered;
    std::vector<MutableBuffer> stage(blocks.size());
    if (store_->reads_into() && !blocks.empty()) {
      std::size_t total = 0;
      for (std::size_t s : sizes) total += envelope_size + s;
      std::uint8_t* base = nullptr;
      if (store_->registers_memory()) {
        registered = store_->allocate_memory(total);
        base = static_cast<std::uint8_t*>(registered->buffer().data);
      } else {
        heap.reset(new std::uint8_t[total]);
        base = heap.get();
      }
      for (std::size_t i = 0, off = 0; i < blocks.size(); off += envelope_size + sizes[i], ++i) {
        stage[i] = {base + off, envelope_size + sizes[i]};
      }
    }
    std::vector<LoadedView> out(blocks.size());
    read_verified(ns, blocks, stage, sizes, out, scatter_into(destinations));
    return results(out);
  }

  /// load_into the destinations through registered staging memory the caller
  /// keeps (the engine's path: no allocation or registration per call, no
  /// copy by the store): block n's value is read into
  /// staging.value(indices[n]) (indices empty: slot n) with one read_into,
  /// verified there, and its payload copied into destinations[n] right after
  /// it verifies, while it is in cache. A block that is missing or rejected
  /// leaves every part of its destination untouched (its slot may hold the
  /// rejected bytes). input_error, before anything is read, as for load_into
  /// with destinations and with Slots, and when a part lies in the staging
  /// memory or a destination does not hold the slots' payload size.
  std::vector<LoadResult> load_into(const std::vector<Digest>& blocks,
                                    const std::vector<std::vector<MutableBuffer>>& destinations, const Slots& staging,
                                    const std::vector<std::size_t>& indices = {}, std::size_t rank = 0) const {
    const Namespace& ns = at(rank);
    const std::vector<std::size_t> idx = slot_indices(blocks.size(), staging, indices, rank, "load_into");
    const std::vector<std::size_t> sizes = destination_sizes(blocks.size(), destinations, staging.payload_size());
    for (std::size_t i = 0; i < destinations.size(); ++i) {
      outside(staging, destinations[i].begin(), destinations[i].end(), "buffers", "load_into", i);
    }
    std::vector<MutableBuffer> into(blocks.size());
    for (std::size_t i = 0; i < blocks.size(); ++i) into[i] = staging.value(idx[i]);
    std::vector<LoadedView> out(blocks.size());
    read_verified(ns, blocks, into, sizes, out, scatter_into(destinations));
    return results(out);
  }

  /// The zero-copy load: reads block n's value into slots.value(indices[n])
  /// (indices empty: slot n) with one read_into (a store with registered
  /// memory writes it there, no copy) and verifies it there. A block is loaded
  /// only when its header and payload verify: its payload is then
  /// slots.payload(indices[n]). A slot whose block is missing or rejected may
  /// hold the rejected or partly read bytes: never use it. (A store without
  /// the capability returns its values elsewhere: they are verified there and
  /// only verified payloads are copied into the slots.) input_error as for
  /// save_from.
  std::vector<LoadResult> load_into(const std::vector<Digest>& blocks, const Slots& slots,
                                    const std::vector<std::size_t>& indices = {}, std::size_t rank = 0) const {
    const Namespace& ns = at(rank);
    const std::vector<std::size_t> idx = slot_indices(blocks.size(), slots, indices, rank, "load_into");
    std::vector<MutableBuffer> into(blocks.size());
    for (std::size_t i = 0; i < blocks.size(); ++i) into[i] = slots.value(idx[i]);
    std::vector<LoadedView> out(blocks.size());
    read_verified(ns, blocks, into, std::vector<std::size_t>(blocks.size(), slots.payload_size()), out);
    for (std::size_t i = 0; i < blocks.size(); ++i) {
      const MutableBuffer p = slots.payload(idx[i]);
      if (out[i].result.loaded() && out[i].payload.data != p.data) std::memcpy(p.data, out[i].payload.data, p.size);
    }
    return results(out);
  }

  /// One contiguous destination per block.
  std::vector<LoadResult> load_into(const std::vector<Digest>& blocks, const std::vector<MutableBuffer>& destinations,
                                    std::size_t rank = 0) const {
    std::vector<std::vector<MutableBuffer>> parts;
    parts.reserve(destinations.size());
    for (const MutableBuffer& d : destinations) parts.push_back({d});
    return load_into(blocks, parts, rank);
  }

 private:
  struct NoCopy {  // serve's on_loaded when the payload stays where it was verified
    void operator()(std::size_t, const ConstBuffer&) const {}
  };
  struct State {
    std::mutex mu;
    std::list<Digest> order;  // most recent last
    std::unordered_map<Digest, std::list<Digest>::iterator, detail::DigestHash> counted;
    std::exception_ptr last_error;
    std::uint64_t failures = 0;
    std::uint64_t unlogged = 0;
    std::chrono::steady_clock::time_point logged_at{};
    bool logged = false;
  };
  static constexpr std::size_t counted_limit = std::size_t{1} << 16;  // hashes remembered for false hits

  static Options with_metrics(Metrics* m) {
    Options o;
    o.metrics = m;
    return o;
  }
  static bool keyed(const Namespace& ns) {
    if constexpr (std::is_same_v<Namespace, AnyKeyNamespace>) {
      return ns.keyed();
    } else {
      return Namespace::namespace_kind == NamespaceKind::keyed;
    }
  }

  const Namespace& at(std::size_t rank) const {
    if (rank >= ranks_.size()) {
      throw input_error("rank",
                        "rank is " + std::to_string(rank) + ", must lie in [0, " + std::to_string(ranks_.size()) + ")");
    }
    return ranks_[rank];
  }
  std::size_t max_blocks(std::size_t n, std::optional<std::size_t> max_tokens) const {
    if (!max_tokens) return n;
    return std::min<std::size_t>(n, *max_tokens / ranks_[0].block_size());
  }
  static std::vector<std::string> keys_of(const Namespace& ns, const std::vector<Digest>& blocks) {
    std::vector<std::string> out;
    out.reserve(blocks.size());
    for (const Digest& b : blocks) out.push_back(ns.store_key(b));
    return out;
  }
  static std::vector<StoreValue> checked(std::vector<StoreValue> replies, std::size_t n, const char* call) {
    if (replies.size() != n) {
      throw store_error("protocol", std::string(call) + " returned " + std::to_string(replies.size()) +
                                        " replies for " + std::to_string(n) + " keys");
    }
    return replies;
  }
  static bool staged(const StoreValue& v, const MutableBuffer& stage) {
    const auto* begin = static_cast<const std::uint8_t*>(stage.data);
    return begin != nullptr && v.data >= begin && v.data <= begin + stage.size;
  }
  // The one seal step of every save: the value of block (payload, header
  // sealed over it) written to out[0, capacity); in place when the payload
  // already lies at out + envelope_size (save_from).
  static void seal(const Namespace& ns, const Digest& block, Payload payload, std::uint8_t* out, std::size_t capacity) {
    (void)ns.seal_value(block, payload, out, capacity);
  }

  // The one open step of every load: the verdict on value v of block, and the
  // verified payload inside it. into: the memory v was read into (empty: none);
  // a value larger than into did not fit and is never served. expect: the
  // payload size the caller can take, if known.
  static OpenedValue open(const Namespace& ns, const StoreValue& v, const MutableBuffer& into, const Digest& block,
                          std::optional<std::uint64_t> expect) {
    OpenedValue o;
    if (staged(v, into) && v.size > into.size) {
      const std::size_t room = into.size - std::min<std::size_t>(into.size, envelope_size);
      const std::size_t len = std::min<std::size_t>(envelope_size, into.size);
      o.verdict = ns.verify_header(v.data, len, block);
      if (o.verdict.ok()) {  // did not fit: never served; named by the header's size where it differs
        Verdict s = ns.verify(v.data, len, block, room);
        o.verdict = s.reason == Reason::size_mismatch ? std::move(s) : Verdict{Reason::size_mismatch, "payload_size"};
      }
      return o;
    }
    if (ns.confidential()) return open_confidential(ns, v, into, block, expect);
    o = ns.open_value(v.data, v.size, block);
    if (o.ok() && expect && o.payload.size != *expect) {
      o.verdict = ns.verify(v.data, envelope_size, block, *expect);
      if (o.verdict.ok()) o.verdict = {Reason::size_mismatch, "payload_size"};
      o.payload = {};
    }
    return o;
  }

  // A confidential value: its size checked before anything is decrypted;
  // decrypted in place when it lies in memory read into for the connector
  // (staging or the caller's slot: a rejected one is left as read), else into
  // new memory (OpenedValue::plaintext).
  static OpenedValue open_confidential(const Namespace& ns, const StoreValue& v, const MutableBuffer& into,
                                       const Digest& block, std::optional<std::uint64_t> expect) {
    OpenedValue o;
    if (expect && v.size >= envelope_size && v.size - envelope_size != *expect) {
      o.verdict = ns.verify(v.data, envelope_size, block, *expect);
      if (o.verdict.reason == Reason::payload_mismatch) o.verdict = {Reason::size_mismatch, "payload_size"};
      return o;
    }
    if (staged(v, into)) {
      auto* base = static_cast<std::uint8_t*>(into.data);
      return ns.open_in_place(base + (v.data - base), v.size, block);
    }
    return ns.open_value(v.data, v.size, block);
  }
  struct PlaintextOwner : StoreValue::Owner {
    explicit PlaintextOwner(std::shared_ptr<const Bytes> b) : bytes(std::move(b)) {}
    std::shared_ptr<const Bytes> bytes;
  };

  // Serves the values one read returned for blocks: a key's error recorded,
  // each present value opened (verified) in into[i] (no staging when into is
  // empty) against expect(i); out[i] loaded with a view of the verified
  // payload, or rejected. on_loaded(i, payload) runs as soon as block i
  // verifies (its bytes still in cache).
  template <class Expect, class OnLoaded = NoCopy>
  void serve(ConnectorCall& call, const Namespace& ns, const std::vector<Digest>& blocks,
             std::vector<StoreValue>& values, const std::vector<MutableBuffer>& into, Expect expect, const char* failed,
             std::vector<LoadedView>& out, OnLoaded&& on_loaded = {}) const {
    std::vector<std::size_t> present;
    std::size_t bytes = 0;
    for (std::size_t i = 0; i < blocks.size(); ++i) {
      StoreValue& v = values[i];
      if (!v.error.empty()) key_failed(call, v.error, failed);
      if (!v.present) continue;
      if (!staged(v, into.empty() ? MutableBuffer{} : into[i])) pin(v);
      present.push_back(i);
      bytes += v.size;
    }
    auto one = [&](std::size_t k) {
      const std::size_t i = present[k];
      StoreValue& v = values[i];
      OpenedValue o = open(ns, v, into.empty() ? MutableBuffer{} : into[i], blocks[i], expect(i));
      if (!o.ok()) {
        out[i].result = {LoadResult::Status::rejected, std::move(o.verdict), 0};
        return;
      }
      out[i].payload = o.payload;
      on_loaded(i, o.payload);
      if (o.plaintext) {
        out[i].owner = std::make_shared<const PlaintextOwner>(std::move(o.plaintext));
      } else {
        out[i].owner = std::move(v.owner);
      }
      out[i].result = {LoadResult::Status::loaded, std::move(o.verdict), o.payload.size};
    };
    each(present.size(), bytes, one);
  }

  // Block n's payload put in slots.payload(idx[n]) by fill(n), then sealed
  // there, on the digest threads; the slots' values written with one
  // write_from, counted as one save.
  template <class Fill>
  std::size_t seal_and_write(const Namespace& ns, const std::vector<Digest>& blocks, const Slots& slots,
                             const std::vector<std::size_t>& idx, Fill& fill) const {
    const std::vector<std::string> keys = keys_of(ns, blocks);
    return put(keys, [&] {
      auto one = [&](std::size_t i) {
        fill(i);
        const MutableBuffer v = slots.value(idx[i]);
        const MutableBuffer p = slots.payload(idx[i]);
        seal(ns, blocks[i], Payload(p.data, p.size), static_cast<std::uint8_t*>(v.data), v.size);
      };
      each(blocks.size(), blocks.size() * slots.payload_size(), one);
      std::vector<ConstBuffer> values;
      values.reserve(blocks.size());
      for (std::size_t i = 0; i < blocks.size(); ++i) {
        const MutableBuffer v = slots.value(idx[i]);
        values.push_back({v.data, v.size});
      }
      return store_->write_from(keys, values);
    });
  }

  // f(0 .. n-1), on the digest threads when there are some and the n items
  // hold at least parallel_digest_bytes (else, or when another call has them,
  // on this thread); an item's exception is rethrown after all have run (the
  // first, in item order).
  template <class F>
  void each(std::size_t n, std::size_t bytes, F& f) const {
    if (!pool_ || n < 2 || bytes < parallel_digest_bytes) {
      for (std::size_t i = 0; i < n; ++i) f(i);
      return;
    }
    std::vector<std::exception_ptr> errors(n);
    auto guarded = [&](std::size_t i) {  // the pool's tasks must not throw
      try {
        f(i);
      } catch (...) {
        errors[i] = std::current_exception();
      }
    };
    pool_->run_or_inline(n, guarded);
    for (const std::exception_ptr& e : errors) {
      if (e) std::rethrow_exception(e);
    }
  }

  // One read_into of blocks' keys into `into` (empty entries: no staging),
  // each value verified (open) against sizes[i]: out[i] loaded with a view of
  // the verified payload, rejected or missing; recorded as one load.
  // on_loaded as for serve.
  template <class OnLoaded = NoCopy>
  void read_verified(const Namespace& ns, const std::vector<Digest>& blocks, const std::vector<MutableBuffer>& into,
                     const std::vector<std::size_t>& sizes, std::vector<LoadedView>& out,
                     OnLoaded&& on_loaded = {}) const {
    ConnectorCall call;
    call.op = ConnectorCall::Op::load;
    const std::vector<std::string> keys = keys_of(ns, blocks);
    std::vector<StoreValue> values;
    try {
      if (!keys.empty()) values = checked(store_->read_into(keys, into), keys.size(), "get_into");
    } catch (const store_error&) {
      finish_load(call, blocks, out, std::current_exception());
      return;
    }
    serve(
        call, ns, blocks, values, into, [&](std::size_t i) { return std::optional<std::uint64_t>(sizes[i]); },
        "get_into: a key failed", out, on_loaded);
    finish_load(call, blocks, out, nullptr);
  }

  // Stores the values make() seals (one store write): counted as one save.
  template <class Make>
  std::size_t put(const std::vector<std::string>& keys, Make&& make) const {
    ConnectorCall call;
    call.op = ConnectorCall::Op::save;
    std::size_t saved = 0;
    try {
      const std::vector<StoreWrite> written = make();
      if (written.size() != keys.size()) {
        throw store_error("protocol", "put: " + std::to_string(written.size()) + " replies for " +
                                          std::to_string(keys.size()) + " keys");
      }
      for (const StoreWrite& w : written) {
        if (w.stored) ++saved;
        if (!w.error.empty()) key_failed(call, w.error, "put: a key failed");
      }
    } catch (const store_error&) {
      call.counts[0] = 0;
      call.counts[1] = keys.size();
      failed(call, std::current_exception());
      return 0;
    }
    call.counts[0] = saved;
    call.counts[1] = keys.size() - saved;
    done(call);
    return saved;
  }

  // The slot of each block: indices (empty: 0..n-1), checked.
  std::vector<std::size_t> slot_indices(std::size_t n, const Slots& slots, const std::vector<std::size_t>& indices,
                                        std::size_t rank, const char* call) const {
    std::vector<std::size_t> idx = indices;
    if (idx.empty()) {
      for (std::size_t i = 0; i < n; ++i) idx.push_back(i);
    }
    if (idx.size() != n) {
      throw input_error("indices", std::string(call) + ": " + std::to_string(n) + " blocks but " +
                                       std::to_string(idx.size()) + " slot indices");
    }
    std::vector<bool> used(slots.count(), false);
    for (std::size_t i : idx) {
      if (i >= slots.count()) {
        throw input_error("indices", std::string(call) + ": slot " + std::to_string(i) + " is out of range [0, " +
                                         std::to_string(slots.count()) + ")");
      }
      if (used[i]) throw input_error("indices", std::string(call) + ": slot " + std::to_string(i) + " is given twice");
      used[i] = true;
    }
    const std::optional<std::uint64_t> want = payload_size(rank);
    if (want && *want != slots.payload_size()) {
      throw input_error("slots", std::string(call) + ": the slots hold " + std::to_string(slots.payload_size()) +
                                     "-byte payloads, this deployment's blocks have " + std::to_string(*want));
    }
    return idx;
  }

  // input_error naming field[i][j] when part j of [begin, end) shares memory with the staging slots.
  template <class It>
  static void outside(const Slots& staging, It begin, It end, const char* field, const char* call, std::size_t i) {
    const MutableBuffer memory = staging.memory().buffer();
    const auto lo = reinterpret_cast<std::uintptr_t>(memory.data);
    const std::uintptr_t hi = lo + memory.size;
    for (std::size_t j = 0; begin != end; ++begin, ++j) {
      const auto b = reinterpret_cast<std::uintptr_t>(begin->data);
      if (begin->size != 0 && b < hi && lo < b + begin->size) {
        throw input_error(field, std::string(call) + ": " + field + "[" + std::to_string(i) + "][" + std::to_string(j) +
                                     "] lies in the staging slots");
      }
    }
  }
  // Copies a verified payload into destinations[i], part by part.
  static auto scatter_into(const std::vector<std::vector<MutableBuffer>>& destinations) {
    return [&destinations](std::size_t i, const ConstBuffer& payload) {
      const auto* src = static_cast<const std::uint8_t*>(payload.data);
      for (const MutableBuffer& d : destinations[i]) {
        if (d.size != 0) std::memcpy(d.data, src, d.size);
        src += d.size;
      }
    };
  }
  // Each destination's size in all, checked (one per block, no null part,
  // want bytes where want is known, no two parts sharing memory).
  static std::vector<std::size_t> destination_sizes(std::size_t n,
                                                    const std::vector<std::vector<MutableBuffer>>& destinations,
                                                    std::optional<std::uint64_t> want) {
    if (destinations.size() != n) {
      throw input_error("buffers", "load_into: " + std::to_string(n) + " blocks but " +
                                       std::to_string(destinations.size()) + " destinations");
    }
    std::vector<std::size_t> sizes(n, 0);
    for (std::size_t i = 0; i < n; ++i) {
      for (const MutableBuffer& b : destinations[i]) {
        if (b.data == nullptr && b.size != 0) {
          throw input_error("buffers", "load_into: buffers[" + std::to_string(i) + "] has a null part");
        }
        sizes[i] += b.size;
      }
      if (want && sizes[i] != *want) {
        throw input_error("buffers", "load_into: buffers[" + std::to_string(i) + "] holds " + std::to_string(sizes[i]) +
                                         " bytes, this deployment's blocks have " + std::to_string(*want));
      }
    }
    check_disjoint(destinations);
    return sizes;
  }

  // input_error naming them when two destination parts share a byte: the
  // caller's bug, refused before anything is read (a later block would
  // overwrite an earlier one's verified bytes).
  static void check_disjoint(const std::vector<std::vector<MutableBuffer>>& dest) {
    struct Part {
      std::uintptr_t begin, end;
      std::size_t block, part;
    };
    std::vector<Part> parts;
    for (std::size_t i = 0; i < dest.size(); ++i) {
      for (std::size_t j = 0; j < dest[i].size(); ++j) {
        const auto begin = reinterpret_cast<std::uintptr_t>(dest[i][j].data);
        if (dest[i][j].size != 0) parts.push_back({begin, begin + dest[i][j].size, i, j});
      }
    }
    const auto by_address = [](const Part& a, const Part& b) { return a.begin < b.begin; };
    if (!std::is_sorted(parts.begin(), parts.end(), by_address)) {  // an engine's blocks: mostly in order
      std::sort(parts.begin(), parts.end(), by_address);
    }
    const auto name = [&](const Part& p) {
      std::string n = "buffers[" + std::to_string(p.block) + "]";
      if (dest[p.block].size() > 1) n += "[" + std::to_string(p.part) + "]";
      return n;
    };
    for (std::size_t k = 1, far = 0; k < parts.size(); ++k) {  // far: the part reaching furthest so far
      if (parts[k].begin < parts[far].end) {
        const bool first =
            std::make_pair(parts[far].block, parts[far].part) < std::make_pair(parts[k].block, parts[k].part);
        const Part& a = first ? parts[far] : parts[k];
        const Part& b = first ? parts[k] : parts[far];
        throw input_error("buffers", "load_into: " + name(b) + " overlaps " + name(a) +
                                         " (two destinations written into the same memory)");
      }
      if (parts[k].end > parts[far].end) far = k;
    }
  }

  // A value whose bytes may change under the connector is copied first.
  static void pin(StoreValue& v) {
    if (v.stable) return;
    StoreValue c = StoreValue::owned(Bytes(v.data, v.data + v.size));
    c.total_size = v.total_size;
    v = std::move(c);
  }

  // A header's verdict on rank r, and where the store told the value's size,
  // or the payload size is known, whether the header agrees.
  Verdict check_header(std::size_t r, StoreValue& h, const Digest& block) const {
    const Namespace& ns = ranks_[r];
    std::optional<std::uint64_t> total = h.total_size;
    std::size_t len = h.size;
    if (len > envelope_size) {
      if (!total) total = len;
      len = envelope_size;
    }
    pin(h);
    Verdict v = ns.verify_header(h.data, len, block);
    if (!v.ok()) return v;
    if (total) {
      const std::uint64_t payload = *total >= envelope_size ? *total - envelope_size : 0;
      Verdict s = ns.verify(h.data, len, block, payload);
      if (s.reason == Reason::size_mismatch) return s;
    }
    if (const std::optional<std::uint64_t> want = payload_size(r)) {
      Verdict s = ns.verify(h.data, len, block, *want);
      if (s.reason == Reason::size_mismatch) return s;
    }
    return v;
  }

  void remember(const std::vector<Digest>& blocks, std::size_t n) const {
    State& s = *state_;
    const std::lock_guard<std::mutex> lock(s.mu);
    for (std::size_t i = 0; i < n; ++i) {
      auto it = s.counted.find(blocks[i]);
      if (it != s.counted.end()) {
        s.order.splice(s.order.end(), s.order, it->second);
        continue;
      }
      s.order.push_back(blocks[i]);
      s.counted.emplace(blocks[i], std::prev(s.order.end()));
      if (s.counted.size() > counted_limit) {
        s.counted.erase(s.order.front());
        s.order.pop_front();
      }
    }
  }
  // How many of these blocks a lookup counted (each forgotten once told).
  std::size_t false_hits(const std::vector<Digest>& blocks, const std::vector<LoadedView>& out) const {
    State& s = *state_;
    const std::lock_guard<std::mutex> lock(s.mu);
    std::size_t n = 0;
    for (std::size_t i = 0; i < blocks.size(); ++i) {
      if (out[i].result.loaded()) continue;
      auto it = s.counted.find(blocks[i]);
      if (it == s.counted.end()) continue;
      s.order.erase(it->second);
      s.counted.erase(it);
      ++n;
    }
    return n;
  }

  void finish_load(ConnectorCall& call, const std::vector<Digest>& blocks, std::vector<LoadedView>& out,
                   std::exception_ptr error) const {
    std::size_t loaded = 0;
    for (const LoadedView& v : out) {
      if (v.result.loaded()) {
        ++loaded;
        call.payload_bytes += v.result.nbytes;
      } else if (v.result.status == LoadResult::Status::rejected) {
        call.rejections.push_back(v.result.verdict);
      }
    }
    call.counts[0] = loaded;
    call.counts[2] = call.rejections.size();
    call.counts[1] = blocks.size() - loaded - call.counts[2];
    call.false_hits = false_hits(blocks, out);
    if (error) {
      failed(call, error);
    } else {
      done(call);
    }
  }
  static std::vector<LoadResult> results(const std::vector<LoadedView>& out) {
    std::vector<LoadResult> r;
    r.reserve(out.size());
    for (const LoadedView& v : out) r.push_back(v.result);
    return r;
  }

  // One key failed: counted and logged; the rest of the batch stands (last_error is
  // for failed calls: the store keeps its own per-key record).
  void key_failed(ConnectorCall& call, const std::string& kind, const char* what) const {
    const store_error e(kind, std::string(what) + " (" + kind + ")");
    call.store_errors.emplace_back(e.kind());
    note_failure(nullptr, e.kind(), e.what());
  }
  // The store call failed: recorded, then kept and logged, or rethrown.
  void failed(ConnectorCall& call, std::exception_ptr error) const {
    std::string kind = "other";
    std::string message;
    try {
      std::rethrow_exception(error);
    } catch (const store_error& e) {
      kind = std::string(e.kind());
      message = e.what();
    }
    call.store_errors.push_back(kind);
    done(call);
    note_failure(error, kind, message);
    if (opt_.raise_errors) std::rethrow_exception(error);
  }
  void note_failure(const std::exception_ptr& error, std::string_view kind, const std::string& message) const {
    State& s = *state_;
    StoreFailureLog line;
    {
      const std::lock_guard<std::mutex> lock(s.mu);
      if (error) s.last_error = error;
      ++s.failures;
      ++s.unlogged;
      const auto now = std::chrono::steady_clock::now();
      if (!opt_.log || (s.logged && now - s.logged_at < opt_.log_interval)) return;
      line = {std::string(kind), s.unlogged, s.failures, message};
      s.unlogged = 0;
      s.logged = true;
      s.logged_at = now;
    }
    opt_.log(line);
  }
  void done(const ConnectorCall& call) const {
    if (opt_.metrics != nullptr) call.record(*opt_.metrics);
    if (opt_.observer) opt_.observer(call);
  }

  Store* store_;
  std::vector<Namespace> ranks_;
  Options opt_;
  std::shared_ptr<State> state_;
  std::shared_ptr<detail::WorkPool> pool_;  // digest_threads > 1
};

/// Connector::lookup over ranks given as pointers (kept for existing callers):
/// the number of leading blocks whose header verifies on every rank.
template <class Hash>
std::size_t lookup_all_ranks(Store& store, const std::vector<const KeyNamespace<Hash>*>& ranks,
                             const std::vector<Digest>& blocks, Metrics* metrics = nullptr) {
  if (ranks.empty()) return 0;
  std::vector<KeyNamespace<Hash>> copies;
  copies.reserve(ranks.size());
  for (const KeyNamespace<Hash>* ns : ranks) copies.push_back(*ns);
  typename Connector<Hash>::Options opt;
  opt.metrics = metrics;
  return Connector<Hash>(store, std::move(copies), opt).lookup(blocks);
}

KVKEY_END_NAMESPACE

#endif  // KVKEY_CONNECTOR_HPP
