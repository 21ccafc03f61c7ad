// Text encodings of bytes: Digest::from_hex / try_from_hex / from_bytes and the
// tenant-secret hex and base64 decoders behind TenantSecret::from_env and
// from_file. They must agree with each other, round-trip, and never read or
// write out of bounds.
#include <string>

#include "fuzz_common.hpp"

namespace {

using kvkey_fuzz::require;

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return out;
}

std::string base64(const std::uint8_t* p, std::size_t n) {
  static constexpr char a[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  for (std::size_t i = 0; i < n; i += 3) {
    const std::uint32_t v = (std::uint32_t{p[i]} << 16) | (i + 1 < n ? std::uint32_t{p[i + 1]} << 8 : 0) |
                            (i + 2 < n ? std::uint32_t{p[i + 2]} : 0);
    out.push_back(a[v >> 18]);
    out.push_back(a[(v >> 12) & 63]);
    out.push_back(i + 1 < n ? a[(v >> 6) & 63] : '=');
    out.push_back(i + 2 < n ? a[v & 63] : '=');
  }
  return out;
}

void digest_hex(std::string_view text) {
  const auto parsed = kvkey::Digest::try_from_hex(text);
  std::optional<kvkey::Digest> thrown;
  try {
    thrown = kvkey::Digest::from_hex(text);
  } catch (const kvkey::input_error&) {
  }
  require(parsed.has_value() == thrown.has_value(), "from_hex throws exactly when try_from_hex fails");
  if (!parsed) return;
  require(*parsed == *thrown, "from_hex and try_from_hex agree");
  require(parsed->hex() == lower(text), "hex() is the lowercase input");
  require(kvkey::Digest::from_hex(parsed->hex()) == *parsed, "hex round trip");
}

void digest_bytes(const std::uint8_t* data, std::size_t size) {
  try {
    const kvkey::Digest d = kvkey::Digest::from_bytes(data, size);
    require(size == kvkey::Digest::size_bytes && std::memcmp(d.data(), data, size) == 0, "from_bytes copies 32 bytes");
    require(kvkey::Digest::try_from_hex(d.hex()) == d, "bytes -> hex -> bytes");
  } catch (const kvkey::input_error&) {
    require(size != kvkey::Digest::size_bytes, "from_bytes refuses only other lengths");
  }
}

void secret_text(std::string_view text) {
  kvkey::detail::WipedBuffer<kvkey::TenantSecret::max_size> hex;
  if (kvkey::detail::all_hex(text) && kvkey::detail::decode_secret_hex(text, hex)) {
    require(hex.size * 2 == text.size(), "hex decodes two digits per byte");
    std::string again;
    for (std::size_t i = 0; i < hex.size; ++i) {
      static constexpr char digits[] = "0123456789abcdef";
      again.push_back(digits[hex.bytes[i] >> 4]);
      again.push_back(digits[hex.bytes[i] & 15]);
    }
    require(again == lower(text), "secret hex round trip");
  }
  kvkey::detail::WipedBuffer<kvkey::TenantSecret::max_size> b64;
  if (kvkey::detail::decode_secret_base64(text, b64)) {
    require(base64(b64.bytes.data(), b64.size) == text, "accepted base64 is canonical and round-trips");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  digest_hex(text);
  digest_bytes(data, size);
  secret_text(text);
  return 0;
}
