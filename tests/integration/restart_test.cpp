// SPDX-License-Identifier: Apache-2.0
// The server dies (SIGKILL) or stalls (SIGSTOP) while clients work: they get
// errors they can handle, recover once it is back, and never load a wrong
// block. Uses a redis-server of its own, not the shared one.
#include <catch2/catch.hpp>

#include <fmt/format.h>

#include <atomic>
#include <chrono>
#include <random>
#include <thread>

#include "support.hpp"

using it::Deployment;
using it::Status;
using kvkey_redis::StoreError;
using Clock = std::chrono::steady_clock;

namespace {

enum Phase { before_kill, down, after_restart, phases };

struct ClientStats {
  std::atomic<std::size_t> ok[phases] = {};
  std::atomic<std::size_t> errors[phases] = {};
  std::atomic<std::size_t> loaded{0};
  std::atomic<std::size_t> wrong{0};
  std::atomic<std::size_t> rejected{0};
};

// Waits until pred() holds or the limit passes; returns pred().
template <class Pred>
bool wait_for(Pred pred, std::chrono::seconds limit) {
  const auto end = Clock::now() + limit;
  while (!pred() && Clock::now() < end) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  return pred();
}

}  // namespace

TEST_CASE("a server killed and restarted mid-run: errors, recovery, no wrong block", "[restart]") {
  it::RedisServer server;
  const std::string tenant = it::unique_tenant("restart");
  auto id = it::base_identity(tenant);
  std::vector<Deployment> deps;
  deps.emplace_back("fp16", id);
  id.kv.dtype = kvkey::KvDtype::bf16;
  id.shard.tp_size = 2;
  deps.emplace_back("bf16-tp2", id);
  std::vector<std::vector<std::vector<kvkey::Digest>>> blocks(deps.size());  // [deployment][prompt]
  for (std::size_t d = 0; d < deps.size(); ++d) {
    for (std::uint32_t p = 0; p < 8; ++p) blocks[d].push_back(deps[d].rank(0).block_hashes(it::prompt(8, p, 4)));
  }

  constexpr std::size_t threads = 4;
  constexpr std::size_t min_ops = 100;  // successful operations per thread, before the kill and after the restart
  std::atomic<int> phase{before_kill};
  std::atomic<bool> stop{false};
  std::vector<ClientStats> stats(threads);
  std::vector<std::thread> clients;
  for (std::size_t t = 0; t < threads; ++t) {
    clients.emplace_back([&, t] {
      std::mt19937 rng(static_cast<unsigned>(t));
      it::Store store(server.options());
      ClientStats& s = stats[t];
      while (!stop) {
        const std::size_t d = rng() % deps.size();
        const auto& b = blocks[d][rng() % blocks[d].size()];
        const std::size_t r = rng() % deps[d].rank_count();
        try {
          if (it::lookup(store, deps[d].all_ranks(), b) < b.size()) deps[d].save(store, r, b);
          const auto got = it::load(store, deps[d].rank(r), b);
          for (std::size_t i = 0; i < got.size(); ++i) {
            if (got[i].status == Status::rejected) ++s.rejected;
            if (got[i].status != Status::loaded) continue;
            ++s.loaded;
            if (got[i].payload != deps[d].payload(r, b[i])) ++s.wrong;
          }
          ++s.ok[phase];
        } catch (const StoreError&) {
          ++s.errors[phase];
          std::this_thread::sleep_for(std::chrono::milliseconds(5));
        }
      }
    });
  }
  auto all_ok = [&](Phase p) {
    return [&, p] {
      for (const auto& st : stats) {
        if (st.ok[p] < min_ops) return false;
      }
      return true;
    };
  };
  auto all_failed = [&](Phase p) {
    return [&, p] {
      for (const auto& st : stats) {
        if (st.errors[p] == 0) return false;
      }
      return true;
    };
  };
  // Generous limits: they bound the test on a machine that never gets there, and
  // a slow one only takes longer.
  const bool warmed_up = wait_for(all_ok(before_kill), std::chrono::seconds(240));
  phase = down;  // first: an operation in flight when the server dies fails in this phase
  server.kill();
  const bool all_saw_errors = wait_for(all_failed(down), std::chrono::seconds(240));
  server.restart();
  phase = after_restart;
  const bool recovered = wait_for(all_ok(after_restart), std::chrono::seconds(240));
  stop = true;
  for (auto& c : clients) c.join();

  std::size_t ok[phases] = {}, errors[phases] = {}, loaded = 0, wrong = 0, rejected = 0;
  for (const auto& s : stats) {
    for (int p = 0; p < phases; ++p) {
      ok[p] += s.ok[p];
      errors[p] += s.errors[p];
    }
    loaded += s.loaded;
    wrong += s.wrong;
    rejected += s.rejected;
  }
  fmt::print(
      "restart: {} clients; before kill {} ok / {} errors; server down {} ok / {} errors; "
      "after restart {} ok / {} errors; {} blocks loaded, {} wrong, {} rejected\n",
      threads, ok[before_kill], errors[before_kill], ok[down], errors[down], ok[after_restart], errors[after_restart],
      loaded, wrong, rejected);
  CHECK(warmed_up);
  CHECK(all_saw_errors);  // every client noticed the dead server
  CHECK(recovered);       // and every client worked again after the restart
  CHECK(errors[before_kill] == 0);
  CHECK(wrong == 0);
  CHECK(rejected == 0);
  CHECK(loaded > 0);

  // Whatever the clients wrote since the restart loads byte for byte.
  it::Store check(server.options());
  std::size_t present = 0;
  std::size_t inexact = 0;
  for (std::size_t d = 0; d < deps.size(); ++d) {
    for (const auto& b : blocks[d]) {
      for (std::size_t r = 0; r < deps[d].rank_count(); ++r) {
        const auto got = it::load(check, deps[d].rank(r), b);
        for (std::size_t i = 0; i < got.size(); ++i) {
          if (got[i].status == Status::missing) continue;
          ++present;
          inexact += got[i].status != Status::loaded || got[i].payload != deps[d].payload(r, b[i]);
        }
      }
    }
  }
  CHECK(present > 0);
  CHECK(inexact == 0);
}

TEST_CASE("a stalled server gives timeouts, and the client recovers when it resumes", "[restart]") {
  it::RedisServer server;
  const Deployment d("stall", it::base_identity(it::unique_tenant("stall")));
  const auto blocks = d.rank(0).block_hashes(it::prompt(9, 0, 3));
  const auto timeout = server.options().command_timeout;
  it::Store store(server.options());
  d.save(store, 0, blocks);

  server.pause();
  const auto t0 = Clock::now();
  StoreError::Kind kind = StoreError::Kind::server;
  bool threw = false;
  try {
    it::load(store, d.rank(0), blocks);
  } catch (const StoreError& e) {
    threw = true;
    kind = e.redis_kind();
  }
  const auto waited = Clock::now() - t0;
  server.resume();
  CHECK(threw);
  CHECK(kind == StoreError::Kind::timeout);
  CHECK(waited >= timeout - std::chrono::milliseconds(100));
  // The call ends (it does not hang); the bound is loose, a loaded machine may be late.
  CHECK(waited < timeout + std::chrono::seconds(60));
  CHECK_FALSE(store.connection().connected());
  CHECK(d.count_exact_loads(store, 0, blocks) == 3);  // reconnects on the next call
}
