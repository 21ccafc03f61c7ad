// Golden vectors: the committed bytes of tests/data/golden/*.txt pin the
// identity encoding, root, chain, object hashes, store keys and envelopes of
// format version 1. Any change to those bytes fails here, visibly in review.
//
// The files were generated once by kvkey (the hidden test case
// "[.golden-generate]", run only after a deliberate, documented format change)
// and are checked two ways: kvkey must reproduce them, and so must the
// independent reference in tests/support/reference.hpp, which builds every message
// byte by byte from docs/format.md and hashes it with OpenSSL's EVP_Digest.
// For the minimal case the identity encoding and the first block message are
// also spelled out below as annotated literal bytes.
#include "support/reference.hpp"

#include <catch2/catch.hpp>

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace {

using kvkey_test::ByteVec;
using kvkey_test::to_hex;
using Entries = std::vector<std::pair<std::string, std::string>>;

struct GoldenCase {
  std::string name;
  std::string description;
  kvkey::Identity id;
  kvkey::Policy policy;
  kvkey::HashOptions options;
  std::uint64_t payload_size;
  kvkey::Slice slice;  // the slice the shard resolves to, worked out by hand
};

// The 200-token prompt of every case: t_i = (2654435761 * i + 12345) mod 2^32,
// spanning the whole u32 range. Block size 64: three full blocks, 8-token tail.
std::vector<std::uint32_t> golden_tokens() {
  std::vector<std::uint32_t> t(200);
  for (std::uint32_t i = 0; i < t.size(); ++i) t[i] = 2654435761u * i + 12345u;
  return t;
}

kvkey::Digest digest_of_bytes(std::uint8_t first, int step) {
  kvkey::Digest d;
  for (std::size_t i = 0; i < 32; ++i) d[i] = static_cast<std::uint8_t>(first + step * static_cast<int>(i));
  return d;
}

std::vector<GoldenCase> golden_cases() {
  std::vector<GoldenCase> cases;
  {
    GoldenCase c;
    c.name = "minimal";
    c.description = "smallest identity: one-letter strings, no optionals, quant none, 1 layer, 1 head, tp = pp = 1";
    c.id = kvkey_test::make_identity("t0", "m", "r", {kvkey::KvDtype::fp16, 64, 1, 1, 1, "l"});
    c.payload_size = 1 * 2 * 1 * 1 * 64 * 2;  // layers * (K,V) * heads * head_dim * tokens * fp16
    c.slice = {0, 1, 0, 1};
    cases.push_back(c);
  }
  {
    GoldenCase c;
    c.name = "sharded";
    c.description = "int8 per-token asymmetric quant with fingerprints and an adapter, tp 4 rank 2, pp 2 rank 1";
    c.id = kvkey_test::make_identity("team-a", "Qwen/Qwen2.5-7B-Instruct", "a09a35458c702b33eeacc393d103063234e8bc28",
                                     {kvkey::KvDtype::int8, 64, 28, 8, 128, "lmdeploy.v1.layer_major"});
    c.id.model.weights_epoch = 3;
    c.id.model.weights_fingerprint = digest_of_bytes(0x00, 1);  // 00 01 02 .. 1f
    c.id.kv.quant.scheme = "per_token_asym";
    c.id.kv.quant.group_size = 128;
    c.id.kv.quant.scale_dtype = kvkey::KvDtype::bf16;
    c.id.kv.quant.zero_point = true;
    c.id.kv.quant.scales_fingerprint = digest_of_bytes(0xff, -1);  // ff fe fd .. e0
    c.id.shard = {4, 2, 2, 1};
    c.id.adapter = kvkey::Adapter("sql-lora@v2", digest_of_bytes(0xa5, 0));  // a5 x 32
    c.payload_size = 14 * 2 * 2 * 128 * 64 * 1;
    c.slice = {4, 6, 14, 28};  // heads [2*8/4, 3*8/4), layers [1*28/2, 2*28/2)
    cases.push_back(c);
  }
  {
    GoldenCase c;
    c.name = "salted";
    c.description = "single-tenant MLA model, tp 2 rank 1, with a request salt and multimodal extras";
    c.id = kvkey_test::make_identity("", "deepseek-ai/DeepSeek-V2-Lite", "main@604d5664",
                                     {kvkey::KvDtype::bf16, 64, 27, 1, 576, "sglang.mla.v1"});
    c.id.model.weights_epoch = 12;
    c.id.kv.mla = true;
    c.id.shard = {2, 1, 1, 0};
    c.policy = kvkey::single_tenant;
    c.options.salt = "request-salt-7";
    // Given out of order: the chain sorts them by (begin, end, key).
    c.options.extras = {
        {130, 140, "img:c"},   // block 2
        {60, 70, "img:b"},     // blocks 0 and 1
        {60, 70, "img:a"},     // same range, sorts before "img:b"
        {10, 20, "img:a"},     // block 0
        {500, 600, "later"},   // beyond the prompt: enters no block
    };
    c.payload_size = 27 * 1 * 576 * 64 * 2;
    c.slice = {0, 1, 0, 27};  // MLA: the latent cache is whole on every rank
    cases.push_back(c);
  }
  return cases;
}

std::string golden_path(const GoldenCase& c) {
  return std::string(KVKEY_TEST_DATA_DIR) + "/golden/" + c.name + ".txt";
}

// What kvkey produces for a case, in file order.
Entries with_kvkey(const GoldenCase& c) {
  const kvkey::KeyNamespace<> ns(c.id, c.policy);
  Entries e;
  e.emplace_back("encoding", to_hex(ns.encoding()));
  e.emplace_back("root", ns.root().hex());
  e.emplace_back("first_parent", ns.first_parent(c.options.salt).hex());
  const auto toks = golden_tokens();
  const auto blocks = ns.block_hashes(toks, c.options);
  for (std::size_t i = 0; i < blocks.size(); ++i) e.emplace_back("block." + std::to_string(i), blocks[i].hex());
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    e.emplace_back("object." + std::to_string(i), ns.object_hash(blocks[i]).hex());
  }
  for (std::size_t i = 0; i < blocks.size(); ++i) e.emplace_back("key." + std::to_string(i), ns.store_key(blocks[i]));
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    e.emplace_back("envelope." + std::to_string(i), to_hex(ns.seal(blocks[i], c.payload_size)));
  }
  return e;
}

