// Golden vectors: the committed bytes of tests/vectors/format-v4.json, the one
// source of the vectors, pin the identity encoding, root, chain, object hashes,
// store keys and envelopes of format version 4 (confidential values and a
// shared scope's transition included). Any change to those bytes fails
// here, visibly in review.
//
// The file was generated once by kvkey (the hidden test case
// "[.golden-generate]", run only after a deliberate, documented format change)
// and is checked two ways: kvkey must reproduce them, and so must the
// independent reference in tests/support/reference.hpp, which builds every message
// byte by byte from docs/format.md and hashes it with OpenSSL's EVP_Digest.
// For the minimal case the identity encoding and the first block message are
// also spelled out below as annotated literal bytes.
#include "support/reference.hpp"

#include "kvkey/scope.hpp"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <string_view>
#include <type_traits>
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

// The payload stored with block i of a case: byte j = (j + 31 * i) mod 251.
ByteVec golden_payload(std::size_t block, std::uint64_t size) {
  ByteVec p(static_cast<std::size_t>(size));
  for (std::size_t j = 0; j < p.size(); ++j) p[j] = static_cast<std::uint8_t>((j + 31 * block) % 251);
  return p;
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
        {130, 140, "img:c"},  // block 2
        {60, 70, "img:b"},    // blocks 0 and 1
        {60, 70, "img:a"},    // same range, sorts before "img:b"
        {10, 20, "img:a"},    // block 0
        {500, 600, "later"},  // beyond the prompt: enters no block
    };
    c.payload_size = 27 * 1 * 576 * 64 * 2;
    c.slice = {0, 1, 0, 27};  // MLA: the latent cache is whole on every rank
    cases.push_back(c);
  }
  return cases;
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
    const ByteVec payload = golden_payload(i, c.payload_size);
    e.emplace_back("envelope." + std::to_string(i),
                   to_hex(ns.seal(blocks[i], kvkey::Payload(payload.data(), payload.size()))));
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
                   ref::store_key(id.tenant, "p", id.model.name, id.model.weights_epoch, objects[i]));
  }
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    ref::Integrity in;  // digest zero: the header' the digest covers
    in.digest = ref::plain_digest(golden_payload(i, c.payload_size),
                                  ref::envelope(encoding, blocks[i], c.payload_size, c.slice, in));
    e.emplace_back("envelope." + std::to_string(i),
                   to_hex(ref::envelope(encoding, blocks[i], c.payload_size, c.slice, in)));
  }
  return e;
}

// The committed entries of a case, from tests/vectors/format-v4.json (defined below).
Entries golden_entries(const GoldenCase& c);

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
    const Entries file = golden_entries(c);
    REQUIRE(file.size() == 3 + 4 * 3);  // encoding, root, first parent; 3 blocks x (hash, object, key, envelope)
    compare(with_kvkey(c), file);
  }
}

TEST_CASE("Golden vectors: the independent reference reproduces the committed bytes", "[golden]") {
  for (const auto& c : golden_cases()) {
    CAPTURE(c.name);
    compare(with_reference(c), golden_entries(c));
  }
}

TEST_CASE("Golden vectors: committed envelopes still verify and decode", "[golden]") {
  for (const auto& c : golden_cases()) {
    CAPTURE(c.name);
    const kvkey::KeyNamespace<> ns(c.id, c.policy);
    CHECK(ns.slice() == c.slice);
    const Entries file = golden_entries(c);
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
      const ByteVec payload = golden_payload(i, c.payload_size);
      CHECK(ns.verify(header.data(), header.size(), block, kvkey::Payload(payload.data(), payload.size())).ok());
      const auto contents = kvkey::decode_envelope(header.data(), header.size());
      REQUIRE(contents.has_value());
      CHECK(contents->identity.tenant == ns.identity().tenant);
      CHECK(kvkey_test::same_salient_fields(contents->identity, ns.identity()));
      CHECK(contents->slice == c.slice);
      CHECK(contents->block_hash == block);
      CHECK(contents->payload_size == c.payload_size);
      CHECK(contents->integrity == kvkey::IntegrityMode::xxh3_128);
      CHECK(!contents->secret_id.has_value());
      // Since format v3: the digest covers the header too, so it is not the payload's own XXH3-128.
      CHECK(to_hex(contents->payload_digest) == to_hex(kvkey_test::ref::plain_digest(payload, header)));
      CHECK(contents->payload_digest != kvkey::xxh3_128_digest(kvkey::Payload(payload.data(), payload.size())));
    }
  }
}

