// BatchHasher / block_hashes_batch: results identical to block_hashes per
// request, whatever the thread count, request order, sizes and options; errors
// reported for the first failing request; the pool reusable and safe to share.
#include <kvkey/batch.hpp>
#include <kvkey/kvkey.hpp>

#include "support/fixtures.hpp"

#include <catch2/catch.hpp>

#include <cstdint>
#include <string>
#include <thread>
#include <vector>

namespace {

std::vector<std::int64_t> tokens_for(std::size_t request, std::size_t n) {
  std::vector<std::int64_t> t(n);
  for (std::size_t i = 0; i < n; ++i) t[i] = static_cast<std::int64_t>((i * 7919 + request * 104729) % 152000);
  return t;
}

struct Fixture {
  kvkey::KeyNamespace<> ns{kvkey_test::bf16_identity(16)};
  std::vector<std::vector<std::int64_t>> prompts;
  std::vector<kvkey::HashOptions> options;
  std::vector<kvkey::BlockHashRequest<std::int64_t>> requests;

  explicit Fixture(std::size_t count) {
    prompts.resize(count);
    options.resize(count);
    for (std::size_t i = 0; i < count; ++i) {
      // Lengths from 0 to a few hundred blocks, unsorted; a partial tail on most.
      prompts[i] = tokens_for(i, (i * 2654435761u) % 3000);
      if (i % 3 == 1) options[i].salt = "salt-" + std::to_string(i);
      if (i % 5 == 2) options[i].extras.push_back({16, 40, "image-" + std::to_string(i)});
    }
    for (std::size_t i = 0; i < count; ++i) {
      requests.push_back({prompts[i].data(), prompts[i].size(), i % 4 == 0 ? nullptr : &options[i]});
    }
  }
  std::vector<std::vector<kvkey::Digest>> sequential() const {
    std::vector<std::vector<kvkey::Digest>> out;
    for (const auto& r : requests) {
      out.push_back(ns.block_hashes(r.tokens, r.count, r.options != nullptr ? *r.options : kvkey::HashOptions{}));
    }
    return out;
  }
};

}  // namespace

TEST_CASE("A batch gives each request's block_hashes, in request order", "[batch]") {
  const Fixture f(37);
  const auto expect = f.sequential();
  std::size_t blocks = 0;
  for (const auto& e : expect) blocks += e.size();
  REQUIRE(blocks > 1000);
  for (unsigned threads : {0u, 1u, 2u, 3u, 8u}) {
    CAPTURE(threads);
    kvkey::BatchHasher pool(threads);
    CHECK(pool.threads() == (threads == 0 ? 1u : threads));
    CHECK(pool.block_hashes(f.ns, f.requests) == expect);
    CHECK(pool.block_hashes(f.ns, f.requests) == expect);  // the pool is reusable
    CHECK(kvkey::block_hashes_batch(f.ns, f.requests, threads) == expect);
  }
}

TEST_CASE("A batch of prompts with shared options", "[batch]") {
  const Fixture f(9);
  kvkey::HashOptions salted;
  salted.salt = "shared";
  kvkey::BatchHasher pool(2);
  const auto out = pool.block_hashes(f.ns, f.prompts, salted);
  REQUIRE(out.size() == f.prompts.size());
  for (std::size_t i = 0; i < out.size(); ++i) CHECK(out[i] == f.ns.block_hashes(f.prompts[i], salted));
  CHECK(pool.block_hashes(f.ns, std::vector<std::vector<std::int64_t>>{}).empty());
}

TEST_CASE("A batch reports the first failing request and still hashes the others", "[batch]") {
  Fixture f(12);
  f.prompts[7] = tokens_for(7, 64);
  f.prompts[7][40] = -3;  // block 2 of request 7
  f.prompts[4] = tokens_for(4, 64);
  f.prompts[4][20] = std::int64_t{1} << 33;  // block 1 of request 4: the first in request order
  for (std::size_t i = 0; i < f.requests.size(); ++i) {
    f.requests[i].tokens = f.prompts[i].data();
    f.requests[i].count = f.prompts[i].size();
  }
  kvkey::BatchHasher pool(3);
  REQUIRE_THROWS_WITH(pool.block_hashes(f.ns, f.requests), Catch::Contains("token 20 is 8589934592"));
  // The pool survives a failed batch.
  f.prompts[4][20] = 5;
  f.prompts[7][40] = 6;
  CHECK(pool.block_hashes(f.ns, f.requests) == f.sequential());
}

TEST_CASE("One BatchHasher shared by two threads runs their batches one at a time", "[batch]") {
  const Fixture f(20);
  const auto expect = f.sequential();
  kvkey::BatchHasher pool(2);
  std::vector<std::vector<kvkey::Digest>> a, b;
  std::thread other([&] {
    for (int i = 0; i < 5; ++i) a = pool.block_hashes(f.ns, f.requests);
  });
  for (int i = 0; i < 5; ++i) b = pool.block_hashes(f.ns, f.requests);
  other.join();
  CHECK(a == expect);
  CHECK(b == expect);
}

TEST_CASE("Batches equal block_hashes at every block size and token type", "[batch]") {
  // Requests without extras are hashed two at a time in lockstep where the CPU
  // allows; the lengths make pairs of equal and unequal block counts.
  for (std::uint32_t bs : {1u, 16u, 64u, 255u, 256u, 257u}) {
    const kvkey::KeyNamespace<> ns(kvkey_test::bf16_identity(bs));
    std::vector<std::vector<std::uint32_t>> u32(7);
    std::vector<std::vector<std::int32_t>> i32(7);
    for (std::size_t i = 0; i < u32.size(); ++i) {
      const std::size_t n = bs * (i % 3 == 0 ? 9 : 5 + i) + i;
      for (std::size_t k = 0; k < n; ++k) {
        u32[i].push_back(static_cast<std::uint32_t>((k * 2654435761u) ^ i));
        i32[i].push_back(static_cast<std::int32_t>(u32[i].back() & 0x7fffffffu));
      }
    }
    kvkey::HashOptions salted;
    salted.salt = "s";
    for (unsigned threads : {1u, 2u}) {
      CAPTURE(bs, threads);
      kvkey::BatchHasher pool(threads);
      const auto a = pool.block_hashes(ns, u32, salted);
      const auto b = pool.block_hashes(ns, i32);
      for (std::size_t i = 0; i < u32.size(); ++i) {
        CHECK(a[i] == ns.block_hashes(u32[i], salted));
        CHECK(b[i] == ns.block_hashes(i32[i]));
      }
    }
  }
}

TEST_CASE("A batch into a reused output replaces every entry", "[batch]") {
  const Fixture f(30);
  kvkey::BatchHasher pool(2);
  std::vector<std::vector<kvkey::Digest>> out(40, std::vector<kvkey::Digest>(3));  // stale, too many
  pool.block_hashes(f.ns, f.requests, out);
  CHECK(out == f.sequential());
  const std::vector<kvkey::BlockHashRequest<std::int64_t>> fewer(f.requests.begin(), f.requests.begin() + 5);
  pool.block_hashes(f.ns, fewer, out);
  REQUIRE(out.size() == 5);
  for (std::size_t i = 0; i < 5; ++i) CHECK(out[i] == f.sequential()[i]);
}
