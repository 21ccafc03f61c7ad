// Property tests of the identity encoding, the chain and verify, in the style
// of Abseil's VerifyTypeImplementsAbslHashCorrectly: many random identities
// from a seeded generator (set KVKEY_PROPERTY_SEED to explore other seeds).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include <kvkey/kvkey.hpp>

namespace {

using kvkey::Digest;
using kvkey::Identity;
using kvkey::KeyNamespace;

std::uint64_t property_seed() {
  const char* s = std::getenv("KVKEY_PROPERTY_SEED");
  return s != nullptr ? std::strtoull(s, nullptr, 0) : 0x6b766b6579ULL;
}

constexpr std::string_view alnum = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";

class Gen {
 public:
  explicit Gen(std::uint64_t seed) : rng_(seed) {}

  std::uint64_t uniform(std::uint64_t lo, std::uint64_t hi) {
    return std::uniform_int_distribution<std::uint64_t>(lo, hi)(rng_);
  }
  std::uint32_t u32(std::uint32_t lo, std::uint32_t hi) { return static_cast<std::uint32_t>(uniform(lo, hi)); }
  bool coin(unsigned one_in = 2) { return uniform(0, one_in - 1) == 0; }
  template <class T>
  const T& pick(const std::vector<T>& v) {
    return v[uniform(0, v.size() - 1)];
  }
  // Mostly short strings, sometimes up to max.
  std::size_t length(std::size_t max) { return uniform(1, coin(4) ? max : std::min<std::size_t>(max, 12)); }

  std::string from(std::string_view charset, std::size_t n) {
    std::string s;
    for (std::size_t i = 0; i < n; ++i) s.push_back(charset[uniform(0, charset.size() - 1)]);
    return s;
  }
  std::string tenant() {
    std::string t = from(alnum, 1);
    return t + from(std::string(alnum) + "._-", length(kvkey::limits::tenant) - 1);
  }
  // Free text: printable ASCII with '@', '/', '%' and ' ' often, and UTF-8 bytes.
  std::string text(std::size_t max) {
    std::string s;
    const std::size_t n = length(max);
    while (s.size() < n) {
      switch (uniform(0, 5)) {
        case 0: s.push_back("@/% "[uniform(0, 3)]); break;
        case 1:
          if (s.size() + 2 <= n) s.append("\xc3\xa9");  // 'é'
          break;
        default: s.push_back(static_cast<char>(uniform(0x20, 0x7e))); break;
      }
    }
    return s;
  }
  std::string printable(std::size_t max) {
    std::string s;
    const std::size_t n = length(max);
    for (std::size_t i = 0; i < n; ++i) s.push_back(static_cast<char>(uniform(0x21, 0x7e)));
    return s;
  }
  std::string scheme() { return from("abcdefghijklmnopqrstuvwxyz0123456789._-", length(kvkey::limits::quant_scheme)); }
  Digest digest() {
    Digest d;
    for (std::size_t i = 0; i < Digest::size_bytes; ++i) d[i] = static_cast<std::uint8_t>(uniform(0, 255));
    return d;
  }
  std::optional<Digest> maybe_digest() { return coin() ? std::optional<Digest>(digest()) : std::nullopt; }
  kvkey::KvDtype dtype() { return static_cast<kvkey::KvDtype>(uniform(1, kvkey::kv_dtype_count)); }

  // TP and PP geometry that divides; heads and layers fitting it.
  void geometry(Identity& id) {
    id.kv.num_kv_heads = pick(std::vector<std::uint32_t>{1, 2, 3, 4, 6, 8, 16, 32});
    id.kv.mla = coin(8);
    const std::uint32_t heads = id.kv.num_kv_heads;
    if (coin()) {
      std::vector<std::uint32_t> divisors;
      for (std::uint32_t d = 1; d <= heads; ++d) {
        if (heads % d == 0) divisors.push_back(d);
      }
      id.shard.tp_size = pick(divisors);
    } else {
      id.shard.tp_size = heads * u32(1, 4);
    }
    id.shard.tp_rank = u32(0, id.shard.tp_size - 1);
    id.shard.pp_size = pick(std::vector<std::uint32_t>{1, 1, 2, 4});
    id.shard.pp_rank = u32(0, id.shard.pp_size - 1);
    id.kv.num_layers = id.shard.pp_size * u32(1, 40);
  }

