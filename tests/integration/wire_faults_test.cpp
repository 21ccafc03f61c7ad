// SPDX-License-Identifier: Apache-2.0
// The connector through a proxy that damages the reply stream
// (tests/integration/fault_proxy.py): fragmented, bit-flipped, cut and
// trickling replies. Whatever arrives, no block loads with bytes that are not
// its own, every call reads its own replies (a call after a StoreError too),
// and no lookup counts a block that was never saved. Runs are bounded by
// operation counts; the counts go to the log as
// `wire faults: mode M: calls N, store errors E, wrong loads 0, out-of-step calls 0`.
#include <catch2/catch.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "support.hpp"

using it::Deployment;
using it::Status;
using kvkey_redis::StoreError;

namespace {

// The shared server's port, for the proxy's upstream.
int shared_port() { return it::shared_server().port; }

// base_identity with 2 tensor-parallel ranks: 1024 KV bytes per rank and block.
kvkey::Identity tp2(const std::string& tenant) {
  kvkey::Identity id = it::base_identity(tenant);
  id.shard.tp_size = 2;
  return id;
}

// Blocks with known payloads on every rank, and blocks never saved.
struct Oracle {
  Deployment d;
  std::vector<kvkey::Digest> saved;
  std::vector<kvkey::Digest> unsaved;

  explicit Oracle(const std::string& tag) : d(tag, tp2(it::unique_tenant(tag))) {
    saved = d.rank(0).block_hashes(it::prompt(21, 0, 32));
    unsaved = d.rank(0).block_hashes(it::prompt(22, 0, 16));
    it::Store direct(it::shared_server());
    d.save_all_ranks(direct, saved);
  }
  bool is_saved(const kvkey::Digest& b) const { return std::find(saved.begin(), saved.end(), b) != saved.end(); }
  // The leading blocks of `blocks` that are saved (on every rank).
  std::size_t prefix(const std::vector<kvkey::Digest>& blocks) const {
    std::size_t n = 0;
    while (n < blocks.size() && is_saved(blocks[n])) ++n;
    return n;
  }
};

struct Mode {
  std::string name;
  std::vector<std::string> proxy_args;
  std::size_t calls;
  bool damages_bytes;  // bit flips: a reply may arrive damaged yet in step
  std::chrono::milliseconds call_deadline{10000};
};

struct Counts {
  std::size_t calls = 0;
  std::size_t store_errors = 0;
  std::size_t wrong_loads = 0;
  std::size_t out_of_step = 0;
  std::size_t unsaved_counted = 0;  // lookups that counted a block never saved
  std::size_t rejected = 0;         // blocks a load rejected (damaged in transit)
};

// Runs `mode.calls` calls of a seeded mix (verified lookups, existence
// lookups, loads, loads into buffers, saves) through the proxy and checks
// every answer against the oracle.
Counts run_mode(const Oracle& o, const Mode& mode, std::uint32_t seed) {
  std::vector<std::string> args = mode.proxy_args;
  args.insert(args.end(), {"--seed", std::to_string(seed)});
  it::FaultProxy proxy(shared_port(), args);
  kvkey_redis::Options options = proxy.options();
  options.command_timeout = std::chrono::milliseconds(1000);  // a length flipped upwards waits this long
  options.call_deadline = mode.call_deadline;
  it::Store store(options);
  std::mt19937 rng(seed);
  Counts c;
  const std::size_t size = o.d.payload_size(0);
  std::vector<std::uint8_t> arena;
  for (std::size_t call = 0; call < mode.calls; ++call) {
    // 1 to 8 blocks, mostly saved, some never saved, in random order.
    std::vector<kvkey::Digest> blocks;
    const std::size_t n = 1 + rng() % 8;
    for (std::size_t i = 0; i < n; ++i) {
      blocks.push_back(rng() % 4 == 0 ? o.unsaved[rng() % o.unsaved.size()] : o.saved[rng() % o.saved.size()]);
    }
    const std::size_t r = rng() % o.d.rank_count();
    const unsigned op = rng() % 5;
    ++c.calls;
    bool in_step = true;
    try {
      if (op == 0) {
        const std::size_t got = it::lookup(store, o.d.all_ranks(), blocks);
        const std::size_t want = o.prefix(blocks);
        c.unsaved_counted += got > want;
        // A header damaged in transit is a miss (fewer blocks), never more.
        in_step = mode.damages_bytes ? got <= want : got == want;
      } else if (op == 1) {
        const std::size_t got = it::lookup_existing(store, o.d.all_ranks(), blocks);
        // Existence cannot be verified: a flipped ":0" reads as ":1".
        in_step = mode.damages_bytes || got == o.prefix(blocks);
      } else if (op == 2) {
        const auto got = it::load(store, o.d.rank(r), blocks);
        for (std::size_t i = 0; i < blocks.size(); ++i) {
          const bool saved = o.is_saved(blocks[i]);
          if (got[i].status == Status::loaded) {
            c.wrong_loads += !saved || got[i].payload != o.d.payload(r, blocks[i]);
          } else if (got[i].status == Status::missing) {
            // In step, a saved value's reply reads as nil only when damaged (a
            // flipped CR after its length makes hiredis read "$2048?\n..." as nil).
            in_step = in_step && (!saved || mode.damages_bytes);
          } else if (++c.rejected, !mode.damages_bytes || !saved) {
            // Rejected: only damage in transit explains it, and only for a saved
            // value (a never-saved block's reply is nil: damaged, it is an error
            // or an empty string, which is not an envelope).
            in_step = in_step && mode.damages_bytes && got[i].verdict.field == "envelope.size";
          }
        }
      } else if (op == 3) {
        arena.assign(blocks.size() * size, 0xA5);
        std::vector<std::uint8_t*> dests;
        for (std::size_t i = 0; i < blocks.size(); ++i) dests.push_back(arena.data() + i * size);
        std::vector<kvkey::LoadResult> got;
        try {
          got = it::load_into(store, o.d.rank(r), blocks, dests);
        } catch (const StoreError&) {
          // Destinations hold verified bytes of their own block, or nothing.
          for (std::size_t i = 0; i < blocks.size(); ++i) {
            const std::vector<std::uint8_t> dest(dests[i], dests[i] + size);
            c.wrong_loads += dest != std::vector<std::uint8_t>(size, 0xA5) && dest != o.d.payload(r, blocks[i]);
          }
          throw;
        }
        // Duplicates in `blocks` have distinct buffers: each is checked.
        for (std::size_t i = 0; i < blocks.size(); ++i) {
          const bool saved = o.is_saved(blocks[i]);
          const std::vector<std::uint8_t> dest(dests[i], dests[i] + size);
          if (got[i].status == Status::loaded) {
            c.wrong_loads += !saved || dest != o.d.payload(r, blocks[i]);
          } else {
            c.wrong_loads += dest != std::vector<std::uint8_t>(size, 0xA5);  // untouched
            if (got[i].status == Status::missing) {
              in_step = in_step && (!saved || mode.damages_bytes);
            } else if (++c.rejected, !mode.damages_bytes || !saved) {
              in_step = in_step && mode.damages_bytes && got[i].verdict.field == "envelope.size";
            }
          }
        }
      } else {
        // Saves of the same bytes again: harmless, and their replies are checked.
        std::vector<kvkey::Digest> some;
        for (const auto& b : blocks) {
          if (o.is_saved(b)) some.push_back(b);
        }
        o.d.save(store, r, some);
      }
    } catch (const StoreError&) {
      ++c.store_errors;
      if (store.connection().connected()) in_step = false;  // an error must drop the connection
    }
    c.out_of_step += !in_step;
  }
  return c;
}

}  // namespace

