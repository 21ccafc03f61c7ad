// The canonical identity encoding: byte-exact against the specification,
// injective, round-trips, and a decoder that rejects every malformed input.
#include "support/reference.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace {

using kvkey::Identity;
using kvkey_test::base_identity;
using kvkey_test::ByteVec;
using kvkey_test::rich_identity;

std::optional<Identity> decode(const ByteVec& b) { return kvkey::decode_identity(b.data(), b.size()); }

// What kind of byte opens a field's encoding, from its C++ type, so a field
// added to visit_identity_fields is covered without editing this file.
enum class Kind { string, u32, u64, boolean, dtype, digest, optional };

struct KindOf {
  std::vector<std::pair<std::string_view, Kind>>& out;
  void operator()(std::string_view p, const std::string&) const { out.emplace_back(p, Kind::string); }
  void operator()(std::string_view p, const std::uint32_t&) const { out.emplace_back(p, Kind::u32); }
  void operator()(std::string_view p, const std::uint64_t&) const { out.emplace_back(p, Kind::u64); }
  void operator()(std::string_view p, const bool&) const { out.emplace_back(p, Kind::boolean); }
  void operator()(std::string_view p, const kvkey::KvDtype&) const { out.emplace_back(p, Kind::dtype); }
  void operator()(std::string_view p, const kvkey::Digest&) const { out.emplace_back(p, Kind::digest); }
  template <class T>
  void operator()(std::string_view p, const std::optional<T>& v) const {
    out.emplace_back(p, Kind::optional);
    if constexpr (std::is_same_v<T, kvkey::Adapter>) {
      if (v) kvkey::visit_adapter_fields(*v, *this);
    }
  }
};

// Offset of each field's first byte in encode_identity(id).
std::map<std::string_view, std::size_t> field_offsets(const Identity& id) {
  std::map<std::string_view, std::size_t> at;
  std::size_t off = sizeof kvkey::identity_tag + 2;
  for (const auto& f : kvkey::encoded_fields(id)) {
    at[f.path] = off;
    off += f.bytes.size();
  }
  return at;
}

}  // namespace

TEST_CASE("encode_identity follows the specification byte for byte", "[encode]") {
  Identity single = base_identity();
  single.tenant.clear();
  Identity mla = rich_identity();
  mla.kv.mla = true;
  mla.kv.num_kv_heads = 1;
  mla.kv.quant.scale_dtype.reset();
  mla.model.weights_fingerprint.reset();
  for (const Identity& id : {base_identity(), rich_identity(), kvkey::validated(single, kvkey::single_tenant), mla,
                             kvkey_test::largest_identity()}) {
    CAPTURE(id.tenant, id.model.name);
    const auto enc = kvkey::encode_identity(id);
    CHECK(kvkey_test::to_hex(enc) == kvkey_test::to_hex(kvkey_test::ref::identity_encoding(id)));
  }
  // The opening bytes, spelled out.
  const auto enc = kvkey::encode_identity(base_identity());
  REQUIRE(enc.size() > 16);
  CHECK(std::string(enc.begin(), enc.begin() + 8) == "kvkey.id");
  CHECK(enc[8] == 4);  // format_version, u16le
  CHECK(enc[9] == 0);
  CHECK(enc[10] == 6);  // len("team-a"), u32le
  CHECK(enc[11] == 0);
  CHECK(enc[12] == 0);
  CHECK(enc[13] == 0);
  CHECK(std::string(enc.begin() + 14, enc.begin() + 20) == "team-a");
}

TEST_CASE("encoded_fields lists visit_identity_fields in order and concatenates to the encoding", "[encode]") {
  for (const Identity& id : {base_identity(), rich_identity()}) {
    std::vector<std::pair<std::string_view, Kind>> kinds;
    kvkey::visit_identity_fields(id, KindOf{kinds});
    const auto fields = kvkey::encoded_fields(id);
    REQUIRE(fields.size() == kinds.size());
    ByteVec joined(kvkey::identity_tag, kvkey::identity_tag + 8);
    joined.push_back(static_cast<std::uint8_t>(kvkey::format_version));
    joined.push_back(static_cast<std::uint8_t>(kvkey::format_version >> 8));
    std::set<std::string_view> seen;
    for (std::size_t i = 0; i < fields.size(); ++i) {
      CHECK(fields[i].path == kinds[i].first);
      CHECK(seen.insert(fields[i].path).second);  // paths are unique
      CHECK_FALSE(fields[i].bytes.empty());       // every field emits at least one byte
      joined.insert(joined.end(), fields[i].bytes.begin(), fields[i].bytes.end());
    }
    CHECK(joined == kvkey::encode_identity(id));
  }
  // The adapter's members appear only when it is present.
  CHECK(field_offsets(base_identity()).count("adapter.name") == 0);
  CHECK(field_offsets(rich_identity()).count("adapter.weights_fingerprint") == 1);
}