  Identity identity() {
    Identity id;
    id.tenant = tenant();
    id.model.name = text(kvkey::limits::model_name);
    id.model.revision = printable(kvkey::limits::revision);
    id.model.weights_epoch = coin() ? uniform(0, 5) : uniform(0, ~std::uint64_t{0});
    id.model.weights_fingerprint = maybe_digest();
    id.model.positional_fingerprint = maybe_digest();
    id.kv.dtype = dtype();
    if (coin()) {
      id.kv.quant.scheme = scheme();
      if (id.kv.quant.scheme == "none") id.kv.quant.scheme = "none2";
      id.kv.quant.group_size = coin() ? 0 : u32(1, 256);
      id.kv.quant.scale_dtype = coin() ? std::optional<kvkey::KvDtype>(dtype()) : std::nullopt;
      id.kv.quant.zero_point = coin();
      id.kv.quant.scales_fingerprint = maybe_digest();
    }
    id.kv.block_size = pick(std::vector<std::uint32_t>{1, 16, 32, 64, 128, u32(1, 256)});
    id.kv.head_dim = coin() ? pick(std::vector<std::uint32_t>{64, 128, 576}) : u32(1, 4096);
    id.kv.layout = printable(kvkey::limits::layout);
    geometry(id);
    if (coin()) id.adapter = kvkey::Adapter(text(kvkey::limits::adapter_name), digest());
    return id;
  }

