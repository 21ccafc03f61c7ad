// SPDX-License-Identifier: Apache-2.0
// fingerprint() and fingerprint_file(): plain SHA-256 of bytes or of a file,
// for the identity's weights, adapter weights and static scales (the value
// `sha256sum` prints). For hashing in general reach for Sha256
// (kvkey/sha256.hpp).
#ifndef KVKEY_FINGERPRINT_HPP
#define KVKEY_FINGERPRINT_HPP

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "kvkey/config.hpp"
#include "kvkey/digest.hpp"
#include "kvkey/errors.hpp"
#include "kvkey/sha256.hpp"

KVKEY_BEGIN_NAMESPACE

/// Plain SHA-256 of a byte string: the same value `sha256sum` prints, so an
/// operator can check a fingerprint by hand. Use it for weights, adapter weights
/// and static quantization scales that are held in memory.
[[nodiscard]] inline Digest fingerprint(std::string_view bytes) { return Sha256::hash(bytes.data(), bytes.size()); }

namespace detail {

/// SHA-256 of a file's contents, read in `chunk`-byte pieces straight into one
/// buffer; on_chunk(n) is called after each piece and stops the read (returning
/// an empty Digest) when it returns false. Throws io_error naming the path.
template <class OnChunk>
Digest sha256_file(const std::string& path, std::size_t chunk, OnChunk&& on_chunk) {
  struct Closer {
    void operator()(std::FILE* f) const noexcept { std::fclose(f); }
  };
  errno = 0;
  std::unique_ptr<std::FILE, Closer> file(std::fopen(path.c_str(), "rb"));
  if (!file) {
    const int err = errno;
    throw io_error("fingerprint_file: cannot open '" + path + "': " +
                   (err != 0 ? std::strerror(err) : "unknown error"));
  }
  std::setvbuf(file.get(), nullptr, _IONBF, 0);  // reads go straight into buf
  Sha256 h;
  std::vector<unsigned char> buf(chunk);
  for (;;) {
    const std::size_t n = std::fread(buf.data(), 1, buf.size(), file.get());
    h.update(buf.data(), n);
    if (!on_chunk(n)) return Digest{};
    if (n < buf.size()) {
      if (std::ferror(file.get()) != 0) {
        throw io_error("fingerprint_file: read error on '" + path + "'");
      }
      break;
    }
  }
  return h.result();
}

}  // namespace detail

/// Plain SHA-256 of a file's contents, streamed in 1 MiB chunks so a multi-GB
/// checkpoint is never held in memory. Equal to `sha256sum PATH`.
/// Throws io_error naming the path when the file cannot be opened or read.
[[nodiscard]] inline Digest fingerprint_file(const std::string& path) {
  return detail::sha256_file(path, std::size_t{1} << 20, [](std::size_t) { return true; });
}

KVKEY_END_NAMESPACE

#endif  // KVKEY_FINGERPRINT_HPP
