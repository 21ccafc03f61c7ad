// SPDX-License-Identifier: Apache-2.0
#ifndef KVKEY_BATCH_HPP
#define KVKEY_BATCH_HPP

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <mutex>
#include <numeric>
#include <thread>
#include <vector>

#include "kvkey/config.hpp"
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
/// requests: each request is hashed whole by one thread, longest first. The
/// results are exactly those of KeyNamespace::block_hashes per request. The
/// workers live as long as the BatchHasher; the calling thread works too, so
/// `threads` counts it. One batch runs at a time: concurrent calls on the same
/// BatchHasher wait for each other.
class BatchHasher {
 public:
  /// threads >= 1 (0 is taken as 1): the threads that work on a batch, the
  /// calling thread included.
  explicit BatchHasher(unsigned threads) {
    const unsigned n = threads == 0 ? 1 : threads;
    workers_.reserve(n - 1);
    try {
      for (unsigned i = 1; i < n; ++i) workers_.emplace_back([this] { work(); });
    } catch (...) {
      stop();
      throw;
    }
  }
  BatchHasher(const BatchHasher&) = delete;
  BatchHasher& operator=(const BatchHasher&) = delete;
  ~BatchHasher() { stop(); }

  unsigned threads() const noexcept { return static_cast<unsigned>(workers_.size()) + 1; }

  /// block_hashes(tokens, options) of every request, in request order. If a
  /// request throws (a bad token id, a bad extra key), the other requests still
  /// run, then the exception of the first such request (in request order) is
  /// rethrown.
  template <class Hash, class T>
  std::vector<std::vector<Digest>> block_hashes(const KeyNamespace<Hash>& ns,
                                                const std::vector<BlockHashRequest<T>>& requests) {
    std::vector<std::vector<Digest>> out(requests.size());
    // Longest first: the batch ends when its longest chain does.
    std::vector<std::size_t> order(requests.size());
    std::iota(order.begin(), order.end(), std::size_t{0});
    std::stable_sort(order.begin(), order.end(),
                     [&](std::size_t a, std::size_t b) { return requests[a].count > requests[b].count; });
    static const HashOptions no_options;
    auto task = [&](std::size_t i) {
      const auto& r = requests[order[i]];
      ns.extend_block_hashes(out[order[i]], r.tokens, r.count, r.options != nullptr ? *r.options : no_options);
    };
    run(requests.size(), task, order);
    return out;
  }

  /// The same options for every prompt.
  template <class Hash, class T>
  std::vector<std::vector<Digest>> block_hashes(const KeyNamespace<Hash>& ns, const std::vector<std::vector<T>>& prompts,
                                                const HashOptions& options = {}) {
    std::vector<BlockHashRequest<T>> requests;
    requests.reserve(prompts.size());
    for (const auto& p : prompts) requests.push_back({p.data(), p.size(), &options});
    return block_hashes(ns, requests);
  }

 private:
  using Thunk = void (*)(void* task, std::size_t index);

  template <class Task>
  void run(std::size_t count, Task& task, const std::vector<std::size_t>& order) {
    std::lock_guard<std::mutex> one_batch(batch_mutex_);
    errors_.assign(count, nullptr);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      thunk_ = [](void* t, std::size_t i) { (*static_cast<Task*>(t))(i); };
      task_ = &task;
      count_ = count;
      next_.store(0, std::memory_order_relaxed);
      busy_ = workers_.size();
      ++generation_;
    }
    wake_.notify_all();
    drain();
    {
      std::unique_lock<std::mutex> lock(mutex_);
      done_.wait(lock, [this] { return busy_ == 0; });
      task_ = nullptr;
    }
    // errors_ is indexed by position in `order`; report the lowest request index.
    std::size_t first = count;
    for (std::size_t i = 0; i < count; ++i) {
      if (errors_[i] && (first == count || order[i] < order[first])) first = i;
    }
    if (first != count) std::rethrow_exception(errors_[first]);
  }

  // Takes work items until none is left.
  void drain() noexcept {
    for (;;) {
      const std::size_t i = next_.fetch_add(1, std::memory_order_relaxed);
      if (i >= count_) return;
      try {
        thunk_(task_, i);
      } catch (...) {
        errors_[i] = std::current_exception();  // each i is taken by one thread
      }
    }
  }

  void work() {
    std::uint64_t seen = 0;
    for (;;) {
      {
        std::unique_lock<std::mutex> lock(mutex_);
        wake_.wait(lock, [&] { return stopping_ || generation_ != seen; });
        if (stopping_) return;
        seen = generation_;
      }
      drain();
      {
        std::lock_guard<std::mutex> lock(mutex_);
        if (--busy_ == 0) done_.notify_one();
      }
    }
  }

  void stop() noexcept {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    wake_.notify_all();
    for (auto& w : workers_) {
      if (w.joinable()) w.join();
    }
  }

  std::vector<std::thread> workers_;
  std::mutex batch_mutex_;  // one batch at a time
  std::mutex mutex_;        // guards the fields below except next_ and errors_
  std::condition_variable wake_;
  std::condition_variable done_;
  bool stopping_ = false;
  std::uint64_t generation_ = 0;
  std::size_t busy_ = 0;
  Thunk thunk_ = nullptr;
  void* task_ = nullptr;
  std::size_t count_ = 0;
  std::atomic<std::size_t> next_{0};
  std::vector<std::exception_ptr> errors_;
};

/// One-call form: hashes the batch on `threads` threads (the caller's
/// included), starting and joining the workers inside the call. Prefer a
/// long-lived BatchHasher on a scheduler's hot path.
template <class Hash, class T>
std::vector<std::vector<Digest>> block_hashes_batch(const KeyNamespace<Hash>& ns,
                                                    const std::vector<BlockHashRequest<T>>& requests,
                                                    unsigned threads) {
  BatchHasher pool(threads);
  return pool.block_hashes(ns, requests);
}

KVKEY_END_NAMESPACE

#endif  // KVKEY_BATCH_HPP
