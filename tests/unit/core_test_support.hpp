// Shared helpers of the core unit tests: sample identities, token sequences, and
// an independent reference of the byte formats (docs/format.md) written from the
// specification with raw OpenSSL, without kvkey's encoder, to check kvkey against.
#ifndef KVKEY_TESTS_CORE_TEST_SUPPORT_HPP
#define KVKEY_TESTS_CORE_TEST_SUPPORT_HPP

#include <kvkey/kvkey.hpp>

#include <openssl/evp.h>
#include <xxhash.h>
// The reference hashes payloads with libxxhash's portable XXH3_128bits, not
// the runtime-dispatched entry point kvkey uses.
#undef XXH3_128bits

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

namespace core_test {

using ByteVec = std::vector<std::uint8_t>;

/// A small valid identity: no optionals, quant "none", tp = pp = 1.
inline kvkey::Identity base_identity() {
  kvkey::Identity id;
  id.tenant = "team-a";
  id.model.name = "Qwen/Qwen2.5-7B-Instruct";
  id.model.revision = "a09a35458c702b33eeacc393d103063234e8bc28";
  id.model.weights_epoch = 0;
  id.kv.dtype = kvkey::KvDtype::fp16;
  id.kv.block_size = 16;
  id.kv.num_layers = 28;
  id.kv.num_kv_heads = 4;
  id.kv.head_dim = 128;
  id.kv.layout = "lmdeploy.v1.layer_major";
  return id;
}

/// A valid identity with every optional present, a quantization scheme and a
/// 2-way tensor-parallel shard.
inline kvkey::Identity rich_identity() {
  kvkey::Identity id = base_identity();
  id.model.weights_epoch = 7;
  id.model.weights_fingerprint = kvkey::fingerprint("weights v7");
  id.model.positional_fingerprint = kvkey::fingerprint("rope_theta 1000000");
  id.kv.dtype = kvkey::KvDtype::int8;
  id.kv.quant.scheme = "per_token_asym";
  id.kv.quant.group_size = 64;
  id.kv.quant.scale_dtype = kvkey::KvDtype::fp16;
  id.kv.quant.zero_point = true;
  id.kv.quant.scales_fingerprint = kvkey::fingerprint("scales v1");
  id.shard.tp_size = 2;
  id.shard.tp_rank = 1;
  id.adapter = kvkey::Adapter("sql-lora", kvkey::fingerprint("sql-lora weights"));
  return id;
}

/// n deterministic token ids in [0, 151936), varied by seed.
inline std::vector<std::int32_t> tokens(std::size_t n, std::uint32_t seed = 1) {
  std::vector<std::int32_t> t(n);
  std::uint64_t x = 0x9e3779b97f4a7c15ull * (seed + 1);
  for (auto& v : t) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    v = static_cast<std::int32_t>(x % 151936);
  }
  return t;
}

/// A view of the first n bytes (at most 4 MiB) of a fixed byte pattern: the
/// payload the tests seal and verify.
inline kvkey::Payload test_payload(std::size_t n) {
  static const std::vector<std::uint8_t> bytes = [] {
    std::vector<std::uint8_t> b(std::size_t{4} << 20);
    for (std::size_t i = 0; i < b.size(); ++i) b[i] = static_cast<std::uint8_t>((i * 131 + 7) >> 3);
    return b;
  }();
  if (n > bytes.size()) throw std::invalid_argument("test_payload: at most 4 MiB");
  return {bytes.data(), n};
}

// ---- bytes and hex ---------------------------------------------------------------

inline std::string to_hex(const std::uint8_t* p, std::size_t n) {
  static constexpr char digits[] = "0123456789abcdef";
  std::string s;
  s.reserve(2 * n);
  for (std::size_t i = 0; i < n; ++i) {
    s.push_back(digits[p[i] >> 4]);
    s.push_back(digits[p[i] & 0x0f]);
  }
  return s;
}
template <class C>
std::string to_hex(const C& c) {
  return to_hex(c.data(), c.size());
}

inline ByteVec bytes_from_hex(std::string_view hex) {
  auto nib = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    throw std::invalid_argument("not lowercase hex");
  };
  if (hex.size() % 2 != 0) throw std::invalid_argument("odd hex length");
  ByteVec out(hex.size() / 2);
  for (std::size_t i = 0; i < out.size(); ++i) {
    out[i] = static_cast<std::uint8_t>(nib(hex[2 * i]) << 4 | nib(hex[2 * i + 1]));
  }
  return out;
}

// ---- the reference: the byte formats of docs/format.md, written by hand -------------