TEST_CASE("decode_identity(encode_identity(x)) round-trips", "[encode]") {
  Identity a = rich_identity();
  a.kv.quant.zero_point = false;
  a.kv.mla = true;
  a.model.name = std::string("with\0nul and \xff bytes", 21);
  Identity b = base_identity();
  b.adapter = kvkey::Adapter("", kvkey::Digest());  // encodable even though validation would refuse it
  for (const Identity& id : {base_identity(), rich_identity(), a, b, kvkey_test::largest_identity()}) {
    const auto enc = kvkey::encode_identity(id);
    const auto back = decode(enc);
    REQUIRE(back.has_value());
    CHECK(kvkey_test::same_salient_fields(*back, id));
    CHECK(kvkey::encode_identity(*back) == enc);
    // The decoder leaves the shard at its defaults (it is not encoded).
    CHECK(back->shard.tp_size == 1);
    CHECK(back->shard.tp_rank == 0);
    CHECK(back->shard.pp_size == 1);
    CHECK(back->shard.pp_rank == 0);
  }
}

TEST_CASE("Identities that collide under separator joining encode differently", "[encode]") {
  auto with = [](auto&& f) {
    Identity id = base_identity();
    f(id);
    return id;
  };
  const std::vector<std::pair<const char*, Identity>> corpus = {
      {"base", base_identity()},
      // Fields next to each other in the encoding, split at different points.
      {"name a + revision b@c", with([](Identity& i) {
         i.model.name = "a";
         i.model.revision = "b@c";
       })},
      {"name a@b + revision c", with([](Identity& i) {
         i.model.name = "a@b";
         i.model.revision = "c";
       })},
      {"name a/b + revision c", with([](Identity& i) {
         i.model.name = "a/b";
         i.model.revision = "c";
       })},
      {"name a + revision b/c", with([](Identity& i) {
         i.model.name = "a";
         i.model.revision = "b/c";
       })},
      {"name ab + revision c", with([](Identity& i) {
         i.model.name = "ab";
         i.model.revision = "c";
       })},
      {"name a + revision bc", with([](Identity& i) {
         i.model.name = "a";
         i.model.revision = "bc";
       })},
      // The separator-joined key "a@b@c" of legacy schemes; the encoder takes any bytes
      // (validation would refuse '@' in a tenant, but the encoding must not rely on it).
      {"tenant a + name b@c", with([](Identity& i) {
         i.tenant = "a";
         i.model.name = "b@c";
       })},
      {"tenant a@b + name c", with([](Identity& i) {
         i.tenant = "a@b";
         i.model.name = "c";
       })},
      {"tenant a + name b-c", with([](Identity& i) {
         i.tenant = "a";
         i.model.name = "b-c";
       })},
      {"tenant a-b + name c", with([](Identity& i) {
         i.tenant = "a-b";
         i.model.name = "c";
       })},
      {"tenant ab + name c", with([](Identity& i) {
         i.tenant = "ab";
         i.model.name = "c";
       })},
      {"revision x + layout yz", with([](Identity& i) {
         i.model.revision = "x";
         i.kv.layout = "yz";
       })},
      {"revision xy + layout z", with([](Identity& i) {
         i.model.revision = "xy";
         i.kv.layout = "z";
       })},
      {"scheme ab + layout c", with([](Identity& i) {
         i.kv.quant.scheme = "ab";
         i.kv.layout = "c";
       })},
      {"scheme a + layout bc", with([](Identity& i) {
         i.kv.quant.scheme = "a";
         i.kv.layout = "bc";
       })},
      // A name that embeds what would be the next field's framing.
      {"name with a framed revision inside", with([](Identity& i) {
         i.model.name = std::string(
             "a\x01\x00\x00\x00"
             "b",
             6);
         i.model.revision = "c";
       })},
      {"name a + revision b (framing)", with([](Identity& i) {
         i.model.name = "a";
         i.model.revision = "b";
       })},
      // Empty vs absent optionals, zero vs absent digests.
      {"weights fingerprint all zero", with([](Identity& i) { i.model.weights_fingerprint = kvkey::Digest(); })},
      {"scales fingerprint all zero", with([](Identity& i) {
         i.kv.quant.scheme = "s";
         i.kv.quant.scales_fingerprint = kvkey::Digest();
       })},
      {"scheme s, nothing else", with([](Identity& i) { i.kv.quant.scheme = "s"; })},
      {"scale dtype fp32", with([](Identity& i) {
         i.kv.quant.scheme = "s";
         i.kv.quant.scale_dtype = kvkey::KvDtype::fp32;
       })},
      {"adapter with empty name and zero weights", with([](Identity& i) { i.adapter = kvkey::Adapter(); })},
      {"adapter a", with([](Identity& i) { i.adapter = kvkey::Adapter("a", kvkey::Digest()); })},
      {"adapter with the layout's name", with([](Identity& i) { i.adapter = kvkey::Adapter(i.kv.layout, {}); })},
      // Numbers whose bytes could shift into neighbours.
      {"epoch 1", with([](Identity& i) { i.model.weights_epoch = 1; })},
      {"epoch 2^32", with([](Identity& i) { i.model.weights_epoch = std::uint64_t{1} << 32; })},
      {"block 16 layers 28 -> 28, 16", with([](Identity& i) {
         i.kv.block_size = 28;
         i.kv.num_layers = 16;
       })},
      {"heads 4 dim 128 -> 128, 4", with([](Identity& i) {
         i.kv.num_kv_heads = 128;
         i.kv.head_dim = 4;
       })},
      {"mla", with([](Identity& i) { i.kv.mla = true; })},
      {"zero point", with([](Identity& i) {
         i.kv.quant.scheme = "s";
         i.kv.quant.zero_point = true;
       })},
  };
  std::map<ByteVec, const char*> by_encoding;
  std::set<kvkey::Digest> roots;
  for (const auto& [name, id] : corpus) {
    CAPTURE(name);
    const auto enc = kvkey::encode_identity(id);
    const auto [it, inserted] = by_encoding.emplace(enc, name);
    INFO("encodes like: " << (inserted ? "(none)" : it->second));
    CHECK(inserted);
    // Round trip proves the encoding determines every field.
    const auto back = decode(enc);
    REQUIRE(back.has_value());
    CHECK(kvkey_test::same_salient_fields(*back, id));
    roots.insert(kvkey::Sha256::hash(enc.data(), enc.size()));
  }
  CHECK(roots.size() == corpus.size());
  // No encoding is a prefix of another (decode insists on the exact length).
  for (const auto& [a, na] : by_encoding) {
    for (const auto& [b, nb] : by_encoding) {
      if (na == nb) continue;
      CAPTURE(na, nb);
      CHECK_FALSE((a.size() < b.size() && std::equal(a.begin(), a.end(), b.begin())));
    }
  }
}

