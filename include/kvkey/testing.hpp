// SPDX-License-Identifier: Apache-2.0
// kvkey::testing::check_store: the conformance kit for a Store implementation
// (kvkey/store.hpp) and for a connector. It drives a multi-rank
// kvkey::Connector (TP=2) against the store through the faults a shared
// KV-cache store produces, each fault on every rank in turn, and reports per
// case what the lookups counted and what loads served. The cases are the
// table kvkey::testing::cases(), which the Python kit (kvkey.testing) runs
// too, under the same names and with the same report fields:
//
// Every case runs twice, into the same CaseResult: through save and load_into
// with buffers, then through the zero-copy path (save_from, load_into with
// Slots in memory the store registers), its errors marked "zero-copy: ".
//
//   kvkey::testing::Report r = kvkey::testing::check_store([] { return std::make_unique<MyStore>(); });
//   if (!r.ok()) std::cerr << r.summary();
#ifndef KVKEY_TESTING_HPP
#define KVKEY_TESTING_HPP

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <chrono>
#include <map>
#include <mutex>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "kvkey/any_key_namespace.hpp"
#include "kvkey/config.hpp"
#include "kvkey/connector.hpp"
#include "kvkey/envelope.hpp"
#include "kvkey/fingerprint.hpp"
#include "kvkey/hmac.hpp"
#include "kvkey/identity.hpp"
#include "kvkey/sha256.hpp"
#include "kvkey/store.hpp"

KVKEY_BEGIN_NAMESPACE
namespace testing {

// ---- the case table (shared with the Python kit) ------------------------------------------

/// What a case does around its damage.
enum class Scenario : std::uint8_t { baseline, fault, epoch_bump, cross_tenant, stale_writer, concurrent_writers };

/// The damage a fault case does to one rank's value of block 2 (of 4).
enum class Damage : std::uint8_t {
  none,
  foreign,             ///< another deployment's value (field: the one identity difference)
  other_rank,          ///< the next rank's value of the block
  flip,                ///< one bit flipped at byte arg (negative: from the end)
  torn,                ///< the first arg bytes of a newer value, the rest of the old one
  cut,                 ///< the first arg bytes (negative: all but the last -arg)
  extend,              ///< one zero byte appended
  empty,               ///< an empty value
  random_bytes,        ///< as many random bytes as the value
  text,                ///< a short text
  payload_only,        ///< the payload without its header
  deleted,             ///< the value removed
  transplant_header,   ///< block 3's header on block 2's payload; and across ranks
  transplant_payload,  ///< block 2's header on block 3's payload
  swap_blocks,         ///< blocks 2 and 3 swapped
  swap_ranks,          ///< this rank's and the next rank's values swapped
  version,             ///< the header's format version set to arg
  plain_value,         ///< a plain deployment's value under a keyed reader's key
  keyed_value,         ///< a keyed deployment's value under the reader's key
};

/// The stable names of Damage (the Python kit maps them to its damage functions).
[[nodiscard]] inline std::string_view to_string(Damage d) noexcept {
  static constexpr std::string_view names[] = {"none",
                                               "foreign",
                                               "other_rank",
                                               "flip",
                                               "torn",
                                               "cut",
                                               "extend",
                                               "empty",
                                               "random_bytes",
                                               "text",
                                               "payload_only",
                                               "deleted",
                                               "transplant_header",
                                               "transplant_payload",
                                               "swap_blocks",
                                               "swap_ranks",
                                               "version",
                                               "plain_value",
                                               "keyed_value"};
  return names[static_cast<std::size_t>(d)];
}
[[nodiscard]] inline std::string_view to_string(Scenario s) noexcept {
  static constexpr std::string_view names[] = {"baseline",     "fault",        "epoch_bump",
                                               "cross_tenant", "stale_writer", "concurrent_writers"};
  return names[static_cast<std::size_t>(s)];
}

/// One case of the kit.
struct CaseSpec {
  std::string name;
  Scenario scenario = Scenario::fault;
  Damage damage = Damage::none;
  std::int64_t arg = 0;  ///< flip/torn/cut offset, version number
  std::string field;     ///< foreign: the identity field the foreign writer differs in
  bool keyed = false;    ///< the reader's namespace is keyed
};

namespace detail {
// The fields of part P a foreign writer differs in (foreign_fields): every
// salient leaf of the table, an optional part (the adapter) as a whole, and a
// part that is not salient (the shard: its layout enters as the slice) by its
// first member.
template <class P>
void collect_foreign_fields(std::vector<std::string>& out) {
  for_each_field<P>([&out](const auto& info) {
    using T = typename std::decay_t<decltype(info)>::type;
    if constexpr (is_identity_part_v<T>) {
      if ((info.flags & field_not_salient) != 0) {
        out.emplace_back(std::get<0>(Fields<T>::members).path);
      } else {
        collect_foreign_fields<T>(out);
      }
    } else {
      out.emplace_back(info.path);
    }
  });
}
}  // namespace detail

/// The identity fields a foreign writer differs in, one foreign case each:
/// the identity's field table (kvkey::Fields, kvkey/identity.hpp) in encoding
/// order, so a new field gets its foreign case (change_field must know it).
inline const std::vector<std::string>& foreign_fields() {
  static const std::vector<std::string> f = [] {
    std::vector<std::string> out;
    detail::collect_foreign_fields<Identity>(out);
    return out;
  }();
  return f;
}

/// Every case, in the order both kits run them.
inline const std::vector<CaseSpec>& cases() {
  static const std::vector<CaseSpec> table = [] {
    using D = Damage;
    std::vector<CaseSpec> c;
    auto fault = [&c](std::string name, D d, std::int64_t arg = 0, bool keyed = false) {
      c.push_back({std::move(name), Scenario::fault, d, arg, {}, keyed});
    };
    c.push_back({"baseline", Scenario::baseline, D::none, 0, {}, false});
    c.push_back({"baseline, keyed", Scenario::baseline, D::none, 0, {}, true});
    for (const std::string& f : foreign_fields())
      c.push_back({"foreign " + f, Scenario::fault, D::foreign, 0, f, false});
    fault("foreign shard (another rank's value under this rank's key)", D::other_rank);
    const std::pair<int, const char*> header_bits[] = {
        {0, "magic"},         {8, "format version"}, {12, "identity length"}, {16, "block hash"},
        {48, "payload size"}, {56, "slice"},         {72, "namespace kind"},  {73, "integrity mode"},
        {75, "reserved"},     {84, "nonce"},         {100, "payload digest"}, {130, "identity"},
        {1000, "padding"}};
    for (const auto& [at, what] : header_bits) {
      fault("header bit flip at " + std::to_string(at) + " (" + what + ")", D::flip, at);
    }
    fault("header bit flip at 84 (nonce), keyed", D::flip, 84, true);
    fault("header bit flip at 100 (tag), keyed", D::flip, 100, true);
    const std::pair<std::int64_t, const char*> payload_bytes[] = {
        {envelope_size, "first"}, {envelope_size + 100, "middle"}, {-1, "last"}};
    for (const auto& [at, what] : payload_bytes) {
      fault(std::string("payload bit flip (") + what + " byte)", D::flip, at);
      fault(std::string("payload bit flip (") + what + " byte), keyed", D::flip, at, true);
    }
    fault("torn value (newer header, older payload tail)", D::torn, envelope_size + 64);
    fault("torn header (newer first 100 bytes)", D::torn, 100);
    fault("torn value, keyed", D::torn, envelope_size + 64, true);
    fault("truncated inside the header", D::cut, 700);
    fault("truncated to the header", D::cut, envelope_size);
    fault("truncated by one byte", D::cut, -1);
    fault("extended by one byte", D::extend);
    fault("empty value", D::empty);
    fault("non-kvkey value (random bytes)", D::random_bytes);
    fault("non-kvkey value (text)", D::text);
    fault("non-kvkey value (payload without header)", D::payload_only);
    fault("value deleted", D::deleted);
    fault("transplanted header", D::transplant_header);
    fault("transplanted payload", D::transplant_payload);
    fault("swapped values (blocks)", D::swap_blocks);
    fault("swapped values (ranks)", D::swap_ranks);
    fault("swapped values, keyed", D::swap_blocks, 0, true);
    fault("format version " + std::to_string(format_version - 1), D::version, format_version - 1);
    fault("format version " + std::to_string(format_version + 1), D::version, format_version + 1);
    fault("plain value under a keyed reader's key", D::plain_value, 0, true);
    fault("keyed value under a plain reader's key", D::keyed_value, 0, false);
    fault("value keyed with another secret", D::keyed_value, 0, true);
    c.push_back({"epoch bump", Scenario::epoch_bump, D::none, 0, {}, true});
    c.push_back({"cross-tenant read", Scenario::cross_tenant, D::none, 0, {}, false});
    c.push_back({"stale writer racing an epoch bump", Scenario::stale_writer, D::none, 0, {}, false});
    c.push_back({"concurrent writers of one key", Scenario::concurrent_writers, D::none, 0, {}, false});
    return c;
  }();
  return table;
}

/// The blocks of a case's prompts, the block every damage hits, and the ranks.
inline constexpr std::size_t blocks_per_prompt = 4;
inline constexpr std::size_t damaged_block = 2;
inline constexpr std::size_t ranks_per_deployment = 2;

// ---- the report -----------------------------------------------------------------------------

/// The counts of one case (the same fields as kvkey.testing.CaseResult).
struct CaseResult {
  std::string name;
  std::size_t lookups = 0;           ///< lookup calls
  std::size_t counted = 0;           ///< blocks the lookups counted
  std::size_t counted_rejected = 0;  ///< blocks counted although a rank's header does not verify (must be 0)
  std::size_t loaded = 0;            ///< blocks loaded with the expected bytes (load and load_into)
  std::size_t rejected = 0;          ///< load_into results "rejected"
  std::size_t missing = 0;           ///< load_into results "missing"
  std::size_t wrong_loads = 0;       ///< payloads served, or buffers written, that are not the deployment's (must be 0)
  std::size_t lost = 0;              ///< intact blocks not loaded or not counted (must be 0)
  std::map<std::string, std::size_t> reasons;  ///< "reason field" of the rejections -> count
  std::vector<std::string> errors;             ///< exceptions and failed expectations

