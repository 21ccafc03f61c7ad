// kvkey benchmarks (Google Benchmark). Run through scripts/bench.sh, which
// builds in Release, runs every case and writes the JSON and the tables that
// docs/performance.md shows.
//
// Cases:
//   chain/...          KeyNamespace::block_hashes over a whole prompt
//   evp_baseline/...   the limit it is held to: one-shot EVP_Digest per block
//                      over exactly the bytes a chain must hash (parent digest
//                      and the block's 4-byte tokens), same prompt
//   sha256_stream      SHA-256 over 16 KiB messages: the compression rate,
//                      the true ceiling (bench/report.py converts it to blocks/s)
//   extend_one_block, store_key, seal, verify_*, object_roundtrip,
//   fingerprint_file, batch/...
//   confidential_vs_gcm  a confidential namespace's seal_value and open_in_place of 1 MiB
//                      against an EVP AES-256-GCM loop in the same run (ratios)
//   file_evp_baseline  fread + EVP_DigestUpdate over the fingerprint_file file:
//                      what sha256sum does, the baseline of the weights fingerprint
//   weights_one_file/threads:1, weights_two_files/threads:{1,2}
//                      kvkey::read_model_dir of a plain directory (the weights
//                      manifest of one file, and of two files on one or two threads)
//
// Every case reports allocs_per_block (or allocs_per_op): heap allocations
// through operator new and OpenSSL's allocator, counted by this binary.
#include "alloc_counter.hpp"
#include "support/fixtures.hpp"

#include <kvkey/batch.hpp>
#include <kvkey/hmac.hpp>
#include <kvkey/kvkey.hpp>
#include <kvkey/model_dir.hpp>

#include <benchmark/benchmark.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/rand.h>
#include <time.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

namespace {

std::uint64_t allocs() { return kvkey_bench::allocations(); }

// ---- inputs ----------------------------------------------------------------------------

// The prompt every case and every peer (bench/peers) hashes: token i is
// (i * 40503 + 17) % 151936, ids spread over a Qwen-sized vocabulary.
std::vector<std::uint32_t> prompt(std::size_t n) {
  std::vector<std::uint32_t> t(n);
  for (std::size_t i = 0; i < n; ++i) t[i] = static_cast<std::uint32_t>((i * 40503 + 17) % 151936);
  return t;
}

// The tests' 7B identity in bf16, epoch 3, rank 1 of 2.
kvkey::Identity identity(std::uint32_t block_size) {
  kvkey::Identity id = kvkey_test::bf16_identity(block_size);
  id.model.weights_epoch = 3;
  id.shard.tp_size = 2;
  id.shard.tp_rank = 1;
  return id;
}

const EVP_MD* sha256() {
  static EVP_MD* md = EVP_MD_fetch(nullptr, "SHA256", nullptr);
  return md;
}

void set_block_counters(benchmark::State& state, std::size_t tokens, std::size_t blocks, std::uint64_t allocs_run) {
  const auto iters = static_cast<double>(state.iterations());
  state.counters["tokens_per_s"] = benchmark::Counter(iters * static_cast<double>(tokens), benchmark::Counter::kIsRate);
  state.counters["blocks_per_s"] = benchmark::Counter(iters * static_cast<double>(blocks), benchmark::Counter::kIsRate);
  state.counters["allocs_per_block"] = static_cast<double>(allocs_run) / (iters * static_cast<double>(blocks));
  state.counters["tokens"] = static_cast<double>(tokens);
  state.counters["block_size"] = static_cast<double>(tokens / blocks);
}

// ---- the chain and its limit ---------------------------------------------------------------

void chain(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0));
  const auto bs = static_cast<std::uint32_t>(state.range(1));
  const kvkey::KeyNamespace<> ns(identity(bs));
  const auto tokens = prompt(n);
  const std::uint64_t a0 = allocs();
  for (auto _ : state) {
    auto hashes = ns.block_hashes(tokens);
    benchmark::DoNotOptimize(hashes.data());
  }
  set_block_counters(state, n, n / bs, allocs() - a0);
}

