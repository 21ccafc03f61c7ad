// SPDX-License-Identifier: Apache-2.0
// The exceptions kvkey throws, all derived from kvkey::error, for misuse and
// environment failures. A header that does not verify is not an exception but
// a Verdict (kvkey/envelope.hpp).
#ifndef KVKEY_ERRORS_HPP
#define KVKEY_ERRORS_HPP

#include <array>
#include <cstddef>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>

#include "kvkey/config.hpp"

KVKEY_BEGIN_NAMESPACE

/// Base of every exception kvkey throws. Its parts are members: id() is a
/// stable, searchable category ("kvkey.identity_error", "kvkey.input_error",
/// "kvkey.io_error", "kvkey.crypto_error"), field() the dotted path of the
/// offending field or the name of the argument ("" when there is none) and
/// detail() what is wrong with it. what() is built from them:
/// "[<id>] <field>: <detail>", or "[<id>] <detail>" without a field; message()
/// is what() without the "[<id>] ". Front ends read the members, never what().
///
/// Exceptions are for misuse and environment failures (invalid identity, bad
/// argument, unreadable file, OpenSSL failure). A header that does not verify is
/// a normal outcome and is reported as a Verdict value, never thrown. Which
/// category a failure belongs to is decided by one rule (docs/api.md, "Errors").
class error : public std::runtime_error {
 public:
  /// An error of the base category "kvkey.error".
  explicit error(std::string_view detail) : error("kvkey.error", {}, detail) {}
  error(std::string_view id, std::string_view field, std::string_view detail)
      : std::runtime_error(compose(id, field, detail)),
        parts_(std::make_shared<const Parts>(Parts{std::string(id), std::string(field), std::string(detail)})) {}

  /// "kvkey.identity_error", ...: the category (the class's, not the message's).
  [[nodiscard]] const std::string& id() const noexcept { return parts_->id; }
  /// The dotted path of the offending field ("kv.num_kv_heads", "tenant") or the
  /// argument's name; empty when the failure names none.
  [[nodiscard]] const std::string& field() const noexcept { return parts_->field; }
  /// What is wrong, without the id and the field.
  [[nodiscard]] const std::string& detail() const noexcept { return parts_->detail; }
  /// what() without its "[<id>] ": "<field>: <detail>", or "<detail>".
  [[nodiscard]] std::string message() const { return compose({}, field(), detail()); }

 private:
  struct Parts {
    std::string id, field, detail;
  };
  static std::string compose(std::string_view id, std::string_view field, std::string_view detail) {
    std::string m;
    if (!id.empty()) m.append("[").append(id).append("] ");
    if (!field.empty()) m.append(field).append(": ");
    return m.append(detail);
  }
  // Shared, so that copying an exception cannot throw.
  std::shared_ptr<const Parts> parts_;
};

/// The namespace cannot be built as configured: validated(), resolve_slice()
/// or a KeyNamespace constructor refused an identity field's value, or the
/// tenant secret is not usable keying material. field() is the dotted path,
/// e.g. "kv.num_kv_heads" or "tenant", or "tenant_secret".
class identity_error : public error {
 public:
  identity_error(std::string_view field, std::string_view what) : error("kvkey.identity_error", field, what) {}
};

/// A value handed to a call could not be taken as given: malformed, unknown,
/// out of range or inconsistent (a token id, a hex digest, a dtype name, a
/// model directory's contents). field() names the argument or key when the
/// thrower knows it.
class input_error : public error {
 public:
  explicit input_error(std::string_view what) : error("kvkey.input_error", {}, what) {}
  input_error(std::string_view field, std::string_view what) : error("kvkey.input_error", field, what) {}
};

/// A file could not be opened or read.
class io_error : public error {
 public:
  explicit io_error(std::string_view what) : error("kvkey.io_error", {}, what) {}
  io_error(std::string_view field, std::string_view what) : error("kvkey.io_error", field, what) {}
};

/// A shared scope refused a call (docs/format.md, section 12): a tenant that
/// is not one of the scope's publishers saved blocks in it (field()
/// "scope.publishers"), or a scope was declared inconsistently. Nothing of the
/// call was written.
class scope_error : public error {
 public:
  scope_error(std::string_view field, std::string_view what) : error("kvkey.scope_error", field, what) {}
};

/// OpenSSL reported a failure (out of memory, provider not available).
class crypto_error : public error {
 public:
  explicit crypto_error(std::string_view what) : error("kvkey.crypto_error", {}, what) {}
};

/// The kinds of store failure (kvkey::store_error, kvkey/store.hpp), as
/// Metrics::record_store_error counts them; any other kind is "other" (the last).
inline constexpr std::array<std::string_view, 5> store_error_kinds = {"connection", "timeout", "protocol", "server",
                                                                      "other"};

namespace detail {
/// The index of kind in store_error_kinds, or of "other".
constexpr std::size_t store_error_index(std::string_view kind) noexcept {
  std::size_t k = 0;
  while (k + 1 < store_error_kinds.size() && store_error_kinds[k] != kind) ++k;
  return k;
}
}  // namespace detail

KVKEY_END_NAMESPACE

#endif  // KVKEY_ERRORS_HPP