TEST_CASE("through a damaging proxy: no wrong load, every call in step", "[wire]") {
  const Oracle o("wire");
  const std::vector<Mode> modes = {
      {"fragment", {"--fragment"}, 400, false},
      {"flip-1e-5", {"--flip-rate", "1e-5"}, 2000, true},
      {"flip-1e-4", {"--flip-rate", "1e-4"}, 1000, true},
      {"flip-1e-3", {"--flip-rate", "1e-3"}, 300, true},
      {"cut", {"--cut-rate", "2e-5"}, 1000, false},
      // 32 bytes every 5 ms: a read never waits long, but most calls need more
      // than their 200 ms. Only the deadline ends them.
      {"trickle", {"--trickle", "32:0.005"}, 30, false, std::chrono::milliseconds(200)},
      {"fragment+flip+cut", {"--fragment", "--flip-rate", "1e-4", "--cut-rate", "1e-5"}, 500, true},
      {"trickle+flip", {"--trickle", "256:0.002", "--flip-rate", "1e-4"}, 30, true, std::chrono::milliseconds(500)},
  };
  std::uint32_t seed = 24;
  for (const Mode& mode : modes) {
    INFO("mode " << mode.name);
    const Counts c = run_mode(o, mode, seed++);
    fmt::print("wire faults: mode {}: calls {}, store errors {}, wrong loads {}, out-of-step calls {}\n", mode.name,
               c.calls, c.store_errors, c.wrong_loads, c.out_of_step);
    CHECK(c.wrong_loads == 0);
    CHECK(c.out_of_step == 0);
    CHECK(c.unsaved_counted == 0);
    fmt::print("  mode {}: blocks rejected as damaged in transit {}\n", mode.name, c.rejected);
    // The faults did reach the connector: as errors, or as rejected blocks
    // (fragmentation alone changes nothing a reader sees).
    if (mode.name != "fragment") CHECK(c.store_errors + c.rejected > 0);
  }
}

namespace {

// A payload whose last bytes are `tail`: with the value's bulk length cut
// short by a flipped bit, hiredis reads them as a reply of their own.
std::vector<std::uint8_t> payload_ending_in(std::size_t size, std::string_view tail) {
  std::vector<std::uint8_t> p(size);
  for (std::size_t i = 0; i < size; ++i) p[i] = static_cast<std::uint8_t>(i * 131 + 7);
  std::memcpy(p.data() + size - tail.size(), tail.data(), tail.size());
  return p;
}

}  // namespace

