// Confidential namespaces (format v4, docs/format.md "Mode aes256_gcm"): a
// keyed namespace whose payloads are stored as AES-256-GCM ciphertext under a
// key derived (HKDF-SHA-256) from the tenant secret for that purpose alone.
// A value that does not authenticate is a miss named as for any keyed value,
// and no unauthenticated plaintext reaches the caller's buffers.
#include "support/fixtures.hpp"

#include "kvkey/any_key_namespace.hpp"
#include "kvkey/connector.hpp"
#include "kvkey/store.hpp"

#include <catch2/catch.hpp>
#include <openssl/core_names.h>
#include <openssl/evp.h>
#include <openssl/kdf.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <vector>

namespace {

using kvkey::Bytes;
using kvkey::Payload;
using kvkey::Reason;
using kvkey_test::ByteVec;
namespace L = kvkey::envelope_layout;

using Keyed = kvkey::KeyNamespace<kvkey::HmacSha256>;
using Plain = kvkey::KeyNamespace<>;

kvkey::Policy confidential() {
  kvkey::Policy p;
  p.confidential = true;
  return p;
}

Bytes pattern(std::size_t n, std::uint32_t seed) {
  Bytes b(n);
  std::mt19937 rng(seed);
  for (auto& x : b) x = static_cast<std::uint8_t>(rng());
  return b;
}

std::string secret_text(char c) { return std::string(40, c); }
kvkey::TenantSecret secret(char c) { return kvkey::TenantSecret(secret_text(c)); }

void check_verdict(const kvkey::Verdict& v, Reason r, const std::string& field) {
  CHECK(kvkey::to_string(v.reason) == kvkey::to_string(r));
  CHECK(v.field == field);
}

kvkey::Identity with_tenant(kvkey::Identity id, std::string tenant) {
  id.tenant = std::move(tenant);
  return id;
}

// The reference of docs/format.md, with OpenSSL's HKDF and AES-256-GCM
// directly: decrypts a confidential value, nullopt when the tag fails.
std::optional<Bytes> reference_open(const std::string& secret, const kvkey::Digest& root, const Bytes& value) {
  const std::uint8_t* nonce = value.data() + L::nonce;
  std::uint8_t info[37];
  info[0] = 'C';
  std::memcpy(info + 1, root.data(), 32);
  std::memcpy(info + 33, nonce, 4);
  EVP_KDF* kdf = EVP_KDF_fetch(nullptr, "HKDF", nullptr);
  EVP_KDF_CTX* kctx = EVP_KDF_CTX_new(kdf);
  std::string salt = "kvkey v4 confidential";
  char digest[] = "SHA256";
  OSSL_PARAM params[] = {
      OSSL_PARAM_construct_utf8_string(OSSL_KDF_PARAM_DIGEST, digest, 0),
      OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_KEY, const_cast<char*>(secret.data()), secret.size()),
      OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_SALT, salt.data(), salt.size()),
      OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_INFO, info, sizeof info), OSSL_PARAM_construct_end()};
  std::uint8_t key[32];
  REQUIRE(EVP_KDF_derive(kctx, key, sizeof key, params) == 1);
  EVP_KDF_CTX_free(kctx);
  EVP_KDF_free(kdf);
  Bytes aad(value.begin(), value.begin() + kvkey::envelope_size);
  std::fill(aad.begin() + L::payload_digest, aad.begin() + L::payload_digest + 16, std::uint8_t{0});
  std::uint8_t tag[16];
  std::memcpy(tag, value.data() + L::payload_digest, 16);
  Bytes out(value.size() - kvkey::envelope_size);
  EVP_CIPHER_CTX* ctx = EVP_CIPHER_CTX_new();
  int len = 0;
  REQUIRE(EVP_DecryptInit_ex(ctx, EVP_aes_256_gcm(), nullptr, key, nonce + 4) == 1);
  REQUIRE(EVP_DecryptUpdate(ctx, nullptr, &len, aad.data(), static_cast<int>(aad.size())) == 1);
  REQUIRE(EVP_DecryptUpdate(ctx, out.data(), &len, value.data() + kvkey::envelope_size, static_cast<int>(out.size())) ==
          1);
  REQUIRE(EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_SET_TAG, 16, tag) == 1);
  const bool ok = EVP_DecryptFinal_ex(ctx, nullptr, &len) == 1;
  EVP_CIPHER_CTX_free(ctx);
  if (!ok) return std::nullopt;
  return out;
}

}  // namespace

