// SPDX-License-Identifier: Apache-2.0
// `kvkey schema`: the identity schema as data (tests/vectors/identity-schema.json,
// docs/conformance.md "The identity schema"), derived from the field table
// kvkey::Fields and the rules of kvkey::validated.
#include "cli/schema.hpp"

#include <kvkey/config.hpp>
#include <kvkey/identity.hpp>
#include <kvkey/text.hpp>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "cli/command.hpp"
#include "cli/inputs.hpp"
#include "cli/tool.hpp"

namespace kvkey_tool {

namespace {

template <class T>
struct is_optional : std::false_type {};
template <class T>
struct is_optional<std::optional<T>> : std::true_type {};

// The schema's name of a member type.
template <class T>
std::string type_name() {
  if constexpr (is_optional<T>::value) {
    return type_name<typename T::value_type>();
  } else if constexpr (kvkey::is_identity_part_v<T>) {
    return "object";
  } else if constexpr (std::is_same_v<T, std::string>) {
    return "string";
  } else if constexpr (std::is_same_v<T, bool>) {
    return "bool";
  } else if constexpr (std::is_same_v<T, std::uint32_t>) {
    return "u32";
  } else if constexpr (std::is_same_v<T, std::uint64_t>) {
    return "u64";
  } else if constexpr (std::is_same_v<T, kvkey::KvDtype>) {
    return "dtype";
  } else {
    static_assert(std::is_same_v<T, kvkey::Digest>, "a member type the schema does not know");
    return "digest";
  }
}

template <class T>
Json default_json(const T& v) {
  if constexpr (is_optional<T>::value) {
    return v ? default_json(*v) : Json(nullptr);
  } else if constexpr (kvkey::is_identity_part_v<T>) {
    return nullptr;  // an object's default is its members' defaults
  } else if constexpr (std::is_same_v<T, kvkey::KvDtype>) {
    return v == kvkey::KvDtype::unset ? Json(nullptr) : Json(std::string(kvkey::to_string(v)));
  } else if constexpr (std::is_same_v<T, kvkey::Digest>) {
    return v.hex();
  } else {
    return v;
  }
}

// The rule a FieldKind names (validated()'s check of the member alone).
Json rule_name(kvkey::FieldKind k) {
  switch (k) {
    case kvkey::FieldKind::positive: return "positive";
    case kvkey::FieldKind::text: return "text";
    case kvkey::FieldKind::identifier: return "identifier";
    case kvkey::FieldKind::tenant: return "tenant";
    case kvkey::FieldKind::scheme: return "scheme";
    case kvkey::FieldKind::dtype: return "dtype";
    case kvkey::FieldKind::value: break;
  }
  return nullptr;
}

// "weights_fingerprint" -> "weights_file"
std::string file_key_of(std::string_view fingerprint_key) {
  return std::string(fingerprint_key.substr(0, fingerprint_key.rfind("_fingerprint"))) + "_file";
}

// The field's place in identity_field_names() (the encoding order), or null
// for what is not encoded itself (the objects model, kv, kv.quant; the shard).
Json encoding_index(std::string_view path) {
  const auto& names = kvkey::identity_field_names();
  for (std::size_t i = 0; i < names.size(); ++i) {
    if (names[i] == path) return i;
  }
  return nullptr;
}

struct Collector {
  Json parts = Json::array();
  Json fields = Json::array();
  Json steps = Json::array();  // the members' own rules, in table order

