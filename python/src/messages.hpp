// The binding's error messages in Python's names: a kvkey::error's text names
// C++ spellings (kvkey::Payload, Policy::payload = PayloadCheck::size_only,
// the kvkey::single_tenant policy) where C++ users need them; before it is
// raised in Python, each is replaced by what a Python user writes.
#ifndef KVKEY_PYTHON_MESSAGES_HPP
#define KVKEY_PYTHON_MESSAGES_HPP

#include <string>
#include <string_view>
#include <utility>

namespace kvkey_python {

// C++ phrase -> Python phrase, longest first where one contains another.
inline constexpr std::pair<std::string_view, std::string_view> python_phrases[] = {
    {"pass the bytes as a kvkey::Payload, or opt out with Policy::payload = PayloadCheck::size_only",
     "pass the payload bytes, or opt out with KeyNamespace(..., payload_check='size_only')"},
    {"this namespace's Policy requires one", "this namespace requires one (payload_check='required')"},
    {"the kvkey::single_tenant policy", "single_tenant=True"},
    {"under the single_tenant policy (got a tenant name; drop the policy to use it)",
     "with single_tenant=True (got a tenant name; drop single_tenant=True to use it)"},
    {"PayloadCheck::size_only", "payload_check='size_only'"},
    {"PayloadCheck::required", "payload_check='required'"},
    {"kvkey::Payload", "the payload bytes"},
    // Last resort for a phrase not listed: no C++ scope operator reaches Python.
    {"Policy::", "policy "},
    {"kvkey::", "kvkey."},
};

// message with every C++ phrase above replaced, in order.
inline std::string python_message(std::string message) {
  for (const auto& [cpp, python] : python_phrases) {
    for (std::size_t at = message.find(cpp); at != std::string::npos; at = message.find(cpp, at + python.size())) {
      message.replace(at, cpp.size(), python);
    }
  }
  return message;
}

}  // namespace kvkey_python

#endif  // KVKEY_PYTHON_MESSAGES_HPP