TEST_CASE("confidential: a value is ciphertext that the independent reference opens", "[confidential][payload]") {
  const kvkey::Identity id = kvkey_test::base_identity();
  const Keyed ns{id, secret('c'), confidential()};
  CHECK(ns.confidential());
  CHECK(ns.integrity_mode() == kvkey::IntegrityMode::aes256_gcm);
  CHECK(ns.key_prefix().rfind("kvk4/" + id.tenant + "/c" + ns.secret_id()->hex() + "/", 0) == 0);
  const Keyed keyed{id, secret('c')};
  CHECK(!keyed.confidential());
  CHECK(keyed.secret_prefix() == "kvk4/" + id.tenant + "/k" + ns.secret_id()->hex() + "/");
  CHECK(ns.secret_prefix() == "kvk4/" + id.tenant + "/c" + ns.secret_id()->hex() + "/");
  CHECK(ns.root() == keyed.root());  // the same chain: only the key segment and the payload differ

  const kvkey::Digest block = ns.block_hashes(kvkey_test::tokens(64)).at(0);
  for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{15}, std::size_t{16}, std::size_t{4097}}) {
    CAPTURE(n);
    const Bytes p = pattern(n, 7);
    const Bytes value = ns.seal_value(block, Payload(p.data(), p.size()));
    REQUIRE(value.size() == kvkey::envelope_size + n);
    CHECK(value[L::integrity_mode] == 3);
    CHECK(kvkey::detail::load_u64(value.data() + L::payload_size) == n);
    if (n >= 16) CHECK(Bytes(value.begin() + kvkey::envelope_size, value.end()) != p);
    const kvkey::OpenedValue o = ns.open_value(value, block);
    REQUIRE(o.ok());
    REQUIRE(o.plaintext);
    CHECK(Bytes(static_cast<const std::uint8_t*>(o.payload.data),
                static_cast<const std::uint8_t*>(o.payload.data) + o.payload.size) == p);
    const std::optional<Bytes> ref = reference_open(secret_text('c'), ns.root(), value);
    REQUIRE(ref);
    CHECK(*ref == p);
    // verify() authenticates the stored (encrypted) bytes.
    CHECK(ns.verify(value.data(), kvkey::envelope_size, block,
                    Payload(value.data() + kvkey::envelope_size, value.size() - kvkey::envelope_size))
              .ok());
    const kvkey::ParsedEnvelope parsed = kvkey::parse_envelope(value.data(), kvkey::envelope_size);
    REQUIRE(parsed.contents);
    CHECK(parsed.contents->integrity == kvkey::IntegrityMode::aes256_gcm);
  }
}

TEST_CASE("confidential: per-layer parts and sealing in place give the same plaintext", "[confidential][payload]") {
  const Keyed ns{kvkey_test::base_identity(), secret('c'), confidential()};
  const kvkey::Digest block = ns.block_hashes(kvkey_test::tokens(64)).at(0);
  const Bytes whole = pattern(3 * 1000 + 7, 9);
  const kvkey::ConstBuffer parts[] = {{whole.data(), 1000}, {whole.data() + 1000, 0}, {whole.data() + 1000, 2007}};
  const Bytes value = ns.seal_value(block, Payload(parts, 3));
  const kvkey::OpenedValue o = ns.open_value(value, block);
  REQUIRE(o.ok());
  CHECK(Bytes(static_cast<const std::uint8_t*>(o.payload.data),
              static_cast<const std::uint8_t*>(o.payload.data) + o.payload.size) == whole);
  // In place: the payload already at out + envelope_size is encrypted there.
  Bytes slot(kvkey::envelope_size + whole.size());
  std::copy(whole.begin(), whole.end(), slot.begin() + kvkey::envelope_size);
  REQUIRE(ns.seal_value(block, Payload(slot.data() + kvkey::envelope_size, whole.size()), slot.data(), slot.size()) ==
          slot.size());
  CHECK(Bytes(slot.begin() + kvkey::envelope_size, slot.end()) != whole);
  const kvkey::OpenedValue in = ns.open_in_place(slot.data(), slot.size(), block);
  REQUIRE(in.ok());
  CHECK(in.payload.data == slot.data() + kvkey::envelope_size);
  CHECK(Bytes(slot.begin() + kvkey::envelope_size, slot.end()) == whole);
}

