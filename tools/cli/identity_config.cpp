// SPDX-License-Identifier: Apache-2.0
#include "cli/identity_config.hpp"

#include <kvkey/errors.hpp>
#include <kvkey/fingerprint.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <type_traits>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "cli/inputs.hpp"
#include "cli/toml_config.hpp"
#include "cli/tool.hpp"

namespace kvkey_tool {

namespace {

template <class T>
struct is_optional : std::false_type {};
template <class T>
struct is_optional<std::optional<T>> : std::true_type {};

// Levenshtein distance, for "did you mean" on unknown keys.
std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diag = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

// The known key an unknown one is probably a typo of: at most 2 edits, and
// fewer than half the unknown key's length ("zz" is no typo of "kv").
std::optional<std::string_view> suggestion(std::string_view key, const std::vector<std::string_view>& known) {
  if (key.size() > 64) return std::nullopt;
  std::optional<std::string_view> best;
  std::size_t best_distance = 3;
  for (std::string_view candidate : known) {
    const std::size_t d = edit_distance(key, candidate);
    if (d < best_distance && 2 * d < key.size()) best_distance = d, best = candidate;
  }
  return best;
}

// A JSON value in a message: strings quoted and truncated, numbers as written
// (-0, inf and nan included), arrays and objects by type only.
std::string describe(const Json& v) {
  switch (v.type()) {
    case Json::value_t::string: return quote(v.get_ref<const std::string&>());
    case Json::value_t::number_integer: {
      // Non-negative integers parse as number_unsigned: a signed zero was written "-0".
      const auto n = v.get<std::int64_t>();
      return n == 0 ? "-0" : std::to_string(n);
    }
    case Json::value_t::number_float: {
      const double d = v.get<double>();
      if (std::isnan(d)) return "nan";
      if (std::isinf(d)) return d < 0 ? "-inf" : "inf";
      return v.dump();
    }
    case Json::value_t::object:
    case Json::value_t::array: return v.type_name();
    default: return v.dump();
  }
}

/// One JSON object of the configuration, read member by member. Knows its
/// dotted path so every message names the field.
class Section {
 public:
  Section(const Json& j, std::string path, const std::vector<std::string_view>& keys, const std::string& file)
      : j_(j), path_(std::move(path)), file_(file) {
    if (!j.is_object()) fail("{}: {}: expected an object, got {}", file_, where(), j.type_name());
    for (const auto& item : j.items()) {
      const std::string& k = item.key();
      if (std::find(keys.begin(), keys.end(), k) != keys.end()) continue;
      std::string known;
      for (std::string_view candidate : keys) known += (known.empty() ? "" : ", ") + std::string(candidate);
      const std::string unknown = field(escape(k, quote_limit));
      if (const auto best = suggestion(k, keys))
        fail("{}: {}: unknown key (did you mean {}?)", file_, unknown, field(*best));
      fail("{}: {}: unknown key ({} takes: {})", file_, unknown, where(), known);
    }
  }

  std::string field(std::string_view key) const {
    return path_.empty() ? std::string(key) : path_ + "." + std::string(key);
  }
  const std::string& file() const { return file_; }

  /// The member, or nullptr when absent or null.
  const Json* find(std::string_view key) const {
    const auto it = j_.find(key);
    return it == j_.end() || it->is_null() ? nullptr : &*it;
  }
  const Json& require(std::string_view key) const {
    const Json* v = find(key);
    if (v == nullptr) fail("{}: {}: required key is missing", file_, field(key));
    return *v;
  }

