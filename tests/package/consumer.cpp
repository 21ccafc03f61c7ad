// A consumer of kvkey with its {fmt} formatters: kvkey::fmt, kvkey-fmt.pc.
#include <kvkey/fmt.hpp>
#include <kvkey/kvkey.hpp>

#include <vector>

#include "../support/fixtures.hpp"

int main() {
  const kvkey::KeyNamespace<> ns{kvkey_test::base_identity()};
  const auto hashes = ns.block_hashes(std::vector<std::int64_t>(40, 7));
  if (hashes.size() != 2) return 1;
  const std::vector<unsigned char> kv(4096, 0x42);
  const kvkey::Payload payload(kv.data(), kv.size());
  const auto header = ns.seal(hashes[1], payload);
  if (!ns.verify(header, hashes[1], payload).ok()) return 2;
  const kvkey::Verdict rejected = ns.verify(header, hashes[0], payload);
  if (rejected.reason != kvkey::Reason::block_mismatch) return 3;
  if (fmt::format("{}", hashes[1]) != hashes[1].hex()) return 4;
  if (fmt::format("{}", rejected).rfind(kvkey::to_string(kvkey::Reason::block_mismatch), 0) != 0) return 5;
  fmt::print("{} -> {}: {}\n", hashes[1], ns.store_key(hashes[1]), rejected);
  return 0;
}
