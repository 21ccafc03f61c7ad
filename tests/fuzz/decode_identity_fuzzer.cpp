// decode_identity on arbitrary bytes: never reads out of bounds; whatever it
// accepts is canonical (re-encodes to the same bytes), and validating it
// throws identity_error at most.
//
// Input: one mode byte, then the bytes to decode; an odd mode byte prepends a
// correct tag and format version, so the fuzzer spends its time on the fields.
#include <memory>

#include "fuzz_common.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using kvkey_fuzz::require;
  if (size == 0) return 0;
  kvkey::Bytes bytes;
  if ((data[0] & 1) != 0) {
    bytes.insert(bytes.end(), kvkey::identity_tag, kvkey::identity_tag + sizeof kvkey::identity_tag);
    bytes.push_back(static_cast<std::uint8_t>(kvkey::format_version));
    bytes.push_back(static_cast<std::uint8_t>(kvkey::format_version >> 8));
  }
  bytes.insert(bytes.end(), data + 1, data + size);
  // A copy of exactly the input's size, so ASan catches any read past the end.
  const std::unique_ptr<std::uint8_t[]> exact(new std::uint8_t[bytes.size()]);
  if (!bytes.empty()) std::memcpy(exact.get(), bytes.data(), bytes.size());
  const auto id = kvkey::decode_identity(exact.get(), bytes.size());
  if (!id) return 0;
  require(kvkey::encode_identity(*id) == bytes, "decode_identity accepts only canonical encodings");
  require(kvkey::first_difference(*id, *id).empty(), "an identity has no difference from itself");
  try {
    const kvkey::Identity v = kvkey::validated(*id);
    require(kvkey::encode_identity(v) == bytes, "validation does not change a decoded identity");
  } catch (const kvkey::identity_error&) {
  }
  return 0;
}
