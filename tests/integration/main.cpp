// SPDX-License-Identifier: Apache-2.0
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <csignal>

int main(int argc, char* argv[]) {
  // A write to a connection the server closed must become an error, not kill
  // the process (see redis_connection.hpp).
  std::signal(SIGPIPE, SIG_IGN);
  return Catch::Session().run(argc, argv);
}