  template <class P>
  void part(const P& defaults, const std::string& path, const std::string& when) {
    Json members = Json::array();
    kvkey::for_each_field<P>([&](const auto& info) { members.push_back(std::string(info.key)); });
    parts.push_back({{"name", std::string(kvkey::Fields<P>::name)},
                     {"path", path},
                     {"positional", kvkey::Fields<P>::positional},
                     {"members", members}});
    kvkey::for_each_field<P>([&](const auto& info) {
      using T = typename std::decay_t<decltype(info)>::type;
      const T& value = defaults.*(info.member);
      const bool salient = (info.flags & kvkey::field_not_salient) == 0;
      Json f = {
          {"path", std::string(info.path)},
          {"key", std::string(info.key)},
          {"part", std::string(kvkey::Fields<P>::name)},
          {"type", type_name<T>()},
          {"optional", is_optional<T>::value},
          {"default", default_json(value)},
          {"rule", rule_name(info.kind)},
          {"max_bytes", info.limit == 0 ? Json(nullptr) : Json(info.limit)},
          {"salient", salient},
          {"encoding_index", encoding_index(info.path)},
          {"file_required", (info.flags & kvkey::field_required) != 0},
          {"file_alt_key", (info.flags & kvkey::field_file_alt) != 0 ? Json(file_key_of(info.key)) : Json(nullptr)}};
      if constexpr (kvkey::is_identity_part_v<T>) {
        f["object"] = std::string(kvkey::Fields<T>::name);
      } else if constexpr (std::is_same_v<T, std::optional<kvkey::Adapter>>) {
        f["object"] = std::string(kvkey::Fields<kvkey::Adapter>::name);
      }
      if (!rule_name(info.kind).is_null()) {
        Json step = {{"field", std::string(info.path)}, {"rule", rule_name(info.kind)}};
        if (info.limit != 0) step["max_bytes"] = info.limit;
        if (!when.empty()) step["when"] = {{"present", when}};
        if (info.kind == kvkey::FieldKind::tenant) step["when"] = {{"policy", "required"}};
        steps.push_back(step);
      }
      fields.push_back(std::move(f));
      if constexpr (kvkey::is_identity_part_v<T>) {
        part(value, std::string(info.path), when);
      } else if constexpr (std::is_same_v<T, std::optional<kvkey::Adapter>>) {
        part(kvkey::Adapter{}, std::string(info.path), std::string(info.path));
      }
    });
  }
};

// The code points is_unsafe_code_point refuses, as inclusive ranges.
Json unsafe_ranges() {
  Json out = Json::array();
  for (std::uint32_t cp = 0; cp <= 0x10ffff; ++cp) {
    if (!kvkey::is_unsafe_code_point(cp)) continue;
    std::uint32_t end = cp;
    while (end < 0x10ffff && kvkey::is_unsafe_code_point(end + 1)) ++end;
    out.push_back(Json::array({cp, end}));
    cp = end;
  }
  return out;
}

Json step(const char* field, const char* rule, Json extra = Json::object()) {
  Json s = {{"field", field}, {"rule", rule}};
  s.update(extra);
  return s;
}

// Objects one member a line; arrays one element a line, each element on one
// line: a field or a validation step reads as one line of a diff.
void print_schema(const Json& j, std::size_t level, std::string& out) {
  const std::string pad(2 * level + 2, ' ');
  const std::string close(2 * level, ' ');
  if (j.is_object() && !j.empty()) {
    out += "{\n";
    std::size_t n = 0;
    for (const auto& [key, value] : j.items()) {
      out += pad + Json(key).dump() + ": ";
      print_schema(value, level + 1, out);
      out += ++n < j.size() ? ",\n" : "\n";
    }
    out += close + "}";
  } else if (j.is_array() && !j.empty()) {
    out += "[\n";
    for (std::size_t i = 0; i < j.size(); ++i) out += pad + j[i].dump() + (i + 1 < j.size() ? ",\n" : "\n");
    out += close + "]";
  } else {
    out += j.dump();
  }
}

}  // namespace

Json identity_schema() {
  Collector c;
  c.part(kvkey::Identity{}, "", "");

  Json dtypes = Json::array();
  for (const kvkey::KvDtype d : kvkey::all_dtypes()) {
    dtypes.push_back({{"name", std::string(kvkey::to_string(d))}, {"code", static_cast<unsigned>(d)}});
  }

  // kvkey::validated: the policy's tenant rule, every member's own rule in
  // table order, the quant rules, then resolve_slice's geometry; a keyed
  // namespace checks its secret last. tools/tests/schema_test.py checks this
  // order against the library with identities that break two rules at once.
  Json validation = Json::array();
  validation.push_back(step("tenant", "empty", {{"when", {{"policy", "single_tenant"}}}}));
  for (const Json& s : c.steps) validation.push_back(s);
  const Json none = {{"field", "kv.quant.scheme"}, {"equals", "none"}};
  for (const char* f :
       {"kv.quant.group_size", "kv.quant.scale_dtype", "kv.quant.zero_point", "kv.quant.scales_fingerprint"}) {
    validation.push_back(step(f, "default", {{"when", none}}));
  }
  validation.push_back(step("shard.tp_size", "positive"));
  validation.push_back(step("shard.pp_size", "positive"));
  validation.push_back(step("shard.tp_rank", "below", {{"other", "shard.tp_size"}}));
  validation.push_back(step("shard.pp_rank", "below", {{"other", "shard.pp_size"}}));
  validation.push_back(step("shard.tp_size", "splits_heads", {{"other", "kv.num_kv_heads"}, {"unless", "kv.mla"}}));
  validation.push_back(step("shard.pp_size", "divides", {{"other", "kv.num_layers"}}));
  validation.push_back(step("tenant_secret", "secret_length",
                            {{"min_bytes", 32}, {"max_bytes", 256}, {"when", {{"namespace", "keyed"}}}}));
  // Format v4: a confidential namespace derives its AES key from the tenant
  // secret, so a plain one refuses `confidential` (KeyNamespace's constructor).
  validation.push_back(step("confidential", "keyed", {{"when", {{"namespace", "plain"}}}}));

  return {
      {"schema_version", 1},
      {"format_version", kvkey::format_version},
      {"generated_by", "kvkey schema (tools/cli/schema.cpp) from kvkey::Fields; see docs/conformance.md"},
      {"dtypes", dtypes},
      {"rules",
       {{"positive", "an integer greater than 0"},
        {"text", "1..max_bytes bytes, no code point of charsets.unsafe_code_points"},
        {"identifier", "1..max_bytes bytes, each in 0x21..0x7e (printable ASCII, no space)"},
        {"tenant", "1..max_bytes bytes of [A-Za-z0-9._-], the first one [A-Za-z0-9]"},
        {"scheme", "1..max_bytes bytes of [a-z0-9._-]"},
        {"dtype", "a dtype of `dtypes`; an optional dtype only when present"},
        {"empty", "the empty string"},
        {"default", "the field's default"},
        {"below", "less than the field `other`"},
        {"splits_heads",
         "unless `unless` is true: tp <= H and H % tp == 0, or tp > H and tp % H == 0 (H = the field `other`)"},
        {"divides", "divides the field `other` (other % value == 0)"},
        {"secret_length", "min_bytes..max_bytes bytes"},
        {"keyed", "false (or absent): true needs a keyed namespace, one with a tenant secret"}}},
      {"charsets", {{"unsafe_code_points", unsafe_ranges()}}},
      {"policy",
       {{"key", "policy"}, {"after", "tenant"}, {"values", {"required", "single_tenant"}}, {"default", "required"}}},
      {"confidential",
       {{"key", "confidential"},
        {"after", "policy"},
        {"type", "bool"},
        {"nullable", true},
        {"default", false},
        {"rule", "keyed"}}},
      {"identity_file", {{"max_bytes", max_config_size}, {"max_depth", max_json_depth}}},
      {"parts", c.parts},
      {"fields", c.fields},
      {"validation", validation},
  };
}

std::vector<Command> add_schema_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("schema",
                                 "Print the identity schema (tests/vectors/identity-schema.json): fields, "
                                 "types, limits, defaults and the validation order");
  return {{cmd, [](std::string& out) {
             print_schema(identity_schema(), 0, out);
             out += "\n";
             return exit_ok;
           }}};
}

}  // namespace kvkey_tool
