// SPDX-License-Identifier: Apache-2.0
// Damaged values are rejected with the right reason and field, then the block
// is recomputed and loads; broken replies, timeouts and refused connections
// are errors the caller can catch, never loaded blocks.
#include <catch2/catch.hpp>

#include <fmt/format.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <atomic>
#include <cstring>
#include <functional>
#include <thread>

#include "support.hpp"

using it::Deployment;
using it::Status;
using kvkey_redis::StoreError;

namespace {

struct Fault {
  std::string name;
  std::string value;  // what is stored under block 1's key
  kvkey::Reason reason;
  std::string_view field;
};

std::string flip_bit(std::string value, std::size_t offset) {
  value.at(offset) = static_cast<char>(value[offset] ^ 0x01);
  return value;
}

// The envelope offset of the weights epoch's lowest byte, found by comparing
// the headers of two identities that differ only there.
std::size_t epoch_offset(const kvkey::Identity& id) {
  auto other = id;
  other.model.weights_epoch ^= 1;
  const kvkey::Digest block;
  const std::uint8_t none = 0;
  const auto a = it::Deployment("a", id).rank(0).seal(block, kvkey::Payload(&none, 0));
  const auto b = it::Deployment("b", other).rank(0).seal(block, kvkey::Payload(&none, 0));
  std::size_t diffs = 0;
  std::size_t at = 0;
  namespace L = kvkey::envelope_layout;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (i >= L::payload_digest && i < L::secret_id) continue;  // the digest covers the header (format v3)
    if (a[i] != b[i]) {
      ++diffs;
      at = i;
    }
  }
  REQUIRE(diffs == 1);
  return at;
}

}  // namespace

TEST_CASE("damaged values are rejected with the right reason, then recomputed", "[faults]") {
  namespace L = kvkey::envelope_layout;
  it::Store store(it::shared_server());
  const auto id = it::base_identity(it::unique_tenant("faults"));
  const Deployment d("faults", id);
  const auto blocks = d.rank(0).block_hashes(it::prompt(6, 0, 4));
  const std::size_t size = d.payload_size(0);
  d.save(store, 0, blocks);
  const std::string key = d.rank(0).store_key(blocks[1]);
  const std::string good = it::get_raw(store, key);
  const std::string other_block = it::get_raw(store, d.rank(0).store_key(blocks[2]));
  REQUIRE(good.size() == kvkey::envelope_size + size);

  auto sealed_for = [&](std::size_t payload_size) {
    const std::string bytes(payload_size, 'x');
    const auto header = d.rank(0).seal(blocks[1], kvkey::Payload(bytes.data(), bytes.size()));
    return std::string(header.begin(), header.end()) + bytes;
  };
  // Payload damage behind a valid header: what only the digest catches.
  std::string torn = good;
  std::fill(torn.end() - static_cast<std::ptrdiff_t>(size / 2), torn.end(), '\0');  // the tail never written
  const std::string transplanted = good.substr(0, kvkey::envelope_size) + other_block.substr(kvkey::envelope_size);
  const std::vector<Fault> faults = {
      {"truncated inside the header", good.substr(0, 700), kvkey::Reason::malformed, "envelope.size"},
      {"empty value", std::string(), kvkey::Reason::malformed, "envelope.size"},
      {"truncated payload", good.substr(0, good.size() - 1), kvkey::Reason::size_mismatch, "payload_size"},
      {"trailing bytes", good + "!", kvkey::Reason::size_mismatch, "payload_size"},
      {"flipped magic bit", flip_bit(good, L::magic), kvkey::Reason::malformed, "envelope.magic"},
      {"flipped version bit", flip_bit(good, L::version), kvkey::Reason::unsupported_version,
       "envelope.format_version"},
      {"flipped size bit", flip_bit(good, L::size), kvkey::Reason::malformed, "envelope.size"},
      {"flipped block-hash bit", flip_bit(good, L::block_hash + 5), kvkey::Reason::block_mismatch, "block_hash"},
      {"flipped payload-size bit", flip_bit(good, L::payload_size), kvkey::Reason::size_mismatch, "payload_size"},
      {"flipped slice bit", flip_bit(good, L::slice + 4), kvkey::Reason::identity_mismatch, "shard"},
      {"flipped epoch bit", flip_bit(good, epoch_offset(id)), kvkey::Reason::identity_mismatch, "model.weights_epoch"},
      {"flipped padding bit", flip_bit(good, kvkey::envelope_size - 1), kvkey::Reason::malformed, "envelope.padding"},
      {"another block's header and payload", other_block, kvkey::Reason::block_mismatch, "block_hash"},
      {"sealed for a smaller payload", sealed_for(size / 2), kvkey::Reason::size_mismatch, "payload_size"},
      {"sealed for a larger payload", sealed_for(size * 2), kvkey::Reason::size_mismatch, "payload_size"},
      {"flipped payload bit", flip_bit(good, kvkey::envelope_size + size / 2), kvkey::Reason::payload_mismatch,
       "payload"},
      {"flipped digest bit", flip_bit(good, L::payload_digest + 3), kvkey::Reason::payload_mismatch, "payload"},
      {"torn payload of the right length", torn, kvkey::Reason::payload_mismatch, "payload"},
      {"this header on another block's payload", transplanted, kvkey::Reason::payload_mismatch, "payload"},
  };
  for (const Fault& f : faults) {
    INFO("fault: " << f.name);
    it::set_raw(store, key, f.value);
    const auto got = it::load(store, d.rank(0), blocks);
    CHECK(got[1].status == Status::rejected);
    CHECK(got[1].verdict.reason == f.reason);
    CHECK(got[1].verdict.field == f.field);
    CHECK(got[1].payload.empty());
    // Its neighbours are untouched.
    CHECK(got[0].status == Status::loaded);
    CHECK(got[2].status == Status::loaded);
    // An existence lookup still sees an object; the verified lookup stops at a
    // header that fails (damage behind a valid header is the load's to find).
    CHECK(it::lookup_existing(store, {&d.rank(0)}, blocks) == 4);
    // (The lookup knows the deployment's payload size and reads each value's
    // size with its header (STRLEN): only damage behind a valid header of the
    // right size is left for the load to find.)
    const bool header_ok = f.reason == kvkey::Reason::payload_mismatch;
    CHECK(it::lookup(store, {&d.rank(0)}, blocks) == (header_ok ? 4u : 1u));
    // Recompute the block: it loads again, byte for byte.
    d.save(store, 0, {blocks[1]});
    CHECK(d.count_exact_loads(store, 0, blocks) == 4);
  }
  fmt::print("faults: {} kinds of damaged value, each rejected with its reason and field, then recomputed\n",
             faults.size());
}

