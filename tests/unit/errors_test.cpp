// SPDX-License-Identifier: Apache-2.0
// kvkey::error carries its category, field and detail as members, and what()
// is built from them: front ends read the members, never parse the message.
#include <catch2/catch.hpp>

#include <kvkey/errors.hpp>
#include <kvkey/hmac.hpp>
#include <kvkey/identity.hpp>

#include <string>
#include <type_traits>

TEST_CASE("Errors carry id, field and detail; what() is built from them", "[errors]") {
  const kvkey::identity_error e("kv.num_kv_heads", "must be greater than 0");
  CHECK(e.id() == "kvkey.identity_error");
  CHECK(e.field() == "kv.num_kv_heads");
  CHECK(e.detail() == "must be greater than 0");
  CHECK(std::string(e.what()) == "[kvkey.identity_error] kv.num_kv_heads: must be greater than 0");
  CHECK(e.message() == "kv.num_kv_heads: must be greater than 0");

  const kvkey::input_error plain("token 3 is out of range");
  CHECK(plain.id() == "kvkey.input_error");
  CHECK(plain.field().empty());
  CHECK(std::string(plain.what()) == "[kvkey.input_error] token 3 is out of range");
  CHECK(plain.message() == "token 3 is out of range");

  const kvkey::input_error named("tokens[3]", "is 2^32");
  CHECK(named.field() == "tokens[3]");
  CHECK(std::string(named.what()) == "[kvkey.input_error] tokens[3]: is 2^32");

  CHECK(kvkey::io_error("cannot open x").id() == "kvkey.io_error");
  CHECK(kvkey::crypto_error("EVP failed").id() == "kvkey.crypto_error");
  CHECK(kvkey::error("other").id() == "kvkey.error");
}

TEST_CASE("Copying an error cannot throw and keeps its members", "[errors]") {
  static_assert(std::is_nothrow_copy_constructible_v<kvkey::identity_error>);
  static_assert(std::is_nothrow_copy_constructible_v<kvkey::input_error>);
  const kvkey::identity_error a("tenant", "must not be empty");
  const kvkey::identity_error b = a;  // NOLINT(performance-unnecessary-copy-initialization): the copy is the test
  CHECK(b.field() == "tenant");
  CHECK(b.detail() == "must not be empty");
  CHECK(std::string(b.what()) == a.what());
}

TEST_CASE("One rule decides the category: the namespace as configured vs values that cannot be taken as given",
          "[errors]") {
  // A value the identity checks refuse is an identity_error on its path.
  kvkey::Identity id;
  try {
    (void)kvkey::validated(id);
    FAIL("an empty identity validated");
  } catch (const kvkey::identity_error& e) {
    CHECK(e.field() == "tenant");
  }
  // A tenant secret that is not usable keying material: the namespace cannot be built either.
  try {
    kvkey::TenantSecret s(std::string(3, 'x'));
    FAIL("a 3-byte secret was accepted");
  } catch (const kvkey::identity_error& e) {
    CHECK(e.id() == "kvkey.identity_error");
    CHECK(e.field() == "tenant_secret");
  }
  // A name that cannot be read into an identity member is an input that cannot be taken as given.
  CHECK_FALSE(kvkey::kv_dtype_from_string("fp9").has_value());
}
