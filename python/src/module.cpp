// The kvkey Python binding (module kvkey._kvkey; the package kvkey re-exports
// it). Uses only the public headers. Digests are 32-byte `bytes` in Python.
// Every argument goes through a helper of convert.hpp (checked and named in the
// error) before it reaches C++; pybind11's own casts see only py::object.
#include <pybind11/operators.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <kvkey/compat/lmdeploy.hpp>
#include <kvkey/any_key_namespace.hpp>
#include <kvkey/kvkey.hpp>
#include <kvkey/testing.hpp>

#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "batch.hpp"
#include "connector.hpp"
#include "convert.hpp"
#include "fields.hpp"
#include "messages.hpp"
#include "tokens.hpp"
#include "value.hpp"

namespace py = pybind11;
namespace lm = kvkey::compat::lmdeploy;
using namespace kvkey_python;  // NOLINT(google-build-using-namespace): the binding's own helpers

void bind_model_dir(py::module_& m);      // model_dir.cpp
void bind_metrics(py::module_& m);        // metrics.cpp
void bind_identity_file(py::module_& m);  // identity_file.cpp

namespace {

// ---- exceptions ------------------------------------------------------------------

struct Exceptions {
  py::object error, identity_error, input_error, io_error, crypto_error;
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

// ---- digests as bytes ----------------------------------------------------------------

py::list to_list(const std::vector<kvkey::Digest>& ds) {
  py::list out(ds.size());
  for (std::size_t i = 0; i < ds.size(); ++i) out[i] = to_bytes(ds[i]);
  return out;
}

// ---- reprs: constructor calls, strings quoted and escaped by Python's repr ------------------

std::string identity_repr(const kvkey::Identity& id) { return part_repr(id); }

std::string slice_repr(const kvkey::Slice& s) {
  return "Slice(kv_heads=[" + std::to_string(s.kv_head_begin) + ", " + std::to_string(s.kv_head_end) + "), layers=[" +
         std::to_string(s.layer_begin) + ", " + std::to_string(s.layer_end) + "))";
}

// ---- the Python Identity ------------------------------------------------------------------

// kvkey::Identity with its adapter held by a shared_ptr, so that a Python
// reference to `identity.adapter` stays valid (detached) when the identity's
// adapter is reset or replaced. The other parts are plain members; references
// to them keep the identity alive (reference_internal).
struct PyIdentity {
  kvkey::Identity id;  // id.adapter is always empty: the adapter lives in `adapter`
  std::shared_ptr<kvkey::Adapter> adapter;

