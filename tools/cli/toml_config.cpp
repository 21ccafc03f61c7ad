// SPDX-License-Identifier: Apache-2.0
#include "cli/toml_config.hpp"

#include <toml++/toml.h>

#include <algorithm>
#include <cstdint>
#include <tuple>
#include <utility>
#include <vector>

#include "cli/tool.hpp"

namespace kvkey_tool {

namespace {

struct Converter {
  const std::string& file;

  Json node(const toml::node& n, const std::string& path, std::size_t depth) const {
    if (n.is_table() || n.is_array()) {
      if (depth >= max_json_depth) {
        fail("{}:{}:{}: {}: nested deeper than {} levels", file, n.source().begin.line, n.source().begin.column, path,
             max_json_depth);
      }
    }
    switch (n.type()) {
      case toml::node_type::table: return table(*n.as_table(), path, depth + 1);
      case toml::node_type::array: {
        Json j = Json::array();
        std::size_t i = 0;
        for (const toml::node& e : *n.as_array()) {
          j.push_back(node(e, path + "[" + std::to_string(i++) + "]", depth + 1));
        }
        return j;
      }
      case toml::node_type::string: return Json(n.as_string()->get());
      case toml::node_type::integer: {
        const std::int64_t v = n.as_integer()->get();
        return v >= 0 ? Json(static_cast<std::uint64_t>(v)) : Json(v);
      }
      case toml::node_type::floating_point: return Json(n.as_floating_point()->get());
      case toml::node_type::boolean: return Json(n.as_boolean()->get());
      default:
        fail("{}:{}:{}: {}: TOML dates and times are not identity values (quote the value to make it a string)", file,
             n.source().begin.line, n.source().begin.column, path);
    }
  }

  // Members in file order, so the first unknown key reported is the first one written.
  Json table(const toml::table& t, const std::string& path, std::size_t depth) const {
    std::vector<std::pair<const toml::key*, const toml::node*>> members;
    for (const auto& [k, v] : t) members.emplace_back(&k, &v);
    std::stable_sort(members.begin(), members.end(), [](const auto& a, const auto& b) {
      const auto& sa = a.first->source().begin;
      const auto& sb = b.first->source().begin;
      return std::tie(sa.line, sa.column) < std::tie(sb.line, sb.column);
    });
    Json j = Json::object();
    for (const auto& [k, v] : members) {
      const std::string name(k->str());
      const std::string shown = escape(name, quote_limit);
      j[name] = node(*v, path.empty() ? shown : path + "." + shown, depth);
    }
    return j;
  }
};

}  // namespace

Json parse_toml(std::string_view text, const std::string& path) {
  const std::string name = display_name(path);
  try {
    const toml::table t = toml::parse(text, name);
    return Converter{name}.table(t, "", 1);
  } catch (const toml::parse_error& e) {
    // The description may quote the input: escaped and truncated.
    fail("{}:{}:{}: invalid TOML: {}", name, e.source().begin.line, e.source().begin.column,
         escape(e.description(), 2 * quote_limit + 60));
  }
}

}  // namespace kvkey_tool
