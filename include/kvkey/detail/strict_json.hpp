// SPDX-License-Identifier: Apache-2.0
// The parser callback of kvkey's strict JSON readers (parse_strict_json in
// kvkey/identity_file.hpp, parse_json_text in kvkey/model_dir.hpp): one walk
// of nlohmann::json's parse events that refuses nesting deeper than a limit
// before the parser builds it, remembers the first key an object holds twice,
// and knows where the parser is, for the errors each reader words its own way.
#ifndef KVKEY_DETAIL_STRICT_JSON_HPP
#define KVKEY_DETAIL_STRICT_JSON_HPP

#include <cstddef>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "kvkey/config.hpp"

KVKEY_BEGIN_NAMESPACE

namespace detail {

/// Text from a file for a message: control characters become '?', and more
/// than 64 bytes are cut.
inline std::string printable(std::string_view text) {
  std::string out(text.substr(0, 64));
  for (char& c : out) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '?';
  }
  return text.size() > 64 ? out + "..." : out;
}

/// Thrown by StrictJsonTracker when the text nests deeper than its limit (the
/// reader catches it and says so in its own words, with path()).
struct JsonTooDeep {};

/// nlohmann::json parser callback (pass std::ref(tracker) to parse).
class StrictJsonTracker {
 public:
  explicit StrictJsonTracker(std::size_t max_depth) : max_depth_(max_depth) {}

  template <class BasicJson>
  bool operator()(int /*depth*/, typename BasicJson::parse_event_t event, BasicJson& parsed) {
    using Event = typename BasicJson::parse_event_t;
    switch (event) {
      case Event::object_start:
      case Event::array_start:
        if (frames_.size() >= max_depth_) throw JsonTooDeep{};
        frames_.push_back({event == Event::object_start, {}, {}, 0});
        break;
      case Event::object_end:
      case Event::array_end:
        if (!frames_.empty()) frames_.pop_back();
        if (!frames_.empty()) ++frames_.back().count;
        break;
      case Event::key:
        if (!frames_.empty() && parsed.is_string()) {
          Frame& f = frames_.back();
          f.key = parsed.template get_ref<const std::string&>();
          if (!f.keys.insert(f.key).second && !duplicate_) duplicate_ = key_path();
        }
        break;
      case Event::value:
        if (!frames_.empty()) ++frames_.back().count;
        break;
    }
    return true;
  }

  std::size_t max_depth() const noexcept { return max_depth_; }

  /// The dotted key path of the first key an object held twice ("kv.dtype";
  /// "." for the empty key at the top level, "kv." for an empty key in kv),
  /// or nullptr when there was none. Arrays are not part of the path.
  const std::string* duplicate() const noexcept { return duplicate_ ? &*duplicate_ : nullptr; }

  /// Where the parser is, for a message: "rope_scaling.factor", "layers[2]",
  /// or "(top level)"; keys printable() and cut.
  std::string path() const {
    std::string p;
    for (const Frame& f : frames_) {
      if (f.object) {
        if (!p.empty()) p += '.';
        p += printable(f.key);
      } else {
        p += "[" + std::to_string(f.count) + "]";
      }
    }
    return p.empty() ? "(top level)" : p;
  }

 private:
  struct Frame {
    bool object;
    std::set<std::string> keys;  // objects: the keys seen
    std::string key;             // objects: the current key
    std::size_t count;           // arrays: values before the current one
  };

  // The current keys of the enclosing objects, joined by '.' (as every kvkey
  // reader names a field: the field names the same path in C++, Python, Go
  // and Rust).
  std::string key_path() const {
    std::string p;
    for (const Frame& f : frames_) {
      if (!f.object) continue;
      if (!p.empty()) p += '.';
      p += f.key;
    }
    return p.empty() ? "." : p;
  }

  std::size_t max_depth_;
  std::vector<Frame> frames_;
  std::optional<std::string> duplicate_;
};

}  // namespace detail

KVKEY_END_NAMESPACE

#endif  // KVKEY_DETAIL_STRICT_JSON_HPP