namespace ref {

/// SHA-256 straight from OpenSSL's one-shot EVP_Digest.
inline ByteVec sha256(const ByteVec& m) {
  ByteVec out(EVP_MAX_MD_SIZE);
  unsigned int len = 0;
  if (EVP_Digest(m.data(), m.size(), out.data(), &len, EVP_sha256(), nullptr) != 1 || len != 32) {
    throw std::runtime_error("EVP_Digest failed");
  }
  out.resize(len);
  return out;
}

inline void u8(ByteVec& m, std::uint8_t v) { m.push_back(v); }
inline void u16le(ByteVec& m, std::uint16_t v) {
  m.push_back(static_cast<std::uint8_t>(v & 0xff));
  m.push_back(static_cast<std::uint8_t>(v >> 8));
}
inline void u32le(ByteVec& m, std::uint32_t v) {
  m.push_back(static_cast<std::uint8_t>(v & 0xff));
  m.push_back(static_cast<std::uint8_t>((v >> 8) & 0xff));
  m.push_back(static_cast<std::uint8_t>((v >> 16) & 0xff));
  m.push_back(static_cast<std::uint8_t>((v >> 24) & 0xff));
}
inline void u64le(ByteVec& m, std::uint64_t v) {
  u32le(m, static_cast<std::uint32_t>(v & 0xffffffffu));
  u32le(m, static_cast<std::uint32_t>(v >> 32));
}
inline void raw(ByteVec& m, const void* p, std::size_t n) {
  const auto* b = static_cast<const std::uint8_t*>(p);
  m.insert(m.end(), b, b + n);
}
inline void raw(ByteVec& m, const ByteVec& b) { m.insert(m.end(), b.begin(), b.end()); }
inline void str(ByteVec& m, const std::string& s) {
  u32le(m, static_cast<std::uint32_t>(s.size()));
  raw(m, s.data(), s.size());
}
inline void digest(ByteVec& m, const kvkey::Digest& d) { raw(m, d.data(), 32); }
inline void opt_digest(ByteVec& m, const std::optional<kvkey::Digest>& d) {
  u8(m, d ? 1 : 0);
  if (d) digest(m, *d);
}
inline void dtype(ByteVec& m, kvkey::KvDtype d) { u8(m, static_cast<std::uint8_t>(d)); }

/// The identity encoding: "kvkey.id", u16le version 2, the fields in order.
/// `id` must already carry the encoded tenant ("_single" under single_tenant).
inline ByteVec identity_encoding(const kvkey::Identity& id) {
  ByteVec m;
  raw(m, "kvkey.id", 8);
  u16le(m, 2);
  str(m, id.tenant);
  str(m, id.model.name);
  str(m, id.model.revision);
  u64le(m, id.model.weights_epoch);
  opt_digest(m, id.model.weights_fingerprint);
  opt_digest(m, id.model.positional_fingerprint);
  dtype(m, id.kv.dtype);
  str(m, id.kv.quant.scheme);
  u32le(m, id.kv.quant.group_size);
  u8(m, id.kv.quant.scale_dtype ? 1 : 0);
  if (id.kv.quant.scale_dtype) dtype(m, *id.kv.quant.scale_dtype);
  u8(m, id.kv.quant.zero_point ? 1 : 0);
  opt_digest(m, id.kv.quant.scales_fingerprint);
  u32le(m, id.kv.block_size);
  u32le(m, id.kv.num_layers);
  u32le(m, id.kv.num_kv_heads);
  u32le(m, id.kv.head_dim);
  str(m, id.kv.layout);
  u8(m, id.kv.mla ? 1 : 0);
  u8(m, id.adapter ? 1 : 0);
  if (id.adapter) {
    str(m, id.adapter->name);
    digest(m, id.adapter->weights_fingerprint);
  }
  return m;
}

inline ByteVec first_parent(const ByteVec& root, const std::string& salt) {
  if (salt.empty()) return root;
  ByteVec m;
  u8(m, 'S');
  raw(m, root);
  str(m, salt);
  return sha256(m);
}

/// Message of block i: 'B' || parent || tokens (u32le) || u32le n || extras.
inline ByteVec block_message(const ByteVec& parent, const std::uint32_t* block_tokens, std::size_t block_size,
                             std::size_t block_index, std::vector<kvkey::ExtraKey> extras) {
  ByteVec m;
  u8(m, 'B');
  raw(m, parent);
  for (std::size_t j = 0; j < block_size; ++j) u32le(m, block_tokens[j]);
  const std::uint64_t lo = block_index * block_size;
  const std::uint64_t hi = lo + block_size;
  std::vector<kvkey::ExtraKey> hit;
  for (const auto& e : extras) {
    if (e.token_begin < hi && e.token_end > lo) hit.push_back(e);
  }
  std::sort(hit.begin(), hit.end(), [](const kvkey::ExtraKey& a, const kvkey::ExtraKey& b) {
    return std::tie(a.token_begin, a.token_end, a.key) < std::tie(b.token_begin, b.token_end, b.key);
  });
  u32le(m, static_cast<std::uint32_t>(hit.size()));
  for (const auto& e : hit) {
    u64le(m, e.token_begin);
    u64le(m, e.token_end);
    str(m, e.key);
  }
  return m;
}

/// Every full block's hash, block by block from the spec.
inline std::vector<ByteVec> block_hashes(const ByteVec& root, const std::vector<std::uint32_t>& toks,
                                         std::size_t block_size, const std::string& salt = {},
                                         const std::vector<kvkey::ExtraKey>& extras = {}) {
  std::vector<ByteVec> out;
  ByteVec parent = first_parent(root, salt);
  for (std::size_t b = 0; (b + 1) * block_size <= toks.size(); ++b) {
    parent = sha256(block_message(parent, toks.data() + b * block_size, block_size, b, extras));
    out.push_back(parent);
  }
  return out;
}

inline ByteVec object_message(const ByteVec& block_hash, const kvkey::Slice& s) {
  ByteVec m;
  u8(m, 'O');
  raw(m, block_hash);
  u32le(m, s.kv_head_begin);
  u32le(m, s.kv_head_end);
  u32le(m, s.layer_begin);
  u32le(m, s.layer_end);
  return m;
}

inline std::string model_segment(const std::string& name) {
  static constexpr char hex[] = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : name) {
    std::string piece;
    if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
        c == '-') {
      piece = std::string(1, static_cast<char>(c));
    } else {
      piece = {'%', hex[c / 16], hex[c % 16]};
    }
    if (out.size() + piece.size() > 96) break;
    out += piece;
  }
  return out;
}