TEST_CASE("confidential: every rejection is a named miss and leaves no plaintext", "[confidential][security]") {
  const kvkey::Identity id = kvkey_test::base_identity();
  const Keyed ns{id, secret('c'), confidential()};
  const kvkey::Digest block = ns.block_hashes(kvkey_test::tokens(64)).at(0);
  const Bytes p = pattern(2048, 11);
  const Bytes value = ns.seal_value(block, Payload(p.data(), p.size()));

  const auto rejected = [&](const Keyed& reader, const Bytes& v, Reason r, const std::string& field) {
    const kvkey::OpenedValue o = reader.open_value(v, block);
    check_verdict(o.verdict, r, field);
    CHECK(o.payload.data == nullptr);
    CHECK(!o.plaintext);
    Bytes copy = v;
    const kvkey::OpenedValue in = reader.open_in_place(copy.data(), copy.size(), block);
    check_verdict(in.verdict, r, field);
    CHECK(copy == v);  // left exactly as it was: no plaintext, no partial decryption
  };
  SECTION("read with another secret of the tenant, or another tenant's secret") {
    rejected(Keyed{id, secret('d'), confidential()}, value, Reason::identity_mismatch, "tenant.secret_id");
    const Keyed other{with_tenant(id, "other-tenant"), secret('c'), confidential()};
    CHECK(other.store_key(block) != ns.store_key(block));
    rejected(other, value, Reason::identity_mismatch, "tenant");
  }
  SECTION("read without the secret: plain and keyed readers") {
    const Plain plain{id};
    check_verdict(plain.open_value(value, block).verdict, Reason::identity_mismatch, "envelope.namespace_kind");
    rejected(Keyed{id, secret('c')}, value, Reason::payload_mismatch, "envelope.integrity_mode");
    const Keyed keyed{id, secret('c')};
    const Bytes poly = keyed.seal_value(block, Payload(p.data(), p.size()));
    rejected(ns, poly, Reason::payload_mismatch, "envelope.integrity_mode");
  }
  SECTION("a flipped byte in the header, the nonce, the tag or the ciphertext") {
    struct Flip {
      std::size_t offset;
      Reason reason;
      const char* field;
    };
    const Flip flips[] = {
        {L::block_hash + 3, Reason::block_mismatch, "block_hash"},
        {L::identity + 14, Reason::identity_mismatch, "tenant"},  // the tenant's first byte
        {L::nonce, Reason::payload_mismatch, "payload"},          // the key selector
        {L::nonce + 9, Reason::payload_mismatch, "payload"},      // the GCM nonce
        {L::payload_digest + 15, Reason::payload_mismatch, "payload"},
        {kvkey::envelope_size, Reason::payload_mismatch, "payload"},
        {kvkey::envelope_size + 2047, Reason::payload_mismatch, "payload"},
        {L::reserved + 1, Reason::malformed, "envelope.padding"},
        {L::secret_id, Reason::identity_mismatch, "tenant.secret_id"},
    };
    for (const Flip& f : flips) {
      CAPTURE(f.offset);
      Bytes v = value;
      v[f.offset] ^= 0x01;
      const kvkey::OpenedValue o = ns.open_value(v, block);
      CHECK(!o.ok());
      CHECK(kvkey::to_string(o.verdict.reason) == kvkey::to_string(f.reason));
      if (*f.field != '\0') CHECK(o.verdict.field == f.field);
      CHECK(!o.plaintext);
      Bytes copy = v;
      CHECK(!ns.open_in_place(copy.data(), copy.size(), block).ok());
      CHECK(copy == v);
      CHECK(!ns.verify(v.data(), kvkey::envelope_size, block,
                       Payload(v.data() + kvkey::envelope_size, v.size() - kvkey::envelope_size))
                 .ok());
    }
  }
  SECTION("a truncated or extended value") {
    Bytes shorter(value.begin(), value.end() - 1);
    rejected(ns, shorter, Reason::size_mismatch, "payload_size");
    Bytes longer = value;
    longer.push_back(0);
    rejected(ns, longer, Reason::size_mismatch, "payload_size");
    Bytes header_only(value.begin(), value.begin() + 100);
    check_verdict(ns.open_value(header_only, block).verdict, Reason::malformed, "envelope.size");
  }
}

