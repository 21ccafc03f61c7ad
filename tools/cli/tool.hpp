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

/// How many bytes of an untrusted string a message quotes (quote's default).
inline constexpr std::size_t quote_limit = 64;
/// No truncation: for values printed as output (bounded by the identity limits
/// or the command line).
inline constexpr std::size_t no_limit = std::string_view::npos;

/// s with everything that could change how a terminal shows the text escaped:
/// the unsafe code points of kvkey/text.hpp, the ones identity validation
/// refuses (\n, \t, \u001b, \u0085, \u202e), and bytes that are not UTF-8
/// (\xff). When s is longer than max bytes, only its first max bytes (whole
/// characters) are kept, followed by "... (N bytes)".
std::string escape(std::string_view s, std::size_t max = no_limit);

/// Untrusted text in a message or output: "escaped" like a JSON string ('"' and
/// '\' escaped too), truncated after max bytes as escape() does.
std::string quote(std::string_view s, std::size_t max = quote_limit);

template <class... Args>
[[noreturn]] void fail(fmt::format_string<Args...> f, Args&&... args) {
  // Whatever a caller formatted in, the message is one printable line of bounded length
  // (a JSON path through deep nesting can be long).
  std::string m = escape(fmt::format(f, std::forward<Args>(args)...));
  if (m.size() > 900) m = m.substr(0, 900) + "...";
  throw Failure(std::move(m));
}

}  // namespace kvkey_tool

#endif  // KVKEY_TOOL_TOOL_HPP
