// SPDX-License-Identifier: Apache-2.0
// A KV-block connector for Redis, keyed and verified with kvkey.
//
// Each stored object is one Redis string under ns.store_key(block):
//
//     value = ns.seal(block, payload)  (1024 bytes)  ||  payload (the KV bytes)
//
// The header records the payload's digest (a MAC in a keyed namespace); load
// verifies it over the bytes received, so a damaged or replaced payload is a
// miss (payload_mismatch) and the block is recomputed.
//
// Header and payload are written by ONE SET, so a header never exists without
// its payload. A reader fetches the value, verifies the header against its own
// namespace and treats anything but Reason::ok as a miss, so foreign or stale
// KV is never served.
//
// Loads. load_into verifies each value in place in hiredis' read buffer and
// copies only verified payloads, once, into buffers the caller owns (an
// engine's registered KV memory); load does the same into a fresh vector per
// block. hiredis' own copy of each value into a reply object is skipped.
//
// Errors. Per-block outcomes are values (LoadOutcome, LoadedBlock, Lookup).
// A key the server answers with an error reply of its own (a key of another
// type: WRONGTYPE) is a miss for that block alone (LoadStatus::failed, not
// counted by a lookup), counted as a store error of kind server per key
// (Lookup::key_errors, kvkey::Metrics); the rest of the call is served and the
// connection stays up: every other reply and the sentinel were read.
// Bad arguments throw std::invalid_argument before anything is sent. Whole-call
// failures throw StoreError: the server cannot be reached, a read or the whole
// call took too long, the reply stream broke off part-way, was not valid RESP
// or not what was sent, or the server answered with an error. After a
// StoreError nothing of that call may be trusted (a save may have written some
// of its objects, which is harmless: each object verifies on its own); the
// connection is dropped and the next call connects afresh.
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
// Metrics. A Connector given a kvkey::Metrics (constructor or set_metrics)
// records every call into it: lookups and loads with their blocks by result,
// each rejection by reason and field, verified payload bytes, saves, and store
// errors by kind (connect and io count as "connection"). False hits need to
// know which load follows which lookup: the engine records them
// (Metrics::record_false_hits). One Metrics may be shared by the Connectors of
// every thread.
//
// Threads. A Connector holds one hiredis connection, which is not thread-safe:
// use one Connector per thread. The kvkey::KeyNamespace objects are immutable
// and may be shared by all threads.
//
// Signals. hiredis writes to its socket with write(2): a write to a connection
// the server has closed raises SIGPIPE, which kills the process by default.
// Programs using the connector ignore SIGPIPE (std::signal(SIGPIPE, SIG_IGN));
// the failed write then becomes a StoreError.
#ifndef KVKEY_EXAMPLES_REDIS_CONNECTOR_HPP
#define KVKEY_EXAMPLES_REDIS_CONNECTOR_HPP

#include <kvkey/kvkey.hpp>

#include <hiredis/hiredis.h>
#include <kvkey/metrics.hpp>

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

using Namespace = kvkey::KeyNamespace<>;

struct Options {
  std::string host = "127.0.0.1";
  int port = 6379;
  std::chrono::milliseconds connect_timeout{1000};
  std::chrono::milliseconds command_timeout{2000};  ///< per socket read / write (0: none)
  std::chrono::milliseconds call_deadline{10000};   ///< per call, connect to last reply (0: none)
};

/// A call that could not complete. kind() says why; what() says where.
class StoreError : public std::runtime_error {
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
  Kind kind() const noexcept { return kind_; }

 private:
  Kind kind_;
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

/// One object to save: a block hash and its KV bytes.
struct BlockPayload {
  kvkey::Digest block;
  const std::uint8_t* data = nullptr;
  std::size_t size = 0;
};

/// The outcome of a lookup: how much of the prompt the store can serve, and
/// the hashes of all its full blocks (the first prefix.blocks are the hits).
struct Lookup {
  kvkey::ReusablePrefix prefix;
  std::vector<kvkey::Digest> blocks;
  /// Keys the server answered with an error reply (WRONGTYPE): each a miss, and
  /// a store error of kind server in kvkey::Metrics.
  std::size_t key_errors = 0;
};

enum class LoadStatus {
  loaded,    ///< the header verified and the value has the expected size
  missing,   ///< no object under the key
  rejected,  ///< an object is there but it is not ours: see verdict
  failed,    ///< the server answered this key with an error reply (WRONGTYPE): a miss, a store error (server)
};

/// The outcome of loading one block into a caller's buffer (Connector::load_into).
struct LoadOutcome {
  LoadStatus status = LoadStatus::missing;
  /// ok when loaded; for rejected, why (reason and field). Connector-level
  /// check: {malformed, "value.size"} when the header verifies but the value
  /// is not envelope_size + payload_size bytes long.
  kvkey::Verdict verdict;
};

/// The outcome of loading one block into a vector of its own (Connector::load).
struct LoadedBlock {
  LoadStatus status = LoadStatus::missing;
  kvkey::Verdict verdict;             ///< as in LoadOutcome
  std::vector<std::uint8_t> payload;  ///< the KV bytes, only when loaded
};

class Connector {
 public:
  /// metrics: where to record (see "Metrics" above), or null; it must outlive the Connector.
  explicit Connector(Options options, kvkey::Metrics* metrics = nullptr)
      : conn_(std::move(options)), metrics_(metrics) {}

  /// Records into metrics from the next call on (null: stop recording).
  void set_metrics(kvkey::Metrics* metrics) noexcept { metrics_ = metrics; }
  kvkey::Metrics* metrics() const noexcept { return metrics_; }