// The same entries from the independent reference.
Entries with_reference(const GoldenCase& c) {
  namespace ref = kvkey_test::ref;
  kvkey::Identity id = c.id;
  if (c.policy.tenant == kvkey::TenantPolicy::single_tenant) id.tenant = "_single";
  const ByteVec encoding = ref::identity_encoding(id);
  const ByteVec root = ref::sha256(encoding);
  const auto blocks = ref::block_hashes(root, golden_tokens(), c.id.kv.block_size, c.options.salt, c.options.extras);
  Entries e;
  e.emplace_back("encoding", to_hex(encoding));
  e.emplace_back("root", to_hex(root));
  e.emplace_back("first_parent", to_hex(ref::first_parent(root, c.options.salt)));
  for (std::size_t i = 0; i < blocks.size(); ++i) e.emplace_back("block." + std::to_string(i), to_hex(blocks[i]));
  std::vector<ByteVec> objects;
  for (const auto& b : blocks) objects.push_back(ref::sha256(ref::object_message(b, c.slice)));
  for (std::size_t i = 0; i < blocks.size(); ++i) e.emplace_back("object." + std::to_string(i), to_hex(objects[i]));
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    e.emplace_back("key." + std::to_string(i),
                   ref::store_key(id.tenant, id.model.name, id.model.weights_epoch, objects[i]));
  }
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    e.emplace_back("envelope." + std::to_string(i), to_hex(ref::envelope(encoding, blocks[i], c.payload_size, c.slice)));
  }
  return e;
}

