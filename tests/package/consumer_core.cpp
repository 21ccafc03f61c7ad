// A consumer of the core library alone: kvkey::kvkey, kvkey.pc. It must build
// and link without {fmt} (the package tests configure it with {fmt} hidden).
#include <kvkey/batch.hpp>
#include <kvkey/kvkey.hpp>

#ifdef FMT_VERSION
#error "kvkey/kvkey.hpp or kvkey/batch.hpp included {fmt}; only kvkey/fmt.hpp may"
#endif

#include <cstdio>
#include <vector>

#include "../support/fixtures.hpp"

int main() {
  const kvkey::KeyNamespace<> ns{kvkey_test::base_identity()};
  const std::vector<std::vector<std::int64_t>> prompts(4, std::vector<std::int64_t>(40, 7));
  kvkey::BatchHasher pool(2);  // threads: kvkey/batch.hpp
  const auto batch = pool.block_hashes(ns, prompts);
  if (batch.size() != 4 || batch[3] != ns.block_hashes(prompts[3])) return 1;
  const auto& hashes = batch[0];
  const std::vector<unsigned char> kv(4096, 0x42);  // payload digests: libxxhash
  const kvkey::Payload payload(kv.data(), kv.size());
  const auto header = ns.seal(hashes[1], payload);
  if (!ns.verify(header, hashes[1], payload).ok()) return 2;
  if (ns.verify(header, hashes[0], payload).reason != kvkey::Reason::block_mismatch) return 3;
  std::printf("%s -> %s\n", hashes[1].hex().c_str(), ns.store_key(hashes[1]).c_str());
  return 0;
}