  bool ok() const noexcept { return wrong_loads == 0 && counted_rejected == 0 && lost == 0 && errors.empty(); }
};

/// The names of CaseResult's fields, in order (the Python kit's CaseResult has the same).
inline constexpr std::string_view report_fields[] = {"name",   "lookups",  "counted", "counted_rejected",
                                                     "loaded", "rejected", "missing", "wrong_loads",
                                                     "lost",   "reasons",  "errors"};

/// What check_store found: ok() when every case is.
struct Report {
  std::vector<CaseResult> cases;

  bool ok() const noexcept {
    return std::all_of(cases.begin(), cases.end(), [](const CaseResult& c) { return c.ok(); });
  }
  std::size_t wrong_loads() const { return sum(&CaseResult::wrong_loads); }
  std::size_t counted_rejected() const { return sum(&CaseResult::counted_rejected); }
  std::size_t lost() const { return sum(&CaseResult::lost); }
  /// The case of that name, or nullptr.
  const CaseResult* find(std::string_view name) const {
    for (const CaseResult& c : cases) {
      if (c.name == name) return &c;
    }
    return nullptr;
  }
  /// One line per case: "ok   name" or "FAIL name: counts; first error".
  std::string summary() const {
    std::string s;
    for (const CaseResult& c : cases) {
      s.append(c.ok() ? "ok   " : "FAIL ").append(c.name);
      if (!c.ok()) {
        s.append(": wrong loads " + std::to_string(c.wrong_loads) + ", counted rejected " +
                 std::to_string(c.counted_rejected) + ", lost " + std::to_string(c.lost));
        if (!c.errors.empty()) s.append("; ").append(c.errors.front());
      }
      s += '\n';
    }
    return s;
  }

