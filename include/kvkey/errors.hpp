// SPDX-License-Identifier: Apache-2.0
// The exceptions kvkey throws, all derived from kvkey::error, for misuse and
// environment failures. A header that does not verify is not an exception but
// a Verdict (kvkey/envelope.hpp).
#ifndef KVKEY_ERRORS_HPP
#define KVKEY_ERRORS_HPP

#include <stdexcept>
#include <string>
#include <string_view>

#include "kvkey/config.hpp"

KVKEY_BEGIN_NAMESPACE

/// Base of every exception kvkey throws. Messages start with a stable,
/// searchable id such as "[kvkey.identity_error]".
///
/// Exceptions are for misuse and environment failures (invalid identity, bad
/// argument, unreadable file, OpenSSL failure). A header that does not verify is
/// a normal outcome and is reported as a Verdict value, never thrown.
class error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// An Identity (or a namespace policy) is invalid. field() is the dotted path of
/// the offending field, e.g. "kv.num_kv_heads" or "tenant".
class identity_error : public error {
 public:
  identity_error(std::string_view field, std::string_view what)
      : error(make(field, what)), field_(field) {}
  const std::string& field() const noexcept { return field_; }

 private:
  static std::string make(std::string_view field, std::string_view what) {
    std::string m = "[kvkey.identity_error] ";
    m.append(field).append(": ").append(what);
    return m;
  }
  std::string field_;
};

/// A call argument is invalid: a token id out of range, a malformed hex digest,
/// inconsistent previous hashes, a bad extra key.
class input_error : public error {
 public:
  explicit input_error(std::string_view what)
      : error(std::string("[kvkey.input_error] ").append(what)) {}
};

/// A file could not be opened or read.
class io_error : public error {
 public:
  explicit io_error(std::string_view what)
      : error(std::string("[kvkey.io_error] ").append(what)) {}
};

/// OpenSSL reported a failure (out of memory, provider not available).
class crypto_error : public error {
 public:
  explicit crypto_error(std::string_view what)
      : error(std::string("[kvkey.crypto_error] ").append(what)) {}
};

KVKEY_END_NAMESPACE

#endif  // KVKEY_ERRORS_HPP