TEST_CASE("Golden vectors: the minimal case spelled out byte by byte", "[golden]") {
  const GoldenCase c = golden_cases().at(0);
  REQUIRE(c.name == "minimal");
  // docs/format.md, "Identity encoding", for the minimal identity.
  const std::string encoding_hex = std::string() +
                                   "6b766b65792e6964"  // "kvkey.id"
                                   "0400"              // format version 4, u16le
                                   "02000000"
                                   "7430"  // tenant: len 2, "t0"
                                   "01000000"
                                   "6d"  // model.name: len 1, "m"
                                   "01000000"
                                   "72"                // model.revision: len 1, "r"
                                   "0000000000000000"  // model.weights_epoch 0, u64le
                                   "00"                // model.weights_fingerprint absent
                                   "00"                // model.positional_fingerprint absent
                                   "02"                // kv.dtype fp16 = 2
                                   "04000000"
                                   "6e6f6e65"  // kv.quant.scheme: len 4, "none"
                                   "00000000"  // kv.quant.group_size 0
                                   "00"        // kv.quant.scale_dtype absent
                                   "00"        // kv.quant.zero_point false
                                   "00"        // kv.quant.scales_fingerprint absent
                                   "40000000"  // kv.block_size 64
                                   "01000000"  // kv.num_layers 1
                                   "01000000"  // kv.num_kv_heads 1
                                   "01000000"  // kv.head_dim 1
                                   "01000000"
                                   "6c"   // kv.layout: len 1, "l"
                                   "00"   // kv.mla false
                                   "00";  // adapter absent
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
  const ByteVec object0 = kvkey_test::ref::sha256(kvkey_test::bytes_from_hex("4f" + to_hex(block0) +
                                                                             "00000000"
                                                                             "01000000"
                                                                             "00000000"
                                                                             "01000000"));
  CHECK(ns.object_hash(blocks[0]).hex() == to_hex(object0));
  CHECK(ns.store_key(blocks[0]) == "kvk4/t0/p/m/e0/" + to_hex(object0));

  // Envelope of block 0: fixed part, then the encoding at 120, zeros to 1024.
  CHECK(encoding_hex.size() == 2 * 75);
  std::string envelope_hex = "4b564b4559454e56";  // "KVKEYENV"
  envelope_hex += "0400";                         // version 4, u16le
  envelope_hex += "0004";                         // size 1024, u16le
  envelope_hex += "4b000000";                     // identity length 75, u32le
  envelope_hex += to_hex(block0);                 // block hash
  envelope_hex += "0001000000000000";             // payload size 256, u64le
  envelope_hex +=
      "00000000"
      "01000000"
      "00000000"
      "01000000";                                     // slice: heads [0,1), layers [0,1)
  envelope_hex += "01";                               // namespace kind: plain
  envelope_hex += "01";                               // integrity mode: xxh3_128
  envelope_hex += "000000000000";                     // reserved
  envelope_hex += std::string(32, '0');               // nonce (keyed only)
  const std::size_t digest_at = envelope_hex.size();  // offset 96
  envelope_hex += std::string(32, '0');               // payload digest, zero for now
  envelope_hex += std::string(16, '0');               // secret id (keyed only)
  envelope_hex += encoding_hex;                       // at offset 120
  envelope_hex.resize(2 * 1024, '0');
  CHECK(digest_at == 2 * 96);
  const ByteVec payload0 = golden_payload(0, c.payload_size);  // 256 bytes: 00 01 .. fa, then 00 .. 04
  // The digest: XXH3-128 of payload || header', header' = this header with the digest zero.
  ByteVec message = payload0;
  const ByteVec header0 = kvkey_test::bytes_from_hex(envelope_hex);
  message.insert(message.end(), header0.begin(), header0.end());
  envelope_hex.replace(digest_at, 32, to_hex(kvkey_test::ref::xxh3_128(message)));
  CHECK(to_hex(ns.seal(blocks[0], kvkey::Payload(payload0.data(), payload0.size()))) == envelope_hex);
}

// ---- tests/vectors/format-v4.json: the vectors, machine-readable --------------------
//
// Identities, roots, block hashes, object hashes, keys, payload digests and
// envelopes of the golden cases, a keyed namespace's (tenant secret included)
// and payload digests, for kvkey's C++, Python and CLI tests and for
// implementations in other languages. Written by "[.golden-generate]".