// One EVP_Digest per block, with a pre-fetched EVP_MD, over parent ‖ tokens
// (what any chained block hash must hash at the least).
void evp_baseline(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0));
  const auto bs = static_cast<std::size_t>(state.range(1));
  const auto tokens = prompt(n);
  const EVP_MD* md = sha256();
  std::vector<unsigned char> msg(32 + 4 * bs);
  const std::uint64_t a0 = allocs();
  for (auto _ : state) {
    unsigned char parent[32] = {};
    for (std::size_t b = 0; b < n / bs; ++b) {
      std::memcpy(msg.data(), parent, 32);
      std::memcpy(msg.data() + 32, tokens.data() + b * bs, 4 * bs);  // little-endian host: the u32le bytes
      if (EVP_Digest(msg.data(), msg.size(), parent, nullptr, md, nullptr) != 1) state.SkipWithError("EVP_Digest");
    }
    benchmark::DoNotOptimize(parent);
  }
  set_block_counters(state, n, n / bs, allocs() - a0);
}

void chain_args(benchmark::internal::Benchmark* b) {
  for (std::int64_t n : {1 << 10, 1 << 14, 1 << 17, 1 << 20}) {
    for (std::int64_t bs : {16, 64, 256}) b->Args({n, bs});
  }
  b->ArgNames({"tokens", "bs"});
}
BENCHMARK(chain)->Apply(chain_args);
BENCHMARK(evp_baseline)->Apply(chain_args);

// Compressions per 16 KiB message: 256 blocks of data and one of padding.
constexpr double stream_compressions = 16384.0 / 64 + 1;

// The compression rate: 16 KiB messages through one reused context.
void sha256_stream(benchmark::State& state) {
  std::vector<unsigned char> buf(16384, 0x5a);
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  unsigned char out[32];
  for (auto _ : state) {
    EVP_DigestInit_ex2(ctx, sha256(), nullptr);
    EVP_DigestUpdate(ctx, buf.data(), buf.size());
    EVP_DigestFinal_ex(ctx, out, nullptr);
    benchmark::DoNotOptimize(out);
  }
  EVP_MD_CTX_free(ctx);
  const auto iters = static_cast<double>(state.iterations());
  state.SetBytesProcessed(static_cast<std::int64_t>(iters * static_cast<double>(buf.size())));
  state.counters["compressions_per_s"] = benchmark::Counter(iters * stream_compressions, benchmark::Counter::kIsRate);
}
BENCHMARK(sha256_stream);

// The same through kvkey's SHA-extension code (what the chain uses when the
// CPU has them): it should match OpenSSL's assembly. Registered in main only
// where the CPU has the extensions.
void sha256_native_stream(benchmark::State& state) {
  std::vector<unsigned char> buf(16384, 0x5a);
  kvkey::detail::Sha256Native h;
  for (auto _ : state) {
    h.update(buf.data(), buf.size());
    auto d = h.result();
    benchmark::DoNotOptimize(d);
  }
  const auto iters = static_cast<double>(state.iterations());
  state.SetBytesProcessed(static_cast<std::int64_t>(iters * static_cast<double>(buf.size())));
  state.counters["compressions_per_s"] = benchmark::Counter(iters * stream_compressions, benchmark::Counter::kIsRate);
}

// ---- incremental extension --------------------------------------------------------------------

// Decoding: a 16k-token prompt's chain is extended one 64-token block at a
// time, 256 times (one extend call per block, as a scheduler would after each
// block of generated tokens). Counters are per extension.
void extend_one_block(benchmark::State& state) {
  const std::uint32_t bs = 64;
  const std::size_t steps = 256;
  const kvkey::KeyNamespace<> ns(identity(bs));
  const auto tokens = prompt((1 << 14) + steps * bs);
  const auto start = ns.block_hashes(tokens.data(), std::size_t{1} << 14);
  const auto whole = ns.block_hashes(tokens);
  const std::uint64_t a0 = allocs();
  for (auto _ : state) {
    auto hashes = start;
    for (std::size_t k = 1; k <= steps; ++k) ns.extend_block_hashes(hashes, tokens.data(), (1 << 14) + k * bs);
    benchmark::DoNotOptimize(hashes.data());
    if (hashes.back() != whole.back()) state.SkipWithError("extension differs from block_hashes");
  }
  set_block_counters(state, steps * bs, steps, allocs() - a0);
}
BENCHMARK(extend_one_block);

