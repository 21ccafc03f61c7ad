// SPDX-License-Identifier: Apache-2.0
// kvkey::Store over a redis-server with hiredis: the store adapter the
// conformance test checks (docs/connectors.md shows the same protocol in
// Python). One connection per calling thread, so the racing cases really
// write at once; get_prefix_many and get_many are pipelined (one round trip).
#ifndef KVKEY_TESTS_INTEGRATION_REDIS_STORE_HPP
#define KVKEY_TESTS_INTEGRATION_REDIS_STORE_HPP

#include <kvkey/store.hpp>

#include <hiredis/hiredis.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace it {

class RedisStore : public kvkey::Store {
 public:
  RedisStore(std::string host, int port) : host_(std::move(host)), port_(port) {}

  void put(std::string_view key, const std::uint8_t* data, std::size_t size) override {
    check(command("SET %b %b", key.data(), key.size(), data, size), REDIS_REPLY_STATUS);
  }
  std::optional<kvkey::Bytes> get(std::string_view key) override {
    return value(command("GET %b", key.data(), key.size()));
  }
  std::optional<kvkey::Bytes> get_prefix(std::string_view key, std::size_t n) override {
    if (n == 0) return exists(key) ? std::optional<kvkey::Bytes>(kvkey::Bytes()) : std::nullopt;
    const std::string last = std::to_string(n - 1);
    return value(command("GETRANGE %b 0 %s", key.data(), key.size(), last.c_str()));
  }
  bool remove(std::string_view key) override {
    return check(command("DEL %b", key.data(), key.size()), REDIS_REPLY_INTEGER)->integer == 1;
  }
  bool exists(std::string_view key) override {
    return check(command("EXISTS %b", key.data(), key.size()), REDIS_REPLY_INTEGER)->integer == 1;
  }
  std::vector<std::optional<kvkey::Bytes>> get_prefix_many(const std::vector<std::string>& keys,
                                                           std::size_t n) override {
    if (n == 0) return Store::get_prefix_many(keys, n);
    redisContext* c = connection();
    const std::string last = std::to_string(n - 1);
    for (const std::string& k : keys) redisAppendCommand(c, "GETRANGE %b 0 %s", k.data(), k.size(), last.c_str());
    return replies(c, keys.size());
  }
  std::vector<std::optional<kvkey::Bytes>> get_many(const std::vector<std::string>& keys) override {
    redisContext* c = connection();
    for (const std::string& k : keys) redisAppendCommand(c, "GET %b", k.data(), k.size());
    return replies(c, keys.size());
  }

 private:
  struct Free {
    void operator()(redisContext* c) const { redisFree(c); }
    void operator()(redisReply* r) const { freeReplyObject(r); }
  };
  using Reply = std::unique_ptr<redisReply, Free>;

  redisContext* connection() {
    const std::lock_guard<std::mutex> lock(mu_);
    auto& slot = connections_[std::this_thread::get_id()];
    if (!slot) {
      slot.reset(redisConnect(host_.c_str(), port_));
      if (!slot || slot->err != 0) {
        const std::string why = slot ? slot->errstr : "out of memory";
        slot.reset();
        throw std::runtime_error("redis " + host_ + ":" + std::to_string(port_) + ": " + why);
      }
    }
    return slot.get();
  }
  template <class... Args>
  Reply command(const char* format, Args... args) {
    redisContext* c = connection();
    return reply(c, static_cast<redisReply*>(redisCommand(c, format, args...)));
  }
  static Reply reply(redisContext* c, redisReply* r) {
    if (r == nullptr) throw std::runtime_error(std::string("redis: ") + c->errstr);
    Reply out(r);
    if (out->type == REDIS_REPLY_ERROR) throw std::runtime_error("redis: " + std::string(out->str, out->len));
    return out;
  }
  static Reply check(Reply r, int type) {
    if (r->type != type) throw std::runtime_error("redis: unexpected reply type " + std::to_string(r->type));
    return r;
  }
  // A bulk string (an empty one, as GETRANGE gives for a missing key, is a miss), or nil.
  static std::optional<kvkey::Bytes> value(const Reply& r) {
    if (r->type == REDIS_REPLY_NIL || (r->type == REDIS_REPLY_STRING && r->len == 0)) return std::nullopt;
    if (r->type != REDIS_REPLY_STRING) throw std::runtime_error("redis: expected a string reply");
    const auto* p = reinterpret_cast<const std::uint8_t*>(r->str);
    return kvkey::Bytes(p, p + r->len);
  }
  static std::vector<std::optional<kvkey::Bytes>> replies(redisContext* c, std::size_t n) {
    std::vector<std::optional<kvkey::Bytes>> out;
    out.reserve(n);
    for (std::size_t i = 0; i < n; ++i) {
      void* r = nullptr;
      if (redisGetReply(c, &r) != REDIS_OK) throw std::runtime_error(std::string("redis: ") + c->errstr);
      out.push_back(value(reply(c, static_cast<redisReply*>(r))));
    }
    return out;
  }

  std::string host_;
  int port_;
  std::mutex mu_;
  std::map<std::thread::id, std::unique_ptr<redisContext, Free>> connections_;
};

}  // namespace it

#endif  // KVKEY_TESTS_INTEGRATION_REDIS_STORE_HPP