namespace {

using nlohmann::json;

std::string vectors_path() { return std::string(KVKEY_TEST_VECTORS_DIR) + "/format-v4.json"; }

// The identity's fields under their visit_identity_fields paths.
json identity_json(const kvkey::Identity& id) {
  json j = json::object();
  const auto digest = [](const std::optional<kvkey::Digest>& d) { return d ? json(d->hex()) : json(nullptr); };
  kvkey::visit_identity_fields(id, [&](std::string_view path, const auto& v) {
    using T = std::decay_t<decltype(v)>;
    const std::string key(path);
    if constexpr (std::is_same_v<T, kvkey::KvDtype>) {
      j[key] = std::string(kvkey::to_string(v));
    } else if constexpr (std::is_same_v<T, std::optional<kvkey::KvDtype>>) {
      j[key] = v ? json(std::string(kvkey::to_string(*v))) : json(nullptr);
    } else if constexpr (std::is_same_v<T, std::optional<kvkey::Digest>>) {
      j[key] = digest(v);
    } else if constexpr (std::is_same_v<T, std::optional<kvkey::Adapter>>) {
      j[key] = v ? json{{"name", v->name}, {"weights_fingerprint", v->weights_fingerprint.hex()}} : json(nullptr);
    } else {
      j[key] = v;
    }
  });
  return j;
}

kvkey::Identity identity_from_json(const json& j) {
  kvkey::Identity id;
  kvkey::visit_identity_fields(id, [&](std::string_view path, auto& v) {
    using T = std::decay_t<decltype(v)>;
    const json& x = j.at(std::string(path));
    if constexpr (std::is_same_v<T, kvkey::KvDtype>) {
      v = kvkey::kv_dtype_from_string(x.get<std::string>()).value();
    } else if constexpr (std::is_same_v<T, std::optional<kvkey::KvDtype>>) {
      if (!x.is_null()) v = kvkey::kv_dtype_from_string(x.get<std::string>()).value();
    } else if constexpr (std::is_same_v<T, std::optional<kvkey::Digest>>) {
      if (!x.is_null()) v = kvkey::Digest::from_hex(x.get<std::string>());
    } else if constexpr (std::is_same_v<T, std::optional<kvkey::Adapter>>) {
      if (!x.is_null())
        v = kvkey::Adapter(x.at("name"), kvkey::Digest::from_hex(x.at("weights_fingerprint").get<std::string>()));
    } else {
      v = x.get<T>();
    }
  });
  return id;
}

json entries_json(const Entries& entries) {
  json j = json::object();
  for (const auto& [name, value] : entries) {
    const auto dot = name.find('.');
    if (dot == std::string::npos) {
      j[name] = value;
    } else {
      j[name.substr(0, dot) + "s"].push_back(value);  // block.0 -> blocks[0]
    }
  }
  return j;
}

Entries entries_from_json(const json& j) {
  Entries e;
  for (const char* name : {"encoding", "root", "first_parent"}) e.emplace_back(name, j.at(name).get<std::string>());
  for (const char* name : {"block", "object", "key", "envelope"}) {
    const json& list = j.at(std::string(name) + "s");
    for (std::size_t i = 0; i < list.size(); ++i)
      e.emplace_back(name + ("." + std::to_string(i)), list[i].get<std::string>());
  }
  return e;
}

const std::string keyed_secret = "kvkey format-v2 test vector key!";  // 32 bytes (kept from v2)
const std::string other_secret = "kvkey format-v3 rotated key, 32!";  // 32 bytes: the rotation case

// The splice of docs/security.md: object B's header with block A's hash at
// offset 16, followed by B's payload, read as block A (A = 0, B = 1 of the
// minimal case). Format v2 accepted it; v3's digest covers the header.
struct Splice {
  ByteVec header;
  ByteVec payload;
};
Splice make_splice(const kvkey::KeyNamespace<>& ns, const std::vector<kvkey::Digest>& blocks,
                   std::uint64_t payload_size) {
  const ByteVec pb = golden_payload(1, payload_size);
  const kvkey::Envelope hb = ns.seal(blocks[1], kvkey::Payload(pb.data(), pb.size()));
  Splice sp{ByteVec(hb.begin(), hb.end()), pb};
  std::copy(blocks[0].data(), blocks[0].data() + kvkey::Digest::size_bytes,
            sp.header.begin() + kvkey::envelope_layout::block_hash);
  return sp;
}

// Format v4's confidential case: the minimal identity, keyed under
// keyed_secret and confidential.
kvkey::Policy confidential_policy(kvkey::Policy p) {
  p.confidential = true;
  return p;
}

// Format v4's shared scope case: scope "sys" (plain) over the minimal
// identity, its first 64 tokens (block 0) shared; tenants t0 and t1 (plain).
constexpr std::size_t scope_tokens = 64;
kvkey::Identity with_tenant(kvkey::Identity id, const std::string& t) {
  id.tenant = t;
  return id;
}

json read_vectors() {
  std::ifstream file(vectors_path());
  REQUIRE(file.good());
  return json::parse(file);
}

}  // namespace