TEST_CASE("decode_identity rejects malformed input", "[encode]") {
  const Identity id = rich_identity();
  const ByteVec enc = kvkey::encode_identity(id);
  REQUIRE(decode(enc).has_value());

  SECTION("truncation at every length") {
    for (std::size_t n = 0; n < enc.size(); ++n) {
      CAPTURE(n);
      CHECK_FALSE(kvkey::decode_identity(enc.data(), n).has_value());
    }
    CHECK_FALSE(kvkey::decode_identity(nullptr, 0).has_value());
  }
  SECTION("trailing bytes") {
    for (std::uint8_t extra : {0x00, 0x01, 0xff}) {
      ByteVec longer = enc;
      longer.push_back(extra);
      CHECK_FALSE(decode(longer).has_value());
    }
    ByteVec twice = enc;
    twice.insert(twice.end(), enc.begin(), enc.end());
    CHECK_FALSE(decode(twice).has_value());
  }
  SECTION("another tag or format version") {
    for (std::size_t i = 0; i < 10; ++i) {
      CAPTURE(i);
      ByteVec bad = enc;
      bad[i] ^= 0x01;
      CHECK_FALSE(decode(bad).has_value());
    }
    ByteVec v1 = enc;  // version 1 encodings are not read (docs/format.md)
    v1[8] = 1;
    CHECK_FALSE(decode(v1).has_value());
    ByteVec v2 = enc;  // nor version 2 (format v3 changed the envelope and the keys)
    v2[8] = 2;
    CHECK_FALSE(decode(v2).has_value());
    ByteVec v3 = enc;  // nor version 3 (format v4 changed the keys, the envelope's modes and the chain)
    v3[8] = 3;
    CHECK_FALSE(decode(v3).has_value());
    ByteVec v5 = enc;
    v5[8] = 5;
    CHECK_FALSE(decode(v5).has_value());
    ByteVec v0 = enc;
    v0[8] = 0;
    CHECK_FALSE(decode(v0).has_value());
  }
  SECTION("bad presence, bool and dtype bytes") {
    std::vector<std::pair<std::string_view, Kind>> kinds;
    kvkey::visit_identity_fields(id, KindOf{kinds});
    const auto at = field_offsets(id);
    std::size_t optionals = 0;
    std::size_t bools = 0;
    std::size_t dtypes = 0;
    for (const auto& [path, kind] : kinds) {
      CAPTURE(path);
      const std::size_t off = at.at(path);
      std::vector<std::uint8_t> bad_values;
      if (kind == Kind::optional || kind == Kind::boolean) {
        REQUIRE(enc[off] <= 1);
        bad_values = {2, 3, 0x80, 0xff};
        ++(kind == Kind::optional ? optionals : bools);
      } else if (kind == Kind::dtype) {
        bad_values = {0, static_cast<std::uint8_t>(kvkey::kv_dtype_count + 1), 0x80, 0xff};
        ++dtypes;
      }
      for (std::uint8_t v : bad_values) {
        CAPTURE(int(v));
        ByteVec bad = enc;
        bad[off] = v;
        CHECK_FALSE(decode(bad).has_value());
      }
    }
    CHECK(optionals == 5);  // weights and positional fingerprints, scale_dtype, scales_fingerprint, adapter
    CHECK(bools == 2);      // zero_point, mla
    CHECK(dtypes == 1);     // kv.dtype (the optional scale dtype's code is checked below)
    const std::size_t scale = at.at("kv.quant.scale_dtype") + 1;
    const std::uint8_t unknown = static_cast<std::uint8_t>(kvkey::kv_dtype_count + 1);
    for (std::uint8_t v : {std::uint8_t{0}, unknown, std::uint8_t{0xff}}) {
      ByteVec bad = enc;
      bad[scale] = v;
      CHECK_FALSE(decode(bad).has_value());
    }
  }
  SECTION("string lengths that overrun the input") {
    const std::size_t tenant_len = 10;
    for (std::uint32_t len : {7u, 1000u, 1025u, 0x7fffffffu, 0xffffffffu}) {
      CAPTURE(len);
      ByteVec bad = enc;
      for (int i = 0; i < 4; ++i) bad[tenant_len + i] = static_cast<std::uint8_t>(len >> (8 * i));
      CHECK_FALSE(decode(bad).has_value());
    }
  }
}

