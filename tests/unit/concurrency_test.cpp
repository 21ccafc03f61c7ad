// One const KeyNamespace shared read-only by many threads, and one Connector
// whose loads verify on a pool of threads shared by many callers. Built and run
// under ThreadSanitizer by scripts/ci/stages/50-sanitizers.sh; in the ordinary
// suite it checks that concurrent results equal single-threaded ones.
#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <kvkey/connector.hpp>
#include <kvkey/store.hpp>

#include "support/fixtures.hpp"

namespace {

using kvkey::Digest;

constexpr std::size_t thread_count = 8;
constexpr std::size_t prompt_count = 12;
constexpr std::size_t rounds = 4;
const std::vector<std::uint8_t> payload_bytes(4096, 0xc3);
const kvkey::Payload payload(payload_bytes.data(), payload_bytes.size());

// A header without its nonce and digest: keyed seals draw a fresh nonce each time.
kvkey::Envelope without_tag(kvkey::Envelope e) {
  std::fill(e.begin() + kvkey::envelope_layout::nonce, e.begin() + kvkey::envelope_layout::secret_id, 0);
  return e;
}

// Everything a connector does with a namespace for one prompt.
struct Work {
  std::vector<Digest> hashes;
  std::vector<Digest> incremental;
  Digest salted_parent;
  std::vector<std::string> keys;
  std::vector<kvkey::Envelope> headers;
  std::vector<kvkey::Reason> verdicts;  // own header, foreign header, truncated header

  friend bool operator==(const Work& a, const Work& b) {
    return a.hashes == b.hashes && a.incremental == b.incremental && a.salted_parent == b.salted_parent &&
           a.keys == b.keys && a.headers == b.headers && a.verdicts == b.verdicts;
  }
};

template <class Hash>
Work run(const kvkey::KeyNamespace<Hash>& ns, const kvkey::Envelope& foreign, std::size_t prompt) {
  const auto tokens = kvkey_test::prompt_tokens(6, ns.block_size(), static_cast<std::int64_t>(prompt));
  Work w;
  kvkey::HashOptions opt;
  if (prompt % 3 == 0) opt.salt = "salt-" + std::to_string(prompt);
  w.hashes = ns.block_hashes(tokens, opt);
  w.incremental = ns.block_hashes(std::vector<std::int64_t>(tokens.begin(), tokens.begin() + 2 * ns.block_size()), opt);
  ns.extend_block_hashes(w.incremental, tokens, opt);
  w.salted_parent = ns.first_parent("salt-" + std::to_string(prompt));
  for (const Digest& h : w.hashes) {
    w.keys.push_back(ns.store_key(h));
    const kvkey::Envelope sealed = ns.seal(h, payload);
    w.headers.push_back(without_tag(sealed));
    w.verdicts.push_back(ns.verify(sealed, h, payload).reason);
    w.verdicts.push_back(ns.verify(foreign, h, payload).reason);
    w.verdicts.push_back(ns.verify(sealed.data(), 100, h, payload).reason);
  }
  return w;
}

template <class Hash>
void check_shared_namespace(const kvkey::KeyNamespace<Hash>& ns, const kvkey::Envelope& foreign) {
  std::vector<Work> expected;
  for (std::size_t p = 0; p < prompt_count; ++p) expected.push_back(run(ns, foreign, p));
  // The single-threaded results are themselves sensible.
  REQUIRE(expected[0].hashes == expected[0].incremental);
  REQUIRE(expected[0].verdicts[0] == kvkey::Reason::ok);
  REQUIRE(expected[0].verdicts[1] != kvkey::Reason::ok);
  REQUIRE(expected[0].verdicts[2] == kvkey::Reason::malformed);

  std::atomic<std::size_t> mismatches{0};
  std::atomic<std::size_t> runs{0};
  std::atomic<bool> go{false};
  std::vector<std::thread> threads;
  for (std::size_t t = 0; t < thread_count; ++t) {
    threads.emplace_back([&, t] {
      while (!go.load()) std::this_thread::yield();
      for (std::size_t r = 0; r < rounds; ++r) {
        for (std::size_t i = 0; i < prompt_count; ++i) {
          const std::size_t p = (i + t) % prompt_count;  // threads work on different prompts at once
          if (!(run(ns, foreign, p) == expected[p])) ++mismatches;
          ++runs;
        }
      }
    });
  }
  go = true;
  for (auto& th : threads) th.join();
  CHECK(runs.load() == thread_count * rounds * prompt_count);
  CHECK(mismatches.load() == 0);
}

}  // namespace

