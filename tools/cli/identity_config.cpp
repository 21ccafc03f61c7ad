// SPDX-License-Identifier: Apache-2.0
#include "cli/identity_config.hpp"

#include <kvkey/errors.hpp>
#include <kvkey/fingerprint.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <initializer_list>
#include <limits>
#include <optional>

#include "cli/inputs.hpp"
#include "cli/toml_config.hpp"
#include "cli/tool.hpp"

namespace kvkey_tool {

namespace {

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
std::optional<std::string_view> suggestion(std::string_view key, std::initializer_list<std::string_view> known) {
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
  Section(const Json& j, std::string path, std::initializer_list<std::string_view> keys, const std::string& file)
      : j_(j), path_(std::move(path)), file_(file) {
    if (!j.is_object()) fail("{}: {}: expected an object, got {}", file_, where(), j.type_name());
    for (const auto& item : j.items()) {
      const std::string& k = item.key();
      if (std::find(keys.begin(), keys.end(), k) != keys.end()) continue;
      std::string known;
      for (std::string_view candidate : keys) known += (known.empty() ? "" : ", ") + std::string(candidate);
      const std::string unknown = field(escape(k, quote_limit));
      if (const auto best = suggestion(k, keys)) fail("{}: {}: unknown key (did you mean {}?)", file_, unknown, field(*best));
      fail("{}: {}: unknown key ({} takes: {})", file_, unknown, where(), known);
    }
  }

  std::string field(std::string_view key) const { return path_.empty() ? std::string(key) : path_ + "." + std::string(key); }
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

  // Optional members: the C++ default when absent.
  template <class T, class Read>
  void read(std::string_view key, T& out, Read read_one) const {
    if (const Json* v = find(key)) out = (this->*read_one)(key, *v);
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

void read_model(const Section& s, IdentityConfig& c) {
  kvkey::Model& m = c.identity.model;
  m.name = s.string("name", s.require("name"));
  m.revision = s.string("revision", s.require("revision"));
  s.read("weights_epoch", m.weights_epoch, &Section::unsigned_int<std::uint64_t>);
  m.weights_fingerprint = read_fingerprint(s, "weights_fingerprint", "weights_file", c);
  if (const Json* v = s.find("positional_fingerprint")) m.positional_fingerprint = s.digest("positional_fingerprint", *v);
}

void read_quant(const Section& s, IdentityConfig& c) {
  kvkey::Quant& q = c.identity.kv.quant;
  s.read("scheme", q.scheme, &Section::string);
  s.read("group_size", q.group_size, &Section::unsigned_int<std::uint32_t>);
  if (const Json* v = s.find("scale_dtype")) q.scale_dtype = s.dtype("scale_dtype", *v);
  s.read("zero_point", q.zero_point, &Section::boolean);
  q.scales_fingerprint = read_fingerprint(s, "scales_fingerprint", "scales_file", c);
}

void read_kv(const Section& s, IdentityConfig& c) {
  kvkey::Kv& kv = c.identity.kv;
  kv.dtype = s.dtype("dtype", s.require("dtype"));
  if (const Json* q = s.find("quant")) {
    read_quant(Section(*q, s.field("quant"),
                       {"scheme", "group_size", "scale_dtype", "zero_point", "scales_fingerprint", "scales_file"},
                       s.file()),
               c);
  }
  kv.block_size = s.unsigned_int<std::uint32_t>("block_size", s.require("block_size"));
  kv.num_layers = s.unsigned_int<std::uint32_t>("num_layers", s.require("num_layers"));
  kv.num_kv_heads = s.unsigned_int<std::uint32_t>("num_kv_heads", s.require("num_kv_heads"));
  kv.head_dim = s.unsigned_int<std::uint32_t>("head_dim", s.require("head_dim"));
  kv.layout = s.string("layout", s.require("layout"));
  s.read("mla", kv.mla, &Section::boolean);
}

void read_shard(const Section& s, IdentityConfig& c) {
  kvkey::Shard& sh = c.identity.shard;
  s.read("tp_size", sh.tp_size, &Section::unsigned_int<std::uint32_t>);
  s.read("tp_rank", sh.tp_rank, &Section::unsigned_int<std::uint32_t>);
  s.read("pp_size", sh.pp_size, &Section::unsigned_int<std::uint32_t>);
  s.read("pp_rank", sh.pp_rank, &Section::unsigned_int<std::uint32_t>);
}

void read_adapter(const Section& s, IdentityConfig& c) {
  kvkey::Adapter a;
  a.name = s.string("name", s.require("name"));
  auto fp = read_fingerprint(s, "weights_fingerprint", "weights_file", c);
  if (!fp) {
    fail("{}: {}: required key is missing (or give {})", s.file(), s.field("weights_fingerprint"),
         s.field("weights_file"));
  }
  a.weights_fingerprint = *fp;
  c.identity.adapter = std::move(a);
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

}  // namespace

IdentityConfig parse_identity_config(std::string_view bytes, const std::string& path) {
  IdentityConfig c;
  c.path = path;
  const std::string name = display_name(path);
  const std::string_view text = text_body(bytes, path);
  const bool toml = path.size() > 5 && path.compare(path.size() - 5, 5, ".toml") == 0;
  const Json j = toml ? parse_toml(text, path) : parse_json(text, path);
  const Section top(j, "", {"tenant", "policy", "model", "kv", "shard", "adapter"}, name);
  read_policy(top, c);
  if (const Json* t = top.find("tenant")) c.identity.tenant = top.string("tenant", *t);
  read_model(Section(top.require("model"), "model",
                     {"name", "revision", "weights_epoch", "weights_fingerprint", "weights_file",
                      "positional_fingerprint"},
                     name),
             c);
  read_kv(Section(top.require("kv"), "kv",
                  {"dtype", "quant", "block_size", "num_layers", "num_kv_heads", "head_dim", "layout", "mla"}, name),
          c);
  if (const Json* s = top.find("shard")) read_shard(Section(*s, "shard", {"tp_size", "tp_rank", "pp_size", "pp_rank"}, name), c);
  if (const Json* a = top.find("adapter")) {
    read_adapter(Section(*a, "adapter", {"name", "weights_fingerprint", "weights_file"}, name), c);
  }
  return c;
}

IdentityConfig load_identity_config(const std::string& path) {
  return parse_identity_config(read_limited(path, max_config_size, "identity files"), path);
}

kvkey::KeyNamespace<> namespace_for(const IdentityConfig& config) {
  try {
    return kvkey::KeyNamespace<>(config.identity, config.policy);
  } catch (const kvkey::identity_error& e) {
    // The library's message is "[kvkey.identity_error] <field>: <what>".
    std::string_view what = without_error_id(e.what());
    const std::string lead = e.field() + ": ";
    if (what.substr(0, lead.size()) == lead) what.remove_prefix(lead.size());
    fail("{}: {}: {}", display_name(config.path), e.field(), what);
  }
}

kvkey::KeyNamespace<> load_namespace(const std::string& path) { return namespace_for(load_identity_config(path)); }

}  // namespace kvkey_tool
