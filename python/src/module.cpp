// The kvkey Python binding (module kvkey._kvkey; the package kvkey re-exports
// it). Uses only the public headers. Digests are 32-byte `bytes` in Python.
// Every argument goes through a helper of convert.hpp (checked and named in the
// error) before it reaches C++; pybind11's own casts see only py::object.
#include <pybind11/operators.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <kvkey/compat/lmdeploy.hpp>
#include <kvkey/kvkey.hpp>

#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "batch.hpp"
#include "convert.hpp"
#include "messages.hpp"
#include "tokens.hpp"
#include "value.hpp"

namespace py = pybind11;
namespace lm = kvkey::compat::lmdeploy;
using namespace kvkey_python;  // NOLINT(google-build-using-namespace): the binding's own helpers

void bind_model_dir(py::module_& m);  // model_dir.cpp
void bind_metrics(py::module_& m);    // metrics.cpp

namespace {

// ---- exceptions ------------------------------------------------------------------

struct Exceptions {
  py::object error, identity_error, input_error, io_error, crypto_error;
};

Exceptions& exceptions() {
  static Exceptions* e = new Exceptions();  // lives as long as the interpreter's module
  return *e;
}

// Raises cls(message in Python's names), with extra attributes, as the active Python exception.
void raise_as(const py::object& cls, const char* message, const char* field = nullptr) {
  py::object exc = cls(python_message(message));
  if (field != nullptr) exc.attr("field") = field;
  PyErr_SetObject(cls.ptr(), exc.ptr());
}

// ---- digests as bytes ----------------------------------------------------------------

py::bytes to_bytes(const kvkey::Digest& d) { return py::bytes(reinterpret_cast<const char*>(d.data()), d.size()); }

py::list to_list(const std::vector<kvkey::Digest>& ds) {
  py::list out(ds.size());
  for (std::size_t i = 0; i < ds.size(); ++i) out[i] = to_bytes(ds[i]);
  return out;
}

py::object from_optional_digest(const std::optional<kvkey::Digest>& d) {
  return d ? py::object(to_bytes(*d)) : py::object(py::none());
}

// ---- reprs: constructor calls, strings quoted and escaped by Python's repr ------------------

std::string digest_repr(const kvkey::Digest& d) { return "bytes.fromhex('" + d.hex() + "')"; }
std::string digest_repr(const std::optional<kvkey::Digest>& d) { return d ? digest_repr(*d) : "None"; }
std::string dtype_repr(kvkey::KvDtype d) { return "KvDtype." + std::string(kvkey::to_string(d)); }
std::string bool_repr(bool b) { return b ? "True" : "False"; }

std::string model_repr(const kvkey::Model& md) {
  return "Model(name=" + quoted(md.name) + ", revision=" + quoted(md.revision) +
         ", weights_epoch=" + std::to_string(md.weights_epoch) +
         ", weights_fingerprint=" + digest_repr(md.weights_fingerprint) +
         ", positional_fingerprint=" + digest_repr(md.positional_fingerprint) + ")";
}

std::string quant_repr(const kvkey::Quant& q) {
  return "Quant(scheme=" + quoted(q.scheme) + ", group_size=" + std::to_string(q.group_size) +
         ", scale_dtype=" + (q.scale_dtype ? dtype_repr(*q.scale_dtype) : "None") +
         ", zero_point=" + bool_repr(q.zero_point) + ", scales_fingerprint=" + digest_repr(q.scales_fingerprint) +
         ")";
}

std::string kv_repr(const kvkey::Kv& kv) {
  return "Kv(dtype=" + dtype_repr(kv.dtype) + ", quant=" + quant_repr(kv.quant) +
         ", block_size=" + std::to_string(kv.block_size) + ", num_layers=" + std::to_string(kv.num_layers) +
         ", num_kv_heads=" + std::to_string(kv.num_kv_heads) + ", head_dim=" + std::to_string(kv.head_dim) +
         ", layout=" + quoted(kv.layout) + ", mla=" + bool_repr(kv.mla) + ")";
}

std::string shard_repr(const kvkey::Shard& s) {
  return "Shard(tp_size=" + std::to_string(s.tp_size) + ", tp_rank=" + std::to_string(s.tp_rank) +
         ", pp_size=" + std::to_string(s.pp_size) + ", pp_rank=" + std::to_string(s.pp_rank) + ")";
}

std::string adapter_repr(const kvkey::Adapter& a) {
  return "Adapter(" + quoted(a.name) + ", " + digest_repr(a.weights_fingerprint) + ")";
}

std::string identity_repr(const kvkey::Identity& id) {
  return "Identity(tenant=" + quoted(id.tenant) + ", model=" + model_repr(id.model) + ", kv=" + kv_repr(id.kv) +
         ", shard=" + shard_repr(id.shard) + ", adapter=" + (id.adapter ? adapter_repr(*id.adapter) : "None") + ")";
}

std::string slice_repr(const kvkey::Slice& s) {
  return "Slice(kv_heads=[" + std::to_string(s.kv_head_begin) + ", " + std::to_string(s.kv_head_end) +
         "), layers=[" + std::to_string(s.layer_begin) + ", " + std::to_string(s.layer_end) + "))";
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

// ---- properties of the identity's parts ------------------------------------------------------

// A member as a property: read through `get`, assigned through the checked conversion `set(value, field)`.
template <class Cls, class C, class T, class Get, class Set>
void checked_property(Cls& cls, const char* name, T C::*member, const std::string& field, Get get, Set set,
                      const char* doc) {
  cls.def_property(
      name, [member, get](const C& c) { return get(c.*member); },
      [member, field, set](C& c, const py::object& v) { c.*member = set(v, field); }, doc);
}

template <class Cls, class C>
void text_property(Cls& cls, const char* name, std::string C::*member, const std::string& field) {
  checked_property(cls, name, member, field, [](const std::string& s) { return to_py_text(s); }, &to_text, "str");
}

template <class Cls, class C, class T>
void uint_property(Cls& cls, const char* name, T C::*member, const std::string& field) {
  checked_property(cls, name, member, field, [](T v) { return v; }, &to_uint<T>, "int");
}

template <class Cls, class C>
void bool_property(Cls& cls, const char* name, bool C::*member, const std::string& field) {
  checked_property(cls, name, member, field, [](bool v) { return v; }, &to_bool, "bool");
}

template <class Cls, class C>
void optional_digest_property(Cls& cls, const char* name, std::optional<kvkey::Digest> C::*member,
                              const std::string& field) {
  checked_property(cls, name, member, field, &from_optional_digest, &to_optional_digest, "32 bytes or None");
}

// A part held by value: the getter is a live reference (keeping the owner
// alive), the setter copies the assigned object in.
template <class Cls, class Owner, class Part>
void part_property(Cls& cls, const char* name, Part Owner::*member, const std::string& field) {
  cls.def_property(
      name, [member](Owner& o) -> Part& { return o.*member; },
      [member, field](Owner& o, const py::object& v) { o.*member = to_instance<Part>(v, field); },
      py::return_value_policy::reference_internal);
}

// ==, !=, copy.copy, copy.deepcopy and repr for a value class.
template <class Cls, class T, class Repr>
void value_methods(Cls& cls, Repr repr) {
  cls.def(py::self == py::self)  // NOLINT(misc-redundant-expression)
      .def(py::self != py::self)  // NOLINT(misc-redundant-expression)
      .def("__copy__", [](const T& v) { return T(v); })
      .def("__deepcopy__", [](const T& v, const py::object&) { return T(v); }, py::arg("memo"))
      .def("__repr__", repr);
}

// ---- identity parts -------------------------------------------------------------------------

void bind_identity(py::module_& m) {
  py::enum_<kvkey::KvDtype> dtype_enum(m, "KvDtype", "Element type of the stored KV (codes are part of the byte format).");
  dtype_enum.value("unset", kvkey::KvDtype::unset);
  for (const kvkey::KvDtype d : kvkey::all_dtypes()) dtype_enum.value(std::string(kvkey::to_string(d)).c_str(), d);
  m.def(
      "kv_dtype_from_string", [](const py::object& s) { return to_dtype(py::str(to_text(s, "name")), "name"); },
      py::arg("name"), "Parses 'fp16', 'fp8_e4m3', ...; an unknown name (and 'unset') raises InputError.");

  py::class_<kvkey::Model> model(m, "Model", "The model's weights lineage.");
  model.def(py::init([](const py::object& name, const py::object& revision, const py::object& epoch,
                        const py::object& fp, const py::object& positional) {
              kvkey::Model md;
              md.name = to_text(name, "model.name");
              md.revision = to_text(revision, "model.revision");
              md.weights_epoch = to_uint<std::uint64_t>(epoch, "model.weights_epoch");
              md.weights_fingerprint = to_optional_digest(fp, "model.weights_fingerprint");
              md.positional_fingerprint = to_optional_digest(positional, "model.positional_fingerprint");
              return md;
            }),
            py::kw_only(), py::arg("name") = "", py::arg("revision") = "", py::arg("weights_epoch") = 0,
            py::arg("weights_fingerprint") = py::none(), py::arg("positional_fingerprint") = py::none());
  text_property(model, "name", &kvkey::Model::name, "model.name");
  text_property(model, "revision", &kvkey::Model::revision, "model.revision");
  uint_property(model, "weights_epoch", &kvkey::Model::weights_epoch, "model.weights_epoch");
  optional_digest_property(model, "weights_fingerprint", &kvkey::Model::weights_fingerprint,
                           "model.weights_fingerprint");
  optional_digest_property(model, "positional_fingerprint", &kvkey::Model::positional_fingerprint,
                           "model.positional_fingerprint");
  value_methods<decltype(model), kvkey::Model>(model, &model_repr);

  py::class_<kvkey::Quant> quant(m, "Quant", "How KV values are quantized.");
  quant.def(py::init([](const py::object& scheme, const py::object& group_size, const py::object& scale_dtype,
                        const py::object& zero_point, const py::object& scales_fp) {
              kvkey::Quant q;
              q.scheme = to_text(scheme, "kv.quant.scheme");
              q.group_size = to_uint<std::uint32_t>(group_size, "kv.quant.group_size");
              q.scale_dtype = to_optional_dtype(scale_dtype, "kv.quant.scale_dtype");
              q.zero_point = to_bool(zero_point, "kv.quant.zero_point");
              q.scales_fingerprint = to_optional_digest(scales_fp, "kv.quant.scales_fingerprint");
              return q;
            }),
            py::kw_only(), py::arg("scheme") = "none", py::arg("group_size") = 0,
            py::arg("scale_dtype") = py::none(), py::arg("zero_point") = false,
            py::arg("scales_fingerprint") = py::none());
  text_property(quant, "scheme", &kvkey::Quant::scheme, "kv.quant.scheme");
  uint_property(quant, "group_size", &kvkey::Quant::group_size, "kv.quant.group_size");
  quant.def_property(
      "scale_dtype", [](const kvkey::Quant& q) { return q.scale_dtype; },
      [](kvkey::Quant& q, const py::object& v) { q.scale_dtype = to_optional_dtype(v, "kv.quant.scale_dtype"); },
      "KvDtype, its name, or None");
  bool_property(quant, "zero_point", &kvkey::Quant::zero_point, "kv.quant.zero_point");
  optional_digest_property(quant, "scales_fingerprint", &kvkey::Quant::scales_fingerprint,
                           "kv.quant.scales_fingerprint");
  value_methods<decltype(quant), kvkey::Quant>(quant, &quant_repr);

  py::class_<kvkey::Kv> kv(m, "Kv", "What one stored KV object's bytes are.");
  kv.def(py::init([](const py::object& dtype, const py::object& q, const py::object& block_size,
                     const py::object& num_layers, const py::object& num_kv_heads, const py::object& head_dim,
                     const py::object& layout, const py::object& mla) {
           kvkey::Kv v;
           v.dtype = to_dtype(dtype, "kv.dtype");
           v.quant = to_instance<kvkey::Quant>(q, "kv.quant");
           v.block_size = to_uint<std::uint32_t>(block_size, "kv.block_size");
           v.num_layers = to_uint<std::uint32_t>(num_layers, "kv.num_layers");
           v.num_kv_heads = to_uint<std::uint32_t>(num_kv_heads, "kv.num_kv_heads");
           v.head_dim = to_uint<std::uint32_t>(head_dim, "kv.head_dim");
           v.layout = to_text(layout, "kv.layout");
           v.mla = to_bool(mla, "kv.mla");
           return v;
         }),
         py::kw_only(), py::arg("dtype") = kvkey::KvDtype::unset, py::arg("quant") = kvkey::Quant{},
         py::arg("block_size") = 0, py::arg("num_layers") = 0, py::arg("num_kv_heads") = 0, py::arg("head_dim") = 0,
         py::arg("layout") = "", py::arg("mla") = false);
  kv.def_property(
      "dtype", [](const kvkey::Kv& v) { return v.dtype; },
      [](kvkey::Kv& v, const py::object& d) { v.dtype = to_dtype(d, "kv.dtype"); }, "KvDtype or its name");
  part_property(kv, "quant", &kvkey::Kv::quant, "kv.quant");
  uint_property(kv, "block_size", &kvkey::Kv::block_size, "kv.block_size");
  uint_property(kv, "num_layers", &kvkey::Kv::num_layers, "kv.num_layers");
  uint_property(kv, "num_kv_heads", &kvkey::Kv::num_kv_heads, "kv.num_kv_heads");
  uint_property(kv, "head_dim", &kvkey::Kv::head_dim, "kv.head_dim");
  text_property(kv, "layout", &kvkey::Kv::layout, "kv.layout");
  bool_property(kv, "mla", &kvkey::Kv::mla, "kv.mla");
  value_methods<decltype(kv), kvkey::Kv>(kv, &kv_repr);

  py::class_<kvkey::Shard> shard(m, "Shard", "Where this process sits in the tensor/pipeline-parallel grid.");
  shard.def(py::init([](const py::object& tp_size, const py::object& tp_rank, const py::object& pp_size,
                        const py::object& pp_rank) {
              return kvkey::Shard{to_uint<std::uint32_t>(tp_size, "shard.tp_size"),
                                  to_uint<std::uint32_t>(tp_rank, "shard.tp_rank"),
                                  to_uint<std::uint32_t>(pp_size, "shard.pp_size"),
                                  to_uint<std::uint32_t>(pp_rank, "shard.pp_rank")};
            }),
            py::kw_only(), py::arg("tp_size") = 1, py::arg("tp_rank") = 0, py::arg("pp_size") = 1,
            py::arg("pp_rank") = 0);
  uint_property(shard, "tp_size", &kvkey::Shard::tp_size, "shard.tp_size");
  uint_property(shard, "tp_rank", &kvkey::Shard::tp_rank, "shard.tp_rank");
  uint_property(shard, "pp_size", &kvkey::Shard::pp_size, "shard.pp_size");
  uint_property(shard, "pp_rank", &kvkey::Shard::pp_rank, "shard.pp_rank");
  value_methods<decltype(shard), kvkey::Shard>(shard, &shard_repr);

  py::class_<kvkey::Adapter, std::shared_ptr<kvkey::Adapter>> adapter(
      m, "Adapter", "A LoRA (or other) adapter: its name and its weights' fingerprint.");
  adapter.def(py::init([](const py::object& name, const py::object& fp) {
                return kvkey::Adapter(to_text(name, "adapter.name"), to_digest(fp, "adapter.weights_fingerprint"));
              }),
              py::arg("name"), py::arg("weights_fingerprint"));
  text_property(adapter, "name", &kvkey::Adapter::name, "adapter.name");
  adapter.def_property(
      "weights_fingerprint", [](const kvkey::Adapter& a) { return to_bytes(a.weights_fingerprint); },
      [](kvkey::Adapter& a, const py::object& v) { a.weights_fingerprint = to_digest(v, "adapter.weights_fingerprint"); },
      "32 bytes");
  value_methods<decltype(adapter), kvkey::Adapter>(adapter, &adapter_repr);

  py::class_<PyIdentity> identity(m, "Identity",
                                  "Everything that changes the meaning or the ownership of stored KV bytes. "
                                  "Plain data: assign members in place, then build a KeyNamespace, which validates "
                                  "it.");
  identity.def(py::init([](const py::object& tenant, const py::object& md, const py::object& v,
                           const py::object& sh, const py::object& ad) {
                 PyIdentity id;
                 id.id.tenant = to_text(tenant, "tenant");
                 id.id.model = to_instance<kvkey::Model>(md, "model");
                 id.id.kv = to_instance<kvkey::Kv>(v, "kv");
                 id.id.shard = to_instance<kvkey::Shard>(sh, "shard");
                 if (!ad.is_none()) id.adapter = std::make_shared<kvkey::Adapter>(to_instance<kvkey::Adapter>(ad, "adapter"));
                 return id;
               }),
               py::kw_only(), py::arg("tenant") = "", py::arg("model") = kvkey::Model{}, py::arg("kv") = kvkey::Kv{},
               py::arg("shard") = kvkey::Shard{}, py::arg("adapter") = py::none());
  identity.def_property(
      "tenant", [](const PyIdentity& id) { return to_py_text(id.id.tenant); },
      [](PyIdentity& id, const py::object& v) { id.id.tenant = to_text(v, "tenant"); }, "str");
  identity.def_property(
      "model", [](PyIdentity& id) -> kvkey::Model& { return id.id.model; },
      [](PyIdentity& id, const py::object& v) { id.id.model = to_instance<kvkey::Model>(v, "model"); },
      py::return_value_policy::reference_internal);
  identity.def_property(
      "kv", [](PyIdentity& id) -> kvkey::Kv& { return id.id.kv; },
      [](PyIdentity& id, const py::object& v) { id.id.kv = to_instance<kvkey::Kv>(v, "kv"); },
      py::return_value_policy::reference_internal);
  identity.def_property(
      "shard", [](PyIdentity& id) -> kvkey::Shard& { return id.id.shard; },
      [](PyIdentity& id, const py::object& v) { id.id.shard = to_instance<kvkey::Shard>(v, "shard"); },
      py::return_value_policy::reference_internal);
  identity.def_property(
      "adapter", [](const PyIdentity& id) { return id.adapter; },
      [](PyIdentity& id, const py::object& v) {
        id.adapter = v.is_none() ? nullptr : std::make_shared<kvkey::Adapter>(to_instance<kvkey::Adapter>(v, "adapter"));
      },
      "Adapter or None: a live reference while attached; assignment copies");
  identity.def("copy", [](const PyIdentity& id) { return PyIdentity(id); }, "An independent copy.")
      .def(
          "validated",
          [](const PyIdentity& id, const py::object& single) {
            return PyIdentity(
                kvkey::validated(id.value(), to_bool(single, "single_tenant") ? kvkey::single_tenant : kvkey::Policy{}));
          },
          py::kw_only(), py::arg("single_tenant") = false,
          "Checks every field (raises IdentityError naming the first bad one) and returns the identity as encoded.")
      .def("__eq__", [](const PyIdentity& a, const py::object& b) { return identity_equal(a, b, true); })
      .def("__ne__", [](const PyIdentity& a, const py::object& b) { return identity_equal(a, b, false); })
      .def("__copy__", [](const PyIdentity& id) { return PyIdentity(id); })
      .def("__deepcopy__", [](const PyIdentity& id, const py::object&) { return PyIdentity(id); }, py::arg("memo"))
      .def("__repr__", [](const PyIdentity& id) { return identity_repr(id.value()); });
  identity.attr("__hash__") = py::none();
}

// ---- hash options -------------------------------------------------------------------------

kvkey::HashOptions to_options(const py::handle& salt, const py::handle& extras) {
  kvkey::HashOptions opt;
  if (!salt.is_none()) opt.salt = to_byte_string(salt, "salt");
  if (extras.is_none()) return opt;
  for_each_item(extras, "extras", "a list of (token_begin, token_end, key) tuples",
                [&](const py::handle& item, std::size_t i) {
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

// kvkey.KeyNamespace: KeyNamespace<Sha256>, or KeyNamespace<HmacSha256> when
// built with a TenantSecret. The members the binding uses forward to whichever
// it holds.
class Namespace {
 public:
  Namespace(const kvkey::Identity& id, const kvkey::Policy& policy) : ns_(std::in_place_index<0>, id, policy) {}
  Namespace(const kvkey::Identity& id, const kvkey::TenantSecret& secret, const kvkey::Policy& policy)
      : ns_(std::in_place_index<1>, id, kvkey::HmacSha256(secret), policy) {}
  template <class Hash>
  explicit Namespace(kvkey::KeyNamespace<Hash> ns) : ns_(std::move(ns)) {}

  template <class F>
  decltype(auto) visit(F&& f) const {
    return std::visit(std::forward<F>(f), ns_);
  }
  bool keyed() const noexcept { return ns_.index() == 1; }
  Namespace with_epoch(std::uint64_t epoch) const {
    return visit([&](const auto& n) { return Namespace(n.with_epoch(epoch)); });
  }

  const kvkey::Identity& identity() const noexcept { return visit([](const auto& n) -> auto& { return n.identity(); }); }
  const kvkey::Policy& policy() const noexcept { return visit([](const auto& n) -> auto& { return n.policy(); }); }
  const kvkey::Slice& slice() const noexcept { return visit([](const auto& n) -> auto& { return n.slice(); }); }
  const auto& encoding() const noexcept { return visit([](const auto& n) -> auto& { return n.encoding(); }); }
  const kvkey::Digest& root() const noexcept { return visit([](const auto& n) -> auto& { return n.root(); }); }
  std::uint32_t block_size() const noexcept { return identity().kv.block_size; }
  const std::string& key_prefix() const noexcept {
    return visit([](const auto& n) -> auto& { return n.key_prefix(); });
  }
  std::string tenant_prefix() const { return visit([](const auto& n) { return n.tenant_prefix(); }); }
  kvkey::Digest first_parent(std::string_view salt) const {
    return visit([&](const auto& n) { return n.first_parent(salt); });
  }
  kvkey::Digest object_hash(const kvkey::Digest& h) const { return visit([&](const auto& n) { return n.object_hash(h); }); }
  std::string store_key(const kvkey::Digest& h) const { return visit([&](const auto& n) { return n.store_key(h); }); }
  kvkey::Envelope seal(const kvkey::Digest& h, std::uint64_t size) const {
    return visit([&](const auto& n) { return n.seal(h, size); });
  }
  kvkey::Verdict verify(const std::uint8_t* header, std::size_t len, const kvkey::Digest& h, std::uint64_t size) const {
    return visit([&](const auto& n) { return n.verify(header, len, h, size); });
  }
  kvkey::Verdict verify_header(const std::uint8_t* header, std::size_t len, const kvkey::Digest& h) const {
    return visit([&](const auto& n) { return n.verify_header(header, len, h); });
  }
  kvkey::Envelope seal(const kvkey::Digest& h, kvkey::Payload payload) const {
    return visit([&](const auto& n) { return n.seal(h, payload); });
  }
  kvkey::Verdict verify(const std::uint8_t* header, std::size_t len, const kvkey::Digest& h,
                        kvkey::Payload payload) const {
    return visit([&](const auto& n) { return n.verify(header, len, h, payload); });
  }

  kvkey::ReusablePrefix reusable_prefix(const std::vector<bool>& results, std::size_t shards,
                                        std::size_t max_tokens) const {
    return visit([&](const auto& n) { return n.reusable_prefix(results, shards, max_tokens); });
  }
  template <class T>
  void extend_block_hashes(std::vector<kvkey::Digest>& hashes, const T* tokens, std::size_t count,
                           const kvkey::HashOptions& opt) const {
    visit([&](const auto& n) { n.extend_block_hashes(hashes, tokens, count, opt); });
  }

 private:
  std::variant<kvkey::KeyNamespace<kvkey::Sha256>, kvkey::KeyNamespace<kvkey::HmacSha256>> ns_;
};

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
  if (is_integer(payload)) return ns.verify(bytes.data(), bytes.size(), block, to_uint<std::uint64_t>(payload, "payload"));
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
          "from_file",
          [](const py::object& path) { return kvkey::TenantSecret::from_file(to_path(path, "path")); }, py::arg("path"),
          "From a file of hex text or raw bytes, mode 0600 or 0640 (IoError otherwise).")
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
      .def_property_readonly(
          "identity", [](const Namespace& ns) { return PyIdentity(ns.identity()); },
          "the validated identity as encoded (a copy)")
      .def_property_readonly("single_tenant",
                             [](const Namespace& ns) { return ns.policy().tenant == kvkey::TenantPolicy::single_tenant; })
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
          "store_key", [](const Namespace& ns, const py::object& h) { return ns.store_key(to_digest(h, "block_hash")); },
          py::arg("block_hash"), "\"kvk1/<tenant>/<model>/e<epoch>/<64 hex>\"")
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
               (ns.keyed() ? ", secret=TenantSecret(<hidden>)" : "") +
               ", key_prefix=" + quoted(ns.key_prefix()) + ")";
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
          throw_input_error("shard_keys is " + std::to_string(shards) + ", at most " +
                            std::to_string(max_shard_keys) + " (one key per KV-head shard of a block)");
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
        return lm::is_legacy_key_of(to_text(key, "key"), to_text(prefix, "cache_prefix"),
                                    to_text(model, "model_name"));
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
  ex.error = make("Error", py::make_tuple(value_error), "Base of every kvkey exception (a ValueError).");
  ex.identity_error = make("IdentityError", py::make_tuple(ex.error),
                           "An identity is invalid; .field is the dotted path of the offending field.");
  ex.identity_error.attr("field") = "";
  ex.input_error = make("InputError", py::make_tuple(ex.error), "A call argument is invalid.");
  ex.io_error = make("IoError", py::make_tuple(ex.error, os_error), "A file could not be read (also an OSError).");
  ex.crypto_error = make("CryptoError", py::make_tuple(ex.error), "OpenSSL reported a failure.");

  py::register_exception_translator([](std::exception_ptr p) {
    if (!p) return;
    Exceptions& e = exceptions();
    try {
      std::rethrow_exception(p);
    } catch (const kvkey::identity_error& err) {
      raise_as(e.identity_error, err.what(), err.field().c_str());
    } catch (const kvkey::input_error& err) {
      raise_as(e.input_error, err.what());
    } catch (const kvkey::io_error& err) {
      raise_as(e.io_error, err.what());
    } catch (const kvkey::crypto_error& err) {
      raise_as(e.crypto_error, err.what());
    } catch (const kvkey::error& err) {
      raise_as(e.error, err.what());
    }
  });

  m.attr("envelope_size") = kvkey::envelope_size;
  m.attr("format_version") = kvkey::format_version;
  m.attr("store_key_tag") = std::string(kvkey::store_key_tag);
  m.attr("single_tenant_name") = std::string(kvkey::single_tenant_name);
  m.attr("__version__") = std::to_string(KVKEY_VERSION_MAJOR) + "." + std::to_string(KVKEY_VERSION_MINOR) + "." +
                          std::to_string(KVKEY_VERSION_PATCH);

  bind_identity(m);
  bind_namespace(m);
  bind_values<Namespace, PyVerdict>(m);  // value.hpp
  bind_model_dir(m);
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

  py::module_ compat = m.def_submodule("compat_lmdeploy");
  bind_lmdeploy(compat);
}
