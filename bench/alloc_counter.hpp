// Heap allocation counting for the benchmarks: global operator new and
// OpenSSL's allocator both count (alloc_counter.cpp, a separate translation
// unit so the replaced operators are never inlined into their callers).
#ifndef KVKEY_BENCH_ALLOC_COUNTER_HPP
#define KVKEY_BENCH_ALLOC_COUNTER_HPP

#include <cstdint>

namespace kvkey_bench {

/// Allocations so far, all threads.
std::uint64_t allocations() noexcept;

/// Routes OpenSSL's allocations through the counter. Call first in main,
/// before OpenSSL allocates anything; false if it is too late.
bool count_openssl_allocations() noexcept;

}  // namespace kvkey_bench

#endif  // KVKEY_BENCH_ALLOC_COUNTER_HPP