 private:
  std::mt19937_64 rng_;
};

// Field-by-field equality written independently of the encoder.
bool same_identity(const Identity& a, const Identity& b) {
  const auto same_adapter = [](const std::optional<kvkey::Adapter>& x, const std::optional<kvkey::Adapter>& y) {
    return x.has_value() == y.has_value() &&
           (!x || (x->name == y->name && x->weights_fingerprint == y->weights_fingerprint));
  };
  const auto& qa = a.kv.quant;
  const auto& qb = b.kv.quant;
  return a.tenant == b.tenant && a.model.name == b.model.name && a.model.revision == b.model.revision &&
         a.model.weights_epoch == b.model.weights_epoch && a.model.weights_fingerprint == b.model.weights_fingerprint &&
         a.model.positional_fingerprint == b.model.positional_fingerprint && a.kv.dtype == b.kv.dtype &&
         qa.scheme == qb.scheme && qa.group_size == qb.group_size && qa.scale_dtype == qb.scale_dtype &&
         qa.zero_point == qb.zero_point && qa.scales_fingerprint == qb.scales_fingerprint &&
         a.kv.block_size == b.kv.block_size && a.kv.num_layers == b.kv.num_layers &&
         a.kv.num_kv_heads == b.kv.num_kv_heads && a.kv.head_dim == b.kv.head_dim && a.kv.layout == b.kv.layout &&
         a.kv.mla == b.kv.mla && same_adapter(a.adapter, b.adapter);
}

bool valid(const Identity& id) {
  try {
    (void)kvkey::validated(id);
    return true;
  } catch (const kvkey::identity_error&) {
    return false;
  }
}

// A string that differs from s: often s extended at either end (which an
// unframed encoding would turn into a prefix or suffix), else a fresh one.
template <class Fresh>
std::string other_string(Gen& g, const std::string& s, std::size_t max, Fresh fresh) {
  std::string t;
  switch (g.uniform(0, 3)) {
    case 0: t = s + fresh().substr(0, 1); break;
    case 1: t = fresh().substr(0, 1) + s; break;
    case 2: t = s.size() > 1 ? s.substr(0, s.size() - 1) : fresh(); break;
    default: t = fresh(); break;
  }
  return t.size() > max ? fresh() : t;
}

// Changes exactly the field at `path` (a path of kvkey::encoded_fields) to
// another value. The result may be invalid; the caller retries.
void mutate(Gen& g, Identity& id, std::string_view path) {
  auto& q = id.kv.quant;
  if (path == "tenant") {
    id.tenant = other_string(g, id.tenant, kvkey::limits::tenant, [&] { return g.tenant(); });
  } else if (path == "model.name") {
    id.model.name = other_string(g, id.model.name, kvkey::limits::model_name, [&] { return g.text(8); });
  } else if (path == "model.revision") {
    id.model.revision = other_string(g, id.model.revision, kvkey::limits::revision, [&] { return g.printable(8); });
  } else if (path == "model.weights_epoch") {
    id.model.weights_epoch = g.coin() ? id.model.weights_epoch + 1 : g.uniform(0, ~std::uint64_t{0});
  } else if (path == "model.positional_fingerprint") {
    id.model.positional_fingerprint = g.coin() || !id.model.positional_fingerprint ? g.maybe_digest() : std::nullopt;
  } else if (path == "model.weights_fingerprint") {
    id.model.weights_fingerprint = g.coin() || !id.model.weights_fingerprint ? g.maybe_digest() : std::nullopt;
  } else if (path == "kv.dtype") {
    id.kv.dtype = g.dtype();
  } else if (path == "kv.quant.scheme") {
    q.scheme = other_string(g, q.scheme, kvkey::limits::quant_scheme, [&] { return g.scheme(); });
  } else if (path == "kv.quant.group_size") {
    q.group_size = g.coin() ? q.group_size + 1 : g.u32(0, 1024);
  } else if (path == "kv.quant.scale_dtype") {
    q.scale_dtype = g.coin() ? std::optional<kvkey::KvDtype>(g.dtype()) : std::nullopt;
  } else if (path == "kv.quant.zero_point") {
    q.zero_point = !q.zero_point;
  } else if (path == "kv.quant.scales_fingerprint") {
    q.scales_fingerprint = g.maybe_digest();
  } else if (path == "kv.block_size") {
    id.kv.block_size = g.u32(1, 256);
  } else if (path == "kv.num_layers") {
    id.kv.num_layers = id.shard.pp_size * g.u32(1, 40);
  } else if (path == "kv.num_kv_heads") {
    id.kv.num_kv_heads = g.pick(std::vector<std::uint32_t>{1, 2, 3, 4, 6, 8, 16, 32, 64});
  } else if (path == "kv.head_dim") {
    id.kv.head_dim = g.u32(1, 4096);
  } else if (path == "kv.layout") {
    id.kv.layout = other_string(g, id.kv.layout, kvkey::limits::layout, [&] { return g.printable(8); });
  } else if (path == "kv.mla") {
    id.kv.mla = !id.kv.mla;
  } else if (path == "adapter") {
    id.adapter = id.adapter ? std::nullopt : std::optional<kvkey::Adapter>(kvkey::Adapter(g.text(16), g.digest()));
  } else if (path == "adapter.name") {
    id.adapter->name = other_string(g, id.adapter->name, kvkey::limits::adapter_name, [&] { return g.text(8); });
  } else if (path == "adapter.weights_fingerprint") {
    id.adapter->weights_fingerprint = g.digest();
  } else {
    FAIL("property_test has no mutator for identity field '" << path << "': add one");
  }
}

// A valid identity that differs from id exactly in the field at path, or
// nullopt when a few tries find none (e.g. kv.quant.group_size while the scheme
// is "none", which requires it to stay 0).
std::optional<Identity> mutated(Gen& g, const Identity& id, std::string_view path) {
  for (int attempt = 0; attempt < 16; ++attempt) {
    Identity m = id;
    mutate(g, m, path);
    if (!same_identity(m, id) && valid(m)) return m;
  }
  return std::nullopt;
}

kvkey::Bytes field_stream(const Identity& id) {
  const kvkey::Bytes e = kvkey::encode_identity(id);
  return kvkey::Bytes(e.begin() + sizeof kvkey::identity_tag + 2, e.end());
}

bool starts_with(const kvkey::Bytes& s, const kvkey::Bytes& p) {
  return p.size() <= s.size() && std::equal(p.begin(), p.end(), s.begin());
}
bool ends_with(const kvkey::Bytes& s, const kvkey::Bytes& p) {
  return p.size() <= s.size() && std::equal(p.rbegin(), p.rend(), s.rbegin());
}

const kvkey::Bytes* field_bytes(const std::vector<kvkey::EncodedField>& fields, std::string_view path) {
  for (const auto& f : fields) {
    if (f.path == path) return &f.bytes;
  }
  return nullptr;
}

// Random identities, each followed by a few single-field neighbours.
std::vector<Identity> population(Gen& g, std::size_t bases) {
  std::vector<Identity> out;
  for (std::size_t i = 0; i < bases; ++i) {
    const Identity id = g.identity();
    REQUIRE(valid(id));
    out.push_back(id);
    const auto fields = kvkey::encoded_fields(id);
    for (int k = 0; k < 2; ++k) {
      if (auto m = mutated(g, id, fields[g.uniform(0, fields.size() - 1)].path)) out.push_back(*m);
    }
  }
  return out;
}

const std::vector<std::uint8_t> payload_bytes(std::size_t{1} << 20, 0x69);
const kvkey::Payload payload(payload_bytes.data(), payload_bytes.size());

}  // namespace