// Token ids as int64 (numpy's default) and int32: the range check must not
// cost throughput.
template <class T>
void chain_typed(benchmark::State& state) {
  const std::size_t n = 1 << 17;
  const std::uint32_t bs = 64;
  const kvkey::KeyNamespace<> ns(identity(bs));
  const auto u = prompt(n);
  const std::vector<T> tokens(u.begin(), u.end());
  const std::uint64_t a0 = allocs();
  for (auto _ : state) {
    auto hashes = ns.block_hashes(tokens);
    benchmark::DoNotOptimize(hashes.data());
  }
  set_block_counters(state, n, n / bs, allocs() - a0);
}
BENCHMARK_TEMPLATE(chain_typed, std::int64_t);
BENCHMARK_TEMPLATE(chain_typed, std::int32_t);

// A keyed namespace (HMAC-SHA-256 under a tenant secret, from the key's
// inner and outer midstates): 128k tokens at block sizes 16, 64, 256.
void chain_keyed(benchmark::State& state) {
  const std::size_t n = 1 << 17;
  const auto bs = static_cast<std::uint32_t>(state.range(0));
  const kvkey::KeyNamespace<kvkey::HmacSha256> ns(identity(bs), kvkey::TenantSecret(std::string(32, 'k')));
  const auto tokens = prompt(n);
  const std::uint64_t a0 = allocs();
  for (auto _ : state) {
    auto hashes = ns.block_hashes(tokens);
    benchmark::DoNotOptimize(hashes.data());
  }
  set_block_counters(state, n, n / bs, allocs() - a0);
}
BENCHMARK(chain_keyed)->Arg(16)->Arg(64)->Arg(256)->ArgName("bs");

// The keyed chain against the unkeyed one in the same run: each iteration
// hashes the same 128k-token prompt at block size 64 in both namespaces (into
// reused vectors) and times each on the thread's CPU clock (other processes
// on the machine do not count). keyed_vs_unkeyed is the keyed chain's
// throughput as a fraction of the unkeyed chain's (target >= 0.80);
// keyed_allocs_per_block counts the keyed chain's heap allocations (target 0).
double thread_cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

void chain_keyed_vs_unkeyed(benchmark::State& state) {
  const std::size_t n = 1 << 17;
  const std::uint32_t bs = 64;
  const kvkey::KeyNamespace<> plain(identity(bs));
  const kvkey::KeyNamespace<kvkey::HmacSha256> keyed(identity(bs), kvkey::TenantSecret(std::string(32, 'k')));
  const auto tokens = prompt(n);
  std::vector<kvkey::Digest> p;
  std::vector<kvkey::Digest> k;
  p.reserve(n / bs);
  k.reserve(n / bs);
  double plain_time = 0;
  double keyed_time = 0;
  std::uint64_t keyed_allocs = 0;
  for (auto _ : state) {
    const double t0 = thread_cpu_seconds();
    p.clear();
    plain.extend_block_hashes(p, tokens.data(), n);
    const double t1 = thread_cpu_seconds();
    const std::uint64_t a0 = allocs();
    k.clear();
    keyed.extend_block_hashes(k, tokens.data(), n);
    keyed_allocs += allocs() - a0;
    const double t2 = thread_cpu_seconds();
    plain_time += t1 - t0;
    keyed_time += t2 - t1;
    benchmark::DoNotOptimize(p.data());
    benchmark::DoNotOptimize(k.data());
  }
  const auto iters = static_cast<double>(state.iterations());
  state.counters["keyed_vs_unkeyed"] = plain_time / keyed_time;
  state.counters["keyed_allocs_per_block"] = static_cast<double>(keyed_allocs) / (iters * static_cast<double>(n / bs));
  state.counters["unkeyed_tokens_per_s"] = iters * static_cast<double>(n) / plain_time;
  state.counters["keyed_tokens_per_s"] = iters * static_cast<double>(n) / keyed_time;
}
BENCHMARK(chain_keyed_vs_unkeyed);

