// SPDX-License-Identifier: Apache-2.0
// Shared pieces of the kvkey command-line tool: the failure type and exit codes.
#ifndef KVKEY_TOOL_TOOL_HPP
#define KVKEY_TOOL_TOOL_HPP

#include <fmt/format.h>

#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>

namespace kvkey_tool {

/// Exit statuses (docs/cli.md).
inline constexpr int exit_ok = 0;        ///< done; verify: accepted; diff: can share objects
inline constexpr int exit_rejected = 1;  ///< verify: rejected; diff: cannot share objects
inline constexpr int exit_error = 2;     ///< bad usage or bad input: nothing printed on stdout

/// A command could not run: bad usage or bad input. what() is one line naming
/// the file and field; main prints it on stderr and exits with exit_error.
class Failure : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

template <class... Args>
[[noreturn]] void fail(fmt::format_string<Args...> f, Args&&... args) {
  throw Failure(fmt::format(f, std::forward<Args>(args)...));
}

/// A kvkey exception's message without its "[kvkey.<type>] " id.
inline std::string_view without_error_id(std::string_view what) {
  if (!what.empty() && what.front() == '[') {
    const auto end = what.find("] ");
    if (end != std::string_view::npos) return what.substr(end + 2);
  }
  return what;
}

/// Text that came from a file or an envelope, quoted and escaped like a JSON
/// string so control characters cannot reach the terminal.
std::string quote(std::string_view s);

}  // namespace kvkey_tool

#endif  // KVKEY_TOOL_TOOL_HPP
