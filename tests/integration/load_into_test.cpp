// SPDX-License-Identifier: Apache-2.0
// kvkey::Connector::load_into over the hiredis store: verified payloads land
// in the caller's buffers, byte for byte; a missing or rejected block leaves
// its buffer exactly as it was; bad destination lists are refused before
// anything is sent.
#include <catch2/catch.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "support.hpp"

using it::Deployment;
using it::Status;

namespace {

constexpr std::uint8_t fill = 0xA5;
constexpr std::size_t guard = 64;  // bytes after each payload that no load may touch

// One buffer per block, payload_size + guard bytes, filled with `fill`.
struct Buffers {
  std::vector<std::vector<std::uint8_t>> bytes;
  std::vector<std::uint8_t*> dests;

  Buffers(std::size_t count, std::size_t payload_size)
      : bytes(count, std::vector<std::uint8_t>(payload_size + guard, fill)) {
    for (auto& b : bytes) dests.push_back(b.data());
  }
  // Buffer i still holds nothing but the fill pattern.
  bool untouched(std::size_t i) const {
    return std::all_of(bytes[i].begin(), bytes[i].end(), [](std::uint8_t x) { return x == fill; });
  }
  // Buffer i holds exactly `payload`, and its guard bytes are untouched.
  bool holds(std::size_t i, const std::vector<std::uint8_t>& payload) const {
    const auto end = bytes[i].begin() + static_cast<std::ptrdiff_t>(payload.size());
    return std::equal(payload.begin(), payload.end(), bytes[i].begin()) &&
           std::all_of(end, bytes[i].end(), [](std::uint8_t x) { return x == fill; });
  }
};

std::string flip_bit(std::string value, std::size_t offset) {
  value.at(offset) = static_cast<char>(value[offset] ^ 0x01);
  return value;
}

// A deployment of one rank on the shared server and the 4 blocks of a prompt.
struct Setup {
  it::Store store{it::shared_server()};
  Deployment d;
  std::vector<kvkey::Digest> blocks;
  std::size_t size;

  Setup(const std::string& name, std::uint32_t family)
      : d(name, it::base_identity(it::unique_tenant(name))),
        blocks(d.rank(0).block_hashes(it::prompt(family, 0, 4))),
        size(d.payload_size(0)) {}
};

}  // namespace

TEST_CASE("load_into: every verified payload lands in its buffer, byte for byte", "[load_into]") {
  Setup s("load-into", 7);
  auto& [store, d, blocks, size] = s;
  d.save(store, 0, blocks);

  Buffers buf(blocks.size(), size);
  const auto got = it::load_into(store, d.rank(0), blocks, buf.dests);
  REQUIRE(got.size() == blocks.size());
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    INFO("block " << i);
    CHECK(got[i].status == Status::loaded);
    CHECK(got[i].verdict.ok());
    CHECK(buf.holds(i, d.payload(0, blocks[i])));
  }
  // A second load into the same (now written) buffers: the same bytes.
  Buffers again(blocks.size(), size);
  it::load_into(store, d.rank(0), blocks, again.dests);
  CHECK(again.bytes == buf.bytes);
}

TEST_CASE("load_into: a missing or rejected block leaves its buffer untouched", "[load_into]") {
  namespace L = kvkey::envelope_layout;
  Setup s("load-into-faults", 8);
  auto& [store, d, blocks, size] = s;
  d.save(store, 0, {blocks[0], blocks[1], blocks[3]});  // block 2 is never saved
  const std::string key = d.rank(0).store_key(blocks[1]);
  const std::string good = it::get_raw(store, key);
  const std::string other_block = it::get_raw(store, d.rank(0).store_key(blocks[3]));
  REQUIRE(good.size() == kvkey::envelope_size + size);

  std::string torn = good;
  std::fill(torn.end() - static_cast<std::ptrdiff_t>(size / 2), torn.end(), '\0');
  struct Fault {
    std::string name;
    std::string value;  // stored under block 1's key, straight into the store
    kvkey::Reason reason;
    std::string_view field;
  };
  const std::vector<Fault> faults = {
      {"flipped payload bit", flip_bit(good, kvkey::envelope_size + size / 3), kvkey::Reason::payload_mismatch,
       "payload"},
      {"torn payload of the right length", torn, kvkey::Reason::payload_mismatch, "payload"},
      {"this header on another block's payload",
       good.substr(0, kvkey::envelope_size) + other_block.substr(kvkey::envelope_size), kvkey::Reason::payload_mismatch,
       "payload"},
      {"flipped digest bit", flip_bit(good, L::payload_digest), kvkey::Reason::payload_mismatch, "payload"},
      {"truncated payload", good.substr(0, good.size() - 1), kvkey::Reason::size_mismatch, "payload_size"},
      {"trailing bytes", good + "!", kvkey::Reason::size_mismatch, "payload_size"},
      {"another block's header and payload", other_block, kvkey::Reason::block_mismatch, "block_hash"},
      {"truncated inside the header", good.substr(0, 100), kvkey::Reason::malformed, "envelope.size"},
  };
  for (const Fault& f : faults) {
    INFO("fault: " << f.name);
    it::set_raw(store, key, f.value);
    Buffers buf(blocks.size(), size);
    const auto got = it::load_into(store, d.rank(0), blocks, buf.dests);
    REQUIRE(got.size() == blocks.size());
    CHECK(got[0].status == Status::loaded);
    CHECK(buf.holds(0, d.payload(0, blocks[0])));
    CHECK(got[1].status == Status::rejected);
    CHECK(got[1].verdict.reason == f.reason);
    CHECK(got[1].verdict.field == f.field);
    CHECK(buf.untouched(1));
    CHECK(got[2].status == Status::missing);
    CHECK(buf.untouched(2));
    CHECK(got[3].status == Status::loaded);
    CHECK(buf.holds(3, d.payload(0, blocks[3])));
    // load reports the same outcomes, and hands out bytes only for loaded blocks.
    const auto copies = it::load(store, d.rank(0), blocks);
    for (std::size_t i = 0; i < blocks.size(); ++i) {
      CHECK(copies[i].status == got[i].status);
      CHECK(copies[i].verdict.reason == got[i].verdict.reason);
      CHECK(copies[i].verdict.field == got[i].verdict.field);
      CHECK(copies[i].payload.empty() == (got[i].status != Status::loaded));
    }
  }
  // Recomputed, the block loads into its buffer again.
  d.save(store, 0, {blocks[1]});
  Buffers buf(blocks.size(), size);
  const auto got = it::load_into(store, d.rank(0), blocks, buf.dests);
  CHECK(got[1].status == Status::loaded);
  CHECK(buf.holds(1, d.payload(0, blocks[1])));
  fmt::print("load_into: {} kinds of damaged value, each rejected with its buffer untouched\n", faults.size());
}