inline std::string store_key(const std::string& tenant, const std::string& model_name, std::uint64_t epoch,
                             const ByteVec& object_hash) {
  return "kvk1/" + tenant + "/" + model_segment(model_name) + "/e" + std::to_string(epoch) + "/" +
         to_hex(object_hash);
}

/// XXH3-128 of the bytes, canonical (big-endian high64 then low64).
inline ByteVec xxh3_128(const ByteVec& payload) {
  const XXH128_hash_t h = XXH3_128bits(payload.data(), payload.size());
  ByteVec out;
  for (int i = 7; i >= 0; --i) out.push_back(static_cast<std::uint8_t>(h.high64 >> (8 * i)));
  for (int i = 7; i >= 0; --i) out.push_back(static_cast<std::uint8_t>(h.low64 >> (8 * i)));
  return out;
}

/// Integrity fields of an envelope: kind (1 plain, 2 keyed), mode (0 none,
/// 1 xxh3_128, 2 poly1305), nonce and digest/tag (16 bytes each).
struct Integrity {
  std::uint8_t kind = 1;
  std::uint8_t mode = 1;
  ByteVec nonce = ByteVec(16, 0);
  ByteVec digest = ByteVec(16, 0);
};

/// The 1024-byte envelope.
inline ByteVec envelope(const ByteVec& identity_encoding, const ByteVec& block_hash, std::uint64_t payload_size,
                        const kvkey::Slice& s, const Integrity& in) {
  ByteVec m;
  raw(m, "KVKEYENV", 8);
  u16le(m, 2);
  u16le(m, 1024);
  u32le(m, static_cast<std::uint32_t>(identity_encoding.size()));
  raw(m, block_hash);
  u64le(m, payload_size);
  u32le(m, s.kv_head_begin);
  u32le(m, s.kv_head_end);
  u32le(m, s.layer_begin);
  u32le(m, s.layer_end);
  u8(m, in.kind);
  u8(m, in.mode);
  m.resize(80, 0);  // 6 reserved bytes
  raw(m, in.nonce);
  raw(m, in.digest);
  if (m.size() != 112) throw std::logic_error("envelope fixed part is not 112 bytes");
  raw(m, identity_encoding);
  m.resize(1024, 0);
  return m;
}

/// HMAC-SHA-256 straight from OpenSSL's one-shot EVP_Q_mac.
inline ByteVec hmac_sha256(const ByteVec& key, const ByteVec& m) {
  ByteVec out(32);
  std::size_t len = 0;
  if (EVP_Q_mac(nullptr, "HMAC", nullptr, "SHA256", nullptr, key.data(), key.size(), m.data(), m.size(), out.data(),
                out.size(), &len) == nullptr || len != 32) {
    throw std::runtime_error("EVP_Q_mac(HMAC) failed");
  }
  return out;
}

