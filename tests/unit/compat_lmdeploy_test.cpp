// Tests of kvkey/compat/lmdeploy.hpp: the legacy lmdeploy Mooncake store scheme.
#include <kvkey/compat/lmdeploy.hpp>
#include <kvkey/kvkey.hpp>

#include <openssl/evp.h>

#include <catch2/catch.hpp>

#include <cctype>
#include <cstdint>
#include <regex>
#include <string>
#include <string_view>
#include <vector>

#include "support/fixtures.hpp"

namespace lm = kvkey::compat::lmdeploy;

namespace {

// ---- an independent reference: the message bytes built by hand, hashed with
// one raw EVP_Digest call (no kvkey::Sha256, no shared helpers) ----------------

using Bytes = std::vector<std::uint8_t>;

void append_be(Bytes& out, std::uint64_t v, int width) {
  for (int i = width - 1; i >= 0; --i) out.push_back(static_cast<std::uint8_t>(v >> (8 * i)));
}

kvkey::Digest evp_sha256(const Bytes& m) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  REQUIRE(EVP_Digest(m.data(), m.size(), md, &len, EVP_sha256(), nullptr) == 1);
  REQUIRE(len == 32);
  return kvkey::Digest::from_bytes(md, len);
}

// Block message per the legacy spec: schema, NUL, [parent], u32be block size,
// u64be tokens, u32be extra length, extra bytes.
Bytes legacy_message(const kvkey::Digest* parent, std::uint32_t block_size, const std::vector<std::uint64_t>& block,
                     std::string_view extra) {
  const std::string schema = "lmdeploy-mooncake-prefix-block-v1";
  Bytes m(schema.begin(), schema.end());
  m.push_back(0x00);
  if (parent != nullptr) m.insert(m.end(), parent->begin(), parent->end());
  append_be(m, block_size, 4);
  for (std::uint64_t t : block) append_be(m, t, 8);
  append_be(m, extra.size(), 4);
  m.insert(m.end(), extra.begin(), extra.end());
  return m;
}

std::vector<kvkey::Digest> reference_hashes(const std::vector<std::uint64_t>& tokens, std::uint32_t block_size,
                                            std::string_view extra) {
  std::vector<kvkey::Digest> out;
  for (std::size_t b = 0; b + 1 <= tokens.size() / block_size; ++b) {
    const std::vector<std::uint64_t> block(tokens.begin() + static_cast<std::ptrdiff_t>(b * block_size),
                                           tokens.begin() + static_cast<std::ptrdiff_t>((b + 1) * block_size));
    out.push_back(evp_sha256(legacy_message(out.empty() ? nullptr : &out.back(), block_size, block, extra)));
  }
  return out;
}

// The probe prompt of lmdeploy issue #4930 (mc_probe_f2.py): a 32-token
// fragment repeated 12 times, 384 tokens, six 64-token blocks.
std::vector<std::int64_t> probe_prompt() {
  const std::int64_t fragment[] = {35,   468,  136,  812,  14112, 44,  1730,  850,  4751, 1234, 47,
                                   8024, 47,   360,  1738, 715,   420, 12912, 2230, 823,  776,  596,
                                   3442, 3363, 4950, 613,  15462, 46,  22,    10,   44,   711};
  std::vector<std::int64_t> tokens;
  for (int rep = 0; rep < 12; ++rep) tokens.insert(tokens.end(), std::begin(fragment), std::end(fragment));
  return tokens;
}

std::vector<std::uint64_t> as_u64(const std::vector<std::int64_t>& v) { return {v.begin(), v.end()}; }

// tokens[begin, end) as u64 values.
std::vector<std::uint64_t> slice_u64(const std::vector<std::int64_t>& v, std::size_t begin, std::size_t end) {
  return {v.begin() + static_cast<std::ptrdiff_t>(begin), v.begin() + static_cast<std::ptrdiff_t>(end)};
}

// The deployment of the published probe: lmdeploy's model name, no org prefix.
kvkey::Identity base_identity() {
  return kvkey_test::make_identity("team-a", "Qwen2.5-0.5B-Instruct", kvkey_test::qwen_05b_revision,
                                   {kvkey::KvDtype::fp16, 64, 24, 2, 64, "lmdeploy.mooncake.v1"});
}