 private:
  std::size_t sum(std::size_t CaseResult::*f) const {
    std::size_t n = 0;
    for (const CaseResult& c : cases) n += c.*f;
    return n;
  }
};

// ---- the connector under test ---------------------------------------------------------------

/// The connector the kit drives: by default ConnectorAdapter, kvkey::Connector
/// over the deployment's ranks. Override its functions to check a connector of
/// your own (or to show the kit catches a broken one).
class ConnectorUnderTest {
 public:
  virtual ~ConnectorUnderTest() = default;
  virtual std::size_t save(const std::vector<Digest>& blocks, const std::vector<Payload>& payloads,
                           std::size_t rank) = 0;
  virtual std::size_t lookup(const std::vector<Digest>& blocks) = 0;
  /// Served payloads: views that must stay what was verified while their owners live.
  virtual std::vector<LoadedView> load(const std::vector<Digest>& blocks, std::size_t rank) = 0;
  virtual std::vector<LoadResult> load_into(const std::vector<Digest>& blocks,
                                            const std::vector<MutableBuffer>& destinations, std::size_t rank) = 0;
  /// The zero-copy save (Connector::save_from), block i in slot i. Default: the
  /// slots' payloads through save.
  virtual std::size_t save_slots(const std::vector<Digest>& blocks, const Slots& slots, std::size_t rank) {
    std::vector<Payload> payloads;
    for (std::size_t i = 0; i < blocks.size(); ++i) payloads.emplace_back(slots.payload(i).data, slots.payload_size());
    return save(blocks, payloads, rank);
  }
  /// The zero-copy load (Connector::load_into with Slots), block i in slot i.
  /// Default: load_into the slots' payloads.
  virtual std::vector<LoadResult> load_slots(const std::vector<Digest>& blocks, const Slots& slots, std::size_t rank) {
    std::vector<MutableBuffer> d;
    for (std::size_t i = 0; i < blocks.size(); ++i) d.push_back(slots.payload(i));
    return load_into(blocks, d, rank);
  }
};

/// kvkey::Connector<AnyKeyNamespace> as the connector under test (zero-copy loads: load_views).
class ConnectorAdapter : public ConnectorUnderTest {
 public:
  ConnectorAdapter(Store& store, std::vector<AnyKeyNamespace> ranks) : conn_(store, std::move(ranks)) {}
  std::size_t save(const std::vector<Digest>& blocks, const std::vector<Payload>& payloads, std::size_t rank) override {
    return conn_.save(blocks, payloads, rank);
  }
  std::size_t lookup(const std::vector<Digest>& blocks) override { return conn_.lookup(blocks); }
  std::vector<LoadedView> load(const std::vector<Digest>& blocks, std::size_t rank) override {
    return conn_.load_views(blocks, rank);
  }
  std::vector<LoadResult> load_into(const std::vector<Digest>& blocks, const std::vector<MutableBuffer>& destinations,
                                    std::size_t rank) override {
    return conn_.load_into(blocks, destinations, rank);
  }
  std::size_t save_slots(const std::vector<Digest>& blocks, const Slots& slots, std::size_t rank) override {
    return conn_.save_from(blocks, slots, {}, rank);
  }
  std::vector<LoadResult> load_slots(const std::vector<Digest>& blocks, const Slots& slots, std::size_t rank) override {
    return conn_.load_into(blocks, slots, {}, rank);
  }
  const Connector<AnyKeyNamespace>& connector() const noexcept { return conn_; }

