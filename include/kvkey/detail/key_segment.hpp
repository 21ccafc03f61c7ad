// SPDX-License-Identifier: Apache-2.0
// Internal: the readable model segment of a store key (docs/format.md, "Store
// key"). Not part of the API; kvkey/key_namespace.hpp builds keys with it.
#ifndef KVKEY_DETAIL_KEY_SEGMENT_HPP
#define KVKEY_DETAIL_KEY_SEGMENT_HPP

#include <cstddef>
#include <string>
#include <string_view>

#include "kvkey/config.hpp"
#include "kvkey/identity.hpp"

KVKEY_BEGIN_NAMESPACE

namespace detail {

/// The readable model segment of a store key: bytes outside [A-Za-z0-9._-] are
/// percent-encoded (so '/', '@' and spaces cannot create ambiguity), cut to at
/// most 80 characters without splitting an escape. Readability only: the object
/// hash in the key carries the full identity.
inline std::string model_key_segment(std::string_view name) {
  static constexpr char hex[] = "0123456789ABCDEF";
  static constexpr std::size_t max_len = 80;
  std::string out;
  for (char ch : name) {
    const auto c = static_cast<unsigned char>(ch);
    const bool plain = is_alnum(ch) || ch == '.' || ch == '_' || ch == '-';
    const std::size_t need = plain ? 1 : 3;
    if (out.size() + need > max_len) break;
    if (plain) {
      out.push_back(ch);
    } else {
      out.push_back('%');
      out.push_back(hex[c >> 4]);
      out.push_back(hex[c & 0x0f]);
    }
  }
  return out;
}

}  // namespace detail

KVKEY_END_NAMESPACE

#endif  // KVKEY_DETAIL_KEY_SEGMENT_HPP