std::string kvkey_block2_key(const kvkey::Identity& id, const std::vector<std::int64_t>& tokens,
                             const kvkey::Policy& policy = {}) {
  kvkey::KeyNamespace<> ns{id, policy};
  return ns.store_key(ns.block_hashes(tokens).at(2));
}

// Redis's glob rules (stringmatchlen): '*', '?', '[...]' with ranges and '^'
// negation, '\' escapes the next character.
bool redis_glob(std::string_view p, std::string_view s) {
  if (p.empty()) return s.empty();
  switch (p[0]) {
    case '*':
      for (std::size_t i = 0; i <= s.size(); ++i) {
        if (redis_glob(p.substr(1), s.substr(i))) return true;
      }
      return false;
    case '?': return !s.empty() && redis_glob(p.substr(1), s.substr(1));
    case '[': {
      if (s.empty()) return false;
      std::size_t i = 1;
      const bool negate = i < p.size() && p[i] == '^';
      if (negate) ++i;
      bool match = false;
      for (; i < p.size() && p[i] != ']'; ++i) {
        if (p[i] == '\\' && i + 1 < p.size()) {
          match = match || p[++i] == s[0];
        } else if (i + 2 < p.size() && p[i + 1] == '-') {
          match = match || (s[0] >= p[i] && s[0] <= p[i + 2]);
          i += 2;
        } else {
          match = match || p[i] == s[0];
        }
      }
      return match != negate && i < p.size() && redis_glob(p.substr(i + 1), s.substr(1));
    }
    case '\\':
      if (p.size() >= 2) return !s.empty() && p[1] == s[0] && redis_glob(p.substr(2), s.substr(1));
      [[fallthrough]];
    default: return !s.empty() && p[0] == s[0] && redis_glob(p.substr(1), s.substr(1));
  }
}

}  // namespace

// ---- the published example -------------------------------------------------------

// Source: lmdeploy issue #4930, "Run and expected output" of mc_probe_f2.py,
// produced by lmdeploy's own build_prefix_block_hashes / build_store_key.
TEST_CASE("compat.lmdeploy: reproduces the published probe key", "[compat][lmdeploy]") {
  const auto hashes = lm::block_hashes(probe_prompt(), 64, "base");
  REQUIRE(hashes.size() == 6);
  CHECK(hashes[2].hex() == "e94120f79296e8af266366a8ac6dcc18b8d8171f87e6f405f6a6f4e22324fe8e");
  CHECK(lm::store_key("", "Qwen2.5-0.5B-Instruct", 0, hashes[2]) ==
        "Qwen2.5-0.5B-Instruct@tp_rank:0@group:0@e94120f79296e8af266366a8ac6dcc18b8d8171f87e6f405f6a6f4e22324fe8e");

  // Positive control E of the same probe: [1, 2, 3, 4] * 64, block 2 ("8e4e2fb3...").
  std::vector<std::int64_t> other;
  for (int i = 0; i < 64; ++i) other.insert(other.end(), {1, 2, 3, 4});
  CHECK(lm::block_hashes(other, 64, "base").at(2).hex().rfind("8e4e2fb3", 0) == 0);
}

// ---- every rule of the spec, against the hand-built reference ------------------------

TEST_CASE("compat.lmdeploy: block hashes equal the hand-built SHA-256 messages", "[compat][lmdeploy]") {
  const auto prompt = probe_prompt();
  for (std::string_view extra : {std::string_view{}, std::string_view{"base"}, std::string_view{"a@b\0c", 5}}) {
    for (std::uint32_t bs : {1u, 16u, 64u, 300u}) {
      INFO("extra '" << extra << "' block size " << bs);
      CHECK(lm::block_hashes(prompt, bs, extra) == reference_hashes(as_u64(prompt), bs, extra));
    }
  }
}

TEST_CASE("compat.lmdeploy: block 0 has no parent field, later blocks chain the raw parent digest",
          "[compat][lmdeploy]") {
  const std::vector<std::int64_t> tokens = {5, 6, 7, 8};
  const auto h = lm::block_hashes(tokens, 2, "");
  REQUIRE(h.size() == 2);
  CHECK(h[0] == evp_sha256(legacy_message(nullptr, 2, {5, 6}, "")));
  const kvkey::Digest zero{};
  CHECK(h[0] != evp_sha256(legacy_message(&zero, 2, {5, 6}, "")));  // no zero fill
  CHECK(h[1] == evp_sha256(legacy_message(&h[0], 2, {7, 8}, "")));
  // The second block alone, without a parent, hashes differently.
  CHECK(lm::block_hashes(std::vector<std::int64_t>{7, 8}, 2, "")[0] != h[1]);
}

