// SPDX-License-Identifier: Apache-2.0
// AnyKeyNamespace: the plain or keyed namespace chosen at run time gives exactly
// what the templated namespace it holds gives.
#include <catch2/catch.hpp>

#include <kvkey/any_key_namespace.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "support/fixtures.hpp"

namespace {
std::vector<std::int32_t> tokens(std::size_t n) {
  std::vector<std::int32_t> t(n);
  for (std::size_t i = 0; i < n; ++i) t[i] = static_cast<std::int32_t>(i * 7 + 1);
  return t;
}
}  // namespace

TEST_CASE("AnyKeyNamespace forwards to the plain namespace it holds", "[any_key_namespace]") {
  const kvkey::Identity id = kvkey_test::base_identity();
  const kvkey::KeyNamespace<> plain(id);
  const kvkey::AnyKeyNamespace any(id);
  CHECK_FALSE(any.keyed());
  CHECK(any.namespace_kind() == kvkey::NamespaceKind::plain);
  const auto t = tokens(4 * id.kv.block_size + 3);
  const auto hashes = any.block_hashes(t);
  CHECK(hashes == plain.block_hashes(t));
  CHECK(any.root() == plain.root());
  CHECK(any.store_key(hashes[0]) == plain.store_key(hashes[0]));
  CHECK(any.key_prefix() == plain.key_prefix());
  const std::string payload = "kv bytes";
  const kvkey::Envelope e = any.seal(hashes[1], kvkey::Payload(payload.data(), payload.size()));
  CHECK(plain.verify(e.data(), e.size(), hashes[1], kvkey::Payload(payload.data(), payload.size())).ok());
  CHECK(any.visit([](const auto& ns) { return ns.block_size(); }) == id.kv.block_size);
}

TEST_CASE("AnyKeyNamespace with a secret is the keyed namespace", "[any_key_namespace]") {
  const kvkey::Identity id = kvkey_test::base_identity();
  const std::string secret(32, 's');
  const kvkey::KeyNamespace<kvkey::HmacSha256> keyed(id, kvkey::HmacSha256(kvkey::TenantSecret(secret)));
  const kvkey::AnyKeyNamespace any(id, kvkey::TenantSecret(secret));
  CHECK(any.keyed());
  CHECK(any.integrity_mode() == kvkey::IntegrityMode::poly1305);
  const auto t = tokens(3 * id.kv.block_size);
  CHECK(any.block_hashes(t) == keyed.block_hashes(t));
  CHECK(any.root() != kvkey::AnyKeyNamespace(id).root());
}
