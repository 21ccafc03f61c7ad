// SPDX-License-Identifier: Apache-2.0
// Shared by the Redis A/B benches (redis_lookup_bench.cpp, redis_metrics_bench.cpp):
// the stored blocks' identity, the server's port, and rounds that time two
// calls alternately in one run and report the fastest of each (contention on
// a shared machine only ever adds time) with the medians.
#ifndef KVKEY_BENCH_REDIS_AB_HPP
#define KVKEY_BENCH_REDIS_AB_HPP

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include <kvkey/identity.hpp>

namespace redis_ab {

using Clock = std::chrono::steady_clock;

/// A bf16 identity of the given geometry, block size 16.
inline kvkey::Identity identity(std::string tenant, std::uint32_t layers, std::uint32_t kv_heads,
                                std::uint32_t head_dim) {
  kvkey::Identity i;
  i.tenant = std::move(tenant);
  i.model = {"m", "r", 0, std::nullopt, std::nullopt};
  i.kv.dtype = kvkey::KvDtype::bf16;
  i.kv.block_size = 16;
  i.kv.num_layers = layers;
  i.kv.num_kv_heads = kv_heads;
  i.kv.head_dim = head_dim;
  i.kv.layout = "bench";
  return i;
}

/// $KVKEY_REDIS_PORT, or a message and exit(2).
inline int port(const char* bench) {
  const char* p = std::getenv("KVKEY_REDIS_PORT");
  if (p == nullptr) {
    std::fprintf(stderr, "%s: set KVKEY_REDIS_PORT to a redis-server on 127.0.0.1\n", bench);
    std::exit(2);
  }
  return std::atoi(p);
}

inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

/// Milliseconds per round of two calls, a and b, timed alternately.
struct Rounds {
  std::vector<double> a, b, ratio;  // ratio: b / a per round
  double fastest_a() const { return *std::min_element(a.begin(), a.end()); }
  double fastest_b() const { return *std::min_element(b.begin(), b.end()); }
};

template <class A, class B>
Rounds alternate(std::size_t rounds, A&& run_a, B&& run_b) {
  const auto timed = [](auto&& f) {
    const auto t0 = Clock::now();
    f();
    return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  };
  timed(run_a);  // warm: connections, allocations
  timed(run_b);
  Rounds out;
  for (std::size_t r = 0; r < rounds; ++r) {
    double a = 0;
    double b = 0;
    if (r % 2 == 0) {
      a = timed(run_a);
      b = timed(run_b);
    } else {
      b = timed(run_b);
      a = timed(run_a);
    }
    out.a.push_back(a);
    out.b.push_back(b);
    out.ratio.push_back(b / a);
  }
  return out;
}

}  // namespace redis_ab

#endif  // KVKEY_BENCH_REDIS_AB_HPP