TEST_CASE("compat.lmdeploy: the empty extra identity is hashed as a zero length", "[compat][lmdeploy]") {
  Bytes m = legacy_message(nullptr, 1, {9}, "");
  REQUIRE(m.size() == 34 + 4 + 8 + 4);
  CHECK(Bytes(m.end() - 4, m.end()) == Bytes{0, 0, 0, 0});
  CHECK(lm::block_hashes(std::vector<std::int64_t>{9}, 1, "")[0] == evp_sha256(m));
  // Omitting the length field would be another message.
  m.resize(m.size() - 4);
  CHECK(lm::block_hashes(std::vector<std::int64_t>{9}, 1, "")[0] != evp_sha256(m));
  CHECK(lm::block_hashes(std::vector<std::int64_t>{9}, 1, "")[0] !=
        lm::block_hashes(std::vector<std::int64_t>{9}, 1, "base")[0]);
}

TEST_CASE("compat.lmdeploy: tokens are 64-bit big-endian for every input type", "[compat][lmdeploy]") {
  const std::vector<std::uint64_t> big = {0, 1, 0xFFFFFFFFull, 0x100000000ull, 0xFFFFFFFFFFFFFFFFull, 42};
  const auto expected = reference_hashes(big, 3, "x");
  CHECK(lm::block_hashes(big.data(), big.size(), 3, "x") == expected);

  const std::vector<std::int32_t> small = {0, 1, 2, 3, 70000, 2147483647};
  const std::vector<std::uint32_t> small_u(small.begin(), small.end());
  const std::vector<std::int64_t> small_64(small.begin(), small.end());
  const auto ref_small = reference_hashes({small.begin(), small.end()}, 2, "");
  CHECK(lm::block_hashes(small.data(), small.size(), 2, "") == ref_small);
  CHECK(lm::block_hashes(small_u.data(), small_u.size(), 2, "") == ref_small);
  CHECK(lm::block_hashes(small_64, 2, "") == ref_small);
}

TEST_CASE("compat.lmdeploy: the block size enters the hash and a partial tail is ignored", "[compat][lmdeploy]") {
  const auto prompt = probe_prompt();
  std::vector<std::int64_t> with_tail = prompt;
  with_tail.insert(with_tail.end(), {1, 2, 3});
  CHECK(lm::block_hashes(with_tail, 64, "base") == lm::block_hashes(prompt, 64, "base"));
  CHECK(lm::block_hashes(std::vector<std::int64_t>(63, 1), 64, "").empty());
  // Same first 64 tokens, different declared block size -> different first hash
  // even though 128 = 2 * 64 tokens would be split at the same boundary.
  const auto h64 = lm::block_hashes(prompt, 64, "");
  const auto h128 = lm::block_hashes(prompt, 128, "");
  CHECK(h128[0] != h64[0]);
  CHECK(h128[0] == evp_sha256(legacy_message(nullptr, 128, slice_u64(prompt, 0, 128), "")));
}

TEST_CASE("compat.lmdeploy: continuing from previous hashes equals a full recompute", "[compat][lmdeploy]") {
  const auto prompt = probe_prompt();
  const auto full = lm::block_hashes(prompt, 64, "base");
  for (std::size_t k = 0; k <= full.size(); ++k) {
    const std::vector<kvkey::Digest> previous(full.begin(), full.begin() + static_cast<std::ptrdiff_t>(k));
    CHECK(lm::block_hashes(prompt, 64, "base", previous) == full);
  }
  // Extending in steps, as lmdeploy's scheduler does while a prompt grows.
  std::vector<kvkey::Digest> acc;
  for (std::size_t n = 0; n <= prompt.size(); n += 50) {
    lm::extend_block_hashes(acc, prompt.data(), n, 64, "base");
  }
  lm::extend_block_hashes(acc, prompt.data(), prompt.size(), 64, "base");
  CHECK(acc == full);
  // Previous hashes are trusted as lmdeploy trusts them: they seed the chain.
  std::vector<kvkey::Digest> forged = {kvkey::Digest{}};
  const auto continued = lm::block_hashes(prompt, 64, "base", forged);
  CHECK(continued[0] == kvkey::Digest{});
  CHECK(continued[1] == evp_sha256(legacy_message(&forged[0], 64, slice_u64(prompt, 64, 128), "base")));
}

