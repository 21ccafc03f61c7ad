// SPDX-License-Identifier: Apache-2.0
// kvkey::Store: the small key-value protocol a connector needs from an
// external KV-cache store (Redis, Mooncake, LMCache, a file system, ...), and
// MemoryStore, an in-process one. Implement the five members over your store
// (docs/connectors.md); kvkey::Connector (kvkey/connector.hpp) seals, looks up
// and loads blocks through it, and kvkey::testing::check_store
// (kvkey/testing.hpp) checks an implementation against the store's faults.
// A store that owns or registers the memory values move through (Mooncake's
// registered buffers) also provides registered memory, the zero-copy
// capability: RegisteredMemory, register_memory, write_from and read_into.
#ifndef KVKEY_STORE_HPP
#define KVKEY_STORE_HPP

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kvkey/buffer.hpp"
#include "kvkey/config.hpp"
#include "kvkey/errors.hpp"

KVKEY_BEGIN_NAMESPACE

/// A store call that could not complete. kind() is one of store_error_kinds
/// ("connection", "timeout", "protocol", "server", "other"; any other kind
/// given is "other"). A connector counts it as a miss (Connector::Options).
class store_error : public std::runtime_error {
 public:
  store_error(std::string_view kind, const std::string& what)
      : std::runtime_error(what), kind_(store_error_kinds[detail::store_error_index(kind)]) {}
  /// The error's kind, one of store_error_kinds.
  std::string_view kind() const noexcept { return kind_; }

 private:
  std::string_view kind_;
};

/// Memory registered with a store for zero-copy transfers (Store::register_memory,
/// Store::allocate_memory): values are written from it (Store::write_from) and read
/// into it (Store::read_into) without a copy. It stays registered while this object
/// lives; a store's subclass unregisters it in its destructor. The base class
/// registers nothing: it is the memory of a store without the capability (any
/// memory serves), and keep holds what keeps the bytes alive, if anything.
class RegisteredMemory {
 public:
  explicit RegisteredMemory(MutableBuffer memory, std::shared_ptr<void> keep = {})
      : memory_(memory), keep_(std::move(keep)) {}
  virtual ~RegisteredMemory() = default;
  RegisteredMemory(const RegisteredMemory&) = delete;
  RegisteredMemory& operator=(const RegisteredMemory&) = delete;
  /// The registered bytes.
  MutableBuffer buffer() const noexcept { return memory_; }
  /// True when [data, data + size) lies inside this memory.
  bool contains(const void* data, std::size_t size) const noexcept {
    const auto* b = static_cast<const std::uint8_t*>(memory_.data);
    const auto* p = static_cast<const std::uint8_t*>(data);
    return b != nullptr && p >= b && size <= memory_.size && p - b <= static_cast<std::ptrdiff_t>(memory_.size - size);
  }

 private:
  MutableBuffer memory_;
  std::shared_ptr<void> keep_;
};

/// One key's reply to a batch read (Store::read_many, read_prefix_many,
/// read_into, probe_many): missing, present (its bytes), or failed (error
/// names the store_error kind of this key alone; the rest of the batch stands).
///
/// Buffer ownership (docs/connectors.md, "Buffer ownership"): `data` stays
/// valid while `owner` lives. `stable` promises the bytes do not change while
/// `owner` lives (the store handed them over: they are the caller's); a store
/// that reuses its buffers (an arena) says false, and the connector copies the
/// bytes before it verifies them, so what it serves is what it verified.
struct StoreValue {
  /// Keeps a value's bytes alive (polymorphic, so front ends can recognise their own).
  struct Owner {
    virtual ~Owner() = default;
  };
  /// An Owner holding the bytes themselves.
  struct OwnedBytes : Owner {
    explicit OwnedBytes(Bytes b) : bytes(std::move(b)) {}
    Bytes bytes;
  };

  bool present = false;
  const std::uint8_t* data = nullptr;
  std::size_t size = 0;
  /// The whole value's size where the store knows it (a prefix read); nullopt: unknown.
  std::optional<std::uint64_t> total_size;
  /// Non-empty: this key's read failed, with this store_error kind.
  std::string error;
  std::shared_ptr<const Owner> owner;
  bool stable = true;

  /// A present value that owns its bytes.
  static StoreValue owned(Bytes b) {
    StoreValue v;
    auto o = std::make_shared<const OwnedBytes>(std::move(b));
    v.present = true;
    v.data = o->bytes.data();
    v.size = o->bytes.size();
    v.owner = std::move(o);
    return v;
  }
  /// The reply for one key whose read failed with this kind.
  static StoreValue failed(std::string kind) {
    StoreValue v;
    v.error = std::move(kind);
    return v;
  }
};

/// One key's reply to Store::put_many: stored, or not (error: the kind, when
/// the store failed for this key; empty when it declined without an error).
struct StoreWrite {
  bool stored = true;
  std::string error;
};