// A confidential namespace's seal and open (format v4, AES-256-GCM) against the
// machine's own AES-256-GCM in the same run: an EVP loop that encrypts the same
// 1 MiB payload under a fresh random 12-byte IV with the 1024-byte header as
// associated data (key schedule set up once, as `openssl speed -evp
// aes-256-gcm` does), then decrypts it in place and checks the tag. Each is
// timed on the thread's CPU clock. seal_vs_gcm / open_vs_gcm are kvkey's
// throughput as a fraction of the loop's (target >= 0.9, docs/performance.md):
// seal is seal_value into a preallocated value, open is open_in_place (the
// zero-copy path).
void confidential_vs_gcm(benchmark::State& state) {
  const std::size_t n = std::size_t{1} << 20;
  kvkey::Policy policy;
  policy.confidential = true;
  const kvkey::KeyNamespace<kvkey::HmacSha256> ns(identity(64), kvkey::TenantSecret(std::string(32, 'c')), policy);
  const kvkey::Digest block = ns.block_hashes(prompt(64)).at(0);
  std::vector<std::uint8_t> payload(n);
  for (std::size_t i = 0; i < n; ++i) payload[i] = static_cast<std::uint8_t>(i * 131 + 7);
  std::vector<std::uint8_t> value(kvkey::envelope_size + n);
  std::vector<std::uint8_t> ct(n);
  std::uint8_t key[32];
  std::uint8_t iv[12];
  std::uint8_t tag[16];
  std::uint8_t aad[kvkey::envelope_size] = {};
  RAND_bytes(key, sizeof key);
  EVP_CIPHER_CTX* enc = EVP_CIPHER_CTX_new();
  EVP_CIPHER_CTX* dec = EVP_CIPHER_CTX_new();
  EVP_CIPHER* gcm = EVP_CIPHER_fetch(nullptr, "AES-256-GCM", nullptr);
  if (EVP_EncryptInit_ex2(enc, gcm, key, nullptr, nullptr) != 1 ||
      EVP_DecryptInit_ex2(dec, gcm, key, nullptr, nullptr) != 1) {
    state.SkipWithError("AES-256-GCM init");
  }
  double gcm_seal = 0, gcm_open = 0, kv_seal = 0, kv_open = 0;
  bool ok = true;
  for (auto _ : state) {
    int len = 0;
    const double t0 = thread_cpu_seconds();
    RAND_bytes(iv, sizeof iv);
    ok &= EVP_EncryptInit_ex2(enc, nullptr, nullptr, iv, nullptr) == 1 &&
          EVP_EncryptUpdate(enc, nullptr, &len, aad, sizeof aad) == 1 &&
          EVP_EncryptUpdate(enc, ct.data(), &len, payload.data(), static_cast<int>(n)) == 1 &&
          EVP_EncryptFinal_ex(enc, nullptr, &len) == 1 && EVP_CIPHER_CTX_ctrl(enc, EVP_CTRL_GCM_GET_TAG, 16, tag) == 1;
    const double t1 = thread_cpu_seconds();
    ok &= EVP_DecryptInit_ex2(dec, nullptr, nullptr, iv, nullptr) == 1 &&
          EVP_DecryptUpdate(dec, nullptr, &len, aad, sizeof aad) == 1 &&
          EVP_DecryptUpdate(dec, ct.data(), &len, ct.data(), static_cast<int>(n)) == 1 &&
          EVP_CIPHER_CTX_ctrl(dec, EVP_CTRL_GCM_SET_TAG, 16, tag) == 1 && EVP_DecryptFinal_ex(dec, nullptr, &len) == 1;
    const double t2 = thread_cpu_seconds();
    (void)ns.seal_value(block, kvkey::Payload(payload.data(), n), value.data(), value.size());
    const double t3 = thread_cpu_seconds();
    ok &= ns.open_in_place(value.data(), value.size(), block).ok();
    const double t4 = thread_cpu_seconds();
    gcm_seal += t1 - t0;
    gcm_open += t2 - t1;
    kv_seal += t3 - t2;
    kv_open += t4 - t3;
    benchmark::DoNotOptimize(value.data());
    benchmark::DoNotOptimize(ct.data());
  }
  if (!ok || std::memcmp(value.data() + kvkey::envelope_size, payload.data(), n) != 0) {
    state.SkipWithError("a confidential or EVP round trip failed");
  }
  EVP_CIPHER_free(gcm);
  EVP_CIPHER_CTX_free(enc);
  EVP_CIPHER_CTX_free(dec);
  const auto bytes = static_cast<double>(state.iterations()) * static_cast<double>(n);
  state.counters["seal_vs_gcm"] = gcm_seal / kv_seal;
  state.counters["open_vs_gcm"] = gcm_open / kv_open;
  state.counters["gcm_seal_GBps"] = bytes / gcm_seal / 1e9;
  state.counters["gcm_open_GBps"] = bytes / gcm_open / 1e9;
  state.counters["seal_GBps"] = bytes / kv_seal / 1e9;
  state.counters["open_GBps"] = bytes / kv_open / 1e9;
}
BENCHMARK(confidential_vs_gcm)->MinTime(1.0);

