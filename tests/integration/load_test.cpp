// SPDX-License-Identifier: Apache-2.0
// Many clients, many deployments, one server: every load returns exactly the
// bytes its deployment wrote for that block, and every acknowledged save is
// found later. The run is bounded by its operation count, not by a clock: a
// slow or busy machine takes longer, it does not fail.
#include <catch2/catch.hpp>

#include <fmt/format.h>

#include <atomic>
#include <chrono>
#include <random>
#include <set>
#include <thread>
#include <tuple>
#include <unordered_map>

#include "support.hpp"

using it::Deployment;
using it::Status;
using Clock = std::chrono::steady_clock;

namespace {

constexpr std::size_t client_threads = 8;
constexpr std::size_t ops_per_thread = 10000;
constexpr std::size_t prompts = 32;  // 8 families of 4 prompts sharing their first 2 blocks
constexpr std::size_t prompt_blocks = 4;

using Saved = std::tuple<std::size_t, std::size_t, std::size_t>;  // deployment, rank, prompt

struct Tally {
  std::size_t lookups = 0, loads = 0, saves = 0;
  std::size_t blocks_loaded = 0, wrong = 0, lost = 0, rejected = 0, errors = 0;
  std::set<Saved> saved;  // acknowledged saves

  void add(const Tally& t) {
    lookups += t.lookups;
    loads += t.loads;
    saves += t.saves;
    blocks_loaded += t.blocks_loaded;
    wrong += t.wrong;
    lost += t.lost;
    rejected += t.rejected;
    errors += t.errors;
    saved.insert(t.saved.begin(), t.saved.end());
  }
};

std::vector<Deployment> load_deployments() {
  const std::string tenant = it::unique_tenant("load");
  const kvkey::Identity base = it::base_identity(tenant);
  std::vector<Deployment> deps;
  deps.emplace_back("fp16", base);
  auto id = base;
  id.kv.dtype = kvkey::KvDtype::bf16;
  deps.emplace_back("bf16", id);
  id = base;
  id.kv.dtype = kvkey::KvDtype::fp8_e4m3;
  id.shard.tp_size = 2;
  deps.emplace_back("fp8-tp2", id);
  id = base;
  id.kv.dtype = kvkey::KvDtype::int4;
  id.kv.quant.scheme = "per_group_sym";
  id.kv.quant.group_size = 32;
  id.kv.quant.scale_dtype = kvkey::KvDtype::fp16;
  deps.emplace_back("int4-g32", id);
  id = base;
  id.adapter = kvkey::Adapter("support-bot", kvkey::fingerprint("support-bot weights"));
  deps.emplace_back("lora", id);
  id = base;
  id.model.weights_epoch = 1;
  deps.emplace_back("epoch-1", id);
  id = base;
  id.tenant = it::unique_tenant("load-b");
  deps.emplace_back("tenant-b", id);
  id = base;
  id.kv.num_kv_heads = 2;
  id.shard.tp_size = 4;
  deps.emplace_back("replicas-tp4", id);
  return deps;
}

}  // namespace

