// SPDX-License-Identifier: Apache-2.0
// kvkey::detail::WorkPool: a few long-lived worker threads that, with the
// calling thread, run the items of one task at a time (BatchHasher's prompts,
// a Connector's values to verify). Not public API.
#ifndef KVKEY_DETAIL_WORK_POOL_HPP
#define KVKEY_DETAIL_WORK_POOL_HPP

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

#include "kvkey/config.hpp"

KVKEY_BEGIN_NAMESPACE

namespace detail {

class WorkPool {
 public:
  /// threads >= 1 (0 is taken as 1): the threads that work on a task, the
  /// calling thread included; threads - 1 workers start here.
  explicit WorkPool(unsigned threads) {
    const unsigned n = threads == 0 ? 1 : threads;
    workers_.reserve(n - 1);
    try {
      for (unsigned i = 1; i < n; ++i) workers_.emplace_back([this] { work(); });
    } catch (...) {
      stop();
      throw;
    }
  }
  WorkPool(const WorkPool&) = delete;
  WorkPool& operator=(const WorkPool&) = delete;
  ~WorkPool() { stop(); }

  unsigned threads() const noexcept { return static_cast<unsigned>(workers_.size()) + 1; }

  /// Runs task(0 .. count-1) on the workers and the calling thread, and
  /// returns when every item is done; task must not throw. Tasks run one at a
  /// time: a concurrent run waits for the one before it.
  template <class Task>
  void run(std::size_t count, Task& task) {
    std::lock_guard<std::mutex> one_task(task_mutex_);
    run_locked(count, task);
  }

  /// As run, unless another task is running: then the calling thread runs
  /// every item itself, at once (a caller that must not wait for another's
  /// task).
  template <class Task>
  void run_or_inline(std::size_t count, Task& task) {
    std::unique_lock<std::mutex> one_task(task_mutex_, std::try_to_lock);
    if (!one_task.owns_lock()) {
      for (std::size_t i = 0; i < count; ++i) task(i);
      return;
    }
    run_locked(count, task);
  }

 private:
  using Thunk = void (*)(void* task, std::size_t index);

  template <class Task>
  void run_locked(std::size_t count, Task& task) {
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
  }

  // Takes work items until none is left.
  void drain() noexcept {
    for (;;) {
      const std::size_t i = next_.fetch_add(1, std::memory_order_relaxed);
      if (i >= count_) return;
      thunk_(task_, i);
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
  std::mutex task_mutex_;  // one task at a time
  std::mutex mutex_;       // guards the fields below except next_
  std::condition_variable wake_;
  std::condition_variable done_;
  bool stopping_ = false;
  std::uint64_t generation_ = 0;
  std::size_t busy_ = 0;
  Thunk thunk_ = nullptr;
  void* task_ = nullptr;
  std::size_t count_ = 0;
  std::atomic<std::size_t> next_{0};
};

}  // namespace detail

KVKEY_END_NAMESPACE

#endif  // KVKEY_DETAIL_WORK_POOL_HPP