// ---- batches ------------------------------------------------------------------------------------

// 64 prompts of 16k tokens (block size 64), each with its own salt so no two
// chains are equal. batch_sequential: one thread, a loop of
// extend_block_hashes into reused vectors. batch_pool/threads:N: a long-lived
// BatchHasher of N threads, into a reused output. batch_oneshot/threads:N:
// block_hashes_batch, which starts its threads and allocates its output per
// call. Wall-clock time (other processes on the machine slow these).
struct Batch {
  static constexpr std::size_t prompts = 64, tokens = 1 << 14;
  kvkey::KeyNamespace<> ns{identity(64)};
  std::vector<std::uint32_t> ids = prompt(prompts * tokens);
  std::vector<kvkey::HashOptions> options;
  std::vector<kvkey::BlockHashRequest<std::uint32_t>> requests;
  Batch() {
    options.resize(prompts);
    for (std::size_t i = 0; i < prompts; ++i) {
      options[i].salt = "request-" + std::to_string(i);
      requests.push_back({ids.data() + i * tokens, tokens, &options[i]});
    }
  }
  void count(benchmark::State& state, std::uint64_t allocs_run) const {
    set_block_counters(state, prompts * tokens, prompts * tokens / 64, allocs_run);
  }
};

void batch_sequential(benchmark::State& state) {
  const Batch b;
  std::vector<std::vector<kvkey::Digest>> out(b.requests.size());
  const std::uint64_t a0 = allocs();
  for (auto _ : state) {
    for (std::size_t i = 0; i < b.requests.size(); ++i) {
      out[i].clear();
      b.ns.extend_block_hashes(out[i], b.requests[i].tokens, b.requests[i].count, *b.requests[i].options);
    }
    benchmark::DoNotOptimize(out.data());
  }
  b.count(state, allocs() - a0);
}
BENCHMARK(batch_sequential)->UseRealTime()->Unit(benchmark::kMillisecond);

void batch_pool(benchmark::State& state) {
  const Batch b;
  kvkey::BatchHasher pool(static_cast<unsigned>(state.range(0)));
  const auto expect = b.ns.block_hashes(b.requests.back().tokens, b.requests.back().count, *b.requests.back().options);
  std::vector<std::vector<kvkey::Digest>> out;
  const std::uint64_t a0 = allocs();
  for (auto _ : state) {
    pool.block_hashes(b.ns, b.requests, out);
    if (out.back() != expect) state.SkipWithError("batch differs from block_hashes");
    benchmark::DoNotOptimize(out.data());
  }
  b.count(state, allocs() - a0);
}
BENCHMARK(batch_pool)->Arg(1)->Arg(2)->ArgName("threads")->UseRealTime()->Unit(benchmark::kMillisecond);

void batch_oneshot(benchmark::State& state) {
  const Batch b;
  const std::uint64_t a0 = allocs();
  for (auto _ : state) {
    auto out = kvkey::block_hashes_batch(b.ns, b.requests, static_cast<unsigned>(state.range(0)));
    benchmark::DoNotOptimize(out.data());
  }
  b.count(state, allocs() - a0);
}
BENCHMARK(batch_oneshot)->Arg(2)->ArgName("threads")->UseRealTime()->Unit(benchmark::kMillisecond);

// ---- keys and envelopes ---------------------------------------------------------------------------

// The header-only cases seal and verify by size (the explicit opt-out): they
// measure the envelope work alone; payload/... below adds the bytes.
struct Objects {
  kvkey::KeyNamespace<> ns{identity(64), kvkey::Policy{kvkey::TenantPolicy::required, kvkey::PayloadCheck::size_only}};
  std::vector<kvkey::Digest> blocks = ns.block_hashes(prompt(64 * 256));
  std::uint64_t payload = 28 * 2 * 2 * 128 * 64 * 2;
};

void set_op_counters(benchmark::State& state, std::uint64_t allocs_run) {
  state.counters["allocs_per_op"] = static_cast<double>(allocs_run) / static_cast<double>(state.iterations());
}

void store_key(benchmark::State& state) {
  Objects o;
  std::size_t i = 0;
  const std::uint64_t a0 = allocs();
  for (auto _ : state) {
    auto key = o.ns.store_key(o.blocks[i++ & 255]);
    benchmark::DoNotOptimize(key.data());
  }
  set_op_counters(state, allocs() - a0);
}
BENCHMARK(store_key);

