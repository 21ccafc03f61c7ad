// The kvkey Python binding (module kvkey._kvkey; the package kvkey re-exports
// it). Uses only the public headers. Digests are 32-byte `bytes` in Python.
// Every argument goes through a helper of convert.hpp (checked and named in the
// error) before it reaches C++; pybind11's own casts see only py::object.
#include <pybind11/operators.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <kvkey/kvkey.hpp>
#include <kvkey/testing.hpp>

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

#include "binding.hpp"
#include "convert.hpp"
#include "messages.hpp"

namespace py = pybind11;
using namespace kvkey_python;  // NOLINT(google-build-using-namespace): the binding's own helpers

namespace {

// ---- exceptions ------------------------------------------------------------------

struct Exceptions {
  py::object error, identity_error, input_error, io_error, crypto_error, scope_error;
};

Exceptions& exceptions() {
  static Exceptions* e = new Exceptions();  // lives as long as the interpreter's module
  return *e;
}

// Raises cls(what() in Python's names) with the error's members as attributes (.id, .field).
void raise_as(const py::object& cls, const kvkey::error& err) {
  py::object exc = cls(python_message(err.what()));
  exc.attr("id") = err.id();
  exc.attr("field") = err.field();
  PyErr_SetObject(cls.ptr(), exc.ptr());
}

}  // namespace

