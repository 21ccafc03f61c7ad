// Store keys: format, bounds, readable segments, and the tenant prefix.
#include "support/reference.hpp"

#include <catch2/catch.hpp>

#include <cstdint>
#include <set>
#include <string>
#include <vector>

namespace {

using kvkey::Identity;
using kvkey_test::base_identity;

bool printable_ascii(const std::string& s) {
  for (unsigned char c : s) {
    if (c < 0x21 || c > 0x7e) return false;
  }
  return true;
}

bool lowercase_hex(const std::string& s) { return s.find_first_not_of("0123456789abcdef") == std::string::npos; }

// The key's model segment: between the namespace segment and "/e<epoch>/".
std::string model_segment_of(const kvkey::KeyNamespace<>& ns) {
  const std::string& p = ns.key_prefix();
  const std::string tenant_part = ns.secret_prefix();
  const auto epoch_at = p.rfind("/e");
  return p.substr(tenant_part.size(), epoch_at - tenant_part.size());
}

std::string key_for(const Identity& id, std::size_t block = 0) {
  const kvkey::KeyNamespace<> ns(id);
  return ns.store_key(ns.block_hashes(kvkey_test::tokens((block + 1) * id.kv.block_size)).at(block));
}

}  // namespace

TEST_CASE("A store key is kvk4/<tenant>/p/<model>/e<epoch>/<object hash>", "[store_key]") {
  Identity id = base_identity();
  id.model.weights_epoch = 42;
  const kvkey::KeyNamespace<> ns(id);
  const auto blocks = ns.block_hashes(kvkey_test::tokens(64));
  REQUIRE(blocks.size() == 4);
  std::set<std::string> keys;
  for (const auto& b : blocks) {
    const std::string key = ns.store_key(b);
    CAPTURE(key);
    CHECK(key == "kvk4/team-a/p/Qwen%2FQwen2.5-7B-Instruct/e42/" + ns.object_hash(b).hex());
    CHECK(key.rfind(ns.key_prefix(), 0) == 0);
    CHECK(key.rfind(ns.tenant_prefix(), 0) == 0);
    CHECK(key.size() == ns.key_prefix().size() + 64);
    CHECK(lowercase_hex(key.substr(key.size() - 64)));
    CHECK(printable_ascii(key));
    CHECK(key.find('@') == std::string::npos);
    keys.insert(key);
  }
  CHECK(keys.size() == blocks.size());  // different blocks, different keys
  CHECK(ns.key_prefix() == "kvk4/team-a/p/Qwen%2FQwen2.5-7B-Instruct/e42/");
  CHECK(ns.tenant_prefix() == "kvk4/team-a/");
  CHECK(ns.secret_prefix() == "kvk4/team-a/p/");
  CHECK(kvkey::store_key_tag == "kvk4/");
}

TEST_CASE("The object hash binds the block hash and the slice", "[store_key]") {
  Identity id = base_identity();
  id.shard = {2, 1, 2, 1};  // heads [2,4), layers [14,28)
  const kvkey::KeyNamespace<> ns(id);
  const auto block = ns.block_hashes(kvkey_test::tokens(16)).at(0);
  const auto expected =
      kvkey_test::ref::sha256(kvkey_test::ref::object_message(kvkey_test::bytes_of(block), kvkey::Slice{2, 4, 14, 28}));
  CHECK(ns.slice() == kvkey::Slice{2, 4, 14, 28});
  CHECK(kvkey_test::bytes_of(ns.object_hash(block)) == expected);
  CHECK(ns.object_hash(block) != block);
}

TEST_CASE("The epoch segment is the decimal epoch", "[store_key]") {
  for (std::uint64_t epoch : {std::uint64_t{0}, std::uint64_t{1}, std::uint64_t{1000000007}, ~std::uint64_t{0}}) {
    CAPTURE(epoch);
    Identity id = base_identity();
    id.model.weights_epoch = epoch;
    const kvkey::KeyNamespace<> ns(id);
    CHECK(ns.key_prefix() == "kvk4/team-a/p/Qwen%2FQwen2.5-7B-Instruct/e" + std::to_string(epoch) + "/");
  }
}