void seal(benchmark::State& state) {
  Objects o;
  std::size_t i = 0;
  const std::uint64_t a0 = allocs();
  for (auto _ : state) {
    auto env = o.ns.seal(o.blocks[i++ & 255], o.payload);
    benchmark::DoNotOptimize(env.data());
  }
  set_op_counters(state, allocs() - a0);
}
BENCHMARK(seal);

// verify_ok: the header the reader expects. verify_block_mismatch: a header of
// another block (same identity). verify_identity_mismatch: a header sealed
// under another KV dtype, which verify parses to name the field.
void verify(benchmark::State& state) {
  Objects o;
  const int kind = static_cast<int>(state.range(0));
  std::vector<kvkey::Envelope> headers;
  auto other_id = identity(64);
  other_id.kv.dtype = kvkey::KvDtype::fp8_e4m3;
  const kvkey::KeyNamespace<> other(other_id, o.ns.policy());
  for (std::size_t b = 0; b < 256; ++b) {
    const auto& sealer = kind == 2 ? other : o.ns;
    headers.push_back(sealer.seal(o.blocks[kind == 1 ? (b + 1) & 255 : b], o.payload));
  }
  const kvkey::Reason expect = kind == 0   ? kvkey::Reason::ok
                               : kind == 1 ? kvkey::Reason::block_mismatch
                                           : kvkey::Reason::identity_mismatch;
  std::size_t i = 0;
  const std::uint64_t a0 = allocs();
  for (auto _ : state) {
    const std::size_t b = i++ & 255;
    const auto v = o.ns.verify(headers[b], o.blocks[b], o.payload);
    if (v.reason != expect) state.SkipWithError("unexpected verdict");
    benchmark::DoNotOptimize(v);
  }
  set_op_counters(state, allocs() - a0);
}
BENCHMARK(verify)->Arg(0)->Arg(1)->Arg(2)->ArgName("mismatch");

// What a connector does per stored object: the key, the header on save, the
// check on load.
void object_roundtrip(benchmark::State& state) {
  Objects o;
  std::size_t i = 0;
  const std::uint64_t a0 = allocs();
  for (auto _ : state) {
    const auto& block = o.blocks[i++ & 255];
    auto key = o.ns.store_key(block);
    const auto env = o.ns.seal(block, o.payload);
    const auto v = o.ns.verify(env, block, o.payload);
    if (!v.ok()) state.SkipWithError("own header rejected");
    benchmark::DoNotOptimize(key.data());
  }
  set_op_counters(state, allocs() - a0);
}
BENCHMARK(object_roundtrip);

// ---- payload integrity -------------------------------------------------------------------------
//
// payload/<op>/<bytes>: seal or verify with the payload's bytes, plain (XXH3-128)
// or keyed (Poly1305), against memcpy of the same bytes in the same run (the
// baseline the ratios in docs/performance.md divide by). The bytes stay in
// cache for 64 KiB and 1 MiB; 4 MiB is at the last-level cache's size.

std::vector<std::uint8_t> payload_bytes(std::size_t n) {
  std::vector<std::uint8_t> b(n);
  for (std::size_t i = 0; i < n; ++i) b[i] = static_cast<std::uint8_t>(i * 2654435761u >> 13);
  return b;
}

void payload_memcpy(benchmark::State& state) {
  const auto src = payload_bytes(static_cast<std::size_t>(state.range(0)));
  std::vector<std::uint8_t> dst(src.size());
  for (auto _ : state) {
    std::memcpy(dst.data(), src.data(), src.size());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * state.range(0));
}

template <class Hash>
struct PayloadCase {
  kvkey::KeyNamespace<Hash> ns;
  kvkey::Digest block;
  std::vector<std::uint8_t> bytes;
  kvkey::Envelope header;
  template <class... A>
  PayloadCase(std::size_t n, A&&... a) : ns(identity(64), std::forward<A>(a)...), bytes(payload_bytes(n)) {
    block = ns.block_hashes(prompt(64)).at(0);
    header = ns.seal(block, kvkey::Payload(bytes.data(), bytes.size()));
  }
};

