// SPDX-License-Identifier: Apache-2.0
// InputFile: the one way kvkey reads a file it is given (model and adapter
// directories, tenant secret files, fingerprint_file, the kvkey tool's inputs).
// The open never blocks (O_NONBLOCK: a FIFO without a writer does not wait),
// anything but a regular file is refused before a byte is read, reads are
// bounded by the caller, and every message names the file. Also
// text_position(), the line and column of a byte offset, for messages about a
// file's text. POSIX.
#ifndef KVKEY_INPUT_FILE_HPP
#define KVKEY_INPUT_FILE_HPP

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <utility>

#include "kvkey/config.hpp"
#include "kvkey/errors.hpp"

KVKEY_BEGIN_NAMESPACE

/// A file opened for reading: a regular file (symbolic links are followed), or
/// standard input. Move-only; the descriptor is closed on destruction.
///
/// Errors name the file as `name` (default: the path in single quotes):
/// io_error "cannot open NAME: reason", "NAME: not a regular file (a FIFO)"
/// (also a directory, a device or a socket: they could block or never end),
/// "cannot read NAME: reason"; input_error "NAME: larger than the N-byte limit
/// for WHAT" from read_all.
class InputFile {
 public:
  /// Opens path with O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC, so opening a
  /// FIFO or a terminal neither waits nor takes it over, then refuses (fstat)
  /// anything but a regular file.
  explicit InputFile(const std::string& path, std::string name = {})
      : name_(name.empty() ? "'" + path + "'" : std::move(name)) {
    fd_ = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (fd_ < 0) throw io_error("cannot open " + name_ + ": " + errno_text(errno));
    if (::fstat(fd_, &stat_) != 0) {
      const int err = errno;
      ::close(fd_);
      throw io_error("cannot read " + name_ + ": " + errno_text(err));
    }
    if (!S_ISREG(stat_.st_mode)) {
      ::close(fd_);
      throw io_error(name_ + ": not a regular file (" + kind(stat_.st_mode) + ")");
    }
    owned_ = true;
  }

  /// Standard input, as it is (a pipe or a terminal too), not closed on destruction.
  static InputFile standard_input(std::string name = "stdin") { return InputFile(STDIN_FILENO, std::move(name)); }

  InputFile(InputFile&& other) noexcept
      : fd_(other.fd_), owned_(other.owned_), stat_(other.stat_), name_(std::move(other.name_)) {
    other.owned_ = false;
  }
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;
  InputFile& operator=(InputFile&&) = delete;
  ~InputFile() {
    if (owned_) ::close(fd_);
  }

  /// How messages name the file.
  const std::string& name() const noexcept { return name_; }
  /// The file's mode (type and permission bits) as fstat reported it when opened.
  mode_t mode() const noexcept { return stat_.st_mode; }

  /// Reads up to n bytes into buf; fewer only at the end of the file.
  std::size_t read(void* buf, std::size_t n) {
    std::size_t got = 0;
    while (got < n) {
      const ssize_t r = ::read(fd_, static_cast<char*>(buf) + got, n - got);
      if (r == 0) break;
      if (r < 0) {
        if (errno == EINTR) continue;
        throw io_error("cannot read " + name_ + ": " + errno_text(errno));
      }
      got += static_cast<std::size_t>(r);
    }
    return got;
  }

  /// At most max bytes of the rest of the file; nothing beyond them is read.
  std::string read_at_most(std::size_t max) {
    std::string text;
    char buf[1 << 16];
    while (text.size() < max) {
      const std::size_t n = read(buf, std::min(sizeof buf, max - text.size()));
      text.append(buf, n);
      if (n == 0) break;
    }
    return text;
  }

  /// The rest of the file, which must be at most `limit` bytes: input_error
  /// "NAME: larger than the LIMIT-byte limit for WHAT" otherwise (a regular
  /// file whose size says so is refused before it is read).
  std::string read_all(std::size_t limit, std::string_view what) {
    if (S_ISREG(stat_.st_mode) && static_cast<std::uint64_t>(stat_.st_size) > limit) too_large(limit, what);
    std::string text = read_at_most(limit == static_cast<std::size_t>(-1) ? limit : limit + 1);
    if (text.size() > limit) too_large(limit, what);
    return text;
  }

 private:
  InputFile(int fd, std::string name) : fd_(fd), name_(std::move(name)) {
    if (::fstat(fd_, &stat_) != 0) stat_ = {};
  }

  static std::string errno_text(int err) { return err != 0 ? std::strerror(err) : "unknown error"; }

  static std::string kind(mode_t mode) {
    if (S_ISDIR(mode)) return "a directory";
    if (S_ISCHR(mode)) return "a character device";
    if (S_ISBLK(mode)) return "a block device";
    if (S_ISFIFO(mode)) return "a FIFO";
    if (S_ISSOCK(mode)) return "a socket";
    return "not a plain file";
  }

  [[noreturn]] void too_large(std::size_t limit, std::string_view what) const {
    throw input_error(name_ + ": larger than the " + std::to_string(limit) + "-byte limit for " + std::string(what));
  }

  int fd_ = -1;
  bool owned_ = false;
  struct stat stat_ {};
  std::string name_;
};

/// Where a byte offset lies in a text, for messages: 1-based line and column
/// (columns count bytes).
struct TextPosition {
  std::size_t line = 1;
  std::size_t column = 1;
};

/// The position of byte `offset` (0-based) in text; an offset past the end is
/// the position just after the last byte.
[[nodiscard]] inline TextPosition text_position(std::string_view text, std::size_t offset) noexcept {
  TextPosition p;
  for (std::size_t i = 0; i < offset && i < text.size(); ++i) {
    if (text[i] == '\n') {
      ++p.line;
      p.column = 1;
    } else {
      ++p.column;
    }
  }
  return p;
}

KVKEY_END_NAMESPACE

#endif  // KVKEY_INPUT_FILE_HPP
