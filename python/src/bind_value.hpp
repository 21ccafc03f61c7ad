// Stored values and block geometry in the binding (docs/python.md, "Stored
// values" and "Block geometry"): KeyNamespace.seal_value, open_value,
// open_values and payload_size, the OpenedValue class, and the module
// functions dtype_itemsize, dtype_bits and kv_dtype_from_engine.
//
// bind_values<Ns, VerdictT>(m) adds them once the module's KeyNamespace (the
// class of Ns) and Verdict (VerdictT, built from a kvkey::Verdict) exist. Ns
// needs visit(f), calling f with the kvkey::KeyNamespace<Hash> it holds.
#ifndef KVKEY_PYTHON_VALUE_HPP
#define KVKEY_PYTHON_VALUE_HPP

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
kvkey::KvDtype engine_dtype(const py::handle& obj, const std::string& field);

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

// value.cpp: registers OpenedValue and the module functions.
void bind_value_types(py::module_& m);
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

template <class Ns, class VerdictT>
void bind_values(py::module_& m) {
  bind_value_types(m);
  auto cls = py::reinterpret_borrow<py::class_<Ns>>(m.attr("KeyNamespace"));
  cls.def(
         "seal_value",
         [](const Ns& ns, const py::object& block_hash, const py::object& payload) {
           return ns.visit([&](const auto& n) { return seal_value_bytes(n, block_hash, payload); });
         },
         py::arg("block_hash"), py::arg("payload"),
         "One store value: the envelope_size-byte header, then the payload's bytes (docs/format.md, \"Stored "
         "values\"). payload: the KV bytes (any bytes-like object or numpy array, read in place with the GIL "
         "released), or a list of them (per-layer K and V; the value holds their concatenation).")
      .def(
          "open_value",
          [](const Ns& ns, const py::object& value, const py::object& block_hash) {
            const kvkey::Digest block = to_digest(block_hash, "block_hash");
            const HeldValue held(value, "value");
            kvkey::OpenedValue opened;
            {
              py::gil_scoped_release release;
              opened =
                  ns.visit([&](const auto& n) { return n.open_value(held.bytes.data(), held.bytes.size(), block); });
            }
            py::object verdict = py::cast(VerdictT{opened.verdict});
            return opened_value(held, std::move(verdict), opened);
          },
          py::arg("value"), py::arg("block_hash"),
          "Verifies a stored value (header + payload) for block_hash, with the GIL released. Returns an OpenedValue: "
          ".verdict, and .payload, a read-only memoryview of the verified bytes inside `value` (zero-copy for a "
          "contiguous value; None unless ok). Never raises for bad value bytes.")
      .def(
          "open_values",
          [](const Ns& ns, const py::object& values, const py::object& block_hashes) {
            const std::vector<kvkey::Digest> blocks = to_digests(block_hashes, "block_hashes");
            std::deque<HeldValue> held;  // stable addresses
            for_each_item(values, "values", "a list of bytes-like values", [&](const py::handle& item, std::size_t i) {
              held.emplace_back(item, indexed("values", i));
            });
            if (held.size() != blocks.size()) {
              throw_input_error("values has " + std::to_string(held.size()) + " items and block_hashes " +
                                std::to_string(blocks.size()) + ": give one block hash per value");
            }
            std::vector<kvkey::OpenedValue> opened(held.size());
            {
              py::gil_scoped_release release;  // once for the whole batch
              ns.visit([&](const auto& n) {
                for (std::size_t i = 0; i < held.size(); ++i) {
                  opened[i] = n.open_value(held[i].bytes.data(), held[i].bytes.size(), blocks[i]);
                }
              });
            }
            py::list out(held.size());
            for (std::size_t i = 0; i < held.size(); ++i) {
              out[i] = py::cast(opened_value(held[i], py::cast(VerdictT{opened[i].verdict}), opened[i]));
            }
            return out;
          },
          py::arg("values"), py::arg("block_hashes"),
          "[open_value(v, h) for v, h in zip(values, block_hashes)], verified with the GIL released once. The lists "
          "must have equal lengths (InputError otherwise).")
      .def_property_readonly(
          "payload_size",
          [](const Ns& ns) -> py::object {
            const auto size = ns.visit([](const auto& n) { return n.payload_size(); });
            return size ? py::object(py::int_(*size)) : py::object(py::none());
          },
          "One block's KV bytes in this rank's slice: dense 2 x layers x heads x head_dim x block_size x itemsize, "
          "MLA layers x head_dim x block_size x itemsize (4-bit types packed two per byte); None when the identity "
          "has a quantization scheme (the scales' layout is engine-specific).");
}

}  // namespace kvkey_python

#endif  // KVKEY_PYTHON_VALUE_HPP