TEST_CASE("compat.lmdeploy: bad input is an input_error", "[compat][lmdeploy]") {
  const std::vector<std::int64_t> negative = {1, 2, -3, 4};
  CHECK_THROWS_WITH(lm::block_hashes(negative, 2, ""),
                    Catch::Contains("[kvkey.input_error]") && Catch::Contains("token 2 is -3"));
  const std::vector<std::int32_t> negative32 = {-1};
  CHECK_THROWS_AS(lm::block_hashes(negative32.data(), negative32.size(), 1, ""), kvkey::input_error);
  CHECK_THROWS_WITH(lm::block_hashes(std::vector<std::int64_t>{1}, 0, ""), Catch::Contains("block_size"));
  const std::vector<kvkey::Digest> too_many(3);
  CHECK_THROWS_WITH(lm::block_hashes(std::vector<std::int64_t>(4, 1), 2, "", too_many),
                    Catch::Contains("3 previous hashes but only 2 full blocks"));
  // A negative token in a partial tail is never read, as in lmdeploy.
  CHECK(lm::block_hashes(std::vector<std::int64_t>{1, 2, -3}, 2, "").size() == 1);
}

// ---- keys -------------------------------------------------------------------------------

TEST_CASE("compat.lmdeploy: store key layout", "[compat][lmdeploy]") {
  const auto h = kvkey::Digest::from_hex(std::string(64, 'A'));
  const std::string hex(64, 'a');
  CHECK(lm::store_key("", "M", 0, h) == "M@tp_rank:0@group:0@" + hex);
  CHECK(lm::store_key("tenant/a", "M", 3, h) == "tenant/a@M@tp_rank:3@group:0@" + hex);
  CHECK(lm::store_key("p", "unnamed-model", 12, h) == "p@unnamed-model@tp_rank:12@group:0@" + hex);
  CHECK(lm::default_model_name == "unnamed-model");
}

TEST_CASE("compat.lmdeploy: an empty model name is refused everywhere", "[compat][lmdeploy]") {
  // lmdeploy never writes one (basename, else "unnamed-model"); a key built from
  // it would be one parse_key and is_legacy_key reject and no pattern matches.
  const auto h = kvkey::Digest::from_hex(std::string(64, 'a'));
  const std::string hex(64, 'a');
  CHECK_FALSE(lm::parse_key("@tp_rank:0@group:0@" + hex));
  CHECK_FALSE(lm::is_legacy_key("@tp_rank:0@group:0@" + hex));
  for (const char* prefix : {"", "p"}) {
    CAPTURE(prefix);
    CHECK_THROWS_WITH(lm::store_key(prefix, "", 0, h),
                      Catch::Contains("store_key: model_name must not be empty") && Catch::Contains("unnamed-model"));
    CHECK_THROWS_AS(lm::store_key(prefix, "", 0, h), kvkey::input_error);
    CHECK_THROWS_AS(lm::lookup_keys(prefix, "", 1, {h}), kvkey::input_error);
    CHECK_THROWS_AS(lm::purge_pattern(prefix, ""), kvkey::input_error);
    CHECK_THROWS_AS(lm::purge_glob(prefix, ""), kvkey::input_error);
    CHECK_FALSE(lm::is_legacy_key_of("p@tp_rank:0@group:0@" + hex, prefix, ""));
  }
}

