// SPDX-License-Identifier: Apache-2.0
// Shared pieces of the Redis integration tests: the server under test,
// deployments with deterministic KV payloads, kvkey::Connector over the
// example's hiredis store (kvkey_redis::RedisStore), and a redis-server the
// test controls itself (for kill / restart / stop).
#ifndef KVKEY_TESTS_INTEGRATION_SUPPORT_HPP
#define KVKEY_TESTS_INTEGRATION_SUPPORT_HPP

#include "redis_store.hpp"

#include <kvkey/connector.hpp>
#include <kvkey/kvkey.hpp>
#include <kvkey/metrics.hpp>

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace it {

using Namespace = kvkey::KeyNamespace<>;
using Store = kvkey_redis::RedisStore;
using Status = kvkey::LoadResult::Status;

/// One block's load through kvkey::Connector::load_views, the payload copied.
struct Loaded {
  Status status = Status::missing;
  kvkey::Verdict verdict;             ///< rejected: why
  std::vector<std::uint8_t> payload;  ///< the verified KV bytes, only when loaded
};

/// kvkey::Connector over store for ranks (the namespaces of one deployment,
/// or some of its ranks). Store errors are raised (Options::raise_errors): the
/// tests catch kvkey_redis::StoreError; metrics: recorded there, or null.
kvkey::Connector<> connector(Store& store, const std::vector<const Namespace*>& ranks,
                             kvkey::Metrics* metrics = nullptr);

/// kvkey::Connector::lookup / lookup_existing: leading blocks verified (existing) on every rank.
std::size_t lookup(Store& store, const std::vector<const Namespace*>& ranks, const std::vector<kvkey::Digest>& blocks,
                   kvkey::Metrics* metrics = nullptr);
std::size_t lookup(Store& store, const std::vector<const Namespace*>& ranks, const std::vector<std::int32_t>& tokens);
std::size_t lookup_existing(Store& store, const std::vector<const Namespace*>& ranks,
                            const std::vector<kvkey::Digest>& blocks);
std::size_t lookup_existing(Store& store, const std::vector<const Namespace*>& ranks,
                            const std::vector<std::int32_t>& tokens);

/// kvkey::Connector::load_views of ns's blocks, each payload copied.
std::vector<Loaded> load(Store& store, const Namespace& ns, const std::vector<kvkey::Digest>& blocks,
                         kvkey::Metrics* metrics = nullptr);

/// kvkey::Connector::load_into of ns's blocks into one buffer per block (each
/// of ns's payload size).
std::vector<kvkey::LoadResult> load_into(Store& store, const Namespace& ns, const std::vector<kvkey::Digest>& blocks,
                                         const std::vector<std::uint8_t*>& dests);

/// The shared server the CI stage started: 127.0.0.1 and $KVKEY_REDIS_PORT.
/// Fails the test (never skips it) when the variable is not set.
kvkey_redis::Options shared_server();

/// A tenant name no other test (or earlier run) on the shared server uses.
std::string unique_tenant(std::string_view tag);

/// A small model: 8 KV heads, 2 layers, head_dim 4, 8-token blocks, fp16.
kvkey::Identity base_identity(const std::string& tenant);

/// `blocks` full blocks of tokens; the first `shared_blocks` depend only on
/// `family`, the rest on `seed` too (prompts of one family share a prefix).
std::vector<std::int32_t> prompt(std::uint32_t family, std::uint32_t seed, std::size_t blocks,
                                 std::size_t shared_blocks = 0);

/// One deployment: a namespace per TP rank (pp = 1) and the KV bytes each rank
/// writes. Payloads are a function of what the object is (identity without
/// the rank, KV slice, block hash), computed without kvkey's key derivation:
/// a load that returns another deployment's or another block's bytes never
/// matches, while replicas and identical deployments agree byte for byte.
class Deployment {
 public:
  Deployment(std::string name, kvkey::Identity id);

  const std::string& name() const noexcept { return name_; }
  const kvkey::Identity& identity() const noexcept { return ranks_.front().identity(); }
  std::size_t rank_count() const noexcept { return ranks_.size(); }
  const Namespace& rank(std::size_t r) const { return ranks_.at(r); }
  std::vector<const Namespace*> all_ranks() const;

  /// KV bytes of one block on rank r (all of the rank's layers and heads).
  std::size_t payload_size(std::size_t r) const;
  std::vector<std::uint8_t> payload(std::size_t r, const kvkey::Digest& block) const;

  /// Saves rank r's payloads for blocks (kvkey::Connector::save; a store error throws).
  void save(Store& store, std::size_t r, const std::vector<kvkey::Digest>& blocks,
            kvkey::Metrics* metrics = nullptr) const;
  void save_all_ranks(Store& store, const std::vector<kvkey::Digest>& blocks) const;

  /// How many of blocks rank r loads with exactly its own payload bytes.
  std::size_t count_exact_loads(Store& store, std::size_t r, const std::vector<kvkey::Digest>& blocks) const;

 private:
  std::string name_;
  std::vector<Namespace> ranks_;
  std::string object_seed_;  // identity without the shard
};

/// The raw stored value of key (empty when missing).
std::string get_raw(Store& store, const std::string& key);
void set_raw(Store& store, const std::string& key, std::string_view value);

/// A TCP port on 127.0.0.1 that nothing listens on right now.
int free_port();

/// A redis-server child process on 127.0.0.1 without persistence. The child
/// dies with the thread that started it (PR_SET_PDEATHSIG), so construct it on
/// the test's main thread.
class RedisServer {
 public:
  RedisServer();  ///< starts on a free port and waits until it answers PING
  ~RedisServer();
  RedisServer(const RedisServer&) = delete;
  RedisServer& operator=(const RedisServer&) = delete;

  int port() const noexcept { return port_; }
  kvkey_redis::Options options() const;

  void kill();     ///< SIGKILL and reap
  void restart();  ///< start again on the same port and wait until ready
  void pause();    ///< SIGSTOP: accepts connections, answers nothing
  void resume();   ///< SIGCONT

 private:
  void spawn();
  int port_;
  pid_t pid_ = -1;
  std::string dir_;
};

/// tests/integration/fault_proxy.py as a child process on 127.0.0.1, relaying
/// to upstream_port with the faults its arguments ask for (see the script);
/// stopped when destroyed. Construct it on the test's main thread.
class FaultProxy {
 public:
  FaultProxy(int upstream_port, const std::vector<std::string>& args);
  ~FaultProxy();
  FaultProxy(const FaultProxy&) = delete;
  FaultProxy& operator=(const FaultProxy&) = delete;

  int port() const noexcept { return port_; }
  /// Options for a connector that talks to the server through the proxy.
  kvkey_redis::Options options() const;

 private:
  pid_t pid_ = -1;
  int stdin_fd_ = -1;  // the child serves until this closes
  int port_ = 0;
};

}  // namespace it

#endif  // KVKEY_TESTS_INTEGRATION_SUPPORT_HPP
