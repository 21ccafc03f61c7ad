// kvkey's C++ conformance kit (kvkey/testing.hpp) against a real Mooncake Store, through
// the C++ store adapter (mooncake_store.hpp). The master comes from MOONCAKE_MASTER_ADDR and
// MOONCAKE_METADATA_URL (scripts/mooncake.sh start); this process lends the store no
// memory, so the objects live in whichever client does (stage 44-mooncake starts one).
// Exits 1 unless every case passes.
#include <kvkey/testing.hpp>

#include <cstdio>
#include <cstdlib>
#include <memory>

#include "mooncake_store.hpp"

int main() {
  const char* master = std::getenv("MOONCAKE_MASTER_ADDR");
  const char* metadata = std::getenv("MOONCAKE_METADATA_URL");
  if (master == nullptr || metadata == nullptr) {
    std::fprintf(stderr,
                 "mooncake check: set MOONCAKE_MASTER_ADDR and MOONCAKE_METADATA_URL (scripts/mooncake.sh start)\n");
    return 2;
  }
  auto client = std::make_shared<kvkey_mooncake::Client>(master, metadata, 0, 64u << 20);
  const kvkey::testing::Report r =
      kvkey::testing::check_store([&] { return std::make_unique<kvkey_mooncake::Store>(client); });
  std::fputs(r.summary().c_str(), stdout);
  std::printf("mooncake C++ check_store: %s: %zu cases, wrong loads %zu, counted rejected %zu, lost %zu\n",
              r.ok() ? "ok" : "FAILED", r.cases.size(), r.wrong_loads(), r.counted_rejected(), r.lost());
  kvkey_mooncake::Store(client).purge(std::string(kvkey::store_key_tag) + "kvkey-check-");  // the kit's tenants
  return r.ok() ? 0 : 1;
}
