// SPDX-License-Identifier: Apache-2.0
// The hiredis connection of the Redis example: one connection with timeouts,
// pipelines that stay in step, and store errors by kind. RedisStore
// (redis_store.hpp) is the kvkey::Store on it; kvkey::Connector
// (kvkey/connector.hpp) is the connector over Redis.
//
// Errors. A call that fails throws StoreError, a kvkey::store_error of the
// kind kvkey::Metrics counts (connection, timeout, protocol, server), with the
// finer redis_kind() (connect and io are both "connection"): the server cannot
// be reached, a read or the whole call took too long, the reply stream broke
// off part-way, was not valid RESP or not what was sent, or the server
// answered with an error. After a StoreError the connection is dropped and
// the next call connects afresh.
//
// Staying in step. hiredis matches replies to commands by counting them, so
// one damaged byte in a reply's framing (a bulk length "$2048" read as
// "$2040") can leave a reply more or less in the stream than was sent, and
// every later call would read the replies of the call before. Each pipeline
// therefore ends with a sentinel, ECHO of a fresh random nonce; the call
// returns only when exactly one reply per command arrived, each of the type
// its command answers with, followed by the sentinel's own nonce and no other
// byte. Anything else is StoreError(protocol) and drops the connection.
//
// Time. Options::command_timeout bounds each read and write of the socket;
// Options::call_deadline bounds the whole call, connecting included (default
// 10 s; 0: no bound but the per-read one). Before each read and write the
// socket's timeout is shrunk to the time left, so a server that trickles a
// few bytes at a time cannot stretch a call past its deadline: past it, the
// call is StoreError(timeout) and the connection is dropped. Raise the
// deadline for pipelines that move more than a few hundred MB.
//
// Threads. A Connection is not thread-safe: RedisStore serialises its calls
// behind a mutex (give each thread its own store for parallelism).
//
// Signals. hiredis writes to its socket with write(2): a write to a connection
// the server has closed raises SIGPIPE, which kills the process by default.
// Programs using the connection ignore SIGPIPE (std::signal(SIGPIPE, SIG_IGN));
// the failed write then becomes a StoreError.
#ifndef KVKEY_EXAMPLES_REDIS_CONNECTION_HPP
#define KVKEY_EXAMPLES_REDIS_CONNECTION_HPP

#include <kvkey/store.hpp>

#include <hiredis/hiredis.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <limits>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace kvkey_redis {

struct Options {
  std::string host = "127.0.0.1";
  int port = 6379;
  std::chrono::milliseconds connect_timeout{1000};
  std::chrono::milliseconds command_timeout{2000};  ///< per socket read / write (0: none)
  std::chrono::milliseconds call_deadline{10000};   ///< per call, connect to last reply (0: none)
};

/// A call that could not complete: a kvkey::store_error of its metrics kind;
/// redis_kind() says why, what() says where.
class StoreError : public kvkey::store_error {
 public:
  /// A small fixed set, to count by (kinds, in this order, 0 to kinds - 1).
  enum class Kind {
    connect,   ///< the server could not be reached
    timeout,   ///< no reply within Options::command_timeout, or the call passed Options::call_deadline
    io,        ///< the connection broke (also: a partial reply)
    protocol,  ///< the replies were not valid RESP, or not what was sent (type, count, sentinel)
    server,    ///< the server answered with an error reply
  };
  static constexpr std::size_t kinds = 5;
  StoreError(Kind kind, const std::string& what);
  Kind redis_kind() const noexcept { return redis_kind_; }

 private:
  Kind redis_kind_;
};

std::string_view to_string(StoreError::Kind kind) noexcept;

/// The kind kvkey::Metrics counts a StoreError as (kvkey::store_error_kinds):
/// connect and io are "connection", the others keep their names.
std::string_view metrics_kind(StoreError::Kind kind) noexcept;

struct ReplyDeleter {
  void operator()(redisReply* r) const noexcept { freeReplyObject(r); }
};
using Reply = std::unique_ptr<redisReply, ReplyDeleter>;

/// One hiredis connection with timeouts. Connects lazily; any failure drops
/// the connection, and the next call connects again. Every pipeline ends with
/// the ECHO sentinel (see "Staying in step" above).
class Connection {
 public:
  explicit Connection(Options options);
  ~Connection();
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  /// A command and its arguments, binary-safe.
  using Command = std::vector<std::string_view>;

  /// What pipeline does with an error reply to one of the commands (the stream
  /// is in step: the sentinel came after it): raise, StoreError(server) for the
  /// whole call (and drop the connection), or keep it in its place, a failure
  /// of that command alone (a per-key error: WRONGTYPE).
  enum class ErrorReplies { raise, keep };

  /// Sends every command in one pipeline, followed by the sentinel, and returns
  /// the commands' replies in order. Throws StoreError (and drops the
  /// connection) if any reply is missing, malformed or an error reply, if the
  /// sentinel's reply is not its nonce, or if bytes follow it.
  std::vector<Reply> pipeline(const std::vector<Command>& commands);

  /// Sees each top-level string reply while it is still in hiredis' read
  /// buffer, before hiredis copies it into a reply object:
  /// tap(command index, bytes, length). When tap returns true it has taken
  /// the bytes, and that reply holds an empty string instead (no copy).
  using StringTap = std::function<bool(std::size_t index, const char* data, std::size_t len)>;
  std::vector<Reply> pipeline(const std::vector<Command>& commands, const StringTap& tap,
                              ErrorReplies errors = ErrorReplies::raise);
  Reply command(const Command& command);

  bool connected() const noexcept { return ctx_ != nullptr; }
  const Options& options() const noexcept { return options_; }
  /// Drops the connection (the next call connects again). Callers that find a
  /// reply they cannot use call it before throwing StoreError.
  void disconnect() noexcept;

 private:
  using Clock = std::chrono::steady_clock;
  redisContext* context();
  std::vector<Reply> exchange(const std::vector<Command>& commands, const StringTap& tap);
  void arm();                               // the socket timeout for the next read or write: per-read, or the time left
  void read_more(std::string_view during);  // feeds the reader more bytes, reading the socket if need be
  [[noreturn]] void fail(std::string_view during, int saved_errno);
  [[noreturn]] void fail_io(std::string_view during, int saved_errno, std::string detail);
  [[noreturn]] void past_deadline(std::string_view during);
  std::string next_nonce();
  static void* create_string(const redisReadTask* task, char* str, std::size_t len);

  Options options_;
  redisContext* ctx_ = nullptr;
  Clock::time_point deadline_ = Clock::time_point::max();  // of the call under way
  std::chrono::microseconds armed_{-1};                    // the socket's timeout now
  bool armed_by_deadline_ = false;                         // ... shortened to the time left
  std::vector<char> inbuf_;                                // bytes read from the socket ...
  std::size_t received_ = 0;                               // ... how many
  std::size_t fed_ = 0;                                    // ... fed to hiredis' reader so far
  std::mt19937_64 nonce_rng_;                              // seeded from std::random_device
  std::size_t tap_limit_ = 0;                              // replies [0, tap_limit_) are tapped
  redisReplyObjectFunctions functions_{};                  // hiredis' own, createString routed through tap_
  const redisReplyObjectFunctions* hiredis_functions_ = nullptr;
  const StringTap* tap_ = nullptr;  // set during pipeline(commands, tap)
  std::size_t tap_index_ = 0;       // the reply being read
  std::exception_ptr tap_error_;    // what the tap threw
};

}  // namespace kvkey_redis

#endif  // KVKEY_EXAMPLES_REDIS_CONNECTION_HPP
