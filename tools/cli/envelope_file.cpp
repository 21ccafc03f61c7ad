// SPDX-License-Identifier: Apache-2.0
#include "cli/envelope_file.hpp"

#include <fmt/format.h>

#include <filesystem>
#include <system_error>

#include "cli/inputs.hpp"

namespace kvkey_tool {

HeaderFile read_header(const std::string& path) {
  const std::string s = read_at_most(path, kvkey::envelope_size + 1);
  HeaderFile h{std::vector<std::uint8_t>(s.begin(), s.end()), std::to_string(s.size())};
  if (s.size() > kvkey::envelope_size) {
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

}  // namespace kvkey_tool
