// No heap allocation per seal or verify with a payload: global operator new and
// OpenSSL's allocator are both counted (bench/alloc_counter.cpp), from before
// OpenSSL's first allocation (main below).
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <kvkey/kvkey.hpp>

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "../../bench/alloc_counter.hpp"
#include "../support/fixtures.hpp"

namespace {

// Allocations made by `rounds` calls of f, after one warm-up call (which may
// set up the thread's reusable contexts).
template <class F>
std::uint64_t allocations_of(F&& f, int rounds = 50) {
  f();
  const std::uint64_t before = kvkey_bench::allocations();
  for (int i = 0; i < rounds; ++i) f();
  return kvkey_bench::allocations() - before;
}

template <class Hash>
void check_no_allocation(const kvkey::KeyNamespace<Hash>& ns) {
  const std::vector<std::uint8_t> bytes(64 * 1024, 0x5a);
  const std::vector<std::int32_t> tokens(16, 7);
  const kvkey::Digest block = ns.block_hashes(tokens).at(0);
  const kvkey::ConstBuffer parts[] = {{bytes.data(), 1000}, {bytes.data() + 1000, bytes.size() - 1000}};
  const kvkey::Envelope sealed = ns.seal(block, kvkey::Payload(bytes.data(), bytes.size()));
  kvkey::Envelope e{};
  bool all_ok = true;
  CHECK(allocations_of([&] { e = ns.seal(block, kvkey::Payload(bytes.data(), bytes.size())); }) == 0);
  CHECK(allocations_of([&] { e = ns.seal(block, kvkey::Payload(parts, 2)); }) == 0);
  CHECK(allocations_of([&] { all_ok &= ns.verify(sealed, block, kvkey::Payload(bytes.data(), bytes.size())).ok(); }) ==
        0);
  CHECK(allocations_of([&] { all_ok &= ns.verify(sealed, block, kvkey::Payload(parts, 2)).ok(); }) == 0);
  // The common rejection of a damaged payload does not allocate either.
  std::vector<std::uint8_t> damaged = bytes;
  damaged[5] ^= 1;
  CHECK(allocations_of([&] {
          all_ok &= ns.verify(sealed, block, kvkey::Payload(damaged.data(), damaged.size())).reason ==
                    kvkey::Reason::payload_mismatch;
        }) == 0);
  CHECK(all_ok);
  CHECK(ns.verify(e, block, kvkey::Payload(parts, 2)).ok());
}

}  // namespace

TEST_CASE("seal and verify with a payload allocate nothing: plain", "[alloc]") {
  check_no_allocation(kvkey::KeyNamespace<>(kvkey_test::base_identity()));
}

TEST_CASE("seal and verify with a payload allocate nothing: keyed", "[alloc]") {
  check_no_allocation(
      kvkey::KeyNamespace<kvkey::HmacSha256>(kvkey_test::base_identity(), kvkey::TenantSecret(std::string(32, 's'))));
}

TEST_CASE("a keyed chain allocates nothing per block after warm-up", "[alloc][keyed]") {
  const kvkey::KeyNamespace<kvkey::HmacSha256> ns(kvkey_test::bf16_identity(64),
                                                  kvkey::TenantSecret(std::string(32, 's')));
  const std::vector<std::int32_t> tokens = kvkey_test::tokens(64 * 256);
  std::vector<kvkey::Digest> hashes;
  hashes.reserve(256);
  // 256 blocks per call: any allocation per block shows up as at least 256 per call.
  CHECK(allocations_of([&] {
          hashes.clear();
          ns.extend_block_hashes(hashes, tokens.data(), tokens.size());
        }) == 0);
  CHECK(hashes.size() == 256);
  CHECK(hashes == ns.block_hashes(tokens));
  kvkey::Digest d{};
  CHECK(allocations_of([&] { d = ns.object_hash(hashes[d.data()[0]]); }) == 0);
  // Block sizes beyond the one-buffer path (streamed through update()) too.
  const kvkey::KeyNamespace<kvkey::HmacSha256> big(kvkey_test::bf16_identity(1024),
                                                   kvkey::TenantSecret(std::string(32, 's')));
  CHECK(allocations_of([&] {
          hashes.clear();
          big.extend_block_hashes(hashes, tokens.data(), tokens.size());
        }) == 0);
}

int main(int argc, char** argv) {
  if (!kvkey_bench::count_openssl_allocations()) {
    std::fprintf(stderr, "OpenSSL allocated before main: its allocations cannot be counted\n");
    return 1;
  }
  return Catch::Session().run(argc, argv);
}