namespace {

// A TCP server on 127.0.0.1 that answers the first request on its first
// connection with fixed bytes, then closes (or, with close_after false, answers
// the request's closing ECHO sentinel as Redis would, so the connector reads
// the fixed replies in step, and stays silent until destroyed).
class FakeServer {
 public:
  FakeServer(std::string reply, bool close_after) : reply_(std::move(reply)), close_after_(close_after) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof addr;
    REQUIRE(::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
    REQUIRE(::listen(fd_, 4) == 0);
    REQUIRE(::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len) == 0);
    port_ = ntohs(addr.sin_port);
    thread_ = std::thread([this] { serve(); });
  }
  ~FakeServer() {
    ::shutdown(fd_, SHUT_RDWR);
    if (conn_ >= 0) ::shutdown(conn_, SHUT_RDWR);
    thread_.join();
    if (conn_ >= 0) ::close(conn_);
    ::close(fd_);
  }
  // A generous command timeout: the fake server answers at once, but on a
  // loaded machine its thread may be scheduled late, and a timeout there would
  // be reported instead of the fault under test. The silent-server case sets
  // its own short timeout.
  kvkey_redis::Options options() const {
    kvkey_redis::Options o;
    o.port = port_;
    o.command_timeout = std::chrono::milliseconds(30000);
    return o;
  }

 private:
  void serve() {
    conn_ = ::accept(fd_, nullptr, nullptr);
    if (conn_ < 0) return;
    char buf[4096];
    std::string request;
    std::string echo;  // the reply to the request's last command, ECHO <nonce>
    while (echo.empty()) {
      const ssize_t n = ::read(conn_, buf, sizeof buf);
      if (n <= 0) return;
      request.append(buf, static_cast<std::size_t>(n));
      const std::size_t at = request.rfind("ECHO\r\n$");
      const std::size_t end = at == std::string::npos ? at : request.find("\r\n", at + 7);
      if (end == std::string::npos) continue;
      const std::size_t len = std::stoul(request.substr(at + 7, end - at - 7));
      if (request.size() < end + 2 + len + 2) continue;
      echo = "$" + std::to_string(len) + "\r\n" + request.substr(end + 2, len) + "\r\n";
    }
    const std::string reply = close_after_ || reply_.empty() ? reply_ : reply_ + echo;  // "": silent
    if (!reply.empty()) (void)!::write(conn_, reply.data(), reply.size());
    if (close_after_) {
      ::shutdown(conn_, SHUT_RDWR);
      return;
    }
    while (::read(conn_, buf, sizeof buf) > 0) {
    }
  }