TEST_CASE("Property: equal identities give equal encodings and roots", "[property]") {
  const std::uint64_t seed = property_seed();
  INFO("KVKEY_PROPERTY_SEED=" << seed);
  Gen a(seed);
  Gen b(seed);
  for (int i = 0; i < 200; ++i) {
    const Identity x = a.identity();
    const Identity y = b.identity();  // built independently, equal field by field
    REQUIRE(same_identity(x, y));
    CHECK(kvkey::encode_identity(x) == kvkey::encode_identity(y));
    CHECK(kvkey::first_difference(x, y).empty());
    CHECK(KeyNamespace<>{x}.root() == KeyNamespace<>{y}.root());
    // The encoding decodes to an equal identity, which encodes the same.
    const auto e = kvkey::encode_identity(x);
    const auto d = kvkey::decode_identity(e.data(), e.size());
    REQUIRE(d.has_value());
    CHECK(same_identity(*d, x));
    CHECK(kvkey::encode_identity(*d) == e);
  }
}

TEST_CASE("Property: unequal identities give unequal, prefix-free and suffix-free encodings", "[property]") {
  const std::uint64_t seed = property_seed();
  INFO("KVKEY_PROPERTY_SEED=" << seed);
  Gen g(seed + 1);
  const std::vector<Identity> ids = population(g, 120);  // ~360 identities, many near neighbours
  REQUIRE(ids.size() > 300);
  std::vector<kvkey::Bytes> streams;
  for (const auto& id : ids) streams.push_back(field_stream(id));
  std::size_t unequal_pairs = 0;
  std::size_t failures = 0;
  for (std::size_t i = 0; i < ids.size(); ++i) {
    for (std::size_t j = 0; j < ids.size(); ++j) {
      if (i == j) continue;
      if (same_identity(ids[i], ids[j])) {
        if (streams[i] != streams[j]) ++failures;
        continue;
      }
      ++unequal_pairs;
      // Unequal, and neither stream a prefix or a suffix of the other (that
      // would betray a variable-length field without its length).
      if (starts_with(streams[j], streams[i]) || ends_with(streams[j], streams[i])) {
        ++failures;
        UNSCOPED_INFO("identity " << i << " encodes as a prefix/suffix (or equal) of identity " << j);
      }
    }
  }
  CHECK(unequal_pairs > 90000);
  CHECK(failures == 0);
}

TEST_CASE("Property: any single-field mutation changes the root, every block hash and every key", "[property]") {
  const std::uint64_t seed = property_seed();
  INFO("KVKEY_PROPERTY_SEED=" << seed);
  Gen g(seed + 2);
  std::map<std::string, int> mutated_fields;
  for (int i = 0; i < 60; ++i) {
    const Identity id = g.identity();
    const KeyNamespace<> ns{id};
    for (const auto& field : kvkey::encoded_fields(id)) {
      const auto m = mutated(g, id, field.path);
      if (!m) continue;
      ++mutated_fields[std::string(field.path)];
      INFO("identity " << i << ", field " << field.path);
      const KeyNamespace<> other{*m};
      CHECK(other.root() != ns.root());
      // Four full blocks for both block sizes.
      const std::size_t n = 4 * std::max(ns.block_size(), other.block_size());
      std::vector<std::uint32_t> tokens(n);
      for (std::size_t t = 0; t < n; ++t) tokens[t] = static_cast<std::uint32_t>(g.uniform(0, 200000));
      const auto mine = ns.block_hashes(tokens);
      const auto theirs = other.block_hashes(tokens);
      std::set<Digest> mine_set(mine.begin(), mine.begin() + 4);
      std::set<std::string> my_keys;
      for (std::size_t b = 0; b < 4; ++b) my_keys.insert(ns.store_key(mine[b]));
      for (std::size_t b = 0; b < 4; ++b) {
        CHECK(mine_set.count(theirs[b]) == 0);
        CHECK(my_keys.count(other.store_key(theirs[b])) == 0);
      }
      // And the mutated namespace rejects the original's header, naming the field.
      const auto v = other.verify(ns.seal(mine[0], payload), theirs[0], payload);
      CHECK(v.reason == kvkey::Reason::identity_mismatch);
      CHECK(v.field == field.path);
    }
  }
  // Every salient field was exercised, many times.
  const auto all_fields = kvkey::encoded_fields([] {
    Identity id;
    id.adapter = kvkey::Adapter{};
    return id;
  }());
  for (const auto& f : all_fields) {
    INFO("field " << f.path);
    CHECK(mutated_fields[std::string(f.path)] >= 10);
  }
}

