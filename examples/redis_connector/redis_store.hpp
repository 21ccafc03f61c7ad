// SPDX-License-Identifier: Apache-2.0
// kvkey_redis::RedisStore: the hiredis connection of this example
// (redis_connection.hpp) as a kvkey::Store, so kvkey::Connector
// (kvkey/connector.hpp) is the connector over Redis: every batch is one
// pipeline (GETRANGE + STRLEN for headers, GET, SET, EXISTS), ended by the
// ECHO sentinel of Connection ("Staying in step" in redis_connection.hpp),
// bounded by Options::call_deadline.
//
//   kvkey_redis::RedisStore store({.host = "127.0.0.1", .port = 6379});
//   kvkey::Connector<> conn(store, {ns.for_rank(0), ns.for_rank(1)});
//
// A call that fails throws StoreError, a kvkey::store_error (kind: connection
// for connect and io, timeout, protocol, server), and drops the connection. A key whose
// reply has the wrong type (a list under a kvkey key, say) fails alone: it is
// a miss for that block, counted as a protocol error, and the rest of the
// batch is served. One hiredis connection, behind a mutex: a store shared by
// threads serialises their calls (give each thread its own for parallelism).
#ifndef KVKEY_EXAMPLES_REDIS_STORE_HPP
#define KVKEY_EXAMPLES_REDIS_STORE_HPP

#include <kvkey/errors.hpp>
#include <kvkey/store.hpp>
#include <kvkey/text.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <set>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "redis_connection.hpp"

namespace kvkey_redis {

class RedisStore : public kvkey::Store {
 public:
  explicit RedisStore(Options options = {}) : conn_(std::move(options)) {}

  void put(std::string_view key, const std::uint8_t* data, std::size_t size) override {
    const std::string_view v(reinterpret_cast<const char*>(data), size);
    run([&] { (void)conn_.command({"SET", key, v}); });
  }
  std::optional<kvkey::Bytes> get(std::string_view key) override { return bytes(read_many({std::string(key)})); }
  std::optional<kvkey::Bytes> get_prefix(std::string_view key, std::size_t n) override {
    return bytes(read_prefix_many({std::string(key)}, n));
  }
  bool remove(std::string_view key) override {
    return run([&] { return conn_.command({"UNLINK", key})->integer == 1; });
  }
  bool exists(std::string_view key) override { return probe_many({std::string(key)}).at(0).present; }

