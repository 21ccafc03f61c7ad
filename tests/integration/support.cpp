// SPDX-License-Identifier: Apache-2.0
#include "support.hpp"

#include "support/fixtures.hpp"

#include <kvkey/fmt.hpp>

#include <fmt/format.h>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>
#include <stdexcept>
#include <thread>

namespace it {

kvkey_redis::Options shared_server() {
  const char* port = std::getenv("KVKEY_REDIS_PORT");
  if (port == nullptr || *port == '\0') {
    throw std::runtime_error(
        "KVKEY_REDIS_PORT is not set: start a redis-server on 127.0.0.1 and export its port, "
        "or run `scripts/test.sh redis`, which does both");
  }
  kvkey_redis::Options o;
  o.port = std::atoi(port);
  o.command_timeout = std::chrono::milliseconds(10000);  // generous: the machine may be busy
  return o;
}

std::string unique_tenant(std::string_view tag) {
  static std::atomic<unsigned> counter{0};
  static const unsigned run = std::random_device{}();
  return fmt::format("{}-{}-{:08x}-{}", tag, ::getpid(), run, counter++);
}

kvkey::Identity base_identity(const std::string& tenant) {
  return kvkey_test::make_identity(tenant, "Qwen/Qwen2.5-7B-Instruct", kvkey_test::qwen_7b_revision,
                                   {kvkey::KvDtype::fp16, 8, 2, 8, 4, "it.layer_major.v1"});
}

std::vector<std::int32_t> prompt(std::uint32_t family, std::uint32_t seed, std::size_t blocks,
                                 std::size_t shared_blocks) {
  constexpr std::size_t block_size = 8;  // base_identity's
  std::vector<std::int32_t> tokens;
  for (std::size_t i = 0; i < blocks * block_size; ++i) {
    const std::uint32_t salt = i < shared_blocks * block_size ? 0 : seed + 1;
    tokens.push_back(static_cast<std::int32_t>((family * 7919u + salt * 104729u + i * 31u) % 150000u));
  }
  return tokens;
}

// ---- deployments ----------------------------------------------------------------

Deployment::Deployment(std::string name, kvkey::Identity id) : name_(std::move(name)) {
  for (std::uint32_t r = 0; r < id.shard.tp_size; ++r) {
    id.shard.tp_rank = r;
    ranks_.emplace_back(id);
  }
  kvkey::Identity unsharded = ranks_.front().identity();
  unsharded.shard = {};
  object_seed_ = kvkey::describe(unsharded);
}

std::vector<const Namespace*> Deployment::all_ranks() const {
  std::vector<const Namespace*> out;
  for (const auto& ns : ranks_) out.push_back(&ns);
  return out;
}

namespace {

std::size_t bits_of(kvkey::KvDtype d) {
  switch (d) {
    case kvkey::KvDtype::fp32: return 32;
    case kvkey::KvDtype::fp16:
    case kvkey::KvDtype::bf16: return 16;
    case kvkey::KvDtype::int4:
    case kvkey::KvDtype::uint4:
    case kvkey::KvDtype::fp4_e2m1: return 4;
    default: return 8;
  }
}

}  // namespace

std::size_t Deployment::payload_size(std::size_t r) const {
  const kvkey::Kv& kv = identity().kv;
  const kvkey::Slice& s = rank(r).slice();
  const std::size_t layers = s.layer_end - s.layer_begin;
  const std::size_t heads = s.kv_head_end - s.kv_head_begin;
  const std::size_t elements = layers * 2 * heads * kv.head_dim * kv.block_size;  // K and V
  std::size_t bytes = elements * bits_of(kv.dtype) / 8;
  if (kv.quant.scheme != "none") {
    const std::size_t groups = kv.quant.group_size != 0 ? elements / kv.quant.group_size : layers * 2 * heads;
    const std::size_t per_group = bits_of(kv.quant.scale_dtype.value_or(kvkey::KvDtype::fp16)) / 8;
    bytes += groups * per_group * (kv.quant.zero_point ? 2 : 1);
  }
  return bytes;
}

std::vector<std::uint8_t> Deployment::payload(std::size_t r, const kvkey::Digest& block) const {
  const kvkey::Digest seed = kvkey::fingerprint(fmt::format("{}|{}|{}", object_seed_, rank(r).slice(), block));
  std::uint64_t state = 0;
  std::memcpy(&state, seed.data(), sizeof state);
  std::vector<std::uint8_t> out(payload_size(r));
  for (std::size_t i = 0; i < out.size(); i += 8) {  // splitmix64
    std::uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    std::memcpy(out.data() + i, &z, std::min<std::size_t>(8, out.size() - i));
  }
  return out;
}

void Deployment::save(Store& store, std::size_t r, const std::vector<kvkey::Digest>& blocks,
                      kvkey::Metrics* metrics) const {
  std::vector<std::vector<std::uint8_t>> bytes;
  std::vector<kvkey::Payload> payloads;
  bytes.reserve(blocks.size());
  for (const auto& b : blocks) bytes.push_back(payload(r, b));
  for (const auto& p : bytes) payloads.emplace_back(p.data(), p.size());
  const std::size_t stored = connector(store, {&rank(r)}, metrics).save(blocks, payloads);
  if (stored != blocks.size()) {
    throw kvkey_redis::StoreError(
        kvkey_redis::StoreError::Kind::server,
        "save: the store took " + std::to_string(stored) + " of " + std::to_string(blocks.size()) + " values");
  }
}

void Deployment::save_all_ranks(Store& store, const std::vector<kvkey::Digest>& blocks) const {
  for (std::size_t r = 0; r < rank_count(); ++r) save(store, r, blocks);
}

std::size_t Deployment::count_exact_loads(Store& store, std::size_t r, const std::vector<kvkey::Digest>& blocks) const {
  const auto loaded = load(store, rank(r), blocks);
  std::size_t n = 0;
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    n += loaded[i].status == Status::loaded && loaded[i].payload == payload(r, blocks[i]);
  }
  return n;
}

