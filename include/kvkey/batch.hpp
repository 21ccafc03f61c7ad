// SPDX-License-Identifier: Apache-2.0
// kvkey::BatchHasher: the block hashes of many prompts at once on a small pool
// of threads (a scheduler admitting a batch), exactly KeyNamespace::block_hashes
// per prompt. For one prompt call KeyNamespace::block_hashes
// (kvkey/key_namespace.hpp) directly.
#ifndef KVKEY_BATCH_HPP
#define KVKEY_BATCH_HPP

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <numeric>
#include <vector>

#include "kvkey/config.hpp"
#include "kvkey/detail/work_pool.hpp"
#include "kvkey/digest.hpp"
#include "kvkey/errors.hpp"
#include "kvkey/key_namespace.hpp"

KVKEY_BEGIN_NAMESPACE

/// One request of a batch: a whole token sequence and its options. Points to
/// memory the caller keeps alive for the duration of the call.
template <class T>
struct BlockHashRequest {
  const T* tokens = nullptr;
  std::size_t count = 0;
  const HashOptions* options = nullptr;  ///< nullptr: no salt, no extras
};

/// Hashes many requests' prompts at once on a small pool of threads.
///
/// A chain is sequential within one request, so the parallelism is across
/// requests: each request is hashed whole by one thread, longest first, and
/// with plain SHA-256 on a CPU with SHA extensions a thread hashes two
/// requests in lockstep (two independent SHA streams keep the unit busier
/// than one). The results are exactly those of KeyNamespace::block_hashes per
/// request. The workers live as long as the BatchHasher; the calling thread
/// works too, so `threads` counts it. Batches that use the workers run one at
/// a time: concurrent calls on the same BatchHasher wait for each other.
class BatchHasher {
 public:
  /// threads >= 1 (0 is taken as 1): the threads that work on a batch, the
  /// calling thread included.
  explicit BatchHasher(unsigned threads) : pool_(threads) {}

  unsigned threads() const noexcept { return pool_.threads(); }

  /// Batches of fewer tokens are hashed on the calling thread alone: waking a
  /// worker costs tens of microseconds.
  static constexpr std::size_t min_parallel_tokens = std::size_t{1} << 15;

  /// block_hashes(tokens, options) of every request, in request order. If a
  /// request throws (a bad token id, a bad extra key), the other requests still
  /// run, then the exception of the first such request (in request order) is
  /// rethrown.
  template <class Hash, class T>
  [[nodiscard]] std::vector<std::vector<Digest>> block_hashes(const KeyNamespace<Hash>& ns,
                                                              const std::vector<BlockHashRequest<T>>& requests) {
    std::vector<std::vector<Digest>> out;
    block_hashes(ns, requests, out);
    return out;
  }

  /// As above, into `out`: resized to requests.size(), out[r] replaced by the
  /// hashes of request r (unspecified if the call throws). Passing the same
  /// `out` batch after batch reuses its memory.
  template <class Hash, class T>
  void block_hashes(const KeyNamespace<Hash>& ns, const std::vector<BlockHashRequest<T>>& requests,
                    std::vector<std::vector<Digest>>& out) {
    static const HashOptions no_options;
    const auto options = [&](std::size_t r) -> const HashOptions& {
      return requests[r].options != nullptr ? *requests[r].options : no_options;
    };
    out.resize(requests.size());
    std::size_t tokens = 0;
    for (std::size_t r = 0; r < requests.size(); ++r) {
      out[r].clear();
      tokens += requests[r].count;
    }
    std::vector<std::exception_ptr> errors(requests.size());
    // Longest first (the batch ends when its longest chain does), in pairs of
    // similar length that one thread hashes in lockstep where it can.
    std::vector<std::size_t> order(requests.size());
    std::iota(order.begin(), order.end(), std::size_t{0});
    std::stable_sort(order.begin(), order.end(),
                     [&](std::size_t a, std::size_t b) { return requests[a].count > requests[b].count; });
    // Each thread grows vectors of its own and moves them into `out` when
    // done: the vector headers in `out` share cache lines, and writing them on
    // every block from two threads would bounce those lines between cores.
    const auto one = [&](std::size_t r) {
      std::vector<Digest> mine = std::move(out[r]);
      try {
        ns.extend_block_hashes(mine, requests[r].tokens, requests[r].count, options(r));
      } catch (...) {
        errors[r] = std::current_exception();
      }
      out[r] = std::move(mine);
    };
    auto task = [&](std::size_t pair) {
      const std::size_t a = order[2 * pair];
      if (2 * pair + 1 == order.size()) return one(a);
      const std::size_t b = order[2 * pair + 1];
      std::vector<Digest> mine_a = std::move(out[a]);
      std::vector<Digest> mine_b = std::move(out[b]);
      bool done = false;
      try {
        done =
            detail::ChainAccess::chain(ns).block_hashes_pair(mine_a, requests[a].tokens, requests[a].count, options(a),
                                                             mine_b, requests[b].tokens, requests[b].count, options(b));
      } catch (...) {  // only resource exhaustion gets here: tokens were checked
        errors[a] = errors[b] = std::current_exception();
      }
      out[a] = std::move(mine_a);
      out[b] = std::move(mine_b);
      if (!done && !errors[a]) {
        one(a);
        one(b);
      }
    };
    const std::size_t items = (requests.size() + 1) / 2;
    if (pool_.threads() == 1 || items < 2 || tokens < min_parallel_tokens) {
      for (std::size_t i = 0; i < items; ++i) task(i);
    } else {
      pool_.run(items, task);
    }
    for (std::size_t r = 0; r < requests.size(); ++r) {
      if (errors[r]) std::rethrow_exception(errors[r]);
    }
  }

  /// The same options for every prompt.
  template <class Hash, class T>
  [[nodiscard]] std::vector<std::vector<Digest>> block_hashes(const KeyNamespace<Hash>& ns,
                                                              const std::vector<std::vector<T>>& prompts,
                                                              const HashOptions& options = {}) {
    std::vector<BlockHashRequest<T>> requests;
    requests.reserve(prompts.size());
    for (const auto& p : prompts) requests.push_back({p.data(), p.size(), &options});
    return block_hashes(ns, requests);
  }

 private:
  detail::WorkPool pool_;
};

/// One-call form: hashes the batch on `threads` threads (the caller's
/// included), starting and joining the workers inside the call. Prefer a
/// long-lived BatchHasher on a scheduler's hot path.
template <class Hash, class T>
[[nodiscard]] std::vector<std::vector<Digest>> block_hashes_batch(const KeyNamespace<Hash>& ns,
                                                                  const std::vector<BlockHashRequest<T>>& requests,
                                                                  unsigned threads) {
  BatchHasher pool(threads);
  return pool.block_hashes(ns, requests);
}

KVKEY_END_NAMESPACE

#endif  // KVKEY_BATCH_HPP
