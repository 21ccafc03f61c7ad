// SPDX-License-Identifier: Apache-2.0
#include "cli/envelope_file.hpp"

#include <kvkey/fmt.hpp>

#include <fmt/format.h>

#include <filesystem>
#include <system_error>

#include "cli/inputs.hpp"
#include "cli/report.hpp"

namespace kvkey_tool {

HeaderFile read_header(const std::string& path) {
  return header_file(path, read_at_most(path, kvkey::envelope_size + 1));
}

HeaderFile header_file(const std::string& path, const std::string& read) {
  const std::string_view s = std::string_view(read).substr(0, kvkey::envelope_size + 1);
  HeaderFile h{std::vector<std::uint8_t>(s.begin(), s.end()), std::to_string(read.size())};
  if (read.size() > kvkey::envelope_size) {
    std::error_code ec;
    const auto n = path == "-" ? 0 : std::filesystem::file_size(path, ec);
    h.size = path == "-" || ec ? fmt::format("more than {}", kvkey::envelope_size) : std::to_string(n);
  }
  return h;
}

std::string not_envelope_reason(const HeaderFile& file, const kvkey::Verdict& why) {
  const std::vector<std::uint8_t>& h = file.bytes;
  const std::string& f = why.field;
  if (f == "envelope.size" && h.size() != kvkey::envelope_size) {
    return fmt::format("it is {} bytes, an envelope is exactly {}", file.size, kvkey::envelope_size);
  }
  if (f == "envelope.magic") return "it does not start with the envelope magic \"KVKEYENV\"";
  if (f == "envelope.format_version") {
    const unsigned version = unsigned{h[8]} | unsigned{h[9]} << 8;  // u16le at offset 8
    return fmt::format("format version {}, this tool reads version {}", version, kvkey::format_version);
  }
  if (f == "envelope.size") return "its size field is not 1024";
  if (f == "envelope.identity") return "its identity encoding is malformed";
  if (f == "envelope.padding") return "a reserved byte or a byte after the identity encoding is not zero";
  return fmt::format("its {} field is malformed", f.substr(f.find('.') + 1));
}

std::string read_payload(const std::string& path) { return read_limited(path, max_payload_size, "a payload file"); }

void append_mismatch(std::string& out, const kvkey::EnvelopeContents& theirs, const kvkey::Verdict& v,
                     const kvkey::AnyKeyNamespace& ns, const kvkey::Digest& block, std::uint64_t size,
                     std::size_t width) {
  if (v.reason == kvkey::Reason::identity_mismatch && v.field != "shard") {
    append_row(out, "header has", value_of(field_values(theirs.identity), v.field), width);
    append_row(out, "reader has", value_of(field_values(ns.identity()), v.field), width);
  } else if (v.reason == kvkey::Reason::identity_mismatch) {
    append_row(out, "header slice", fmt::format("{}", theirs.slice), width);
    append_row(out, "reader slice", fmt::format("{}", ns.slice()), width);
  } else if (v.reason == kvkey::Reason::block_mismatch) {
    append_row(out, "header block", theirs.block_hash.hex(), width);
    append_row(out, "reader block", block.hex(), width);
  } else if (v.reason == kvkey::Reason::size_mismatch) {
    append_row(out, "header size", std::to_string(theirs.payload_size), width);
    append_row(out, "reader size", std::to_string(size), width);
  } else if (v.reason == kvkey::Reason::payload_mismatch) {
    append_row(out, "header has",
               fmt::format("{} {}", kvkey::to_string(theirs.integrity),
                           to_hex({theirs.payload_digest.begin(), theirs.payload_digest.end()})),
               width);
  }
}

}  // namespace kvkey_tool
