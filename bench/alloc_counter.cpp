#include "alloc_counter.hpp"

#include <openssl/crypto.h>

#include <atomic>
#include <cstdlib>
#include <new>

namespace {

std::atomic<std::uint64_t> g_allocations{0};

void* counted(std::size_t n) noexcept {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  return std::malloc(n == 0 ? 1 : n);
}
void* crypto_malloc(std::size_t n, const char*, int) { return counted(n); }
void* crypto_realloc(void* p, std::size_t n, const char*, int) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  return std::realloc(p, n);
}
void crypto_free(void* p, const char*, int) { std::free(p); }

}  // namespace

namespace kvkey_bench {
std::uint64_t allocations() noexcept { return g_allocations.load(std::memory_order_relaxed); }
bool count_openssl_allocations() noexcept {
  return CRYPTO_set_mem_functions(crypto_malloc, crypto_realloc, crypto_free) == 1;
}
}  // namespace kvkey_bench

void* operator new(std::size_t n) {
  if (void* p = counted(n)) return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t n) {
  if (void* p = counted(n)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
