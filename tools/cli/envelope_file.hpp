// SPDX-License-Identifier: Apache-2.0
// The files seal, inspect and verify read: envelopes (header files) and payloads.
#ifndef KVKEY_TOOL_ENVELOPE_FILE_HPP
#define KVKEY_TOOL_ENVELOPE_FILE_HPP

#include <kvkey/any_key_namespace.hpp>
#include <kvkey/envelope.hpp>
#include <kvkey/key_namespace.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace kvkey_tool {

// A header file: at most one byte more than an envelope is read (enough to
// tell that it is not one), and the file's size is kept for messages.
struct HeaderFile {
  std::vector<std::uint8_t> bytes;
  std::string size;  // "1024", or "more than 1024" when it cannot be told
};

/// At most envelope_size + 1 bytes of the header file at path ("-" = stdin).
HeaderFile read_header(const std::string& path);

/// The first bytes (at most envelope_size + 1) of what was read from path, as a header file.
HeaderFile header_file(const std::string& path, const std::string& read);

/// Why bytes are not a decodable envelope (parse_envelope's verdict), in one phrase.
std::string not_envelope_reason(const HeaderFile& file, const kvkey::Verdict& why);

/// The payload file's bytes (read whole, at most max_payload_size).
std::string read_payload(const std::string& path);

/// What a reader's verdict v refused, side by side: the header's and the
/// reader's value of the identity field, slice, block hash, payload size or digest (labels `width` wide).
void append_mismatch(std::string& out, const kvkey::EnvelopeContents& theirs, const kvkey::Verdict& v,
                     const kvkey::AnyKeyNamespace& ns, const kvkey::Digest& block, std::uint64_t size,
                     std::size_t width = 14);

}  // namespace kvkey_tool

#endif  // KVKEY_TOOL_ENVELOPE_FILE_HPP