// ---- kvkey::Connector over the store ---------------------------------------------------

kvkey::Connector<> connector(Store& store, const std::vector<const Namespace*>& ranks, kvkey::Metrics* metrics) {
  std::vector<Namespace> copies;
  for (const Namespace* ns : ranks) copies.push_back(*ns);
  kvkey::Connector<>::Options o;
  o.metrics = metrics;
  o.raise_errors = true;
  return kvkey::Connector<>(store, std::move(copies), o);
}

std::size_t lookup(Store& store, const std::vector<const Namespace*>& ranks, const std::vector<kvkey::Digest>& blocks,
                   kvkey::Metrics* metrics) {
  return connector(store, ranks, metrics).lookup(blocks);
}
std::size_t lookup(Store& store, const std::vector<const Namespace*>& ranks, const std::vector<std::int32_t>& tokens) {
  return lookup(store, ranks, ranks.at(0)->block_hashes(tokens));
}
std::size_t lookup_existing(Store& store, const std::vector<const Namespace*>& ranks,
                            const std::vector<kvkey::Digest>& blocks) {
  return connector(store, ranks).lookup_existing(blocks);
}
std::size_t lookup_existing(Store& store, const std::vector<const Namespace*>& ranks,
                            const std::vector<std::int32_t>& tokens) {
  return lookup_existing(store, ranks, ranks.at(0)->block_hashes(tokens));
}

std::vector<Loaded> load(Store& store, const Namespace& ns, const std::vector<kvkey::Digest>& blocks,
                         kvkey::Metrics* metrics) {
  const std::vector<kvkey::LoadedView> views = connector(store, {&ns}, metrics).load_views(blocks);
  std::vector<Loaded> out(views.size());
  for (std::size_t i = 0; i < views.size(); ++i) {
    out[i].status = views[i].result.status;
    out[i].verdict = views[i].result.verdict;
    if (views[i].result.loaded()) {
      const auto* p = static_cast<const std::uint8_t*>(views[i].payload.data);
      out[i].payload.assign(p, p + views[i].payload.size);
    }
  }
  return out;
}

std::vector<kvkey::LoadResult> load_into(Store& store, const Namespace& ns, const std::vector<kvkey::Digest>& blocks,
                                         const std::vector<std::uint8_t*>& dests) {
  const std::size_t size = static_cast<std::size_t>(ns.payload_size().value_or(0));
  std::vector<kvkey::MutableBuffer> buffers;
  for (std::uint8_t* d : dests) buffers.push_back({d, size});
  return connector(store, {&ns}).load_into(blocks, buffers);
}

// ---- raw access -------------------------------------------------------------------

std::string get_raw(Store& store, const std::string& key) {
  const auto r = store.connection().command({"GET", key});
  return r->type == REDIS_REPLY_STRING ? std::string(r->str, r->len) : std::string();
}

void set_raw(Store& store, const std::string& key, std::string_view value) {
  store.connection().command({"SET", key, value});
}

int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) throw std::runtime_error("free_port: socket failed");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof addr;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    ::close(fd);
    throw std::runtime_error("free_port: bind failed");
  }
  ::close(fd);
  return ntohs(addr.sin_port);
}

// ---- a redis-server of our own ------------------------------------------------------------