 private:
  Connector<AnyKeyNamespace> conn_;
};

using MakeConnector = std::function<std::unique_ptr<ConnectorUnderTest>(Store&, const std::vector<AnyKeyNamespace>&)>;

/// Options of check_store.
struct CheckOptions {
  /// Builds the connector under test; empty: ConnectorAdapter.
  MakeConnector make_connector;
  /// Run only the cases whose name contains one of these (empty: all).
  std::vector<std::string> only;
  /// Write rounds of the racing cases.
  int race_rounds = 40;
};

namespace detail {

inline Bytes stream(const Digest& seed, std::size_t n) {
  Bytes out;
  out.reserve(n + 32);
  for (std::uint64_t counter = 0; out.size() < n; ++counter) {
    Sha256 h;
    h.update(seed.data(), Digest::size_bytes);
    std::uint8_t c[8];
    for (int i = 0; i < 8; ++i) c[i] = static_cast<std::uint8_t>(counter >> (8 * i));
    h.update(c, sizeof c);
    const Digest d = h.result();
    out.insert(out.end(), d.data(), d.data() + Digest::size_bytes);
  }
  out.resize(n);
  return out;
}

inline TenantSecret secret_of(const std::string& seed) {
  Sha256 h;
  h.update(reinterpret_cast<const std::uint8_t*>(seed.data()), seed.size());
  const Digest d = h.result();
  return TenantSecret(std::string(reinterpret_cast<const char*>(d.data()), Digest::size_bytes));
}

/// The base identity of the kit's deployments (the Python kit's: int8 with scales, TP=2).
inline Identity identity(const std::string& tenant, std::size_t tp_size, std::size_t rank) {
  Identity i;
  i.tenant = tenant;
  i.model.name = "kvkey-check";
  i.model.revision = "0123456789abcdef0123456789abcdef01234567";
  i.kv.dtype = KvDtype::int8;
  i.kv.quant.scheme = "per_token_head";
  i.kv.quant.group_size = 8;
  i.kv.quant.scale_dtype = KvDtype::fp16;
  i.kv.block_size = 4;
  i.kv.num_layers = 2;
  i.kv.num_kv_heads = 2;
  i.kv.head_dim = 8;
  i.kv.layout = "kvkey.check.v1";
  i.shard.tp_size = static_cast<std::uint32_t>(tp_size);
  i.shard.tp_rank = static_cast<std::uint32_t>(rank);
  return i;
}

/// The one difference of the foreign writer of `field` (tenant: its own tenant, see Case::deployment).
inline void change_field(Identity& i, const std::string& field) {
  if (field == "tenant") return;
  if (field == "model.name")
    i.model.name = "kvkey-check-other";
  else if (field == "model.revision")
    i.model.revision = "fedcba9876543210fedcba9876543210fedcba98";
  else if (field == "model.weights_epoch")
    i.model.weights_epoch = 1;
  else if (field == "model.weights_fingerprint")
    i.model.weights_fingerprint = fingerprint("other weights");
  else if (field == "model.positional_fingerprint")
    i.model.positional_fingerprint = fingerprint("rope x4");
  else if (field == "kv.dtype")
    i.kv.dtype = KvDtype::uint8;
  else if (field == "kv.quant.scheme")
    i.kv.quant.scheme = "per_token";
  else if (field == "kv.quant.group_size")
    i.kv.quant.group_size = 4;
  else if (field == "kv.quant.scale_dtype")
    i.kv.quant.scale_dtype = KvDtype::bf16;
  else if (field == "kv.quant.zero_point")
    i.kv.quant.zero_point = true;
  else if (field == "kv.quant.scales_fingerprint")
    i.kv.quant.scales_fingerprint = fingerprint("scales");
  else if (field == "kv.block_size")
    i.kv.block_size = 8;
  else if (field == "kv.num_layers")
    i.kv.num_layers = 3;
  else if (field == "kv.num_kv_heads")
    i.kv.num_kv_heads = 4;
  else if (field == "kv.head_dim")
    i.kv.head_dim = 16;
  else if (field == "kv.layout")
    i.kv.layout = "kvkey.check.v2";
  else if (field == "kv.mla")
    i.kv.mla = true;
  else if (field == "shard.tp_size")
    i.shard = Shard{};
  else if (field == "adapter")
    i.adapter = Adapter("lora-a", fingerprint("lora-a weights"));
  else
    throw input_error("field", "check_store: no foreign writer for identity field " + field);
}

/// One deployment's ranks and the payloads it writes (they depend on the
/// namespace's root, the rank's slice, the block and a version).
struct Deployment {
  std::vector<AnyKeyNamespace> ranks;

  Bytes payload(std::size_t rank, const Digest& block, std::uint64_t version = 0) const {
    const AnyKeyNamespace& ns = ranks.at(rank);
    const Slice& s = ns.slice();
    const std::size_t size = 256u * (s.kv_head_end - s.kv_head_begin) * (s.layer_end - s.layer_begin);
    Sha256 h;
    h.update(ns.root().data(), Digest::size_bytes);
    const std::uint64_t parts[] = {s.kv_head_begin, s.layer_begin, version};
    h.update(reinterpret_cast<const std::uint8_t*>(parts), sizeof parts);
    h.update(block.data(), Digest::size_bytes);
    return stream(h.result(), size);
  }
  std::vector<Digest> hashes(std::size_t family = 0) const {
    std::vector<std::uint32_t> tokens(blocks_per_prompt * ranks[0].identity().kv.block_size);
    for (std::size_t t = 0; t < tokens.size(); ++t)
      tokens[t] = static_cast<std::uint32_t>((family * 7919 + t * 104729) % 65536);
    return ranks[0].block_hashes(tokens.data(), tokens.size());
  }
  Deployment with_epoch(std::uint64_t epoch) const {
    Deployment d;
    for (const AnyKeyNamespace& ns : ranks) d.ranks.push_back(ns.with_epoch(epoch));
    return d;
  }
};

inline Bytes bytes_of(const ConstBuffer& b) {
  const auto* p = static_cast<const std::uint8_t*>(b.data);
  return Bytes(p, p + b.size);
}

/// One case: its store, the bytes each key may load as, and the checks.
class Case {
 public:
  Case(const CaseSpec& spec, Store& store, const MakeConnector& make, std::string tenant, bool zero_copy = false,
       bool confidential = false)
      : spec_(spec),
        store_(store),
        make_(make),
        tenant_(std::move(tenant)),
        zero_copy_(zero_copy),
        confidential_(confidential) {
    result.name = spec.name;
  }
  /// Saves and load_into go through the zero-copy path (Slots).
  bool zero_copy() const noexcept { return zero_copy_; }
  CaseResult result;
  std::mutex mu;  // result and allowed, for the racing cases

  Store& store() { return store_; }

  Deployment deployment(const std::string& suffix = "", const std::string& field = "",
                        const std::string& secret_seed = "") {
    const std::size_t tp = field == "shard.tp_size" ? 1 : ranks_per_deployment;
    Deployment d;
    for (std::size_t r = 0; r < tp; ++r) {
      Identity id = identity(tenant_ + suffix, ranks_per_deployment, r);
      if (!field.empty()) change_field(id, field);
      if (secret_seed.empty()) {
        d.ranks.emplace_back(id);
      } else {  // the confidential passes: every keyed deployment stores ciphertext (format v4)
        Policy policy;
        policy.confidential = confidential_;
        d.ranks.emplace_back(id, secret_of(tenant_ + secret_seed), policy);
      }
    }
    return d;
  }
  std::unique_ptr<ConnectorUnderTest> connector(const Deployment& d) {
    if (make_) return make_(store_, d.ranks);
    return std::make_unique<ConnectorAdapter>(store_, d.ranks);
  }

  void error(std::string what) {
    const std::lock_guard<std::mutex> lock(mu);
    result.errors.push_back(std::move(what));
  }

  void allow(const std::string& key, std::set<Bytes> payloads) {
    const std::lock_guard<std::mutex> lock(mu);
    allowed_[key] = std::move(payloads);
  }
  std::set<Bytes> allowed(const std::string& key) {
    const std::lock_guard<std::mutex> lock(mu);
    auto it = allowed_.find(key);
    return it == allowed_.end() ? std::set<Bytes>{} : it->second;
  }

