// SPDX-License-Identifier: Apache-2.0
// kvkey::testing::check_store: the conformance kit for a Store implementation
// (kvkey/store.hpp). It drives a kvkey::Connector against the store through
// the faults a shared KV-cache store produces (foreign objects under the right
// key, one per identity field; an epoch bump; cross-tenant reads; keyed versus
// plain; header and payload bit flips; torn, truncated, empty and non-kvkey
// values; transplanted headers and swapped values; another format version; a
// stale writer racing an epoch bump; concurrent writers of one key) and
// reports, per case, wrong loads (must be 0), lookups that counted a block
// whose header does not verify (must be 0) and intact values the connector
// did not find (a store that loses data). Run it in your store's CI:
//
//   kvkey::testing::StoreReport r = kvkey::testing::check_store([] { return std::make_unique<MyStore>(); });
//   if (!r.ok) std::cerr << r.summary();
#ifndef KVKEY_TESTING_HPP
#define KVKEY_TESTING_HPP

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "kvkey/config.hpp"
#include "kvkey/connector.hpp"
#include "kvkey/digest.hpp"
#include "kvkey/envelope.hpp"
#include "kvkey/fingerprint.hpp"
#include "kvkey/hmac.hpp"
#include "kvkey/identity.hpp"
#include "kvkey/key_namespace.hpp"
#include "kvkey/store.hpp"

KVKEY_BEGIN_NAMESPACE
namespace testing {

/// The outcome of one fault case.
struct CaseResult {
  std::string name;
  bool ok = true;
  /// Loads that returned bytes this namespace did not save for the block.
  std::size_t wrong_loads = 0;
  /// Blocks a lookup counted although their stored header does not verify.
  std::size_t bad_headers_counted = 0;
  /// Intact values the connector did not count (lookup) or return (load):
  /// the store lost, damaged or mixed up what was written.
  std::size_t lost = 0;
  /// The first problem seen, in words; empty when ok.
  std::string detail;
};

/// What check_store found: ok when every case has 0 wrong loads, 0 counted
/// bad headers and nothing lost.
struct StoreReport {
  bool ok = true;
  std::size_t wrong_loads = 0;
  std::size_t bad_headers_counted = 0;
  std::size_t lost = 0;
  std::vector<CaseResult> cases;

  /// The case of that name, or nullptr.
  const CaseResult* find(std::string_view name) const {
    for (const CaseResult& c : cases) {
      if (c.name == name) return &c;
    }
    return nullptr;
  }
  /// One line per case: "ok   name" or "FAIL name: detail".
  std::string summary() const {
    std::string s;
    for (const CaseResult& c : cases)
      s.append(c.ok ? "ok   " : "FAIL ").append(c.name).append(c.ok ? "" : ": " + c.detail) += '\n';
    return s;
  }
};

namespace detail {

inline constexpr std::size_t blocks_per_case = 6;

inline Bytes pattern(std::size_t n, std::uint64_t seed) {
  Bytes b(n);
  std::uint64_t x = 0x9e3779b97f4a7c15ull * (seed + 1);
  for (auto& v : b) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    v = static_cast<std::uint8_t>(x >> 24);
  }
  return b;
}

/// The victim's identity: a small dense model (payload 2 x 2 x 2 x 8 x 4 x 2 = 512 bytes).
inline Identity base_identity() {
  Identity id;
  id.tenant = "conformance";
  id.model.name = "kvkey/check-store";
  id.model.revision = "0123456789abcdef0123456789abcdef01234567";
  id.kv = Kv{KvDtype::bf16, Quant{}, 4, 2, 2, 8, "kvkey.check_store.v1", false};  // block, layers, heads, head_dim
  return id;
}

inline TenantSecret secret(char c) {
  std::string s;
  for (int i = 0; i < 32; ++i) s.push_back(static_cast<char>(c + i));
  return TenantSecret(std::move(s));
}

/// What may be observed for each block of a case.
struct Expect {
  std::vector<std::vector<Bytes>> saved;  ///< payloads this namespace saved for the block
  std::vector<bool> header_ok;            ///< the stored header is one this namespace sealed for the block
  std::vector<bool> intact;               ///< the stored value is one this namespace sealed, unchanged
  explicit Expect(std::size_t n) : saved(n), header_ok(n, false), intact(n, false) {}
  void good(std::size_t i, Bytes payload) {
    saved[i].push_back(std::move(payload));
    header_ok[i] = true;
    intact[i] = true;
  }
};

inline void note(CaseResult& r, const std::string& what) {
  if (r.detail.empty()) r.detail = what;
}

/// Looks up and loads every block through c and scores the case against e.
template <class Hash>
void evaluate(CaseResult& r, const Connector<Hash>& c, const std::vector<Digest>& blocks, const Expect& e) {
  const std::size_t counted = c.lookup(blocks);
  for (std::size_t i = 0; i < counted && i < blocks.size(); ++i) {
    if (!e.header_ok[i]) {
      ++r.bad_headers_counted;
      note(r, "lookup counted block " + std::to_string(i) + ", whose header does not verify");
    }
  }
  std::size_t intact_run = 0;
  while (intact_run < blocks.size() && e.intact[intact_run]) ++intact_run;
  if (counted < intact_run) {
    r.lost += intact_run - counted;
    note(r, "lookup counted " + std::to_string(counted) + " blocks, " + std::to_string(intact_run) + " are intact");
  }
  std::vector<std::optional<Bytes>> loads = c.load(blocks);
  loads.resize(blocks.size());
  if (!blocks.empty()) loads[0] = c.load(blocks[0]);  // the single-block path too
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    if (loads[i]) {
      const auto& ok = e.saved[i];
      if (std::find(ok.begin(), ok.end(), *loads[i]) == ok.end()) {
        ++r.wrong_loads;
        note(r, "load of block " + std::to_string(i) + " returned bytes this namespace did not save");
      }
    } else if (e.intact[i]) {
      ++r.lost;
      note(r, "load of block " + std::to_string(i) + " missed an intact value");
    }
  }
}