TEST_CASE("Generate tests/vectors/format-v4.json", "[.golden-generate]") {
  json doc;
  doc["format_version"] = kvkey::format_version;
  doc["spec"] = "docs/format.md";
  doc["tokens"] = {{"rule", "t_i = (2654435761 * i + 12345) mod 2^32, i = 0..199"}, {"values", golden_tokens()}};
  doc["payload_rule"] = "the payload of block i is payload_size bytes, byte j = (j + 31 * i) mod 251";
  for (const auto& c : golden_cases()) {
    json jc = entries_json(with_kvkey(c));
    jc["name"] = c.name;
    jc["description"] = c.description;
    jc["namespace"] = "plain";
    jc["tenant_policy"] = c.policy.tenant == kvkey::TenantPolicy::single_tenant ? "single_tenant" : "required";
    jc["identity"] = identity_json(c.id);
    jc["shard"] = {{"tp_size", c.id.shard.tp_size},
                   {"tp_rank", c.id.shard.tp_rank},
                   {"pp_size", c.id.shard.pp_size},
                   {"pp_rank", c.id.shard.pp_rank}};
    jc["slice"] = {c.slice.kv_head_begin, c.slice.kv_head_end, c.slice.layer_begin, c.slice.layer_end};
    jc["salt"] = c.options.salt;
    jc["extras"] = json::array();
    for (const auto& x : c.options.extras) {
      jc["extras"].push_back({{"token_begin", x.token_begin}, {"token_end", x.token_end}, {"key", x.key}});
    }
    jc["payload_size"] = c.payload_size;
    for (const json& env : jc["envelopes"]) jc["payload_digests"].push_back(env.get<std::string>().substr(192, 32));
    doc["cases"].push_back(jc);
  }
  doc["digest_rule"] =
      "payload_digests[i] is the digest stored at offset 96 of envelopes[i]: XXH3-128 of payload || header', "
      "header' = the envelope with those 16 bytes zero; payloads[].xxh3_128 is XXH3-128 of the bytes alone";
  {  // The minimal case in a keyed namespace. Its envelopes carry random nonces.
    const GoldenCase c = golden_cases().at(0);
    const kvkey::KeyNamespace<kvkey::HmacSha256> ns(c.id, kvkey::TenantSecret(keyed_secret), c.policy);
    const auto blocks = ns.block_hashes(golden_tokens());
    json k;
    k["case"] = c.name;
    k["namespace"] = "keyed";
    k["secret_hex"] = to_hex(reinterpret_cast<const std::uint8_t*>(keyed_secret.data()), keyed_secret.size());
    k["root"] = ns.root().hex();
    k["secret_id"] = ns.secret_id()->hex();
    k["secret_prefix"] = ns.secret_prefix();
    k["key_prefix"] = ns.key_prefix();
    {
      const kvkey::KeyNamespace<kvkey::HmacSha256> rotated(c.id, kvkey::TenantSecret(other_secret), c.policy);
      k["rotated"] = {
          {"secret_hex", to_hex(reinterpret_cast<const std::uint8_t*>(other_secret.data()), other_secret.size())},
          {"secret_id", rotated.secret_id()->hex()},
          {"key_prefix", rotated.key_prefix()}};
    }
    for (std::size_t i = 0; i < blocks.size(); ++i) {
      const ByteVec p = golden_payload(i, c.payload_size);
      k["blocks"].push_back(blocks[i].hex());
      k["keys"].push_back(ns.store_key(blocks[i]));
      k["envelopes"].push_back(to_hex(ns.seal(blocks[i], kvkey::Payload(p.data(), p.size()))));
    }
    doc["keyed"] = k;
  }
  {
    const GoldenCase c = golden_cases().at(0);
    const kvkey::KeyNamespace<> ns(c.id, c.policy);
    const auto blocks = ns.block_hashes(golden_tokens());
    const Splice sp = make_splice(ns, blocks, c.payload_size);
    const kvkey::Verdict v =
        ns.verify(sp.header.data(), sp.header.size(), blocks[0], kvkey::Payload(sp.payload.data(), sp.payload.size()));
    REQUIRE(!v.ok());
    doc["splice"] = {
        {"case", c.name},
        {"description",
         "object B's header (block 1) with block A's hash (block 0) at offset 16, then B's payload, read as block "
         "A: a mix of two objects' fields; format v2 accepted it, v3 must not"},
        {"read_as_block", 0},
        {"payload_block", 1},
        {"header_hex", to_hex(sp.header)},
        {"verdict", {{"ok", false}, {"reason", std::string(kvkey::to_string(v.reason))}, {"field", v.field}}}};
  }
  {  // Confidential values: random nonces, so recorded whole, with one rejected of each kind.
    const GoldenCase c = golden_cases().at(0);
    const kvkey::KeyNamespace<kvkey::HmacSha256> ns(c.id, kvkey::TenantSecret(keyed_secret),
                                                    confidential_policy(c.policy));
    const auto blocks = ns.block_hashes(golden_tokens());
    json k;
    k["case"] = c.name;
    k["namespace"] = "confidential";
    k["secret_hex"] = to_hex(reinterpret_cast<const std::uint8_t*>(keyed_secret.data()), keyed_secret.size());
    k["hkdf"] = {{"salt", "kvkey v4 confidential"}, {"info", "'C' || root || nonce[0..4]"}, {"length", 32}};
    k["root"] = ns.root().hex();
    k["secret_prefix"] = ns.secret_prefix();
    k["key_prefix"] = ns.key_prefix();
    for (std::size_t i = 0; i < blocks.size(); ++i) {
      const ByteVec p = golden_payload(i, c.payload_size);
      const kvkey::Bytes v = ns.seal_value(blocks[i], kvkey::Payload(p.data(), p.size()));
      const ByteVec value(v.begin(), v.end());
      k["blocks"].push_back(blocks[i].hex());
      k["keys"].push_back(ns.store_key(blocks[i]));
      k["values"].push_back(to_hex(value));
      k["derived_keys"].push_back(to_hex(kvkey_test::ref::confidential_key(
          ByteVec(keyed_secret.begin(), keyed_secret.end()), ByteVec(ns.root().data(), ns.root().data() + 32),
          value.data() + kvkey::envelope_layout::nonce)));
    }
    // Rejected: value 0 with one byte flipped in each part, and read under the rotated secret.
    const ByteVec v0 = kvkey_test::bytes_from_hex(k["values"][0].get<std::string>());
    const std::pair<const char*, std::size_t> flips[] = {{"header (block hash)", 16},
                                                         {"nonce (key selector)", 80},
                                                         {"nonce (GCM nonce)", 90},
                                                         {"tag", 100},
                                                         {"ciphertext", 1024 + 17}};
    for (const auto& [what, at] : flips) {
      ByteVec bad = v0;
      bad[at] ^= 0x01;
      const kvkey::OpenedValue o = ns.open_value(bad.data(), bad.size(), blocks[0]);
      REQUIRE(!o.ok());
      k["rejected"].push_back(
          {{"what", std::string("value 0 with a flipped byte in the ") + what},
           {"offset", at},
           {"read_as_block", 0},
           {"value_hex", to_hex(bad)},
           {"verdict", {{"reason", std::string(kvkey::to_string(o.verdict.reason))}, {"field", o.verdict.field}}}});
    }
    {
      const kvkey::KeyNamespace<kvkey::HmacSha256> rotated(c.id, kvkey::TenantSecret(other_secret),
                                                           confidential_policy(c.policy));
      const kvkey::OpenedValue o = rotated.open_value(v0.data(), v0.size(), blocks[0]);
      REQUIRE(!o.ok());
      k["rejected"].push_back(
          {{"what", "value 0 read by the tenant's namespace under the rotated secret (secret_hex of \"keyed\")"},
           {"read_as_block", 0},
           {"reader_secret_hex",
            to_hex(reinterpret_cast<const std::uint8_t*>(other_secret.data()), other_secret.size())},
           {"value_hex", to_hex(v0)},
           {"verdict", {{"reason", std::string(kvkey::to_string(o.verdict.reason))}, {"field", o.verdict.field}}}});
    }
    doc["confidential"] = k;
  }
  {  // A shared scope's transition: tenants t0 and t1 after the same scope block.
    const GoldenCase c = golden_cases().at(0);
    const kvkey::SharedScope<> scope("sys", c.id, kvkey::ScopeGrants{{"t1"}, {"t0"}}, c.policy);
    json s;
    s["case"] = c.name;
    s["scope"] = {{"name", "sys"},
                  {"tenant", scope.ns().identity().tenant},
                  {"namespace", "plain"},
                  {"readers", {"t1"}},
                  {"publishers", {"t0"}},
                  {"encoding", to_hex(scope.ns().encoding())},
                  {"root", scope.ns().root().hex()},
                  {"key_prefix", scope.ns().key_prefix()}};
    s["scope_tokens"] = scope_tokens;
    s["transition_rule"] = "parent_k = H_t('T' || p_t || hash_{k-1}), p_t the tenant's root (no salt)";
    for (const std::string t : {"t0", "t1"}) {
      const kvkey::KeyNamespace<> tenant(with_tenant(c.id, t), c.policy);
      const auto blocks = kvkey::scoped_block_hashes(scope.ns(), tenant, golden_tokens(), scope_tokens);
      json jt;
      jt["tenant"] = t;
      jt["root"] = tenant.root().hex();
      jt["transition_parent"] = kvkey::scope_transition(tenant, blocks[0]).hex();
      for (std::size_t i = 0; i < blocks.size(); ++i) {
        jt["blocks"].push_back(blocks[i].hex());
        jt["keys"].push_back(i < scope_tokens / 64 ? scope.ns().store_key(blocks[i]) : tenant.store_key(blocks[i]));
      }
      s["tenants"].push_back(jt);
    }
    {  // t0's private block 1 spliced onto t1's chain (t1's key for the same tokens), read by t1.
      const kvkey::KeyNamespace<> t0(with_tenant(c.id, "t0"), c.policy);
      const kvkey::KeyNamespace<> t1(with_tenant(c.id, "t1"), c.policy);
      const auto b0 = kvkey::scoped_block_hashes(scope.ns(), t0, golden_tokens(), scope_tokens);
      const auto b1 = kvkey::scoped_block_hashes(scope.ns(), t1, golden_tokens(), scope_tokens);
      const ByteVec p = golden_payload(1, c.payload_size);
      const kvkey::Bytes v = t0.seal_value(b0[1], kvkey::Payload(p.data(), p.size()));
      const kvkey::OpenedValue o = t1.open_value(v, b1[1]);
      REQUIRE(!o.ok());
      s["rejected"] = {
          {"what", "t0's private block 1 (sealed by t0) read by t1 as its block 1 after the same scope prefix"},
          {"value_hex", to_hex(ByteVec(v.begin(), v.end()))},
          {"reader", "t1"},
          {"read_as_block", b1[1].hex()},
          {"verdict", {{"reason", std::string(kvkey::to_string(o.verdict.reason))}, {"field", o.verdict.field}}}};
    }
    s["not_granted"] = {{"what", "tenant t2 (neither reader nor publisher) reading the scope's blocks"},
                        {"verdict", {{"reason", "not_granted"}, {"field", "scope.readers"}}}};
    doc["scope"] = s;
  }
  for (const std::string& text : {std::string(), std::string("abc"), std::string(300, 'x')}) {
    const kvkey::Payload p(text.data(), text.size());
    doc["payloads"].push_back({{"hex", to_hex(reinterpret_cast<const std::uint8_t*>(text.data()), text.size())},
                               {"xxh3_128", to_hex(kvkey::xxh3_128_digest(p))}});
  }
  std::ofstream out(vectors_path());
  out << doc.dump(1) << '\n';
  REQUIRE(out.good());
}