  std::string string(std::string_view key, const Json& v) const {
    if (!v.is_string()) fail("{}: {}: expected a string, got {}", file_, field(key), describe(v));
    return v.get<std::string>();
  }
  /// A string naming a file: a NUL would end the path early.
  std::string path(std::string_view key, const Json& v) const {
    std::string s = string(key, v);
    if (const auto nul = s.find('\0'); nul != std::string::npos) {
      fail("{}: {}: byte {} is NUL, which cannot be in a path ({})", file_, field(key), nul, quote(s));
    }
    return s;
  }
  template <class Uint>
  Uint unsigned_int(std::string_view key, const Json& v) const {
    constexpr auto max = std::numeric_limits<Uint>::max();
    if (!v.is_number_unsigned()) {
      fail("{}: {}: expected an integer in [0, {}], got {}", file_, field(key), max, describe(v));
    }
    const auto n = v.get<std::uint64_t>();
    if (n > max) fail("{}: {}: {} is above the maximum {}", file_, field(key), n, max);
    return static_cast<Uint>(n);
  }
  bool boolean(std::string_view key, const Json& v) const {
    if (!v.is_boolean()) fail("{}: {}: expected true or false, got {}", file_, field(key), describe(v));
    return v.get<bool>();
  }
  kvkey::KvDtype dtype(std::string_view key, const Json& v) const {
    return parse_dtype(string(key, v), fmt::format("{}: {}", file_, field(key)));
  }
  kvkey::Digest digest(std::string_view key, const Json& v) const {
    return parse_digest(string(key, v), fmt::format("{}: {}", file_, field(key)));
  }

 private:
  std::string where() const { return path_.empty() ? "the top level" : path_; }

