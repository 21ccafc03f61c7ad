// kvkey/identity_file.hpp: the identity file read back as written, and every
// refusal an input_error naming its field in the documented order
// (docs/conformance.md, "Decoding an identity" and "Identity files").
#include <kvkey/identity_file.hpp>
#include <kvkey/key_namespace.hpp>

#include "support/fixtures.hpp"

#include <catch2/catch.hpp>

#include <string>
#include <vector>

namespace {

using kvkey::IdentityJson;
using kvkey::parse_identity_file;

// The field parse_identity_file refuses text on ("" when it reads it).
std::string refused_on(const std::string& text) {
  try {
    (void)parse_identity_file(text);
  } catch (const kvkey::input_error& e) {
    return e.field();
  }
  return "";
}

const std::string minimal = R"({"tenant": "t", "model": {"name": "m", "revision": "r"},
  "kv": {"dtype": "fp16", "block_size": 16, "num_layers": 4, "num_kv_heads": 4, "head_dim": 64, "layout": "l"}})";

}  // namespace

TEST_CASE("an identity file is read back as written", "[identity_file]") {
  for (const kvkey::Identity& id : {kvkey_test::base_identity(), kvkey_test::rich_identity()}) {
    const kvkey::IdentityFile f = parse_identity_file(kvkey::identity_file_json(id).dump());
    CHECK(f.identity == id);
    CHECK(f.policy.tenant == kvkey::TenantPolicy::required);
  }
  kvkey::Identity single = kvkey_test::base_identity();
  single.tenant.clear();
  const auto text = kvkey::identity_file_json(single, kvkey::single_tenant).dump();
  CHECK(text.rfind(R"({"policy":"single_tenant","model")", 0) == 0);
  const kvkey::IdentityFile f = parse_identity_file(text);
  CHECK(f.identity == single);
  CHECK(f.policy.tenant == kvkey::TenantPolicy::single_tenant);
}

TEST_CASE("the committed example identity files are read as the engine reads them", "[identity_file]") {
  const auto f = kvkey::load_identity_file(KVKEY_TEST_DATA_DIR "/../../examples/identities/lora.json");
  REQUIRE(f.identity.adapter);
  REQUIRE(f.fingerprinted_files.size() == 1);  // adapter.weights_file, relative to the file's directory
  CHECK(f.fingerprinted_files[0].first == "adapter.weights_fingerprint");
  CHECK(f.identity.adapter->weights_fingerprint ==
        kvkey::fingerprint_file(KVKEY_TEST_DATA_DIR "/../../examples/identities/adapter-weights.txt"));
  CHECK_NOTHROW(kvkey::KeyNamespace<>(f.identity, f.policy));
}

TEST_CASE("an identity file that is not one is refused on identity_file", "[identity_file]") {
  for (const std::string& text : std::vector<std::string>{
           "", "[]", "7", "{} {}", "{\"tenant\": NaN}", "{\"a\": 1e400}", "{\"a\": \"\\ud800\"}", "{\"a\": \"\xff\"}",
           std::string("{}\0x", 4), std::string(40, '[') + std::string(40, ']'),
           std::string(kvkey::max_identity_file_size + 1, ' ')}) {
    CAPTURE(text.substr(0, 40));
    CHECK(refused_on(text) == "identity_file");
  }
  CHECK(refused_on(std::string(32, '[') + std::string(32, ']')) == "identity_file");  // 32 deep: not an object
}

TEST_CASE("identity file errors name the field in the decoding order", "[identity_file]") {
  // A duplicate key comes first, named by its path.
  CHECK(refused_on(R"({"kv": {"dtype": "fp16", "dtype": "bf16"}, "zz": 1})") == "kv.dtype");
  // Of several unknown keys, the first in byte order; before any member is read.
  CHECK(refused_on(R"({"zeta": 1, "alpha": 2, "model": 5})") == "alpha");
  CHECK(refused_on(R"({"policy": "none", "model": 5})") == "policy");
  // Then the members in table order, each object entirely when it is reached.
  CHECK(refused_on(R"({"tenant": 5, "model": {"x": 1}})") == "tenant");
  CHECK(refused_on(R"({"model": {"name": "m", "x": 1}, "kv": {"y": 1}})") == "model.x");
  CHECK(refused_on(R"({"tenant": "t"})") == "model");
  CHECK(refused_on(R"({"tenant": "t", "model": {"name": "m"}})") == "model.revision");
  std::string text = minimal;
  text.replace(text.find("\"block_size\": 16"), 16, "\"block_size\": -0");
  CHECK(refused_on(text) == "kv.block_size");
  text = minimal;
  text.replace(text.find("\"fp16\""), 6, "\"fp17\"");
  CHECK(refused_on(text) == "kv.dtype");
  text = minimal;
  text.replace(text.find("\"layout\": \"l\""), 13, "\"layout\": \"l\", \"quant\": {\"group_size\": 4294967296}");
  CHECK(refused_on(text) == "kv.quant.group_size");
  text = minimal;
  text.insert(text.size() - 1, R"(, "adapter": {"name": "a", "weights_fingerprint": "00", "weights_file": "x"})");
  CHECK(refused_on(text) == "adapter.weights_file");
  text = minimal;
  text.insert(text.size() - 1, R"(, "adapter": {"name": "a"})");
  CHECK(refused_on(text) == "adapter.weights_fingerprint");
  CHECK(refused_on(minimal).empty());
}

TEST_CASE("a conformance request's identity takes every member as optional", "[identity_file]") {
  const auto partial = [](const char* text) {
    return kvkey::identity_from_json(nlohmann::json::parse(text), IdentityJson::partial);
  };
  CHECK(partial("{}").identity == kvkey::Identity{});
  CHECK(partial(R"({"adapter": {}})").identity.adapter->weights_fingerprint == kvkey::Digest{});
  try {
    (void)partial(R"({"model": {"weights_file": "x"}})");  // no file keys in requests
    FAIL("accepted");
  } catch (const kvkey::input_error& e) {
    CHECK(e.field() == "model.weights_file");
  }
  try {
    (void)partial("[]");
    FAIL("accepted");
  } catch (const kvkey::input_error& e) {
    CHECK(e.field() == "identity");
  }
}

TEST_CASE("an identity file says a namespace is confidential (format v4)", "[identity_file][confidential]") {
  const kvkey::Identity id = kvkey_test::base_identity();
  kvkey::Policy p;
  p.confidential = true;
  const std::string text = kvkey::identity_file_json(id, p).dump();
  CHECK(text.rfind(R"({"confidential":true,"tenant")", 0) == 0);
  const kvkey::IdentityFile f = parse_identity_file(text);
  CHECK(f.identity == id);
  CHECK(f.policy.confidential);
  CHECK(!parse_identity_file(minimal).policy.confidential);
  const std::string with_false = R"({"confidential": false, )" + minimal.substr(1);
  CHECK(!parse_identity_file(with_false).policy.confidential);
  CHECK(refused_on(R"({"confidential": "yes", )" + minimal.substr(1)) == "confidential");
  // A plain namespace cannot be confidential: the tenant secret is missing, named.
  try {
    (void)kvkey::KeyNamespace<>(f.identity, f.policy);
    FAIL("a plain namespace took confidential");
  } catch (const kvkey::identity_error& e) {
    CHECK(e.field() == "confidential");
  }
}