TEST_CASE("The largest valid identity encodes to exactly max_identity_encoding_size", "[encode]") {
  const Identity id = kvkey_test::largest_identity();
  REQUIRE_NOTHROW(kvkey::validated(id));
  const auto enc = kvkey::encode_identity(id);
  CHECK(enc.size() == kvkey::max_identity_encoding_size);
  CHECK(kvkey::max_identity_encoding_size == 743);  // docs/format.md, section 1
  CHECK(kvkey::envelope_layout::identity + kvkey::max_identity_encoding_size <= kvkey::envelope_size);

  // It fits the envelope and survives the trip through it.
  const kvkey::KeyNamespace<> ns(id);
  const auto block = ns.block_hashes(kvkey_test::tokens(ns.block_size()));
  REQUIRE(block.size() == 1);
  const auto header = ns.seal(block[0], kvkey_test::test_payload(123));
  CHECK(ns.verify(header, block[0], kvkey_test::test_payload(123)).ok());
  const auto contents = kvkey::decode_envelope(header.data(), header.size());
  REQUIRE(contents.has_value());
  CHECK(kvkey_test::same_salient_fields(contents->identity, id));

  // One more byte in any string makes the identity invalid.
  Identity longer = id;
  longer.kv.layout.push_back('l');
  CHECK_THROWS_AS(kvkey::validated(longer), kvkey::identity_error);
}

TEST_CASE("first_difference names the first differing field in encoding order", "[encode]") {
  const Identity a = rich_identity();
  CHECK(kvkey::first_difference(a, a).empty());
  Identity b = a;
  b.kv.layout = "other";
  b.adapter.reset();
  CHECK(kvkey::first_difference(a, b) == "kv.layout");
  b.tenant = "team-b";
  CHECK(kvkey::first_difference(a, b) == "tenant");
  CHECK(kvkey::first_difference(b, a) == "tenant");
  Identity c = a;
  c.shard.tp_rank = 0;  // the shard is not a salient field
  CHECK(kvkey::first_difference(a, c).empty());
}