TEST_CASE("Property: a slice change keeps the chain but changes every key", "[property]") {
  Gen g(property_seed() + 3);
  int checked = 0;
  for (int i = 0; i < 200 && checked < 40; ++i) {
    const Identity id = g.identity();
    Identity other = id;
    other.shard.tp_rank = g.u32(0, other.shard.tp_size - 1);
    other.shard.pp_rank = g.u32(0, other.shard.pp_size - 1);
    if (kvkey::resolve_slice(id.kv, id.shard) == kvkey::resolve_slice(other.kv, other.shard)) continue;
    ++checked;
    const KeyNamespace<> a{id};
    const KeyNamespace<> b{other};
    std::vector<std::uint32_t> tokens(2 * a.block_size(), 7);
    const auto ha = a.block_hashes(tokens);
    CHECK(ha == b.block_hashes(tokens));  // the shard is not part of the chain
    for (const Digest& h : ha) CHECK(a.store_key(h) != b.store_key(h));
    const auto v = b.verify(a.seal(ha[0], payload), ha[0], payload);
    CHECK(v.reason == kvkey::Reason::identity_mismatch);
    CHECK(v.field == "shard");
  }
  CHECK(checked == 40);
}

TEST_CASE("Property: verify of another identity's header fails and names a field that differs", "[property]") {
  const std::uint64_t seed = property_seed();
  INFO("KVKEY_PROPERTY_SEED=" << seed);
  Gen g(seed + 4);
  const std::vector<Identity> ids = population(g, 60);
  std::vector<KeyNamespace<>> namespaces;
  for (const auto& id : ids) namespaces.emplace_back(id);
  std::size_t pairs = 0;
  for (std::size_t i = 0; i < ids.size(); ++i) {
    // Neighbours (same base identity) and random others.
    for (std::size_t j : {i + 1, i + 2, static_cast<std::size_t>(g.uniform(0, ids.size() - 1))}) {
      if (j >= ids.size() || j == i || same_identity(ids[i], ids[j])) continue;
      ++pairs;
      const auto& writer = namespaces[i];
      const auto& reader = namespaces[j];
      const std::vector<std::uint32_t> tokens(std::max(writer.block_size(), reader.block_size()), 42);
      const auto v =
          reader.verify(writer.seal(writer.block_hashes(tokens)[0], payload), reader.block_hashes(tokens)[0], payload);
      INFO("writer " << i << " reader " << j << " field " << v.field);
      REQUIRE(v.reason == kvkey::Reason::identity_mismatch);
      // The named field really differs: its encoded bytes differ, and it is the
      // first field that does (in encoding order).
      CHECK(v.field == kvkey::first_difference(writer.identity(), reader.identity()));
      const auto fw = kvkey::encoded_fields(writer.identity());
      const auto fr = kvkey::encoded_fields(reader.identity());
      const kvkey::Bytes* bw = field_bytes(fw, v.field);
      const kvkey::Bytes* br = field_bytes(fr, v.field);
      REQUIRE(bw != nullptr);
      REQUIRE(br != nullptr);
      CHECK(*bw != *br);
    }
  }
  CHECK(pairs > 100);
}