  /// Saves through the connector; what it saved becomes the only bytes allowed.
  void save(ConnectorUnderTest& conn, const Deployment& d, const std::vector<Digest>& hashes, std::uint64_t version = 0,
            std::vector<std::size_t> ranks = {}) {
    if (ranks.empty()) {
      for (std::size_t r = 0; r < d.ranks.size(); ++r) ranks.push_back(r);
    }
    for (std::size_t r : ranks) {
      std::vector<Bytes> payloads;
      std::vector<Payload> views;
      for (const Digest& h : hashes) payloads.push_back(d.payload(r, h, version));
      for (const Bytes& p : payloads) views.emplace_back(p.data(), p.size());
      std::size_t saved = 0;
      if (zero_copy_ && !hashes.empty()) {
        const Slots slots(store_, hashes.size(), payloads[0].size());
        for (std::size_t i = 0; i < hashes.size(); ++i) {
          std::copy(payloads[i].begin(), payloads[i].end(), static_cast<std::uint8_t*>(slots.payload(i).data));
        }
        saved = conn.save_slots(hashes, slots, r);
      } else {
        saved = conn.save(hashes, views, r);
      }
      if (saved != hashes.size()) {
        error("save stored " + std::to_string(saved) + " of " + std::to_string(hashes.size()) + " values");
      }
      for (std::size_t i = 0; i < hashes.size(); ++i) allow(d.ranks[r].store_key(hashes[i]), {payloads[i]});
    }
  }

  Bytes value(const AnyKeyNamespace& ns, const Digest& h) {
    std::optional<Bytes> v = store_.get(ns.store_key(h));
    if (!v) throw std::runtime_error("no value under " + ns.store_key(h) + " right after it was saved");
    return std::move(*v);
  }

  /// Damage: a value written by the store's put_many, past the connector (nullopt:
  /// removed). A store that refuses the write (StoreWrite::stored false, as Mooncake
  /// does for an empty value) keeps the value it held, and that value may still load.
  void put_raw(const std::string& key, const std::optional<Bytes>& v) {
    if (v) {
      StoreValue value = store_.allocate_value(v->size());
      if (!v->empty()) std::copy(v->begin(), v->end(), const_cast<std::uint8_t*>(value.data));
      const std::vector<StoreWrite> w = store_.put_many({key}, {value});
      if (!w.empty() && !w[0].stored) return;
    } else {
      store_.remove(key);
    }
    allow(key, {});
  }

  /// A lookup, a load and a load_into on every rank, checked against what may be
  /// loaded. strict: nothing writes meanwhile, so the lookup must count exactly the
  /// leading blocks whose headers verify, and intact blocks must load.
  void check(ConnectorUnderTest& conn, const Deployment& d, const std::vector<Digest>& hashes, bool strict = true) {
    CaseResult r;
    const std::size_t counted = conn.lookup(hashes);
    r.lookups = 1;
    r.counted = counted;
    // The oracle: every value read and its header checked by the namespace itself.
    std::vector<bool> verifies, complete;
    for (const Digest& h : hashes) {
      bool good = true, whole = true;
      for (const AnyKeyNamespace& ns : d.ranks) {
        const std::optional<Bytes> v = store_.get(ns.store_key(h));
        const bool ok = v && ns.verify_header(v->data(), std::min<std::size_t>(v->size(), envelope_size), h).ok();
        good = good && ok;
        whole = whole && ok &&
                ns.verify(v->data(), envelope_size, h, v->size() - envelope_size).reason != Reason::size_mismatch;
      }
      verifies.push_back(good);
      complete.push_back(whole);
    }
    if (strict) {
      for (std::size_t b = 0; b < std::min(counted, hashes.size()); ++b) r.counted_rejected += verifies[b] ? 0u : 1u;
      const std::size_t expected =
          static_cast<std::size_t>(std::find(complete.begin(), complete.end(), false) - complete.begin());
      if (counted < expected) {
        r.lost += expected - counted;
        r.errors.push_back("lookup counted " + std::to_string(counted) + " blocks; " + std::to_string(expected) +
                           " have headers that verify");
      }
    }
    // Served payloads are checked only after every other read of this check: what was
    // served must stay what was verified, whatever the store does with its buffers.
    std::vector<std::pair<std::string, LoadedView>> served;
    struct InSlot {
      std::shared_ptr<Slots> slots;
      std::size_t i;
      Bytes loaded;
    };
    std::vector<InSlot> in_slots;  // zero-copy loads: what each loaded slot held
    for (std::size_t rank = 0; rank < d.ranks.size(); ++rank) {
      const AnyKeyNamespace& ns = d.ranks[rank];
      std::vector<LoadedView> views = conn.load(hashes, rank);
      for (std::size_t i = 0; i < hashes.size() && i < views.size(); ++i) {
        const std::string key = ns.store_key(hashes[i]);
        if (views[i].result.loaded()) {
          served.emplace_back(key, std::move(views[i]));
        } else if (strict && !allowed(key).empty()) {
          ++r.lost;
        }
      }
      std::vector<Bytes> buffers;
      for (std::size_t i = 0; i < hashes.size(); ++i) {
        const std::set<Bytes> a = allowed(ns.store_key(hashes[i]));
        buffers.emplace_back(a.empty() ? d.payload(rank, hashes[i]).size() : a.begin()->size(), std::uint8_t{0xA5});
      }
      const std::vector<Bytes> sentinel = buffers;
      std::vector<MutableBuffer> dest;
      for (Bytes& b : buffers) dest.push_back({b.data(), b.size()});
      std::vector<LoadResult> results;
      if (zero_copy_ && !hashes.empty()) {
        // Slots of this deployment's payload size; a loaded slot's payload is what was
        // served, checked again after the last read (the store may not write it later).
        auto slots = std::make_shared<Slots>(store_, hashes.size(), d.payload(rank, hashes[0]).size());
        results = conn.load_slots(hashes, *slots, rank);
        for (std::size_t i = 0; i < hashes.size() && i < results.size(); ++i) {
          if (!results[i].loaded()) continue;
          const auto* p = static_cast<const std::uint8_t*>(slots->payload(i).data);
          buffers[i].assign(p, p + slots->payload_size());
          in_slots.push_back({slots, i, buffers[i]});
        }
      } else {
        results = conn.load_into(hashes, dest, rank);
      }
      for (std::size_t i = 0; i < hashes.size() && i < results.size(); ++i) {
        const std::set<Bytes> a = allowed(ns.store_key(hashes[i]));
        if (results[i].loaded()) {
          (a.count(buffers[i]) ? r.loaded : r.wrong_loads) += 1;
          continue;
        }
        // Unverified bytes written into the caller's buffer (a slot of a block not loaded may hold them).
        if (!zero_copy_ && buffers[i] != sentinel[i]) ++r.wrong_loads;
        if (results[i].status == LoadResult::Status::rejected) {
          ++r.rejected;
          ++r.reasons[std::string(to_string(results[i].verdict.reason)) + " " + results[i].verdict.field];
        } else {
          ++r.missing;
        }
        if (strict && !a.empty()) ++r.lost;
      }
    }
    (void)conn.lookup(hashes);  // one more read of every rank's values
    for (const auto& [key, view] : served) {
      (allowed(key).count(bytes_of(view.payload)) ? r.loaded : r.wrong_loads) += 1;
    }
    for (const InSlot& slot : in_slots) {  // written after the load returned: not what was verified
      if (bytes_of({slot.slots->payload(slot.i).data, slot.slots->payload_size()}) != slot.loaded) ++r.wrong_loads;
    }
    const std::lock_guard<std::mutex> lock(mu);
    add(result, r);
  }