TEST_CASE("confidential: nonces never repeat over many seals", "[confidential][security]") {
  const Keyed ns{kvkey_test::base_identity(), secret('c'), confidential()};
  const kvkey::Digest block = ns.block_hashes(kvkey_test::tokens(64)).at(0);
  const Bytes p = pattern(16, 3);
  std::set<Bytes> nonces;
  std::set<Bytes> ciphertexts;
  constexpr int seals = 20000;
  for (int i = 0; i < seals; ++i) {
    const Bytes v = ns.seal_value(block, Payload(p.data(), p.size()));
    nonces.emplace(v.begin() + L::nonce, v.begin() + L::nonce + 16);
    ciphertexts.emplace(v.begin() + kvkey::envelope_size, v.end());
  }
  CHECK(nonces.size() == seals);
  CHECK(ciphertexts.size() == seals);  // the same plaintext never gives the same ciphertext
}

TEST_CASE("confidential: header-only sealing is refused, and a plain namespace cannot be confidential",
          "[confidential][misuse]") {
  const kvkey::Identity id = kvkey_test::base_identity();
  const Keyed ns{id, secret('c'), confidential()};
  const kvkey::Digest block = ns.block_hashes(kvkey_test::tokens(64)).at(0);
  const Bytes p = pattern(64, 1);
  CHECK_THROWS_AS(ns.seal(block, Payload(p.data(), p.size())), kvkey::input_error);
  CHECK_THROWS_AS(ns.sealer(block), kvkey::input_error);
  const Bytes value = ns.seal_value(block, Payload(p.data(), p.size()));
  CHECK_THROWS_AS(ns.verifier(value.data(), kvkey::envelope_size, block), kvkey::input_error);
  CHECK_THROWS_AS(ns.seal(block, std::uint64_t{64}), kvkey::input_error);
  // Size-only and header-only checks never accept a payload they did not authenticate.
  check_verdict(ns.verify(value.data(), kvkey::envelope_size, block, std::uint64_t{64}), Reason::payload_mismatch,
                "payload");
  CHECK(ns.verify_header(value.data(), kvkey::envelope_size, block).ok());
  try {
    (void)Plain(id, confidential());
    FAIL("a plain confidential namespace was built");
  } catch (const kvkey::identity_error& e) {
    CHECK(e.field() == "confidential");
  }
  // The kind follows the namespace through with_epoch and for_rank.
  CHECK(ns.with_epoch(5).confidential());
  CHECK(ns.for_rank(0).confidential());
  const kvkey::AnyKeyNamespace any(id, secret('c'), confidential());
  CHECK(any.confidential());
  CHECK(any.open_value(value.data(), value.size(), block).ok());
}

namespace {

// Reads into the memory the connector offers (staging or slots), like a store
// with registered memory.
struct IntoStore : kvkey::MemoryStore {
  bool reads_into() const noexcept override { return true; }
  std::vector<kvkey::StoreValue> read_into(const std::vector<std::string>& keys,
                                           const std::vector<kvkey::MutableBuffer>& into) override {
    std::vector<kvkey::StoreValue> out(keys.size());
    for (std::size_t i = 0; i < keys.size(); ++i) {
      const std::optional<Bytes> v = get(keys[i]);
      if (!v) continue;
      std::memcpy(into[i].data, v->data(), std::min(v->size(), into[i].size));
      out[i].present = true;
      out[i].data = static_cast<const std::uint8_t*>(into[i].data);
      out[i].size = v->size();
    }
    return out;
  }
};

kvkey::Identity small_identity() {
  kvkey::Identity id = kvkey_test::base_identity();
  id.kv.block_size = 4;
  id.kv.num_layers = 2;
  id.kv.num_kv_heads = 1;
  id.kv.head_dim = 8;
  return id;
}

}  // namespace

