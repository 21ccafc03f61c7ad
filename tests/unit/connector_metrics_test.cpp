// The connector's metrics for one scenario (tests/data/connector_metrics_scenario.json),
// false hits included, must be what kvkey.Connector over kvkey.stores.MemoryStore
// records for the same scenario (python/tests/test_connector_metrics.py runs it too):
// both compare against the scenario's committed `expect`.
#include <kvkey/any_key_namespace.hpp>
#include <kvkey/connector.hpp>
#include <kvkey/metrics.hpp>
#include <kvkey/store.hpp>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <cstddef>
#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

namespace {

using nlohmann::json;

std::string scenario_path() { return std::string(KVKEY_TEST_DATA_DIR) + "/connector_metrics_scenario.json"; }

kvkey::Identity scenario_identity(const std::string& tenant) {
  kvkey::Identity id;
  id.tenant = tenant;
  id.model.name = "kvkey/metrics";
  id.model.revision = "0123456789abcdef0123456789abcdef01234567";
  id.kv = kvkey::Kv{kvkey::KvDtype::bf16, kvkey::Quant{}, 4, 2, 2, 8, "kvkey.metrics.v1", false};
  id.shard.tp_size = 2;
  return id;
}

kvkey::Bytes payload(std::size_t size, std::size_t rank, std::size_t block, std::size_t version) {
  kvkey::Bytes p(size);
  for (std::size_t j = 0; j < size; ++j)
    p[j] = static_cast<std::uint8_t>((j + 31 * block + 7 * rank + 101 * version) % 256);
  return p;
}

// kvkey.Metrics.as_dict()'s shape.
json as_dict(const kvkey::MetricsSnapshot& s) {
  json d;
  d["lookups"] = s.lookups;
  d["lookup_blocks"] = {{"hit", s.lookup_hit}, {"miss", s.lookup_miss}, {"rejected", s.lookup_rejected}};
  d["loads"] = s.loads;
  d["load_blocks"] = {{"loaded", s.load_loaded}, {"missing", s.load_missing}, {"rejected", s.load_rejected}};
  d["saves"] = s.saves;
  d["save_blocks"] = {{"saved", s.save_saved}, {"failed", s.save_failed}};
  json rejected = json::object();
  for (const kvkey::MetricsSnapshot::Rejection& r : s.rejections) {
    rejected[std::string(kvkey::to_string(r.reason))][std::string(r.field)] = r.count;
  }
  d["rejected_blocks"] = rejected;
  d["rejections"] = s.rejected_total();
  d["false_hits"] = s.false_hits;
  d["payload_verified_bytes"] = s.payload_verified_bytes;
  json errors = json::object();
  for (std::size_t k = 0; k < kvkey::store_error_kinds.size(); ++k) {
    errors[std::string(kvkey::store_error_kinds[k])] = s.store_errors[k];
  }
  d["store_errors"] = errors;
  return d;
}

json run_scenario(const json& scenario) {
  kvkey::MemoryStore store;
  kvkey::Metrics metrics;
  const kvkey::AnyKeyNamespace ns(scenario_identity("metrics-scenario"));
  const kvkey::AnyKeyNamespace other(scenario_identity("metrics-scenario-other"));
  const std::vector<kvkey::AnyKeyNamespace> ranks = {ns.for_rank(0), ns.for_rank(1)};
  kvkey::Connector<kvkey::AnyKeyNamespace>::Options opt;
  opt.metrics = &metrics;
  const kvkey::Connector<kvkey::AnyKeyNamespace> conn(store, ranks, opt);
  std::vector<std::uint32_t> tokens(4 * scenario["blocks"].get<std::size_t>());
  for (std::size_t t = 0; t < tokens.size(); ++t) tokens[t] = static_cast<std::uint32_t>(t);
  const std::vector<kvkey::Digest> hashes = ns.block_hashes(tokens.data(), tokens.size());
  const std::size_t size = static_cast<std::size_t>(*ranks[0].payload_size());
  auto blocks_of = [&](const json& step) {
    std::vector<kvkey::Digest> b;
    for (const json& i : step["blocks"]) b.push_back(hashes.at(i.get<std::size_t>()));
    return b;
  };
  for (const json& step : scenario["steps"]) {
    const std::string op = step["op"];
    const std::size_t rank = step.value("rank", std::size_t{0});
    if (op == "save") {
      std::vector<kvkey::Bytes> ps;
      std::vector<kvkey::Payload> views;
      for (const json& i : step["blocks"]) ps.push_back(payload(size, rank, i, step.value("version", std::size_t{0})));
      for (const kvkey::Bytes& p : ps) views.emplace_back(p.data(), p.size());
      (void)conn.save(blocks_of(step), views, rank);
    } else if (op == "lookup") {
      std::optional<std::size_t> max_tokens;
      if (step.contains("max_tokens")) max_tokens = step["max_tokens"].get<std::size_t>();
      (void)conn.lookup(blocks_of(step), max_tokens);
    } else if (op == "load") {
      (void)conn.load(blocks_of(step), rank);
    } else if (op == "load_into") {
      std::vector<kvkey::Bytes> bufs(step["blocks"].size(), kvkey::Bytes(size));
      std::vector<kvkey::MutableBuffer> dest;
      for (kvkey::Bytes& b : bufs) dest.push_back({b.data(), b.size()});
      (void)conn.load_into(blocks_of(step), dest, rank);
    } else {
      const kvkey::Digest& h = hashes.at(step["block"].get<std::size_t>());
      const std::string key = ranks[rank].store_key(h);
      if (op == "foreign") {
        const kvkey::Bytes p = payload(size, rank, step["block"], 0);
        const kvkey::Bytes v = other.for_rank(rank).seal_value(h, kvkey::Payload(p.data(), p.size()));
        store.put(key, v.data(), v.size());
      } else if (op == "flip") {
        kvkey::Bytes v = *store.get(key);
        v.at(step["at"].get<std::size_t>()) ^= 4;
        store.put(key, v.data(), v.size());
      } else if (op == "delete") {
        store.remove(key);
      } else {
        FAIL("unknown step " << op);
      }
    }
  }
  return as_dict(metrics.snapshot());
}

}  // namespace

TEST_CASE("Connector metrics: the shared scenario records the committed snapshot", "[connector][metrics]") {
  std::ifstream in(scenario_path());
  REQUIRE(in.good());
  const json scenario = json::parse(in);
  const json got = run_scenario(scenario);
  INFO(got.dump(2));
  CHECK(got == scenario["expect"]);
  CHECK(got["false_hits"].get<std::uint64_t>() > 0);
}

TEST_CASE("Connector metrics: regenerate the scenario's expect", "[.metrics-generate]") {
  json scenario;
  {
    std::ifstream in(scenario_path());
    scenario = json::parse(in);
  }
  scenario["expect"] = run_scenario(scenario);
  std::ofstream(scenario_path()) << scenario.dump(2) << "\n";
}
