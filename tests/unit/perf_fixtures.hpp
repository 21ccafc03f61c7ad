// The identity the performance tests build their namespaces from.
#ifndef KVKEY_TESTS_PERF_FIXTURES_HPP
#define KVKEY_TESTS_PERF_FIXTURES_HPP

#include <kvkey/identity.hpp>

#include <cstdint>

inline kvkey::Identity perf_identity(std::uint32_t block_size) {
  kvkey::Identity id;
  id.tenant = "team-a";
  id.model.name = "Qwen/Qwen2.5-7B-Instruct";
  id.model.revision = "a09a35458c702b33eeacc393d103063234e8bc28";
  id.kv.dtype = kvkey::KvDtype::bf16;
  id.kv.block_size = block_size;
  id.kv.num_layers = 28;
  id.kv.num_kv_heads = 4;
  id.kv.head_dim = 128;
  id.kv.layout = "lmdeploy.v1.layer_major";
  return id;
}

#endif  // KVKEY_TESTS_PERF_FIXTURES_HPP