  std::vector<kvkey::StoreValue> read_prefix_many(const std::vector<std::string>& keys, std::size_t n) override {
    const std::string last = std::to_string(n == 0 ? 0 : n - 1);
    std::vector<Connection::Command> commands;
    commands.reserve(2 * keys.size());
    for (const std::string& k : keys) {
      commands.push_back({"GETRANGE", k, "0", last});
      commands.push_back({"STRLEN", k});
    }
    return run([&] {
      const std::vector<Reply> replies = batch(commands);
      std::vector<kvkey::StoreValue> out(keys.size());
      for (std::size_t i = 0; i < keys.size(); ++i) {
        const redisReply& data = *replies[2 * i];
        const redisReply& size = *replies[2 * i + 1];
        if (data.type != REDIS_REPLY_STRING || size.type != REDIS_REPLY_INTEGER || size.integer < 0) {
          out[i] = kvkey::StoreValue::failed(kind(data.type == REDIS_REPLY_ERROR ? data : size));  // this key alone
        } else if (data.len > 0) {  // GETRANGE answers "" for a missing key: an empty value reads as missing
          out[i] = kvkey::StoreValue::owned(kvkey::Bytes(data.str, data.str + data.len));
          out[i].total_size = static_cast<std::uint64_t>(size.integer);
        }
      }
      return out;
    });
  }
  // Values are taken where hiredis read them (Connection::StringTap): hiredis'
  // own copy into a reply object is skipped, so each value is copied once.
  std::vector<kvkey::StoreValue> read_many(const std::vector<std::string>& keys) override {
    return get_values(keys, [](kvkey::StoreValue& v, std::size_t, const char* data, std::size_t len) {
      const auto* p = reinterpret_cast<const std::uint8_t*>(data);
      v = kvkey::StoreValue::owned(kvkey::Bytes(p, p + len));
      return true;
    });
  }
  /// Reads each value straight from hiredis' read buffer into into[i] (one
  /// copy), for kvkey::Connector::load_into; a value larger than into[i]
  /// reports its whole size with only into[i].size bytes written (the
  /// connector never serves it).
  std::vector<kvkey::StoreValue> read_into(const std::vector<std::string>& keys,
                                           const std::vector<kvkey::MutableBuffer>& into) override {
    if (into.size() != keys.size()) return read_many(keys);
    return get_values(keys, [&into](kvkey::StoreValue& v, std::size_t i, const char* data, std::size_t len) {
      if (into[i].data == nullptr) return false;  // no staging for this key: hiredis keeps it
      if (len != 0) std::memcpy(into[i].data, data, std::min(len, into[i].size));
      v.present = true;
      v.data = static_cast<const std::uint8_t*>(into[i].data);
      v.size = len;
      return true;
    });
  }
  bool reads_into() const noexcept override { return true; }
  std::vector<kvkey::StoreValue> probe_many(const std::vector<std::string>& keys) override {
    std::vector<Connection::Command> commands;
    commands.reserve(keys.size());
    for (const std::string& k : keys) commands.push_back({"EXISTS", k});
    return run([&] {
      const std::vector<Reply> replies = batch(commands);
      std::vector<kvkey::StoreValue> out(keys.size());
      for (std::size_t i = 0; i < keys.size(); ++i) {
        const redisReply& r = *replies[i];
        if (r.type != REDIS_REPLY_INTEGER || (r.integer != 0 && r.integer != 1)) {
          out[i] = kvkey::StoreValue::failed(kind(r));
        } else {
          out[i].present = r.integer == 1;
        }
      }
      return out;
    });
  }
  std::vector<kvkey::StoreWrite> put_many(const std::vector<std::string>& keys,
                                          const std::vector<kvkey::StoreValue>& values) override {
    std::vector<Connection::Command> commands;
    commands.reserve(keys.size());
    for (std::size_t i = 0; i < keys.size() && i < values.size(); ++i) {
      commands.push_back(
          {"SET", keys[i], std::string_view(reinterpret_cast<const char*>(values[i].data), values[i].size)});
    }
    return run([&] {
      const std::vector<Reply> replies = batch(commands);
      std::vector<kvkey::StoreWrite> out(replies.size());
      for (std::size_t i = 0; i < replies.size(); ++i) {
        const redisReply& r = *replies[i];
        out[i].stored = r.type == REDIS_REPLY_STATUS && std::string_view(r.str, r.len) == "OK";
        if (!out[i].stored) out[i].error = kind(r);
      }
      return out;
    });
  }

  /// Every key starting with prefix (SCAN MATCH, the prefix glob-escaped),
  /// without duplicates. For tests and small stores.
  std::vector<std::string> keys(std::string_view prefix) {
    std::set<std::string> seen;  // SCAN may return a key more than once
    scan(prefix, [&](const std::vector<std::string>& batch) { seen.insert(batch.begin(), batch.end()); });
    return {seen.begin(), seen.end()};
  }

  /// Removes every key starting with prefix (SCAN + UNLINK); returns how many
  /// were removed. Pass ns.key_prefix() to drop one epoch of a model,
  /// ns.tenant_prefix() to drop a tenant. An empty prefix is refused (input_error).
  std::size_t purge(std::string_view prefix) {
    if (prefix.empty()) throw kvkey::input_error("prefix", "purge: an empty prefix would remove every key");
    std::size_t removed = 0;
    scan(prefix, [&](const std::vector<std::string>& batch) {
      Connection::Command unlink{"UNLINK"};
      for (const std::string& key : batch) unlink.push_back(key);
      run([&] {
        const Reply r = conn_.command(unlink);
        if (r->type != REDIS_REPLY_INTEGER || r->integer < 0 || static_cast<std::size_t>(r->integer) > batch.size()) {
          throw StoreError(StoreError::Kind::protocol, "UNLINK: unexpected reply");
        }
        removed += static_cast<std::size_t>(r->integer);  // a key SCAN repeats counts once
      });
    });
    return removed;
  }

