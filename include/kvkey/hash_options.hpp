// SPDX-License-Identifier: Apache-2.0
// The per-request inputs of a block-hash chain besides the tokens: the salt and
// the extra keys (multimodal content hashes and the like). Pass them to
// KeyNamespace::block_hashes (kvkey/key_namespace.hpp) or to BatchHasher
// (kvkey/batch.hpp); both headers include this one. docs/format.md gives the
// bytes they add to each block message.
#ifndef KVKEY_HASH_OPTIONS_HPP
#define KVKEY_HASH_OPTIONS_HPP

#include <cstdint>
#include <string>
#include <vector>

#include "kvkey/config.hpp"

KVKEY_BEGIN_NAMESPACE

/// A key that enters only the blocks overlapping tokens [token_begin, token_end)
/// of the sequence, e.g. the content hash of an image whose placeholder tokens
/// sit there. Positions are absolute token indices.
struct ExtraKey {
  std::uint64_t token_begin = 0;
  std::uint64_t token_end = 0;
  std::string key;
};

/// Per-request inputs of the chain besides the tokens.
struct HashOptions {
  /// Per-request salt (like vLLM's cache_salt): when non-empty it changes every
  /// block hash of the request. Empty means no salt.
  std::string salt;
  /// Per-block extra keys (multimodal content hashes and the like).
  std::vector<ExtraKey> extras;
};

KVKEY_END_NAMESPACE

#endif  // KVKEY_HASH_OPTIONS_HPP
