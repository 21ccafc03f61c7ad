// The identity both package consumers hash with.
#ifndef KVKEY_TESTS_PACKAGE_CONSUMER_HPP
#define KVKEY_TESTS_PACKAGE_CONSUMER_HPP

#include <kvkey/identity.hpp>

inline kvkey::Identity consumer_identity() {
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
  return id;
}

#endif  // KVKEY_TESTS_PACKAGE_CONSUMER_HPP