/// A store of values (byte strings) under kvkey store keys. Implementations
/// report a failed call by throwing store_error (any other exception is a bug
/// and passes through the connector); a missing key is not a failure. The
/// batch forms default to one call per key: override them where the store can
/// pipeline (Redis: one round trip for all keys). The read_* members are what
/// kvkey::Connector calls; their defaults wrap get_many, get_prefix_many and
/// exists_many, and a zero-copy store overrides them (docs/connectors.md).
///
/// Registered memory (the zero-copy capability, docs/connectors.md): a store
/// whose client moves values straight between the store and memory it owns or
/// has registered says so with registers_memory(), hands that memory out
/// (register_memory, allocate_memory), writes values from it (write_from) and
/// reads values into it (read_into). The defaults serve every other store:
/// plain memory, write_from as put_many of copies, read_into as read_many.
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

  /// get_many as StoreValues (owned, stable bytes).
  virtual std::vector<StoreValue> read_many(const std::vector<std::string>& keys) { return wrap(get_many(keys)); }
  /// get_prefix_many as StoreValues.
  virtual std::vector<StoreValue> read_prefix_many(const std::vector<std::string>& keys, std::size_t n) {
    return wrap(get_prefix_many(keys, n));
  }
  /// Reads each value into memory for Connector::load_into. into[i] is memory
  /// of the size the value should have: connector-owned staging, or a slot of
  /// registered memory (inside memory from register_memory or allocate_memory
  /// when registers_memory()). A store that can read straight into memory
  /// (Mooncake's batch_get_into) writes the value there and returns a
  /// StoreValue pointing into it (its size the value's whole size: larger than
  /// into[i] means the value did not fit, and only its first into[i].size bytes
  /// were written). Nothing may be written into into[i] once the call returns.
  /// The connector verifies a block before anything is served, so rejected
  /// bytes only ever reach into[i]. Default: read_many (into unused).
  virtual std::vector<StoreValue> read_into(const std::vector<std::string>& keys,
                                            const std::vector<MutableBuffer>& into) {
    (void)into;
    return read_many(keys);
  }
  /// True when read_into writes into the memory it is given (the connector then
  /// provides staging); false (the default): read_into is read_many.
  virtual bool reads_into() const noexcept { return registers_memory(); }

  /// True when the store moves values straight between the store and
  /// registered memory: write_from and read_into use the memory they are given
  /// without a copy, and it must come from register_memory or allocate_memory.
  virtual bool registers_memory() const noexcept { return false; }
  /// Registers memory (the engine's own: its KV pool, slots) for zero-copy
  /// transfers, until the result is released. The caller keeps the bytes alive
  /// meanwhile. Default: nothing to register.
  virtual std::shared_ptr<RegisteredMemory> register_memory(MutableBuffer memory) {
    return std::make_shared<RegisteredMemory>(memory);
  }
  /// New memory of size bytes, registered for zero-copy transfers and freed
  /// with the result. Default: zeroed heap bytes.
  virtual std::shared_ptr<RegisteredMemory> allocate_memory(std::size_t size) {
    std::shared_ptr<std::uint8_t[]> bytes(new std::uint8_t[size == 0 ? 1 : size]());
    return std::make_shared<RegisteredMemory>(MutableBuffer{bytes.get(), size}, bytes);
  }
  /// put for each (key, value) where values[i] lies in registered memory (a
  /// store with registers_memory() writes it from there, no copy); one
  /// StoreWrite per key. Default: put_many of copies (allocate_value).
  virtual std::vector<StoreWrite> write_from(const std::vector<std::string>& keys,
                                             const std::vector<ConstBuffer>& values) {
    std::vector<StoreValue> copies;
    copies.reserve(values.size());
    for (const ConstBuffer& v : values) {
      StoreValue c = allocate_value(v.size);
      if (v.size != 0) std::memcpy(const_cast<std::uint8_t*>(c.data), v.data, v.size);
      copies.push_back(std::move(c));
    }
    return put_many(keys, copies);
  }
  /// exists_many as StoreValues (present or not, no bytes).
  virtual std::vector<StoreValue> probe_many(const std::vector<std::string>& keys) {
    const std::vector<bool> found = exists_many(keys);
    std::vector<StoreValue> out(found.size());
    for (std::size_t i = 0; i < found.size(); ++i) out[i].present = found[i];
    return out;
  }
  /// Memory for one value of `size` bytes that the connector seals into and
  /// then passes to put_many (a store with registered or pooled memory hands
  /// out its own). Default: heap bytes.
  virtual StoreValue allocate_value(std::size_t size) { return StoreValue::owned(Bytes(size)); }
  /// put for each (key, value), in order; one StoreWrite per key. The values
  /// come from allocate_value; the store may keep their owners.
  virtual std::vector<StoreWrite> put_many(const std::vector<std::string>& keys,
                                           const std::vector<StoreValue>& values) {
    std::vector<StoreWrite> out(keys.size());
    for (std::size_t i = 0; i < keys.size() && i < values.size(); ++i) put(keys[i], values[i].data, values[i].size);
    return out;
  }

 protected:
  static std::vector<StoreValue> wrap(std::vector<std::optional<Bytes>> values) {
    std::vector<StoreValue> out;
    out.reserve(values.size());
    for (std::optional<Bytes>& v : values) out.push_back(v ? StoreValue::owned(std::move(*v)) : StoreValue{});
    return out;
  }

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
  /// Prefixes with each value's total size (so a lookup also rejects a value
  /// whose length disagrees with its header).
  std::vector<StoreValue> read_prefix_many(const std::vector<std::string>& keys, std::size_t n) override {
    std::vector<StoreValue> out = wrap(get_prefix_many(keys, n));
    const std::lock_guard<std::mutex> lock(mu_);
    for (std::size_t i = 0; i < keys.size() && i < out.size(); ++i) {
      const auto it = map_.find(keys[i]);
      if (out[i].present && it != map_.end()) out[i].total_size = it->second.size();
    }
    return out;
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
