// SPDX-License-Identifier: Apache-2.0
// kvkey::Connector's verified lookup over the example's hiredis store against
// its existence-only lookup, on the same 2,048 stored blocks in the same run (docs/performance.md, "The
// verified lookup"). Needs a redis-server on 127.0.0.1:$KVKEY_REDIS_PORT
// (start one with `redis-server --port P --save ''`, run, stop it).
//
//   lookup_existing  one pipeline of 2,048 EXISTS
//   lookup           one pipeline of 2,048 GETRANGE key 0 1023 and STRLEN key,
//                    each header verified (KeyNamespace::verify_header) and its
//                    value's size checked
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

#include "redis_ab.hpp"
#include "redis_store.hpp"

#include <kvkey/connector.hpp>

int main(int argc, char** argv) {
  kvkey_redis::Options options;
  options.port = redis_ab::port("redis_lookup_bench");
  const std::size_t rounds = argc > 1 ? std::strtoul(argv[1], nullptr, 10) : 31;
  const std::size_t count = argc > 2 ? std::strtoul(argv[2], nullptr, 10) : 2048;
  if (rounds == 0 || count == 0) {
    std::fprintf(stderr, "usage: kvkey_redis_lookup_bench [rounds >= 1] [blocks >= 1]\n");
    return 2;
  }
  const kvkey::KeyNamespace<> ns(redis_ab::identity("bench-lookup", 32, 8, 128));
  std::vector<std::uint32_t> tokens(16 * count);
  for (std::size_t t = 0; t < tokens.size(); ++t) tokens[t] = static_cast<std::uint32_t>(t * 40503 % 151936);
  const std::vector<kvkey::Digest> blocks = ns.block_hashes(tokens);
  constexpr std::size_t payload_bytes = 4096;  // the value's size does not change either lookup's replies
  std::vector<std::uint8_t> bytes(payload_bytes);
  kvkey_redis::RedisStore store(options);
  kvkey::Connector<>::Options o;
  o.payload_size = payload_bytes;
  o.raise_errors = true;
  o.lookup_batch = blocks.size();  // one pipeline per lookup, as lookup_existing's
  const kvkey::Connector<> conn(store, std::vector<kvkey::KeyNamespace<>>{ns}, o);
  for (std::size_t first = 0; first < blocks.size(); first += 256) {
    std::vector<kvkey::Digest> some;
    std::vector<std::vector<std::uint8_t>> copies;
    for (std::size_t b = first; b < std::min(blocks.size(), first + 256); ++b) {
      bytes[0] = static_cast<std::uint8_t>(b);
      some.push_back(blocks[b]);
      copies.push_back(bytes);
    }
    std::vector<kvkey::Payload> save;
    for (const auto& c : copies) save.emplace_back(c.data(), c.size());
    if (conn.save(some, save) != some.size()) {
      std::fprintf(stderr, "redis_lookup_bench: a save failed\n");
      return 1;
    }
  }
  const auto lookup = [&](bool verified) {
    const std::size_t found = verified ? conn.lookup(blocks) : conn.lookup_existing(blocks);
    if (found != blocks.size()) {
      std::fprintf(stderr, "redis_lookup_bench: %s lookup counted %zu of %zu blocks\n",
                   verified ? "verified" : "existence", found, blocks.size());
      std::exit(1);
    }
  };
  const redis_ab::Rounds r = redis_ab::alternate(
      rounds, [&] { lookup(false); }, [&] { lookup(true); });
  std::printf(
      "lookup of %zu blocks, %zu rounds: fastest lookup_existing (EXISTS) %.2f ms, fastest lookup "
      "(GETRANGE + STRLEN, verify_header) %.2f ms, ratio %.2f; medians %.2f ms and %.2f ms, median of the "
      "per-round ratios %.2f\n",
      blocks.size(), rounds, r.fastest_a(), r.fastest_b(), r.fastest_b() / r.fastest_a(), redis_ab::median(r.a),
      redis_ab::median(r.b), redis_ab::median(r.ratio));
  store.purge(ns.tenant_prefix());
  return 0;
}
