// SPDX-License-Identifier: Apache-2.0
// Stored values and block geometry in the binding (docs/python.md, "Stored
// values" and "Block geometry"): KeyNamespace.seal_value, open_value,
// open_values and payload_size, the OpenedValue class, and the module
// functions dtype_itemsize, dtype_bits and kv_dtype_from_engine.
//
// The KeyNamespace methods that use them are bound in bind_namespace.cpp.
#ifndef KVKEY_PYTHON_BIND_VALUE_HPP
#define KVKEY_PYTHON_BIND_VALUE_HPP

#include <pybind11/pybind11.h>

#include <kvkey/kvkey.hpp>

#include <cstddef>
#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "convert.hpp"

namespace kvkey_python {

// kv_dtype_from_engine's argument: a name, lmdeploy's quant_policy (an int, a
// numpy integer too), or a torch / numpy dtype object (by its str():
// "torch.bfloat16", "float16"), or a numpy scalar type (np.float16). field
// names the argument in a TypeError.
kvkey::KvDtype engine_dtype(const py::handle& obj, const std::string& field,
                            const kvkey::EnginePlatform& platform = {});
/// The EnginePlatform of a gpu_arch argument: None (CUDA and others) or a ROCm gcnArchName str.
kvkey::EnginePlatform engine_platform(const py::handle& gpu_arch);

// kvkey.OpenedValue: what open_value found. `payload` is a read-only
// memoryview of the verified bytes inside the caller's value (None unless ok).
struct PyOpenedValue {
  py::object verdict;
  py::object payload;
};

// One value argument, opened: its buffer is held until destruction.
struct HeldValue {
  py::object owner;
  ByteString bytes;
  HeldValue(const py::handle& value, const std::string& field)
      : owner(py::reinterpret_borrow<py::object>(value)), bytes(value, field, ByteString::Str::refuse) {}
};

// The OpenedValue for a value whose open_value result is `opened` (made with the GIL held).
PyOpenedValue opened_value(const HeldValue& value, py::object verdict, const kvkey::OpenedValue& opened);
// block_hash, payload -> the value as bytes (the GIL released while sealing).
template <class Hash>
py::bytes seal_value_bytes(const kvkey::KeyNamespace<Hash>& ns, const py::handle& block_hash,
                           const py::handle& payload) {
  const kvkey::Digest block = to_digest(block_hash, "block_hash");
  // A list or tuple of buffers (per-layer K and V): the value holds their concatenation.
  std::deque<ByteString> held;
  std::vector<kvkey::ConstBuffer> parts;
  if (PyList_Check(payload.ptr()) || PyTuple_Check(payload.ptr())) {
    const py::sequence seq = py::reinterpret_borrow<py::sequence>(payload);
    for (std::size_t i = 0; i < seq.size(); ++i) {
      held.emplace_back(seq[i], "payload[" + std::to_string(i) + "]", ByteString::Str::refuse,
                        "bytes-like (the KV bytes)");
    }
  } else {
    held.emplace_back(payload, "payload", ByteString::Str::refuse, "bytes-like (the KV bytes), or a list of them");
  }
  for (const ByteString& b : held) parts.push_back({b.data(), b.size()});
  const kvkey::Payload p(parts.data(), parts.size());
  const std::size_t size = kvkey::value_size(p.size());
  auto out = py::reinterpret_steal<py::bytes>(PyBytes_FromStringAndSize(nullptr, static_cast<Py_ssize_t>(size)));
  if (!out) throw py::error_already_set();
  auto* dst = reinterpret_cast<std::uint8_t*>(PyBytes_AS_STRING(out.ptr()));
  {
    py::gil_scoped_release release;  // the buffers are held; no Python object is touched
    (void)ns.seal_value(block, p, dst, size);
  }
  return out;
}

}  // namespace kvkey_python

#endif  // KVKEY_PYTHON_BIND_VALUE_HPP
