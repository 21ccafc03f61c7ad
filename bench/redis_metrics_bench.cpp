// SPDX-License-Identifier: Apache-2.0
// The cost of kvkey::Metrics in kvkey::Connector's load path over the
// example's hiredis store: load_into of 1,000 small stored blocks with metrics
// recorded against the same load without, in the same run
// (docs/performance.md, "Metrics").
// Needs a redis-server on 127.0.0.1:$KVKEY_REDIS_PORT.
//
//   without  kvkey::Connector::load_into, no Metrics
//   with     the same call on a Connector recording into a kvkey::Metrics
//            (load counts, payload bytes; one rejected block per call, so
//            record_rejection runs too)
//
// Each round runs both, in alternating order. The figure is the ratio of the
// fastest round of each (contention on a shared machine only ever adds time);
// the medians and the median of the per-round ratios are printed too, and the
// recording calls of one such load are timed alone.
// Usage: kvkey_redis_metrics_bench [rounds] [blocks]
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "redis_ab.hpp"
#include "redis_store.hpp"

#include <kvkey/connector.hpp>
#include <kvkey/metrics.hpp>

int main(int argc, char** argv) {
  kvkey_redis::Options options;
  options.port = redis_ab::port("redis_metrics_bench");
  const std::size_t rounds = argc > 1 ? std::strtoul(argv[1], nullptr, 10) : 101;
  const std::size_t count = argc > 2 ? std::strtoul(argv[2], nullptr, 10) : 1000;
  if (rounds == 0 || count < 2) {
    std::fprintf(stderr, "usage: kvkey_redis_metrics_bench [rounds >= 1] [blocks >= 2]\n");
    return 2;
  }
  const kvkey::KeyNamespace<> ns(redis_ab::identity("bench-metrics", 2, 1, 8));
  std::vector<std::uint32_t> tokens(16 * count);
  for (std::size_t t = 0; t < tokens.size(); ++t) tokens[t] = static_cast<std::uint32_t>(t * 40503 % 151936);
  const std::vector<kvkey::Digest> blocks = ns.block_hashes(tokens);
  constexpr std::size_t payload_bytes = 1024;  // 2 x 2 layers x 1 head x 8 x 16 tokens x 2 bytes: a small block
  std::vector<std::uint8_t> bytes(payload_bytes);
  kvkey::Metrics metrics;
  kvkey_redis::RedisStore store(options);
  kvkey::Connector<>::Options with;
  with.metrics = &metrics;
  with.raise_errors = true;
  kvkey::Connector<>::Options without = with;
  without.metrics = nullptr;
  const kvkey::Connector<> plain(store, std::vector<kvkey::KeyNamespace<>>{ns}, without);
  const kvkey::Connector<> recorded(store, std::vector<kvkey::KeyNamespace<>>{ns}, with);
  std::vector<kvkey::Payload> save(blocks.size(), kvkey::Payload(bytes.data(), bytes.size()));
  if (plain.save(blocks, save) != blocks.size()) {
    std::fprintf(stderr, "redis_metrics_bench: a save failed\n");
    return 1;
  }
  // One foreign value, so every load also records a rejection.
  store.connection().command({"SET", ns.store_key(blocks[0]), "not a kvkey object"});
  std::vector<std::vector<std::uint8_t>> buffers(blocks.size(), std::vector<std::uint8_t>(payload_bytes));
  std::vector<kvkey::MutableBuffer> dests;
  for (auto& b : buffers) dests.push_back({b.data(), b.size()});
  const auto load = [&](const kvkey::Connector<>& c) {
    const auto outcomes = c.load_into(blocks, dests);
    const auto loaded = static_cast<std::size_t>(
        std::count_if(outcomes.begin(), outcomes.end(), [](const kvkey::LoadResult& o) { return o.loaded(); }));
    if (loaded != blocks.size() - 1) {
      std::fprintf(stderr, "redis_metrics_bench: loaded %zu of %zu blocks\n", loaded, blocks.size() - 1);
      std::exit(1);
    }
  };
  const redis_ab::Rounds r = redis_ab::alternate(
      rounds, [&] { load(plain); }, [&] { load(recorded); });
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
  const auto t0 = redis_ab::Clock::now();
  for (std::size_t i = 0; i < calls; ++i) {
    alone.record_rejection(rejection);
    alone.record_load(blocks.size() - 1, 0, 1);
    alone.record_payload_bytes((blocks.size() - 1) * payload_bytes);
  }
  const double record_ns = std::chrono::duration<double, std::nano>(redis_ab::Clock::now() - t0).count() / calls;
  if (alone.snapshot().loads != calls) return 1;

  std::printf(
      "load_into of %zu blocks of %zu bytes, %zu rounds: fastest without metrics %.3f ms, with metrics "
      "%.3f ms, ratio %.3f; medians %.3f ms and %.3f ms, median of the per-round ratios %.3f; recording one "
      "such load's metrics alone: %.0f ns\n",
      blocks.size(), payload_bytes, rounds, r.fastest_a(), r.fastest_b(), r.fastest_b() / r.fastest_a(),
      redis_ab::median(r.a), redis_ab::median(r.b), redis_ab::median(r.ratio), record_ns);
  store.purge(ns.tenant_prefix());
  return 0;
}