RedisServer::RedisServer() : port_(free_port()) {
  char dir[] = "/tmp/kvkey-redis-XXXXXX";
  if (::mkdtemp(dir) == nullptr) throw std::runtime_error("RedisServer: mkdtemp failed");
  dir_ = dir;
  // A port found free can be taken by another process before the server binds
  // it (two test runs on one machine): try a few ports.
  for (int attempt = 1;; ++attempt) {
    try {
      spawn();
      return;
    } catch (const std::runtime_error&) {
      if (attempt == 5) throw;
      kill();
      port_ = free_port();
    }
  }
}

RedisServer::~RedisServer() {
  if (pid_ > 0) {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }
  std::error_code ec;
  std::filesystem::remove_all(dir_, ec);
}

kvkey_redis::Options RedisServer::options() const {
  kvkey_redis::Options o;
  o.port = port_;
  // Generous, as for the shared server: a busy machine must not turn a slow
  // reply into an error (the stall test waits this long once).
  o.connect_timeout = std::chrono::milliseconds(5000);
  o.command_timeout = std::chrono::milliseconds(10000);
  return o;
}

void RedisServer::spawn() {
  // Everything the child needs is prepared before fork: other threads may be
  // running, so the child calls only async-signal-safe functions.
  const std::string port = std::to_string(port_);
  const std::string log = dir_ + "/redis.log";
  const char* argv[] = {
      KVKEY_REDIS_SERVER_PATH, "--port", port.c_str(), "--bind",     "127.0.0.1",   "--save", "",
      "--appendonly",          "no",     "--dir",      dir_.c_str(), "--daemonize", "no",     nullptr};
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error("RedisServer: fork failed");
  if (pid == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(127);
    const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd >= 0) {
      ::dup2(fd, 1);
      ::dup2(fd, 2);
    }
    ::execv(argv[0], const_cast<char* const*>(argv));
    ::_exit(127);
  }
  pid_ = pid;
  kvkey_redis::Options o = options();
  o.connect_timeout = std::chrono::milliseconds(200);
  kvkey_redis::Connection probe(o);
  // Bounded by a generous wall-clock limit, not a count of attempts: each
  // attempt's own length depends on the machine.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < deadline) {
    try {
      probe.command({"PING"});
      return;
    } catch (const kvkey_redis::StoreError&) {
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        throw std::runtime_error("redis-server exited at startup (port " + port + "); see " + log);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  throw std::runtime_error("redis-server did not answer PING within 60 s (port " + port + ")");
}

void RedisServer::kill() {
  if (pid_ <= 0) return;
  ::kill(pid_, SIGKILL);
  ::waitpid(pid_, nullptr, 0);
  pid_ = -1;
}

void RedisServer::restart() {
  kill();
  spawn();
}

// ---- the fault proxy ----------------------------------------------------------------------

FaultProxy::FaultProxy(int upstream_port, const std::vector<std::string>& args) {
  std::vector<std::string> words = {KVKEY_PYTHON_PATH, KVKEY_FAULT_PROXY_PATH, "--upstream-port",
                                    std::to_string(upstream_port)};
  words.insert(words.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& w : words) argv.push_back(w.data());
  argv.push_back(nullptr);
  int to_child[2];
  int from_child[2];
  if (::pipe(to_child) != 0) throw std::runtime_error("FaultProxy: pipe failed");
  if (::pipe(from_child) != 0) {
    ::close(to_child[0]);
    ::close(to_child[1]);
    throw std::runtime_error("FaultProxy: pipe failed");
  }
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error("FaultProxy: fork failed");
  if (pid == 0) {  // async-signal-safe calls only
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(127);
    ::dup2(to_child[0], 0);
    ::dup2(from_child[1], 1);
    ::close(to_child[1]);
    ::close(from_child[0]);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  pid_ = pid;
  ::close(to_child[0]);
  ::close(from_child[1]);
  stdin_fd_ = to_child[1];
  // The first line is "port N".
  std::string line;
  char c = 0;
  while (::read(from_child[0], &c, 1) == 1 && c != '\n') line.push_back(c);
  ::close(from_child[0]);
  if (line.rfind("port ", 0) != 0) {
    ::close(stdin_fd_);
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    throw std::runtime_error("fault_proxy.py did not start (said: '" + line + "')");
  }
  port_ = std::atoi(line.c_str() + 5);
}

FaultProxy::~FaultProxy() {
  ::close(stdin_fd_);
  ::kill(pid_, SIGKILL);
  ::waitpid(pid_, nullptr, 0);
}

kvkey_redis::Options FaultProxy::options() const {
  kvkey_redis::Options o;
  o.port = port_;
  o.connect_timeout = std::chrono::milliseconds(5000);
  o.command_timeout = std::chrono::milliseconds(10000);
  return o;
}

void RedisServer::pause() { ::kill(pid_, SIGSTOP); }
void RedisServer::resume() { ::kill(pid_, SIGCONT); }

}  // namespace it
