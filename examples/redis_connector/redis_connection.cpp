// SPDX-License-Identifier: Apache-2.0
#include "redis_connection.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <exception>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>
#include <utility>

namespace kvkey_redis {

// ---- errors -------------------------------------------------------------------

StoreError::StoreError(Kind kind, const std::string& what)
    : kvkey::store_error(metrics_kind(kind), "[redis." + std::string(to_string(kind)) + "] " + what),
      redis_kind_(kind) {}

std::string_view to_string(StoreError::Kind kind) noexcept {
  switch (kind) {
    case StoreError::Kind::connect: return "connect";
    case StoreError::Kind::timeout: return "timeout";
    case StoreError::Kind::io: return "io";
    case StoreError::Kind::protocol: return "protocol";
    case StoreError::Kind::server: return "server";
  }
  return "invalid";
}

std::string_view metrics_kind(StoreError::Kind kind) noexcept {
  return kind == StoreError::Kind::connect || kind == StoreError::Kind::io ? "connection" : to_string(kind);
}

namespace {

timeval to_timeval(std::chrono::microseconds us) {
  timeval tv{};
  tv.tv_sec = static_cast<decltype(tv.tv_sec)>(us.count() / 1000000);
  tv.tv_usec = static_cast<decltype(tv.tv_usec)>(us.count() % 1000000);
  return tv;
}

// A blocking socket whose SO_RCVTIMEO/SO_SNDTIMEO expired reports EAGAIN;
// hiredis 1.x also has a code of its own for it.
bool is_timeout(int redis_err, int saved_errno) {
#ifdef REDIS_ERR_TIMEOUT
  if (redis_err == REDIS_ERR_TIMEOUT) return true;
#endif
  return redis_err == REDIS_ERR_IO && (saved_errno == EAGAIN || saved_errno == EWOULDBLOCK);
}

}  // namespace

// ---- connection ------------------------------------------------------------------

Connection::Connection(Options options) : options_(std::move(options)), nonce_rng_(std::random_device{}()) {}

Connection::~Connection() { disconnect(); }

void Connection::disconnect() noexcept {
  if (ctx_ != nullptr) redisFree(ctx_);
  ctx_ = nullptr;
  armed_ = std::chrono::microseconds(-1);
  received_ = fed_ = 0;
}

redisContext* Connection::context() {
  if (ctx_ != nullptr) {
    // Bytes, the end of the stream or an error waiting before anything was
    // sent are not this call's: start on a fresh connection rather than fail.
    char byte = 0;
    const ssize_t peeked = ::recv(ctx_->fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
    const bool stale = ctx_->reader->pos < ctx_->reader->len || fed_ < received_ || peeked >= 0 ||
                       (errno != EAGAIN && errno != EWOULDBLOCK);
    if (!stale) return ctx_;
    disconnect();
  }
  const std::string where = options_.host + ":" + std::to_string(options_.port);
  std::chrono::microseconds limit = options_.connect_timeout;
  if (deadline_ != Clock::time_point::max()) {
    const auto left = std::chrono::duration_cast<std::chrono::microseconds>(deadline_ - Clock::now());
    if (left.count() <= 0) past_deadline("connecting to " + where);
    limit = std::min(limit, left);
  }
  redisContext* c = redisConnectWithTimeout(options_.host.c_str(), options_.port, to_timeval(limit));
  if (c == nullptr) throw StoreError(StoreError::Kind::connect, where + ": out of memory");
  if (c->err != 0) {
    const std::string msg = where + ": " + c->errstr;
    redisFree(c);
    if (Clock::now() >= deadline_) past_deadline("connecting to " + where);
    throw StoreError(StoreError::Kind::connect, msg);
  }
  // Every string reply passes create_string, which hands top-level ones to
  // the tap of pipeline(commands, tap) when there is one.
  hiredis_functions_ = c->reader->fn;
  functions_ = *c->reader->fn;
  functions_.createString = &Connection::create_string;
  c->reader->fn = &functions_;
  c->reader->privdata = this;
  ctx_ = c;
  return ctx_;
}

void* Connection::create_string(const redisReadTask* task, char* str, std::size_t len) {
  auto* self = static_cast<Connection*>(task->privdata);
  // Status and error replies come through here too: only bulk strings are
  // tapped, and only the replies of the caller's commands (not the sentinel).
  if (self->tap_ != nullptr && task->parent == nullptr && task->type == REDIS_REPLY_STRING &&
      self->tap_index_ < self->tap_limit_ && !self->tap_error_) {
    try {                                                      // no exception may unwind through hiredis' C frames
      if ((*self->tap_)(self->tap_index_, str, len)) len = 0;  // taken: the reply gets an empty string
    } catch (...) {
      self->tap_error_ = std::current_exception();  // rethrown once every reply is read
    }
  }
  return self->hiredis_functions_->createString(task, str, len);
}

void Connection::arm() {
  using std::chrono::microseconds;
  microseconds limit = options_.command_timeout;  // 0: none
  bool by_deadline = false;
  if (deadline_ != Clock::time_point::max()) {
    const auto left = std::chrono::duration_cast<microseconds>(deadline_ - Clock::now());
    if (left.count() <= 0) past_deadline("waiting for the server");
    if (limit.count() == 0 || left < limit) {
      limit = left;
      by_deadline = true;
    }
  }
  armed_by_deadline_ = by_deadline;
  if (limit == armed_) return;  // most reads: the socket has this timeout already
  if (redisSetTimeout(ctx_, to_timeval(limit)) != REDIS_OK) fail("setting the socket timeout", errno);
  armed_ = limit;
}

void Connection::past_deadline(std::string_view during) {
  disconnect();
  throw StoreError(StoreError::Kind::timeout, std::string(during) + ": the call passed its deadline of " +
                                                  std::to_string(options_.call_deadline.count()) + " ms");
}

void Connection::fail(std::string_view during, int saved_errno) {
  if (ctx_->err == REDIS_ERR_PROTOCOL) {
    const std::string detail = ctx_->errstr;
    disconnect();  // the reply stream is out of step now: start afresh
    throw StoreError(StoreError::Kind::protocol, std::string(during) + ": " + detail);
  }
  fail_io(during, is_timeout(ctx_->err, saved_errno) ? EAGAIN : saved_errno,
          ctx_->errstr[0] != '\0' ? ctx_->errstr : "connection closed");
}

void Connection::fail_io(std::string_view during, int saved_errno, std::string detail) {
  StoreError::Kind kind = StoreError::Kind::io;
  if (saved_errno == EAGAIN || saved_errno == EWOULDBLOCK) {
    if (armed_by_deadline_) past_deadline(during);
    kind = StoreError::Kind::timeout;
    detail = "no reply within " + std::to_string(options_.command_timeout.count()) + " ms";
  }
  disconnect();  // the socket is gone or the stream is out of step: start afresh
  throw StoreError(kind, std::string(during) + ": " + detail);
}

void Connection::read_more(std::string_view during) {
  if (fed_ < received_) {
    // hiredis moves the unparsed rest of its buffer to the front after each
    // reply of 1 KiB or more; fed in slices, that rest stays short (with 16 KiB
    // at once, a pipeline of 1 KiB replies moved about 8 times its bytes).
    constexpr std::size_t slice = 4096;
    const std::size_t n = std::min(slice, received_ - fed_);
    if (redisReaderFeed(ctx_->reader, inbuf_.data() + fed_, n) != REDIS_OK) {
      fail_io(during, ENOMEM, "out of memory");
    }
    fed_ += n;
    return;
  }
  for (;;) {
    arm();
    if (inbuf_.empty()) inbuf_.resize(64 * 1024);
    const ssize_t n = ::read(ctx_->fd, inbuf_.data(), inbuf_.size());
    if (n > 0) {
      received_ = static_cast<std::size_t>(n);
      fed_ = 0;
      read_more(during);
      return;
    }
    if (n == 0) fail_io(during, 0, "connection closed by the server");
    if (errno != EINTR) {
      const int saved_errno = errno;
      fail_io(during, saved_errno, std::strerror(saved_errno));
    }
  }
}

std::string Connection::next_nonce() {
  static constexpr char hex[] = "0123456789abcdef";
  std::string nonce = "kvkey-";
  for (int word = 0; word < 2; ++word) {  // 128 random bits
    std::uint64_t v = nonce_rng_();
    for (int i = 0; i < 16; ++i, v >>= 4) nonce.push_back(hex[v & 15]);
  }
  return nonce;
}

std::vector<Reply> Connection::pipeline(const std::vector<Command>& commands) { return pipeline(commands, {}); }

std::vector<Reply> Connection::pipeline(const std::vector<Command>& commands, const StringTap& tap,
                                        ErrorReplies errors) {
  if (commands.empty()) return {};
  deadline_ = options_.call_deadline.count() > 0 ? Clock::now() + options_.call_deadline : Clock::time_point::max();
  struct Reset {  // the deadline and the tap are this call's only, also when it throws
    Connection& c;
    ~Reset() {
      c.deadline_ = Clock::time_point::max();
      c.tap_ = nullptr;
      c.tap_limit_ = 0;
    }
  } reset{*this};
  std::vector<Reply> replies;
  try {
    replies = exchange(commands, tap);
  } catch (...) {
    disconnect();  // whatever failed, the reply stream may be out of step
    throw;
  }
  // Every reply was read and the sentinel matched: the stream is in step, and
  // the connection stays up for what the tap threw.
  if (tap_error_) std::rethrow_exception(std::exchange(tap_error_, nullptr));
  if (errors == ErrorReplies::keep) return replies;  // each error reply is its command's alone
  for (const Reply& r : replies) {
    if (r->type == REDIS_REPLY_ERROR) {
      disconnect();  // as after every StoreError
      throw StoreError(StoreError::Kind::server, std::string(r->str, r->len));
    }
  }
  return replies;
}

std::vector<Reply> Connection::exchange(const std::vector<Command>& commands, const StringTap& tap) {
  redisContext* c = context();
  const std::string nonce = next_nonce();
  const Command sentinel = {"ECHO", nonce};
  // The whole pipeline as one RESP request, written here: no per-command
  // formatting or copy into hiredis' output buffer.
  std::size_t size = 0;
  for (std::size_t k = 0; k <= commands.size(); ++k) {
    const Command& cmd = k < commands.size() ? commands[k] : sentinel;
    size += 16;                                                // "*N\r\n"
    for (std::string_view arg : cmd) size += arg.size() + 16;  // "$L\r\n" arg "\r\n"
  }
  std::string request;
  request.reserve(size);
  auto append_count = [&request](char mark, std::size_t n) {
    char digits[24];
    char* end = digits + sizeof digits;
    char* p = end;
    do {
      *--p = static_cast<char>('0' + n % 10);
      n /= 10;
    } while (n != 0);
    request.push_back(mark);
    request.append(p, static_cast<std::size_t>(end - p));
    request.append("\r\n", 2);
  };
  for (std::size_t k = 0; k <= commands.size(); ++k) {
    const Command& cmd = k < commands.size() ? commands[k] : sentinel;
    append_count('*', cmd.size());
    for (std::string_view arg : cmd) {
      append_count('$', arg.size());
      request.append(arg.data(), arg.size());
      request.append("\r\n", 2);
    }
  }
  const std::string sending = "sending " + std::to_string(commands.size()) + " commands";
  for (std::size_t sent = 0; sent < request.size();) {
    arm();
    const ssize_t n = ::send(c->fd, request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
    if (n >= 0) {
      sent += static_cast<std::size_t>(n);
    } else if (errno != EINTR) {
      const int saved_errno = errno;
      fail_io(sending, saved_errno, std::strerror(saved_errno));
    }
  }
  std::vector<Reply> replies;
  replies.reserve(commands.size() + 1);
  tap_ = tap ? &tap : nullptr;
  tap_limit_ = commands.size();
  tap_error_ = nullptr;
  for (std::size_t i = 0; i <= commands.size(); ++i) {
    void* r = nullptr;
    tap_index_ = i;  // the reader parses exactly one reply at a time
    for (;;) {
      if (redisGetReplyFromReader(c, &r) != REDIS_OK) {
        fail("reply " + std::to_string(i + 1) + " of " + std::to_string(commands.size()), errno);
      }
      if (r != nullptr) break;
      read_more("reply " + std::to_string(i + 1) + " of " + std::to_string(commands.size()));
    }
    replies.emplace_back(static_cast<redisReply*>(r));
  }
  // Exactly one reply per command, then the sentinel's nonce, then nothing:
  // otherwise a reply went missing or appeared, and these are not our replies.
  const Reply sentinel_reply = std::move(replies.back());
  replies.pop_back();
  if (sentinel_reply->type != REDIS_REPLY_STRING ||
      std::string_view(sentinel_reply->str, sentinel_reply->len) != nonce) {
    throw StoreError(StoreError::Kind::protocol, "the reply stream is out of step: reply " +
                                                     std::to_string(commands.size() + 1) +
                                                     " is not the sentinel's nonce");
  }
  if (c->reader->pos < c->reader->len || fed_ < received_) {
    throw StoreError(StoreError::Kind::protocol, "the reply stream is out of step: bytes after the sentinel");
  }
  return replies;
}

Reply Connection::command(const Command& command) { return std::move(pipeline({command}).front()); }

}  // namespace kvkey_redis
