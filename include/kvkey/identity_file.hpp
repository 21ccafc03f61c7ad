// SPDX-License-Identifier: Apache-2.0
// kvkey/identity_file.hpp (opt-in; needs nlohmann-json, e.g. link
// kvkey::identity_file): the identity file `kvkey init` writes, read and
// written. The engine and its router read the same file (docs/routers.md); the
// Go, Rust and Python readers give the same identities and the same errors
// (docs/conformance.md, "Identity files").
#ifndef KVKEY_IDENTITY_FILE_HPP
#define KVKEY_IDENTITY_FILE_HPP

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "kvkey/config.hpp"
#include "kvkey/detail/strict_json.hpp"
#include "kvkey/digest.hpp"
#include "kvkey/errors.hpp"
#include "kvkey/fingerprint.hpp"
#include "kvkey/identity.hpp"
#include "kvkey/input_file.hpp"

KVKEY_BEGIN_NAMESPACE

/// Limits of an identity file: its size in bytes, and how deep its objects and
/// arrays may nest.
inline constexpr std::size_t max_identity_file_size = std::size_t{1} << 20;
inline constexpr std::size_t max_identity_file_depth = 32;

/// An identity file as read: the identity (not yet validated), the namespace's
/// policy, and the fingerprints computed from `*_file` keys.
struct IdentityFile {
  Identity identity;
  Policy policy;
  /// (field, resolved path) of each fingerprint taken from a file, e.g.
  /// ("adapter.weights_fingerprint", "/etc/kvkey/adapter.bin").
  std::vector<std::pair<std::string, std::string>> fingerprinted_files;
};

/// How identity_from_json reads an identity object.
enum class IdentityJson : std::uint8_t {
  /// An identity file: the members the field table marks required must be
  /// given, and a digest may be given as a file to hash (`weights_file`).
  file,
  /// Every member optional (absent: the kvkey::Identity default), digests
  /// inline only: the `identity` of a conformance request.
  partial,
};

/// nlohmann::json's exception message without its "[json.exception.K.N] " id
/// and "parse error at line L, column C: " preamble: the reason alone.
[[nodiscard]] inline std::string_view json_error_reason(std::string_view what) {
  const auto column = what.find("column ");
  const auto colon = column == std::string_view::npos ? what.find("] ") : what.find(": ", column);
  if (colon != std::string_view::npos) what.remove_prefix(colon + 2);
  return what;
}