TEST_CASE("The model segment percent-encodes and is cut to 80 characters", "[store_key]") {
  struct Case {
    std::string name;
    std::string segment;
  };
  const std::vector<Case> cases = {
      {"Qwen2.5-0.5B-Instruct", "Qwen2.5-0.5B-Instruct"},
      {"a_b.c-d", "a_b.c-d"},
      {"org/model@main v2", "org%2Fmodel%40main%20v2"},
      {"100%", "100%25"},
      {"caf\xc3\xa9", "caf%C3%A9"},
      {"~!*'()", "%7E%21%2A%27%28%29"},
      {std::string(80, 'm'), std::string(80, 'm')},
      {std::string(128, 'm'), std::string(80, 'm')},
      // A 3-character escape is never split at the cut.
      {std::string(79, 'm') + "/", std::string(79, 'm')},
      {std::string(78, 'm') + "/", std::string(78, 'm')},
      {std::string(77, 'm') + "/x", std::string(77, 'm') + "%2F"},
      {std::string(40, '/'),
       [] {
         std::string s;
         for (int i = 0; i < 26; ++i) s += "%2F";
         return s;
       }()},
  };
  for (const auto& c : cases) {
    CAPTURE(c.name);
    Identity id = base_identity();
    id.model.name = c.name;
    const kvkey::KeyNamespace<> ns(id);
    CHECK(model_segment_of(ns) == c.segment);
    CHECK(c.segment == kvkey_test::ref::model_segment(c.name));
    CHECK(model_segment_of(ns).size() <= 80);
  }
}

TEST_CASE("Keys stay printable and within max_store_key_size at the limits", "[store_key]") {
  Identity id = base_identity();
  id.tenant = std::string(kvkey::limits::tenant, 'T');
  id.model.weights_epoch = ~std::uint64_t{0};
  for (const std::string& name :
       {std::string(kvkey::limits::model_name, '/'), std::string(kvkey::limits::model_name, '\xff'),
        std::string(kvkey::limits::model_name, ' '), std::string(kvkey::limits::model_name, '@'),
        std::string(kvkey::limits::model_name, 'x')}) {
    CAPTURE(name);
    id.model.name = name;
    const std::string key = key_for(id);
    CAPTURE(key);
    CHECK(key.size() <= kvkey::max_store_key_size);
    CHECK(printable_ascii(key));
    CHECK(key.find('@') == std::string::npos);
    CHECK(key.rfind("kvk4/" + id.tenant + "/p/", 0) == 0);
    CHECK(key.find("/e18446744073709551615/") != std::string::npos);
    // Keyed: the secret id's 16 hex digits take the place of "p"; still within the bound.
    const kvkey::KeyNamespace<kvkey::HmacSha256> keyed(id, kvkey::TenantSecret(std::string(32, 's')));
    const std::string kkey = keyed.store_key(keyed.block_hashes(kvkey_test::tokens(id.kv.block_size)).at(0));
    CAPTURE(kkey);
    CHECK(kkey.size() == key.size() + 16);
    CHECK(kkey.size() <= kvkey::max_store_key_size);
    CHECK(kkey.rfind("kvk4/" + id.tenant + "/k" + keyed.secret_id()->hex() + "/", 0) == 0);
  }
  // The largest valid identity's keys, with every option present.
  const std::string key = key_for(kvkey_test::largest_identity(), 1);
  CHECK(key.size() <= kvkey::max_store_key_size);
  CHECK(printable_ascii(key));
}

TEST_CASE("Model names that differ only beyond the cut still get different keys", "[store_key]") {
  Identity a = base_identity();
  a.model.name = std::string(120, 'm') + "-a";
  Identity b = a;
  b.model.name = std::string(120, 'm') + "-b";
  const std::string ka = key_for(a);
  const std::string kb = key_for(b);
  CHECK(ka.substr(0, ka.size() - 64) == kb.substr(0, kb.size() - 64));  // same readable prefix
  CHECK(ka != kb);                                                      // the object hash differs
}

TEST_CASE("tenant_key_prefix validates the tenant", "[store_key]") {
  CHECK(kvkey::tenant_key_prefix("team-a") == "kvk4/team-a/");
  CHECK(kvkey::tenant_key_prefix("_single") == "kvk4/_single/");  // the single-tenant name
  for (const char* bad : {"", "a/b", "a@b", "a b", "_other", ".x", "a%2Fb"}) {
    CAPTURE(bad);
    CHECK_THROWS_MATCHES(kvkey::tenant_key_prefix(bad), kvkey::identity_error,
                         Catch::Matchers::Predicate<kvkey::identity_error>(
                             [](const kvkey::identity_error& e) { return e.field() == "tenant"; }, "field is tenant"));
  }
  CHECK_THROWS_AS(kvkey::tenant_key_prefix(std::string(65, 'a')), kvkey::identity_error);
  // Every key of a tenant starts with its prefix, and no other tenant's key does.
  Identity a = base_identity();
  Identity ab = base_identity();
  ab.tenant = "team-ab";
  const std::string ka = key_for(a);
  const std::string kab = key_for(ab);
  CHECK(ka.rfind(kvkey::tenant_key_prefix("team-a"), 0) == 0);
  CHECK(kab.rfind(kvkey::tenant_key_prefix("team-a"), 0) != 0);  // "team-a" is not a prefix of "team-ab/"
}
