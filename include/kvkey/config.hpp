// kvkey: lineage-aware keys and fail-closed envelopes for shared KV-cache stores.
// SPDX-License-Identifier: Apache-2.0
// The library and byte-format versions and the versioned namespace macros.
// Every kvkey header includes it; users include kvkey/kvkey.hpp instead.
#ifndef KVKEY_CONFIG_HPP
#define KVKEY_CONFIG_HPP

// Library version (semantic versioning).
#define KVKEY_VERSION_MAJOR 0
#define KVKEY_VERSION_MINOR 1
#define KVKEY_VERSION_PATCH 0
#define KVKEY_VERSION (KVKEY_VERSION_MAJOR * 10000 + KVKEY_VERSION_MINOR * 100 + KVKEY_VERSION_PATCH)

// Everything lives in a versioned inline namespace, so objects built against
// incompatible releases cannot be linked together silently. Users write kvkey::X.
#define KVKEY_BEGIN_NAMESPACE \
  namespace kvkey {           \
  inline namespace v0 {
#define KVKEY_END_NAMESPACE \
  }                         \
  }

#include <cstdint>

KVKEY_BEGIN_NAMESPACE

/// The version of the byte formats in docs/format.md (identity encoding, chain,
/// store key, envelope). Any change to those bytes bumps it.
inline constexpr std::uint16_t format_version = 4;

KVKEY_END_NAMESPACE

#endif  // KVKEY_CONFIG_HPP