namespace detail {

// Levenshtein distance, for "did you mean" on unknown keys.
inline std::size_t edit_distance(std::string_view a, std::string_view b) {
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
inline std::optional<std::string_view> key_suggestion(std::string_view key, const std::vector<std::string>& known) {
  if (key.size() > 64) return std::nullopt;
  std::optional<std::string_view> best;
  std::size_t best_distance = 3;
  for (const std::string& candidate : known) {
    const std::size_t d = edit_distance(key, candidate);
    if (d < best_distance && 2 * d < key.size()) best_distance = d, best = candidate;
  }
  return best;
}

// A JSON value in a message: strings quoted (invalid UTF-8 replaced) and cut
// after 64 bytes, numbers as written ("-0" included), arrays and objects by type.
template <class BasicJson>
std::string json_value_text(const BasicJson& v) {
  switch (v.type()) {
    case BasicJson::value_t::string: {
      std::string s = BasicJson(v).dump(-1, ' ', false, BasicJson::error_handler_t::replace);
      return s.size() > 66 ? s.substr(0, 64) + "...\"" : s;
    }
    case BasicJson::value_t::number_integer: {
      // Non-negative integers parse as number_unsigned: a signed zero was written "-0".
      const auto n = v.template get<std::int64_t>();
      return n == 0 ? "-0" : std::to_string(n);
    }
    case BasicJson::value_t::number_float: {
      const double d = v.template get<double>();
      if (d != d) return "nan";
      if (d > std::numeric_limits<double>::max() || d < std::numeric_limits<double>::lowest()) {
        return d < 0 ? "-inf" : "inf";
      }
      return v.dump();
    }
    case BasicJson::value_t::object:
    case BasicJson::value_t::array: return v.type_name();
    default: return v.dump();
  }
}

// "weights_fingerprint" -> "weights_file": the key naming a file to hash instead.
inline std::string file_key_of(std::string_view fingerprint_key) {
  return std::string(fingerprint_key.substr(0, fingerprint_key.rfind("_fingerprint"))) + "_file";
}

template <class T>
struct is_std_optional : std::false_type {};
template <class T>
struct is_std_optional<std::optional<T>> : std::true_type {};

// The keys an object of part P takes: its members, and in files each digest's file key after it.
template <class P>
std::vector<std::string> part_keys(IdentityJson rules) {
  std::vector<std::string> keys;
  for_each_field<P>([&](const auto& info) {
    keys.emplace_back(info.key);
    if (rules == IdentityJson::file && (info.flags & field_file_alt) != 0) keys.push_back(file_key_of(info.key));
  });
  return keys;
}

template <class BasicJson>
class IdentityReader {
 public:
  IdentityReader(IdentityJson rules, std::string base_dir, IdentityFile& out)
      : rules_(rules), base_dir_(std::move(base_dir)), out_(out) {}

  void read(const BasicJson& j) {
    std::vector<std::string> keys = part_keys<Identity>(rules_);
    keys.insert(keys.begin() + 1, "policy");
    keys.insert(keys.begin() + 2, "confidential");
    const std::string top = rules_ == IdentityJson::file ? "identity_file" : "identity";
    check_object(j, "", top, keys);
    if (const BasicJson* p = find(j, "policy")) {
      if (!p->is_string()) throw input_error("policy", "expected a string, got " + json_value_text(*p));
      const auto& name = p->template get_ref<const std::string&>();
      if (name == "single_tenant") {
        out_.policy.tenant = TenantPolicy::single_tenant;
      } else if (name != "required") {
        throw input_error("policy", "unknown policy " + json_value_text(*p) + " (known: required, single_tenant)");
      }
    }
    if (const BasicJson* c = find(j, "confidential")) {  // format v4: payloads stored encrypted (keyed namespaces)
      if (!c->is_boolean()) throw input_error("confidential", "expected true or false, got " + json_value_text(*c));
      out_.policy.confidential = c->template get<bool>();
    }
    read_part(j, "", out_.identity);
  }

 private:
  static std::string join(const std::string& path, std::string_view key) {
    return path.empty() ? std::string(key) : path + "." + std::string(key);
  }

  // The member, or nullptr when absent or null.
  static const BasicJson* find(const BasicJson& j, std::string_view key) {
    const auto it = j.find(std::string(key));
    return it == j.end() || it->is_null() ? nullptr : &*it;
  }

  // j is an object whose keys are all known; the first unknown one in byte order is named.
  static void check_object(const BasicJson& j, const std::string& path, const std::string& field,
                           const std::vector<std::string>& keys) {
    if (!j.is_object()) throw input_error(field, std::string("expected an object, got ") + j.type_name());
    const std::string* unknown = nullptr;
    for (const auto& item : j.items()) {
      const std::string& k = item.key();
      if (std::find(keys.begin(), keys.end(), k) == keys.end() && (unknown == nullptr || k < *unknown)) {
        unknown = &item.key();
      }
    }
    if (unknown == nullptr) return;
    if (const auto best = key_suggestion(*unknown, keys)) {
      throw input_error(join(path, *unknown), "unknown key (did you mean " + join(path, *best) + "?)");
    }
    std::string known;
    for (const std::string& k : keys) known += (known.empty() ? "" : ", ") + k;
    throw input_error(join(path, *unknown), "unknown key (" + (path.empty() ? std::string("the top level") : path) +
                                                " takes: " + known + ")");
  }

  template <class P>
  void read_part(const BasicJson& j, const std::string& path, P& part) {
    for_each_field<P>([&](const auto& info) { read_member(j, path, info, part.*(info.member)); });
  }

  template <class Info, class T>
  void read_member(const BasicJson& j, const std::string& path, const Info& info, T& out) {
    const std::string field(info.path);
    const bool required = rules_ == IdentityJson::file && (info.flags & field_required) != 0;
    const BasicJson* v = find(j, info.key);
    if constexpr (std::is_same_v<T, std::optional<Digest>> || std::is_same_v<T, Digest>) {
      if (rules_ == IdentityJson::file && (info.flags & field_file_alt) != 0) {
        const std::string file_key = file_key_of(info.key);
        if (const BasicJson* f = find(j, file_key)) {
          if (v != nullptr)
            throw input_error(join(path, file_key), "give " + field + " or " + join(path, file_key) + ", not both");
          out = hash_file(join(path, file_key), field, *f);
          return;
        }
        if (v == nullptr && required) {
          throw input_error(field, "required key is missing (or give " + join(path, file_key) + ")");
        }
      }
    }
    if (v == nullptr) {
      if (required) throw input_error(field, "required key is missing");
      return;  // absent: the C++ default
    }
    if constexpr (is_identity_part_v<T>) {
      check_object(*v, field, field, part_keys<T>(rules_));
      read_part(*v, field, out);
    } else if constexpr (std::is_same_v<T, std::optional<Adapter>>) {
      check_object(*v, field, field, part_keys<Adapter>(rules_));
      read_part(*v, field, out.emplace());
    } else if constexpr (std::is_same_v<T, std::string>) {
      out = string(field, *v);
    } else if constexpr (std::is_same_v<T, bool>) {
      if (!v->is_boolean()) throw input_error(field, "expected true or false, got " + json_value_text(*v));
      out = v->template get<bool>();
    } else if constexpr (std::is_same_v<T, KvDtype> || std::is_same_v<T, std::optional<KvDtype>>) {
      const std::string name = string(field, *v);
      const auto d = kv_dtype_from_string(name);
      if (!d)
        throw input_error(field, "unknown dtype " + json_value_text(*v) + " (known: " + known_dtype_names() + ")");
      out = *d;
    } else if constexpr (std::is_same_v<T, std::optional<Digest>> || std::is_same_v<T, Digest>) {
      const std::string hex = string(field, *v);
      try {
        out = Digest::from_hex(hex);
      } catch (const input_error& e) {
        throw input_error(field, e.message());
      }
    } else {
      static_assert(std::is_unsigned_v<T>, "a member type the reader does not know");
      constexpr auto max = std::numeric_limits<T>::max();
      if (!v->is_number_unsigned()) {
        throw input_error(field, "expected an integer in [0, " + std::to_string(max) + "], got " + json_value_text(*v));
      }
      const auto n = v->template get<std::uint64_t>();
      if (n > max) {
        throw input_error(field, std::to_string(n) + " is above the maximum " + std::to_string(max));
      }
      out = static_cast<T>(n);
    }
  }

  static std::string string(const std::string& field, const BasicJson& v) {
    if (!v.is_string()) throw input_error(field, "expected a string, got " + json_value_text(v));
    return v.template get<std::string>();
  }

  // A digest given as a file to hash: the path relative to base_dir.
  Digest hash_file(const std::string& file_field, const std::string& digest_field, const BasicJson& v) {
    const std::string given = string(file_field, v);
    if (const auto nul = given.find('\0'); nul != std::string::npos) {
      throw input_error(file_field, "byte " + std::to_string(nul) + " is NUL, which cannot be in a path (" +
                                        json_value_text(v) + ")");
    }
    std::filesystem::path resolved = given;
    if (resolved.is_relative() && !base_dir_.empty()) resolved = std::filesystem::path(base_dir_) / resolved;
    const std::string p = resolved.lexically_normal().string();
    try {
      InputFile f(p, p);
      const Digest d = fingerprint_file(f);
      out_.fingerprinted_files.emplace_back(digest_field, p);
      return d;
    } catch (const error& e) {
      throw input_error(file_field, e.message());
    }
  }

  IdentityJson rules_;
  std::string base_dir_;
  IdentityFile& out_;
};

}  // namespace detail

/// Parses JSON text strictly: one JSON text (RFC 8259) and nothing after it
/// but whitespace, objects and arrays nested at most max_depth deep, no key
/// twice in an object, no number beyond a double, no NUL byte. A UTF-8 byte order mark at
/// the start is skipped. Throws input_error: field() empty and detail()
/// "LINE:COLUMN: invalid JSON: REASON" (syntax, invalid UTF-8, a lone
/// surrogate) or "invalid JSON: ..." (nesting, a number out of range); or
/// field() the dotted path of the first duplicate key, detail() "duplicate key".
template <class BasicJson = nlohmann::json>
[[nodiscard]] BasicJson parse_strict_json(std::string_view text, std::size_t max_depth) {
  if (const auto nul = text.find('\0'); nul != std::string_view::npos) {  // nlohmann would stop there
    const TextPosition at = text_position(text, nul);
    throw input_error(std::to_string(at.line) + ":" + std::to_string(at.column) + ": invalid JSON: a NUL byte");
  }
  detail::StrictJsonTracker check(max_depth);
  BasicJson j;
  try {
    j = BasicJson::parse(text.begin(), text.end(), std::ref(check));
  } catch (const detail::JsonTooDeep&) {
    throw input_error("invalid JSON: nested deeper than " + std::to_string(max_depth) + " levels");
  } catch (const typename BasicJson::parse_error& e) {
    const TextPosition at = text_position(text, e.byte == 0 ? 0 : e.byte - 1);
    throw input_error(std::to_string(at.line) + ":" + std::to_string(at.column) +
                      ": invalid JSON: " + std::string(json_error_reason(e.what())));
  } catch (const typename BasicJson::exception& e) {  // out_of_range: a number beyond a double (1e400)
    throw input_error("invalid JSON: " + std::string(json_error_reason(e.what())));
  }
  if (const std::string* duplicate = check.duplicate()) throw input_error(*duplicate, "duplicate key");
  return j;
}

/// Reads an identity from parsed JSON (an identity file's top level, or a
/// conformance request's `identity` with IdentityJson::partial): every
/// object's keys must be known (the first unknown one in byte order is named),
/// then `policy`, then the members in the order of the field table. Relative
/// `*_file` paths are resolved against base_dir (empty: the working directory).
/// Throws input_error whose field() is the member's dotted path, or
/// "identity_file" ("identity" for partial) when j is not an object. The
/// identity is not validated: build a namespace from it (or call validated()).
template <class BasicJson>
[[nodiscard]] IdentityFile identity_from_json(const BasicJson& j, IdentityJson rules = IdentityJson::file,
                                              const std::string& base_dir = {}) {
  IdentityFile out;
  detail::IdentityReader<BasicJson>(rules, base_dir, out).read(j);
  return out;
}

/// Reads the JSON text of an identity file (docs/cli.md, "Identity files").
/// Throws input_error: field() "identity_file" when the text is not an
/// identity file's JSON (larger than max_identity_file_size, a syntax error,
/// nested deeper than max_identity_file_depth, not an object), the dotted path
/// of a duplicate key, or the member's path (identity_from_json).
[[nodiscard]] inline IdentityFile parse_identity_file(std::string_view text, const std::string& base_dir = {}) {
  if (text.size() > max_identity_file_size) {
    throw input_error("identity_file",
                      "larger than the " + std::to_string(max_identity_file_size) + "-byte limit for identity files");
  }
  nlohmann::ordered_json j;
  try {
    j = parse_strict_json<nlohmann::ordered_json>(text, max_identity_file_depth);
  } catch (const input_error& e) {
    throw input_error(e.field().empty() ? "identity_file" : e.field(), e.detail());
  }
  return identity_from_json(j, IdentityJson::file, base_dir);
}

/// Reads the identity file at path (at most max_identity_file_size bytes);
/// `*_file` keys are relative to its directory. Throws io_error when it cannot
/// be read, else as parse_identity_file.
[[nodiscard]] inline IdentityFile load_identity_file(const std::string& path) {
  const std::string text = InputFile(path).read_all(max_identity_file_size, "identity files");
  return parse_identity_file(text, std::filesystem::path(path).parent_path().string());
}

namespace detail {
template <class T>
nlohmann::ordered_json identity_member_json(const T& v) {
  if constexpr (is_identity_part_v<T>) {
    nlohmann::ordered_json j = nlohmann::ordered_json::object();
    for_each_field<T>([&](const auto& info) {
      const auto& m = v.*(info.member);
      if constexpr (is_std_optional<std::decay_t<decltype(m)>>::value) {
        if (m) j[std::string(info.key)] = identity_member_json(*m);  // absent: left out
      } else {
        j[std::string(info.key)] = identity_member_json(m);
      }
    });
    return j;
  } else if constexpr (std::is_same_v<T, KvDtype>) {
    return std::string(to_string(v));
  } else if constexpr (std::is_same_v<T, Digest>) {
    return v.hex();
  } else {
    return v;  // strings, integers, bool
  }
}
}  // namespace detail

/// The identity file (JSON) that parse_identity_file reads back as id and
/// policy: every member of the field table in table order, absent optionals
/// left out; under the single_tenant policy "policy" first (and no empty tenant).
[[nodiscard]] inline nlohmann::ordered_json identity_file_json(const Identity& id, const Policy& policy = {}) {
  const nlohmann::ordered_json j = detail::identity_member_json(id);
  if (policy.tenant != TenantPolicy::single_tenant && !policy.confidential) return j;
  nlohmann::ordered_json out = nlohmann::ordered_json::object();
  if (policy.tenant == TenantPolicy::single_tenant) out["policy"] = "single_tenant";
  if (policy.confidential) out["confidential"] = true;
  for (const auto& [key, value] : j.items()) {
    if (key != "tenant" || value != "" || policy.tenant != TenantPolicy::single_tenant) out[key] = value;
  }
  return out;
}

KVKEY_END_NAMESPACE

#endif  // KVKEY_IDENTITY_FILE_HPP
