// SPDX-License-Identifier: Apache-2.0
// The Redis connector's verified lookup against its existence-only lookup, on
// the same 2,048 stored blocks in the same run (docs/performance.md, "The
// verified lookup"). Needs a redis-server on 127.0.0.1:$KVKEY_REDIS_PORT
// (start one with `redis-server --port P --save ''`, run, stop it).
//
//   lookup_existing  one pipeline of 2,048 EXISTS
//   lookup           one pipeline of 2,048 GETRANGE key 0 1023, each header
//                    verified in hiredis' read buffer (KeyNamespace::verify_header)
//
// Each round runs both, in alternating order. The figure is the ratio of the
// fastest round of each: on a shared machine the other processes only ever
// add time, so the fastest round is the closest to the cost of the call
// itself. The medians and the median of the per-round ratios are printed too.
// Usage: kvkey_redis_lookup_bench [rounds] [blocks]
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
  i.tenant = "bench-lookup";
  i.model = {"m", "r", 0, std::nullopt, std::nullopt};
  i.kv.dtype = kvkey::KvDtype::bf16;
  i.kv.block_size = 16;
  i.kv.num_layers = 32;
  i.kv.num_kv_heads = 8;
  i.kv.head_dim = 128;
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
    std::fprintf(stderr, "redis_lookup_bench: set KVKEY_REDIS_PORT to a redis-server on 127.0.0.1\n");
    return 2;
  }
  const std::size_t rounds = argc > 1 ? std::strtoul(argv[1], nullptr, 10) : 31;
  const std::size_t count = argc > 2 ? std::strtoul(argv[2], nullptr, 10) : 2048;
  if (rounds == 0 || count == 0) {
    std::fprintf(stderr, "usage: kvkey_redis_lookup_bench [rounds >= 1] [blocks >= 1]\n");
    return 2;
  }
  kvkey_redis::Options options;
  options.port = std::atoi(port);
  const kvkey_redis::Namespace ns(bench_identity());
  std::vector<std::uint32_t> tokens(16 * count);
  for (std::size_t t = 0; t < tokens.size(); ++t) tokens[t] = static_cast<std::uint32_t>(t * 40503 % 151936);
  const std::vector<kvkey::Digest> blocks = ns.block_hashes(tokens);
  constexpr std::size_t payload_bytes = 4096;  // the value's size does not change either lookup's replies
  std::vector<std::uint8_t> bytes(payload_bytes);
  kvkey_redis::Connector store(options);
  for (std::size_t first = 0; first < blocks.size(); first += 256) {
    std::vector<kvkey_redis::BlockPayload> save;
    for (std::size_t b = first; b < std::min(blocks.size(), first + 256); ++b) {
      bytes[0] = static_cast<std::uint8_t>(b);
      save.push_back({blocks[b], bytes.data(), bytes.size()});
    }
    store.save(ns, save);
  }
  const std::vector<const kvkey_redis::Namespace*> ranks = {&ns};
  auto timed = [&](bool verified) {
    const auto t0 = Clock::now();
    const auto found = verified ? store.lookup(ranks, blocks) : store.lookup_existing(ranks, blocks);
    const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    if (found.prefix.blocks != blocks.size()) {
      std::fprintf(stderr, "redis_lookup_bench: %s lookup counted %zu of %zu blocks\n",
                   verified ? "verified" : "existence", found.prefix.blocks, blocks.size());
      std::exit(1);
    }
    return ms;
  };
  timed(false);  // warm: connection, allocations
  timed(true);
  std::vector<double> existing, verified, ratio;
  for (std::size_t r = 0; r < rounds; ++r) {
    double e = 0, v = 0;
    if (r % 2 == 0) {
      e = timed(false);
      v = timed(true);
    } else {
      v = timed(true);
      e = timed(false);
    }
    existing.push_back(e);
    verified.push_back(v);
    ratio.push_back(v / e);
  }
  const double fastest_e = *std::min_element(existing.begin(), existing.end());
  const double fastest_v = *std::min_element(verified.begin(), verified.end());
  std::printf("lookup of %zu blocks, %zu rounds: fastest lookup_existing (EXISTS) %.2f ms, fastest lookup "
              "(GETRANGE + verify_header) %.2f ms, ratio %.2f; medians %.2f ms and %.2f ms, median of the "
              "per-round ratios %.2f\n",
              blocks.size(), rounds, fastest_e, fastest_v, fastest_v / fastest_e, median(existing), median(verified),
              median(ratio));
  store.purge(ns.tenant_prefix());
  return 0;
}
