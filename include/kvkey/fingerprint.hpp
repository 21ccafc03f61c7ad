// SPDX-License-Identifier: Apache-2.0
// fingerprint() and fingerprint_file(): plain SHA-256 of bytes or of a file,
// for the identity's weights, adapter weights and static scales (the value
// `sha256sum` prints). For hashing in general reach for Sha256
// (kvkey/sha256.hpp).
#ifndef KVKEY_FINGERPRINT_HPP
#define KVKEY_FINGERPRINT_HPP

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "kvkey/config.hpp"
#include "kvkey/digest.hpp"
#include "kvkey/errors.hpp"
#include "kvkey/input_file.hpp"
#include "kvkey/sha256.hpp"

KVKEY_BEGIN_NAMESPACE

/// Plain SHA-256 of a byte string: the same value `sha256sum` prints, so an
/// operator can check a fingerprint by hand. Use it for weights, adapter weights
/// and static quantization scales that are held in memory.
[[nodiscard]] inline Digest fingerprint(std::string_view bytes) { return Sha256::hash(bytes.data(), bytes.size()); }

namespace detail {

/// SHA-256 of the rest of an open file, read in `chunk`-byte pieces straight
/// into one buffer; on_chunk(n) is called after each piece and stops the read
/// (returning an empty Digest) when it returns false. Throws io_error naming
/// the file. Every file kvkey hashes is hashed here.
template <class OnChunk>
Digest sha256_file(InputFile& file, std::size_t chunk, OnChunk&& on_chunk) {
  Sha256 h;
  std::vector<unsigned char> buf(chunk);
  for (;;) {
    const std::size_t n = file.read(buf.data(), buf.size());
    h.update(buf.data(), n);
    if (!on_chunk(n)) return Digest{};
    if (n < buf.size()) break;
  }
  return h.result();
}

}  // namespace detail

/// Plain SHA-256 of a file's contents, streamed in 1 MiB chunks so a multi-GB
/// checkpoint is never held in memory. Equal to `sha256sum PATH`. The file must
/// be a regular file (symbolic links are followed); it is opened without
/// blocking (InputFile), so a FIFO is refused at once rather than waited on.
/// Throws io_error naming the path when the file cannot be opened or read or is
/// not a regular file.
[[nodiscard]] inline Digest fingerprint_file(const std::string& path) {
  InputFile file(path);
  return detail::sha256_file(file, std::size_t{1} << 20, [](std::size_t) { return true; });
}

/// Plain SHA-256 of the rest of an open file (e.g. InputFile::standard_input()).
[[nodiscard]] inline Digest fingerprint_file(InputFile& file) {
  return detail::sha256_file(file, std::size_t{1} << 20, [](std::size_t) { return true; });
}

KVKEY_END_NAMESPACE

#endif  // KVKEY_FINGERPRINT_HPP