template <class Hash, bool Verify, class... A>
void payload_case(benchmark::State& state, A... a) {
  PayloadCase<Hash> c(static_cast<std::size_t>(state.range(0)), a...);
  const kvkey::Payload p(c.bytes.data(), c.bytes.size());
  const std::uint64_t a0 = allocs();
  for (auto _ : state) {
    if constexpr (Verify) {
      const auto v = c.ns.verify(c.header, c.block, p);
      if (!v.ok()) state.SkipWithError("own payload rejected");
      benchmark::DoNotOptimize(v);
    } else {
      auto e = c.ns.seal(c.block, p);
      benchmark::DoNotOptimize(e.data());
    }
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * state.range(0));
  set_op_counters(state, allocs() - a0);
}

void payload_seal(benchmark::State& s) { payload_case<kvkey::Sha256, false>(s); }
void payload_verify(benchmark::State& s) { payload_case<kvkey::Sha256, true>(s); }
void payload_seal_keyed(benchmark::State& s) {
  payload_case<kvkey::HmacSha256, false>(s, kvkey::HmacSha256(kvkey::TenantSecret(std::string(32, 'k'))));
}
void payload_verify_keyed(benchmark::State& s) {
  payload_case<kvkey::HmacSha256, true>(s, kvkey::HmacSha256(kvkey::TenantSecret(std::string(32, 'k'))));
}

#define KVKEY_PAYLOAD_SIZES ->Arg(64 << 10)->Arg(1 << 20)->Arg(4 << 20)->ArgName("bytes")
BENCHMARK(payload_memcpy) KVKEY_PAYLOAD_SIZES;
BENCHMARK(payload_seal) KVKEY_PAYLOAD_SIZES;
BENCHMARK(payload_verify) KVKEY_PAYLOAD_SIZES;
BENCHMARK(payload_seal_keyed) KVKEY_PAYLOAD_SIZES;
BENCHMARK(payload_verify_keyed) KVKEY_PAYLOAD_SIZES;
#undef KVKEY_PAYLOAD_SIZES

// ---- fingerprint_file ----------------------------------------------------------------------------

// KVKEY_BENCH_FILE_MB (default 256) MiB of page-cached data, written once per
// process (repetitions share it) and removed at exit.
struct TempFile {
  std::string path;
  std::size_t mib = 0;
  TempFile() {
    const char* env = std::getenv("KVKEY_BENCH_FILE_MB");
    mib = env != nullptr ? std::strtoull(env, nullptr, 10) : 256;
    char name[] = "/tmp/kvkey-bench-XXXXXX";
    const int fd = mkstemp(name);
    if (fd < 0) return;
    path = name;
    std::FILE* f = fdopen(fd, "wb");
    std::vector<unsigned char> chunk(std::size_t{1} << 20);
    for (std::size_t i = 0; i < chunk.size(); ++i) chunk[i] = static_cast<unsigned char>(i * 131 + 7);
    for (std::size_t m = 0; m < mib; ++m) std::fwrite(chunk.data(), 1, chunk.size(), f);
    std::fclose(f);
  }
  ~TempFile() {
    if (!path.empty()) std::remove(path.c_str());
  }
};

void fingerprint_file(benchmark::State& state) {
  static const TempFile file;
  if (file.path.empty()) {
    state.SkipWithError("cannot create a temporary file in /tmp");
    return;
  }
  (void)kvkey::fingerprint_file(file.path);  // page it in
  for (auto _ : state) {
    auto d = kvkey::fingerprint_file(file.path);
    benchmark::DoNotOptimize(d);
  }
  const double bytes = static_cast<double>(state.iterations()) * static_cast<double>(file.mib) * 1048576.0;
  state.SetBytesProcessed(static_cast<std::int64_t>(bytes));
  state.counters["MB_per_s"] = benchmark::Counter(bytes / 1e6, benchmark::Counter::kIsRate);
}
BENCHMARK(fingerprint_file)->Unit(benchmark::kMillisecond);

