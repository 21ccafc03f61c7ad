// Shared fixtures of the security tests (tests/unit/security_*_test.cpp).
#ifndef KVKEY_TESTS_SECURITY_FIXTURES_HPP
#define KVKEY_TESTS_SECURITY_FIXTURES_HPP

#include <kvkey/hmac.hpp>
#include <kvkey/kvkey.hpp>

#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kvkey_test {

/// A valid identity of a small GQA model, 2 TP ranks.
inline kvkey::Identity security_identity(std::string tenant = "tenant-a") {
  kvkey::Identity id;
  id.tenant = std::move(tenant);
  id.model.name = "Qwen/Qwen2.5-0.5B-Instruct";
  id.model.revision = "7ae557604adf67be50417f59c2c2f167def9a775";
  id.model.weights_epoch = 3;
  id.kv.dtype = kvkey::KvDtype::bf16;
  id.kv.block_size = 16;
  id.kv.num_layers = 24;
  id.kv.num_kv_heads = 2;
  id.kv.head_dim = 64;
  id.kv.layout = "test.layer_major.v1";
  id.shard.tp_size = 2;
  id.shard.tp_rank = 1;
  return id;
}

/// 48 distinct bytes, none of them zero, for a TenantSecret.
inline std::string secret_bytes(char first) {
  std::string s;
  for (int i = 0; i < 48; ++i) s.push_back(static_cast<char>(first + (i * 7) % 50));
  return s;
}

/// Deterministic token ids: `blocks` full blocks of block_size tokens.
inline std::vector<std::int64_t> prompt_tokens(std::size_t blocks, std::size_t block_size, std::int64_t seed) {
  std::vector<std::int64_t> t(blocks * block_size);
  for (std::size_t i = 0; i < t.size(); ++i) t[i] = (seed * 7919 + static_cast<std::int64_t>(i) * 104729) % 151643;
  return t;
}

/// True when `needle` occurs anywhere in haystack's bytes.
template <class Haystack>
bool contains_bytes(const Haystack& haystack, std::string_view needle) {
  const auto* begin = reinterpret_cast<const char*>(haystack.data());
  const auto* end = begin + haystack.size();
  return std::search(begin, end, needle.begin(), needle.end()) != end;
}

}  // namespace kvkey_test

#endif  // KVKEY_TESTS_SECURITY_FIXTURES_HPP