/// The keyed payload tag (docs/format.md): K_p = HMAC(secret, 'P' || root);
/// one-time key = ChaCha20(K_p, IV = nonce) applied to 32 zero bytes;
/// tag = Poly1305(one-time key, payload || header with the tag field zeroed).
inline ByteVec keyed_tag(const ByteVec& secret, const ByteVec& root, const ByteVec& nonce, const ByteVec& payload,
                         ByteVec header) {
  ByteVec pm{'P'};
  raw(pm, root);
  const ByteVec kp = hmac_sha256(secret, pm);
  ByteVec otk(32);
  EVP_CIPHER_CTX* c = EVP_CIPHER_CTX_new();
  int len = 0;
  const ByteVec zeros(32, 0);
  const bool ok = c != nullptr && EVP_EncryptInit_ex2(c, EVP_chacha20(), kp.data(), nonce.data(), nullptr) == 1 &&
                  EVP_EncryptUpdate(c, otk.data(), &len, zeros.data(), 32) == 1 && len == 32;
  EVP_CIPHER_CTX_free(c);
  if (!ok) throw std::runtime_error("ChaCha20 failed");
  std::fill(header.begin() + 96, header.begin() + 112, std::uint8_t{0});
  ByteVec msg = payload;
  raw(msg, header);
  ByteVec tag(16);
  std::size_t tlen = 0;
  if (EVP_Q_mac(nullptr, "POLY1305", nullptr, nullptr, nullptr, otk.data(), otk.size(), msg.data(), msg.size(),
                tag.data(), tag.size(), &tlen) == nullptr || tlen != 16) {
    throw std::runtime_error("EVP_Q_mac(POLY1305) failed");
  }
  return tag;
}

}  // namespace ref

inline std::vector<std::uint32_t> as_u32(const std::vector<std::int32_t>& t) {
  return std::vector<std::uint32_t>(t.begin(), t.end());
}

inline ByteVec bytes_of(const kvkey::Digest& d) { return ByteVec(d.begin(), d.end()); }

/// Member-by-member equality of the salient fields (the shard is not compared:
/// it is not part of the identity encoding). Written out by hand so it does not
/// depend on kvkey's field list.
inline bool same_salient_fields(const kvkey::Identity& a, const kvkey::Identity& b) {
  const bool adapters_equal =
      a.adapter.has_value() == b.adapter.has_value() &&
      (!a.adapter || (a.adapter->name == b.adapter->name &&
                      a.adapter->weights_fingerprint == b.adapter->weights_fingerprint));
  return a.tenant == b.tenant && a.model.name == b.model.name && a.model.revision == b.model.revision &&
         a.model.weights_epoch == b.model.weights_epoch && a.model.weights_fingerprint == b.model.weights_fingerprint &&
         a.model.positional_fingerprint == b.model.positional_fingerprint &&
         a.kv.dtype == b.kv.dtype && a.kv.quant.scheme == b.kv.quant.scheme &&
         a.kv.quant.group_size == b.kv.quant.group_size && a.kv.quant.scale_dtype == b.kv.quant.scale_dtype &&
         a.kv.quant.zero_point == b.kv.quant.zero_point &&
         a.kv.quant.scales_fingerprint == b.kv.quant.scales_fingerprint && a.kv.block_size == b.kv.block_size &&
         a.kv.num_layers == b.kv.num_layers && a.kv.num_kv_heads == b.kv.num_kv_heads &&
         a.kv.head_dim == b.kv.head_dim && a.kv.layout == b.kv.layout && a.kv.mla == b.kv.mla && adapters_equal;
}

/// An identity with every string at its limit and every optional present: the
/// largest encoding a valid identity can have.
inline kvkey::Identity largest_identity() {
  kvkey::Identity id = rich_identity();
  id.tenant = std::string(kvkey::limits::tenant, 'T');
  id.model.name = std::string(kvkey::limits::model_name, '/');  // also the longest store key segment
  id.model.revision = std::string(kvkey::limits::revision, 'r');
  id.model.weights_epoch = ~std::uint64_t{0};
  id.kv.quant.scheme = std::string(kvkey::limits::quant_scheme, 'q');
  id.kv.layout = std::string(kvkey::limits::layout, 'l');
  id.adapter = kvkey::Adapter(std::string(kvkey::limits::adapter_name, '\xff'), kvkey::fingerprint("adapter"));
  return id;
}

}  // namespace core_test

#endif  // KVKEY_TESTS_CORE_TEST_SUPPORT_HPP