TEST_CASE("tests/vectors/format-v4.json: kvkey and the reference reproduce it", "[golden][vectors]") {
  std::ifstream file(vectors_path());
  REQUIRE(file.good());
  const json doc = json::parse(file);
  CHECK(doc.at("format_version") == kvkey::format_version);
  CHECK(doc.at("tokens").at("values").get<std::vector<std::uint32_t>>() == golden_tokens());
  const auto cases = golden_cases();
  REQUIRE(doc.at("cases").size() == cases.size());
  for (std::size_t n = 0; n < cases.size(); ++n) {
    const json& jc = doc["cases"][n];
    const GoldenCase& c = cases[n];
    CAPTURE(c.name);
    REQUIRE(jc.at("name") == c.name);
    const kvkey::Identity id = identity_from_json(jc.at("identity"));
    CHECK(kvkey_test::same_salient_fields(id, c.id));
    CHECK(identity_json(id) == jc.at("identity"));
    const Entries want = entries_from_json(jc);
    compare(with_kvkey(c), want);
    compare(with_reference(c), want);
    for (std::size_t i = 0; i < 3; ++i) {
      const ByteVec header = kvkey_test::bytes_from_hex(jc.at("envelopes")[i].get<std::string>());
      CHECK(jc.at("payload_digests")[i] ==
            to_hex(kvkey_test::ref::plain_digest(golden_payload(i, c.payload_size), header)));
    }
  }
  const json& k = doc.at("keyed");
  const GoldenCase c = cases.at(0);
  const ByteVec secret = kvkey_test::bytes_from_hex(k.at("secret_hex").get<std::string>());
  const kvkey::KeyNamespace<kvkey::HmacSha256> ns(c.id, kvkey::TenantSecret(secret.data(), secret.size()), c.policy);
  const ByteVec encoding(ns.encoding().begin(), ns.encoding().end());
  const ByteVec root = kvkey_test::ref::hmac_sha256(secret, encoding);
  CHECK(k.at("root") == to_hex(root));
  CHECK(ns.root().hex() == to_hex(root));
  const ByteVec sid = kvkey_test::ref::secret_id(secret);
  CHECK(k.at("secret_id") == to_hex(sid));
  CHECK(ns.secret_id()->hex() == to_hex(sid));
  CHECK(kvkey::secret_id(kvkey::TenantSecret(secret.data(), secret.size())).hex() == to_hex(sid));
  CHECK(k.at("secret_prefix") == "kvk4/t0/k" + to_hex(sid) + "/");
  CHECK(k.at("key_prefix") == ns.key_prefix());
  {
    const ByteVec other = kvkey_test::bytes_from_hex(k.at("rotated").at("secret_hex").get<std::string>());
    CHECK(k.at("rotated").at("secret_id") == to_hex(kvkey_test::ref::secret_id(other)));
    CHECK(k.at("rotated").at("secret_id") != k.at("secret_id"));
    CHECK(k.at("rotated").at("key_prefix") == "kvk4/t0/k" + to_hex(kvkey_test::ref::secret_id(other)) + "/m/e0/");
  }
  ByteVec parent = root;
  const auto toks = golden_tokens();
  for (std::size_t i = 0; i < 3; ++i) {
    CAPTURE(i);
    parent =
        kvkey_test::ref::hmac_sha256(secret, kvkey_test::ref::block_message(parent, toks.data() + 64 * i, 64, i, {}));
    CHECK(k.at("blocks")[i] == to_hex(parent));
    const auto block = kvkey::Digest::from_hex(k.at("blocks")[i].get<std::string>());
    CHECK(k.at("keys")[i] == ns.store_key(block));
    CHECK(k.at("keys")[i] == kvkey_test::ref::store_key("t0", "k" + to_hex(sid), "m", 0,
                                                        kvkey_test::ref::hmac_sha256(
                                                            secret, kvkey_test::ref::object_message(parent, c.slice))));
    const ByteVec header = kvkey_test::bytes_from_hex(k.at("envelopes")[i].get<std::string>());
    const ByteVec p = golden_payload(i, c.payload_size);
    REQUIRE(header.size() == kvkey::envelope_size);
    CHECK(ns.verify(header.data(), header.size(), block, kvkey::Payload(p.data(), p.size())).ok());
    kvkey_test::ref::Integrity in;
    in.kind = 2;
    in.mode = 2;
    in.nonce.assign(header.begin() + 80, header.begin() + 96);
    in.secret_id = sid;
    in.digest = kvkey_test::ref::keyed_tag(secret, root, in.nonce, p, header);
    CHECK(to_hex(kvkey_test::ref::envelope(encoding, parent, c.payload_size, c.slice, in)) == to_hex(header));
  }
  {
    const json& sp = doc.at("splice");
    const GoldenCase& m = cases.at(0);
    REQUIRE(sp.at("case") == m.name);
    const kvkey::KeyNamespace<> plain(m.id, m.policy);
    const auto blocks = plain.block_hashes(toks);
    const Splice want = make_splice(plain, blocks, m.payload_size);
    const ByteVec header = kvkey_test::bytes_from_hex(sp.at("header_hex").get<std::string>());
    // Everything but the digest is what make_splice builds (the digest is B's, and B's seal is deterministic).
    CHECK(to_hex(header) == to_hex(want.header));
    const kvkey::Verdict v =
        plain.verify(header.data(), header.size(), blocks[0], kvkey::Payload(want.payload.data(), want.payload.size()));
    CHECK(!v.ok());
    CHECK(sp.at("verdict").at("reason") == std::string(kvkey::to_string(v.reason)));
    CHECK(sp.at("verdict").at("field") == v.field);
    // B's own header with B's payload is fine: only the mix is refused.
    ByteVec original = header;
    std::copy(blocks[1].data(), blocks[1].data() + 32, original.begin() + 16);
    CHECK(plain
              .verify(original.data(), original.size(), blocks[1],
                      kvkey::Payload(want.payload.data(), want.payload.size()))
              .ok());
  }
  {  // Confidential values: kvkey opens them, and so does the reference (EVP_KDF HKDF, EVP AES-256-GCM).
    const json& cv = doc.at("confidential");
    const kvkey::KeyNamespace<kvkey::HmacSha256> conf(c.id, kvkey::TenantSecret(secret.data(), secret.size()),
                                                      confidential_policy(c.policy));
    CHECK(cv.at("root") == to_hex(root));
    CHECK(cv.at("secret_prefix") == "kvk4/t0/c" + to_hex(sid) + "/");
    CHECK(cv.at("key_prefix") == conf.key_prefix());
    for (std::size_t i = 0; i < 3; ++i) {
      CAPTURE(i);
      const auto block = kvkey::Digest::from_hex(cv.at("blocks")[i].get<std::string>());
      CHECK(cv.at("blocks")[i] == k.at("blocks")[i]);  // the keyed chain: only the payload differs
      CHECK(cv.at("keys")[i] == conf.store_key(block));
      const ByteVec value = kvkey_test::bytes_from_hex(cv.at("values")[i].get<std::string>());
      const ByteVec p = golden_payload(i, c.payload_size);
      const kvkey::OpenedValue o = conf.open_value(value.data(), value.size(), block);
      REQUIRE(o.ok());
      const auto* q = static_cast<const std::uint8_t*>(o.payload.data);
      CHECK(ByteVec(q, q + o.payload.size) == p);
      CHECK(kvkey_test::ref::confidential_open(secret, root, value) == std::optional<ByteVec>(p));
      CHECK(cv.at("derived_keys")[i] ==
            to_hex(kvkey_test::ref::confidential_key(secret, root, value.data() + kvkey::envelope_layout::nonce)));
      // The header is what the reference builds around the value's nonce and tag.
      kvkey_test::ref::Integrity in;
      in.kind = 2;
      in.mode = 3;
      in.nonce.assign(value.begin() + 80, value.begin() + 96);
      in.digest.assign(value.begin() + 96, value.begin() + 112);
      in.secret_id = sid;
      CHECK(to_hex(kvkey_test::ref::envelope(
                encoding, kvkey_test::bytes_from_hex(cv.at("blocks")[i].get<std::string>()), c.payload_size, c.slice,
                in)) == to_hex(ByteVec(value.begin(), value.begin() + 1024)));
    }
    const auto block0 = kvkey::Digest::from_hex(cv.at("blocks")[0].get<std::string>());
    REQUIRE(cv.at("rejected").size() == 6);
    for (const json& r : cv.at("rejected")) {
      CAPTURE(r.at("what").get<std::string>());
      const ByteVec value = kvkey_test::bytes_from_hex(r.at("value_hex").get<std::string>());
      std::optional<kvkey::KeyNamespace<kvkey::HmacSha256>> reader;
      if (r.contains("reader_secret_hex")) {
        const ByteVec other = kvkey_test::bytes_from_hex(r.at("reader_secret_hex").get<std::string>());
        reader.emplace(c.id, kvkey::TenantSecret(other.data(), other.size()), confidential_policy(c.policy));
      } else {
        reader.emplace(conf);
        CHECK(!kvkey_test::ref::confidential_open(secret, root, value));  // the reference rejects it too
      }
      const kvkey::OpenedValue o = reader->open_value(value.data(), value.size(), block0);
      CHECK(!o.ok());
      CHECK(r.at("verdict").at("reason") == std::string(kvkey::to_string(o.verdict.reason)));
      CHECK(r.at("verdict").at("field") == o.verdict.field);
    }
  }
  {  // The scope transition, from the reference's SHA-256.
    const json& s = doc.at("scope");
    const kvkey::SharedScope<> scope("sys", c.id, kvkey::ScopeGrants{{"t1"}, {"t0"}}, c.policy);
    CHECK(s.at("scope").at("tenant") == "_scope.sys");
    const kvkey::Identity scoped_id = with_tenant(c.id, "_scope.sys");
    const ByteVec scope_root = kvkey_test::ref::sha256(kvkey_test::ref::identity_encoding(scoped_id));
    CHECK(s.at("scope").at("root") == to_hex(scope_root));
    CHECK(s.at("scope").at("key_prefix") == "kvk4/_scope.sys/p/m/e0/");
    REQUIRE(s.at("tenants").size() == 2);
    for (const json& jt : s.at("tenants")) {
      const std::string t = jt.at("tenant");
      CAPTURE(t);
      const kvkey::KeyNamespace<> tenant(with_tenant(c.id, t), c.policy);
      const ByteVec troot = kvkey_test::ref::sha256(kvkey_test::ref::identity_encoding(with_tenant(c.id, t)));
      ByteVec chain = kvkey_test::ref::sha256(kvkey_test::ref::block_message(scope_root, toks.data(), 64, 0, {}));
      CHECK(jt.at("blocks")[0] == to_hex(chain));
      ByteVec m{'T'};
      kvkey_test::ref::raw(m, troot);
      kvkey_test::ref::raw(m, chain);
      chain = kvkey_test::ref::sha256(m);
      CHECK(jt.at("transition_parent") == to_hex(chain));
      for (std::size_t i = 1; i < 3; ++i) {
        chain = kvkey_test::ref::sha256(kvkey_test::ref::block_message(chain, toks.data() + 64 * i, 64, i, {}));
        CHECK(jt.at("blocks")[i] == to_hex(chain));
      }
      std::vector<std::string> want;
      for (const auto& b : kvkey::scoped_block_hashes(scope.ns(), tenant, toks, scope_tokens)) want.push_back(b.hex());
      CHECK(jt.at("blocks").get<std::vector<std::string>>() == want);
      CHECK(jt.at("keys")[0].get<std::string>().rfind("kvk4/_scope.sys/p/", 0) == 0);
      CHECK(jt.at("keys")[1].get<std::string>().rfind("kvk4/" + t + "/p/", 0) == 0);
    }
    CHECK(s.at("tenants")[0].at("blocks")[0] == s.at("tenants")[1].at("blocks")[0]);
    CHECK(s.at("tenants")[0].at("blocks")[1] != s.at("tenants")[1].at("blocks")[1]);
    const json& r = s.at("rejected");
    const kvkey::KeyNamespace<> t1(with_tenant(c.id, "t1"), c.policy);
    const ByteVec value = kvkey_test::bytes_from_hex(r.at("value_hex").get<std::string>());
    const kvkey::OpenedValue o =
        t1.open_value(value.data(), value.size(), kvkey::Digest::from_hex(r.at("read_as_block").get<std::string>()));
    CHECK(!o.ok());
    CHECK(r.at("verdict").at("reason") == std::string(kvkey::to_string(o.verdict.reason)));
    CHECK(r.at("verdict").at("field") == o.verdict.field);
    CHECK(scope.check_read("t2").reason == kvkey::Reason::not_granted);
    CHECK(s.at("not_granted").at("verdict").at("field") == scope.check_read("t2").field);
  }
  for (const json& p : doc.at("payloads")) {
    const ByteVec b = kvkey_test::bytes_from_hex(p.at("hex").get<std::string>());
    CHECK(p.at("xxh3_128") == to_hex(kvkey_test::ref::xxh3_128(b)));
    CHECK(p.at("xxh3_128") == to_hex(kvkey::xxh3_128_digest(kvkey::Payload(b.data(), b.size()))));
  }
}

