// SPDX-License-Identifier: Apache-2.0
//
// File: kvkey/metrics.hpp
//
// kvkey::Metrics: the counters a connector keeps about its store traffic
// (lookups, loads, saves, rejections by reason and field, false hits, verified
// payload bytes, store errors by kind) and their text exposition in the
// Prometheus/OpenMetrics format under the kvkey_ prefix. Recording is a few
// relaxed atomic additions, never a lock or an allocation, so one Metrics can
// be shared by every thread of a connector. Labels come from fixed tables, so
// the number of series is bounded. The metric names and what to alert on are
// in docs/operations.md ("What to monitor").
#ifndef KVKEY_METRICS_HPP
#define KVKEY_METRICS_HPP

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <iterator>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kvkey/config.hpp"
#include "kvkey/envelope.hpp"
#include "kvkey/errors.hpp"
#include "kvkey/identity.hpp"

KVKEY_BEGIN_NAMESPACE

/// Every rejection reason, in Reason order (Reason::ok excluded): the values of
/// the `reason` label.
inline constexpr std::array<Reason, 7> rejection_reasons = {
    Reason::malformed,     Reason::unsupported_version, Reason::identity_mismatch, Reason::block_mismatch,
    Reason::size_mismatch, Reason::payload_mismatch,    Reason::not_granted};

/// The values of the `field` label of kvkey_rejected_blocks_total: every
/// identity field (identity_field_names()), the fields a Verdict names outside
/// the identity ("shard", "block_hash", "payload_size", "payload", the
/// envelope.* fields, a connector's "value.size"), and "other" last for
/// anything else.
[[nodiscard]] inline const std::vector<std::string_view>& metrics_field_names() {
  static const std::vector<std::string_view> names = [] {
    std::vector<std::string_view> out(identity_field_names());
    for (std::string_view f :
         {"shard", "block_hash", "payload_size", "payload", "value.size", "envelope.size", "envelope.magic",
          "envelope.format_version", "envelope.identity", "envelope.padding", "envelope.namespace_kind",
          "envelope.integrity_mode", "envelope.nonce", "envelope.payload_digest", "scope.readers", "other"}) {
      out.push_back(f);
    }
    return out;
  }();
  return names;
}

/// A copy of every counter of a Metrics at one moment (each counter read once,
/// relaxed: counters recorded concurrently may or may not be included).
struct MetricsSnapshot {
  /// One nonzero cell of kvkey_rejected_blocks_total.
  struct Rejection {
    Reason reason = Reason::malformed;
    std::string_view field;  ///< an entry of metrics_field_names()
    std::uint64_t count = 0;
  };

  std::uint64_t lookups = 0;  ///< record_lookup calls
  std::uint64_t lookup_hit = 0, lookup_miss = 0, lookup_rejected = 0;
  std::uint64_t loads = 0;  ///< record_load calls
  std::uint64_t load_loaded = 0, load_missing = 0, load_rejected = 0;
  std::uint64_t saves = 0;  ///< record_save calls
  std::uint64_t save_saved = 0, save_failed = 0;
  std::uint64_t false_hits = 0;
  std::uint64_t payload_verified_bytes = 0;
  std::array<std::uint64_t, store_error_kinds.size()> store_errors{};  ///< in store_error_kinds order
  std::vector<Rejection> rejections;  ///< nonzero cells, in rejection_reasons x metrics_field_names() order

  /// The count of one (reason, field) cell; 0 when never recorded. A field
  /// outside metrics_field_names() reads the "other" cell.
  [[nodiscard]] std::uint64_t rejected(Reason reason, std::string_view field) const noexcept;
  /// The sum of every cell of kvkey_rejected_blocks_total.
  [[nodiscard]] std::uint64_t rejected_total() const noexcept;
  /// The count of one store-error kind (an unknown kind reads "other").
  [[nodiscard]] std::uint64_t store_error(std::string_view kind) const noexcept;
};

/// Connector counters. Every record_* is noexcept, lock-free and allocation
/// free (relaxed atomic additions); render() and snapshot() may run at any time
/// from any thread. Not copyable or movable: share it by reference or pointer.
class Metrics {
 public:
  Metrics()
      : fields_(&metrics_field_names()),
        rejected_(new std::atomic<std::uint64_t>[rejection_reasons.size() * fields_->size()]()) {}
  Metrics(const Metrics&) = delete;
  Metrics& operator=(const Metrics&) = delete;