TEST_CASE("load_into: a wrong or null destination list is refused before any load", "[load_into]") {
  Setup s("load-into-args", 9);
  auto& [store, d, blocks, size] = s;
  d.save(store, 0, blocks);
  Buffers buf(blocks.size(), size);

  auto too_few = buf.dests;
  too_few.pop_back();
  CHECK_THROWS_AS(it::load_into(store, d.rank(0), blocks, too_few), kvkey::input_error);
  CHECK_THROWS_WITH(it::load_into(store, d.rank(0), blocks, too_few), Catch::Contains("3 destinations"));
  auto too_many = buf.dests;
  too_many.push_back(buf.dests.front());
  CHECK_THROWS_WITH(it::load_into(store, d.rank(0), blocks, too_many), Catch::Contains("5 destinations"));
  CHECK_THROWS_WITH(it::load_into(store, d.rank(0), blocks, {}), Catch::Contains("0 destinations"));
  auto with_null = buf.dests;
  with_null[2] = nullptr;
  CHECK_THROWS_WITH(it::load_into(store, d.rank(0), blocks, with_null), Catch::Contains("buffers[2] has a null part"));
  for (std::size_t i = 0; i < blocks.size(); ++i) CHECK(buf.untouched(i));

  // Buffers that merely touch are fine: one arena, payload_size bytes apart.
  std::vector<std::uint8_t> arena(blocks.size() * size, fill);
  std::vector<std::uint8_t*> packed;
  for (std::size_t i = 0; i < blocks.size(); ++i) packed.push_back(arena.data() + i * size);
  const auto got = it::load_into(store, d.rank(0), blocks, packed);
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    INFO("block " << i);
    CHECK(got[i].status == Status::loaded);
    const auto expect = d.payload(0, blocks[i]);
    CHECK(std::equal(expect.begin(), expect.end(), packed[i]));
  }
}

TEST_CASE("pipeline's string tap sees each top-level bulk string once, by command index", "[load_into]") {
  it::Store store(it::shared_server());
  auto& conn = store.connection();
  const std::string prefix = it::unique_tenant("tap") + ":";
  const std::string a = prefix + "a", b = prefix + "b", absent = prefix + "absent";
  conn.pipeline({{"SET", a, "alpha"}, {"SET", b, "bravo"}});

  std::vector<std::pair<std::size_t, std::string>> seen;
  const kvkey_redis::Connection::StringTap take_alpha = [&](std::size_t i, const char* data, std::size_t len) {
    seen.emplace_back(i, std::string(data, len));
    return std::string_view(data, len) == "alpha";  // takes a's value, leaves b's in its reply
  };
  // PING's status reply and MGET's nested strings are not tapped.
  const auto replies = conn.pipeline({{"PING"}, {"GET", a}, {"GET", absent}, {"GET", b}, {"MGET", a, b}}, take_alpha);
  CHECK(seen == std::vector<std::pair<std::size_t, std::string>>{{1, "alpha"}, {3, "bravo"}});
  REQUIRE(replies.size() == 5);
  CHECK(replies[0]->type == REDIS_REPLY_STATUS);
  CHECK(std::string(replies[0]->str, replies[0]->len) == "PONG");
  CHECK(replies[1]->type == REDIS_REPLY_STRING);
  CHECK(replies[1]->len == 0);  // taken
  CHECK(replies[2]->type == REDIS_REPLY_NIL);
  CHECK(std::string(replies[3]->str, replies[3]->len) == "bravo");  // left
  REQUIRE(replies[4]->type == REDIS_REPLY_ARRAY);
  REQUIRE(replies[4]->elements == 2);
  CHECK(std::string(replies[4]->element[0]->str, replies[4]->element[0]->len) == "alpha");

  // A tap that throws: the exception reaches the caller once every reply is
  // read, and the connection stays in step.
  const kvkey_redis::Connection::StringTap throws = [](std::size_t, const char*, std::size_t) -> bool {
    throw std::runtime_error("tap failed");
  };
  CHECK_THROWS_WITH(conn.pipeline({{"GET", a}, {"GET", b}}, throws), "tap failed");
  CHECK(conn.connected());
  const auto after = conn.command({"GET", b});
  CHECK(std::string(after->str, after->len) == "bravo");
  conn.pipeline({{"DEL", a, b}});
}
