// SPDX-License-Identifier: Apache-2.0
// The cost of kvkey::Metrics in the Redis connector's load path: Connector::
// load_into of 1,000 small stored blocks with metrics recorded against the
// same load without, in the same run (docs/performance.md, "Metrics").
// Needs a redis-server on 127.0.0.1:$KVKEY_REDIS_PORT.
//
//   without  Connector::load_into, no Metrics
//   with     the same call on a Connector recording into a kvkey::Metrics
//            (load counts, payload bytes; one rejected block per call, so
//            record_rejection runs too)
//
// Each round runs both, in alternating order. The figure is the ratio of the
// fastest round of each (contention on a shared machine only ever adds time);
// the medians and the median of the per-round ratios are printed too.
// Usage: kvkey_redis_metrics_bench [rounds] [blocks]
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "redis_connector.hpp"

namespace {

using Clock = std::chrono::steady_clock;

kvkey::Identity bench_identity() {
  kvkey::Identity i;
  i.tenant = "bench-metrics";
  i.model = {"m", "r", 0, std::nullopt, std::nullopt};
  i.kv.dtype = kvkey::KvDtype::bf16;
  i.kv.block_size = 16;
  i.kv.num_layers = 2;
  i.kv.num_kv_heads = 1;
  i.kv.head_dim = 8;
  i.kv.layout = "bench";
  return i;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const char* port = std::getenv("KVKEY_REDIS_PORT");
  if (port == nullptr) {
    std::fprintf(stderr, "redis_metrics_bench: set KVKEY_REDIS_PORT to a redis-server on 127.0.0.1\n");
    return 2;
  }
  const std::size_t rounds = argc > 1 ? std::strtoul(argv[1], nullptr, 10) : 101;
  const std::size_t count = argc > 2 ? std::strtoul(argv[2], nullptr, 10) : 1000;
  if (rounds == 0 || count < 2) {
    std::fprintf(stderr, "usage: kvkey_redis_metrics_bench [rounds >= 1] [blocks >= 2]\n");
    return 2;
  }
  kvkey_redis::Options options;
  options.port = std::atoi(port);
  const kvkey_redis::Namespace ns(bench_identity());
  std::vector<std::uint32_t> tokens(16 * count);
  for (std::size_t t = 0; t < tokens.size(); ++t) tokens[t] = static_cast<std::uint32_t>(t * 40503 % 151936);
  const std::vector<kvkey::Digest> blocks = ns.block_hashes(tokens);
  constexpr std::size_t payload_bytes = 1024;  // 2 x 2 layers x 1 head x 8 x 16 tokens x 2 bytes: a small block
  std::vector<std::uint8_t> bytes(payload_bytes);
  kvkey::Metrics metrics;
  kvkey_redis::Connector plain(options);
  kvkey_redis::Connector recorded(options, &metrics);
  std::vector<kvkey_redis::BlockPayload> save;
  for (std::size_t b = 0; b < blocks.size(); ++b) save.push_back({blocks[b], bytes.data(), bytes.size()});
  plain.save(ns, save);
  // One foreign value, so every load also records a rejection.
  plain.connection().command({"SET", ns.store_key(blocks[0]), "not a kvkey object"});
  std::vector<std::vector<std::uint8_t>> buffers(blocks.size(), std::vector<std::uint8_t>(payload_bytes));
  std::vector<std::uint8_t*> dests;
  for (auto& b : buffers) dests.push_back(b.data());

  auto timed = [&](kvkey_redis::Connector& c) {
    const auto t0 = Clock::now();
    const auto outcomes = c.load_into(ns, blocks, payload_bytes, dests);
    const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    const auto loaded = static_cast<std::size_t>(std::count_if(
        outcomes.begin(), outcomes.end(), [](const auto& o) { return o.status == kvkey_redis::LoadStatus::loaded; }));
    if (loaded != blocks.size() - 1) {
      std::fprintf(stderr, "redis_metrics_bench: loaded %zu of %zu blocks\n", loaded, blocks.size() - 1);
      std::exit(1);
    }
    return ms;
  };
  timed(plain);  // warm: connections, allocations
  timed(recorded);
  std::vector<double> without, with, ratio;
  for (std::size_t r = 0; r < rounds; ++r) {
    double a = 0, b = 0;
    if (r % 2 == 0) {
      a = timed(plain);
      b = timed(recorded);
    } else {
      b = timed(recorded);
      a = timed(plain);
    }
    without.push_back(a);
    with.push_back(b);
    ratio.push_back(b / a);
  }
  const kvkey::MetricsSnapshot s = metrics.snapshot();
  if (s.loads != rounds + 1 || s.rejected_total() != rounds + 1) {
    std::fprintf(stderr, "redis_metrics_bench: metrics counted %llu loads and %llu rejections, expected %zu\n",
                 static_cast<unsigned long long>(s.loads), static_cast<unsigned long long>(s.rejected_total()),
                 rounds + 1);
    return 1;
  }
  // What recording one such load costs by itself (the connector's calls, no I/O).
  constexpr std::size_t calls = 1000000;
  const kvkey::Verdict rejection{kvkey::Reason::malformed, "envelope.size"};
  kvkey::Metrics alone;
  const auto t0 = Clock::now();
  for (std::size_t i = 0; i < calls; ++i) {
    alone.record_rejection(rejection);
    alone.record_load(blocks.size() - 1, 0, 1);
    alone.record_payload_bytes((blocks.size() - 1) * payload_bytes);
  }
  const double record_ns = std::chrono::duration<double, std::nano>(Clock::now() - t0).count() / calls;
  if (alone.snapshot().loads != calls) return 1;
  const double fastest_without = *std::min_element(without.begin(), without.end());
  const double fastest_with = *std::min_element(with.begin(), with.end());
  std::printf("load_into of %zu blocks of %zu bytes, %zu rounds: fastest without metrics %.3f ms, with metrics "
              "%.3f ms, ratio %.3f; medians %.3f ms and %.3f ms, median of the per-round ratios %.3f; recording one "
              "such load's metrics alone: %.0f ns\n",
              blocks.size(), payload_bytes, rounds, fastest_without, fastest_with, fastest_with / fastest_without,
              median(without), median(with), median(ratio), record_ns);
  plain.purge(ns.tenant_prefix());
  return 0;
}
