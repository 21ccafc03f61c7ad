// A program written only against kvkey's public names, built by a consumer project.
#include <kvkey/kvkey.hpp>
#include <kvkey/fmt.hpp>

#include <cstdio>
#include <vector>

int main() {
  kvkey::Identity id;
  id.tenant = "consumer";
  id.model.name = "demo";
  id.model.revision = "r1";
  id.kv.dtype = kvkey::KvDtype::bf16;
  id.kv.block_size = 16;
  id.kv.num_layers = 2;
  id.kv.num_kv_heads = 2;
  id.kv.head_dim = 64;
  id.kv.layout = "demo.v1";
  const kvkey::KeyNamespace<> ns{id};
  const std::vector<std::int64_t> tokens(40, 7);
  const auto hashes = ns.block_hashes(tokens);
  if (hashes.size() != 2) return 1;
  const std::vector<unsigned char> kv(4096, 0x42);
  const kvkey::Payload payload(kv.data(), kv.size());
  const auto header = ns.seal(hashes[1], payload);
  if (!ns.verify(header, hashes[1], payload).ok()) return 2;
  if (ns.verify(header, hashes[0], payload).reason != kvkey::Reason::block_mismatch) return 3;
  fmt::print("{} -> {}\n", hashes[1], ns.store_key(hashes[1]));
  return 0;
}