  const Json& j_;
  std::string path_;
  const std::string& file_;
};

// A fingerprint given either inline ("<name>_fingerprint": 64 hex) or as a file
// to hash ("<name>_file": path relative to the configuration file).
std::optional<kvkey::Digest> read_fingerprint(const Section& s, std::string_view hex_key, std::string_view file_key,
                                              IdentityConfig& config) {
  const Json* hex = s.find(hex_key);
  const Json* file = s.find(file_key);
  if (hex != nullptr && file != nullptr) {
    fail("{}: {}: give {} or {}, not both", s.file(), s.field(file_key), s.field(hex_key), s.field(file_key));
  }
  if (hex != nullptr) return s.digest(hex_key, *hex);
  if (file == nullptr) return std::nullopt;
  const std::filesystem::path given = s.path(file_key, *file);
  std::filesystem::path resolved = given;
  if (given.is_relative() && config.path != "-") resolved = std::filesystem::path(config.path).parent_path() / given;
  const std::string p = resolved.lexically_normal().string();
  try {
    const kvkey::Digest d = fingerprint_regular_file(p);
    config.fingerprinted_files.emplace_back(s.field(hex_key), p);
    return d;
  } catch (const Failure& e) {
    fail("{}: {}: {}", s.file(), s.field(file_key), e.what());
  }
}

// "weights_fingerprint" -> "weights_file": the key naming a file to hash instead (kvkey::field_file_alt).
std::string file_key_of(std::string_view fingerprint_key) {
  const std::string_view stem = fingerprint_key.substr(0, fingerprint_key.rfind("_fingerprint"));
  return std::string(stem) + "_file";
}

// The keys a section of part P takes: its members', each "_file" alternative after its digest.
template <class P>
std::vector<std::string_view> keys_of() {
  // Owned strings for the "_file" keys: one static list per part.
  static const std::vector<std::string> files = [] {
    std::vector<std::string> out;
    kvkey::for_each_field<P>([&out](const auto& info) {
      if ((info.flags & kvkey::field_file_alt) != 0) out.push_back(file_key_of(info.key));
    });
    return out;
  }();
  std::vector<std::string_view> keys;
  std::size_t next_file = 0;
  kvkey::for_each_field<P>([&](const auto& info) {
    keys.push_back(info.key);
    if ((info.flags & kvkey::field_file_alt) != 0) keys.push_back(files[next_file++]);
  });
  return keys;
}

template <class P>
void read_part(const Section& s, P& part, IdentityConfig& c);

// One member of a part, read by its type; `info` is its kvkey::FieldInfo.
template <class Info, class T>
void read_member(const Section& s, const Info& info, T& out, IdentityConfig& c) {
  const std::string_view key = info.key;
  const bool required = (info.flags & kvkey::field_required) != 0;
  if constexpr (std::is_same_v<T, std::optional<kvkey::Digest>> || std::is_same_v<T, kvkey::Digest>) {
    if ((info.flags & kvkey::field_file_alt) != 0) {
      const std::string file = file_key_of(key);
      const auto fp = read_fingerprint(s, key, file, c);
      if constexpr (std::is_same_v<T, kvkey::Digest>) {
        if (!fp) fail("{}: {}: required key is missing (or give {})", s.file(), s.field(key), s.field(file));
        out = *fp;
      } else {
        out = fp;
      }
      return;
    }
  }
  const Json* v = required ? &s.require(key) : s.find(key);
  if (v == nullptr) return;  // absent: the C++ default
  if constexpr (kvkey::is_identity_part_v<T>) {
    read_part(Section(*v, s.field(key), keys_of<T>(), s.file()), out, c);
  } else if constexpr (std::is_same_v<T, std::optional<kvkey::Adapter>>) {
    read_part(Section(*v, s.field(key), keys_of<kvkey::Adapter>(), s.file()), out.emplace(), c);
  } else if constexpr (std::is_same_v<T, std::string>) {
    out = s.string(key, *v);
  } else if constexpr (std::is_same_v<T, bool>) {
    out = s.boolean(key, *v);
  } else if constexpr (std::is_same_v<T, kvkey::KvDtype> || std::is_same_v<T, std::optional<kvkey::KvDtype>>) {
    out = s.dtype(key, *v);
  } else if constexpr (std::is_same_v<T, std::optional<kvkey::Digest>> || std::is_same_v<T, kvkey::Digest>) {
    out = s.digest(key, *v);
  } else {
    out = s.unsigned_int<T>(key, *v);
  }
}

// Every member of a part, in table order (kvkey::Fields).
template <class P>
void read_part(const Section& s, P& part, IdentityConfig& c) {
  kvkey::for_each_field<P>([&](const auto& info) { read_member(s, info, part.*(info.member), c); });
}

void read_policy(const Section& s, IdentityConfig& c) {
  const Json* v = s.find("policy");
  if (v == nullptr) return;
  const std::string p = s.string("policy", *v);
  if (p == "single_tenant") {
    c.policy = kvkey::single_tenant;
  } else if (p != "required") {
    fail("{}: policy: unknown policy {} (known: required, single_tenant)", s.file(), quote(p));
  }
}

// A member's value in an identity file, by its type (what read_member reads back).
template <class T>
Json member_json(const T& v) {
  if constexpr (kvkey::is_identity_part_v<T>) {
    Json j = Json::object();
    kvkey::for_each_field<T>([&](const auto& info) {
      const auto& m = v.*(info.member);
      if constexpr (is_optional<std::decay_t<decltype(m)>>::value) {
        if (m) j[std::string(info.key)] = member_json(*m);  // absent: left out
      } else {
        j[std::string(info.key)] = member_json(m);
      }
    });
    return j;
  } else if constexpr (std::is_same_v<T, kvkey::KvDtype>) {
    return std::string(kvkey::to_string(v));
  } else if constexpr (std::is_same_v<T, kvkey::Digest>) {
    return v.hex();
  } else {
    return v;  // strings, integers, bool
  }
}

}  // namespace

Json identity_file_json(const kvkey::Identity& id) { return member_json(id); }

IdentityConfig parse_identity_config(std::string_view bytes, const std::string& path) {
  IdentityConfig c;
  c.path = path;
  const std::string name = display_name(path);
  const std::string_view text = text_body(bytes, path);
  const bool toml = path.size() > 5 && path.compare(path.size() - 5, 5, ".toml") == 0;
  const Json j = toml ? parse_toml(text, path) : parse_json(text, path);
  // The top level takes the identity's members and the namespace's "policy" (after "tenant").
  std::vector<std::string_view> keys = keys_of<kvkey::Identity>();
  keys.insert(keys.begin() + 1, "policy");
  const Section top(j, "", keys, name);
  read_policy(top, c);
  read_part(top, c.identity, c);
  return c;
}

IdentityConfig load_identity_config(const std::string& path) {
  return parse_identity_config(read_limited(path, max_config_size, "identity files"), path);
}

kvkey::KeyNamespace<> namespace_for(const IdentityConfig& config) {
  try {
    return kvkey::KeyNamespace<>(config.identity, config.policy);
  } catch (const kvkey::identity_error& e) {
    fail("{}: {}: {}", display_name(config.path), e.field(), e.detail());
  }
}

kvkey::KeyNamespace<> load_namespace(const std::string& path) { return namespace_for(load_identity_config(path)); }

}  // namespace kvkey_tool
