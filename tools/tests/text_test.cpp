// SPDX-License-Identifier: Apache-2.0
// What identity validation refuses in a name and what the two escapers (the
// library's describe() and the tool's escape()) escape is one set: every code
// point is checked against all three.
#include <kvkey/fmt.hpp>
#include <kvkey/identity.hpp>
#include <kvkey/text.hpp>

#include <cstdint>
#include <cstdio>
#include <string>

#include "cli/tool.hpp"

namespace {

std::string utf8(std::uint32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else if (cp < 0x800) {
    s += static_cast<char>(0xc0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3f));
  } else if (cp < 0x10000) {
    s += static_cast<char>(0xe0 | (cp >> 12));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
    s += static_cast<char>(0x80 | (cp & 0x3f));
  } else {
    s += static_cast<char>(0xf0 | (cp >> 18));
    s += static_cast<char>(0x80 | ((cp >> 12) & 0x3f));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
    s += static_cast<char>(0x80 | (cp & 0x3f));
  }
  return s;
}

bool refused(const std::string& name) {
  kvkey::Identity id;
  id.tenant = "t";
  id.model.name = name;
  id.model.revision = "r";
  id.kv.dtype = kvkey::KvDtype::fp16;
  id.kv.block_size = id.kv.num_layers = id.kv.num_kv_heads = id.kv.head_dim = 1;
  id.kv.layout = "l";
  try {
    (void)kvkey::validated(id);
    return false;
  } catch (const kvkey::identity_error& e) {
    return e.field() == "model.name";
  }
}

}  // namespace

int main() {
  int failures = 0;
  std::uint32_t unsafe = 0;
  for (std::uint32_t cp = 0; cp <= 0x10ffff; ++cp) {
    if (cp >= 0xd800 && cp <= 0xdfff) continue;  // surrogates are not UTF-8
    const std::string s = utf8(cp);
    const std::string name = "a" + s;
    kvkey::Identity id;
    id.model.name = name;
    const std::string described = kvkey::describe(id);
    const bool expected = kvkey::is_unsafe_code_point(cp);
    const bool by_validation = refused(name);
    // Both escapers also escape '\' (unambiguous output); that is quoting, not an unsafe character.
    const bool by_describe = described.find(" model.name=" + name + " ") == std::string::npos && cp != '\\';
    const bool by_tool = kvkey_tool::escape(s) != s;
    unsafe += expected ? 1 : 0;
    if (by_validation != expected || by_describe != expected || by_tool != expected) {
      if (++failures <= 20) {
        std::printf("U+%04X: unsafe %d, refused %d, escaped by describe %d, by the tool %d\n", cp, expected,
                    by_validation, by_describe, by_tool);
      }
    }
  }
  if (unsafe < 90) {
    std::printf("only %u unsafe code points: the predicate is broken\n", unsafe);
    return 1;
  }
  std::printf("%d disagreements (%u unsafe code points)\n", failures, unsafe);
  return failures == 0 ? 0 : 1;
}
