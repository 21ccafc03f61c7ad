// SPDX-License-Identifier: Apache-2.0
// lmdeploy's Mooncake store key scheme (the legacy scheme kvkey replaces),
// reproduced bit for bit so that operators can recognise, enumerate and purge
// the entries it wrote, and so that a migration can be tested. Not part of the
// umbrella header: include <kvkey/compat/lmdeploy.hpp> explicitly.
//
// The scheme is specified in docs/integration/lmdeploy.md ("The legacy
// scheme"); it carries no tenant, KV format, revision or weights epoch, which
// is why kvkey exists. Do not use it for new keys.
#ifndef KVKEY_COMPAT_LMDEPLOY_HPP
#define KVKEY_COMPAT_LMDEPLOY_HPP

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "kvkey/config.hpp"
#include "kvkey/detail/endian.hpp"
#include "kvkey/digest.hpp"
#include "kvkey/errors.hpp"
#include "kvkey/sha256.hpp"
#include "kvkey/text.hpp"

KVKEY_BEGIN_NAMESPACE
namespace compat {
namespace lmdeploy {

/// The 34 bytes that open every legacy block-hash message: the ASCII schema
/// name and one NUL byte.
inline constexpr std::string_view block_hash_schema{"lmdeploy-mooncake-prefix-block-v1\0", 34};

/// The model name lmdeploy's worker uses when none was configured.
inline constexpr std::string_view default_model_name = "unnamed-model";

/// One legacy store key, split into its parts (see parse_key).
struct LegacyKey {
  std::string cache_prefix;  ///< "" when the key has no prefix part
  std::string model_name;
  std::uint32_t kv_head_rank = 0;
  Digest block_hash;
  /// True when the part before "@tp_rank:" contains '@': lmdeploy does not
  /// escape '@', so another (cache_prefix, model_name) split writes the same key.
  bool ambiguous = false;
};

namespace detail {

using ::kvkey::detail::store_u32_be;
using ::kvkey::detail::store_u64_be;

// Token ids are unsigned 64-bit in the legacy scheme: signed inputs must not be negative.
template <class T>
std::uint64_t token_value(T t, std::size_t index) {
  if constexpr (std::is_signed_v<T>) {
    if (t < 0) {
      throw input_error("legacy block_hashes: token " + std::to_string(index) + " is " + std::to_string(t) +
                        ", token ids must lie in [0, 2^64)");
    }
  }
  return static_cast<std::uint64_t>(t);
}

inline void check_block_size(std::uint32_t block_size) {
  if (block_size == 0) throw input_error("legacy block_hashes: block_size must be greater than 0");
}

inline bool is_lower_hex(char c) noexcept { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); }

// Escapes the POSIX ERE special characters . [ \ ( ) * + ? { | ^ $ with a
// backslash, which means the literal character in POSIX ERE and in ECMAScript
// alike. ']' and '}' are ordinary outside a bracket expression in both and stay
// unescaped (ERE leaves "\]" undefined).
inline void append_regex_literal(std::string& out, std::string_view s) {
  for (char c : s) {
    switch (c) {
      case '.':
      case '[':
      case '\\':
      case '(':
      case ')':
      case '*':
      case '+':
      case '?':
      case '{':
      case '|':
      case '^':
      case '$': out.push_back('\\'); break;
      default: break;
    }
    out.push_back(c);
  }
}

// "[<cache_prefix>@]<model_name>"
inline std::string key_head(std::string_view cache_prefix, std::string_view model_name) {
  std::string head;
  if (!cache_prefix.empty()) head.append(cache_prefix).push_back('@');
  head.append(model_name);
  return head;
}

// lmdeploy never writes an empty model_name (it falls back to the model path's
// basename, then to default_model_name), and parse_key cannot split such a key.
inline void check_model_name(std::string_view model_name, std::string_view what) {
  if (model_name.empty()) {
    throw input_error(std::string(what) +
                      ": model_name must not be empty (lmdeploy never writes one: it uses the "
                      "model path's basename, or \"" +
                      std::string(default_model_name) + "\")");
  }
}

}  // namespace detail

// ---- block hashes --------------------------------------------------------------

/// Appends the legacy hashes of the full blocks of tokens[0, count) that
/// `hashes` does not hold yet. `hashes` holds the hashes of the first
/// hashes.size() blocks of the same sequence (as lmdeploy's previous_hashes:
/// trusted, not recomputed); the result equals a full recompute. A partial
/// tail is ignored. T is int32_t, int64_t, uint32_t or uint64_t; a negative
/// token, block_size 0, more previous hashes than full blocks or an
/// extra_identity of 2^32 bytes or more is an input_error.
template <class T>
void extend_block_hashes(std::vector<Digest>& hashes, const T* tokens, std::size_t count, std::uint32_t block_size,
                         std::string_view extra_identity) {
  static_assert(std::is_same_v<T, std::int32_t> || std::is_same_v<T, std::int64_t> ||
                    std::is_same_v<T, std::uint32_t> || std::is_same_v<T, std::uint64_t>,
                "token ids must be int32_t, int64_t, uint32_t or uint64_t");
  detail::check_block_size(block_size);
  if (extra_identity.size() > std::numeric_limits<std::uint32_t>::max()) {
    throw input_error("legacy block_hashes: extra_identity must be shorter than 2^32 bytes");
  }
  const std::size_t bs = block_size;
  const std::size_t full = count / bs;
  if (hashes.size() > full) {
    throw input_error("legacy block_hashes: " + std::to_string(hashes.size()) + " previous hashes but only " +
                      std::to_string(full) + " full blocks in " + std::to_string(count) + " tokens");
  }
  std::uint8_t size_be[4];
  detail::store_u32_be(size_be, block_size);
  std::uint8_t extra_len_be[4];
  detail::store_u32_be(extra_len_be, static_cast<std::uint32_t>(extra_identity.size()));

  constexpr std::size_t chunk_tokens = 256;
  std::uint8_t buf[8 * chunk_tokens];
  Sha256 h;
  hashes.reserve(full);
  for (std::size_t b = hashes.size(); b < full; ++b) {
    h.update(block_hash_schema.data(), block_hash_schema.size());
    if (b != 0) h.update(hashes[b - 1].data(), Digest::size_bytes);  // block 0 has no parent field
    h.update(size_be, sizeof size_be);
    const T* block = tokens + b * bs;
    for (std::size_t i = 0; i < bs;) {
      const std::size_t n = std::min(chunk_tokens, bs - i);
      for (std::size_t j = 0; j < n; ++j)
        detail::store_u64_be(buf + 8 * j, detail::token_value(block[i + j], b * bs + i + j));
      h.update(buf, 8 * n);
      i += n;
    }
    h.update(extra_len_be, sizeof extra_len_be);
    h.update(extra_identity.data(), extra_identity.size());
    hashes.push_back(h.result());
  }
}

/// The legacy hashes of every full block of tokens[0, count), continuing from
/// `previous` (lmdeploy's previous_hashes; empty for a fresh request).
template <class T>
[[nodiscard]] std::vector<Digest> block_hashes(const T* tokens, std::size_t count, std::uint32_t block_size,
                                               std::string_view extra_identity,
                                               const std::vector<Digest>& previous = {}) {
  std::vector<Digest> out = previous;
  extend_block_hashes(out, tokens, count, block_size, extra_identity);
  return out;
}

/// lmdeploy's build_prefix_block_hashes(tokens, block_size, extra_identity=...):
/// one hash per full block. The scheduler passes the request's adapter name
/// (or "") as extra_identity.
[[nodiscard]] inline std::vector<Digest> block_hashes(const std::vector<std::int64_t>& tokens, std::uint32_t block_size,
                                                      std::string_view extra_identity = {}) {
  return block_hashes(tokens.data(), tokens.size(), block_size, extra_identity);
}

/// As above, continuing from the hashes of the first previous.size() blocks
/// (lmdeploy's previous_hashes). Equals the full recompute.
[[nodiscard]] inline std::vector<Digest> block_hashes(const std::vector<std::int64_t>& tokens, std::uint32_t block_size,
                                                      std::string_view extra_identity,
                                                      const std::vector<Digest>& previous) {
  return block_hashes(tokens.data(), tokens.size(), block_size, extra_identity, previous);
}

// ---- shard geometry ------------------------------------------------------------

/// How many TP ranks hold the same KV heads: tp_size / num_kv_heads when
/// tp_size > num_kv_heads, else 1. Throws input_error on a zero size or when
/// tp_size is not a multiple of the result (lmdeploy's
/// validate_kv_head_replica_num).
inline std::uint32_t kv_head_replica_num(std::uint32_t tp_size, std::uint32_t num_kv_heads) {
  if (tp_size == 0) throw input_error("legacy kv_head_replica_num: tp_size must be greater than 0");
  if (num_kv_heads == 0) throw input_error("legacy kv_head_replica_num: num_kv_heads must be greater than 0");
  const std::uint32_t replicas = tp_size > num_kv_heads ? tp_size / num_kv_heads : 1;
  if (tp_size % replicas != 0) {
    throw input_error("legacy kv_head_replica_num: tp_size " + std::to_string(tp_size) +
                      " is not divisible by the replica count " + std::to_string(replicas));
  }
  return replicas;
}

/// The K in "@tp_rank:K@" that rank tp_rank writes and reads:
/// tp_rank / kv_head_replica_num(tp_size, num_kv_heads).
inline std::uint32_t kv_head_rank(std::uint32_t tp_rank, std::uint32_t tp_size, std::uint32_t num_kv_heads) {
  const std::uint32_t replicas = kv_head_replica_num(tp_size, num_kv_heads);
  if (tp_rank >= tp_size) {
    throw input_error("legacy kv_head_rank: tp_rank " + std::to_string(tp_rank) + " is not below tp_size " +
                      std::to_string(tp_size));
  }
  return tp_rank / replicas;
}

/// How many keys one block has (lmdeploy's num_kv_head_shards):
/// tp_size / kv_head_replica_num(tp_size, num_kv_heads). A lookup needs all of
/// them, K = 0 .. shard_key_count - 1.
inline std::uint32_t shard_key_count(std::uint32_t tp_size, std::uint32_t num_kv_heads) {
  return tp_size / kv_head_replica_num(tp_size, num_kv_heads);
}

// ---- keys ------------------------------------------------------------------------

/// "[<cache_prefix>@]<model_name>@tp_rank:<kv_head_rank>@group:0@<64 hex>",
/// exactly as lmdeploy's build_store_key writes it ('@' is not escaped).
/// Throws input_error for an empty model_name, which lmdeploy never writes and
/// parse_key, is_legacy_key and purge_pattern refuse.
[[nodiscard]] inline std::string store_key(std::string_view cache_prefix, std::string_view model_name,
                                           std::uint32_t kv_head_rank, const Digest& block_hash) {
  detail::check_model_name(model_name, "store_key");
  std::string key = detail::key_head(cache_prefix, model_name);
  key.append("@tp_rank:").append(std::to_string(kv_head_rank)).append("@group:0@");
  key.append(block_hash.hex());
  return key;
}

/// The keys lmdeploy's worker lookup asks batch_is_exist about, block-major:
/// for each hash, kv_head_rank 0 .. shard_keys - 1. Throws input_error for an
/// empty model_name.
[[nodiscard]] inline std::vector<std::string> lookup_keys(std::string_view cache_prefix, std::string_view model_name,
                                                          std::uint32_t shard_keys, const std::vector<Digest>& hashes) {
  detail::check_model_name(model_name, "lookup_keys");
  std::vector<std::string> keys;
  keys.reserve(hashes.size() * shard_keys);
  for (const Digest& h : hashes) {
    for (std::uint32_t k = 0; k < shard_keys; ++k) keys.push_back(store_key(cache_prefix, model_name, k, h));
  }
  return keys;
}

namespace detail {

struct KeyTail {
  std::string_view head;  // "[<cache_prefix>@]<model_name>", non-empty
  std::uint32_t kv_head_rank;
  std::string_view hex;
};

// Reads "<head>@tp_rank:<K>@group:0@<64 lowercase hex>" from the right; the
// tail is fixed, so the head is unique.
inline std::optional<KeyTail> split_tail(std::string_view key) {
  constexpr std::size_t hex_len = 2 * Digest::size_bytes;
  constexpr std::string_view group = "@group:0@";
  constexpr std::string_view rank_tag = "@tp_rank:";
  if (key.size() < hex_len + group.size()) return std::nullopt;
  const std::string_view hex = key.substr(key.size() - hex_len);
  if (!std::all_of(hex.begin(), hex.end(), is_lower_hex)) return std::nullopt;
  std::string_view rest = key.substr(0, key.size() - hex_len);
  if (rest.substr(rest.size() - group.size()) != group) return std::nullopt;
  rest.remove_suffix(group.size());
  std::size_t digits = 0;
  while (digits < rest.size() && rest[rest.size() - 1 - digits] >= '0' && rest[rest.size() - 1 - digits] <= '9') {
    ++digits;
  }
  if (digits == 0 || digits > 10) return std::nullopt;
  const std::string_view num = rest.substr(rest.size() - digits);
  if (num.size() > 1 && num[0] == '0') return std::nullopt;
  std::uint64_t rank = 0;
  for (char c : num) rank = rank * 10 + static_cast<std::uint64_t>(c - '0');
  if (rank > std::numeric_limits<std::uint32_t>::max()) return std::nullopt;
  rest.remove_suffix(digits);
  if (rest.size() <= rank_tag.size() || rest.substr(rest.size() - rank_tag.size()) != rank_tag) return std::nullopt;
  return KeyTail{rest.substr(0, rest.size() - rank_tag.size()), static_cast<std::uint32_t>(rank), hex};
}

}  // namespace detail

/// Splits a legacy key. Returns nullopt unless the key is a non-empty head
/// followed by "@tp_rank:<K>@group:0@<64 lowercase hex>" (K decimal without
/// leading zeros, below 2^32). The head "[<cache_prefix>@]<model_name>" is not
/// unique when it contains '@' (lmdeploy does not escape it). The rule used:
/// model_name is the text after the head's last '@' and cache_prefix the text
/// before it (hub model names contain no '@'); a head starting or ending with
/// that '@' is all model_name (an empty cache_prefix writes no '@', an empty
/// model_name is refused), so store_key rebuilds every parsed key. Such keys
/// have `ambiguous` set: another split wrote the same key.
[[nodiscard]] inline std::optional<LegacyKey> parse_key(std::string_view key) {
  const auto tail = detail::split_tail(key);
  if (!tail) return std::nullopt;
  const std::string_view head = tail->head;
  LegacyKey k;
  const std::size_t at = head.rfind('@');
  if (at == std::string_view::npos || at == 0 || at + 1 == head.size()) {
    k.model_name = std::string(head);
  } else {
    k.cache_prefix = std::string(head.substr(0, at));
    k.model_name = std::string(head.substr(at + 1));
  }
  k.ambiguous = at != std::string_view::npos;
  k.kv_head_rank = tail->kv_head_rank;
  k.block_hash = *Digest::try_from_hex(tail->hex);
  return k;
}

/// True when parse_key accepts the key. kvkey keys ("kvk1/...", never an '@')
/// are never legacy keys.
[[nodiscard]] inline bool is_legacy_key(std::string_view key) { return detail::split_tail(key).has_value(); }

/// True when key is a legacy key lmdeploy writes for (cache_prefix,
/// model_name): its head is exactly "[<cache_prefix>@]<model_name>". Because
/// '@' is not escaped, another pair that joins to the same head matches too
/// (lmdeploy wrote the same bytes for it). The same set purge_pattern matches.
[[nodiscard]] inline bool is_legacy_key_of(std::string_view key, std::string_view cache_prefix,
                                           std::string_view model_name) {
  const auto tail = detail::split_tail(key);
  return tail && !model_name.empty() && tail->head == detail::key_head(cache_prefix, model_name);
}

/// An anchored regular expression matching every legacy key of (cache_prefix,
/// model_name): every kv_head_rank and every block hash. It matches exactly the
/// keys is_legacy_key_of accepts, except that it also takes ranks of 10 digits
/// at or above 2^32, which lmdeploy never writes. Valid as ECMAScript
/// (std::regex's default, Mooncake's remove_by_regex, Python's re) and as POSIX
/// ERE (std::regex::extended, grep -E); anchored, so search and full match
/// agree. It requires '@', so no kvkey key can match it. Throws input_error for
/// an empty model_name.
[[nodiscard]] inline std::string purge_pattern(std::string_view cache_prefix, std::string_view model_name) {
  detail::check_model_name(model_name, "purge_pattern");
  std::string p = "^";
  detail::append_regex_literal(p, detail::key_head(cache_prefix, model_name));
  p.append("@tp_rank:(0|[1-9][0-9]{0,9})@group:0@[0-9a-f]{64}$");
  return p;
}

/// A Redis glob (SCAN MATCH, KEYS) that every legacy key of (cache_prefix,
/// model_name) matches. A glob cannot express "decimal digits", so it also
/// matches some non-keys: check each candidate with is_legacy_key_of before
/// deleting it. Throws input_error for an empty model_name.
[[nodiscard]] inline std::string purge_glob(std::string_view cache_prefix, std::string_view model_name) {
  detail::check_model_name(model_name, "purge_glob");
  std::string g;
  g += glob_escape(detail::key_head(cache_prefix, model_name));
  g.append("@tp_rank:*@group:0@");
  for (std::size_t i = 0; i < 2 * Digest::size_bytes; ++i) g.append("[0-9a-f]");
  return g;
}

}  // namespace lmdeploy
}  // namespace compat
KVKEY_END_NAMESPACE

#endif  // KVKEY_COMPAT_LMDEPLOY_HPP