TEST_CASE("confidential: save, load, load_into (per-layer parts) and the zero-copy path", "[confidential][connector]") {
  const Keyed ns{small_identity(), secret('c'), confidential()};
  const std::size_t n = static_cast<std::size_t>(*ns.payload_size());
  const std::vector<kvkey::Digest> blocks = ns.block_hashes(kvkey_test::tokens(12));
  REQUIRE(blocks.size() == 3);
  std::vector<Bytes> ps;
  std::vector<kvkey::Payload> views;
  for (std::uint32_t i = 0; i < 3; ++i) ps.push_back(pattern(n, 40 + i));
  for (const Bytes& b : ps) views.emplace_back(b.data(), b.size());

  for (int staged = 0; staged < 2; ++staged) {
    CAPTURE(staged);
    IntoStore into;
    kvkey::MemoryStore memory;
    kvkey::Store& store = staged ? static_cast<kvkey::Store&>(into) : memory;
    kvkey::MemoryStore& map = staged ? static_cast<kvkey::MemoryStore&>(into) : memory;
    const kvkey::Connector<kvkey::HmacSha256> c(store, ns);
    REQUIRE(c.save(blocks, views) == 3);
    for (std::size_t i = 0; i < 3; ++i) {
      const std::optional<Bytes> v = map.get(ns.store_key(blocks[i]));
      REQUIRE(v);
      CHECK(v->at(L::integrity_mode) == 3);
      CHECK(std::search(v->begin(), v->end(), ps[i].begin(), ps[i].begin() + 16) == v->end());  // not in the clear
    }
    CHECK(c.lookup(blocks) == 3);
    const auto loaded = c.load(blocks);
    for (std::size_t i = 0; i < 3; ++i) CHECK(loaded[i] == ps[i]);

    // Damage block 1's ciphertext.
    std::optional<Bytes> v1 = map.get(ns.store_key(blocks[1]));
    (*v1)[kvkey::envelope_size + 5] ^= 0x80;
    map.put(ns.store_key(blocks[1]), v1->data(), v1->size());

    // Per-layer destinations: two parts per block.
    std::vector<Bytes> dst(6, Bytes(n / 2, 0xEE));
    std::vector<std::vector<kvkey::MutableBuffer>> d(3);
    for (std::size_t i = 0; i < 3; ++i) {
      d[i] = {{dst[2 * i].data(), n / 2}, {dst[2 * i + 1].data(), n - n / 2}};
    }
    const auto r = c.load_into(blocks, d);
    CHECK(r[0].loaded());
    CHECK(r[2].loaded());
    check_verdict(r[1].verdict, Reason::payload_mismatch, "payload");
    for (std::size_t i : {std::size_t{0}, std::size_t{2}}) {
      Bytes joined = dst[2 * i];
      joined.insert(joined.end(), dst[2 * i + 1].begin(), dst[2 * i + 1].end());
      CHECK(joined == ps[i]);
    }
    CHECK(dst[2] == Bytes(n / 2, 0xEE));  // the rejected block's destination untouched
    CHECK(dst[3] == Bytes(n / 2, 0xEE));

    // Zero-copy: values read into the slots, opened there.
    kvkey::Slots slots(store, 3, n);
    const auto z = c.load_into(blocks, slots);
    CHECK(z[0].loaded());
    CHECK(z[2].loaded());
    CHECK(!z[1].loaded());
    for (std::size_t i : {std::size_t{0}, std::size_t{2}}) {
      const auto* q = static_cast<const std::uint8_t*>(slots.payload(i).data);
      CHECK(Bytes(q, q + n) == ps[i]);
    }
    if (staged) {  // the rejected slot holds the bytes as read: the ciphertext, no plaintext
      const auto* q = static_cast<const std::uint8_t*>(slots.value(1).data);
      CHECK(Bytes(q, q + kvkey::envelope_size + n) == *v1);
    }
    // save_from seals in place in the slots.
    kvkey::Slots out(store, 3, n);
    for (std::size_t i = 0; i < 3; ++i) std::memcpy(out.payload(i).data, ps[i].data(), n);
    CHECK(c.save_from(blocks, out) == 3);
    const auto again = c.load(blocks);
    for (std::size_t i = 0; i < 3; ++i) CHECK(again[i] == ps[i]);
  }
}
