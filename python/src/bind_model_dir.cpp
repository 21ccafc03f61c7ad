// SPDX-License-Identifier: Apache-2.0
// kvkey.Identity.from_model_dir and Model.positional_fingerprint: the
// binding of kvkey/model_dir.hpp (docs/python.md).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <kvkey/identity.hpp>
#include <kvkey/model_dir.hpp>

#include "binding.hpp"
#include "convert.hpp"
#include "bind_value.hpp"

#include <cmath>
#include <cstddef>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace py = pybind11;
using namespace kvkey_python;  // NOLINT(google-build-using-namespace): the binding's own helpers

namespace {

std::optional<std::string> to_optional_text(const py::handle& obj, const std::string& field) {
  if (obj.is_none()) return std::nullopt;
  return to_text(obj, field);
}

// Walks overrides without recursion before json.dumps sees them: a float that
// is not finite (which JSON cannot hold; 1e400 is inf in Python) and nesting
// deeper than the library's limit are InputErrors naming the key path, as the
// library's parser names them in a file.
void check_overrides(const py::handle& root) {
  struct Item {
    py::handle obj;  // borrowed: its container, and so root, keeps it alive
    std::string path;
    std::size_t depth;
  };
  std::vector<Item> todo{{root, "", 0}};
  const auto where = [](const std::string& path) { return "overrides: " + (path.empty() ? "(top level)" : path); };
  while (!todo.empty()) {
    const Item item = todo.back();
    todo.pop_back();
    if (PyFloat_Check(item.obj.ptr())) {
      const double d = PyFloat_AsDouble(item.obj.ptr());
      if (std::isnan(d)) throw kvkey::input_error(where(item.path) + ": not a number (NaN)");
      if (std::isinf(d)) throw kvkey::input_error(where(item.path) + ": number out of range");
      continue;
    }
    const bool dict = PyDict_Check(item.obj.ptr());
    if (!dict && !PyList_Check(item.obj.ptr()) && !PyTuple_Check(item.obj.ptr())) continue;
    if (item.depth >= kvkey::max_config_depth) {
      throw kvkey::input_error(where(item.path) + ": nested deeper than " + std::to_string(kvkey::max_config_depth) +
                               " levels");
    }
    if (dict) {
      for (const auto& [key, value] : py::reinterpret_borrow<py::dict>(item.obj)) {
        const std::string name = std::string(py::str(key)).substr(0, 64);
        todo.push_back({value, item.path.empty() ? name : item.path + "." + name, item.depth + 1});
      }
    } else {
      std::size_t i = 0;
      for (const auto& value : item.obj) {
        todo.push_back({value, item.path + "[" + std::to_string(i++) + "]", item.depth + 1});
      }
    }
  }
}

// overrides (a dict) as JSON, through the library's parser (a number beyond
// double, deep nesting: InputErrors naming `overrides` and the key). What
// json.dumps refuses as a value (a cycle) is an InputError too; other types
// stay a TypeError.
nlohmann::json overrides_json(const py::object& overrides) {
  check_overrides(overrides);
  std::string text;
  try {
    text = py::str(py::module_::import("json").attr("dumps")(overrides, py::arg("allow_nan") = false));
  } catch (py::error_already_set& e) {
    if (!e.matches(PyExc_ValueError) && !e.matches(PyExc_RecursionError)) throw;
    throw kvkey::input_error("overrides: " + std::string(py::str(e.value())));
  }
  return kvkey::parse_json_text(text, "overrides");
}

}  // namespace