// "name value" lines; '#' starts a comment line.
Entries read_golden(const std::string& path) {
  std::ifstream in(path);
  REQUIRE(in.good());
  Entries e;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    const auto sp = line.find(' ');
    REQUIRE(sp != std::string::npos);
    e.emplace_back(line.substr(0, sp), line.substr(sp + 1));
  }
  return e;
}

void compare(const Entries& got, const Entries& want) {
  CHECK(got.size() == want.size());
  for (std::size_t i = 0; i < got.size() && i < want.size(); ++i) {
    CAPTURE(i, want[i].first);
    CHECK(got[i].first == want[i].first);
    CHECK(got[i].second == want[i].second);
  }
}

}  // namespace

TEST_CASE("Golden vectors: kvkey reproduces the committed bytes", "[golden]") {
  for (const auto& c : golden_cases()) {
    CAPTURE(c.name);
    const Entries file = read_golden(golden_path(c));
    REQUIRE(file.size() == 3 + 4 * 3);  // encoding, root, first parent; 3 blocks x (hash, object, key, envelope)
    compare(with_kvkey(c), file);
  }
}

TEST_CASE("Golden vectors: the independent reference reproduces the committed bytes", "[golden]") {
  for (const auto& c : golden_cases()) {
    CAPTURE(c.name);
    compare(with_reference(c), read_golden(golden_path(c)));
  }
}

TEST_CASE("Golden vectors: committed envelopes still verify and decode", "[golden]") {
  for (const auto& c : golden_cases()) {
    CAPTURE(c.name);
    const kvkey::KeyNamespace<> ns(c.id, c.policy);
    CHECK(ns.slice() == c.slice);
    const Entries file = read_golden(golden_path(c));
    for (std::size_t i = 0; i < 3; ++i) {
      CAPTURE(i);
      std::string hex;
      std::string block_hex;
      for (const auto& [name, value] : file) {
        if (name == "envelope." + std::to_string(i)) hex = value;
        if (name == "block." + std::to_string(i)) block_hex = value;
      }
      const ByteVec header = kvkey_test::bytes_from_hex(hex);
      REQUIRE(header.size() == kvkey::envelope_size);
      const auto block = kvkey::Digest::from_hex(block_hex);
      CHECK(ns.verify(header.data(), header.size(), block, c.payload_size).ok());
      const auto contents = kvkey::decode_envelope(header.data(), header.size());
      REQUIRE(contents.has_value());
      CHECK(contents->identity.tenant == ns.identity().tenant);
      CHECK(kvkey_test::same_salient_fields(contents->identity, ns.identity()));
      CHECK(contents->slice == c.slice);
      CHECK(contents->block_hash == block);
      CHECK(contents->payload_size == c.payload_size);
    }
  }
}

