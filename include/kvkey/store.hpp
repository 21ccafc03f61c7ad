// SPDX-License-Identifier: Apache-2.0
// kvkey::Store: the small key-value protocol a connector needs from an
// external KV-cache store (Redis, Mooncake, LMCache, a file system, ...), and
// MemoryStore, an in-process one. Implement the five members over your store
// (docs/connectors.md); kvkey::Connector (kvkey/connector.hpp) seals, looks up
// and loads blocks through it, and kvkey::testing::check_store
// (kvkey/testing.hpp) checks an implementation against the store's faults.
#ifndef KVKEY_STORE_HPP
#define KVKEY_STORE_HPP

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kvkey/config.hpp"
#include "kvkey/encode.hpp"

KVKEY_BEGIN_NAMESPACE

/// A store of values (byte strings) under kvkey store keys. Implementations
/// report failures by throwing (any exception); a missing key is not a failure.
/// The batch forms default to one call per key: override them where the store
/// can pipeline (Redis: one round trip for all keys).
class Store {
 public:
  virtual ~Store() = default;

  /// Stores the value under key, replacing any value there.
  virtual void put(std::string_view key, const std::uint8_t* data, std::size_t size) = 0;
  /// The value under key; nullopt when there is none.
  virtual std::optional<Bytes> get(std::string_view key) = 0;
  /// At least the first min(n, size) bytes of the value under key (more are
  /// allowed: a store without ranged reads returns the whole value); nullopt
  /// (or an empty value: Redis' GETRANGE cannot tell) when there is none.
  /// Redis: GETRANGE key 0 n-1.
  virtual std::optional<Bytes> get_prefix(std::string_view key, std::size_t n) = 0;
  /// Deletes the value under key; true when there was one.
  virtual bool remove(std::string_view key) = 0;
  /// True when a value is stored under key.
  virtual bool exists(std::string_view key) = 0;

  /// get_prefix for each key, in order.
  virtual std::vector<std::optional<Bytes>> get_prefix_many(const std::vector<std::string>& keys, std::size_t n) {
    std::vector<std::optional<Bytes>> out;
    out.reserve(keys.size());
    for (const std::string& k : keys) out.push_back(get_prefix(k, n));
    return out;
  }
  /// get for each key, in order.
  virtual std::vector<std::optional<Bytes>> get_many(const std::vector<std::string>& keys) {
    std::vector<std::optional<Bytes>> out;
    out.reserve(keys.size());
    for (const std::string& k : keys) out.push_back(get(k));
    return out;
  }
  /// exists for each key, in order.
  virtual std::vector<bool> exists_many(const std::vector<std::string>& keys) {
    std::vector<bool> out;
    out.reserve(keys.size());
    for (const std::string& k : keys) out.push_back(exists(k));
    return out;
  }

 protected:
  Store() = default;
  Store(const Store&) = default;
  Store& operator=(const Store&) = default;
};

/// An in-process Store (a mutex-guarded map); safe to share between threads.
class MemoryStore : public Store {
 public:
  void put(std::string_view key, const std::uint8_t* data, std::size_t size) override {
    const std::lock_guard<std::mutex> lock(mu_);
    map_[std::string(key)] = Bytes(data, data + size);
  }
  std::optional<Bytes> get(std::string_view key) override {
    const std::lock_guard<std::mutex> lock(mu_);
    const auto it = map_.find(key);
    if (it == map_.end()) return std::nullopt;
    return it->second;
  }
  std::optional<Bytes> get_prefix(std::string_view key, std::size_t n) override {
    const std::lock_guard<std::mutex> lock(mu_);
    const auto it = map_.find(key);
    if (it == map_.end()) return std::nullopt;
    const Bytes& v = it->second;
    return Bytes(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(n < v.size() ? n : v.size()));
  }
  bool remove(std::string_view key) override {
    const std::lock_guard<std::mutex> lock(mu_);
    const auto it = map_.find(key);
    if (it == map_.end()) return false;
    map_.erase(it);
    return true;
  }
  bool exists(std::string_view key) override {
    const std::lock_guard<std::mutex> lock(mu_);
    return map_.find(key) != map_.end();
  }
  /// The number of values stored.
  std::size_t size() const {
    const std::lock_guard<std::mutex> lock(mu_);
    return map_.size();
  }

 private:
  mutable std::mutex mu_;
  std::map<std::string, Bytes, std::less<>> map_;
};

KVKEY_END_NAMESPACE

#endif  // KVKEY_STORE_HPP