  Connection& connection() noexcept { return conn_; }

 private:
  // One pipeline; an error reply (WRONGTYPE: a key of another type) stays in its
  // place, a failure of that key alone, and the connection stays in step.
  std::vector<Reply> batch(const std::vector<Connection::Command>& commands) {
    return conn_.pipeline(commands, {}, Connection::ErrorReplies::keep);
  }
  // One pipeline of GET; take(value, i, bytes, len) takes a string reply's
  // bytes from hiredis' read buffer (true) or leaves them in the reply.
  template <class Take>
  std::vector<kvkey::StoreValue> get_values(const std::vector<std::string>& keys, Take&& take) {
    std::vector<Connection::Command> commands;
    commands.reserve(keys.size());
    for (const std::string& k : keys) commands.push_back({"GET", k});
    return run([&] {
      std::vector<kvkey::StoreValue> out(keys.size());
      std::vector<bool> taken(keys.size(), false);
      const Connection::StringTap tap = [&](std::size_t i, const char* data, std::size_t len) {
        if (i >= out.size() || !take(out[i], i, data, len)) return false;
        taken[i] = true;
        return true;
      };
      const std::vector<Reply> replies = conn_.pipeline(commands, tap, Connection::ErrorReplies::keep);
      for (std::size_t i = 0; i < keys.size(); ++i) {
        if (taken[i]) continue;
        const redisReply& r = *replies[i];
        if (r.type == REDIS_REPLY_STRING) {
          out[i] = kvkey::StoreValue::owned(kvkey::Bytes(r.str, r.str + r.len));
        } else if (r.type != REDIS_REPLY_NIL) {
          out[i] = kvkey::StoreValue::failed(kind(r));
        }
      }
      return out;
    });
  }
  // The store-error kind of a reply that is not what its command answers.
  static const char* kind(const redisReply& r) { return r.type == REDIS_REPLY_ERROR ? "server" : "protocol"; }

  template <class Visit>
  void scan(std::string_view prefix, Visit&& visit) {
    const std::string pattern = kvkey::glob_escape(prefix) + "*";
    std::string cursor = "0";
    do {
      std::vector<std::string> batch = run([&] {
        const Reply r = conn_.command({"SCAN", cursor, "MATCH", pattern, "COUNT", "1000"});
        if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 || r->element[0]->type != REDIS_REPLY_STRING ||
            r->element[1]->type != REDIS_REPLY_ARRAY) {
          throw StoreError(StoreError::Kind::protocol, "SCAN: expected [cursor, keys]");
        }
        cursor.assign(r->element[0]->str, r->element[0]->len);
        std::vector<std::string> keys;
        for (std::size_t i = 0; i < r->element[1]->elements; ++i) {
          const redisReply& k = *r->element[1]->element[i];
          if (k.type != REDIS_REPLY_STRING) throw StoreError(StoreError::Kind::protocol, "SCAN: a key is not a string");
          keys.emplace_back(k.str, k.len);
        }
        return keys;
      });
      if (!batch.empty()) visit(batch);
    } while (cursor != "0");
  }

  // Runs one call under the connection's lock (a StoreError is a kvkey::store_error already).
  template <class F>
  auto run(F&& f) -> decltype(f()) {
    const std::lock_guard<std::mutex> lock(mu_);
    return f();
  }
  static std::optional<kvkey::Bytes> bytes(const std::vector<kvkey::StoreValue>& v) {
    if (v.empty() || !v[0].present) return std::nullopt;
    return kvkey::Bytes(v[0].data, v[0].data + v[0].size);
  }

  std::mutex mu_;
  Connection conn_;
};

}  // namespace kvkey_redis

#endif  // KVKEY_EXAMPLES_REDIS_STORE_HPP
