// kvkey::Metrics (kvkey/metrics.hpp): counters add up, rejections land in the
// cell of their reason and field, concurrent recording loses nothing, and the
// exposition is valid Prometheus text (checked with promtool when installed).
#include "support/fixtures.hpp"
#include "temp_dir.hpp"

#include <kvkey/connector.hpp>
#include <kvkey/metrics.hpp>
#include <kvkey/store.hpp>

#include <catch2/catch.hpp>

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace {

using kvkey::Metrics;
using kvkey::Reason;

// name{labels} -> value, for every sample line of an exposition.
std::map<std::string, std::uint64_t> samples(const std::string& text) {
  std::map<std::string, std::uint64_t> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    const std::size_t space = line.rfind(' ');
    REQUIRE(space != std::string::npos);
    const bool fresh = out.emplace(line.substr(0, space), std::stoull(line.substr(space + 1))).second;
    CHECK(fresh);  // every series once
  }
  return out;
}

// promtool's verdict on an exposition, or nothing when promtool is not installed.
std::string promtool_check(const std::string& text, bool& ran) {
  ran = std::system("command -v promtool >/dev/null 2>&1") == 0;
  if (!ran) return {};
  kvkey_test::TempDir dir("kvkey-metrics");
  const std::string file = (dir.path() / "metrics.txt").string();
  std::ofstream(file) << text;
  std::string out;
  FILE* p = ::popen(("promtool check metrics < '" + file + "' 2>&1; echo \"exit=$?\"").c_str(), "r");
  REQUIRE(p != nullptr);
  char buf[512];
  while (std::fgets(buf, sizeof buf, p) != nullptr) out += buf;
  ::pclose(p);
  return out;
}

}  // namespace

TEST_CASE("Metrics counts calls and blocks by result", "[metrics]") {
  Metrics m;
  m.record_lookup(3, 1, 2);
  m.record_lookup(4, 0, 0);
  m.record_load(5, 1, 1);
  m.record_save(7, 2);
  m.record_false_hits(2);
  m.record_payload_bytes(4096);
  m.record_payload_bytes(1);
  const kvkey::MetricsSnapshot s = m.snapshot();
  CHECK(s.lookups == 2);
  CHECK(s.lookup_hit == 7);
  CHECK(s.lookup_miss == 1);
  CHECK(s.lookup_rejected == 2);
  CHECK(s.loads == 1);
  CHECK(s.load_loaded == 5);
  CHECK(s.load_missing == 1);
  CHECK(s.load_rejected == 1);
  CHECK(s.saves == 1);
  CHECK(s.save_saved == 7);
  CHECK(s.save_failed == 2);
  CHECK(s.false_hits == 2);
  CHECK(s.payload_verified_bytes == 4097);

  const auto x = samples(m.render());
  CHECK(x.at("kvkey_lookups_total") == 2);
  CHECK(x.at("kvkey_lookup_blocks_total{result=\"hit\"}") == 7);
  CHECK(x.at("kvkey_lookup_blocks_total{result=\"miss\"}") == 1);
  CHECK(x.at("kvkey_lookup_blocks_total{result=\"rejected\"}") == 2);
  CHECK(x.at("kvkey_loads_total") == 1);
  CHECK(x.at("kvkey_load_blocks_total{result=\"loaded\"}") == 5);
  CHECK(x.at("kvkey_load_blocks_total{result=\"missing\"}") == 1);
  CHECK(x.at("kvkey_load_blocks_total{result=\"rejected\"}") == 1);
  CHECK(x.at("kvkey_saves_total") == 1);
  CHECK(x.at("kvkey_save_blocks_total{result=\"saved\"}") == 7);
  CHECK(x.at("kvkey_save_blocks_total{result=\"failed\"}") == 2);
  CHECK(x.at("kvkey_false_hits_total") == 2);
  CHECK(x.at("kvkey_payload_verified_bytes_total") == 4097);
}

