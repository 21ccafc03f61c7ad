// kvkey/fmt.hpp: describe() names every salient field the visitor lists and
// escapes what could garble a log line; identity_field_names() is the
// committed list tests/data/identity_fields.txt, which the CLI and Python tests
// check their printouts against.
#include <kvkey/fmt.hpp>
#include <kvkey/kvkey.hpp>

#include "support/fixtures.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstddef>
#include <fstream>
#include <string>
#include <vector>

namespace {

using Catch::Matchers::Contains;
using Catch::Matchers::EndsWith;

std::vector<std::string> committed_field_names() {
  std::ifstream in(std::string(KVKEY_TEST_DATA_DIR) + "/identity_fields.txt");
  REQUIRE(in);
  std::vector<std::string> names;
  for (std::string line; std::getline(in, line);) {
    if (!line.empty() && line[0] != '#') names.push_back(line);
  }
  return names;
}

// The keys of describe()'s space-separated "key=value" pairs (the identities
// used here have no spaces in their strings).
std::vector<std::string> described_keys(const std::string& line) {
  std::vector<std::string> keys;
  std::size_t begin = 0;
  while (begin <= line.size()) {
    const std::size_t end = std::min(line.find(' ', begin), line.size());
    const std::string pair = line.substr(begin, end - begin);
    keys.push_back(pair.substr(0, pair.find('=')));
    begin = end + 1;
  }
  return keys;
}

// What describe(id) must name: every field of the list, the adapter's members
// instead of "adapter" when there is one, then the shard.
std::vector<std::string> expected_keys(const kvkey::Identity& id) {
  std::vector<std::string> keys;
  for (const auto name : kvkey::identity_field_names()) {
    const bool member = name.substr(0, 8) == "adapter.";
    if (id.adapter ? name != "adapter" : !member) keys.emplace_back(name);
  }
  keys.emplace_back("shard.tp");
  keys.emplace_back("shard.pp");
  return keys;
}

}  // namespace

TEST_CASE("identity_field_names is the visitor's list, as committed", "[fmt][identity]") {
  const auto& names = kvkey::identity_field_names();
  CHECK(std::vector<std::string>(names.begin(), names.end()) == committed_field_names());
  // The encoder walks the same visitor: one encoded field per name.
  const auto fields = kvkey::encoded_fields(kvkey_test::rich_identity());
  REQUIRE(fields.size() == names.size());
  for (std::size_t i = 0; i < names.size(); ++i) CHECK(fields[i].path == names[i]);
}

TEST_CASE("describe names every salient field in encoding order, then the shard", "[fmt]") {
  for (const auto& id : {kvkey_test::base_identity(), kvkey_test::rich_identity()}) {
    CAPTURE(kvkey::describe(id));
    CHECK(described_keys(kvkey::describe(id)) == expected_keys(id));
    CHECK(fmt::format("{}", id) == kvkey::describe(id));
  }
}

TEST_CASE("describe prints each field's value", "[fmt]") {
  const std::string rich = kvkey::describe(kvkey_test::rich_identity());
  CHECK_THAT(rich, Contains("tenant=team-a model.name=Qwen/Qwen2.5-7B-Instruct "));
  CHECK_THAT(
      rich,
      Contains(" model.weights_epoch=7 model.weights_fingerprint=" + kvkey::fingerprint("weights v7").hex() + " "));
  CHECK_THAT(rich, Contains(" kv.dtype=int8 kv.quant.scheme=per_token_asym kv.quant.group_size=64 "
                            "kv.quant.scale_dtype=fp16 kv.quant.zero_point=true "));
  CHECK_THAT(rich, Contains(" kv.layout=lmdeploy.v1.layer_major kv.mla=false "));
  CHECK_THAT(rich, EndsWith(" adapter.name=sql-lora adapter.weights_fingerprint=" +
                            kvkey::fingerprint("sql-lora weights").hex() + " shard.tp=1/2 shard.pp=0/1"));
  const std::string base = kvkey::describe(kvkey_test::base_identity());
  CHECK_THAT(base, Contains(" model.weights_fingerprint=none "));
  CHECK_THAT(base, Contains(" kv.quant.scale_dtype=none "));
  CHECK_THAT(base, EndsWith(" adapter=none shard.tp=0/1 shard.pp=0/1"));
}

TEST_CASE("describe escapes control characters, bytes that are not UTF-8 and the backslash", "[fmt]") {
  kvkey::Identity id = kvkey_test::base_identity();
  id.model.name = std::string("a\nb\x1b[31m\\c\x7f") + "\xc3\xa9" + "\xe2\x82\xac" + "\xf0\x9f\x99\x82";
  id.kv.layout = std::string("\xff") + "\xc2\x85" + "\xc0\xaf" + "\xed\xa0\x80" + "\xe2\x82";
  const std::string d = kvkey::describe(id);
  // Valid UTF-8 (é, €, an emoji) is kept; everything else becomes \xHH.
  CHECK_THAT(d, Contains(" model.name=a\\x0ab\\x1b[31m\\x5cc\\x7f\xc3\xa9\xe2\x82\xac\xf0\x9f\x99\x82 "));
  CHECK_THAT(d, Contains(" kv.layout=\\xff\\xc2\\x85\\xc0\\xaf\\xed\\xa0\\x80\\xe2\\x82 "));
  for (const char c : d) {
    const auto b = static_cast<unsigned char>(c);
    CHECK((b >= 0x20 && b != 0x7f));
  }
}
