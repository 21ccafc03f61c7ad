// Calling a function that must refuse a FIFO, without letting a regression
// hang the suite.
#ifndef KVKEY_TESTS_FIFO_HPP
#define KVKEY_TESTS_FIFO_HPP

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <exception>
#include <future>
#include <string>
#include <thread>

namespace kvkey_test {

/// Makes a FIFO at path; false on failure.
inline bool make_fifo(const std::string& path) { return ::mkfifo(path.c_str(), 0600) == 0; }

/// Calls f on a thread and returns the message of what it threw, or
/// "(returned)". f is expected to refuse the FIFO at `fifo` at once. A
/// regression that blocks on it (an open waiting for a writer, a read waiting
/// for data) is released rather than waited on: while f has not finished, the
/// FIFO's write end is opened and closed now and then, so the blocked call sees
/// end of file and returns, and the test fails on its result. The wait is only
/// that guard; no result depends on time.
template <class F>
std::string refusal_of_fifo(const std::string& fifo, F f) {
  std::promise<std::string> result;
  std::future<std::string> done = result.get_future();
  std::thread t([&] {
    try {
      f();
      result.set_value("(returned)");
    } catch (const std::exception& e) {
      result.set_value(e.what());
    }
  });
  while (done.wait_for(std::chrono::seconds(10)) != std::future_status::ready) {
    const int w = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
    if (w >= 0) ::close(w);
  }
  t.join();
  return done.get();
}

}  // namespace kvkey_test

#endif  // KVKEY_TESTS_FIFO_HPP