TEST_CASE("A const KeyNamespace<Sha256> is shared safely by 8 threads", "[security][concurrency]") {
  const kvkey::KeyNamespace<> ns{kvkey_test::sharded_identity()};
  auto other = kvkey_test::sharded_identity();
  other.model.weights_epoch += 1;
  const kvkey::KeyNamespace<> writer{other};
  check_shared_namespace(ns, writer.seal(writer.root(), payload));
}

TEST_CASE("A const KeyNamespace<HmacSha256> is shared safely by 8 threads", "[security][concurrency]") {
  const kvkey::KeyNamespace<kvkey::HmacSha256> ns{kvkey_test::sharded_identity(),
                                                  kvkey::TenantSecret{kvkey_test::secret_bytes('a')}};
  const kvkey::KeyNamespace<kvkey::HmacSha256> writer{kvkey_test::sharded_identity(),
                                                      kvkey::TenantSecret{kvkey_test::secret_bytes('b')}};
  check_shared_namespace(ns, writer.seal(writer.root(), payload));
}

TEST_CASE("A Connector with digest_threads is shared safely by 4 threads", "[concurrency]") {
  kvkey::Identity id = kvkey_test::base_identity();
  id.kv = kvkey::Kv{kvkey::KvDtype::bf16, kvkey::Quant{}, 16, 2, 2, 128, "kvkey.test.v1", false};
  const kvkey::KeyNamespace<> ns(id);
  const std::size_t size = 2 * 2 * 2 * 128 * 16 * 2;  // 32 KiB: a load of 16 is past parallel_digest_bytes
  REQUIRE(16 * size >= kvkey::Connector<>::parallel_digest_bytes);
  kvkey::MemoryStore store;
  kvkey::Connector<>::Options o;
  o.digest_threads = 3;
  const kvkey::Connector<> c(store, {ns}, o);
  const std::vector<Digest> blocks = ns.block_hashes(kvkey_test::tokens(16 * 16));
  std::vector<std::vector<std::uint8_t>> ps;
  std::vector<kvkey::Payload> views;
  for (std::size_t n = 0; n < 16; ++n) ps.emplace_back(size, static_cast<std::uint8_t>(n + 1));
  for (const auto& p : ps) views.emplace_back(p.data(), p.size());
  REQUIRE(c.save(blocks, views) == 16);
  std::optional<kvkey::Bytes> v = store.get(ns.store_key(blocks[5]));
  v->back() ^= 1;
  store.put(ns.store_key(blocks[5]), v->data(), v->size());

  std::atomic<std::size_t> wrong{0};
  std::atomic<bool> go{false};
  std::vector<std::thread> threads;
  for (std::size_t t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      while (!go.load()) std::this_thread::yield();
      for (std::size_t r = 0; r < 6; ++r) {
        std::vector<std::vector<std::uint8_t>> out(16, std::vector<std::uint8_t>(size, 0));
        std::vector<kvkey::MutableBuffer> dest;
        for (auto& b : out) dest.push_back({b.data(), b.size()});
        const std::vector<kvkey::LoadResult> res = c.load_into(blocks, dest);
        for (std::size_t n = 0; n < 16; ++n) {
          const bool ok = n == 5 ? res[n].verdict.reason == kvkey::Reason::payload_mismatch &&
                                       out[n] == std::vector<std::uint8_t>(size, 0)
                                 : res[n].loaded() && out[n] == ps[n];
          if (!ok) ++wrong;
        }
      }
    });
  }
  go = true;
  for (auto& th : threads) th.join();
  CHECK(wrong.load() == 0);
}
