// kvkey::Store over a Mooncake Store client, through Mooncake's C API (store_c.h,
// compiled into libmooncake_store.a). Header-only; link the Mooncake static libraries
// (examples/mooncake/cpp/build.sh shows the line).
//
// The C API has put, get_into, batch_get_into, is_exist, get_size and remove, but no
// upsert and no ranged read, so:
// - put replaces by a forced remove, then a put (Mooncake's put keeps an existing value);
//   between the two a reader sees a miss, never the old and new bytes mixed; an empty value,
//   which Mooncake refuses, leaves the key removed (a miss, as kvkey reads an empty value);
// - get reads the size (get_size), then the value into this thread's registered buffer;
// - get_prefix returns the whole value (the connector verifies the first 1024 bytes);
// - a missing key (-704 OBJECT_NOT_FOUND, -703 a write in progress) is nullopt; any other
//   negative code throws MooncakeError, a kvkey::store_error with the code's kind.
// Removes are forced: reads hold leases, and kvkey verifies every value it reads, so a
// reader whose object is freed under it reads bytes that do not verify, a miss.
#ifndef KVKEY_EXAMPLES_MOONCAKE_STORE_HPP
#define KVKEY_EXAMPLES_MOONCAKE_STORE_HPP

#include <kvkey/store.hpp>

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

extern "C" {
#include "store_c.h"
}

namespace kvkey_mooncake {

/// The kvkey::store_error kind of a negative Mooncake return code (as
/// kvkey.stores.mooncake.code_kind in Python).
inline const char* code_kind(long long code) {
  switch (code) {
    case -101:
    case -103:
    case -710:
    case -712:
    case -800:
    case -900: return "connection";
    case -707:
    case -901: return "timeout";
    default: return "server";
  }
}

/// A Mooncake return code that is neither success nor a miss: a kvkey::store_error, so
/// the connector counts the call as failed (a miss), never as a bug.
class MooncakeError : public kvkey::store_error {
 public:
  MooncakeError(const std::string& what, long long code)
      : kvkey::store_error(code_kind(code), "mooncake " + what + ": " + std::to_string(code)), code_(code) {}
  long long code() const { return code_; }

 private:
  long long code_;
};

inline bool is_miss(long long code) { return code == -704 || code == -703; }

/// One connected client (mooncake_store_setup), shared by any number of Store handles.
class Client {
 public:
  Client(const std::string& master, const std::string& metadata, std::uint64_t global_segment_size,
         std::uint64_t local_buffer_size, const std::string& hostname = "127.0.0.1")
      : h_(mooncake_store_create()) {
    if (h_ == nullptr) throw MooncakeError("create", -1);
    const int rc = mooncake_store_setup(h_, hostname.c_str(), metadata.c_str(), global_segment_size, local_buffer_size,
                                        "tcp", "", master.c_str());
    if (rc != 0) {
      mooncake_store_destroy(h_);
      throw MooncakeError("setup", rc);
    }
  }
  ~Client() { mooncake_store_destroy(h_); }
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;
  mooncake_store_t handle() const { return h_; }

 private:
  mooncake_store_t h_;
};

class Store : public kvkey::Store {
 public:
  explicit Store(std::shared_ptr<Client> client) : client_(std::move(client)) {}

  void put(std::string_view key, const std::uint8_t* data, std::size_t size) override {
    const std::string k(key);
    const int removed = mooncake_store_remove(h(), k.c_str(), 1);
    if (removed != 0 && !is_miss(removed)) throw MooncakeError("remove", removed);
    if (size == 0) return;  // Mooncake refuses empty values (-600); kvkey reads an empty value as a miss anyway
    const int rc = mooncake_store_put(h(), k.c_str(), data, size, nullptr);
    if (rc != 0) throw MooncakeError("put", rc);
  }

  std::optional<kvkey::Bytes> get(std::string_view key) override {
    const std::string k(key);
    for (int attempt = 0; attempt < 3; ++attempt) {  // the value may change size between the two calls
      const std::int64_t size = mooncake_store_get_size(h(), k.c_str());
      if (is_miss(size)) return std::nullopt;
      if (size < 0) throw MooncakeError("get_size", size);
      kvkey::Bytes out(static_cast<std::size_t>(size));
      if (out.empty()) return out;
      const std::int64_t got = mooncake_store_get_into(h(), k.c_str(), out.data(), out.size());
      if (is_miss(got)) return std::nullopt;
      if (got == -600) continue;  // INVALID_PARAMS: the value grew past the buffer meanwhile
      if (got < 0) throw MooncakeError("get_into", got);
      out.resize(static_cast<std::size_t>(got));
      return out;
    }
    throw MooncakeError("get_into (the value kept changing size)", -600);
  }

  std::optional<kvkey::Bytes> get_prefix(std::string_view key, std::size_t) override { return get(key); }

  bool remove(std::string_view key) override {
    const std::string k(key);
    const int rc = mooncake_store_remove(h(), k.c_str(), 1);
    if (rc == 0) return true;
    if (is_miss(rc)) return false;
    throw MooncakeError("remove", rc);
  }

  bool exists(std::string_view key) override {
    const std::string k(key);
    const int rc = mooncake_store_is_exist(h(), k.c_str());
    if (rc < 0) throw MooncakeError("is_exist", rc);
    return rc == 1;
  }

  std::vector<bool> exists_many(const std::vector<std::string>& keys) override {
    std::vector<const char*> ks;
    ks.reserve(keys.size());
    for (const std::string& k : keys) ks.push_back(k.c_str());
    std::vector<int> codes(keys.size());
    const int rc = mooncake_store_batch_is_exist(h(), ks.data(), ks.size(), codes.data());
    if (rc < 0) throw MooncakeError("batch_is_exist", rc);
    std::vector<bool> out;
    out.reserve(keys.size());
    for (const int c : codes) {
      if (c < 0) throw MooncakeError("batch_is_exist", c);
      out.push_back(c == 1);
    }
    return out;
  }

  /// Removes every key starting with prefix (remove_by_regex, the prefix escaped, forced).
  long long purge(std::string_view prefix) {
    std::string pattern = "^";
    for (const char c : prefix) {
      if (std::string_view("^$\\.*+?()[]{}|").find(c) != std::string_view::npos) pattern += '\\';
      pattern += c;
    }
    const std::int64_t n = mooncake_store_remove_by_regex(h(), pattern.c_str(), 1);
    if (n < 0) throw MooncakeError("remove_by_regex", n);
    return n;
  }

 private:
  mooncake_store_t h() const { return client_->handle(); }
  std::shared_ptr<Client> client_;
};

}  // namespace kvkey_mooncake

#endif  // KVKEY_EXAMPLES_MOONCAKE_STORE_HPP