  PyIdentity() = default;
  explicit PyIdentity(kvkey::Identity v) : id(std::move(v)) {
    if (id.adapter) adapter = std::make_shared<kvkey::Adapter>(std::move(*id.adapter));
    id.adapter.reset();
  }
  PyIdentity(const PyIdentity& o)
      : id(o.id), adapter(o.adapter ? std::make_shared<kvkey::Adapter>(*o.adapter) : nullptr) {}
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

// ---- identity parts -------------------------------------------------------------------------

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

// ---- hash options -------------------------------------------------------------------------

kvkey::HashOptions to_options(const py::handle& salt, const py::handle& extras) {
  kvkey::HashOptions opt;
  if (!salt.is_none()) opt.salt = to_byte_string(salt, "salt");
  if (extras.is_none()) return opt;
  for_each_item(
      extras, "extras", "a list of (token_begin, token_end, key) tuples", [&](const py::handle& item, std::size_t i) {
        const std::string field = indexed("extras", i);
        if (PyUnicode_Check(item.ptr()) || !PySequence_Check(item.ptr())) {
          throw_type_error(field, "a (token_begin, token_end, key) tuple", item);
        }
        const Py_ssize_t n = PySequence_Size(item.ptr());
        if (n != 3) {
          PyErr_Clear();
          throw py::type_error(field + " must be a (token_begin, token_end, key) tuple, got " +
                               (n < 0 ? std::string("a sequence without a length") : std::to_string(n) + " items"));
        }
        const auto t = py::reinterpret_borrow<py::sequence>(item);
        kvkey::ExtraKey e;
        e.token_begin = to_uint<std::uint64_t>(t[0], field + ".token_begin");
        e.token_end = to_uint<std::uint64_t>(t[1], field + ".token_end");
        e.key = to_byte_string(t[2], field + ".key");
        opt.extras.push_back(std::move(e));
      });
  return opt;
}

// ---- the namespace ------------------------------------------------------------------------

// The Python KeyNamespace: plain or keyed, chosen at run time (kvkey/any_key_namespace.hpp).
using Namespace = kvkey::AnyKeyNamespace;

std::vector<kvkey::Digest> extend(const Namespace& ns, std::vector<kvkey::Digest> hashes, const Tokens& tokens,
                                  const kvkey::HashOptions& opt) {
  py::gil_scoped_release release;  // tokens are borrowed or copied: no Python object is touched
  tokens.visit([&](const auto* data, std::size_t n) {
    using T = std::remove_const_t<std::remove_pointer_t<decltype(data)>>;
    if constexpr (std::is_same_v<T, std::uint64_t>) {
      throw kvkey::input_error("internal: uint64 tokens are not accepted by KeyNamespace");
    } else {
      ns.extend_block_hashes(hashes, data, n, opt);
    }
  });
  return hashes;
}

// previous + the hashes of the remaining full blocks; the ids of the blocks
// `previous` covers are not read (an extension costs O(new blocks)).
py::list extend_py(const Namespace& ns, const py::handle& previous, const py::handle& tokens, const py::handle& salt,
                   const py::handle& extras) {
  std::vector<kvkey::Digest> hashes = to_digests(previous, "previous");
  const kvkey::HashOptions opt = to_options(salt, extras);
  const Tokens t(tokens, false, hashes.size() * ns.block_size());
  return to_list(extend(ns, std::move(hashes), t, opt));
}

// One request's block hashes, extended as its tokens arrive: keeps the ids
// and the hashes so far, so an append costs only its new blocks. Not
// thread-safe (like a list being appended to); the GIL is held throughout.
class Chain {
 public:
  Chain(py::object ns, kvkey::HashOptions opt)
      : owner_(std::move(ns)), ns_(&owner_.cast<const Namespace&>()), opt_(std::move(opt)) {}

  // Appends the new ids; returns the hashes of the blocks they completed. On an
  // error nothing is appended.
  py::list append(const py::handle& tokens) {
    const Tokens t(tokens, false);
    const std::size_t old_tokens = tokens_.size();
    const std::size_t old_hashes = hashes_.size();
    t.visit([&](const auto* data, std::size_t n) {
      using T = std::remove_const_t<std::remove_pointer_t<decltype(data)>>;
      if constexpr (std::is_same_v<T, std::uint64_t>) {
        throw kvkey::input_error("internal: uint64 tokens are not accepted by KeyNamespace");
      } else {
        if (old_tokens + n > tokens_.capacity()) tokens_.reserve(std::max(old_tokens + n, 2 * tokens_.capacity()));
        for (std::size_t i = 0; i < n; ++i) tokens_.push_back(static_cast<std::int64_t>(data[i]));
      }
    });
    try {
      ns_->extend_block_hashes(hashes_, tokens_.data(), tokens_.size(), opt_);
    } catch (...) {
      tokens_.resize(old_tokens);
      hashes_.resize(old_hashes);
      throw;
    }
    py::list out(hashes_.size() - old_hashes);
    for (std::size_t i = old_hashes; i < hashes_.size(); ++i) out[i - old_hashes] = to_bytes(hashes_[i]);
    return out;
  }

  py::list hashes() const { return to_list(hashes_); }
  std::size_t size() const noexcept { return tokens_.size(); }
  std::size_t blocks() const noexcept { return hashes_.size(); }