  std::string reply_;
  bool close_after_;
  int fd_ = -1;
  std::atomic<int> conn_{-1};
  int port_ = 0;
  std::thread thread_;
};

StoreError::Kind error_kind_of(const std::function<void()>& call) {
  try {
    call();
  } catch (const StoreError& e) {
    INFO(e.what());
    return e.redis_kind();
  }
  FAIL("the call returned instead of throwing StoreError");
  return StoreError::Kind::server;
}

}  // namespace

TEST_CASE("broken replies, silence and refused connections are errors, never loads", "[faults]") {
  const Deployment d("faults", it::base_identity(it::unique_tenant("fake")));
  const auto blocks = d.rank(0).block_hashes(it::prompt(7, 0, 3));
  const std::size_t size = d.payload_size(0);

  SECTION("a pipeline reply that stops after the first of three replies") {
    FakeServer server(":1\r\n", true);
    it::Store store(server.options());
    CHECK(error_kind_of([&] { it::lookup(store, {&d.rank(0)}, blocks); }) == StoreError::Kind::io);
    CHECK_FALSE(store.connection().connected());
  }
  SECTION("a value that stops part-way") {
    const std::string bytes(size, 'k');
    const auto header = d.rank(0).seal(blocks[0], kvkey::Payload(bytes.data(), bytes.size()));
    std::string reply = "$" + std::to_string(kvkey::envelope_size + size) + "\r\n";
    reply.append(header.begin(), header.end());  // the header, then nothing
    FakeServer server(reply, true);
    it::Store store(server.options());
    std::vector<it::Loaded> got;
    CHECK(error_kind_of([&] { got = it::load(store, d.rank(0), blocks); }) == StoreError::Kind::io);
    CHECK(got.empty());
  }
  SECTION("a reply that is not RESP") {
    FakeServer server("?garbage\r\n", true);
    it::Store store(server.options());
    CHECK(error_kind_of([&] { it::load(store, d.rank(0), blocks); }) == StoreError::Kind::protocol);
  }
  SECTION("a reply of the wrong type, in step: each key fails alone") {
    FakeServer server("+OK\r\n+OK\r\n+OK\r\n", false);
    it::Store store(server.options());
    kvkey::Metrics metrics;
    const auto got = it::load(store, d.rank(0), blocks, &metrics);
    REQUIRE(got.size() == 3);
    for (const auto& g : got) CHECK(g.status == it::Status::missing);
    CHECK(metrics.snapshot().store_error("protocol") == 3);
    CHECK(store.connection().connected());  // the sentinel came after them
  }
  SECTION("an error reply: a failure of that key alone, in step") {
    FakeServer server("-ERR out of memory\r\n", false);
    it::Store store(server.options());
    const auto got = it::load(store, d.rank(0), {blocks[0]});
    REQUIRE(got.size() == 1);
    CHECK(got[0].status == it::Status::missing);  // a miss, counted as a store error (server)
    CHECK(got[0].payload.empty());
    CHECK(store.connection().connected());  // the sentinel came after it: the stream is in step
  }
  SECTION("no reply at all") {
    FakeServer server("", false);
    auto options = server.options();
    options.command_timeout = std::chrono::milliseconds(300);
    it::Store store(options);
    const auto t0 = std::chrono::steady_clock::now();
    CHECK(error_kind_of([&] { it::load(store, d.rank(0), blocks); }) == StoreError::Kind::timeout);
    const auto waited = std::chrono::steady_clock::now() - t0;
    CHECK(waited >= std::chrono::milliseconds(250));  // not before the timeout
    // The call ends (it does not hang); the bound is loose, a loaded machine may be late.
    CHECK(waited < std::chrono::seconds(60));
  }
  SECTION("nothing listening") {
    // The port stays bound, never listened on, for the whole section: no other
    // process can take it in between, and connecting to it is refused.
    const int reserved = ::socket(AF_INET, SOCK_STREAM, 0);
    REQUIRE(reserved >= 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof addr;
    REQUIRE(::bind(reserved, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
    REQUIRE(::getsockname(reserved, reinterpret_cast<sockaddr*>(&addr), &len) == 0);
    struct Closer {
      int fd;
      ~Closer() { ::close(fd); }
    } closer{reserved};
    kvkey_redis::Options o;
    o.port = ntohs(addr.sin_port);
    it::Store store(o);
    CHECK(error_kind_of([&] { it::lookup(store, {&d.rank(0)}, blocks); }) == StoreError::Kind::connect);
    CHECK(error_kind_of([&] { d.save(store, 0, blocks); }) == StoreError::Kind::connect);
  }
}
