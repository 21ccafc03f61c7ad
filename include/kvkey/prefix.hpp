// SPDX-License-Identifier: Apache-2.0
// reusable_prefix(): how many leading blocks of a prompt every shard can serve,
// counted from per-(block, shard) lookups or Verdicts; an unverified block is
// never counted. KeyNamespace::reusable_prefix passes its block size.
#ifndef KVKEY_PREFIX_HPP
#define KVKEY_PREFIX_HPP

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <limits>
#include <string>

#include "kvkey/config.hpp"
#include "kvkey/envelope.hpp"
#include "kvkey/errors.hpp"

KVKEY_BEGIN_NAMESPACE

/// How much of a request's prefix can be served from the store.
struct ReusablePrefix {
  std::size_t blocks = 0;
  std::size_t tokens = 0;

  friend bool operator==(const ReusablePrefix& a, const ReusablePrefix& b) noexcept {
    return a.blocks == b.blocks && a.tokens == b.tokens;
  }
};

namespace detail {
inline bool usable(bool found) noexcept { return found; }
inline bool usable(const Verdict& v) noexcept { return v.ok(); }
}  // namespace detail

/// Counts the leading blocks every shard can serve.
///
/// results holds one entry per (block, shard), block-major: entry
/// b * shards_per_block + s is block b's result on shard s, either a bool
/// (exists / loaded) or a Verdict (usable only when ok()). Counting stops at the
/// first block that any shard misses or fails, so an unverified block is never
/// counted. Blocks are also only counted while their tokens fit in max_tokens
/// (engines pass prompt_len - 1 so the last token is always computed).
/// Throws input_error if shards_per_block is 0, block_size is 0 or the result
/// count is not a multiple of shards_per_block.
template <class Results>
[[nodiscard]] ReusablePrefix reusable_prefix(const Results& results, std::size_t shards_per_block,
                                             std::size_t block_size,
                                             std::size_t max_tokens = std::numeric_limits<std::size_t>::max()) {
  if (shards_per_block == 0) throw input_error("reusable_prefix: shards_per_block must be greater than 0");
  if (block_size == 0) throw input_error("reusable_prefix: block_size must be greater than 0");
  const std::size_t n = static_cast<std::size_t>(std::size(results));
  if (n % shards_per_block != 0) {
    throw input_error("reusable_prefix: " + std::to_string(n) + " results is not a multiple of " +
                      std::to_string(shards_per_block) + " shards per block");
  }
  ReusablePrefix p;
  auto it = std::begin(results);
  for (std::size_t b = 0; b < n / shards_per_block; ++b) {
    bool all = true;
    for (std::size_t s = 0; s < shards_per_block; ++s, ++it) all = detail::usable(*it) && all;
    if (!all || p.tokens + block_size > max_tokens) break;
    ++p.blocks;
    p.tokens += block_size;
  }
  return p;
}

KVKEY_END_NAMESPACE

#endif  // KVKEY_PREFIX_HPP