TEST_CASE("compat.lmdeploy: kv_head_rank follows the replica factor", "[compat][lmdeploy]") {
  // tp 8, 2 KV heads: 4 replicas per head.
  for (std::uint32_t r = 0; r < 8; ++r) CHECK(lm::kv_head_rank(r, 8, 2) == r / 4);
  // tp <= heads: one replica, the key rank is the tp rank.
  for (std::uint32_t r = 0; r < 4; ++r) CHECK(lm::kv_head_rank(r, 4, 8) == r);
  for (std::uint32_t r = 0; r < 8; ++r) CHECK(lm::kv_head_rank(r, 8, 8) == r);
  CHECK(lm::kv_head_replica_num(8, 2) == 4);
  CHECK(lm::kv_head_replica_num(8, 1) == 8);
  CHECK(lm::kv_head_replica_num(2, 8) == 1);
  // lmdeploy's own table (test_lookup_expands_unique_kv_namespaces_block_major):
  // tp 8 with replicas 1, 4, 8 -> 8, 2, 1 keys per block.
  CHECK(lm::shard_key_count(8, 8) == 8);
  CHECK(lm::shard_key_count(8, 2) == 2);
  CHECK(lm::shard_key_count(8, 1) == 1);
  CHECK_THROWS_AS(lm::kv_head_rank(8, 8, 2), kvkey::input_error);
  CHECK_THROWS_AS(lm::kv_head_rank(0, 0, 2), kvkey::input_error);
  CHECK_THROWS_AS(lm::kv_head_rank(0, 8, 0), kvkey::input_error);
  CHECK_THROWS_AS(lm::kv_head_replica_num(9, 2), kvkey::input_error);  // 9 % 4 != 0
}

TEST_CASE("compat.lmdeploy: lookup keys are block-major", "[compat][lmdeploy]") {
  const auto hashes = lm::block_hashes(probe_prompt(), 64, "");
  const auto keys = lm::lookup_keys("p", "M", 2, hashes);
  REQUIRE(keys.size() == 12);
  CHECK(keys[0] == lm::store_key("p", "M", 0, hashes[0]));
  CHECK(keys[1] == lm::store_key("p", "M", 1, hashes[0]));
  CHECK(keys[2] == lm::store_key("p", "M", 0, hashes[1]));
  CHECK(keys[11] == lm::store_key("p", "M", 1, hashes[5]));
}

TEST_CASE("compat.lmdeploy: parse_key splits keys and rejects everything else", "[compat][lmdeploy]") {
  const auto h = lm::block_hashes(probe_prompt(), 64, "base")[2];
  SECTION("round trip") {
    const auto k = lm::parse_key(lm::store_key("tenant/a", "Qwen2.5-0.5B-Instruct", 7, h));
    REQUIRE(k);
    CHECK(k->cache_prefix == "tenant/a");
    CHECK(k->model_name == "Qwen2.5-0.5B-Instruct");
    CHECK(k->kv_head_rank == 7);
    CHECK(k->block_hash == h);
    CHECK(k->ambiguous);  // a prefix means '@' in the head
    const auto plain = lm::parse_key(lm::store_key("", "M", 4294967295u, h));
    REQUIRE(plain);
    CHECK(plain->cache_prefix.empty());
    CHECK(plain->model_name == "M");
    CHECK(plain->kv_head_rank == 4294967295u);
    CHECK_FALSE(plain->ambiguous);
  }
  SECTION("the last '@' of the head splits prefix from model") {
    const auto k = lm::parse_key(lm::store_key("a@b", "M", 0, h));
    REQUIRE(k);
    CHECK(k->cache_prefix == "a@b");
    CHECK(k->model_name == "M");
    const auto trailing = lm::parse_key("a@@tp_rank:0@group:0@" + h.hex());
    REQUIRE(trailing);
    CHECK(trailing->cache_prefix.empty());
    CHECK(trailing->model_name == "a@");
    // A head starting with its only '@' can only be an empty prefix and a model
    // name starting with '@' (found by the lmdeploy_key fuzzer).
    const std::string leading_key = "@x@tp_rank:0@group:0@" + h.hex();
    const auto leading = lm::parse_key(leading_key);
    REQUIRE(leading);
    CHECK(leading->cache_prefix.empty());
    CHECK(leading->model_name == "@x");
    CHECK(lm::store_key(leading->cache_prefix, leading->model_name, 0, h) == leading_key);
  }
  SECTION("not legacy keys") {
    const std::string hex = h.hex();
    std::string upper = hex;
    for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    for (const std::string& bad : {
             std::string("M@tp_rank:0@group:0@") + upper,                   // uppercase hex
             std::string("M@tp_rank:00@group:0@") + hex,                    // leading zero
             std::string("M@tp_rank:-1@group:0@") + hex,                    // sign
             std::string("M@tp_rank:4294967296@group:0@") + hex,            // above 2^32 - 1
             std::string("M@tp_rank:@group:0@") + hex,                      // no rank
             std::string("M@tp_rank:0@group:1@") + hex,                     // another group
             std::string("@tp_rank:0@group:0@") + hex,                      // empty head
             std::string("M@tp_rank:0@group:0@") + hex.substr(1),           // 63 hex
             std::string("M@tp_rank:0@group:0@") + hex + "0",               // 65 hex
             std::string("M@rank:0@group:0@") + hex,                        // wrong tag
             std::string("M@tp_rank:0@group:0@") + hex + "\n",              // trailing byte
             std::string("kvk4/team-a/p/Qwen2.5-0.5B-Instruct/e0/") + hex,  // a kvkey key
             std::string(""),
         }) {
      INFO(bad);
      CHECK_FALSE(lm::parse_key(bad));
      CHECK_FALSE(lm::is_legacy_key(bad));
    }
    CHECK_FALSE(lm::is_legacy_key(kvkey_block2_key(base_identity(), probe_prompt())));
  }
}

