// The kvkey tool's input parsers (tools/cli/inputs.hpp, identity_config.hpp):
// the first byte picks an identity file in JSON (0), in TOML (1) or a token
// file (2); the rest is the file's contents. Each parser returns a value or
// throws the tool's Failure, never anything else; the message is one bounded
// line with no control characters; accepted token ids lie in [0, 2^32); an
// accepted identity file yields a namespace or a Failure naming the field.
#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>

#include "fuzz_common.hpp"
#include "cli/identity_config.hpp"
#include "cli/inputs.hpp"
#include "cli/tool.hpp"

namespace {

using kvkey_fuzz::require;

// A message the tool would print: untrusted text is quoted after at most
// quote_limit bytes, so no input makes it long, and it is escaped.
void check_message(const kvkey_tool::Failure& e) {
  const std::string_view m = e.what();
  require(!m.empty() && m.size() < 1024, "a failure message is short");
  require(std::none_of(m.begin(), m.end(), [](char c) { return static_cast<unsigned char>(c) < 0x20 || c == 0x7f; }),
          "a failure message has no control characters");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);
  try {
    switch (data[0] % 3) {
      case 0:
      case 1: {
        const kvkey_tool::IdentityConfig c =
            kvkey_tool::parse_identity_config(text, data[0] % 3 == 0 ? "fuzz.json" : "fuzz.toml");
        const kvkey::KeyNamespace<> ns = kvkey_tool::namespace_for(c);
        require(!ns.key_prefix().empty(), "an accepted identity file has a namespace");
        break;
      }
      default: {
        for (const std::int64_t t : kvkey_tool::parse_tokens(text, "fuzz.tokens")) {
          require(t >= 0 && t <= 0xffffffffLL, "accepted token ids lie in [0, 2^32)");
        }
      }
    }
  } catch (const kvkey_tool::Failure& e) {
    check_message(e);
  }
  return 0;
}
