// Identity validation (every rule names its field), the tenant policy, dtype
// names, and the shard -> slice resolution with its consequences for keys.
#include "support/reference.hpp"

#include <catch2/catch.hpp>

#include <cstdint>
#include <functional>
#include <set>
#include <string>
#include <vector>

namespace {

using kvkey::Identity;
using kvkey_test::base_identity;
using kvkey_test::rich_identity;

struct Invalid {
  const char* what;
  std::function<void(Identity&)> mutate;
  const char* field;
};

// Runs validated() and the KeyNamespace constructor; both must throw
// identity_error naming `field`, with a message that starts with the id and field.
void require_identity_error(const Identity& id, const std::string& field, const kvkey::Policy& policy = {}) {
  try {
    (void)kvkey::validated(id, policy);
    FAIL("validated() accepted the identity; expected an error on " << field);
  } catch (const kvkey::identity_error& e) {
    CHECK(e.field() == field);
    CHECK(std::string(e.what()).rfind("[kvkey.identity_error] " + field + ": ", 0) == 0);
  }
  try {
    kvkey::KeyNamespace<> ns(id, policy);
    FAIL("KeyNamespace accepted the identity; expected an error on " << field);
  } catch (const kvkey::identity_error& e) {
    CHECK(e.field() == field);
  }
}

}  // namespace

TEST_CASE("The sample identities are valid", "[identity]") {
  for (const Identity& id : {base_identity(), rich_identity()}) {
    const Identity v = kvkey::validated(id);
    CHECK(kvkey::encode_identity(v) == kvkey::encode_identity(id));  // validation changes nothing
    CHECK_NOTHROW(kvkey::KeyNamespace<>(id));
  }
}

