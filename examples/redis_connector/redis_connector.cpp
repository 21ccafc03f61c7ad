// SPDX-License-Identifier: Apache-2.0
#include "redis_connector.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <exception>
#include <set>
#include <sys/time.h>
#include <utility>

namespace kvkey_redis {

// ---- errors -------------------------------------------------------------------

StoreError::StoreError(Kind kind, const std::string& what)
    : std::runtime_error("[redis." + std::string(to_string(kind)) + "] " + what), kind_(kind) {}

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

namespace {

timeval to_timeval(std::chrono::milliseconds ms) {
  timeval tv{};
  tv.tv_sec = static_cast<decltype(tv.tv_sec)>(ms.count() / 1000);
  tv.tv_usec = static_cast<decltype(tv.tv_usec)>((ms.count() % 1000) * 1000);
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

void expect_type(const redisReply& r, int type, std::string_view what) {
  if (r.type != type) {
    throw StoreError(StoreError::Kind::protocol, std::string(what) + ": unexpected reply type " +
                                                     std::to_string(r.type));
  }
}

}  // namespace

// ---- connection ------------------------------------------------------------------

Connection::Connection(Options options) : options_(std::move(options)) {}

Connection::~Connection() { disconnect(); }

void Connection::disconnect() noexcept {
  if (ctx_ != nullptr) redisFree(ctx_);
  ctx_ = nullptr;
}

redisContext* Connection::context() {
  if (ctx_ != nullptr) return ctx_;
  const std::string where = options_.host + ":" + std::to_string(options_.port);
  redisContext* c = redisConnectWithTimeout(options_.host.c_str(), options_.port, to_timeval(options_.connect_timeout));
  if (c == nullptr) throw StoreError(StoreError::Kind::connect, where + ": out of memory");
  if (c->err != 0 || redisSetTimeout(c, to_timeval(options_.command_timeout)) != REDIS_OK) {
    const std::string msg = where + ": " + c->errstr;
    redisFree(c);
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
  // Status and error replies come through here too: only bulk strings are tapped.
  if (self->tap_ != nullptr && task->parent == nullptr && task->type == REDIS_REPLY_STRING && !self->tap_error_) {
    try {  // no exception may unwind through hiredis' C frames
      if ((*self->tap_)(self->tap_index_, str, len)) len = 0;  // taken: the reply gets an empty string
    } catch (...) {
      self->tap_error_ = std::current_exception();  // rethrown once every reply is read
    }
  }
  return self->hiredis_functions_->createString(task, str, len);
}

void Connection::fail(std::string_view during, int saved_errno) {
  StoreError::Kind kind = StoreError::Kind::io;
  std::string detail = ctx_->errstr[0] != '\0' ? ctx_->errstr : "connection closed";
  if (ctx_->err == REDIS_ERR_PROTOCOL) {
    kind = StoreError::Kind::protocol;
  } else if (is_timeout(ctx_->err, saved_errno)) {
    kind = StoreError::Kind::timeout;
    detail = "no reply within " + std::to_string(options_.command_timeout.count()) + " ms";
  }
  // The reply stream is out of step now (or the socket is gone): start afresh.
  disconnect();
  throw StoreError(kind, std::string(during) + ": " + detail);
}

std::vector<Reply> Connection::pipeline(const std::vector<Command>& commands) { return pipeline(commands, {}); }

std::vector<Reply> Connection::pipeline(const std::vector<Command>& commands, const StringTap& tap) {
  if (commands.empty()) return {};
  redisContext* c = context();
  std::vector<const char*> argv;
  std::vector<std::size_t> lens;
  for (const Command& cmd : commands) {
    argv.clear();
    lens.clear();
    for (std::string_view arg : cmd) {
      argv.push_back(arg.data());
      lens.push_back(arg.size());
    }
    if (redisAppendCommandArgv(c, static_cast<int>(argv.size()), argv.data(), lens.data()) != REDIS_OK) {
      fail("queueing a command", errno);
    }
  }
  std::vector<Reply> replies;
  replies.reserve(commands.size());
  struct TapGuard {  // the tap is set for this call only, also when it throws
    const StringTap*& slot;
    ~TapGuard() { slot = nullptr; }
  } guard{tap_};
  tap_ = tap ? &tap : nullptr;
  tap_error_ = nullptr;
  for (std::size_t i = 0; i < commands.size(); ++i) {
    void* r = nullptr;
    tap_index_ = i;  // redisGetReply parses exactly one reply
    if (redisGetReply(c, &r) != REDIS_OK || r == nullptr) {
      const int saved_errno = errno;
      fail("reply " + std::to_string(i + 1) + " of " + std::to_string(commands.size()), saved_errno);
    }
    replies.emplace_back(static_cast<redisReply*>(r));
  }
  // All replies are read, so the connection stays in step even on error replies.
  if (tap_error_) std::rethrow_exception(std::exchange(tap_error_, nullptr));
  for (const Reply& r : replies) {
    if (r->type == REDIS_REPLY_ERROR) throw StoreError(StoreError::Kind::server, std::string(r->str, r->len));
  }
  return replies;
}

Reply Connection::command(const Command& command) { return std::move(pipeline({command}).front()); }

// ---- the connector ------------------------------------------------------------------

void Connector::save(const Namespace& ns, const std::vector<BlockPayload>& blocks) {
  std::vector<std::string> keys;
  std::vector<std::string> values;
  keys.reserve(blocks.size());
  values.reserve(blocks.size());
  for (const BlockPayload& b : blocks) {
    const kvkey::Envelope header = ns.seal(b.block, kvkey::Payload(b.data, b.size));  // size and digest
    std::string value(kvkey::envelope_size + b.size, '\0');
    std::memcpy(value.data(), header.data(), header.size());
    if (b.size != 0) std::memcpy(value.data() + header.size(), b.data, b.size);
    keys.push_back(ns.store_key(b.block));
    values.push_back(std::move(value));
  }
  std::vector<Connection::Command> commands;  // one SET per object: header and payload together
  commands.reserve(blocks.size());
  for (std::size_t i = 0; i < blocks.size(); ++i) commands.push_back({"SET", keys[i], values[i]});
  for (const Reply& r : conn_.pipeline(commands)) expect_type(*r, REDIS_REPLY_STATUS, "SET");
}

Lookup Connector::lookup(const std::vector<const Namespace*>& ranks, std::vector<kvkey::Digest> blocks,
                         std::size_t max_tokens) {
  if (ranks.empty()) throw std::invalid_argument("lookup: no ranks given");
  for (const Namespace* ns : ranks) {
    if (ns->root() != ranks.front()->root() || ns->key_prefix() != ranks.front()->key_prefix()) {
      throw std::invalid_argument("lookup: the ranks belong to different deployments");
    }
  }
  // Keys block-major: block b's key on rank r at b * ranks.size() + r.
  std::vector<std::string> keys;
  keys.reserve(blocks.size() * ranks.size());
  for (const kvkey::Digest& block : blocks) {
    for (const Namespace* ns : ranks) keys.push_back(ns->store_key(block));
  }
  std::vector<Connection::Command> commands;
  commands.reserve(keys.size());
  for (const std::string& key : keys) commands.push_back({"EXISTS", key});
  std::vector<bool> found;
  found.reserve(keys.size());
  for (const Reply& r : conn_.pipeline(commands)) {
    expect_type(*r, REDIS_REPLY_INTEGER, "EXISTS");
    found.push_back(r->integer == 1);
  }
  Lookup out;
  out.prefix = ranks.front()->reusable_prefix(found, ranks.size(), max_tokens);
  out.blocks = std::move(blocks);
  return out;
}

template <class Deliver>
std::vector<LoadOutcome> Connector::load_verified(const Namespace& ns, const std::vector<kvkey::Digest>& blocks,
                                                  std::size_t payload_size, Deliver&& deliver) {
  std::vector<std::string> keys;
  keys.reserve(blocks.size());
  for (const kvkey::Digest& block : blocks) keys.push_back(ns.store_key(block));
  std::vector<Connection::Command> commands;
  commands.reserve(keys.size());
  for (const std::string& key : keys) commands.push_back({"GET", key});

  // Each value is verified where hiredis read it, before any copy, and a
  // verified payload is delivered from there: its only copy.
  std::vector<LoadOutcome> out(blocks.size());
  std::vector<bool> seen(blocks.size(), false);
  const Connection::StringTap verify_value = [&](std::size_t i, const char* data, std::size_t len) {
    const auto* value = reinterpret_cast<const std::uint8_t*>(data);
    LoadOutcome& result = out[i];
    // The header and the bytes after it, verified in place (size and digest).
    // A value shorter than an envelope is rejected by verify (envelope.size).
    const std::size_t head = std::min(len, kvkey::envelope_size);
    result.verdict = ns.verify(value, head, blocks[i], kvkey::Payload(value + head, len - head));
    if (len != kvkey::envelope_size + payload_size &&
        (result.verdict.ok() || result.verdict.reason == kvkey::Reason::size_mismatch)) {
      // Not the size this rank's block has. A header that claims the right size
      // was cut or padded (value.size); one that claims another size is
      // another writer's object (payload_size).
      const auto header = kvkey::decode_envelope(value, head);
      result.verdict = header && header->payload_size == payload_size
                           ? kvkey::Verdict{kvkey::Reason::malformed, "value.size"}
                           : kvkey::Verdict{kvkey::Reason::size_mismatch, "payload_size"};
    }
    result.status = result.verdict.ok() ? LoadStatus::loaded : LoadStatus::rejected;
    if (result.verdict.ok()) deliver(i, value + kvkey::envelope_size);
    seen[i] = true;
    return true;
  };
  const std::vector<Reply> replies = conn_.pipeline(commands, verify_value);
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    if (seen[i]) continue;
    if (replies[i]->type != REDIS_REPLY_NIL) expect_type(*replies[i], REDIS_REPLY_STRING, "GET");
    out[i].status = LoadStatus::missing;
  }
  return out;
}

std::vector<LoadOutcome> Connector::load_into(const Namespace& ns, const std::vector<kvkey::Digest>& blocks,
                                              std::size_t payload_size, const std::vector<std::uint8_t*>& dests) {
  if (dests.size() != blocks.size()) {
    throw std::invalid_argument("load_into: " + std::to_string(dests.size()) + " destinations for " +
                                std::to_string(blocks.size()) + " blocks");
  }
  if (payload_size != 0) {
    // Sorted by address, each buffer must end before the next one starts.
    std::vector<std::pair<std::uintptr_t, std::size_t>> spans;  // address, index in dests
    spans.reserve(dests.size());
    for (std::size_t i = 0; i < dests.size(); ++i) {
      if (dests[i] == nullptr) throw std::invalid_argument("load_into: destination " + std::to_string(i) + " is null");
      spans.emplace_back(reinterpret_cast<std::uintptr_t>(dests[i]), i);
    }
    std::sort(spans.begin(), spans.end());
    for (std::size_t k = 1; k < spans.size(); ++k) {
      if (spans[k].first - spans[k - 1].first < payload_size) {
        throw std::invalid_argument("load_into: destinations " + std::to_string(spans[k - 1].second) + " and " +
                                    std::to_string(spans[k].second) + " overlap (" + std::to_string(payload_size) +
                                    " bytes each)");
      }
    }
  }
  return load_verified(ns, blocks, payload_size, [&](std::size_t i, const std::uint8_t* payload) {
    if (payload_size != 0) std::memcpy(dests[i], payload, payload_size);
  });
}

std::vector<LoadedBlock> Connector::load(const Namespace& ns, const std::vector<kvkey::Digest>& blocks,
                                         std::size_t payload_size) {
  std::vector<LoadedBlock> out(blocks.size());
  const std::vector<LoadOutcome> outcomes =
      load_verified(ns, blocks, payload_size, [&](std::size_t i, const std::uint8_t* payload) {
        out[i].payload.assign(payload, payload + payload_size);
      });
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    out[i].status = outcomes[i].status;
    out[i].verdict = outcomes[i].verdict;
  }
  return out;
}

template <class Visit>
void Connector::scan(std::string_view prefix, Visit&& visit) {
  const std::string pattern = glob_escape(prefix) + "*";
  std::string cursor = "0";
  do {
    const Reply r = conn_.command({"SCAN", cursor, "MATCH", pattern, "COUNT", "1000"});
    expect_type(*r, REDIS_REPLY_ARRAY, "SCAN");
    if (r->elements != 2) throw StoreError(StoreError::Kind::protocol, "SCAN: expected [cursor, keys]");
    expect_type(*r->element[0], REDIS_REPLY_STRING, "SCAN cursor");
    expect_type(*r->element[1], REDIS_REPLY_ARRAY, "SCAN keys");
    cursor.assign(r->element[0]->str, r->element[0]->len);
    std::vector<std::string> batch;
    for (std::size_t i = 0; i < r->element[1]->elements; ++i) {
      const redisReply& k = *r->element[1]->element[i];
      expect_type(k, REDIS_REPLY_STRING, "SCAN key");
      batch.emplace_back(k.str, k.len);
    }
    if (!batch.empty()) visit(batch);
  } while (cursor != "0");
}

std::vector<std::string> Connector::keys(std::string_view prefix) {
  std::set<std::string> seen;  // SCAN may return a key more than once
  scan(prefix, [&](const std::vector<std::string>& batch) { seen.insert(batch.begin(), batch.end()); });
  return {seen.begin(), seen.end()};
}

std::size_t Connector::purge(std::string_view prefix) {
  if (prefix.empty()) throw std::invalid_argument("purge: an empty prefix would remove every key");
  std::size_t removed = 0;
  scan(prefix, [&](const std::vector<std::string>& batch) {
    Connection::Command unlink{"UNLINK"};
    for (const std::string& key : batch) unlink.push_back(key);
    const Reply r = conn_.command(unlink);
    expect_type(*r, REDIS_REPLY_INTEGER, "UNLINK");
    removed += static_cast<std::size_t>(r->integer);  // a key SCAN repeats counts once
  });
  return removed;
}

std::string glob_escape(std::string_view prefix) { return kvkey::glob_escape(prefix); }

}  // namespace kvkey_redis