TEST_CASE("Golden vectors: the minimal case spelled out byte by byte", "[golden]") {
  const GoldenCase c = golden_cases().at(0);
  REQUIRE(c.name == "minimal");
  // docs/format.md, "Identity encoding", for the minimal identity.
  const std::string encoding_hex = std::string() +
                                   "6b766b65792e6964"    // "kvkey.id"
                                   "0100"                // format version 1, u16le
                                   "02000000" "7430"     // tenant: len 2, "t0"
                                   "01000000" "6d"       // model.name: len 1, "m"
                                   "01000000" "72"       // model.revision: len 1, "r"
                                   "0000000000000000"    // model.weights_epoch 0, u64le
                                   "00"                  // model.weights_fingerprint absent
                                   "02"                  // kv.dtype fp16 = 2
                                   "04000000" "6e6f6e65" // kv.quant.scheme: len 4, "none"
                                   "00000000"            // kv.quant.group_size 0
                                   "00"                  // kv.quant.scale_dtype absent
                                   "00"                  // kv.quant.zero_point false
                                   "00"                  // kv.quant.scales_fingerprint absent
                                   "40000000"            // kv.block_size 64
                                   "01000000"            // kv.num_layers 1
                                   "01000000"            // kv.num_kv_heads 1
                                   "01000000"            // kv.head_dim 1
                                   "01000000" "6c"       // kv.layout: len 1, "l"
                                   "00"                  // kv.mla false
                                   "00";                 // adapter absent
  const kvkey::KeyNamespace<> ns(c.id, c.policy);
  CHECK(to_hex(ns.encoding()) == encoding_hex);
  const ByteVec root = kvkey_test::ref::sha256(kvkey_test::bytes_from_hex(encoding_hex));
  CHECK(ns.root().hex() == to_hex(root));

  // Block 0: 'B' || root || 64 tokens as u32le || u32le 0 (no extras).
  const auto toks = golden_tokens();
  std::string block0_hex = "42" + to_hex(root);
  for (std::size_t i = 0; i < 64; ++i) {
    const std::uint32_t t = toks[i];
    char le[9];
    std::snprintf(le, sizeof le, "%02x%02x%02x%02x", t & 0xff, (t >> 8) & 0xff, (t >> 16) & 0xff, t >> 24);
    block0_hex += le;
  }
  block0_hex += "00000000";
  CHECK(block0_hex.size() == 2 * (1 + 32 + 4 * 64 + 4));
  CHECK(block0_hex.substr(66, 8) == "39300000");  // t_0 = 12345 = 0x3039
  const ByteVec block0 = kvkey_test::ref::sha256(kvkey_test::bytes_from_hex(block0_hex));
  const auto blocks = ns.block_hashes(toks);
  REQUIRE(blocks.size() == 3);
  CHECK(blocks[0].hex() == to_hex(block0));

  // Object of block 0: 'O' || block hash || u32le 0, 1, 0, 1 (heads [0,1), layers [0,1)).
  const ByteVec object0 = kvkey_test::ref::sha256(
      kvkey_test::bytes_from_hex("4f" + to_hex(block0) + "00000000" "01000000" "00000000" "01000000"));
  CHECK(ns.object_hash(blocks[0]).hex() == to_hex(object0));
  CHECK(ns.store_key(blocks[0]) == "kvk1/t0/m/e0/" + to_hex(object0));

  // Envelope of block 0: fixed part, then the encoding at 72, zeros to 1024.
  CHECK(encoding_hex.size() == 2 * 74);
  std::string envelope_hex = "4b564b4559454e56";               // "KVKEYENV"
  envelope_hex += "0100";                                       // version 1, u16le
  envelope_hex += "0004";                                       // size 1024, u16le
  envelope_hex += "4a000000";                                   // identity length 74, u32le
  envelope_hex += to_hex(block0);                               // block hash
  envelope_hex += "0001000000000000";                           // payload size 256, u64le
  envelope_hex += "00000000" "01000000" "00000000" "01000000";  // slice: heads [0,1), layers [0,1)
  envelope_hex += encoding_hex;                                 // at offset 72
  envelope_hex.resize(2 * 1024, '0');
  CHECK(to_hex(ns.seal(blocks[0], c.payload_size)) == envelope_hex);
}

// Writes tests/data/golden/*.txt from kvkey. Hidden: run it by name only after a
// deliberate format change, then review the diff.
TEST_CASE("Generate the golden vector files", "[.golden-generate]") {
  const auto toks = golden_tokens();
  for (const auto& c : golden_cases()) {
    std::ostringstream out;
    out << "# kvkey golden vectors, format version " << kvkey::format_version << ": " << c.name << "\n"
        << "# " << c.description << "\n"
        << "# Inputs: tests/unit/golden_test.cpp, golden_cases(); prompt t_i = (2654435761 * i + 12345) mod 2^32,\n"
        << "# i = 0..199, block size " << c.id.kv.block_size << ", payload size " << c.payload_size
        << ", salt \"" << c.options.salt << "\", " << c.options.extras.size() << " extra keys.\n"
        << "# Generated by kvkey_tests \"[.golden-generate]\"; checked against an independent reference.\n";
    for (const auto& [name, value] : with_kvkey(c)) out << name << ' ' << value << '\n';
    std::ofstream file(golden_path(c));
    file << out.str();
    REQUIRE(file.good());
  }
}