TEST_CASE("compat.lmdeploy: purge pattern matches every key of the pair and nothing else", "[compat][lmdeploy]") {
  const auto hashes = lm::block_hashes(probe_prompt(), 64, "base");
  const std::string odd_prefix = "a.b*c(d)[e]{f}|g^h$i\\j+k?l/m-n%o";
  struct Case {
    std::string prefix, model;
  };
  for (const Case& c : {Case{"", "Qwen2.5-0.5B-Instruct"}, Case{"tenant/a", "M"}, Case{odd_prefix, "x.y"}}) {
    const std::string pattern = lm::purge_pattern(c.prefix, c.model);
    INFO("pattern " << pattern);
    const std::regex ecma(pattern, std::regex::ECMAScript);
    const std::regex ere(pattern, std::regex::extended);
    const auto matches = [&](const std::string& key) {
      const bool a = std::regex_search(key, ecma);
      const bool b = std::regex_search(key, ere);
      CHECK(a == b);
      CHECK(a == lm::is_legacy_key_of(key, c.prefix, c.model));
      return a;
    };
    for (std::uint32_t rank : {0u, 1u, 7u, 10u, 4294967295u}) {
      for (const auto& h : hashes) CHECK(matches(lm::store_key(c.prefix, c.model, rank, h)));
    }
    const auto& h = hashes[2];
    CHECK_FALSE(matches(lm::store_key(c.prefix + "x", c.model, 0, h)));
    CHECK_FALSE(matches(lm::store_key(c.prefix, c.model + "x", 0, h)));
    CHECK_FALSE(matches(lm::store_key("x" + c.prefix, c.model, 0, h)));
    CHECK_FALSE(matches("x" + lm::store_key(c.prefix, c.model, 0, h)));
    CHECK_FALSE(matches(lm::store_key(c.prefix, c.model, 0, h) + "0"));
    CHECK_FALSE(matches(lm::store_key(c.prefix, c.model, 0, h).substr(1)));
    CHECK_FALSE(matches(lm::store_key(c.prefix, "other", 0, h)));
    if (!c.prefix.empty()) CHECK_FALSE(matches(lm::store_key("", c.model, 0, h)));
    // A regex metacharacter must not act as one: '.' in "x.y" is not "any byte".
    if (c.model == "x.y") CHECK_FALSE(matches(lm::store_key(c.prefix, "xzy", 0, h)));
    std::string mangled = lm::store_key(c.prefix, c.model, 0, h);
    mangled.replace(mangled.find("tp_rank:0"), 9, "tp_rank:01");
    CHECK_FALSE(matches(mangled));
    // kvkey keys never match.
    auto id = base_identity();
    id.model.name = c.model;
    CHECK_FALSE(matches(kvkey_block2_key(id, probe_prompt())));
  }
  CHECK_THROWS_AS(lm::purge_pattern("p", ""), kvkey::input_error);
}