TEST_CASE("Every validation rule raises identity_error naming its field", "[identity]") {
  const std::string s64(64, 'a');
  const std::vector<Invalid> cases = {
      // tenant
      {"empty tenant", [](Identity& i) { i.tenant.clear(); }, "tenant"},
      {"tenant with '/'", [](Identity& i) { i.tenant = "team/a"; }, "tenant"},
      {"tenant with '@'", [](Identity& i) { i.tenant = "team@a"; }, "tenant"},
      {"tenant with a space", [](Identity& i) { i.tenant = "team a"; }, "tenant"},
      {"tenant with ':'", [](Identity& i) { i.tenant = "team:a"; }, "tenant"},
      {"tenant with '%'", [](Identity& i) { i.tenant = "team%2Fa"; }, "tenant"},
      {"tenant with a non-ASCII byte", [](Identity& i) { i.tenant = "t\xc3\xa9nant"; }, "tenant"},
      {"tenant with a NUL", [](Identity& i) { i.tenant = std::string("team\0a", 6); }, "tenant"},
      {"tenant with a leading '_'", [](Identity& i) { i.tenant = "_single"; }, "tenant"},
      {"tenant with a leading '.'", [](Identity& i) { i.tenant = ".hidden"; }, "tenant"},
      {"tenant with a leading '-'", [](Identity& i) { i.tenant = "-a"; }, "tenant"},
      {"tenant of 65 bytes", [&](Identity& i) { i.tenant = s64 + "b"; }, "tenant"},
      // model
      {"empty model name", [](Identity& i) { i.model.name.clear(); }, "model.name"},
      {"model name of 129 bytes", [](Identity& i) { i.model.name = std::string(129, 'm'); }, "model.name"},
      {"model name with a newline", [](Identity& i) { i.model.name = "qwen\n"; }, "model.name"},
      {"model name with DEL", [](Identity& i) { i.model.name = "qwen\x7f"; }, "model.name"},
      {"model name with NEL (U+0085)", [](Identity& i) { i.model.name = "qwen\xc2\x85"; }, "model.name"},
      {"model name with U+0080", [](Identity& i) { i.model.name = "\xc2\x80qwen"; }, "model.name"},
      {"model name with U+009F",
       [](Identity& i) {
         i.model.name =
             "qw\xc2\x9f"
             "en";
       },
       "model.name"},
      {"model name with RLO (U+202E)",
       [](Identity& i) {
         i.model.name =
             "qwen\xe2\x80\xae"
             "fp16";
       },
       "model.name"},
      {"model name with LRE (U+202A)", [](Identity& i) { i.model.name = "\xe2\x80\xaaqwen"; }, "model.name"},
      {"model name with LRI (U+2066)", [](Identity& i) { i.model.name = "q\xe2\x81\xa6"; }, "model.name"},
      {"model name with PDI (U+2069)", [](Identity& i) { i.model.name = "q\xe2\x81\xa9"; }, "model.name"},
      {"empty revision", [](Identity& i) { i.model.revision.clear(); }, "model.revision"},
      {"revision with a space", [](Identity& i) { i.model.revision = "main 2"; }, "model.revision"},
      {"revision with a tab", [](Identity& i) { i.model.revision = "main\t2"; }, "model.revision"},
      {"revision with a non-ASCII byte", [](Identity& i) { i.model.revision = "r\xc3\xa9v"; }, "model.revision"},
      {"revision of 129 bytes", [](Identity& i) { i.model.revision = std::string(129, 'r'); }, "model.revision"},
      // kv.dtype
      {"unset dtype", [](Identity& i) { i.kv.dtype = kvkey::KvDtype::unset; }, "kv.dtype"},
      {"dtype code 13", [](Identity& i) { i.kv.dtype = static_cast<kvkey::KvDtype>(13); }, "kv.dtype"},
      {"dtype code 255", [](Identity& i) { i.kv.dtype = static_cast<kvkey::KvDtype>(255); }, "kv.dtype"},
      // kv.quant
      {"empty quant scheme", [](Identity& i) { i.kv.quant.scheme.clear(); }, "kv.quant.scheme"},
      {"quant scheme in upper case", [](Identity& i) { i.kv.quant.scheme = "NONE"; }, "kv.quant.scheme"},
      {"quant scheme with '/'", [](Identity& i) { i.kv.quant.scheme = "a/b"; }, "kv.quant.scheme"},
      {"quant scheme of 33 bytes", [](Identity& i) { i.kv.quant.scheme = std::string(33, 'q'); }, "kv.quant.scheme"},
      {"group_size with scheme none", [](Identity& i) { i.kv.quant.group_size = 64; }, "kv.quant.group_size"},
      {"scale_dtype with scheme none", [](Identity& i) { i.kv.quant.scale_dtype = kvkey::KvDtype::fp16; },
       "kv.quant.scale_dtype"},
      {"zero_point with scheme none", [](Identity& i) { i.kv.quant.zero_point = true; }, "kv.quant.zero_point"},
      {"scales_fingerprint with scheme none",
       [](Identity& i) { i.kv.quant.scales_fingerprint = kvkey::fingerprint("s"); }, "kv.quant.scales_fingerprint"},
      {"unset scale_dtype",
       [](Identity& i) {
         i.kv.quant.scheme = "per_token";
         i.kv.quant.scale_dtype = kvkey::KvDtype::unset;
       },
       "kv.quant.scale_dtype"},
      {"scale_dtype code 200",
       [](Identity& i) {
         i.kv.quant.scheme = "per_token";
         i.kv.quant.scale_dtype = static_cast<kvkey::KvDtype>(200);
       },
       "kv.quant.scale_dtype"},
      // kv geometry and layout
      {"zero block_size", [](Identity& i) { i.kv.block_size = 0; }, "kv.block_size"},
      {"zero num_layers", [](Identity& i) { i.kv.num_layers = 0; }, "kv.num_layers"},
      {"zero num_kv_heads", [](Identity& i) { i.kv.num_kv_heads = 0; }, "kv.num_kv_heads"},
      {"zero head_dim", [](Identity& i) { i.kv.head_dim = 0; }, "kv.head_dim"},
      {"empty layout", [](Identity& i) { i.kv.layout.clear(); }, "kv.layout"},
      {"layout with a space", [](Identity& i) { i.kv.layout = "layer major"; }, "kv.layout"},
      {"layout of 65 bytes", [](Identity& i) { i.kv.layout = std::string(65, 'l'); }, "kv.layout"},
      // shard
      {"tp that does not divide the heads", [](Identity& i) { i.shard.tp_size = 3; }, "shard.tp_size"},
      {"heads that do not divide tp", [](Identity& i) { i.shard.tp_size = 6; }, "shard.tp_size"},
      {"zero tp_size", [](Identity& i) { i.shard.tp_size = 0; }, "shard.tp_size"},
      {"tp_rank == tp_size",
       [](Identity& i) {
         i.shard.tp_size = 2;
         i.shard.tp_rank = 2;
       },
       "shard.tp_rank"},
      {"tp_rank > tp_size", [](Identity& i) { i.shard.tp_rank = 5; }, "shard.tp_rank"},
      {"pp that does not divide the layers", [](Identity& i) { i.shard.pp_size = 3; }, "shard.pp_size"},
      {"zero pp_size", [](Identity& i) { i.shard.pp_size = 0; }, "shard.pp_size"},
      {"pp_rank == pp_size",
       [](Identity& i) {
         i.shard.pp_size = 4;
         i.shard.pp_rank = 4;
       },
       "shard.pp_rank"},
      // adapter
      {"adapter with an empty name", [](Identity& i) { i.adapter = kvkey::Adapter("", kvkey::fingerprint("w")); },
       "adapter.name"},
      {"adapter name of 129 bytes",
       [](Identity& i) { i.adapter = kvkey::Adapter(std::string(129, 'a'), kvkey::fingerprint("w")); }, "adapter.name"},
      {"adapter name with a control byte",
       [](Identity& i) { i.adapter = kvkey::Adapter("lora\x01", kvkey::fingerprint("w")); }, "adapter.name"},
      {"adapter name with RLO (U+202E)",
       [](Identity& i) { i.adapter = kvkey::Adapter("lora\xe2\x80\xae", kvkey::fingerprint("w")); }, "adapter.name"},
      {"adapter name with NEL (U+0085)",
       [](Identity& i) { i.adapter = kvkey::Adapter("\xc2\x85lora", kvkey::fingerprint("w")); }, "adapter.name"},
  };
  for (const auto& c : cases) {
    CAPTURE(c.what);
    Identity id = base_identity();  // 4 KV heads, 28 layers
    c.mutate(id);
    require_identity_error(id, c.field);
  }
}