TEST_CASE("Metrics counts rejections by reason and field from a fixed table", "[metrics]") {
  Metrics m;
  m.record_rejection(kvkey::Verdict{Reason::identity_mismatch, "kv.dtype"});
  m.record_rejection(kvkey::Verdict{Reason::identity_mismatch, "kv.dtype"});
  m.record_rejection(kvkey::Verdict{Reason::identity_mismatch, "model.weights_epoch"});
  m.record_rejection(kvkey::Verdict{Reason::payload_mismatch, "payload"});
  m.record_rejection(kvkey::Verdict{Reason::malformed, "envelope.magic"});
  m.record_rejection(Reason::malformed, "value.size");
  m.record_rejection(kvkey::Verdict{Reason::block_mismatch, "no such field"});
  m.record_rejection(kvkey::Verdict{Reason::block_mismatch, "another unknown field"});
  m.record_rejection(kvkey::Verdict{Reason::ok, ""});  // not a rejection
  const kvkey::MetricsSnapshot s = m.snapshot();
  CHECK(s.rejected(Reason::identity_mismatch, "kv.dtype") == 2);
  CHECK(s.rejected(Reason::identity_mismatch, "model.weights_epoch") == 1);
  CHECK(s.rejected(Reason::payload_mismatch, "payload") == 1);
  CHECK(s.rejected(Reason::malformed, "envelope.magic") == 1);
  CHECK(s.rejected(Reason::malformed, "value.size") == 1);
  CHECK(s.rejected(Reason::block_mismatch, "other") == 2);
  CHECK(s.rejected(Reason::block_mismatch, "block_hash") == 0);
  CHECK(s.rejected_total() == 8);
  CHECK(s.rejections.size() == 6);

  const auto x = samples(m.render());
  CHECK(x.at("kvkey_rejected_blocks_total{reason=\"identity_mismatch\",field=\"kv.dtype\"}") == 2);
  CHECK(x.at("kvkey_rejected_blocks_total{reason=\"block_mismatch\",field=\"other\"}") == 2);
  std::uint64_t sum = 0;
  std::size_t series = 0;
  for (const auto& [name, value] : x) {
    if (name.rfind("kvkey_rejected_blocks_total{", 0) == 0) {
      sum += value;
      ++series;
    }
  }
  CHECK(sum == 8);
  CHECK(series == 6);
}

TEST_CASE("Every field a verification names has a label of its own", "[metrics]") {
  const auto& fields = kvkey::metrics_field_names();
  for (std::string_view f : kvkey::identity_field_names()) {
    CHECK(fields[Metrics::field_index(fields, f)] == f);
  }
  // Real rejections from a namespace: another dtype's header, another block's, a damaged payload.
  const kvkey::KeyNamespace<kvkey::Sha256> reader(kvkey_test::bf16_identity(16));
  kvkey::Identity fp16 = kvkey_test::bf16_identity(16);
  fp16.kv.dtype = kvkey::KvDtype::fp16;
  const kvkey::KeyNamespace<kvkey::Sha256> writer(fp16);
  const std::vector<kvkey::Digest> blocks = reader.block_hashes(kvkey_test::tokens(32));
  const kvkey::Payload payload = kvkey_test::test_payload(256);
  Metrics m;
  m.record_rejection(reader.verify(writer.seal(blocks[0], payload), blocks[0], payload));
  m.record_rejection(reader.verify(reader.seal(blocks[1], payload), blocks[0], payload));
  m.record_rejection(reader.verify(reader.seal(blocks[0], payload), blocks[0], kvkey_test::test_payload(255)));
  const kvkey::MetricsSnapshot s = m.snapshot();
  CHECK(s.rejected(Reason::identity_mismatch, "kv.dtype") == 1);
  CHECK(s.rejected(Reason::block_mismatch, "block_hash") == 1);
  CHECK(s.rejected_total() == 3);
  CHECK(s.rejected(Reason::identity_mismatch, "other") == 0);
  CHECK(s.rejected(Reason::block_mismatch, "other") == 0);
}

TEST_CASE("Metrics counts store errors by kind, unknown kinds as other", "[metrics]") {
  Metrics m;
  for (std::string_view kind : {"connection", "timeout", "timeout", "protocol", "server", "other", "io", ""}) {
    m.record_store_error(kind);
  }
  const kvkey::MetricsSnapshot s = m.snapshot();
  CHECK(s.store_error("connection") == 1);
  CHECK(s.store_error("timeout") == 2);
  CHECK(s.store_error("protocol") == 1);
  CHECK(s.store_error("server") == 1);
  CHECK(s.store_error("other") == 3);
  const auto x = samples(m.render());
  CHECK(x.at("kvkey_store_errors_total{kind=\"other\"}") == 3);
  CHECK(x.at("kvkey_store_errors_total{kind=\"timeout\"}") == 2);
}

TEST_CASE("Concurrent recording gives exact totals", "[metrics]") {
  Metrics m;
  constexpr std::size_t threads = 4;
  constexpr std::size_t rounds = 20000;
  const std::vector<kvkey::Verdict> verdicts = {{Reason::payload_mismatch, "payload"},
                                                {Reason::identity_mismatch, "tenant"},
                                                {Reason::malformed, "unknown.field"}};
  std::vector<std::thread> pool;
  for (std::size_t t = 0; t < threads; ++t) {
    pool.emplace_back([&m, &verdicts, t] {
      for (std::size_t i = 0; i < rounds; ++i) {
        m.record_lookup(2, 1, 1);
        m.record_load(1, 0, 1);
        m.record_rejection(verdicts[(i + t) % verdicts.size()]);
        m.record_payload_bytes(1000);
        m.record_store_error("timeout");
        m.record_save(3, 0);
        m.record_false_hits(1);
      }
    });
  }
  for (std::thread& th : pool) th.join();
  const kvkey::MetricsSnapshot s = m.snapshot();
  constexpr std::uint64_t n = threads * rounds;
  CHECK(s.lookups == n);
  CHECK(s.lookup_hit == 2 * n);
  CHECK(s.lookup_miss == n);
  CHECK(s.loads == n);
  CHECK(s.load_rejected == n);
  CHECK(s.rejected_total() == n);
  CHECK(s.rejected(Reason::payload_mismatch, "payload") + s.rejected(Reason::identity_mismatch, "tenant") +
            s.rejected(Reason::malformed, "other") ==
        n);
  CHECK(s.payload_verified_bytes == 1000 * n);
  CHECK(s.store_error("timeout") == n);
  CHECK(s.save_saved == 3 * n);
  CHECK(s.false_hits == n);
}