  /// Stores each block as seal(block, payload) || payload with one SET per block
  /// (pipelined). Returns when every SET is acknowledged; throws StoreError
  /// otherwise.
  void save(const Namespace& ns, const std::vector<BlockPayload>& blocks);

  /// Counts the leading blocks that every rank can serve, verified: one
  /// `GETRANGE key 0 1023` per (block, rank) key, block-major, in one pipeline,
  /// and a block counts only when the header read on every rank verifies for
  /// that rank's namespace and the block (KeyNamespace::verify_header, in
  /// place in hiredis' read buffer). A missing, short, foreign (another
  /// identity, epoch or format version) or damaged header is a miss. The
  /// payload is checked at load. `ranks` are the namespaces of every rank of
  /// one deployment (replicas may repeat a key). max_tokens caps the count
  /// (engines pass prompt_len - 1).
  Lookup lookup(const std::vector<const Namespace*>& ranks, std::vector<kvkey::Digest> blocks,
                std::size_t max_tokens = std::numeric_limits<std::size_t>::max());

  /// As lookup, but counts every key that exists (one EXISTS per key): it
  /// counts foreign and damaged objects too, which the load then rejects.
  /// Cheaper on the wire; for stores whose writers are all trusted.
  Lookup lookup_existing(const std::vector<const Namespace*>& ranks, std::vector<kvkey::Digest> blocks,
                         std::size_t max_tokens = std::numeric_limits<std::size_t>::max());

  /// As above, hashing the prompt's full blocks first.
  template <class Token>
  Lookup lookup(const std::vector<const Namespace*>& ranks, const std::vector<Token>& tokens,
                const kvkey::HashOptions& options = {},
                std::size_t max_tokens = std::numeric_limits<std::size_t>::max()) {
    if (ranks.empty()) throw std::invalid_argument("lookup: no ranks given");
    return lookup(ranks, ranks.front()->block_hashes(tokens, options), max_tokens);
  }
  template <class Token>
  Lookup lookup_existing(const std::vector<const Namespace*>& ranks, const std::vector<Token>& tokens,
                         const kvkey::HashOptions& options = {},
                         std::size_t max_tokens = std::numeric_limits<std::size_t>::max()) {
    if (ranks.empty()) throw std::invalid_argument("lookup_existing: no ranks given");
    return lookup_existing(ranks, ranks.front()->block_hashes(tokens, options), max_tokens);
  }

  /// Fetches every block (pipelined GET) and verifies its header and the
  /// payload's digest against ns, expecting payload_size KV bytes: the size
  /// this rank's block has, never the size the stored value claims. The check
  /// runs in place where hiredis read the value (Connection::StringTap), before
  /// any copy. Then, for each block that verified and only for those, one
  /// memcpy of its payload_size bytes into dests[i], a buffer of at least
  /// payload_size bytes the caller owns (an engine's registered KV memory,
  /// reused from call to call). A missing or rejected block leaves its
  /// destination untouched and is never reported loaded; its outcome says why.
  ///
  /// dests must hold one buffer per block, in the order of blocks, none null
  /// (unless payload_size is 0), none overlapping another: otherwise
  /// std::invalid_argument, before anything is sent. After a StoreError the
  /// destinations of blocks that verified before the failure may hold their
  /// payloads (verified bytes, never others), but no block counts as loaded.
  std::vector<LoadOutcome> load_into(const Namespace& ns, const std::vector<kvkey::Digest>& blocks,
                                     std::size_t payload_size, const std::vector<std::uint8_t*>& dests);

  /// As load_into, each payload copied into a vector of its own. Each call
  /// allocates (and the kernel page-faults) every loaded payload afresh: a
  /// caller with buffers of its own uses load_into.
  std::vector<LoadedBlock> load(const Namespace& ns, const std::vector<kvkey::Digest>& blocks,
                                std::size_t payload_size);

  /// Every key starting with prefix (SCAN MATCH, the prefix glob-escaped),
  /// without duplicates. For tests and small stores.
  std::vector<std::string> keys(std::string_view prefix);

  /// Removes every key starting with prefix (SCAN + UNLINK); returns how many
  /// were removed. Pass ns.key_prefix() to drop one epoch of a model,
  /// ns.tenant_prefix() to drop a tenant. An empty prefix is refused.
  std::size_t purge(std::string_view prefix);

  /// The underlying connection, for raw commands.
  Connection& connection() noexcept { return conn_; }

 private:
  // Runs call; a StoreError it throws (a reply the connector cannot use
  // included) drops the connection first.
  template <class Call>
  decltype(auto) guarded(Call&& call);
  template <class Visit>
  void scan(std::string_view prefix, Visit&& visit);
  // GETs and verifies every block; calls deliver(i, payload) for each block
  // that verified, payload pointing at its payload_size bytes in hiredis'
  // read buffer (valid during the call only).
  template <class Deliver>
  std::vector<LoadOutcome> load_verified(const Namespace& ns, const std::vector<kvkey::Digest>& blocks,
                                         std::size_t payload_size, Deliver&& deliver);

  // Records n keys answered with an error reply, each a store error of kind server.
  void record_key_errors(std::size_t n) noexcept;
  // Records a finished load or lookup (rejections by verdict, payload bytes).
  void record_loads(const std::vector<LoadOutcome>& outcomes, std::size_t payload_size) noexcept;

  Connection conn_;
  kvkey::Metrics* metrics_ = nullptr;
};

/// prefix with Redis glob specials (* ? [ ] \) escaped, for SCAN MATCH.
std::string glob_escape(std::string_view prefix);

}  // namespace kvkey_redis

#endif  // KVKEY_EXAMPLES_REDIS_CONNECTOR_HPP
