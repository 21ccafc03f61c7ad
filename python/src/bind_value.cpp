// SPDX-License-Identifier: Apache-2.0
// kvkey.OpenedValue and the block-geometry functions of the binding
// (kvkey/geometry.hpp; docs/python.md). The KeyNamespace methods are in bind_namespace.cpp.
#include "bind_value.hpp"
#include "binding.hpp"

#include <pybind11/pybind11.h>

#include <kvkey/geometry.hpp>

#include <cstdint>
#include <string>
#include <utility>

namespace kvkey_python {

namespace {

// A dtype argument of dtype_itemsize / dtype_bits: a KvDtype, kvkey's name for
// one, or an engine's name (kv_dtype_from_engine).
kvkey::KvDtype to_any_dtype(const py::handle& obj, const std::string& field) {
  if (PyUnicode_Check(obj.ptr())) {
    const std::string s = to_text(obj, field);
    if (const auto d = kvkey::kv_dtype_from_string(s)) return *d;
    return kvkey::kv_dtype_from_engine(s);
  }
  return to_dtype(obj, field);
}

}  // namespace

kvkey::EnginePlatform engine_platform(const py::handle& gpu_arch) {
  kvkey::EnginePlatform p;
  if (!gpu_arch.is_none()) p.gpu_arch = to_text(gpu_arch, "gpu_arch");
  return p;
}

kvkey::KvDtype engine_dtype(const py::handle& obj, const std::string& field, const kvkey::EnginePlatform& platform) {
  if (PyUnicode_Check(obj.ptr())) return kvkey::kv_dtype_from_engine(to_text(obj, field), platform);
  const std::string type = type_name(obj);
  if (!is_bool(obj) &&
      (PyLong_Check(obj.ptr()) != 0 || type.rfind("numpy.int", 0) == 0 || type.rfind("numpy.uint", 0) == 0)) {
    return kvkey::kv_dtype_from_quant_policy(to_uint<std::uint32_t>(obj, "quant_policy"));
  }
  if (PyType_Check(obj.ptr()) != 0 && std::string(py::str(obj.attr("__module__"))) == "numpy") {
    return kvkey::kv_dtype_from_engine(std::string(py::str(py::module_::import("numpy").attr("dtype")(obj))));
  }
  const std::string module = py::str(py::type::handle_of(obj).attr("__module__"));
  if (module == "torch" || module.rfind("numpy", 0) == 0) {
    return kvkey::kv_dtype_from_engine(std::string(py::str(obj)));
  }
  throw_type_error(field, "a str, an lmdeploy quant_policy int, or a torch/numpy dtype", obj);
}

PyOpenedValue opened_value(const HeldValue& value, py::object verdict, const kvkey::OpenedValue& opened) {
  PyOpenedValue out{std::move(verdict), py::none()};
  if (!opened.ok()) return out;
  if (opened.plaintext) {  // a confidential value: the decrypted payload, never the stored bytes
    const kvkey::Bytes& p = *opened.plaintext;
    out.payload = py::memoryview(py::bytes(reinterpret_cast<const char*>(p.data()), p.size())).attr("toreadonly")();
    return out;
  }
  const auto begin =
      static_cast<Py_ssize_t>(static_cast<const std::uint8_t*>(opened.payload.data) - value.bytes.data());
  const auto end = begin + static_cast<Py_ssize_t>(opened.payload.size);
  py::object bytes_view;
  if (value.bytes.in_place()) {  // a view of the caller's object, as unsigned bytes
    bytes_view = py::reinterpret_steal<py::object>(PyMemoryView_FromObject(value.owner.ptr()));
    if (!bytes_view) throw py::error_already_set();
    if (py::cast<std::string>(bytes_view.attr("format")) != "B" || py::cast<int>(bytes_view.attr("ndim")) != 1) {
      bytes_view = bytes_view.attr("cast")("B");
    }
  } else {  // the value was copied to be read (not C-contiguous): view a bytes of the copy
    bytes_view = py::memoryview(py::bytes(reinterpret_cast<const char*>(value.bytes.data()), value.bytes.size()));
  }
  out.payload = bytes_view[py::slice(begin, end, 1)].attr("toreadonly")();
  return out;
}

void bind_value_types(py::module_& m) {
  py::class_<PyOpenedValue>(m, "OpenedValue", "What KeyNamespace.open_value found in a stored value.")
      .def_readonly("verdict", &PyOpenedValue::verdict, "the Verdict of the header and payload")
      .def_readonly("payload", &PyOpenedValue::payload,
                    "a read-only memoryview of the verified payload inside the value (it keeps the value alive); "
                    "None unless the verdict is ok")
      .def_property_readonly("ok", [](const PyOpenedValue& o) { return py::bool_(o.verdict.attr("ok")); })
      .def("__bool__", [](const PyOpenedValue& o) { return py::bool_(o.verdict.attr("ok")); })
      .def("__repr__", [](const PyOpenedValue& o) {
        const std::string payload = o.payload.is_none() ? "None" : "<" + std::to_string(py::len(o.payload)) + " bytes>";
        return "OpenedValue(verdict=" + std::string(py::repr(o.verdict)) + ", payload=" + payload + ")";
      });

  m.def(
      "dtype_itemsize", [](const py::object& d) { return kvkey::dtype_itemsize(to_any_dtype(d, "dtype")); },
      py::arg("dtype"),
      "Bytes of one element: 4, 2 or 1. dtype: a KvDtype or a name (kvkey's or an engine's). A 4-bit type "
      "(int4, uint4, fp4_e2m1) has no whole-byte size: InputError (use dtype_bits).");
  m.def(
      "dtype_bits", [](const py::object& d) { return kvkey::dtype_bits(to_any_dtype(d, "dtype")); }, py::arg("dtype"),
      "Bits of one element: 32, 16, 8 or 4. dtype: a KvDtype or a name (kvkey's or an engine's).");
  m.def(
      "kv_dtype_from_engine",
      [](const py::handle& name, const py::handle& gpu_arch) {
        return engine_dtype(name, "name", engine_platform(gpu_arch));
      },
      py::arg("name"), py::kw_only(), py::arg("gpu_arch") = py::none(),
      "The KvDtype of an engine's dtype name: torch ('bfloat16', 'torch.float16', 'half', 'float8_e4m3fn', "
      "'float8_e4m3fnuz', ...), vLLM / SGLang --kv-cache-dtype ('fp8', 'fp8_e4m3', 'fp8_e5m2', 'bf16', ...), "
      "kvkey's own names, a torch or numpy dtype object, or lmdeploy's quant_policy (8: int8, 4: int4). "
      "gpu_arch: the GPU's ROCm gcnArchName (torch.cuda.get_device_properties(0).gcnArchName) where the engine "
      "runs on ROCm; vLLM's 'fp8' is fp8_e4m3fnuz on gfx94x and fp8_e4m3 (e4m3fn) elsewhere. 'auto' raises "
      "InputError: resolve it to the model's dtype first. An unknown name raises InputError listing the accepted "
      "ones.");
}

}  // namespace kvkey_python