  /// One lookup call: of the blocks it asked about, `hit` were counted as
  /// reusable, `miss` were absent, `rejected` were present but refused.
  void record_lookup(std::size_t hit, std::size_t miss, std::size_t rejected) noexcept {
    add_call(C::lookups, {hit, miss, rejected});
  }
  /// One load call: blocks loaded (verified), missing, rejected.
  void record_load(std::size_t loaded, std::size_t missing, std::size_t rejected) noexcept {
    add_call(C::loads, {loaded, missing, rejected});
  }
  /// One save call: blocks stored and blocks not stored.
  void record_save(std::size_t saved, std::size_t failed) noexcept { add_call(C::saves, {saved, failed, 0}); }
  /// One rejected block, by the verdict's reason and field (a field outside
  /// metrics_field_names() counts as "other"). An ok verdict records nothing.
  void record_rejection(const Verdict& v) noexcept { record_rejection(v.reason, v.field); }
  /// The same with the reason and field given apart.
  void record_rejection(Reason reason, std::string_view field) noexcept {
    const std::size_t r = reason_index(reason);
    if (r == rejection_reasons.size()) return;  // ok (or not a reason): not a rejection
    add(rejected_[r * fields_->size() + field_index(*fields_, field)], 1);
  }
  /// Blocks a lookup counted as reusable that the load then found missing or rejected.
  void record_false_hits(std::size_t n) noexcept { add(counter(C::false_hits), n); }
  /// Payload bytes that were verified (and so served).
  void record_payload_bytes(std::uint64_t n) noexcept { add(counter(C::payload_verified_bytes), n); }
  /// One store error, by kind (store_error_kinds; anything else is "other").
  void record_store_error(std::string_view kind) noexcept { add(store_errors_[detail::store_error_index(kind)], 1); }

  /// Every counter, read once each.
  [[nodiscard]] MetricsSnapshot snapshot() const {
    MetricsSnapshot s;
    for (std::size_t i = 0; i < counters_.size(); ++i) s.*snapshot_fields[i] = get(counters_[i]);
    for (std::size_t k = 0; k < store_error_kinds.size(); ++k) s.store_errors[k] = get(store_errors_[k]);
    for (std::size_t r = 0; r < rejection_reasons.size(); ++r) {
      for (std::size_t f = 0; f < fields_->size(); ++f) {
        const std::uint64_t n = get(rejected_[r * fields_->size() + f]);
        if (n != 0) s.rejections.push_back({rejection_reasons[r], (*fields_)[f], n});
      }
    }
    return s;
  }

  /// The counters in the Prometheus text exposition format (version 0.0.4,
  /// which OpenMetrics parsers accept): `# HELP` and `# TYPE` lines, counters
  /// named kvkey_*_total. kvkey_rejected_blocks_total has one series per
  /// nonzero (reason, field) cell; every other labelled counter lists all of
  /// its label values.
  [[nodiscard]] std::string render() const { return render(snapshot()); }

  /// The exposition of a snapshot (render() renders a fresh one).
  [[nodiscard]] static std::string render(const MetricsSnapshot& s);

  /// The index of a field in `fields`, or of "other" (the last entry).
  static std::size_t field_index(const std::vector<std::string_view>& fields, std::string_view field) noexcept {
    std::size_t f = 0;
    while (f + 1 < fields.size() && fields[f] != field) ++f;
    return f;
  }

 private:
  using Counter = std::atomic<std::uint64_t>;
  // The unlabelled counters and the cells of the per-result ones: a call
  // counter followed by its (up to three) results, in MetricsSnapshot order.
  enum class C : std::size_t {
    lookups,
    lookup_hit,
    lookup_miss,
    lookup_rejected,
    loads,
    load_loaded,
    load_missing,
    load_rejected,
    saves,
    save_saved,
    save_failed,
    false_hits,
    payload_verified_bytes,
    count_
  };
  static constexpr std::uint64_t MetricsSnapshot::*snapshot_fields[] = {&MetricsSnapshot::lookups,
                                                                        &MetricsSnapshot::lookup_hit,
                                                                        &MetricsSnapshot::lookup_miss,
                                                                        &MetricsSnapshot::lookup_rejected,
                                                                        &MetricsSnapshot::loads,
                                                                        &MetricsSnapshot::load_loaded,
                                                                        &MetricsSnapshot::load_missing,
                                                                        &MetricsSnapshot::load_rejected,
                                                                        &MetricsSnapshot::saves,
                                                                        &MetricsSnapshot::save_saved,
                                                                        &MetricsSnapshot::save_failed,
                                                                        &MetricsSnapshot::false_hits,
                                                                        &MetricsSnapshot::payload_verified_bytes};
  static_assert(std::size(snapshot_fields) == static_cast<std::size_t>(C::count_), "one field per counter");

  Counter& counter(C c) noexcept { return counters_[static_cast<std::size_t>(c)]; }
  // One call of kind `call` and its blocks by result (the cells after it; saves have two).
  void add_call(C call, std::array<std::size_t, 3> results) noexcept {
    const auto first = static_cast<std::size_t>(call);
    add(counters_[first], 1);
    const std::size_t cells = call == C::saves ? 2 : 3;
    for (std::size_t r = 0; r < cells; ++r) add(counters_[first + 1 + r], results[r]);
  }
  static void add(Counter& c, std::uint64_t n) noexcept {
    if (n != 0) c.fetch_add(n, std::memory_order_relaxed);
  }
  static std::uint64_t get(const Counter& c) noexcept { return c.load(std::memory_order_relaxed); }
  static std::size_t reason_index(Reason reason) noexcept {
    std::size_t r = 0;
    while (r < rejection_reasons.size() && rejection_reasons[r] != reason) ++r;
    return r;
  }