TEST_CASE("Invisible formatting characters in names are refused with their offset", "[identity]") {
  auto message = [](const std::string& name) {
    Identity id = base_identity();
    id.model.name = name;
    try {
      (void)kvkey::validated(id);
    } catch (const kvkey::identity_error& e) {
      CHECK(e.field() == "model.name");
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  CHECK(message("Qwen\xe2\x80\xae"
                "61pf") ==
        "[kvkey.identity_error] model.name: byte 4 starts a bidirectional formatting character (U+202E)");
  CHECK(message("ab\xc2\x85") == "[kvkey.identity_error] model.name: byte 2 starts a C1 control character (U+0085)");
  CHECK(message("\xe2\x81\xa9") ==
        "[kvkey.identity_error] model.name: byte 0 starts a bidirectional formatting character (U+2069)");
  // The invisible ones of kvkey::is_unsafe_code_point too: a zero-width space, a paragraph separator, a BOM.
  CHECK(message("a\xe2\x80\x8b") ==
        "[kvkey.identity_error] model.name: byte 1 starts an invisible formatting "
        "character (U+200B)");
  CHECK(message("a\xe2\x80\xa9") ==
        "[kvkey.identity_error] model.name: byte 1 starts an invisible formatting "
        "character (U+2029)");
  CHECK(message("a\xef\xbb\xbf") ==
        "[kvkey.identity_error] model.name: byte 1 starts an invisible formatting "
        "character (U+FEFF)");
  // Their neighbours are ordinary text: U+00A0, U+00E9, U+200A, U+2027, U+202F, U+205F, U+2070, U+FFFC and
  // truncated sequences (bytes that are not UTF-8 are escaped when printed, not refused).
  for (const char* ok : {"a\xc2\xa0"
                         "b",
                         "\xc3\xa9", "a\xe2\x80\x8a", "a\xe2\x80\xa7", "a\xe2\x80\xaf", "a\xe2\x81\x9f",
                         "a\xe2\x81\xb0", "a\xef\xbf\xbc", "a\xe2\x80", "a\xc2"}) {
    CAPTURE(ok);
    CHECK(message(ok) == "accepted");
  }
}

TEST_CASE("Strings at their limits are accepted", "[identity]") {
  Identity id = base_identity();
  id.tenant = std::string(kvkey::limits::tenant, 't');
  id.model.name = std::string(kvkey::limits::model_name, 'm');
  id.model.revision = std::string(kvkey::limits::revision, 'r');
  id.kv.quant.scheme = std::string(kvkey::limits::quant_scheme, 'q');
  id.kv.layout = std::string(kvkey::limits::layout, 'l');
  id.adapter = kvkey::Adapter(std::string(kvkey::limits::adapter_name, 'a'), kvkey::fingerprint("w"));
  CHECK_NOTHROW(kvkey::validated(id));

  SECTION("tenants built from the whole allowed charset") {
    for (const char* t : {"a", "Z", "0", "team-a", "Team_A.prod-2", "9.9.9"}) {
      CAPTURE(t);
      id.tenant = t;
      CHECK(kvkey::validated(id).tenant == t);
    }
  }
  SECTION("model and adapter names are free text") {
    id.model.name = "Qwen/Qwen2.5 7B@main \xc3\xa9";
    id.adapter->name = "team a/lora@v2";
    CHECK_NOTHROW(kvkey::validated(id));
  }
  SECTION("a revision may hold any printable ASCII") {
    id.model.revision = "refs/pr/1@{2024}~!";
    CHECK_NOTHROW(kvkey::validated(id));
  }
}

TEST_CASE("The single_tenant policy encodes the visible tenant _single", "[identity]") {
  Identity id = base_identity();
  id.tenant.clear();
  require_identity_error(id, "tenant");  // without the policy an empty tenant is refused

  const Identity v = kvkey::validated(id, kvkey::single_tenant);
  CHECK(v.tenant == "_single");
  CHECK(kvkey::single_tenant_name == "_single");

  kvkey::KeyNamespace<> ns(id, kvkey::single_tenant);
  CHECK(ns.identity().tenant == "_single");
  CHECK(ns.policy().tenant == kvkey::TenantPolicy::single_tenant);
  CHECK(ns.tenant_prefix() == "kvk4/_single/");
  const auto blocks = ns.block_hashes(kvkey_test::tokens(32));
  CHECK(ns.store_key(blocks[0]).rfind("kvk4/_single/p/", 0) == 0);
  CHECK(ns.encoding() == kvkey_test::ref::identity_encoding(v));

  SECTION("a named tenant under single_tenant is an error") {
    Identity named = base_identity();
    require_identity_error(named, "tenant", kvkey::single_tenant);
  }
  SECTION("no real tenant can encode like the single tenant") {
    Identity fake = base_identity();
    fake.tenant = "_single";
    require_identity_error(fake, "tenant");
  }
  SECTION("the other rules still apply under single_tenant") {
    id.model.revision.clear();
    require_identity_error(id, "model.revision", kvkey::single_tenant);
  }
}

TEST_CASE("KvDtype names and codes", "[identity]") {
  using kvkey::KvDtype;
  CHECK(kvkey::kv_dtype_count == 12);
  std::set<std::string_view> names;
  for (int code = 1; code <= static_cast<int>(kvkey::kv_dtype_count); ++code) {
    const auto d = static_cast<KvDtype>(code);
    CAPTURE(code);
    CHECK(kvkey::is_valid(d));
    const auto name = kvkey::to_string(d);
    names.insert(name);
    REQUIRE(kvkey::kv_dtype_from_string(name).has_value());
    CHECK(*kvkey::kv_dtype_from_string(name) == d);
  }
  CHECK(names.size() == kvkey::kv_dtype_count);
  // The codes are part of the byte format: pin them.
  CHECK(static_cast<int>(KvDtype::fp32) == 1);
  CHECK(static_cast<int>(KvDtype::fp16) == 2);
  CHECK(static_cast<int>(KvDtype::bf16) == 3);
  CHECK(static_cast<int>(KvDtype::fp8_e4m3) == 4);
  CHECK(static_cast<int>(KvDtype::fp8_e5m2) == 5);
  CHECK(static_cast<int>(KvDtype::int8) == 6);
  CHECK(static_cast<int>(KvDtype::int4) == 7);
  CHECK(static_cast<int>(KvDtype::uint8) == 8);
  CHECK(static_cast<int>(KvDtype::uint4) == 9);
  CHECK(static_cast<int>(KvDtype::fp4_e2m1) == 10);
  CHECK(static_cast<int>(KvDtype::fp8_e4m3fnuz) == 11);
  CHECK(static_cast<int>(KvDtype::fp8_e5m2fnuz) == 12);
  CHECK(kvkey::to_string(KvDtype::fp8_e4m3) == "fp8_e4m3");
  CHECK(kvkey::to_string(KvDtype::fp8_e4m3fnuz) == "fp8_e4m3fnuz");
  CHECK(kvkey::to_string(KvDtype::unset) == "unset");
  CHECK(kvkey::to_string(static_cast<KvDtype>(13)) == "invalid");
  CHECK_FALSE(kvkey::is_valid(KvDtype::unset));
  CHECK_FALSE(kvkey::is_valid(static_cast<KvDtype>(13)));
  for (const char* bad : {"", "unset", "invalid", "FP16", "fp16 ", "float16"}) {
    CAPTURE(bad);
    CHECK_FALSE(kvkey::kv_dtype_from_string(bad).has_value());
  }
}

TEST_CASE("all_dtypes lists every valid dtype once, in code order", "[identity]") {
  using kvkey::KvDtype;
  constexpr auto all = kvkey::all_dtypes();  // usable at compile time
  static_assert(all.size() == kvkey::kv_dtype_count, "one entry per dtype");
  std::vector<KvDtype> valid;  // every code of the byte's range that names a type
  for (int code = 0; code < 256; ++code) {
    if (kvkey::is_valid(static_cast<KvDtype>(code))) valid.push_back(static_cast<KvDtype>(code));
  }
  CHECK(std::vector<KvDtype>(all.begin(), all.end()) == valid);
  CHECK(all.front() == KvDtype::fp32);
  CHECK(all.back() == KvDtype::fp8_e5m2fnuz);
}

// ---- shard slices ------------------------------------------------------------------

namespace {

kvkey::Slice slice_of(std::uint32_t heads, std::uint32_t layers, std::uint32_t tp, std::uint32_t tp_rank,
                      std::uint32_t pp = 1, std::uint32_t pp_rank = 0, bool mla = false) {
  kvkey::Kv kv = base_identity().kv;
  kv.num_kv_heads = heads;
  kv.num_layers = layers;
  kv.mla = mla;
  return kvkey::resolve_slice(kv, kvkey::Shard{tp, tp_rank, pp, pp_rank});
}

kvkey::Slice heads_layers(std::uint32_t hb, std::uint32_t he, std::uint32_t lb, std::uint32_t le) {
  return kvkey::Slice{hb, he, lb, le};
}

}  // namespace

TEST_CASE("tp <= heads splits the heads evenly", "[identity][slice]") {
  CHECK(slice_of(8, 32, 1, 0) == heads_layers(0, 8, 0, 32));
  for (std::uint32_t tp : {1u, 2u, 4u, 8u}) {
    for (std::uint32_t r = 0; r < tp; ++r) {
      CAPTURE(tp, r);
      CHECK(slice_of(8, 32, tp, r) == heads_layers(r * 8 / tp, (r + 1) * 8 / tp, 0, 32));
    }
  }
  CHECK(slice_of(8, 32, 4, 3) == heads_layers(6, 8, 0, 32));
  CHECK(slice_of(6, 32, 3, 1) == heads_layers(2, 4, 0, 32));
}

TEST_CASE("tp > heads replicates whole heads", "[identity][slice]") {
  // H = 2, tp = 4: ranks 0,1 hold head 0; ranks 2,3 hold head 1.
  CHECK(slice_of(2, 24, 4, 0) == heads_layers(0, 1, 0, 24));
  CHECK(slice_of(2, 24, 4, 1) == heads_layers(0, 1, 0, 24));
  CHECK(slice_of(2, 24, 4, 2) == heads_layers(1, 2, 0, 24));
  CHECK(slice_of(2, 24, 4, 3) == heads_layers(1, 2, 0, 24));
  // H = 2, tp = 8: head r / 4.
  for (std::uint32_t r = 0; r < 8; ++r) {
    CAPTURE(r);
    CHECK(slice_of(2, 24, 8, r) == heads_layers(r / 4, r / 4 + 1, 0, 24));
  }
  // H = 1 (e.g. MQA) with tp = 4: every rank holds the one head.
  CHECK(slice_of(1, 24, 4, 3) == heads_layers(0, 1, 0, 24));
}

TEST_CASE("An MLA latent cache is whole on every rank", "[identity][slice]") {
  for (std::uint32_t tp : {1u, 2u, 3u, 8u, 16u}) {
    for (std::uint32_t r = 0; r < tp; ++r) {
      CAPTURE(tp, r);
      CHECK(slice_of(1, 60, tp, r, 1, 0, true) == heads_layers(0, 1, 0, 60));
    }
  }
}

TEST_CASE("Layers split evenly across pipeline stages", "[identity][slice]") {
  for (std::uint32_t pp : {1u, 2u, 4u, 7u, 28u}) {
    for (std::uint32_t r = 0; r < pp; ++r) {
      CAPTURE(pp, r);
      CHECK(slice_of(4, 28, 1, 0, pp, r) == heads_layers(0, 4, r * 28 / pp, (r + 1) * 28 / pp));
    }
  }
  CHECK(slice_of(8, 28, 4, 2, 2, 1) == heads_layers(4, 6, 14, 28));
}

TEST_CASE("Replicas share keys and object hashes and other slices never do", "[identity][slice]") {
  Identity id = base_identity();
  id.kv.num_kv_heads = 2;
  const auto toks = kvkey_test::tokens(5 * id.kv.block_size + 3);

  auto ns_for = [&](std::uint32_t tp, std::uint32_t rank, std::uint32_t pp = 1, std::uint32_t pp_rank = 0) {
    Identity x = id;
    x.shard = kvkey::Shard{tp, rank, pp, pp_rank};
    return kvkey::KeyNamespace<>(x);
  };
  const auto reference = ns_for(1, 0).block_hashes(toks);
  REQUIRE(reference.size() == 5);

  // Every (tp, rank, pp, pp_rank) that is valid for H = 2, 28 layers.
  struct Rank {
    std::uint32_t tp, rank, pp, pp_rank;
  };
  std::vector<Rank> ranks;
  for (std::uint32_t tp : {1u, 2u, 4u, 8u}) {
    for (std::uint32_t pp : {1u, 2u}) {
      for (std::uint32_t r = 0; r < tp; ++r) {
        for (std::uint32_t p = 0; p < pp; ++p) ranks.push_back({tp, r, pp, p});
      }
    }
  }
  std::vector<kvkey::Slice> slices;
  std::vector<std::vector<std::string>> keys;
  std::vector<std::vector<kvkey::Digest>> objects;
  for (const auto& r : ranks) {
    const auto ns = ns_for(r.tp, r.rank, r.pp, r.pp_rank);
    const auto hashes = ns.block_hashes(toks);
    CHECK(hashes == reference);  // the root excludes the shard: block hashes are rank-independent
    CHECK(ns.root() == ns_for(1, 0).root());
    slices.push_back(ns.slice());
    keys.emplace_back();
    objects.emplace_back();
    for (const auto& h : hashes) {
      keys.back().push_back(ns.store_key(h));
      objects.back().push_back(ns.object_hash(h));
    }
  }
  std::size_t same = 0;
  std::size_t different = 0;
  for (std::size_t i = 0; i < ranks.size(); ++i) {
    for (std::size_t j = 0; j < ranks.size(); ++j) {
      CAPTURE(ranks[i].tp, ranks[i].rank, ranks[i].pp, ranks[i].pp_rank, ranks[j].tp, ranks[j].rank, ranks[j].pp,
              ranks[j].pp_rank);
      if (slices[i] == slices[j]) {
        ++same;
        CHECK(keys[i] == keys[j]);
        CHECK(objects[i] == objects[j]);
      } else {
        ++different;
        for (std::size_t b = 0; b < reference.size(); ++b) {
          for (std::size_t c = 0; c < reference.size(); ++c) {
            CHECK(keys[i][b] != keys[j][c]);
            CHECK(objects[i][b] != objects[j][c]);
          }
        }
      }
    }
  }
  CHECK(same > ranks.size());  // some replicas besides each rank with itself
  CHECK(different > 0);

  SECTION("the brief's example: H = 2, tp = 4 rank 1 and tp = 8 rank 3 are replicas of head 0") {
    const auto a = ns_for(4, 1);
    const auto b = ns_for(8, 3);
    CHECK(a.slice() == b.slice());
    CHECK(a.store_key(reference[2]) == b.store_key(reference[2]));
    CHECK(a.object_hash(reference[2]) == b.object_hash(reference[2]));
    const auto c = ns_for(8, 4);  // head 1
    CHECK(a.store_key(reference[2]) != c.store_key(reference[2]));
    // Replica headers are interchangeable; the other slice is named "shard".
    const auto header = a.seal(reference[2], kvkey_test::test_payload(4096));
    CHECK(b.verify(header, reference[2], kvkey_test::test_payload(4096)).ok());
    const auto v = c.verify(header, reference[2], kvkey_test::test_payload(4096));
    CHECK(v.reason == kvkey::Reason::identity_mismatch);
    CHECK(v.field == "shard");
  }
}

TEST_CASE("Identities compare member by member", "[identity]") {
  const Identity a = rich_identity();
  Identity b = a;
  CHECK(a == b);
  CHECK_FALSE(a != b);
  CHECK(Identity{} == Identity{});
  const std::vector<std::function<void(Identity&)>> changes = {
      [](Identity& i) { i.tenant += "x"; },
      [](Identity& i) { i.model.name += "x"; },
      [](Identity& i) { i.model.revision += "x"; },
      [](Identity& i) { ++i.model.weights_epoch; },
      [](Identity& i) { i.model.weights_fingerprint.reset(); },
      [](Identity& i) { i.model.positional_fingerprint = kvkey::fingerprint("rope_theta 10000"); },
      [](Identity& i) { i.kv.dtype = kvkey::KvDtype::fp32; },
      [](Identity& i) { i.kv.quant.scheme += "x"; },
      [](Identity& i) { ++i.kv.quant.group_size; },
      [](Identity& i) { i.kv.quant.scale_dtype.reset(); },
      [](Identity& i) { i.kv.quant.zero_point = !i.kv.quant.zero_point; },
      [](Identity& i) { i.kv.quant.scales_fingerprint.reset(); },
      [](Identity& i) { ++i.kv.block_size; },
      [](Identity& i) { ++i.kv.num_layers; },
      [](Identity& i) { ++i.kv.num_kv_heads; },
      [](Identity& i) { ++i.kv.head_dim; },
      [](Identity& i) { i.kv.layout += "x"; },
      [](Identity& i) { i.kv.mla = !i.kv.mla; },
      [](Identity& i) { ++i.shard.tp_size; },
      [](Identity& i) { ++i.shard.tp_rank; },
      [](Identity& i) { ++i.shard.pp_size; },
      [](Identity& i) { ++i.shard.pp_rank; },
      [](Identity& i) { i.adapter->name += "x"; },
      [](Identity& i) { i.adapter->weights_fingerprint = kvkey::fingerprint("other"); },
      [](Identity& i) { i.adapter.reset(); },
  };
  // One change per salient field (the visitor's list) and per shard member: a
  // field added to the identity fails here until == compares it.
  CHECK(changes.size() == kvkey::identity_field_names().size() + 4);
  for (std::size_t k = 0; k < changes.size(); ++k) {
    INFO("change " << k);
    b = a;
    changes[k](b);
    CHECK(a != b);
    CHECK_FALSE(a == b);
  }
}
