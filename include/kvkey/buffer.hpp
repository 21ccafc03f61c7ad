// SPDX-License-Identifier: Apache-2.0
// Bytes and the non-owning buffer views kvkey's interfaces take: Bytes (owned
// bytes), ConstBuffer (a readable range), MutableBuffer (a writable range).
// Nothing else; the store protocol (kvkey/store.hpp) and the payload views
// (kvkey/payload.hpp) build on them.
#ifndef KVKEY_BUFFER_HPP
#define KVKEY_BUFFER_HPP

#include <cstddef>
#include <cstdint>
#include <vector>

#include "kvkey/config.hpp"

KVKEY_BEGIN_NAMESPACE

/// Bytes as kvkey hands them out (encodings, values).
using Bytes = std::vector<std::uint8_t>;

/// One contiguous piece of a payload.
struct ConstBuffer {
  const void* data = nullptr;
  std::size_t size = 0;
};

/// One writable piece of a destination (load_into) or of registered memory.
struct MutableBuffer {
  void* data = nullptr;
  std::size_t size = 0;
};

KVKEY_END_NAMESPACE

#endif  // KVKEY_BUFFER_HPP