namespace {
Entries golden_entries(const GoldenCase& c) {
  static const json doc = read_vectors();
  for (const json& jc : doc.at("cases")) {
    if (jc.at("name") == c.name) return entries_from_json(jc);
  }
  FAIL("tests/vectors/format-v4.json has no case " << c.name);
  return {};
}
}  // namespace

TEST_CASE("tests/vectors/format-v3.json: a v4 reader misses on every v3 value, by version",
          "[golden][vectors][upgrade]") {
  std::ifstream file(std::string(KVKEY_TEST_VECTORS_DIR) + "/format-v3.json");
  REQUIRE(file.good());
  const json doc = json::parse(file);
  REQUIRE(doc.at("format_version") == 3);
  const auto cases = golden_cases();
  for (std::size_t n = 0; n < cases.size(); ++n) {
    const json& jc = doc.at("cases")[n];
    const GoldenCase& c = cases[n];
    CAPTURE(c.name);
    const kvkey::KeyNamespace<> ns(c.id, c.policy);
    const auto blocks = ns.block_hashes(golden_tokens());
    for (std::size_t i = 0; i < 3; ++i) {
      // Keys never collide: the tag differs, and so does every hash.
      const std::string v3_key = jc.at("keys")[i];
      CHECK(v3_key.rfind("kvk3/", 0) == 0);
      CHECK(ns.store_key(blocks[i]) != v3_key);
      CHECK(ns.store_key(blocks[i]).rfind("kvk4/", 0) == 0);
      CHECK(jc.at("blocks")[i] != blocks[i].hex());
      // A v3 value (its header under the v4 reader's block) is a version miss.
      const ByteVec header = kvkey_test::bytes_from_hex(jc.at("envelopes")[i].get<std::string>());
      ByteVec value = header;
      const ByteVec p = golden_payload(i, c.payload_size);
      value.insert(value.end(), p.begin(), p.end());
      const kvkey::OpenedValue o = ns.open_value(value.data(), value.size(), blocks[i]);
      CHECK(o.verdict.reason == kvkey::Reason::unsupported_version);
      CHECK(o.verdict.field == "envelope.format_version");
      CHECK(!kvkey::decode_identity(kvkey_test::bytes_from_hex(jc.at("encoding").get<std::string>()).data(),
                                    jc.at("encoding").get<std::string>().size() / 2));
    }
  }
  const json& k = doc.at("keyed");
  const ByteVec header = kvkey_test::bytes_from_hex(k.at("envelopes")[0].get<std::string>());
  const kvkey::KeyNamespace<kvkey::HmacSha256> keyed(cases.at(0).id, kvkey::TenantSecret(keyed_secret),
                                                     cases.at(0).policy);
  const auto blocks = keyed.block_hashes(golden_tokens());
  const ByteVec p = golden_payload(0, cases.at(0).payload_size);
  const kvkey::Verdict v = keyed.verify(header.data(), header.size(), blocks[0], kvkey::Payload(p.data(), p.size()));
  CHECK(v.reason == kvkey::Reason::unsupported_version);
  CHECK(kvkey::previous_store_key_tag == "kvk3/");
  CHECK(k.at("key_prefix").get<std::string>().rfind(std::string(kvkey::previous_store_key_tag), 0) == 0);
}
