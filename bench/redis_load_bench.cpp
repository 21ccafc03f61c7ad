// kvkey::Connector's load path over the example's hiredis store
// (kvkey_redis::RedisStore) with payload integrity against raw pipelined GETs
// of the same values, in the same run (docs/performance.md). Needs a
// redis-server on 127.0.0.1:$KVKEY_REDIS_PORT (scripts/bench.sh starts none:
// start one with `redis-server --port P --save ''`, run, stop it).
//
// Cases (16 objects of 1 MiB, one pipeline per iteration):
//   redis_get_raw       GET of every key, the values as hiredis returns them
//   redis_get_copy      the same, each payload then copied into its own
//                       vector: a second copy after hiredis' own
//   redis_load_verified kvkey::Connector::load: the same GETs (one read_many),
//                       each header and payload digest verified in the value
//                       the store returned, the payload copied into a fresh
//                       vector
//   redis_load_into     kvkey::Connector::load_into: the same GETs and checks,
//                       each verified payload copied into a buffer of the
//                       caller's, allocated and touched before timing, reused
#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <kvkey/connector.hpp>

#include "redis_store.hpp"

namespace {

constexpr std::size_t objects = 16;
constexpr std::size_t object_bytes = std::size_t{1} << 20;

struct Store {
  kvkey_redis::Options options;
  kvkey::KeyNamespace<> ns;
  std::vector<kvkey::Digest> blocks;
  std::vector<std::string> keys;

  static kvkey::Identity id() {
    kvkey::Identity i;
    i.tenant = "bench";
    i.model = {"m", "r", 0, std::nullopt, std::nullopt};
    i.kv.dtype = kvkey::KvDtype::bf16;
    i.kv.block_size = 64;
    i.kv.num_layers = i.kv.num_kv_heads = i.kv.head_dim = 64;
    i.kv.layout = "bench";
    return i;
  }

  explicit Store(int port) : ns(id()) {
    options.port = port;
    std::vector<std::uint32_t> tokens(64 * objects);
    for (std::size_t t = 0; t < tokens.size(); ++t) tokens[t] = static_cast<std::uint32_t>(t * 40503 % 151936);
    blocks = ns.block_hashes(tokens);
    std::vector<std::uint8_t> bytes(objects * object_bytes);
    for (std::size_t b = 0; b < bytes.size(); ++b) bytes[b] = static_cast<std::uint8_t>(b * 2654435761u >> 11);
    std::vector<kvkey::Payload> save;
    for (std::size_t o = 0; o < objects; ++o) {
      save.emplace_back(bytes.data() + o * object_bytes, object_bytes);
      keys.push_back(ns.store_key(blocks[o]));
    }
    kvkey_redis::RedisStore redis(options);
    if (connector(redis).save(blocks, save) != objects) throw std::runtime_error("save failed");
  }

  // kvkey::Connector over redis for ns, with the bench's payload size (the
  // identity's geometry is not the 1 MiB objects').
  kvkey::Connector<> connector(kvkey_redis::RedisStore& redis) const {
    kvkey::Connector<>::Options o;
    o.payload_size = object_bytes;
    o.raise_errors = true;
    return kvkey::Connector<>(redis, std::vector<kvkey::KeyNamespace<>>{ns}, o);
  }
};

Store* store = nullptr;

template <bool Copy>
void redis_get(benchmark::State& state) {
  kvkey_redis::Connection conn(store->options);
  std::vector<kvkey_redis::Connection::Command> gets;
  for (const std::string& k : store->keys) gets.push_back({"GET", k});
  for (auto _ : state) {
    const auto replies = conn.pipeline(gets);
    std::vector<std::vector<std::uint8_t>> copies;
    for (const auto& r : replies) {
      if (r->type != REDIS_REPLY_STRING || r->len != kvkey::envelope_size + object_bytes)
        state.SkipWithError("bad reply");
      const auto* v = reinterpret_cast<const std::uint8_t*>(r->str);
      if constexpr (Copy) copies.emplace_back(v + kvkey::envelope_size, v + r->len);
    }
    benchmark::DoNotOptimize(copies.data());
  }
  state.SetBytesProcessed(state.iterations() * static_cast<std::int64_t>(objects * object_bytes));
}
void redis_get_raw(benchmark::State& state) { redis_get<false>(state); }
void redis_get_copy(benchmark::State& state) { redis_get<true>(state); }

void redis_load_verified(benchmark::State& state) {
  kvkey_redis::RedisStore redis(store->options);
  const kvkey::Connector<> connector = store->connector(redis);
  for (auto _ : state) {
    const auto loaded = connector.load(store->blocks);
    for (const auto& l : loaded) {
      if (!l) state.SkipWithError("not loaded");
    }
  }
  state.SetBytesProcessed(state.iterations() * static_cast<std::int64_t>(objects * object_bytes));
}

void redis_load_into(benchmark::State& state) {
  kvkey_redis::RedisStore redis(store->options);
  const kvkey::Connector<> connector = store->connector(redis);
  // Registered up front, as an engine's KV memory is: written once so every
  // page is mapped before timing.
  std::vector<std::uint8_t> arena(objects * object_bytes, 0);
  std::vector<kvkey::MutableBuffer> dests;
  for (std::size_t o = 0; o < objects; ++o) dests.push_back({arena.data() + o * object_bytes, object_bytes});
  for (auto _ : state) {
    const auto loaded = connector.load_into(store->blocks, dests);
    for (const auto& l : loaded) {
      if (!l.loaded()) state.SkipWithError("not loaded");
    }
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * static_cast<std::int64_t>(objects * object_bytes));
}

BENCHMARK(redis_get_raw)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(redis_get_copy)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(redis_load_verified)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(redis_load_into)->UseRealTime()->Unit(benchmark::kMillisecond);

}  // namespace

int main(int argc, char** argv) {
  const char* port = std::getenv("KVKEY_REDIS_PORT");
  if (port == nullptr) {
    std::fprintf(stderr, "redis_load_bench: set KVKEY_REDIS_PORT to a redis-server on 127.0.0.1\n");
    return 2;
  }
  Store s(std::atoi(port));
  store = &s;
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
