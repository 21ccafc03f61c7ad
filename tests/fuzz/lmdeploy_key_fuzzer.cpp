// The legacy lmdeploy key parser (kvkey/compat/lmdeploy.hpp) on arbitrary
// strings: whatever parse_key accepts, store_key rebuilds byte for byte, and
// is_legacy_key agrees with it.
#include <kvkey/compat/lmdeploy.hpp>

#include "fuzz_common.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  namespace lm = kvkey::compat::lmdeploy;
  using kvkey_fuzz::require;
  const std::string_view key(reinterpret_cast<const char*>(data), size);
  const auto parsed = lm::parse_key(key);
  require(parsed.has_value() == lm::is_legacy_key(key), "is_legacy_key agrees with parse_key");
  if (!parsed) return 0;
  require(!parsed->model_name.empty(), "a parsed key has a model name");
  require(lm::store_key(parsed->cache_prefix, parsed->model_name, parsed->kv_head_rank, parsed->block_hash) == key,
          "store_key rebuilds a parsed key exactly");
  require(key.find('@') != std::string_view::npos, "a legacy key contains '@'");
  return 0;
}