  /// Adds r's counts and errors to t.
  static void add(CaseResult& t, const CaseResult& r, const std::string& mark = "") {
    t.lookups += r.lookups;
    t.counted += r.counted;
    t.counted_rejected += r.counted_rejected;
    t.loaded += r.loaded;
    t.rejected += r.rejected;
    t.missing += r.missing;
    t.wrong_loads += r.wrong_loads;
    t.lost += r.lost;
    for (const auto& [k, n] : r.reasons) t.reasons[k] += n;
    for (const std::string& e : r.errors) t.errors.push_back(mark + e);
  }

  const CaseSpec& spec() const noexcept { return spec_; }

 private:
  const CaseSpec& spec_;
  Store& store_;
  const MakeConnector& make_;
  std::string tenant_;
  bool zero_copy_ = false;
  bool confidential_ = false;
  std::map<std::string, std::set<Bytes>> allowed_;
};

inline Bytes splice(const Bytes& head_from, const Bytes& tail_from, std::size_t at) {
  Bytes out(head_from.begin(), head_from.begin() + static_cast<std::ptrdiff_t>(std::min(at, head_from.size())));
  if (at < tail_from.size())
    out.insert(out.end(), tail_from.begin() + static_cast<std::ptrdiff_t>(at), tail_from.end());
  return out;
}

inline std::size_t offset(std::int64_t arg, std::size_t size) {
  return arg >= 0 ? static_cast<std::size_t>(arg) : size - static_cast<std::size_t>(-arg);
}

/// The case's damage on one rank's value of block 2 (and, for the cross-rank damages, the next rank's).
inline void damage(Case& c, const Deployment& d, const std::vector<Digest>& hs, std::size_t rank) {
  const CaseSpec& s = c.spec();
  const AnyKeyNamespace& ns = d.ranks[rank];
  const AnyKeyNamespace& next = d.ranks[(rank + 1) % d.ranks.size()];
  const Digest& h = hs[damaged_block];
  const Digest& h3 = hs[damaged_block + 1];
  const std::string key = ns.store_key(h);
  auto sealed = [](const Deployment& by, std::size_t r, const Digest& b, std::uint64_t version = 0) {
    const Bytes p = by.payload(r, b, version);
    return by.ranks[r].seal_value(b, Payload(p.data(), p.size()));
  };
  switch (s.damage) {
    case Damage::none: return;
    case Damage::foreign: {
      const Deployment other = c.deployment(s.field == "tenant" ? "-x" : "", s.field);
      const std::size_t r = std::min(rank, other.ranks.size() - 1);
      c.put_raw(key, sealed(other, r, h));
      return;
    }
    case Damage::other_rank: c.put_raw(key, c.value(next, h)); return;
    case Damage::flip: {
      Bytes v = c.value(ns, h);
      v[offset(s.arg, v.size())] ^= 0x04;
      c.put_raw(key, v);
      return;
    }
    case Damage::torn: {
      const Bytes v = c.value(ns, h);
      c.put_raw(key, splice(sealed(d, rank, h, 3), v, offset(s.arg, v.size())));
      return;
    }
    case Damage::cut: {
      Bytes v = c.value(ns, h);
      v.resize(offset(s.arg, v.size()));
      c.put_raw(key, v);
      return;
    }
    case Damage::extend: {
      Bytes v = c.value(ns, h);
      v.push_back(0);
      c.put_raw(key, v);
      return;
    }
    case Damage::empty: c.put_raw(key, Bytes()); return;
    case Damage::random_bytes: {
      static std::atomic<std::uint64_t> n{0};
      const std::uint64_t k = n++;
      const Digest seed = Sha256::hash(&k, sizeof k);
      c.put_raw(key, stream(seed, c.value(ns, h).size()));
      return;
    }
    case Damage::text: {
      const std::string t = "not a kvkey value";
      c.put_raw(key, Bytes(t.begin(), t.end()));
      return;
    }
    case Damage::payload_only: {
      const Bytes v = c.value(ns, h);
      c.put_raw(key, Bytes(v.begin() + envelope_size, v.end()));
      return;
    }
    case Damage::deleted: c.put_raw(key, std::nullopt); return;
    case Damage::transplant_header: {
      const Bytes v2 = c.value(ns, h), v3 = c.value(ns, h3), r1 = c.value(next, h);
      c.put_raw(key, splice(v3, v2, envelope_size));
      c.put_raw(next.store_key(h), splice(v2, r1, envelope_size));
      return;
    }
    case Damage::transplant_payload: c.put_raw(key, splice(c.value(ns, h), c.value(ns, h3), envelope_size)); return;
    case Damage::swap_blocks: {
      const Bytes v2 = c.value(ns, h), v3 = c.value(ns, h3);
      c.put_raw(key, v3);
      c.put_raw(ns.store_key(h3), v2);
      return;
    }
    case Damage::swap_ranks: {
      const Bytes a = c.value(ns, h), b = c.value(next, h);
      c.put_raw(key, b);
      c.put_raw(next.store_key(h), a);
      return;
    }
    case Damage::version: {
      Bytes v = c.value(ns, h);
      v[envelope_layout::version] = static_cast<std::uint8_t>(s.arg & 0xff);
      v[envelope_layout::version + 1] = static_cast<std::uint8_t>((s.arg >> 8) & 0xff);
      c.put_raw(key, v);
      return;
    }
    case Damage::plain_value: c.put_raw(key, sealed(c.deployment(), rank, h)); return;
    case Damage::keyed_value: c.put_raw(key, sealed(c.deployment("", "", "/other secret"), rank, h)); return;
  }
}

inline std::string reader_secret(const CaseSpec& s) { return s.keyed ? "/secret" : ""; }

inline void baseline(Case& c) {
  const Deployment d = c.deployment("", "", reader_secret(c.spec()));
  auto conn = c.connector(d);
  const std::vector<Digest> hs = d.hashes();
  c.check(*conn, d, hs);  // nothing saved yet
  c.save(*conn, d, hs);
  c.check(*conn, d, hs);
  c.save(*conn, d, hs, 1);  // overwritten: only the newer bytes may load
  c.check(*conn, d, hs);
}

/// The damage on each rank in turn, each time on a fresh deployment.
inline void fault(Case& c) {
  for (std::size_t rank = 0; rank < ranks_per_deployment; ++rank) {
    const Deployment d = c.deployment("", "", reader_secret(c.spec()));
    auto conn = c.connector(d);
    const std::vector<Digest> hs = d.hashes(rank);  // keys of their own for each rank's turn
    c.save(*conn, d, hs);
    c.check(*conn, d, hs);
    damage(c, d, hs, rank);
    c.check(*conn, d, hs);
    c.save(*conn, d, hs, 1);  // the engine recomputes and saves again
    c.check(*conn, d, hs);
  }
}

inline void epoch_bump(Case& c) {
  const Deployment d = c.deployment("", "", "/secret");
  auto conn = c.connector(d);
  const std::vector<Digest> hs = d.hashes();
  c.save(*conn, d, hs);
  const Deployment nd = d.with_epoch(1);
  for (const AnyKeyNamespace& ns : nd.ranks) {
    if (!ns.keyed()) c.error("with_epoch dropped the tenant secret");
  }
  auto rotated = c.connector(nd);
  const std::vector<Digest> nh = nd.hashes();
  c.check(*rotated, nd, nh);
  for (std::size_t r = 0; r < d.ranks.size(); ++r) {
    for (std::size_t i = 0; i < hs.size(); ++i) c.put_raw(nd.ranks[r].store_key(nh[i]), c.value(d.ranks[r], hs[i]));
  }
  c.check(*rotated, nd, nh);
  c.save(*rotated, nd, nh, 1);
  c.check(*rotated, nd, nh);
  c.check(*conn, d, hs);  // the old epoch, for readers not yet rotated
}

inline void cross_tenant(Case& c) {
  const Deployment a = c.deployment("-a"), b = c.deployment("-b");
  auto ca = c.connector(a), cb = c.connector(b);
  const std::vector<Digest> ha = a.hashes(), hb = b.hashes();
  c.save(*cb, b, hb);
  c.check(*ca, a, ha);  // nothing of b's is reachable under a's keys
  c.check(*ca, a, hb);  // not even with b's block hashes
  for (std::size_t r = 0; r < a.ranks.size(); ++r) {
    for (std::size_t i = 0; i < ha.size(); ++i) c.put_raw(a.ranks[r].store_key(ha[i]), c.value(b.ranks[r], hb[i]));
  }
  c.check(*ca, a, ha);
  c.save(*ca, a, ha);
  c.check(*ca, a, ha);
  c.check(*cb, b, hb);
}

template <class F>
void in_threads(Case& c, std::vector<F> bodies) {
  std::vector<std::thread> threads;
  for (F& f : bodies) {
    threads.emplace_back([&c, &f] {
      try {
        f();
      } catch (const std::exception& e) {
        c.error(std::string("exception in a thread: ") + e.what());
      }
    });
  }
  for (std::thread& t : threads) t.join();
}

/// Four writers of one key (three of this deployment with other payloads, one of
/// another tenant) while a reader loads: every load is one writer's complete bytes.
inline void concurrent_writers(Case& c, int rounds) {
  const Deployment d = c.deployment(), other = c.deployment("-x");
  auto conn = c.connector(d);
  const std::vector<Digest> hs = d.hashes();
  const Digest h = hs[0];
  const std::string key = d.ranks[0].store_key(h);
  c.save(*conn, d, hs);
  c.allow(key, {d.payload(0, h, 0), d.payload(0, h, 1), d.payload(0, h, 2), d.payload(0, h, 3)});
  std::atomic<bool> done{false};
  using Body = std::function<void()>;
  auto writer = [&](std::uint64_t v) -> Body {
    return [&, v] {
      auto w = c.connector(d);
      const Bytes p = d.payload(0, h, v);
      for (int k = 0; k < rounds; ++k) (void)w->save({h}, {Payload(p.data(), p.size())}, 0);
    };
  };
  Body foreign = [&] {
    const Bytes p = other.payload(0, h);
    const Bytes value = other.ranks[0].seal_value(h, Payload(p.data(), p.size()));
    for (int k = 0; k < rounds; ++k) c.store().put(key, value.data(), value.size());
  };
  Body writers = [&] {
    in_threads<Body>(c, {writer(1), writer(2), writer(3), foreign});
    done = true;
  };
  Body reader = [&] {
    auto r = c.connector(d);
    while (!done) c.check(*r, d, hs, false);
  };
  in_threads<Body>(c, {writers, reader});
  c.save(*conn, d, {h}, 3, {0});
  c.check(*conn, d, hs);
}

/// A writer still on epoch 0 keeps saving while the deployment moves to epoch 1, and
/// one seals with the old namespace under the new keys: readers of either epoch load
/// only their own epoch's bytes.
inline void stale_writer(Case& c, int rounds) {
  const Deployment old = c.deployment(), nd = old.with_epoch(1);
  auto old_conn = c.connector(old), new_conn = c.connector(nd);
  const std::vector<Digest> oh = old.hashes(), nh = nd.hashes();
  c.save(*old_conn, old, oh);
  std::atomic<bool> done{false};
  using Body = std::function<void()>;
  auto save_all = [](ConnectorUnderTest& w, const Deployment& dep, const std::vector<Digest>& hs, std::uint64_t v) {
    std::vector<Bytes> ps;
    std::vector<Payload> views;
    for (const Digest& h : hs) ps.push_back(dep.payload(0, h, v));
    for (const Bytes& p : ps) views.emplace_back(p.data(), p.size());
    (void)w.save(hs, views, 0);
  };
  Body stale = [&] {
    auto w = c.connector(old);
    for (int i = 0; i < rounds; ++i) {
      save_all(*w, old, oh, static_cast<std::uint64_t>(i % 2));
      for (const Digest& h : nh) {
        const Bytes p = old.payload(0, h);
        const Bytes v = old.ranks[0].seal_value(h, Payload(p.data(), p.size()));
        c.store().put(nd.ranks[0].store_key(h), v.data(), v.size());
      }
    }
  };
  Body fresh = [&] {
    auto w = c.connector(nd);
    for (int i = 0; i < rounds; ++i) save_all(*w, nd, nh, static_cast<std::uint64_t>(i % 2));
  };
  for (const Digest& h : nh) c.allow(nd.ranks[0].store_key(h), {nd.payload(0, h, 0), nd.payload(0, h, 1)});
  for (const Digest& h : oh) c.allow(old.ranks[0].store_key(h), {old.payload(0, h, 0), old.payload(0, h, 1)});
  Body writers = [&] {
    in_threads<Body>(c, {stale, fresh});
    done = true;
  };
  Body reader = [&] {
    while (!done) c.check(*new_conn, nd, nh, false);
  };
  in_threads<Body>(c, {writers, reader});
  c.check(*old_conn, old, oh, false);
  c.save(*new_conn, nd, nh, 2);
  c.check(*new_conn, nd, nh);
}

inline std::string run_id() {
  static std::atomic<std::uint64_t> n{0};
  const auto t = static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  return std::to_string((t ^ (n++ * 0x9e3779b97f4a7c15ull)) % 0xffffffull);
}

}  // namespace detail

/// Runs every case of cases() against a store made by make_store() (called once
/// per case; a std::unique_ptr, std::shared_ptr or any pointer-like owner of a
/// Store). Cases use tenants of their own, so make_store may return handles to
/// one shared store. The store must be safe to use from several threads at once
/// for the racing cases. Never throws for what a case finds: an exception in a
/// case is one of its errors.
template <class MakeStore>
Report check_store(MakeStore&& make_store, const CheckOptions& options = {}) {
  Report report;
  const std::string run = detail::run_id();
  std::size_t index = 0;
  for (const CaseSpec& spec : cases()) {
    const std::size_t i = index++;
    if (!options.only.empty() && std::none_of(options.only.begin(), options.only.end(), [&](const std::string& s) {
          return spec.name.find(s) != std::string::npos;
        })) {
      continue;
    }
    auto store = make_store();
    CaseResult result;
    result.name = spec.name;
    // Each case twice (save and load_into, then the zero-copy path); a case
    // with a keyed reader twice more with every keyed deployment confidential.
    for (const int pass : {0, 1, 2, 3}) {
      const bool zero_copy = (pass & 1) != 0;
      const bool confidential = pass >= 2;
      if (confidential && !spec.keyed) continue;
      detail::Case c(
          spec, *store, options.make_connector,
          "kvkey-check-" + run + "-" + std::to_string(i) + (zero_copy ? "z" : "") + (confidential ? "c" : ""),
          zero_copy, confidential);
      try {
        switch (spec.scenario) {
          case Scenario::baseline: detail::baseline(c); break;
          case Scenario::fault: detail::fault(c); break;
          case Scenario::epoch_bump: detail::epoch_bump(c); break;
          case Scenario::cross_tenant: detail::cross_tenant(c); break;
          case Scenario::stale_writer: detail::stale_writer(c, options.race_rounds); break;
          case Scenario::concurrent_writers: detail::concurrent_writers(c, options.race_rounds); break;
        }
      } catch (const std::exception& e) {
        c.error(std::string("exception: ") + e.what());
      } catch (...) {
        c.error("exception of an unknown type");
      }
      detail::Case::add(result, c.result,
                        std::string(confidential ? "confidential: " : "") + (zero_copy ? "zero-copy: " : ""));
    }
    report.cases.push_back(std::move(result));
  }
  return report;
}

}  // namespace testing
KVKEY_END_NAMESPACE

#endif  // KVKEY_TESTING_HPP