void kvkey_python::bind_model_dir(py::module_& m) {
  // kvkey.Identity is the binding's own wrapper class (module.cpp): the result
  // is built through its constructor from the registered part types.
  py::object identity = m.attr("Identity");
  identity.attr("from_model_dir") = py::staticmethod(py::cpp_function(
      [](const py::object& path, const py::object& tenant, const py::object& kv_dtype, const py::object& block_size,
         const py::object& layout, const py::object& tp_size, const py::object& tp_rank, const py::object& pp_size,
         const py::object& pp_rank, const py::object& adapter_dir, const py::object& revision, const py::object& name,
         const py::object& adapter_name, const py::object& weights_epoch, const py::object& overrides,
         const py::object& verify_files, const py::object& single_tenant, const py::object& quant,
         const py::object& quant_scale_dtype, const py::object& gpu_arch) {
        // Every argument through the binding's checked conversions (convert.hpp), then the library's assembly.
        kvkey::DeploymentParams p;
        if (to_bool(single_tenant, "single_tenant")) p.policy = kvkey::single_tenant;
        if (tenant.is_none() && p.policy.tenant != kvkey::TenantPolicy::single_tenant) {
          throw kvkey::input_error("tenant",
                                   "from_model_dir: tenant is required (or single_tenant=True for a "
                                   "store no one else shares)");
        }
        p.tenant = tenant.is_none() ? std::string() : to_text(tenant, "tenant");
        // kvkey's names and every engine spelling kv_dtype_from_engine accepts ("fp8", "torch.bfloat16", ...).
        try {
          if (!is_bool(kv_dtype) && PyLong_Check(kv_dtype.ptr()) != 0) {
            // lmdeploy's quant_policy: the dtype and its layout (with quant_scale_dtype)
            p.quant_policy = to_uint<std::uint32_t>(kv_dtype, "kv_dtype");
            (void)kvkey::kv_dtype_from_quant_policy(*p.quant_policy);  // 4 or 8
          } else {
            p.kv_dtype = py::isinstance<kvkey::KvDtype>(kv_dtype)
                             ? kv_dtype.cast<kvkey::KvDtype>()
                             : engine_dtype(kv_dtype, "kv_dtype", engine_platform(gpu_arch));
          }
        } catch (const kvkey::input_error& e) {
          throw kvkey::input_error("kv_dtype", e.detail());  // named as the argument
        }
        if (!quant.is_none()) p.quant = to_instance<kvkey::Quant>(quant, "quant");
        if (!quant_scale_dtype.is_none()) p.quant_scale_dtype = engine_dtype(quant_scale_dtype, "quant_scale_dtype");
        p.block_size = to_uint<std::uint32_t>(block_size, "block_size");
        p.layout = to_text(layout, "layout");
        p.shard.tp_size = to_uint<std::uint32_t>(tp_size, "tp_size");
        p.shard.tp_rank = to_uint<std::uint32_t>(tp_rank, "tp_rank");
        p.shard.pp_size = to_uint<std::uint32_t>(pp_size, "pp_size");
        p.shard.pp_rank = to_uint<std::uint32_t>(pp_rank, "pp_rank");
        p.weights_epoch = to_uint<std::uint64_t>(weights_epoch, "weights_epoch");
        p.verify = to_bool(verify_files, "verify");
        p.revision = to_optional_text(revision, "revision");
        p.name = to_optional_text(name, "name");
        p.adapter_name = to_optional_text(adapter_name, "adapter_name");
        if (!adapter_dir.is_none()) p.adapter_dir = to_path(adapter_dir, "adapter_dir");
        if (!overrides.is_none()) p.overrides = overrides_json(overrides);
        const std::string model_path = to_path(path, "path");
        kvkey::Identity id;
        {
          py::gil_scoped_release release;
          id = kvkey::identity_from_model_dir(model_path, p).identity;
        }
        return py::module_::import("kvkey._kvkey")
            .attr("Identity")(py::arg("tenant") = id.tenant, py::arg("model") = py::cast(id.model),
                              py::arg("kv") = py::cast(id.kv), py::arg("shard") = py::cast(id.shard),
                              py::arg("adapter") = id.adapter ? py::cast(*id.adapter) : py::none());
      },
      py::arg("path"), py::kw_only(), py::arg("tenant") = py::none(), py::arg("kv_dtype"), py::arg("block_size"),
      py::arg("layout"), py::arg("tp_size") = 1, py::arg("tp_rank") = 0, py::arg("pp_size") = 1, py::arg("pp_rank") = 0,
      py::arg("adapter_dir") = py::none(), py::arg("revision") = py::none(), py::arg("name") = py::none(),
      py::arg("adapter_name") = py::none(), py::arg("weights_epoch") = 0, py::arg("overrides") = py::none(),
      py::arg("verify") = false, py::arg("single_tenant") = false, py::arg("quant") = py::none(),
      py::arg("quant_scale_dtype") = py::none(), py::arg("gpu_arch") = py::none(),
      "The identity of a model directory (plain, a Hugging Face cache repo or snapshot) as an engine loads it: "
      "geometry from config.json (after `overrides`, a dict applied like vLLM's --hf-overrides), name and revision "
      "from the cache, weights, positional and adapter fingerprints. kv_dtype: any name kv_dtype_from_engine "
      "accepts ('fp8', 'torch.bfloat16', a torch dtype, ...; gpu_arch: the ROCm gcnArchName, as "
      "kv_dtype_from_engine), or lmdeploy's quant_policy 4 / 8 (int4 / int8 with lmdeploy's layout: one scale and "
      "zero point per token and KV head in quant_scale_dtype, the model's dtype). An integer dtype ('int8', ...) "
      "needs quant=kvkey.Quant(...), its layout: without it InputError (kv.quant). single_tenant=True: a store no one "
      "else shares (tenant "
      "then stays unset; pass single_tenant=True to KeyNamespace too). InputError / IoError name what is wrong; "
      "IdentityError names an invalid field.",
      py::name("from_model_dir")));
}
