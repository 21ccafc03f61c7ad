// SPDX-License-Identifier: Apache-2.0
// What the binding's translation units share: the Python Identity
// (PyIdentity), Verdict (PyVerdict) and KeyNamespace (Namespace) types, and
// the bind_* function each file defines. module.cpp calls them in order
// (a class must exist before another file adds to it or casts to it).
#ifndef KVKEY_PYTHON_BINDING_HPP
#define KVKEY_PYTHON_BINDING_HPP

#include <pybind11/pybind11.h>

#include <kvkey/any_key_namespace.hpp>
#include <kvkey/kvkey.hpp>

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "convert.hpp"
#include "fields.hpp"

namespace kvkey_python {

// ---- digests as bytes ----------------------------------------------------------------

inline py::list to_list(const std::vector<kvkey::Digest>& ds) {
  py::list out(ds.size());
  for (std::size_t i = 0; i < ds.size(); ++i) out[i] = to_bytes(ds[i]);
  return out;
}

// ---- reprs: constructor calls, strings quoted and escaped by Python's repr ------------------

inline std::string identity_repr(const kvkey::Identity& id) { return part_repr(id); }

// ---- the Python Identity ------------------------------------------------------------------

// kvkey::Identity with its adapter held by a shared_ptr, so that a Python
// reference to `identity.adapter` stays valid (detached) when the identity's
// adapter is reset or replaced. The other parts are plain members; references
// to them keep the identity alive (reference_internal).
struct PyIdentity {
  kvkey::Identity id;  // id.adapter is always empty: the adapter lives in `adapter`
  std::shared_ptr<kvkey::Adapter> adapter;
  // The policy of the identity file it was read from (Identity.from_json /
  // from_file): KeyNamespace(identity) takes it unless told otherwise.
  std::optional<kvkey::Policy> file_policy;

  PyIdentity() = default;
  explicit PyIdentity(kvkey::Identity v) : id(std::move(v)) {
    if (id.adapter) adapter = std::make_shared<kvkey::Adapter>(std::move(*id.adapter));
    id.adapter.reset();
  }
  PyIdentity(const PyIdentity& o)
      : id(o.id),
        adapter(o.adapter ? std::make_shared<kvkey::Adapter>(*o.adapter) : nullptr),
        file_policy(o.file_policy) {}
  PyIdentity(PyIdentity&&) = default;
  PyIdentity& operator=(const PyIdentity&) = delete;
  PyIdentity& operator=(PyIdentity&&) = delete;
  ~PyIdentity() = default;

  kvkey::Identity value() const {
    kvkey::Identity v = id;
    if (adapter) v.adapter = *adapter;
    return v;
  }
};

// The Python KeyNamespace: plain or keyed, chosen at run time (kvkey/any_key_namespace.hpp).
using Namespace = kvkey::AnyKeyNamespace;

struct PyVerdict {
  kvkey::Verdict v;
  bool ok() const { return v.ok(); }
  std::string reason() const { return std::string(kvkey::to_string(v.reason)); }
  std::string field() const { return std::string(v.field); }
};

// Each defined in the file of its name (bind_<area>.cpp); module.cpp calls them.
void bind_identity(py::module_& m);       // Model, Quant, Kv, Shard, Adapter, Identity, KvDtype
void bind_namespace(py::module_& m);      // KeyNamespace and what its methods return
void bind_value_types(py::module_& m);    // OpenedValue, dtype_itemsize, dtype_bits, kv_dtype_from_engine
void bind_connector(py::module_& m);      // the private _Connector (kvkey.connector)
void bind_model_dir(py::module_& m);      // Identity.from_model_dir
void bind_identity_file(py::module_& m);  // Identity.from_json, Identity.from_file
void bind_metrics(py::module_& m);        // Metrics
void bind_lmdeploy(py::module_& m);       // kvkey.compat.lmdeploy

}  // namespace kvkey_python

#endif  // KVKEY_PYTHON_BINDING_HPP
