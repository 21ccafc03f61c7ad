// SPDX-License-Identifier: Apache-2.0
// kvkey.Identity.from_json and kvkey.Identity.from_file: the binding of
// kvkey/identity_file.hpp (docs/python.md), the identity file an engine and
// its router both read.
#include <pybind11/pybind11.h>

#include <kvkey/identity.hpp>
#include <kvkey/identity_file.hpp>

#include "binding.hpp"
#include "convert.hpp"

#include <string>

namespace py = pybind11;
using namespace kvkey_python;  // NOLINT(google-build-using-namespace): the binding's own helpers

namespace {

py::object to_python(const kvkey::Identity& id) {
  return py::module_::import("kvkey._kvkey")
      .attr("Identity")(py::arg("tenant") = id.tenant, py::arg("model") = py::cast(id.model),
                        py::arg("kv") = py::cast(id.kv), py::arg("shard") = py::cast(id.shard),
                        py::arg("adapter") = id.adapter ? py::cast(*id.adapter) : py::none());
}

// The identity read(), run without the GIL (it may read files), as a kvkey.Identity.
template <class Read>
py::object read_without_gil(const Read& read) {
  kvkey::IdentityFile f;
  {
    py::gil_scoped_release release;
    f = read();
  }
  py::object out = to_python(f.identity);
  out.cast<PyIdentity&>().file_policy = f.policy;  // kept, as every reader of identity files keeps it
  return out;
}

}  // namespace

void kvkey_python::bind_identity_file(py::module_& m) {
  py::object identity = m.attr("Identity");
  identity.attr("from_json") = py::staticmethod(py::cpp_function(
      [](const py::object& text) {
        std::string bytes;
        if (py::isinstance<py::bytes>(text)) {
          bytes = text.cast<std::string>();
        } else {
          bytes = to_text(text, "text");  // a str: its UTF-8 (lone surrogates are refused)
        }
        return read_without_gil([&bytes] { return kvkey::parse_identity_file(bytes); });
      },
      py::arg("text"),
      "The identity of an identity file's JSON text (str or bytes), as `kvkey init` writes it. InputError names "
      "the field (`identity_file` when the text is not an identity file's JSON); the identity is not validated. "
      "`*_file` keys are relative to the working directory. The file's `policy` (single_tenant, payload_check) "
      "stays with the identity: KeyNamespace(identity) applies it unless given single_tenant= or payload_check=.",
      py::name("from_json")));
  identity.attr("from_file") = py::staticmethod(py::cpp_function(
      [](const py::object& path) {
        const std::string p = to_path(path, "path");
        return read_without_gil([&p] { return kvkey::load_identity_file(p); });
      },
      py::arg("path"),
      "The identity of the identity file at path (at most 1 MiB; `*_file` keys relative to its directory). "
      "InputError names the field, IoError an unreadable file. The file's `policy` stays with the identity, as "
      "from_json.",
      py::name("from_file")));
}