TEST_CASE("The exposition is valid Prometheus text", "[metrics]") {
  Metrics m;
  const std::string empty = m.render();
  m.record_lookup(1, 2, 3);
  m.record_rejection(kvkey::Verdict{Reason::identity_mismatch, "adapter.weights_fingerprint"});
  m.record_rejection(kvkey::Verdict{Reason::payload_mismatch, "payload"});
  m.record_store_error("server");
  const std::string text = m.render();
  for (const std::string& t : {empty, text}) {
    std::istringstream in(t);
    std::string line;
    std::size_t help = 0;
    std::size_t type = 0;
    while (std::getline(in, line)) {
      if (line.rfind("# HELP kvkey_", 0) == 0) ++help;
      if (line.rfind("# TYPE kvkey_", 0) == 0) {
        ++type;
        CHECK(line.size() > 14);
        CHECK(line.substr(line.size() - 14) == "_total counter");
      }
      if (!line.empty() && line[0] != '#') CHECK(line.rfind("kvkey_", 0) == 0);
    }
    CHECK(help == 10);
    CHECK(type == 10);
    bool ran = false;
    const std::string verdict = promtool_check(t, ran);
    if (ran) {
      INFO(verdict);
      CHECK(verdict == "exit=0\n");
    } else {
      WARN("promtool not installed: the exposition was not checked by Prometheus's own linter");
    }
  }
}

TEST_CASE("kvkey::Connector records its saves, lookups, loads and rejections", "[metrics]") {
  kvkey::MemoryStore store;
  const kvkey::KeyNamespace<kvkey::Sha256> ns(kvkey_test::unsized_identity());  // 512-byte payloads
  kvkey::Identity other_tenant = kvkey_test::unsized_identity();
  other_tenant.tenant = "tenant-b";
  const kvkey::KeyNamespace<kvkey::Sha256> other(other_tenant);
  const std::vector<kvkey::Digest> blocks = ns.block_hashes(kvkey_test::tokens(64));
  const kvkey::Payload payload = kvkey_test::test_payload(512);
  Metrics m;
  const kvkey::Connector<> c(store, ns, &m);
  c.save(blocks, std::vector<kvkey::Payload>(blocks.size(), payload));
  REQUIRE(c.lookup(blocks) == 4);
  // Block 1: another tenant's value under this key; block 2: its payload cut by one byte.
  const kvkey::Bytes foreign = other.seal_value(blocks[1], payload);
  store.put(ns.store_key(blocks[1]), foreign.data(), foreign.size());
  const kvkey::Bytes cut = ns.seal_value(blocks[2], payload);
  store.put(ns.store_key(blocks[2]), cut.data(), cut.size() - 1);
  store.remove(ns.store_key(blocks[3]));
  CHECK(c.lookup(blocks) == 1);
  const auto loaded = c.load(blocks);
  CHECK(loaded[0].has_value());
  CHECK(!loaded[1].has_value());
  CHECK(!loaded[2].has_value());
  CHECK(!c.load(blocks[3]).has_value());

  const kvkey::MetricsSnapshot s = m.snapshot();
  CHECK(s.saves == 1);
  CHECK(s.save_saved == 4);
  CHECK(s.lookups == 2);
  CHECK(s.lookup_hit == 4 + 1);
  CHECK(s.lookup_rejected == 2);  // block 1, and block 2 by its size (MemoryStore reports it)
  CHECK(s.lookup_miss == 1);
  CHECK(s.loads == 2);
  CHECK(s.load_loaded == 1);
  CHECK(s.load_rejected == 2);
  CHECK(s.load_missing == 2);
  CHECK(s.rejected(Reason::identity_mismatch, "tenant") == 2);  // at the lookup and at the load
  CHECK(s.rejected(Reason::size_mismatch, "payload_size") == 2);
  CHECK(s.rejected_total() == 4);
  CHECK(s.payload_verified_bytes == 512);
  CHECK(s.false_hits == 3);  // blocks 1 to 3: counted by the first lookup, then not loaded
}
