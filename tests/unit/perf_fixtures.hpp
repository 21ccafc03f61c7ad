// The identity the performance tests build their namespaces from.
#ifndef KVKEY_TESTS_PERF_FIXTURES_HPP
#define KVKEY_TESTS_PERF_FIXTURES_HPP

#include <kvkey/identity.hpp>

#include <cstdint>

#include "core_test_support.hpp"

// The core tests' small identity, in bf16, at the block size under test.
inline kvkey::Identity perf_identity(std::uint32_t block_size) {
  kvkey::Identity id = core_test::base_identity();
  id.kv.dtype = kvkey::KvDtype::bf16;
  id.kv.block_size = block_size;
  return id;
}

#endif  // KVKEY_TESTS_PERF_FIXTURES_HPP
