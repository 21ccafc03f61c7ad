// SPDX-License-Identifier: Apache-2.0
// kvkey::u64_projection and tests/vectors/u64-projection.json: the 64-bit
// projection of the block hashes of tests/vectors/format-v3.json, for
// implementations in other languages (docs/format.md, section 11).
#include <kvkey/digest.hpp>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <fstream>
#include <string>

namespace {

using nlohmann::json;

std::string vectors_dir() { return KVKEY_TEST_VECTORS_DIR; }

json read(const std::string& name) {
  std::ifstream file(vectors_dir() + "/" + name);
  REQUIRE(file.good());
  return json::parse(file);
}

// (case, namespace, index, block hash) for every block hash of format-v3.json.
json blocks_of(const json& v2) {
  json out = json::array();
  const auto add = [&out](const std::string& name, const char* ns, const json& blocks) {
    for (std::size_t i = 0; i < blocks.size(); ++i) {
      out.push_back({{"case", name}, {"namespace", ns}, {"block_index", i}, {"block", blocks[i]}});
    }
  };
  for (const json& c : v2.at("cases")) add(c.at("name"), "plain", c.at("blocks"));
  add(v2.at("keyed").at("case"), "keyed", v2.at("keyed").at("blocks"));
  // Digests that tell the byte order apart, and the extremes.
  for (const char* hex : {"0102030405060708a0a1a2a3a4a5a6a7a8a9aaabacadaeafb0b1b2b3b4b5b6b7",
                          "0000000000000000000000000000000000000000000000000000000000000000",
                          "ffffffffffffffff0000000000000000000000000000000000000000000000ff",
                          "8000000000000001ffffffffffffffffffffffffffffffffffffffffffffffff"}) {
    out.push_back({{"case", "edge"}, {"namespace", nullptr}, {"block_index", nullptr}, {"block", hex}});
  }
  return out;
}

}  // namespace

TEST_CASE("u64_projection: the first 8 bytes, big-endian", "[digest]") {
  const auto d = kvkey::Digest::from_hex("0102030405060708a0a1a2a3a4a5a6a7a8a9aaabacadaeafb0b1b2b3b4b5b6b7");
  CHECK(kvkey::u64_projection(d) == 0x0102030405060708u);
  CHECK(kvkey::u64_projection(kvkey::Digest{}) == 0);
  kvkey::Digest top;
  top[0] = 0x80;
  CHECK(kvkey::u64_projection(top) == 0x8000000000000000u);
  top[8] = 0xff;  // bytes after the eighth play no part
  CHECK(kvkey::u64_projection(top) == 0x8000000000000000u);
}

TEST_CASE("Generate tests/vectors/u64-projection.json", "[.golden-generate]") {
  json doc;
  doc["spec"] = "docs/format.md, section 11";
  doc["rule"] =
      "u64 = the first 8 bytes of the block hash read big-endian; u64_hex is its 16 hex digits, "
      "the first 16 hex digits of the block hash";
  doc["source"] = "the block hashes of tests/vectors/format-v3.json, then edge cases";
  doc["vectors"] = blocks_of(read("format-v3.json"));
  for (json& v : doc["vectors"]) {
    const std::uint64_t u = kvkey::u64_projection(kvkey::Digest::from_hex(v.at("block").get<std::string>()));
    v["u64"] = u;
    v["u64_hex"] = v.at("block").get<std::string>().substr(0, 16);
  }
  std::ofstream out(vectors_dir() + "/u64-projection.json");
  out << doc.dump(1) << '\n';
  REQUIRE(out.good());
}

TEST_CASE("tests/vectors/u64-projection.json: the projection of format-v3.json's block hashes", "[golden][vectors]") {
  const json doc = read("u64-projection.json");
  const json want = blocks_of(read("format-v3.json"));
  const json& vectors = doc.at("vectors");
  REQUIRE(vectors.size() == want.size());
  for (std::size_t i = 0; i < vectors.size(); ++i) {
    const json& v = vectors[i];
    CAPTURE(i, v.dump());
    for (const char* k : {"case", "namespace", "block_index", "block"}) CHECK(v.at(k) == want[i].at(k));
    const std::string block = v.at("block");
    const std::uint64_t u = v.at("u64");
    CHECK(kvkey::u64_projection(kvkey::Digest::from_hex(block)) == u);
    CHECK(v.at("u64_hex") == block.substr(0, 16));
    CHECK(std::stoull(block.substr(0, 16), nullptr, 16) == u);  // an independent reading of the rule
  }
}
