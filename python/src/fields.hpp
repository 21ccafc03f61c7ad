// The identity's Python classes (Model, Quant, Kv, Shard, Adapter and the
// members of Identity) derived from the library's field table, kvkey::Fields:
// their constructors, properties, reprs and the type stub's text. A member
// added to the table appears here without an edit.
#ifndef KVKEY_PYTHON_FIELDS_HPP
#define KVKEY_PYTHON_FIELDS_HPP

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <kvkey/identity.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "convert.hpp"

namespace kvkey_python {

template <class T>
inline constexpr bool is_optional_v = false;
template <class T>
inline constexpr bool is_optional_v<std::optional<T>> = true;

// ---- one member's value: to Python, from Python (checked), as a repr ------------------

inline py::bytes to_bytes(const kvkey::Digest& d) {
  return py::bytes(reinterpret_cast<const char*>(d.data()), d.size());
}

template <class T>
py::object to_py(const T& v) {
  if constexpr (std::is_same_v<T, std::string>) {
    return to_py_text(v);
  } else if constexpr (std::is_same_v<T, kvkey::Digest>) {
    return to_bytes(v);
  } else if constexpr (std::is_same_v<T, std::optional<kvkey::Digest>>) {
    return v ? py::object(to_bytes(*v)) : py::object(py::none());
  } else {
    return py::cast(v);  // integers, bool, KvDtype (and std::optional<KvDtype>)
  }
}

template <class T>
T from_py(const py::handle& obj, const std::string& field) {
  if constexpr (std::is_same_v<T, std::string>) {
    return to_text(obj, field);
  } else if constexpr (std::is_same_v<T, bool>) {
    return to_bool(obj, field);
  } else if constexpr (std::is_same_v<T, kvkey::KvDtype>) {
    return to_dtype(obj, field);
  } else if constexpr (std::is_same_v<T, std::optional<kvkey::KvDtype>>) {
    return to_optional_dtype(obj, field);
  } else if constexpr (std::is_same_v<T, kvkey::Digest>) {
    return to_digest(obj, field);
  } else if constexpr (std::is_same_v<T, std::optional<kvkey::Digest>>) {
    return to_optional_digest(obj, field);
  } else if constexpr (kvkey::is_identity_part_v<T>) {
    return to_instance<T>(obj, field);
  } else if constexpr (is_optional_v<T>) {  // std::optional<Adapter>
    if (obj.is_none()) return std::nullopt;
    return to_instance<typename T::value_type>(obj, field);
  } else {
    static_assert(std::is_unsigned_v<T>, "a member type the binding does not convert");
    return to_uint<T>(obj, field);
  }
}

template <class P>
std::string part_repr(const P& p);

inline std::string digest_repr(const kvkey::Digest& d) { return "bytes.fromhex('" + d.hex() + "')"; }
inline std::string bool_repr(bool b) { return b ? "True" : "False"; }

template <class T>
std::string repr_of(const T& v) {
  if constexpr (std::is_same_v<T, std::string>) {
    return kvkey_python::quoted(v);
  } else if constexpr (std::is_same_v<T, bool>) {
    return bool_repr(v);
  } else if constexpr (std::is_same_v<T, kvkey::KvDtype>) {
    return "KvDtype." + std::string(kvkey::to_string(v));
  } else if constexpr (std::is_same_v<T, kvkey::Digest>) {
    return digest_repr(v);
  } else if constexpr (kvkey::is_identity_part_v<T>) {
    return part_repr(v);
  } else if constexpr (std::is_unsigned_v<T>) {
    return std::to_string(v);
  } else {
    return v ? repr_of(*v) : std::string("None");  // std::optional
  }
}

/// "Model(name='m', revision='r', ...)", "Adapter('lora', bytes.fromhex('...'))":
/// the constructor call, every member in table order.
template <class P>
std::string part_repr(const P& p) {
  std::string out = std::string(kvkey::Fields<P>::name) + "(";
  bool first = true;
  kvkey::for_each_field<P>([&](const auto& info) {
    if (!first) out += ", ";
    first = false;
    if (!kvkey::Fields<P>::positional) out.append(info.key).append("=");
    out += repr_of(p.*(info.member));
  });
  return out + ")";
}

// ---- construction from (args, kwargs) ----------------------------------------------------------

/// P(...) from Python arguments: keyword arguments named as the members (any
/// subset; the others keep the C++ defaults), or, for a positional part (the
/// adapter), every member in table order, positionally or by keyword.
template <class P>
P make_part(const py::args& args, const py::kwargs& kwargs) {
  constexpr bool positional = kvkey::Fields<P>::positional;
  const std::string cls(kvkey::Fields<P>::name);
  constexpr std::size_t n = std::tuple_size_v<std::decay_t<decltype(kvkey::Fields<P>::members)>>;
  if (!positional && !args.empty()) throw py::type_error(cls + "() takes keyword arguments only");
  if (args.size() > n) throw py::type_error(cls + "() takes at most " + std::to_string(n) + " arguments");
  P p{};
  std::size_t index = 0;
  std::size_t used = 0;
  kvkey::for_each_field<P>([&](const auto& info) {
    using T = typename std::decay_t<decltype(info)>::type;
    const std::string key(info.key);
    const bool by_keyword = kwargs.contains(key.c_str());
    if (index < args.size() && by_keyword) throw py::type_error(cls + "() got multiple values for " + key);
    if (index < args.size()) {
      p.*(info.member) = from_py<T>(args[index], std::string(info.path));
    } else if (by_keyword) {
      p.*(info.member) = from_py<T>(kwargs[key.c_str()], std::string(info.path));
      ++used;
    } else if (positional) {
      throw py::type_error(cls + "() missing required argument: '" + key + "'");
    }
    ++index;
  });
  if (used != kwargs.size()) {
    for (const auto& item : kwargs) {
      const std::string key = py::str(item.first);
      bool known = false;
      kvkey::for_each_field<P>([&](const auto& info) { known = known || info.key == key; });
      if (!known) throw py::type_error(cls + "() got an unexpected keyword argument '" + key + "'");
    }
  }
  return p;
}

// ---- properties -----------------------------------------------------------------------------

/// A property per member of P on cls, read and assigned through `part(self)`
/// (the P inside the bound object). Members that are parts themselves are live
/// references that keep the owner alive; assignment copies. skip: a key bound
/// by hand (the identity's adapter).
template <class P, class Cls, class Access>
void def_part_properties(Cls& cls, Access part, std::string_view skip = {}) {
  using Self = typename Cls::type;
  kvkey::for_each_field<P>([&](const auto& info) {
    using T = typename std::decay_t<decltype(info)>::type;
    if (info.key == skip) return;
    const std::string key(info.key);
    const std::string path(info.path);
    const auto member = info.member;
    const auto set = [part, member, path](Self& self, const py::object& v) {
      part(self).*member = from_py<T>(v, path);
    };
    if constexpr (kvkey::is_identity_part_v<T>) {
      cls.def_property(
          key.c_str(), [part, member](Self& self) -> T& { return part(self).*member; }, set,
          py::return_value_policy::reference_internal);
    } else {
      cls.def_property(
          key.c_str(), [part, member](Self& self) { return to_py(part(self).*member); }, set);
    }
  });
}

// ---- the type stub --------------------------------------------------------------------------

// (attribute type, parameter type) of a member in the stub.
template <class T>
std::pair<std::string, std::string> stub_types() {
  if constexpr (std::is_same_v<T, std::string>) {
    return {"str", "str"};
  } else if constexpr (std::is_same_v<T, bool>) {
    return {"bool", "bool"};
  } else if constexpr (std::is_same_v<T, kvkey::KvDtype>) {
    return {"KvDtype", "_DtypeLike"};
  } else if constexpr (std::is_same_v<T, kvkey::Digest>) {
    return {"bytes", "_BytesLike"};
  } else if constexpr (kvkey::is_identity_part_v<T>) {
    const std::string name(kvkey::Fields<T>::name);
    return {name, name};
  } else if constexpr (std::is_unsigned_v<T>) {
    return {"int", "SupportsIndex"};
  } else {  // std::optional
    const auto [attr, param] = stub_types<typename T::value_type>();
    return {"Optional[" + attr + "]", "Optional[" + param + "]"};
  }
}

// The default a stub shows for a member's C++ default value.
template <class T>
std::string stub_default(const T& v) {
  if constexpr (std::is_same_v<T, std::string>) {
    return "\"" + v + "\"";
  } else if constexpr (std::is_same_v<T, bool>) {
    return bool_repr(v);
  } else if constexpr (std::is_unsigned_v<T>) {
    return std::to_string(v);
  } else if constexpr (is_optional_v<T>) {
    return v ? "..." : "None";
  } else {
    return "...";
  }
}

/// The stub's text for the part P: the class line, one annotated attribute per
/// member and the constructor (python/kvkey/__init__.pyi holds it between
/// "generated" markers; python/tests/test_stubs.py compares).
template <class P>
std::string stub_class(const std::vector<std::string>& extra_lines = {}) {
  constexpr bool positional = kvkey::Fields<P>::positional;
  const std::string name(kvkey::Fields<P>::name);
  std::string out = "class " + name + ":\n";
  std::string params;
  const P defaults{};
  kvkey::for_each_field<P>([&](const auto& info) {
    using T = typename std::decay_t<decltype(info)>::type;
    const auto [attr, param] = stub_types<T>();
    out.append("    ").append(info.key).append(": ").append(attr).append("\n");
    params.append(",\n                 ").append(info.key).append(": ").append(param);
    if (!positional) params.append(" = ").append(stub_default(defaults.*(info.member)));
  });
  out += "    def __init__(self" + std::string(positional ? "" : ", *") + params + ") -> None: ...\n";
  for (const std::string& line : extra_lines) out += "    " + line + "\n";
  return out;
}

}  // namespace kvkey_python

#endif  // KVKEY_PYTHON_FIELDS_HPP