  std::array<Counter, static_cast<std::size_t>(C::count_)> counters_{};
  std::array<Counter, store_error_kinds.size()> store_errors_{};
  const std::vector<std::string_view>* fields_;
  std::unique_ptr<Counter[]> rejected_;  // rejection_reasons x fields_, row-major
};

inline std::uint64_t MetricsSnapshot::rejected(Reason reason, std::string_view field) const noexcept {
  const std::vector<std::string_view>& fields = metrics_field_names();
  const std::string_view name = fields[Metrics::field_index(fields, field)];
  for (const Rejection& r : rejections) {
    if (r.reason == reason && r.field == name) return r.count;
  }
  return 0;
}

inline std::uint64_t MetricsSnapshot::rejected_total() const noexcept {
  std::uint64_t n = 0;
  for (const Rejection& r : rejections) n += r.count;
  return n;
}

inline std::uint64_t MetricsSnapshot::store_error(std::string_view kind) const noexcept {
  return store_errors[detail::store_error_index(kind)];
}

namespace detail {

// One counter family of the exposition: HELP and TYPE lines, then its samples.
class ExpositionWriter {
 public:
  void family(std::string_view name, std::string_view help) {
    name_ = name;
    out_.append("# HELP ").append(name).append(" ").append(help).append("\n");
    out_.append("# TYPE ").append(name).append(" counter\n");
  }
  void sample(std::uint64_t value) { out_.append(name_).append(" ").append(std::to_string(value)).append("\n"); }
  // Label values here come from fixed tables of [A-Za-z0-9._] names: nothing to escape.
  void sample(std::string_view label, std::string_view value, std::uint64_t n) {
    out_.append(name_).append("{").append(label).append("=\"").append(value).append("\"} ");
    out_.append(std::to_string(n)).append("\n");
  }
  void sample_reason_field(std::string_view value1, std::string_view value2, std::uint64_t n) {
    out_.append(name_).append("{reason=\"").append(value1).append("\",field=\"").append(value2).append("\"} ");
    out_.append(std::to_string(n)).append("\n");
  }
  // <prefix>s_total (calls) and <prefix>_blocks_total by result, e.g. kvkey_lookups_total and
  // kvkey_lookup_blocks_total{result=...}.
  void calls(std::string_view plural, std::string_view help, std::uint64_t n, std::string_view blocks_help,
             std::initializer_list<std::pair<std::string_view, std::uint64_t>> results) {
    const std::string singular(plural.substr(0, plural.size() - 1));
    family(std::string(plural) + "_total", help);
    sample(n);
    family(singular + "_blocks_total", blocks_help);
    for (const auto& [result, count] : results) sample("result", result, count);
  }
  std::string take() { return std::move(out_); }

 private:
  std::string out_;
  std::string name_;
};

}  // namespace detail

inline std::string Metrics::render(const MetricsSnapshot& s) {
  detail::ExpositionWriter w;
  w.calls("kvkey_lookups", "Lookup calls (one per batch of blocks asked about).", s.lookups,
          "Blocks looked up, by result: hit (verified, reusable), miss (absent), rejected (present, refused).",
          {{"hit", s.lookup_hit}, {"miss", s.lookup_miss}, {"rejected", s.lookup_rejected}});
  w.calls("kvkey_loads", "Load calls (one per batch of blocks loaded).", s.loads,
          "Blocks loaded, by result: loaded (verified, served), missing (absent), rejected (present, refused).",
          {{"loaded", s.load_loaded}, {"missing", s.load_missing}, {"rejected", s.load_rejected}});
  w.family("kvkey_rejected_blocks_total",
           "Blocks refused by verification, by reason and by the field that differs (docs/operations.md).");
  for (const MetricsSnapshot::Rejection& r : s.rejections) w.sample_reason_field(to_string(r.reason), r.field, r.count);
  w.family("kvkey_false_hits_total", "Blocks a lookup counted as reusable that the load found missing or rejected.");
  w.sample(s.false_hits);
  w.family("kvkey_payload_verified_bytes_total", "Payload bytes verified and served by loads.");
  w.sample(s.payload_verified_bytes);
  w.family("kvkey_store_errors_total", "Store operations that failed, by kind.");
  for (std::size_t k = 0; k < store_error_kinds.size(); ++k) w.sample("kind", store_error_kinds[k], s.store_errors[k]);
  w.calls("kvkey_saves", "Save calls (one per batch of blocks saved).", s.saves,
          "Blocks saved, by result: saved (acknowledged by the store) or failed.",
          {{"saved", s.save_saved}, {"failed", s.save_failed}});
  return w.take();
}

KVKEY_END_NAMESPACE

#endif  // KVKEY_METRICS_HPP
