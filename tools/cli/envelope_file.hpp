// SPDX-License-Identifier: Apache-2.0
// The files seal, inspect and verify read: envelopes (header files) and payloads.
#ifndef KVKEY_TOOL_ENVELOPE_FILE_HPP
#define KVKEY_TOOL_ENVELOPE_FILE_HPP

#include <kvkey/envelope.hpp>

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

/// Why bytes are not a decodable envelope (parse_envelope's verdict), in one phrase.
std::string not_envelope_reason(const HeaderFile& file, const kvkey::Verdict& why);

/// The payload file's bytes (read whole, at most max_payload_size).
std::string read_payload(const std::string& path);

}  // namespace kvkey_tool

#endif  // KVKEY_TOOL_ENVELOPE_FILE_HPP