TEST_CASE("load: concurrent clients across deployments load no wrong block and lose no write", "[load]") {
  const kvkey_redis::Options options = it::shared_server();
  const std::vector<Deployment> deps = load_deployments();

  // blocks[d][p]: the block hashes of prompt p under deployment d; expected[d][r]:
  // the bytes rank r of deployment d writes for each block.
  std::vector<std::vector<std::vector<kvkey::Digest>>> blocks(deps.size());
  std::vector<std::vector<std::unordered_map<kvkey::Digest, std::vector<std::uint8_t>>>> expected(deps.size());
  for (std::size_t d = 0; d < deps.size(); ++d) {
    expected[d].resize(deps[d].rank_count());
    for (std::size_t p = 0; p < prompts; ++p) {
      const auto tokens =
          it::prompt(static_cast<std::uint32_t>(100 + p / 4), static_cast<std::uint32_t>(p), prompt_blocks, 2);
      blocks[d].push_back(deps[d].rank(0).block_hashes(tokens));
      for (std::size_t r = 0; r < deps[d].rank_count(); ++r) {
        for (const auto& b : blocks[d].back()) expected[d][r].emplace(b, deps[d].payload(r, b));
      }
    }
  }

  std::vector<Tally> tallies(client_threads);
  const auto t0 = Clock::now();
  std::vector<std::thread> clients;
  for (std::size_t t = 0; t < client_threads; ++t) {
    clients.emplace_back([&, t] {
      Tally& tally = tallies[t];
      it::Store store(options);
      std::mt19937 rng(static_cast<unsigned>(t + 1));
      auto acked = [&](std::size_t d, std::size_t r, std::size_t p) { return tally.saved.count({d, r, p}) != 0; };
      for (std::size_t op = 0; op < ops_per_thread; ++op) {
        const std::size_t d = rng() % deps.size();
        const std::size_t p = rng() % prompts;
        const std::size_t r = rng() % deps[d].rank_count();
        const auto& b = blocks[d][p];
        const unsigned kind = rng() % 10;
        try {
          if (kind < 4) {  // lookup
            ++tally.lookups;
            const auto found = it::lookup(store, deps[d].all_ranks(), b);
            bool all_saved = true;
            for (std::size_t rr = 0; rr < deps[d].rank_count(); ++rr) all_saved = all_saved && acked(d, rr, p);
            if (all_saved && found != b.size()) ++tally.lost;
          } else if (kind < 7) {  // load
            ++tally.loads;
            const auto got = it::load(store, deps[d].rank(r), b);
            for (std::size_t i = 0; i < got.size(); ++i) {
              if (got[i].status == Status::loaded) {
                ++tally.blocks_loaded;
                if (got[i].payload != expected[d][r].at(b[i])) ++tally.wrong;
              } else if (got[i].status == Status::rejected) {
                ++tally.rejected;
              } else if (acked(d, r, p)) {
                ++tally.lost;
              }
            }
          } else {  // save
            ++tally.saves;
            std::vector<kvkey::Payload> items;
            for (const auto& block : b) {
              const auto& bytes = expected[d][r].at(block);
              items.emplace_back(bytes.data(), bytes.size());
            }
            if (it::connector(store, {&deps[d].rank(r)}).save(b, items) != b.size()) ++tally.errors;
            tally.saved.insert({d, r, p});
          }
        } catch (const kvkey_redis::StoreError&) {
          ++tally.errors;
        }
      }
    });
  }
  for (auto& c : clients) c.join();
  const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();

  Tally total;
  for (const Tally& t : tallies) total.add(t);
  // Every acknowledged save, from any client, is still there and verifies.
  it::Store check(options);
  for (const auto& [d, r, p] : total.saved) {
    const auto got = it::load(check, deps[d].rank(r), blocks[d][p]);
    for (std::size_t i = 0; i < got.size(); ++i) {
      if (got[i].status != Status::loaded) {
        ++total.lost;
      } else if (got[i].payload != expected[d][r].at(blocks[d][p][i])) {
        ++total.wrong;
      }
    }
  }

  const std::size_t ops = total.lookups + total.loads + total.saves;
  std::string names;
  for (const Deployment& d : deps)
    names += fmt::format("{}{} (tp={})", names.empty() ? "" : ", ", d.name(), d.rank_count());
  fmt::print("load: {} deployments: {}\n", deps.size(), names);
  fmt::print(
      "load: {} client threads x {} operations = {} operations ({} lookups, {} loads, {} saves) in {:.2f} s: "
      "{:.0f} ops/s\n",
      client_threads, ops_per_thread, ops, total.lookups, total.loads, total.saves, seconds, ops / seconds);
  fmt::print(
      "load: {} blocks loaded; wrong loads: {}; lost acknowledged writes: {} (final check of {} acknowledged "
      "saves); rejected: {}; errors: {}\n",
      total.blocks_loaded, total.wrong, total.lost, total.saved.size(), total.rejected, total.errors);

  CHECK(ops == client_threads * ops_per_thread);
  CHECK(total.wrong == 0);
  CHECK(total.lost == 0);
  CHECK(total.rejected == 0);  // nothing but the owner's bytes is ever stored under a key here
  CHECK(total.errors == 0);    // a healthy local server with a 10 s command timeout
  CHECK(total.blocks_loaded > 0);
}