inline void put(Store& s, const std::string& key, const Bytes& v) { s.put(key, v.data(), v.size()); }

/// One case's victim: a namespace, its blocks (salted with the case name, so
/// cases never share keys) and a connector over the store.
template <class Hash>
struct Victim {
  KeyNamespace<Hash> ns;
  std::vector<Digest> blocks;
  Connector<Hash> conn;
  Expect expect;

  Victim(Store& store, KeyNamespace<Hash> n, const std::string& salt)
      : ns(std::move(n)), blocks(make_blocks(ns, salt)), conn(store, ns), expect(blocks.size()) {}
  Victim(const Victim&) = delete;
  Victim& operator=(const Victim&) = delete;

  static std::vector<Digest> make_blocks(const KeyNamespace<Hash>& ns, const std::string& salt) {
    std::vector<std::uint32_t> tokens(blocks_per_case * ns.block_size());
    for (std::size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<std::uint32_t>(i * 7919 % 151643);
    HashOptions opt;
    opt.salt = "kvkey.check_store/" + salt;
    return ns.block_hashes(tokens.data(), tokens.size(), opt);
  }
  std::string key(std::size_t i) const { return ns.store_key(blocks[i]); }
  Bytes payload(std::size_t i, std::uint64_t variant = 0) const {
    return pattern(ns.payload_size().value_or(512), i * 1000 + variant);
  }
  /// Saves block i through the connector and records it as expected.
  Bytes save(std::size_t i, std::uint64_t variant = 0) {
    Bytes p = payload(i, variant);
    conn.save(blocks[i], Payload(p.data(), p.size()));
    expect.good(i, p);
    return p;
  }
  Bytes value(std::size_t i, std::uint64_t variant = 0) const {
    const Bytes p = payload(i, variant);
    return ns.seal_value(blocks[i], Payload(p.data(), p.size()));
  }
  void score(CaseResult& r) const { evaluate(r, conn, blocks, expect); }
};

using Plain = Victim<Sha256>;
using Keyed = Victim<HmacSha256>;

inline KeyNamespace<HmacSha256> keyed_ns(const Identity& id, char secret_seed) {
  return KeyNamespace<HmacSha256>(id, HmacSha256(secret(secret_seed)));
}

/// A foreign namespace's value for the victim's block i, under the victim's key.
template <class Hash, class Foreign>
void plant_foreign(Store& s, const Victim<Hash>& v, const KeyNamespace<Foreign>& foreign, std::size_t i) {
  const Bytes p = v.payload(i);
  put(s, v.key(i), foreign.seal_value(v.blocks[i], Payload(p.data(), p.size())));
}

// ---- the cases ----------------------------------------------------------------------------

struct FieldChange {
  const char* field;
  void (*victim)(Identity&);   ///< makes the field meaningful in the victim (may be null)
  void (*foreign)(Identity&);  ///< the one difference of the foreign writer
};

inline void quantized(Identity& id) {
  id.kv.dtype = KvDtype::int8;
  id.kv.quant.scheme = "per_token_asym";
  id.kv.quant.group_size = 8;
  id.kv.quant.scale_dtype = KvDtype::fp16;
  id.kv.quant.zero_point = true;
  id.kv.quant.scales_fingerprint = fingerprint("scales");
}
inline void with_adapter(Identity& id) { id.adapter = Adapter("sql-lora", fingerprint("sql-lora weights")); }

/// One change per salient field (and the shard): every field a foreign writer can differ in.
inline const std::vector<FieldChange>& field_changes() {
  static const std::vector<FieldChange> changes = {
      {"tenant", nullptr, [](Identity& i) { i.tenant = "other-tenant"; }},
      {"model.name", nullptr, [](Identity& i) { i.model.name = "kvkey/other-model"; }},
      {"model.revision", nullptr, [](Identity& i) { i.model.revision = "fedcba9876543210fedcba9876543210fedcba98"; }},
      {"model.weights_epoch", nullptr, [](Identity& i) { i.model.weights_epoch = 1; }},
      {"model.weights_fingerprint", nullptr, [](Identity& i) { i.model.weights_fingerprint = fingerprint("w"); }},
      {"model.positional_fingerprint", nullptr, [](Identity& i) { i.model.positional_fingerprint = fingerprint("r"); }},
      {"kv.dtype", nullptr, [](Identity& i) { i.kv.dtype = KvDtype::fp16; }},
      {"kv.quant.scheme", &quantized, [](Identity& i) { i.kv.quant.scheme = "per_token_sym"; }},
      {"kv.quant.group_size", &quantized, [](Identity& i) { i.kv.quant.group_size = 16; }},
      {"kv.quant.scale_dtype", &quantized, [](Identity& i) { i.kv.quant.scale_dtype = KvDtype::fp32; }},
      {"kv.quant.zero_point", &quantized, [](Identity& i) { i.kv.quant.zero_point = false; }},
      {"kv.quant.scales_fingerprint", &quantized,
       [](Identity& i) { i.kv.quant.scales_fingerprint = fingerprint("s2"); }},
      {"kv.block_size", nullptr, [](Identity& i) { i.kv.block_size = 8; }},
      {"kv.num_layers", nullptr, [](Identity& i) { i.kv.num_layers = 4; }},
      {"kv.num_kv_heads", nullptr, [](Identity& i) { i.kv.num_kv_heads = 4; }},
      {"kv.head_dim", nullptr, [](Identity& i) { i.kv.head_dim = 16; }},
      {"kv.layout", nullptr, [](Identity& i) { i.kv.layout = "kvkey.check_store.v2"; }},
      {"kv.mla", nullptr, [](Identity& i) { i.kv.mla = true; }},
      {"adapter", nullptr, &with_adapter},
      {"adapter.name", &with_adapter, [](Identity& i) { i.adapter->name = "other-lora"; }},
      {"adapter.weights_fingerprint", &with_adapter,
       [](Identity& i) { i.adapter->weights_fingerprint = fingerprint("other weights"); }},
      {"shard", nullptr,
       [](Identity& i) {
         i.shard.tp_size = 2;
         i.shard.tp_rank = 1;
       }},
  };
  return changes;
}

inline void foreign_object(Store& s, CaseResult& r, const FieldChange& change) {
  Identity victim_id = base_identity();
  if (change.victim != nullptr) change.victim(victim_id);
  Identity foreign_id = victim_id;
  change.foreign(foreign_id);
  Plain v(s, KeyNamespace<>(victim_id), r.name);
  const KeyNamespace<> foreign(foreign_id);
  for (std::size_t i = 0; i < v.blocks.size(); ++i) plant_foreign(s, v, foreign, i);
  v.score(r);
}

inline void roundtrip(Store& s, CaseResult& r) {
  Plain v(s, KeyNamespace<>(base_identity()), r.name);
  for (std::size_t i = 0; i < v.blocks.size(); ++i) (void)v.save(i);
  v.score(r);
}

inline void roundtrip_keyed(Store& s, CaseResult& r) {
  Keyed v(s, keyed_ns(base_identity(), 'a'), r.name);
  for (std::size_t i = 0; i < v.blocks.size(); ++i) (void)v.save(i);
  v.score(r);
}

inline void missing(Store& s, CaseResult& r) {
  const Plain v(s, KeyNamespace<>(base_identity()), r.name);
  v.score(r);
}

// The old epoch's writer saves its blocks and, for the later ones, plants its
// values under the new epoch's keys; the new epoch saves the first two itself.
inline void epoch_bump(Store& s, CaseResult& r) {
  Identity old_id = base_identity();
  Identity new_id = old_id;
  new_id.model.weights_epoch = 1;
  Plain old_epoch(s, KeyNamespace<>(old_id), r.name);
  Plain v(s, KeyNamespace<>(new_id), r.name);
  for (std::size_t i = 0; i < old_epoch.blocks.size(); ++i) (void)old_epoch.save(i);
  for (std::size_t i = 0; i < v.blocks.size(); ++i) {
    if (i < 2) {
      (void)v.save(i, 1);
    } else {
      plant_foreign(s, v, old_epoch.ns, i);
    }
  }
  v.score(r);
  old_epoch.score(r);  // the old epoch's own values stay readable to it
}

inline void cross_tenant(Store& s, CaseResult& r) {
  Identity a_id = base_identity();
  Identity b_id = a_id;
  b_id.tenant = "conformance-b";
  Plain a(s, KeyNamespace<>(a_id), r.name);
  Plain v(s, KeyNamespace<>(b_id), r.name);
  for (std::size_t i = 0; i < a.blocks.size(); ++i) {
    (void)a.save(i);
    if (i != 1) plant_foreign(s, v, a.ns, i);  // a's value under b's key
  }
  (void)v.save(1);
  v.score(r);
}

inline void keyed_reads_plain(Store& s, CaseResult& r) {
  Keyed v(s, keyed_ns(base_identity(), 'a'), r.name);
  const KeyNamespace<> plain(base_identity());
  const KeyNamespace<HmacSha256> other_secret = keyed_ns(base_identity(), 'b');
  for (std::size_t i = 0; i < v.blocks.size(); ++i) {
    if (i % 3 == 0) {
      // Another tenant secret's header names the same identity and block: only
      // the payload's tag can tell, so lookup may count it and load must not return it.
      plant_foreign(s, v, other_secret, i);
      v.expect.header_ok[i] = true;
    }
    if (i % 3 == 1) plant_foreign(s, v, plain, i);
    if (i % 3 == 2) (void)v.save(i);
  }
  v.score(r);
}

inline void plain_reads_keyed(Store& s, CaseResult& r) {
  Plain v(s, KeyNamespace<>(base_identity()), r.name);
  const KeyNamespace<HmacSha256> keyed = keyed_ns(base_identity(), 'a');
  for (std::size_t i = 0; i < v.blocks.size(); ++i) {
    if (i % 2 == 0) {
      plant_foreign(s, v, keyed, i);
    } else {
      (void)v.save(i);
    }
  }
  v.score(r);
}

// Stores v's value of block i with fn applied, recording that v saved it.
template <class Hash, class F>
void damaged(Store& s, Victim<Hash>& v, std::size_t i, bool header_ok, F&& fn) {
  const Bytes p = v.payload(i);
  Bytes value = v.ns.seal_value(v.blocks[i], Payload(p.data(), p.size()));
  fn(value);
  put(s, v.key(i), value);
  v.expect.saved[i].push_back(p);
  v.expect.header_ok[i] = header_ok;
}

// Bits a header check must catch: magic, version, size, identity length, block
// hash, slice, namespace kind, identity, padding.
inline constexpr std::size_t checked_header_bits[] = {3,          8 * 8 + 1, 10 * 8,     12 * 8 + 2,  20 * 8 + 5,
                                                      56 * 8 + 1, 72 * 8,    73 * 8 + 3, 120 * 8 + 6, 1000 * 8};

// Runs run(victim) on a plain or a keyed victim of the base identity.
template <class F>
void plain_or_keyed(Store& s, CaseResult& r, bool keyed, F&& run) {
  if (keyed) {
    Keyed v(s, keyed_ns(base_identity(), 'a'), r.name);
    run(v);
  } else {
    Plain v(s, KeyNamespace<>(base_identity()), r.name);
    run(v);
  }
}

inline void header_bit_flips(Store& s, CaseResult& r, bool keyed) {
  plain_or_keyed(s, r, keyed, [&](auto& v) {
    for (std::size_t i = 0; i < v.blocks.size(); ++i) {
      const std::size_t bit = checked_header_bits[i % std::size(checked_header_bits)];
      damaged(s, v, i, false, [bit](Bytes& b) { b[bit / 8] ^= static_cast<std::uint8_t>(1u << (bit % 8)); });
    }
    v.score(r);
  });
}

// Bits only the payload's check can catch: the payload size, nonce and digest
// fields of the header, and the payload itself. Lookup may count these; load may not return them.
inline void payload_bit_flips(Store& s, CaseResult& r, bool keyed) {
  static constexpr std::size_t offsets[] = {48, 80, 96, 111, envelope_size, envelope_size + 511};
  plain_or_keyed(s, r, keyed, [&](auto& v) {
    for (std::size_t i = 0; i < v.blocks.size(); ++i) {
      const std::size_t at = offsets[i % std::size(offsets)];
      damaged(s, v, i, true, [at](Bytes& b) { b[at] ^= 0x04; });
    }
    v.score(r);
  });
}

// A torn write: the start of a newer value of the block, the rest of an older one.
inline void torn(Store& s, CaseResult& r) {
  Plain v(s, KeyNamespace<>(base_identity()), r.name);
  static constexpr std::size_t cuts[] = {100, envelope_size, envelope_size + 1, envelope_size + 256};
  for (std::size_t i = 0; i < v.blocks.size(); ++i) {
    const Bytes older = v.value(i, 0);
    Bytes mixed = v.value(i, 1);
    const std::size_t cut = cuts[i % std::size(cuts)];
    std::copy(older.begin() + static_cast<std::ptrdiff_t>(cut), older.end(),
              mixed.begin() + static_cast<std::ptrdiff_t>(cut));
    put(s, v.key(i), mixed);
    v.expect.saved[i] = {v.payload(i, 0), v.payload(i, 1)};
    v.expect.header_ok[i] = true;  // a header of this block; only its digest belongs to the other write
  }
  v.score(r);
}

inline void truncated(Store& s, CaseResult& r) {
  Plain v(s, KeyNamespace<>(base_identity()), r.name);
  static constexpr std::size_t lengths[] = {
      1, 512, envelope_size - 1, envelope_size, envelope_size + 1, envelope_size + 511};
  for (std::size_t i = 0; i < v.blocks.size(); ++i) {
    const std::size_t n = lengths[i % std::size(lengths)];
    damaged(s, v, i, n >= envelope_size, [n](Bytes& b) { b.resize(n); });
  }
  v.score(r);
}

inline void empty_values(Store& s, CaseResult& r) {
  const Plain v(s, KeyNamespace<>(base_identity()), r.name);
  for (std::size_t i = 0; i < v.blocks.size(); ++i) put(s, v.key(i), Bytes());
  v.score(r);
}

inline void non_kvkey_values(Store& s, CaseResult& r) {
  const Plain v(s, KeyNamespace<>(base_identity()), r.name);
  const std::string json = "{\"tokens\": [1, 2, 3], \"kv\": \"...\"}";
  const std::vector<Bytes> values = {pattern(2048, 7),
                                     Bytes(10, 'x'),
                                     Bytes(json.begin(), json.end()),
                                     Bytes(envelope_size + 512, 0),
                                     Bytes(envelope_magic, envelope_magic + sizeof envelope_magic),
                                     pattern(envelope_size, 9)};
  for (std::size_t i = 0; i < v.blocks.size(); ++i) put(s, v.key(i), values[i % values.size()]);
  v.score(r);
}

// Even blocks: this block's header on the next block's payload (the header
// verifies, the payload does not). Odd blocks: the previous block's header on this block's payload.
inline void transplanted_headers(Store& s, CaseResult& r) {
  Plain v(s, KeyNamespace<>(base_identity()), r.name);
  for (std::size_t i = 0; i < v.blocks.size(); ++i) {
    const std::size_t other = i % 2 == 0 ? i + 1 : i - 1;
    const Bytes mine = v.value(i);
    const Bytes theirs = v.value(other);
    Bytes value = i % 2 == 0 ? mine : theirs;
    const Bytes& payload_from = i % 2 == 0 ? theirs : mine;
    std::copy(payload_from.begin() + envelope_size, payload_from.end(), value.begin() + envelope_size);
    put(s, v.key(i), value);
    v.expect.saved[i].push_back(v.payload(i));
    v.expect.header_ok[i] = i % 2 == 0;
  }
  v.score(r);
}

inline void swapped_values(Store& s, CaseResult& r) {
  Plain v(s, KeyNamespace<>(base_identity()), r.name);
  for (std::size_t i = 0; i < v.blocks.size(); ++i) {
    put(s, v.key(i), v.value(i % 2 == 0 ? i + 1 : i - 1));
    v.expect.saved[i].push_back(v.payload(i));
  }
  v.score(r);
}

inline void other_format_version(Store& s, CaseResult& r) {
  Plain v(s, KeyNamespace<>(base_identity()), r.name);
  for (std::size_t i = 0; i < v.blocks.size(); ++i) {
    const std::uint16_t version = static_cast<std::uint16_t>(i % 2 == 0 ? format_version + 1 : format_version - 1);
    damaged(s, v, i, false, [version](Bytes& b) {
      b[envelope_layout::version] = static_cast<std::uint8_t>(version & 0xff);
      b[envelope_layout::version + 1] = static_cast<std::uint8_t>(version >> 8);
    });
  }
  v.score(r);
}

// The expectation of v's blocks from what the store holds once writers are
// done: intact where the stored value is one v wrote (`written[i]`).
template <class Hash>
void settle(Store& s, Victim<Hash>& v, const std::vector<std::vector<Bytes>>& written,
            const std::vector<std::vector<Bytes>>& payloads) {
  for (std::size_t i = 0; i < v.blocks.size(); ++i) {
    v.expect.saved[i] = payloads[i];
    const std::optional<Bytes> now = s.get(v.key(i));
    const bool mine = now && std::find(written[i].begin(), written[i].end(), *now) != written[i].end();
    v.expect.header_ok[i] = mine;
    v.expect.intact[i] = mine;
  }
}

// A writer still on the old epoch keeps writing values sealed for the old
// identity under the new epoch's keys while the new epoch's writer saves its own.
inline void stale_writer_races_epoch_bump(Store& s, CaseResult& r, int rounds) {
  Identity new_id = base_identity();
  new_id.model.weights_epoch = 1;
  Plain v(s, KeyNamespace<>(new_id), r.name);
  const KeyNamespace<> stale(base_identity());
  std::vector<std::vector<Bytes>> written(v.blocks.size()), payloads(v.blocks.size());
  for (std::size_t i = 0; i < v.blocks.size(); ++i) {
    written[i].push_back(v.value(i));
    payloads[i].push_back(v.payload(i));
  }
  std::exception_ptr failure;
  std::thread stale_writer([&] {
    try {
      for (int k = 0; k < rounds; ++k) {
        for (std::size_t i = 0; i < v.blocks.size(); ++i) plant_foreign(s, v, stale, i);
      }
    } catch (...) {
      failure = std::current_exception();
    }
  });
  for (int k = 0; k < rounds; ++k) {
    for (std::size_t i = 0; i < v.blocks.size(); ++i) put(s, v.key(i), written[i][0]);
  }
  stale_writer.join();
  if (failure) std::rethrow_exception(failure);
  settle(s, v, written, payloads);
  v.score(r);
}

// Several writers of the same namespace save different bytes for the same
// blocks at once: every load must be one writer's bytes, and a store whose
// writes are atomic keeps one writer's whole value.
inline void concurrent_writers(Store& s, CaseResult& r, int rounds) {
  constexpr std::size_t writers = 4;
  Plain v(s, KeyNamespace<>(base_identity()), r.name);
  std::vector<std::vector<Bytes>> written(v.blocks.size()), payloads(v.blocks.size());
  for (std::size_t i = 0; i < v.blocks.size(); ++i) {
    for (std::size_t w = 0; w < writers; ++w) {
      written[i].push_back(v.value(i, w));
      payloads[i].push_back(v.payload(i, w));
    }
  }
  std::vector<std::exception_ptr> failures(writers);
  std::vector<std::thread> threads;
  for (std::size_t w = 0; w < writers; ++w) {
    threads.emplace_back([&, w] {
      try {
        for (int k = 0; k < rounds; ++k) {
          for (std::size_t i = 0; i < v.blocks.size(); ++i) put(s, v.key(i), written[i][w]);
        }
      } catch (...) {
        failures[w] = std::current_exception();
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (const std::exception_ptr& f : failures) {
    if (f) std::rethrow_exception(f);
  }
  settle(s, v, written, payloads);
  for (std::size_t i = 0; i < v.blocks.size(); ++i) {
    if (!v.expect.intact[i]) {
      ++r.lost;
      note(r, "after concurrent writes block " + std::to_string(i) + " holds no writer's whole value");
    }
  }
  v.score(r);
}

}  // namespace detail

/// Options of check_store.
struct CheckOptions {
  /// Write rounds of the racing cases (stale writer, concurrent writers).
  int race_rounds = 50;
};

/// Runs every fault case against a store made by make_store() (called once per
/// case; it returns a std::unique_ptr or std::shared_ptr to a Store, or any
/// pointer-like owner). Cases use distinct keys, so make_store may return
/// handles to one shared store; the store needs no cleaning between runs. The
/// store must be safe to use from several threads at once for the racing
/// cases (MemoryStore is; a client with one connection per call, too). An
/// exception from the store fails its case (detail names it).
template <class MakeStore>
StoreReport check_store(MakeStore&& make_store, const CheckOptions& options = {}) {
  using Case = std::function<void(kvkey::Store&, CaseResult&)>;
  std::vector<std::pair<std::string, Case>> cases = {
      {"roundtrip", &detail::roundtrip},
      {"roundtrip_keyed", &detail::roundtrip_keyed},
      {"missing", &detail::missing},
  };
  for (const detail::FieldChange& change : detail::field_changes()) {
    cases.emplace_back(std::string("foreign_object.") + change.field,
                       [change](kvkey::Store& s, CaseResult& r) { detail::foreign_object(s, r, change); });
  }
  const int rounds = options.race_rounds;
  const std::vector<std::pair<std::string, Case>> more = {
      {"epoch_bump", &detail::epoch_bump},
      {"cross_tenant", &detail::cross_tenant},
      {"keyed_reads_plain", &detail::keyed_reads_plain},
      {"plain_reads_keyed", &detail::plain_reads_keyed},
      {"header_bit_flip", [](kvkey::Store& s, CaseResult& r) { detail::header_bit_flips(s, r, false); }},
      {"header_bit_flip_keyed", [](kvkey::Store& s, CaseResult& r) { detail::header_bit_flips(s, r, true); }},
      {"payload_bit_flip", [](kvkey::Store& s, CaseResult& r) { detail::payload_bit_flips(s, r, false); }},
      {"payload_bit_flip_keyed", [](kvkey::Store& s, CaseResult& r) { detail::payload_bit_flips(s, r, true); }},
      {"torn_value", &detail::torn},
      {"truncated_value", &detail::truncated},
      {"empty_value", &detail::empty_values},
      {"non_kvkey_value", &detail::non_kvkey_values},
      {"transplanted_header", &detail::transplanted_headers},
      {"swapped_values", &detail::swapped_values},
      {"other_format_version", &detail::other_format_version},
      {"stale_writer_races_epoch_bump",
       [rounds](kvkey::Store& s, CaseResult& r) { detail::stale_writer_races_epoch_bump(s, r, rounds); }},
      {"concurrent_writers", [rounds](kvkey::Store& s, CaseResult& r) { detail::concurrent_writers(s, r, rounds); }},
  };
  cases.insert(cases.end(), more.begin(), more.end());

  StoreReport report;
  for (const auto& [name, run] : cases) {
    CaseResult r;
    r.name = name;
    try {
      auto store = make_store();
      run(*store, r);
    } catch (const std::exception& e) {
      r.ok = false;
      detail::note(r, std::string("exception: ") + e.what());
    } catch (...) {
      r.ok = false;
      detail::note(r, "exception of an unknown type");
    }
    r.ok = r.ok && r.wrong_loads == 0 && r.bad_headers_counted == 0 && r.lost == 0;
    report.wrong_loads += r.wrong_loads;
    report.bad_headers_counted += r.bad_headers_counted;
    report.lost += r.lost;
    report.ok = report.ok && r.ok;
    report.cases.push_back(std::move(r));
  }
  return report;
}

}  // namespace testing
KVKEY_END_NAMESPACE

#endif  // KVKEY_TESTING_HPP