TEST_CASE("compat.lmdeploy: purge glob finds every key of the pair for Redis SCAN MATCH", "[compat][lmdeploy]") {
  const auto h = lm::block_hashes(probe_prompt(), 64, "")[0];
  const std::string prefix = "t*e?n[a]n\\t";
  const std::string glob = lm::purge_glob(prefix, "M");
  INFO("glob " << glob);
  for (std::uint32_t rank : {0u, 5u, 123u}) CHECK(redis_glob(glob, lm::store_key(prefix, "M", rank, h)));
  // The escaped metacharacters are literal.
  CHECK_FALSE(redis_glob(glob, lm::store_key("tXeYnanXt", "M", 0, h)));
  CHECK_FALSE(redis_glob(glob, lm::store_key(prefix, "N", 0, h)));
  CHECK_FALSE(redis_glob(glob, kvkey_block2_key(base_identity(), probe_prompt())));
  CHECK_FALSE(redis_glob(glob, lm::store_key(prefix, "M", 0, h) + "0"));
  // The glob is looser than a key ("tp_rank:*"): filter candidates before deleting.
  const std::string loose = prefix + "@M@tp_rank:x@group:0@" + h.hex();
  CHECK(redis_glob(glob, loose));
  CHECK_FALSE(lm::is_legacy_key_of(loose, prefix, "M"));
  CHECK_THROWS_AS(lm::purge_glob("p", ""), kvkey::input_error);
}

// ---- the legacy collisions, and kvkey's answer -------------------------------------------------

TEST_CASE("compat.lmdeploy: legacy keys collide where kvkey keys differ", "[compat][lmdeploy]") {
  const auto prompt = probe_prompt();
  const auto legacy = lm::block_hashes(prompt, 64, "base");
  // The legacy inputs are (prefix, model name, rank, tokens, block size, adapter
  // name): nothing else can change the key, so each scenario below computes the
  // same legacy key for both deployments.
  const std::string legacy_key = lm::store_key("", "Qwen2.5-0.5B-Instruct", 0, legacy[2]);

  SECTION("KV dtype: fp16 vs fp8_e4m3") {
    auto fp8 = base_identity();
    fp8.kv.dtype = kvkey::KvDtype::fp8_e4m3;
    CHECK(lm::store_key("", "Qwen2.5-0.5B-Instruct", 0, lm::block_hashes(prompt, 64, "base")[2]) == legacy_key);
    CHECK(kvkey_block2_key(base_identity(), prompt) != kvkey_block2_key(fp8, prompt));
  }
  SECTION("weights epoch 0 vs 1") {
    auto epoch1 = base_identity();
    epoch1.model.weights_epoch = 1;
    CHECK(lm::store_key("", "Qwen2.5-0.5B-Instruct", 0, lm::block_hashes(prompt, 64, "base")[2]) == legacy_key);
    CHECK(kvkey_block2_key(base_identity(), prompt) != kvkey_block2_key(epoch1, prompt));
  }
  SECTION("two tenants with the default (empty) prefix") {
    const auto k3a = lm::store_key("", "Qwen2.5-0.5B-Instruct", 3, legacy[2]);
    const auto k3b = lm::store_key("", "Qwen2.5-0.5B-Instruct", 3, lm::block_hashes(prompt, 64, "base")[2]);
    CHECK(k3a == k3b);
    auto team_b = base_identity();
    team_b.tenant = "team-b";
    CHECK(kvkey_block2_key(base_identity(), prompt) != kvkey_block2_key(team_b, prompt));
  }
  SECTION("'@' injection: prefix tenantA + model M == prefix '' + model tenantA@M") {
    CHECK(lm::store_key("tenantA", "M", 0, legacy[2]) == lm::store_key("", "tenantA@M", 0, legacy[2]));
    auto a = base_identity();
    a.tenant = "tenantA";
    a.model.name = "M";
    auto injected = base_identity();
    injected.model.name = "tenantA@M";
    const std::string ka = kvkey_block2_key(a, prompt);
    const std::string kb = kvkey_block2_key(injected, prompt);
    auto injected_single = injected;
    injected_single.tenant.clear();
    const std::string kc = kvkey_block2_key(injected_single, prompt, kvkey::single_tenant);
    CHECK(ka != kb);
    CHECK(ka != kc);
    CHECK(kb.find('@') == std::string::npos);  // the model segment is percent-encoded
  }
  SECTION("adapter 'base' with different weights") {
    auto v1 = base_identity();
    v1.adapter = kvkey::Adapter("base", kvkey::fingerprint("adapter weights, version 1"));
    auto v2 = base_identity();
    v2.adapter = kvkey::Adapter("base", kvkey::fingerprint("adapter weights, version 2"));
    CHECK(kvkey_block2_key(v1, prompt) != kvkey_block2_key(v2, prompt));
  }
}