PYBIND11_MODULE(_kvkey, m) {
  m.doc() = "kvkey: lineage-aware keys and fail-closed envelopes for shared KV-cache stores (compiled core).";

  Exceptions& ex = exceptions();
  const py::object value_error = py::reinterpret_borrow<py::object>(PyExc_ValueError);
  const py::object os_error = py::reinterpret_borrow<py::object>(PyExc_OSError);
  const py::object type = py::reinterpret_borrow<py::object>(reinterpret_cast<PyObject*>(&PyType_Type));
  const auto make = [&](const char* name, py::tuple bases, const char* doc) {
    py::dict ns;
    ns["__module__"] = "kvkey";
    ns["__doc__"] = doc;
    py::object cls = type(name, bases, ns);
    m.attr(name) = cls;
    return cls;
  };
  ex.error = make("Error", py::make_tuple(value_error),
                  "Base of every kvkey exception (a ValueError); .id is the category (\"kvkey.input_error\", ...), "
                  ".field the offending field or argument (\"\" when none).");
  ex.error.attr("id") = "kvkey.error";
  ex.error.attr("field") = "";
  ex.identity_error = make("IdentityError", py::make_tuple(ex.error),
                           "An identity is invalid; .field is the dotted path of the offending field.");
  ex.input_error = make("InputError", py::make_tuple(ex.error), "A call argument is invalid.");
  ex.io_error = make("IoError", py::make_tuple(ex.error, os_error), "A file could not be read (also an OSError).");
  ex.crypto_error = make("CryptoError", py::make_tuple(ex.error), "OpenSSL reported a failure.");
  ex.scope_error = make("ScopeError", py::make_tuple(ex.error),
                        "A shared scope refused a call: .field 'scope.publishers' for a tenant that may not publish.");
  // The class attributes hold for exceptions raised from Python too (the connector kit's).
  ex.identity_error.attr("id") = "kvkey.identity_error";
  ex.input_error.attr("id") = "kvkey.input_error";
  ex.io_error.attr("id") = "kvkey.io_error";
  ex.crypto_error.attr("id") = "kvkey.crypto_error";
  ex.scope_error.attr("id") = "kvkey.scope_error";

  // The Python class follows the error's id(); every kvkey exception carries .id and .field.
  py::register_exception_translator([](std::exception_ptr p) {
    if (!p) return;
    try {
      std::rethrow_exception(p);
    } catch (const kvkey::error& err) {
      const Exceptions& e = exceptions();
      const std::pair<std::string_view, const py::object*> classes[] = {
          {"kvkey.identity_error", &e.identity_error},
          {"kvkey.input_error", &e.input_error},
          {"kvkey.io_error", &e.io_error},
          {"kvkey.crypto_error", &e.crypto_error},
          {"kvkey.scope_error", &e.scope_error},
      };
      const py::object* cls = &e.error;
      for (const auto& [id, c] : classes) {
        if (err.id() == id) cls = c;
      }
      raise_as(*cls, err);
    }
  });

  m.attr("envelope_size") = kvkey::envelope_size;
  m.attr("format_version") = kvkey::format_version;
  // The conformance kit's case table and report fields (kvkey/testing.hpp), which
  // kvkey.testing runs: one definition of the cases for both kits.
  m.def("_check_store_cases", [] {
    py::list out;
    for (const kvkey::testing::CaseSpec& c : kvkey::testing::cases()) {
      out.append(py::make_tuple(c.name, std::string(kvkey::testing::to_string(c.scenario)),
                                std::string(kvkey::testing::to_string(c.damage)), c.arg, c.field, c.keyed));
    }
    return out;
  });
  {
    py::list fields;
    for (const std::string_view f : kvkey::testing::report_fields) fields.append(std::string(f));
    m.attr("_check_store_report_fields") = py::tuple(fields);
  }
  {
    py::list fields;  // from the identity's field table (kvkey::Fields): one foreign case each
    for (const std::string& f : kvkey::testing::foreign_fields()) fields.append(f);
    m.attr("_check_store_foreign_fields") = py::tuple(fields);
  }
  m.attr("store_key_tag") = std::string(kvkey::store_key_tag);
  m.attr("single_tenant_name") = std::string(kvkey::single_tenant_name);
  m.attr("__version__") = std::to_string(KVKEY_VERSION_MAJOR) + "." + std::to_string(KVKEY_VERSION_MINOR) + "." +
                          std::to_string(KVKEY_VERSION_PATCH);

  bind_identity(m);
  bind_namespace(m);
  bind_value_types(m);
  bind_connector(m);
  bind_model_dir(m);
  bind_identity_file(m);
  bind_metrics(m);

  m.def(
      "fingerprint",
      [](const py::object& data) {
        const ByteString bytes(data, "data", ByteString::Str::utf8);
        return to_bytes(kvkey::fingerprint(bytes.view()));
      },
      py::arg("data"), "Plain SHA-256 (as sha256sum prints it) of bytes (or a str's UTF-8), as 32 bytes.");
  // The file is read without the GIL; the bytes object is made after.
  m.attr("fingerprint_file") = py::cpp_function(
      [](const py::object& path) {
        const std::string p = to_path(path, "path");
        kvkey::Digest d;
        {
          py::gil_scoped_release release;
          d = kvkey::fingerprint_file(p);
        }
        return to_bytes(d);
      },
      py::name("fingerprint_file"), py::scope(m), py::arg("path"),
      "SHA-256 of a file's contents, streamed; path: str, bytes or os.PathLike (no NUL byte); IoError (an "
      "OSError) when it cannot be read.");

  m.def(
      "secret_id", [](const kvkey::TenantSecret& secret) { return kvkey::secret_id(secret).hex(); }, py::arg("secret"),
      "A TenantSecret's public id, 16 hex digits: the first 8 bytes of HMAC-SHA-256(secret, 'I') "
      "(docs/format.md, 'Secret id'). Keyed store keys carry it after 'k'.");
  m.def(
      "secret_key_prefix",
      [](const py::object& tenant, const py::object& secret_id, const py::object& confidential) {
        const std::string hex = to_text(secret_id, "secret_id");
        const auto id = kvkey::SecretId::try_from_hex(hex);
        if (!id) throw kvkey::input_error("secret_id", "must be 16 hex digits (kvkey.secret_id(secret))");
        return kvkey::secret_key_prefix(to_text(tenant, "tenant"), *id, to_bool(confidential, "confidential"));
      },
      py::arg("tenant"), py::arg("secret_id"), py::kw_only(), py::arg("confidential") = false,
      "'kvk4/<tenant>/k<secret_id>/' ('c<secret_id>' with confidential=True): the prefix of every key sealed under "
      "one tenant secret (purge a retired secret's values with both; docs/operations.md, 'Rotating a tenant "
      "secret').");
  m.attr("previous_store_key_tag") = std::string(kvkey::previous_store_key_tag);

  m.def(
      "glob_escape",
      [](const py::object& s) -> py::object {
        if (PyUnicode_Check(s.ptr())) return py::str(kvkey::glob_escape(to_text(s, "s")));
        return py::bytes(kvkey::glob_escape(to_byte_string(s, "s")));  // bytes in, bytes out
      },
      py::arg("s"),
      "s (str, or bytes-like: then bytes are returned) as a literal inside a Redis glob (SCAN MATCH, KEYS): '*', "
      "'?', '[', ']' and '\\' get a backslash in front. glob_escape(ns.key_prefix) + '*' matches every key under "
      "the prefix.");

  m.def(
      "u64_projection", [](const py::object& d) { return kvkey::u64_projection(to_digest(d, "digest")); },
      py::arg("digest"),
      "The 64-bit projection of a block hash for indexes keyed on u64 (docs/format.md, section 11): its first 8 "
      "bytes read big-endian, so the value's 16 hex digits are the first 16 hex digits of the digest.");
  m.attr("store_error_kinds") = [] {
    py::tuple kinds(kvkey::store_error_kinds.size());
    for (std::size_t k = 0; k < kinds.size(); ++k) kinds[k] = py::str(std::string(kvkey::store_error_kinds[k]));
    return kinds;
  }();

  py::module_ compat = m.def_submodule("compat_lmdeploy");
  bind_lmdeploy(compat);
}