TEST_CASE("a flipped bit in the first GET reply's length leaves no call out of step", "[wire]") {
  // The payload is 1024 bytes, the value 2048: the first reply on the proxy's
  // first connection starts "$2048\r\n", and bit 3 of its byte 4 turns it into
  // "$2040". hiredis ends the value 8 bytes early, skips 2 and parses the
  // payload's last 6 bytes (and the value's CRLF) as a reply of their own.
  const Deployment d("repro", tp2(it::unique_tenant("repro")));
  const auto blocks = d.rank(0).block_hashes(it::prompt(23, 0, 3));
  const auto never = d.rank(0).block_hashes(it::prompt(24, 0, 1)).front();
  const std::size_t size = d.payload_size(0);
  REQUIRE(size == 1024);
  const auto tail = GENERATE(as<std::string>{}, "+OKAY!", ":12345", "$2\r\nZZ", "-ERR!!", "?junk!");
  INFO("the payload ends in " << tail);
  const auto first = payload_ending_in(size, tail);
  {
    it::Store direct(it::shared_server());
    REQUIRE(it::connector(direct, {&d.rank(0)}).save({blocks[0]}, {kvkey::Payload(first.data(), first.size())}) == 1);
    d.save(direct, 0, {blocks[1], blocks[2]});
  }
  it::FaultProxy proxy(shared_port(), {"--flip-at", "0:4:0x08"});
  it::Store store(proxy.options());

  // The damaged call: its block is never loaded, and the call fails.
  std::vector<it::Loaded> got;
  CHECK_THROWS_AS(got = it::load(store, d.rank(0), {blocks[0]}), StoreError);
  CHECK(got.empty());
  CHECK_FALSE(store.connection().connected());

  // The next calls read their own replies.
  got = it::load(store, d.rank(0), {blocks[0], never, blocks[1], blocks[2]});
  REQUIRE(got.size() == 4);
  CHECK(got[0].status == Status::loaded);
  CHECK(got[0].payload == first);
  CHECK(got[1].status == Status::missing);
  CHECK(got[2].status == Status::loaded);
  CHECK(got[2].payload == d.payload(0, blocks[1]));
  CHECK(got[3].status == Status::loaded);
  CHECK(it::lookup(store, {&d.rank(0)}, {blocks[0], blocks[1], never, blocks[2]}) == 2);
  CHECK(it::lookup(store, {&d.rank(0)}, {never, blocks[0]}) == 0);
  CHECK(d.count_exact_loads(store, 0, {blocks[1], blocks[2]}) == 2);
}

TEST_CASE("a trickling server cannot stretch a call past its deadline", "[wire]") {
  // 32 bytes every 20 ms: each read gets bytes long before the 10 s per-read
  // timeout, and 4 values of 2 KiB take about 5 s. The call's deadline is 500 ms.
  const Deployment d("trickle", it::base_identity(it::unique_tenant("trickle")));
  const auto blocks = d.rank(0).block_hashes(it::prompt(25, 0, 4));
  {
    it::Store direct(it::shared_server());
    d.save(direct, 0, blocks);
  }
  it::FaultProxy proxy(shared_port(), {"--trickle", "32:0.02"});
  auto options = proxy.options();
  options.call_deadline = std::chrono::milliseconds(500);
  it::Store store(options);
  StoreError::Kind kind = StoreError::Kind::server;
  bool threw = false;
  try {
    it::load(store, d.rank(0), blocks);
  } catch (const StoreError& e) {
    INFO(e.what());
    threw = true;
    kind = e.redis_kind();
  }
  CHECK(threw);
  CHECK(kind == StoreError::Kind::timeout);
  CHECK_FALSE(store.connection().connected());
}

TEST_CASE("a flipped bit in the first GETRANGE reply's length leaves no lookup out of step", "[wire]") {
  // A verified lookup reads 1024-byte headers: "$1024" becomes "$1020".
  const Deployment d("repro-lookup", tp2(it::unique_tenant("repro-lookup")));
  const auto blocks = d.rank(0).block_hashes(it::prompt(26, 0, 3));
  const auto never = d.rank(0).block_hashes(it::prompt(27, 0, 1)).front();
  {
    it::Store direct(it::shared_server());
    d.save_all_ranks(direct, blocks);
  }
  it::FaultProxy proxy(shared_port(), {"--flip-at", "0:4:0x04"});
  it::Store store(proxy.options());
  CHECK_THROWS_AS(it::lookup(store, d.all_ranks(), blocks), StoreError);
  CHECK_FALSE(store.connection().connected());
  CHECK(it::lookup(store, d.all_ranks(), blocks) == 3);
  CHECK(it::lookup(store, d.all_ranks(), {blocks[0], never, blocks[1]}) == 1);
  CHECK(d.count_exact_loads(store, 1, blocks) == 3);
}
