// SPDX-License-Identifier: Apache-2.0
// kvkey.Identity, its parts (Model, Quant, Kv, Shard, Adapter) and KvDtype:
// the binding of kvkey/identity.hpp, constructors, properties and reprs from
// the field table (fields.hpp).
#include <pybind11/operators.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <kvkey/identity.hpp>

#include <memory>
#include <string>
#include <vector>

#include "binding.hpp"
#include "convert.hpp"
#include "fields.hpp"

namespace kvkey_python {

namespace {

// a == b (want true) or a != b (want false); NotImplemented for another type, as Python expects.
py::object identity_equal(const PyIdentity& a, const py::object& b, bool want) {
  if (!py::isinstance<PyIdentity>(b)) return py::reinterpret_borrow<py::object>(Py_NotImplemented);
  return py::bool_((a.value() == b.cast<const PyIdentity&>().value()) == want);
}

// ==, !=, copy.copy, copy.deepcopy and repr for a value class.
template <class Cls, class T, class Repr>
void value_methods(Cls& cls, Repr repr) {
  cls.def(py::self == py::self)   // NOLINT(misc-redundant-expression)
      .def(py::self != py::self)  // NOLINT(misc-redundant-expression)
      .def("__copy__", [](const T& v) { return T(v); })
      .def(
          "__deepcopy__", [](const T& v, const py::object&) { return T(v); }, py::arg("memo"))
      .def("__repr__", repr);
}

// A part class: constructor, properties, value methods (==, copies, repr), all from the field table.
template <class P, class Cls>
void bind_part(Cls& cls) {
  cls.def(py::init([](const py::args& args, const py::kwargs& kwargs) { return make_part<P>(args, kwargs); }));
  def_part_properties<P>(cls, [](P& p) -> P& { return p; });
  value_methods<Cls, P>(cls, &part_repr<P>);
}

}  // namespace

void bind_identity(py::module_& m) {
  py::enum_<kvkey::KvDtype> dtype_enum(m, "KvDtype",
                                       "Element type of the stored KV (codes are part of the byte format).");
  dtype_enum.value("unset", kvkey::KvDtype::unset);
  for (const kvkey::KvDtype d : kvkey::all_dtypes()) dtype_enum.value(std::string(kvkey::to_string(d)).c_str(), d);
  m.def(
      "kv_dtype_from_string", [](const py::object& s) { return to_dtype(py::str(to_text(s, "name")), "name"); },
      py::arg("name"), "Parses 'fp16', 'fp8_e4m3', ...; an unknown name (and 'unset') raises InputError.");

  // The parts: constructors, properties and reprs from the field table (fields.hpp).
  py::class_<kvkey::Model> model(m, "Model", "The model's weights lineage.");
  py::class_<kvkey::Quant> quant(m, "Quant", "How KV values are quantized.");
  py::class_<kvkey::Kv> kv(m, "Kv", "What one stored KV object's bytes are.");
  py::class_<kvkey::Shard> shard(m, "Shard", "Where this process sits in the tensor/pipeline-parallel grid.");
  py::class_<kvkey::Adapter, std::shared_ptr<kvkey::Adapter>> adapter(
      m, "Adapter", "A LoRA (or other) adapter: its name and its weights' fingerprint.");
  bind_part<kvkey::Model>(model);
  bind_part<kvkey::Quant>(quant);
  bind_part<kvkey::Kv>(kv);
  bind_part<kvkey::Shard>(shard);
  bind_part<kvkey::Adapter>(adapter);

  py::class_<PyIdentity> identity(m, "Identity",
                                  "Everything that changes the meaning or the ownership of stored KV bytes. "
                                  "Plain data: assign members in place, then build a KeyNamespace, which validates "
                                  "it.");
  identity.def(py::init([](const py::args& args, const py::kwargs& kwargs) {
    return PyIdentity(make_part<kvkey::Identity>(args, kwargs));
  }));
  // The adapter is held apart (PyIdentity), so it is bound by hand below.
  def_part_properties<kvkey::Identity>(
      identity, [](PyIdentity& id) -> kvkey::Identity& { return id.id; }, "adapter");
  identity.def_property(
      "adapter", [](const PyIdentity& id) { return id.adapter; },
      [](PyIdentity& id, const py::object& v) {
        id.adapter =
            v.is_none() ? nullptr : std::make_shared<kvkey::Adapter>(to_instance<kvkey::Adapter>(v, "adapter"));
      },
      "Adapter or None: a live reference while attached; assignment copies");
  identity
      .def(
          "copy", [](const PyIdentity& id) { return PyIdentity(id); }, "An independent copy.")
      .def(
          "validated",
          [](const PyIdentity& id, const py::object& single) {
            return PyIdentity(kvkey::validated(
                id.value(), to_bool(single, "single_tenant") ? kvkey::single_tenant : kvkey::Policy{}));
          },
          py::kw_only(), py::arg("single_tenant") = false,
          "Checks every field (raises IdentityError naming the first bad one) and returns the identity as encoded.")
      .def("__eq__", [](const PyIdentity& a, const py::object& b) { return identity_equal(a, b, true); })
      .def("__ne__", [](const PyIdentity& a, const py::object& b) { return identity_equal(a, b, false); })
      .def("__copy__", [](const PyIdentity& id) { return PyIdentity(id); })
      .def(
          "__deepcopy__", [](const PyIdentity& id, const py::object&) { return PyIdentity(id); }, py::arg("memo"))
      .def("__repr__", [](const PyIdentity& id) { return identity_repr(id.value()); });
  identity.attr("__hash__") = py::none();

  // The stub's text for the classes above (python/kvkey/__init__.pyi; python/tests/test_stubs.py compares).
  m.def("_identity_stub", [] {
    const auto copies = [](const std::string& cls) {
      return std::vector<std::string>{"def __copy__(self) -> " + cls + ": ...",
                                      "def __deepcopy__(self, memo: Any) -> " + cls + ": ..."};
    };
    return stub_class<kvkey::Model>(copies("Model")) + "\n" + stub_class<kvkey::Quant>(copies("Quant")) + "\n" +
           stub_class<kvkey::Kv>(copies("Kv")) + "\n" + stub_class<kvkey::Shard>(copies("Shard")) + "\n" +
           stub_class<kvkey::Adapter>(copies("Adapter")) + "\n" + stub_class<kvkey::Identity>();
  });
}

}  // namespace kvkey_python
