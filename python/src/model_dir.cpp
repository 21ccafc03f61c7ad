// SPDX-License-Identifier: Apache-2.0
// kvkey.Identity.from_model_dir and Model.positional_fingerprint: the
// binding of kvkey/model_dir.hpp (docs/python.md).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <kvkey/identity.hpp>
#include <kvkey/model_dir.hpp>

#include <optional>
#include <string>
#include <utility>

namespace py = pybind11;

namespace {

kvkey::KvDtype dtype_from_py(const py::handle& v) {
  if (py::isinstance<py::str>(v)) {
    const std::string name = v.cast<std::string>();
    if (const auto d = kvkey::kv_dtype_from_string(name)) return *d;
    throw kvkey::identity_error("kv.dtype", "unknown dtype '" + name + "'");
  }
  return v.cast<kvkey::KvDtype>();
}

std::string path_of(const py::handle& p) { return py::str(py::module_::import("os").attr("fspath")(p)); }

}  // namespace

void bind_model_dir(py::module_& m) {
  // kvkey.Identity is the binding's own wrapper class (module.cpp): the result
  // is built through its constructor from the registered part types.
  py::object identity = m.attr("Identity");
  identity.attr("from_model_dir") = py::staticmethod(py::cpp_function(
      [](const py::object& path, const std::string& tenant, const py::object& kv_dtype, std::uint32_t block_size,
         const std::string& layout, std::uint32_t tp_size, std::uint32_t tp_rank, const py::object& adapter_dir,
         const std::optional<std::string>& revision, const std::optional<std::string>& name,
         const std::optional<std::string>& adapter_name, std::uint64_t weights_epoch, const py::object& overrides,
         bool verify) {
        kvkey::Identity id;
        id.tenant = tenant;
        id.kv.dtype = dtype_from_py(kv_dtype);
        id.kv.block_size = block_size;
        id.kv.layout = layout;
        id.shard.tp_size = tp_size;
        id.shard.tp_rank = tp_rank;
        id.model.weights_epoch = weights_epoch;
        kvkey::ModelDirOptions mo;
        mo.revision = revision;
        mo.name = name;
        mo.hashing.verify = verify;
        if (!overrides.is_none()) {
          const std::string text = py::str(py::module_::import("json").attr("dumps")(overrides, py::arg("allow_nan") = false));
          mo.overrides = nlohmann::json::parse(text);
        }
        kvkey::AdapterDirOptions ao;
        ao.name = adapter_name;
        ao.hashing.verify = verify;
        const std::string model_path = path_of(path);
        const std::optional<std::string> adapter_path =
            adapter_dir.is_none() ? std::nullopt : std::optional<std::string>(path_of(adapter_dir));
        {
          py::gil_scoped_release release;
          kvkey::read_model_dir(model_path, mo).apply(id);
          if (adapter_path) id.adapter = kvkey::read_adapter_dir(*adapter_path, ao);
        }
        (void)kvkey::validated(id);
        return py::module_::import("kvkey._kvkey")
            .attr("Identity")(py::arg("tenant") = id.tenant, py::arg("model") = py::cast(id.model),
                              py::arg("kv") = py::cast(id.kv), py::arg("shard") = py::cast(id.shard),
                              py::arg("adapter") = id.adapter ? py::cast(*id.adapter) : py::none());
      },
      py::arg("path"), py::kw_only(), py::arg("tenant"), py::arg("kv_dtype"), py::arg("block_size"),
      py::arg("layout"), py::arg("tp_size") = 1, py::arg("tp_rank") = 0, py::arg("adapter_dir") = py::none(),
      py::arg("revision") = py::none(), py::arg("name") = py::none(), py::arg("adapter_name") = py::none(),
      py::arg("weights_epoch") = 0, py::arg("overrides") = py::none(), py::arg("verify") = false,
      "The identity of a model directory (plain, a Hugging Face cache repo or snapshot) as an engine loads it: "
      "geometry from config.json (after `overrides`, a dict applied like vLLM's --hf-overrides), name and revision "
      "from the cache, weights, positional and adapter fingerprints. InputError / IoError name what is wrong; "
      "IdentityError names an invalid field.", py::name("from_model_dir")));
}