// The baseline of the weights fingerprint: what sha256sum does, as a plain
// loop of fread and EVP_DigestUpdate over the same page-cached file.
void file_evp_baseline(benchmark::State& state) {
  static const TempFile file;
  if (file.path.empty()) {
    state.SkipWithError("cannot create a temporary file in /tmp");
    return;
  }
  std::vector<unsigned char> buf(std::size_t{1} << 20);
  auto hash = [&] {
    std::FILE* f = std::fopen(file.path.c_str(), "rb");
    EVP_MD_CTX* ctx = EVP_MD_CTX_new();
    EVP_DigestInit_ex(ctx, EVP_sha256(), nullptr);
    for (std::size_t n; (n = std::fread(buf.data(), 1, buf.size(), f)) > 0;) EVP_DigestUpdate(ctx, buf.data(), n);
    unsigned char md[32];
    EVP_DigestFinal_ex(ctx, md, nullptr);
    EVP_MD_CTX_free(ctx);
    std::fclose(f);
    return md[0];
  };
  (void)hash();  // page it in
  for (auto _ : state) benchmark::DoNotOptimize(hash());
  const double bytes = static_cast<double>(state.iterations()) * static_cast<double>(file.mib) * 1048576.0;
  state.SetBytesProcessed(static_cast<std::int64_t>(bytes));
  state.counters["MB_per_s"] = benchmark::Counter(bytes / 1e6, benchmark::Counter::kIsRate);
}
BENCHMARK(file_evp_baseline)->UseRealTime()->Unit(benchmark::kMillisecond);

// A model directory (config.json + weight files of KVKEY_BENCH_FILE_MB MiB in
// total, split over `files` files), written once per process, removed at exit.
struct TempModelDir {
  std::string path;
  std::size_t mib = 0;
  explicit TempModelDir(int files) {
    const char* env = std::getenv("KVKEY_BENCH_FILE_MB");
    mib = env != nullptr ? std::strtoull(env, nullptr, 10) : 256;
    char name[] = "/tmp/kvkey-bench-model-XXXXXX";
    if (mkdtemp(name) == nullptr) return;
    path = name;
    std::FILE* c = std::fopen((path + "/config.json").c_str(), "wb");
    std::fputs(R"({"num_hidden_layers": 24, "num_attention_heads": 14, "num_key_value_heads": 2, "hidden_size": 896})",
               c);
    std::fclose(c);
    std::vector<unsigned char> chunk(std::size_t{1} << 20);
    for (int i = 0; i < files; ++i) {
      for (std::size_t k = 0; k < chunk.size(); ++k)
        chunk[k] = static_cast<unsigned char>(k * 131 + 7 + static_cast<std::size_t>(i));
      std::FILE* f = std::fopen((path + "/model-" + std::to_string(i) + ".safetensors").c_str(), "wb");
      for (std::size_t m = 0; m < mib / static_cast<std::size_t>(files); ++m)
        std::fwrite(chunk.data(), 1, chunk.size(), f);
      std::fclose(f);
    }
  }
  ~TempModelDir() {
    if (!path.empty()) std::filesystem::remove_all(path);
  }
};

// kvkey::read_model_dir on a plain directory: the weights fingerprint (the
// whole directory is read), threads = the argument.
void weights_fingerprint(benchmark::State& state, const TempModelDir& dir) {
  if (dir.path.empty()) {
    state.SkipWithError("cannot create a temporary directory in /tmp");
    return;
  }
  kvkey::ModelDirOptions o;
  o.revision = "bench";
  o.hashing.threads = static_cast<unsigned>(state.range(0));
  (void)kvkey::read_model_dir(dir.path, o);  // page it in
  for (auto _ : state) {
    auto m = kvkey::read_model_dir(dir.path, o);
    benchmark::DoNotOptimize(m.model.weights_fingerprint);
  }
  const double bytes = static_cast<double>(state.iterations()) * static_cast<double>(dir.mib) * 1048576.0;
  state.SetBytesProcessed(static_cast<std::int64_t>(bytes));
  state.counters["MB_per_s"] = benchmark::Counter(bytes / 1e6, benchmark::Counter::kIsRate);
}
void weights_one_file(benchmark::State& state) {
  static const TempModelDir dir(1);
  weights_fingerprint(state, dir);
}
void weights_two_files(benchmark::State& state) {
  static const TempModelDir dir(2);
  weights_fingerprint(state, dir);
}
BENCHMARK(weights_one_file)->Arg(1)->ArgName("threads")->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(weights_two_files)->Arg(1)->Arg(2)->ArgName("threads")->UseRealTime()->Unit(benchmark::kMillisecond);

}  // namespace

int main(int argc, char** argv) {
  // Before OpenSSL allocates anything, so every allocation is counted.
  if (!kvkey_bench::count_openssl_allocations()) {
    std::fprintf(stderr, "kvkey_bench: CRYPTO_set_mem_functions failed; OpenSSL allocations are not counted\n");
  }
  if (kvkey::detail::sha256_native_available())
    benchmark::RegisterBenchmark("sha256_native_stream", sha256_native_stream);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