 private:
  py::object owner_;  // keeps the namespace alive
  const Namespace* ns_;
  kvkey::HashOptions opt_;
  std::vector<std::int64_t> tokens_;
  std::vector<kvkey::Digest> hashes_;
};

struct PyVerdict {
  kvkey::Verdict v;
  bool ok() const { return v.ok(); }
  std::string reason() const { return std::string(kvkey::to_string(v.reason)); }
  std::string field() const { return std::string(v.field); }
};

// One entry per (block, shard): True/False (numpy's bool too), the ints 0/1
// a store returns (redis-py's exists(), numpy integers) or a Verdict. Anything
// else is refused, so a miss can never count as a hit.
std::vector<bool> to_results(const py::handle& results) {
  std::vector<bool> out;
  for_each_item(results, "results", "a list of bools, 0/1 or Verdicts", [&](const py::handle& item, std::size_t i) {
    if (is_bool(item)) {
      out.push_back(PyObject_IsTrue(item.ptr()) == 1);
    } else if (py::isinstance<PyVerdict>(item)) {
      out.push_back(item.cast<const PyVerdict&>().ok());
    } else if (const int flag = zero_or_one(item); flag >= 0) {
      out.push_back(flag == 1);
    } else if (PyLong_Check(item.ptr()) != 0) {
      int overflow = 0;
      const long v = PyLong_AsLongAndOverflow(item.ptr(), &overflow);
      throw py::type_error(indexed("results", i) + " must be a bool, 0 or 1, or a Verdict, not the int " +
                           (overflow == 0 ? std::to_string(v) : std::string("beyond 64 bits")));
    } else {
      throw_type_error(indexed("results", i), "a bool, 0 or 1, or a Verdict", item);
    }
  });
  return out;
}

std::size_t to_max_tokens(const py::handle& max_tokens) {
  if (max_tokens.is_none()) return std::numeric_limits<std::size_t>::max();
  return to_uint<std::uint64_t>(max_tokens, "max_tokens");
}

// A header argument: any bytes-like object (strides included); verify never raises on its contents.
// An integer (is_integer: a Python int, a numpy integer scalar, anything else
// with __index__ that is not an array) is a payload size (size-only check);
// anything else is the payload's bytes.
kvkey::Verdict verify_header(const Namespace& ns, const py::handle& header, const py::handle& block_hash,
                             const py::handle& payload) {
  const kvkey::Digest block = to_digest(block_hash, "block_hash");
  const ByteString bytes(header, "header", ByteString::Str::refuse);
  if (is_integer(payload))
    return ns.verify(bytes.data(), bytes.size(), block, to_uint<std::uint64_t>(payload, "payload"));
  const ByteString kv(payload, "payload", ByteString::Str::refuse);
  py::gil_scoped_release release;  // both buffers are held; no Python object is touched
  return ns.verify(bytes.data(), bytes.size(), block, kvkey::Payload(kv.data(), kv.size()));
}

void bind_namespace(py::module_& m) {
  py::class_<kvkey::Slice>(m, "Slice", "The KV-head and layer range [begin, end) one rank holds.")
      .def_readonly("kv_head_begin", &kvkey::Slice::kv_head_begin)
      .def_readonly("kv_head_end", &kvkey::Slice::kv_head_end)
      .def_readonly("layer_begin", &kvkey::Slice::layer_begin)
      .def_readonly("layer_end", &kvkey::Slice::layer_end)
      .def(py::self == py::self)  // NOLINT(misc-redundant-expression)
      .def("__repr__", &slice_repr);

  py::class_<PyVerdict>(m, "Verdict", "The outcome of verifying a header; anything but ok means a miss.")
      .def_property_readonly("ok", &PyVerdict::ok)
      .def_property_readonly("reason", &PyVerdict::reason, "the C++ Reason enumerator's name, e.g. 'identity_mismatch'")
      .def_property_readonly("field", &PyVerdict::field, "where the difference is, e.g. 'kv.dtype'; '' when ok")
      .def("__bool__", &PyVerdict::ok)
      .def("__repr__", [](const PyVerdict& v) {
        return "Verdict(ok=" + bool_repr(v.ok()) + ", reason=" + quoted(v.reason()) + ", field=" + quoted(v.field()) +
               ")";
      });

  py::class_<kvkey::ReusablePrefix>(m, "ReusablePrefix", "How much of a request's prefix the store can serve.")
      .def_readonly("blocks", &kvkey::ReusablePrefix::blocks)
      .def_readonly("tokens", &kvkey::ReusablePrefix::tokens)
      .def(py::self == py::self)  // NOLINT(misc-redundant-expression)
      .def("__repr__", [](const kvkey::ReusablePrefix& p) {
        return "ReusablePrefix(blocks=" + std::to_string(p.blocks) + ", tokens=" + std::to_string(p.tokens) + ")";
      });

  m.def(
      "reusable_prefix",
      [](const py::object& results, const py::object& shards_per_block, const py::object& block_size,
         const py::object& max_tokens) {
        return kvkey::reusable_prefix(to_results(results), to_uint<std::uint64_t>(shards_per_block, "shards_per_block"),
                                      to_uint<std::uint32_t>(block_size, "block_size"), to_max_tokens(max_tokens));
      },
      py::arg("results"), py::arg("shards_per_block"), py::arg("block_size"), py::arg("max_tokens") = py::none(),
      "Counts the leading blocks every shard can serve. results: one bool or Verdict per (block, shard), "
      "block-major (anything else raises TypeError); counting stops at the first block any shard misses.");

  py::class_<kvkey::TenantSecret>(m, "TenantSecret",
                                  "A tenant's secret key for keyed namespaces: 32 to 256 bytes, held in C++ and "
                                  "wiped when freed; never printed.")
      .def(py::init([](const py::object& secret) {
             std::string bytes = ByteString(secret, "secret", ByteString::Str::refuse).str();
             return kvkey::TenantSecret(std::move(bytes));  // the temporary copy is wiped
           }),
           py::arg("secret"), "From raw bytes (bytes-like; at least 32). The caller's object is not wiped.")
      .def_static(
          "from_file", [](const py::object& path) { return kvkey::TenantSecret::from_file(to_path(path, "path")); },
          py::arg("path"), "From a file of hex text or raw bytes, mode 0600 or 0640 (IoError otherwise).")
      .def_static(
          "from_env", [](const py::object& name) { return kvkey::TenantSecret::from_env(to_text(name, "name")); },
          py::arg("name"), "From an environment variable holding hex or 'base64:' + base64.")
      .def("__len__", &kvkey::TenantSecret::size)
      .def("__repr__", [](const kvkey::TenantSecret&) { return std::string("TenantSecret(<hidden>)"); })
      .def("__reduce__", [](const kvkey::TenantSecret&) -> py::object {
        throw py::type_error("a TenantSecret cannot be pickled or copied");
      });

  py::class_<Chain>(m, "Chain", "One request's block hashes, extended as its tokens arrive (KeyNamespace.chain()).")
      .def("append", &Chain::append, py::arg("tokens"),
           "Appends the new token ids (list, tuple, sequence or 1-D integer buffer) and returns the hashes of the "
           "blocks they completed; a partial tail waits for the next append. On an error nothing is appended.")
      .def_property_readonly("hashes", &Chain::hashes, "every full block's hash so far (a new list)")
      .def("__len__", &Chain::size, "the number of token ids appended")
      .def("__repr__", [](const Chain& c) {
        return "Chain(tokens=" + std::to_string(c.size()) + ", blocks=" + std::to_string(c.blocks()) + ")";
      });

  py::class_<Namespace>(m, "KeyNamespace", "Keys, block hashes and envelopes of one deployment's rank.")
      .def(py::init([](const py::object& id, const py::object& single, const py::object& secret,
                       const py::object& payload_check) {
             const kvkey::Identity identity = to_instance<PyIdentity>(id, "identity").value();
             kvkey::Policy policy = to_bool(single, "single_tenant") ? kvkey::single_tenant : kvkey::Policy{};
             const std::string check = to_text(payload_check, "payload_check");
             if (check == "size_only") {
               policy.payload = kvkey::PayloadCheck::size_only;
             } else if (check != "required") {
               throw_input_error("payload_check must be 'required' or 'size_only', not " + quoted(check));
             }
             if (secret.is_none()) return Namespace(identity, policy);
             return Namespace(identity, to_instance<kvkey::TenantSecret>(secret, "secret"), policy);
           }),
           py::arg("identity"), py::kw_only(), py::arg("single_tenant") = false, py::arg("secret") = py::none(),
           py::arg("payload_check") = "required",
           "Validates the identity (IdentityError names the bad field). single_tenant=True: a store no one else "
           "shares; the tenant must then be empty. secret: a kvkey.TenantSecret keys every hash with "
           "HMAC-SHA-256 and authenticates payloads with Poly1305, as the C++ KeyNamespace<HmacSha256> "
           "(docs/security.md). payload_check='size_only': explicit opt-out of payload digests for callers that "
           "cannot see the bytes (then seal/verify take a payload size).")
      .def_property_readonly("keyed", &Namespace::keyed, "True when built with a TenantSecret")
      .def_property_readonly(
          "payload_check",
          [](const Namespace& ns) {
            return std::string(ns.policy().payload == kvkey::PayloadCheck::size_only ? "size_only" : "required");
          },
          "'required' or 'size_only', as given to the constructor")
      .def(
          "with_epoch",
          [](const Namespace& ns, const py::object& epoch) {
            return ns.with_epoch(to_uint<std::uint64_t>(epoch, "epoch"));
          },
          py::arg("epoch"),
          "This namespace under weights epoch `epoch`, identical in every other respect: identity, tenant secret "
          "(a keyed namespace stays keyed) and policy (single_tenant, payload_check). Switch every rank together.")
      .def(
          "for_rank",
          [](const Namespace& ns, const py::object& rank) {
            return ns.for_rank(to_uint<std::uint32_t>(rank, "tp_rank"));
          },
          py::arg("tp_rank"),
          "This deployment's namespace for tensor-parallel rank `tp_rank`: identical but for shard.tp_rank "
          "(tenant secret and policy kept). [ns.for_rank(r) for r in range(tp_size)] is what a multi-rank "
          "Connector takes. IdentityError when tp_rank >= shard.tp_size.")
      .def_property_readonly(
          "identity", [](const Namespace& ns) { return PyIdentity(ns.identity()); },
          "the validated identity as encoded (a copy)")
      .def_property_readonly(
          "single_tenant", [](const Namespace& ns) { return ns.policy().tenant == kvkey::TenantPolicy::single_tenant; })
      .def_property_readonly("slice", [](const Namespace& ns) { return ns.slice(); })
      .def_property_readonly("encoding",
                             [](const Namespace& ns) {
                               const auto& e = ns.encoding();
                               return py::bytes(reinterpret_cast<const char*>(e.data()), e.size());
                             })
      .def_property_readonly("root", [](const Namespace& ns) { return to_bytes(ns.root()); })
      .def_property_readonly("block_size", &Namespace::block_size)
      .def_property_readonly("key_prefix", &Namespace::key_prefix)
      .def_property_readonly("tenant_prefix", &Namespace::tenant_prefix)
      .def_property_readonly("secret_prefix", &Namespace::secret_prefix,
                             "keyed: 'kvk3/<tenant>/k<secret id>/', every key under this tenant secret; plain: "
                             "'kvk3/<tenant>/p/', every plain key of the tenant")
      .def_property_readonly(
          "secret_id",
          [](const Namespace& ns) -> py::object {
            const auto& id = ns.secret_id();
            return id ? py::object(py::str(id->hex())) : py::object(py::none());
          },
          "The tenant secret's public id (16 hex digits), or None in a plain namespace")
      .def(
          "block_hashes",
          [](const Namespace& ns, const py::object& tokens, const py::object& salt, const py::object& extras,
             const py::object& previous) { return extend_py(ns, previous, tokens, salt, extras); },
          py::arg("tokens"), py::kw_only(), py::arg("salt") = py::none(), py::arg("extras") = py::none(),
          py::arg("previous") = py::none(),
          "32-byte hashes (bytes) of every full block. tokens: list/sequence of ints or a 1-D int32/int64/uint32 "
          "buffer (numpy), read without per-token conversion. previous: hashes of the first blocks from an earlier "
          "call (incremental). The GIL is released while hashing.")
      .def(
          "extend_block_hashes",
          [](const Namespace& ns, const py::object& previous, const py::object& tokens, const py::object& salt,
             const py::object& extras) { return extend_py(ns, previous, tokens, salt, extras); },
          py::arg("previous"), py::arg("tokens"), py::kw_only(), py::arg("salt") = py::none(),
          py::arg("extras") = py::none(),
          "previous + the hashes of the remaining full blocks of tokens (the whole sequence so far).")
      .def(
          "block_hashes_batch",
          [](const Namespace& ns, const py::object& sequences, const py::object& threads) {
            const auto all = ns.visit([&](const auto& n) { return block_hashes_batch(n, sequences, threads); });
            py::list out(all.size());
            for (std::size_t r = 0; r < all.size(); ++r) out[r] = to_list(all[r]);
            return out;
          },
          py::arg("sequences"), py::kw_only(), py::arg("threads") = 0,
          "[block_hashes(s) for s in sequences], hashed by a pool of `threads` threads (0: one per core) with the "
          "GIL released. Each sequence is any tokens argument of block_hashes.")
      .def(
          "chain",
          [](const py::object& self, const py::object& salt, const py::object& extras) {
            return Chain(self, to_options(salt, extras));
          },
          py::kw_only(), py::arg("salt") = py::none(), py::arg("extras") = py::none(),
          "A kvkey.Chain for one request: append its tokens as they arrive; each append costs only the blocks it "
          "completes.")
      .def(
          "first_parent",
          [](const Namespace& ns, const py::object& salt) {
            return to_bytes(ns.first_parent(salt.is_none() ? std::string() : to_byte_string(salt, "salt")));
          },
          py::arg("salt") = py::none())
      .def(
          "object_hash",
          [](const Namespace& ns, const py::object& h) { return to_bytes(ns.object_hash(to_digest(h, "block_hash"))); },
          py::arg("block_hash"))
      .def(
          "store_key",
          [](const Namespace& ns, const py::object& h) { return ns.store_key(to_digest(h, "block_hash")); },
          py::arg("block_hash"), "\"kvk3/<tenant>/<p | k<secret id>>/<model>/e<epoch>/<64 hex>\"")
      .def(
          "seal",
          [](const Namespace& ns, const py::object& h, const py::object& payload) {
            const kvkey::Digest block = to_digest(h, "block_hash");
            if (is_integer(payload)) {  // size only: the policy must opt out
              const kvkey::Envelope e = ns.seal(block, to_uint<std::uint64_t>(payload, "payload"));
              return py::bytes(reinterpret_cast<const char*>(e.data()), e.size());
            }
            const ByteString bytes(payload, "payload", ByteString::Str::refuse);
            kvkey::Envelope e;
            {
              py::gil_scoped_release release;  // the buffer is held; no Python object is touched
              e = ns.seal(block, kvkey::Payload(bytes.data(), bytes.size()));
            }
            return py::bytes(reinterpret_cast<const char*>(e.data()), e.size());
          },
          py::arg("block_hash"), py::arg("payload"),
          "The envelope_size-byte header to store beside the KV bytes. payload: the KV bytes (any C-contiguous "
          "bytes-like object or numpy array, read in place with the GIL released); an int payload size only with "
          "payload_check='size_only'.")
      .def(
          "verify",
          [](const Namespace& ns, const py::object& header, const py::object& h, const py::object& payload) {
            return PyVerdict{verify_header(ns, header, h, payload)};
          },
          py::arg("header"), py::arg("block_hash"), py::arg("payload"),
          "Checks a header and the payload read with it (bytes-like or numpy, zero-copy when contiguous, GIL "
          "released); an int payload size checks everything but the bytes (never ok unless "
          "payload_check='size_only'). Never raises for bad header or payload bytes: returns a Verdict.")
      .def(
          "verify_header",
          [](const Namespace& ns, const py::object& header, const py::object& h) {
            const kvkey::Digest block = to_digest(h, "block_hash");
            const ByteString bytes(header, "header", ByteString::Str::refuse);
            return PyVerdict{ns.verify_header(bytes.data(), bytes.size(), block)};
          },
          py::arg("header"), py::arg("block_hash"),
          "Checks what a header alone shows (identity, namespace kind, block, integrity mode), for counting lookups "
          "only, never sufficient to serve a block: load verifies the payload. header: exactly envelope_size bytes "
          "(e.g. GETRANGE key 0 1023); any other length is malformed. Never raises for bad header bytes.")
      .def(
          "reusable_prefix",
          [](const Namespace& ns, const py::object& results, const py::object& shards_per_block,
             const py::object& max_tokens) {
            return ns.reusable_prefix(to_results(results), to_uint<std::uint64_t>(shards_per_block, "shards_per_block"),
                                      to_max_tokens(max_tokens));
          },
          py::arg("results"), py::arg("shards_per_block"), py::arg("max_tokens") = py::none())
      .def("__repr__", [](const Namespace& ns) {
        return "KeyNamespace(" + identity_repr(ns.identity()) +
               ", single_tenant=" + bool_repr(ns.policy().tenant == kvkey::TenantPolicy::single_tenant) +
               (ns.keyed() ? ", secret=TenantSecret(<hidden>)" : "") + ", key_prefix=" + quoted(ns.key_prefix()) + ")";
      });
}

// ---- kvkey.compat.lmdeploy -------------------------------------------------------------------

std::uint32_t u32(const py::handle& obj, const char* field) { return to_uint<std::uint32_t>(obj, field); }

// lookup_keys makes shard_keys keys per block: a bound far above any real
// tensor-parallel size keeps a wrong argument from allocating gigabytes.
constexpr std::uint32_t max_shard_keys = 4096;

// m.name(tp_size, num_kv_heads), both checked.
void def_tp_heads(py::module_& m, const char* name, std::uint32_t (*f)(std::uint32_t, std::uint32_t)) {
  m.def(
      name,
      [f](const py::object& tp_size, const py::object& heads) {
        return f(u32(tp_size, "tp_size"), u32(heads, "num_kv_heads"));
      },
      py::arg("tp_size"), py::arg("num_kv_heads"));
}

void bind_lmdeploy(py::module_& m) {
  m.doc() = "lmdeploy's legacy Mooncake store keys, bit for bit (recognise, enumerate, purge; never for new keys).";
  m.attr("BLOCK_HASH_SCHEMA") = py::bytes(lm::block_hash_schema.data(), lm::block_hash_schema.size());
  m.attr("DEFAULT_MODEL_NAME") = std::string(lm::default_model_name);

  m.def(
      "build_prefix_block_hashes",
      [](const py::object& token_ids, const py::object& block_size, const py::object& extra_identity,
         const py::object& previous_hashes) {
        const Tokens t(token_ids, true);
        const std::uint32_t bs = u32(block_size, "block_size");
        const std::string extra = to_byte_string(extra_identity, "extra_identity");
        std::vector<kvkey::Digest> hashes = to_digests(previous_hashes, "previous_hashes");
        {
          py::gil_scoped_release release;
          t.visit([&](const auto* data, std::size_t n) { lm::extend_block_hashes(hashes, data, n, bs, extra); });
        }
        return to_list(hashes);
      },
      py::arg("token_ids"), py::arg("block_size"), py::arg("extra_identity") = "",
      py::arg("previous_hashes") = py::none(),
      "lmdeploy's build_prefix_block_hashes: one 32-byte hash (bytes) per full block. extra_identity: str or bytes "
      "(the scheduler passes the adapter name or ''). previous_hashes: hashes of the first blocks (continuation).");

  m.def(
      "build_store_key",
      [](const py::object& cache_prefix, const py::object& model_name, const py::object& kv_head_rank,
         const py::object& block_hash) {
        return lm::store_key(to_text(cache_prefix, "cache_prefix"), to_text(model_name, "model_name"),
                             u32(kv_head_rank, "kv_head_rank"), to_digest(block_hash, "block_hash"));
      },
      py::arg("cache_prefix"), py::arg("model_name"), py::arg("kv_head_rank"), py::arg("block_hash"),
      "\"[<cache_prefix>@]<model_name>@tp_rank:<kv_head_rank>@group:0@<64 hex>\"");

  def_tp_heads(m, "kv_head_replica_num", &lm::kv_head_replica_num);
  m.def(
      "kv_head_rank",
      [](const py::object& tp_rank, const py::object& tp_size, const py::object& heads) {
        return lm::kv_head_rank(u32(tp_rank, "tp_rank"), u32(tp_size, "tp_size"), u32(heads, "num_kv_heads"));
      },
      py::arg("tp_rank"), py::arg("tp_size"), py::arg("num_kv_heads"));
  def_tp_heads(m, "shard_key_count", &lm::shard_key_count);
  m.def(
      "lookup_keys",
      [](const py::object& cache_prefix, const py::object& model_name, const py::object& shard_keys,
         const py::object& hashes) {
        const std::uint32_t shards = u32(shard_keys, "shard_keys");
        if (shards > max_shard_keys) {
          throw_input_error("shard_keys is " + std::to_string(shards) + ", at most " + std::to_string(max_shard_keys) +
                            " (one key per KV-head shard of a block)");
        }
        return lm::lookup_keys(to_text(cache_prefix, "cache_prefix"), to_text(model_name, "model_name"), shards,
                               to_digests(hashes, "block_hashes"));
      },
      py::arg("cache_prefix"), py::arg("model_name"), py::arg("shard_keys"), py::arg("block_hashes"),
      "The keys lmdeploy's lookup checks, block-major.");

  py::class_<lm::LegacyKey>(m, "LegacyKey", "A parsed legacy key.")
      .def_property_readonly("cache_prefix", [](const lm::LegacyKey& k) { return to_py_text(k.cache_prefix); })
      .def_property_readonly("model_name", [](const lm::LegacyKey& k) { return to_py_text(k.model_name); })
      .def_readonly("kv_head_rank", &lm::LegacyKey::kv_head_rank)
      .def_property_readonly("block_hash", [](const lm::LegacyKey& k) { return to_bytes(k.block_hash); })
      .def_readonly("ambiguous", &lm::LegacyKey::ambiguous)
      .def("__repr__", [](const lm::LegacyKey& k) {
        return "LegacyKey(cache_prefix=" + quoted(k.cache_prefix) + ", model_name=" + quoted(k.model_name) +
               ", kv_head_rank=" + std::to_string(k.kv_head_rank) + ", block_hash=" + k.block_hash.hex() +
               ", ambiguous=" + bool_repr(k.ambiguous) + ")";
      });
  m.def(
      "parse_key", [](const py::object& key) { return lm::parse_key(to_text(key, "key")); }, py::arg("key"),
      "LegacyKey or None. The prefix/model split of a head with '@' is ambiguous: model_name is taken after the "
      "last '@' and `ambiguous` is set.");
  m.def(
      "is_legacy_key", [](const py::object& key) { return lm::is_legacy_key(to_text(key, "key")); }, py::arg("key"));
  m.def(
      "is_legacy_key_of",
      [](const py::object& key, const py::object& prefix, const py::object& model) {
        return lm::is_legacy_key_of(to_text(key, "key"), to_text(prefix, "cache_prefix"), to_text(model, "model_name"));
      },
      py::arg("key"), py::arg("cache_prefix"), py::arg("model_name"));
  m.def(
      "purge_pattern",
      [](const py::object& prefix, const py::object& model) {
        return lm::purge_pattern(to_text(prefix, "cache_prefix"), to_text(model, "model_name"));
      },
      py::arg("cache_prefix"), py::arg("model_name"),
      "Anchored regex (ECMAScript and POSIX ERE) matching every legacy key of the pair; never a kvkey key.");
  m.def(
      "purge_glob",
      [](const py::object& prefix, const py::object& model) {
        return lm::purge_glob(to_text(prefix, "cache_prefix"), to_text(model, "model_name"));
      },
      py::arg("cache_prefix"), py::arg("model_name"),
      "Redis SCAN MATCH glob finding every legacy key of the pair (looser: filter with is_legacy_key_of).");
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
  // The class attributes hold for exceptions raised from Python too (the connector kit's).
  ex.identity_error.attr("id") = "kvkey.identity_error";
  ex.input_error.attr("id") = "kvkey.input_error";
  ex.io_error.attr("id") = "kvkey.io_error";
  ex.crypto_error.attr("id") = "kvkey.crypto_error";

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
  m.attr("store_key_tag") = std::string(kvkey::store_key_tag);
  m.attr("single_tenant_name") = std::string(kvkey::single_tenant_name);
  m.attr("__version__") = std::to_string(KVKEY_VERSION_MAJOR) + "." + std::to_string(KVKEY_VERSION_MINOR) + "." +
                          std::to_string(KVKEY_VERSION_PATCH);

  bind_identity(m);
  bind_namespace(m);
  bind_values<Namespace, PyVerdict>(m);     // value.hpp
  bind_connector<Namespace, PyVerdict>(m);  // connector.hpp
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
      [](const py::object& tenant, const py::object& secret_id) {
        const std::string hex = to_text(secret_id, "secret_id");
        const auto id = kvkey::SecretId::try_from_hex(hex);
        if (!id) throw kvkey::input_error("secret_id", "must be 16 hex digits (kvkey.secret_id(secret))");
        return kvkey::secret_key_prefix(to_text(tenant, "tenant"), *id);
      },
      py::arg("tenant"), py::arg("secret_id"),
      "'kvk3/<tenant>/k<secret_id>/': the prefix of every key sealed under one tenant secret (purge a retired "
      "secret's values with it; docs/operations.md, 'Rotating a tenant secret').");

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
