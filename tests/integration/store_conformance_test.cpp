// SPDX-License-Identifier: Apache-2.0
// kvkey::testing::check_store against a real redis-server (the shared server
// of stage 40-redis, $KVKEY_REDIS_PORT) through the example's hiredis store
// (kvkey_redis::RedisStore, examples/redis_connector/redis_store.hpp): every
// fault case ends with 0 wrong loads, 0 counted bad headers and nothing lost.
#include "redis_store.hpp"

#include <kvkey/testing.hpp>

#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>

#include <chrono>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <string>

namespace {

int redis_port() {
  const char* port = std::getenv("KVKEY_REDIS_PORT");
  if (port == nullptr || *port == '\0')
    FAIL("KVKEY_REDIS_PORT is not set: run the test from scripts/ci/stages/40-redis.sh");
  return std::atoi(port);
}

kvkey_redis::Options options(int port) {
  kvkey_redis::Options o;
  o.port = port;
  o.command_timeout = std::chrono::milliseconds(10000);  // generous: the machine may be busy
  return o;
}

}  // namespace

TEST_CASE("check_store: the hiredis store adapter against redis-server", "[redis]") {
  const int port = redis_port();
  const kvkey::testing::Report r =
      kvkey::testing::check_store([port] { return std::make_unique<kvkey_redis::RedisStore>(options(port)); });
  std::cout << "store_conformance: " << r.cases.size() << " cases, wrong loads " << r.wrong_loads()
            << ", counted rejected " << r.counted_rejected() << ", lost " << r.lost() << '\n';
  INFO(r.summary());
  CHECK(r.ok());
  CHECK(r.wrong_loads() == 0);
  CHECK(r.counted_rejected() == 0);
  CHECK(r.lost() == 0);
}

TEST_CASE("check_store: one shared adapter, used from many threads", "[redis]") {
  auto shared = std::make_shared<kvkey_redis::RedisStore>(options(redis_port()));
  const kvkey::testing::Report r = kvkey::testing::check_store([shared] { return shared; });
  INFO(r.summary());
  CHECK(r.ok());
}
