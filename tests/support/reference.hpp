// The independent reference of the byte formats (docs/format.md): every
// message and layout assembled by hand from the specification and hashed with
// raw OpenSSL, without kvkey's encoder, to check kvkey against. The one
// reference the tests use (golden vectors, chain, encoding, envelope, store
// keys and the optimized paths in key_namespace_test.cpp).
#ifndef KVKEY_TESTS_SUPPORT_REFERENCE_HPP
#define KVKEY_TESTS_SUPPORT_REFERENCE_HPP

#include <kvkey/kvkey.hpp>

#include <openssl/core_names.h>
#include <openssl/evp.h>
#include <openssl/kdf.h>
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
#include <tuple>
#include <vector>

#include "support/fixtures.hpp"

namespace kvkey_test {

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

/// The identity encoding: "kvkey.id", u16le version 3, the fields in order.
/// `id` must already carry the encoded tenant ("_single" under single_tenant).
inline ByteVec identity_encoding(const kvkey::Identity& id) {
  ByteVec m;
  raw(m, "kvkey.id", 8);
  u16le(m, 4);
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
    if (out.size() + piece.size() > 80) break;
    out += piece;
  }
  return out;
}

/// `ns_segment` is "p" (plain) or "k" followed by the secret id's 16 hex digits (keyed).
inline std::string store_key(const std::string& tenant, const std::string& ns_segment, const std::string& model_name,
                             std::uint64_t epoch, const ByteVec& object_hash) {
  return "kvk4/" + tenant + "/" + ns_segment + "/" + model_segment(model_name) + "/e" + std::to_string(epoch) + "/" +
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
  ByteVec secret_id = ByteVec(8, 0);  ///< keyed only
};

/// The 1024-byte envelope.
inline ByteVec envelope(const ByteVec& identity_encoding, const ByteVec& block_hash, std::uint64_t payload_size,
                        const kvkey::Slice& s, const Integrity& in) {
  ByteVec m;
  raw(m, "KVKEYENV", 8);
  u16le(m, 4);
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
  raw(m, in.secret_id);
  if (m.size() != 120) throw std::logic_error("envelope fixed part is not 120 bytes");
  raw(m, identity_encoding);
  m.resize(1024, 0);
  return m;
}

/// The plain digest of format v3: XXH3-128 of payload || header, the header's
/// 16 digest bytes (offset 96) zero.
inline ByteVec plain_digest(const ByteVec& payload, ByteVec header) {
  std::fill(header.begin() + 96, header.begin() + 112, std::uint8_t{0});
  ByteVec msg = payload;
  raw(msg, header);
  return xxh3_128(msg);
}

/// HMAC-SHA-256 straight from OpenSSL's one-shot EVP_Q_mac.
inline ByteVec hmac_sha256(const ByteVec& key, const ByteVec& m) {
  ByteVec out(32);
  std::size_t len = 0;
  if (EVP_Q_mac(nullptr, "HMAC", nullptr, "SHA256", nullptr, key.data(), key.size(), m.data(), m.size(), out.data(),
                out.size(), &len) == nullptr ||
      len != 32) {
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
                tag.data(), tag.size(), &tlen) == nullptr ||
      tlen != 16) {
    throw std::runtime_error("EVP_Q_mac(POLY1305) failed");
  }
  return tag;
}

/// A confidential value's key (format v4): HKDF-SHA-256 with OpenSSL's EVP_KDF,
/// IKM the secret, salt "kvkey v4 confidential", info 'C' || root || selector.
inline ByteVec confidential_key(const ByteVec& secret, const ByteVec& root, const std::uint8_t* selector) {
  ByteVec info{'C'};
  raw(info, root);
  raw(info, selector, 4);
  std::string salt = "kvkey v4 confidential";
  char digest[] = "SHA256";
  ByteVec ikm = secret;
  OSSL_PARAM params[] = {OSSL_PARAM_construct_utf8_string(OSSL_KDF_PARAM_DIGEST, digest, 0),
                         OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_KEY, ikm.data(), ikm.size()),
                         OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_SALT, salt.data(), salt.size()),
                         OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_INFO, info.data(), info.size()),
                         OSSL_PARAM_construct_end()};
  EVP_KDF* kdf = EVP_KDF_fetch(nullptr, "HKDF", nullptr);
  EVP_KDF_CTX* ctx = kdf != nullptr ? EVP_KDF_CTX_new(kdf) : nullptr;
  ByteVec key(32);
  const bool ok = ctx != nullptr && EVP_KDF_derive(ctx, key.data(), key.size(), params) == 1;
  EVP_KDF_CTX_free(ctx);
  EVP_KDF_free(kdf);
  if (!ok) throw std::runtime_error("EVP_KDF_derive(HKDF) failed");
  return key;
}

/// Opens a confidential value (envelope || ciphertext) by docs/format.md with
/// OpenSSL's AES-256-GCM: the plaintext, or nullopt when the tag fails.
inline std::optional<ByteVec> confidential_open(const ByteVec& secret, const ByteVec& root, const ByteVec& value) {
  if (value.size() < 1024) return std::nullopt;
  const ByteVec key = confidential_key(secret, root, value.data() + 80);
  ByteVec aad(value.begin(), value.begin() + 1024);
  std::fill(aad.begin() + 96, aad.begin() + 112, std::uint8_t{0});
  ByteVec tag(value.begin() + 96, value.begin() + 112);
  ByteVec out(value.size() - 1024);
  EVP_CIPHER_CTX* c = EVP_CIPHER_CTX_new();
  int len = 0;
  bool ok = c != nullptr && EVP_DecryptInit_ex2(c, EVP_aes_256_gcm(), key.data(), value.data() + 84, nullptr) == 1 &&
            EVP_DecryptUpdate(c, nullptr, &len, aad.data(), static_cast<int>(aad.size())) == 1 &&
            EVP_DecryptUpdate(c, out.data(), &len, value.data() + 1024, static_cast<int>(out.size())) == 1 &&
            EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_GCM_SET_TAG, 16, tag.data()) == 1;
  ok = ok && EVP_DecryptFinal_ex(c, nullptr, &len) == 1;
  EVP_CIPHER_CTX_free(c);
  if (!ok) return std::nullopt;
  return out;
}

/// A tenant secret's public id: the first 8 bytes of HMAC-SHA-256(secret, 'I').
inline ByteVec secret_id(const ByteVec& secret) {
  ByteVec sid = hmac_sha256(secret, ByteVec{'I'});
  sid.resize(8);
  return sid;
}

}  // namespace ref

}  // namespace kvkey_test

#endif  // KVKEY_TESTS_SUPPORT_REFERENCE_HPP
