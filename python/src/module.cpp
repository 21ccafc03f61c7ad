// The kvkey Python binding (module kvkey._kvkey; the package kvkey re-exports
// it). Uses only the public headers. Digests are 32-byte `bytes` in Python.
#include <pybind11/operators.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <kvkey/compat/lmdeploy.hpp>
#include <kvkey/fmt.hpp>
#include <kvkey/kvkey.hpp>

#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace py = pybind11;
namespace lm = kvkey::compat::lmdeploy;

namespace {

// ---- exceptions ------------------------------------------------------------------

struct Exceptions {
  py::object error, identity_error, input_error, io_error, crypto_error;
};

Exceptions& exceptions() {
  static Exceptions* e = new Exceptions();  // lives as long as the interpreter's module
  return *e;
}

// Raises cls(message), with extra attributes, as the active Python exception.
void raise_as(const py::object& cls, const char* message, const char* field = nullptr) {
  py::object exc = cls(message);
  if (field != nullptr) exc.attr("field") = field;
  PyErr_SetObject(cls.ptr(), exc.ptr());
}

[[noreturn]] void throw_input_error(const std::string& what) { throw kvkey::input_error(what); }

// ---- digests as bytes ----------------------------------------------------------------

py::bytes to_bytes(const kvkey::Digest& d) { return py::bytes(reinterpret_cast<const char*>(d.data()), d.size()); }

py::list to_list(const std::vector<kvkey::Digest>& ds) {
  py::list out(ds.size());
  for (std::size_t i = 0; i < ds.size(); ++i) out[i] = to_bytes(ds[i]);
  return out;
}

// A C-contiguous bytes-like object (bytes, bytearray, memoryview, numpy array)
// borrowed for the duration of a call, without copying.
class BytesView {
 public:
  BytesView(const py::handle& obj, const char* what) {
    if (!PyObject_CheckBuffer(obj.ptr())) {
      throw py::type_error(std::string(what) + " must be a bytes-like object or a C-contiguous buffer, not " +
                           std::string(py::str(py::type::handle_of(obj).attr("__name__"))));
    }
    if (PyObject_GetBuffer(obj.ptr(), &view_, PyBUF_C_CONTIGUOUS) != 0) throw py::error_already_set();
  }
  BytesView(const BytesView&) = delete;
  BytesView& operator=(const BytesView&) = delete;
  ~BytesView() { PyBuffer_Release(&view_); }
  const std::uint8_t* data() const { return static_cast<const std::uint8_t*>(view_.buf); }
  std::size_t size() const { return static_cast<std::size_t>(view_.len); }

 private:
  Py_buffer view_{};
};

// Any bytes-like object of exactly 32 bytes (bytes, bytearray, memoryview, numpy).
kvkey::Digest to_digest(const py::handle& obj, const char* what) {
  if (PyUnicode_Check(obj.ptr())) {
    throw_input_error(std::string(what) + " must be 32 bytes (bytes-like), not str; use bytes.fromhex() for hex");
  }
  if (!PyObject_CheckBuffer(obj.ptr())) {
    throw py::type_error(std::string(what) + " must be a bytes-like object of 32 bytes, not " +
                         std::string(py::str(py::type::handle_of(obj).attr("__name__"))));
  }
  Py_buffer view;
  if (PyObject_GetBuffer(obj.ptr(), &view, PyBUF_SIMPLE) != 0) throw py::error_already_set();
  kvkey::Digest d;
  const bool ok = view.len == static_cast<Py_ssize_t>(kvkey::Digest::size_bytes);
  const auto len = view.len;
  if (ok) std::memcpy(d.data(), view.buf, kvkey::Digest::size_bytes);
  PyBuffer_Release(&view);
  if (!ok) throw_input_error(std::string(what) + " must be 32 bytes, got " + std::to_string(len));
  return d;
}

std::optional<kvkey::Digest> to_optional_digest(const py::handle& obj, const char* what) {
  if (obj.is_none()) return std::nullopt;
  return to_digest(obj, what);
}

py::object from_optional_digest(const std::optional<kvkey::Digest>& d) {
  return d ? py::object(to_bytes(*d)) : py::object(py::none());
}

std::vector<kvkey::Digest> to_digests(const py::handle& seq, const char* what) {
  std::vector<kvkey::Digest> out;
  if (seq.is_none()) return out;
  for (py::handle item : py::iter(seq)) out.push_back(to_digest(item, what));
  return out;
}

// Bytes of a str (UTF-8) or of any bytes-like object.
std::string to_byte_string(const py::handle& obj, const char* what) {
  if (PyUnicode_Check(obj.ptr())) return obj.cast<std::string>();
  if (PyObject_CheckBuffer(obj.ptr())) {
    py::buffer_info info = py::reinterpret_borrow<py::buffer>(obj).request();
    return std::string(static_cast<const char*>(info.ptr), static_cast<std::size_t>(info.size * info.itemsize));
  }
  throw py::type_error(std::string(what) + " must be str or bytes-like");
}

// ---- dtypes ----------------------------------------------------------------------------

kvkey::KvDtype to_dtype(const py::handle& obj, const char* what) {
  if (PyUnicode_Check(obj.ptr())) {
    const auto s = obj.cast<std::string>();
    if (s == "unset") return kvkey::KvDtype::unset;
    if (auto d = kvkey::kv_dtype_from_string(s)) return *d;
    std::string known;
    for (const auto& e : kvkey::detail::dtype_names) known.append(known.empty() ? "" : ", ").append(e.name);
    throw_input_error(std::string(what) + ": unknown dtype '" + s + "' (known: " + known + ")");
  }
  if (!py::isinstance<kvkey::KvDtype>(obj)) {
    throw py::type_error(std::string(what) + " must be a KvDtype or its name, not " +
                         std::string(py::str(py::type::handle_of(obj).attr("__name__"))));
  }
  return obj.cast<kvkey::KvDtype>();
}

std::optional<kvkey::KvDtype> to_optional_dtype(const py::handle& obj, const char* what) {
  if (obj.is_none()) return std::nullopt;
  return to_dtype(obj, what);
}

// ---- tokens ------------------------------------------------------------------------------

// Token ids as the C++ API takes them: borrowed from a 1-D C-contiguous buffer
// of int32/int64/uint32/uint64 (numpy arrays, array.array) without copying,
// else converted once from any sequence of ints.
class Tokens {
 public:
  enum class Kind { i32, i64, u32, u64 };

  // allow_u64: hand out uint64 (the legacy scheme takes ids up to 2^64 - 1).
  Tokens(const py::handle& obj, bool allow_u64) {
    if (PyObject_CheckBuffer(obj.ptr()) && !PyUnicode_Check(obj.ptr()) && borrow(obj, allow_u64)) return;
    convert(obj, allow_u64);
  }

  template <class F>
  decltype(auto) visit(F&& f) const {
    switch (kind_) {
      case Kind::i32: return f(static_cast<const std::int32_t*>(data_), count_);
      case Kind::i64: return f(static_cast<const std::int64_t*>(data_), count_);
      case Kind::u32: return f(static_cast<const std::uint32_t*>(data_), count_);
      case Kind::u64: break;
    }
    return f(static_cast<const std::uint64_t*>(data_), count_);
  }

  std::size_t size() const noexcept { return count_; }
  bool borrowed() const noexcept { return view_.has_value(); }

 private:
  bool borrow(const py::handle& obj, bool allow_u64) {
    auto* view = new Py_buffer();  // buffer_info releases and deletes it
    if (PyObject_GetBuffer(obj.ptr(), view, PyBUF_FORMAT | PyBUF_ND) != 0) {
      delete view;
      PyErr_Clear();  // e.g. not C-contiguous: take the sequence path
      return false;
    }
    py::buffer_info info(view, true);
    if (info.ndim != 1) {
      throw py::value_error("tokens must be one-dimensional, got " + std::to_string(info.ndim) + " dimensions");
    }
    std::string_view fmt = info.format;
    if (!fmt.empty() && (fmt[0] == '@' || fmt[0] == '=' || fmt[0] == '<')) fmt.remove_prefix(1);
    if (fmt.size() != 1) return false;
    const bool is_signed = std::string_view("bhilq").find(fmt[0]) != std::string_view::npos;
    const bool is_unsigned = std::string_view("BHILQ").find(fmt[0]) != std::string_view::npos;
    if (is_signed && info.itemsize == 4) {
      kind_ = Kind::i32;
    } else if (is_signed && info.itemsize == 8) {
      kind_ = Kind::i64;
    } else if (is_unsigned && info.itemsize == 4) {
      kind_ = Kind::u32;
    } else if (is_unsigned && info.itemsize == 8 && allow_u64) {
      kind_ = Kind::u64;
    } else {
      return false;  // other widths (and big-endian formats) go through the sequence path
    }
    data_ = info.ptr;
    count_ = static_cast<std::size_t>(info.size);
    view_.emplace(std::move(info));
    return true;
  }

  void convert(const py::handle& obj, bool allow_u64) {
    const py::sequence seq = py::reinterpret_borrow<py::sequence>(obj);
    if (!PySequence_Check(obj.ptr())) {
      throw py::type_error("tokens must be a sequence of ints or a 1-D integer buffer, not " +
                           std::string(py::str(py::type::handle_of(obj).attr("__name__"))));
    }
    const auto n = static_cast<std::size_t>(py::len(seq));
    i64_.reserve(n);
    for (std::size_t i = 0; i < n; ++i) {
      const py::object item = seq[i];
      py::object index = py::reinterpret_steal<py::object>(PyNumber_Index(item.ptr()));
      if (!index) {
        PyErr_Clear();
        throw py::type_error("token " + std::to_string(i) + " is not an int (" +
                             std::string(py::str(py::type::handle_of(item).attr("__name__"))) + ")");
      }
      int overflow = 0;
      const long long v = PyLong_AsLongLongAndOverflow(index.ptr(), &overflow);
      if (overflow == 0) {
        i64_.push_back(v);
        continue;
      }
      if (overflow < 0 || !allow_u64) {
        throw_input_error("token " + std::to_string(i) + " is " + std::string(py::str(index)) +
                          (allow_u64 ? ", token ids must lie in [0, 2^64)" : ", outside [0, 2^32)"));
      }
      convert_u64(seq, n);  // ids beyond 2^63 - 1: the legacy scheme's full range
      return;
    }
    kind_ = Kind::i64;
    data_ = i64_.data();
    count_ = i64_.size();
  }

  void convert_u64(const py::sequence& seq, std::size_t n) {
    i64_.clear();
    u64_.reserve(n);
    for (std::size_t i = 0; i < n; ++i) {
      py::object index = py::reinterpret_steal<py::object>(PyNumber_Index(py::object(seq[i]).ptr()));
      if (!index) throw py::error_already_set();
      const unsigned long long v = PyLong_AsUnsignedLongLong(index.ptr());
      if (PyErr_Occurred() != nullptr) {
        PyErr_Clear();
        throw_input_error("token " + std::to_string(i) + " is " + std::string(py::str(index)) +
                          ", token ids must lie in [0, 2^64)");
      }
      u64_.push_back(v);
    }
    kind_ = Kind::u64;
    data_ = u64_.data();
    count_ = u64_.size();
  }

  Kind kind_ = Kind::i64;
  const void* data_ = nullptr;
  std::size_t count_ = 0;
  std::optional<py::buffer_info> view_;
  std::vector<std::int64_t> i64_;
  std::vector<std::uint64_t> u64_;
};

// ---- hash options -------------------------------------------------------------------------

kvkey::HashOptions to_options(const py::handle& salt, const py::handle& extras) {
  kvkey::HashOptions opt;
  if (!salt.is_none()) opt.salt = to_byte_string(salt, "salt");
  if (!extras.is_none()) {
    std::size_t i = 0;
    for (py::handle item : py::iter(extras)) {
      const auto t = py::reinterpret_borrow<py::sequence>(item);
      if (!PySequence_Check(item.ptr()) || py::len(t) != 3) {
        throw py::type_error("extra key " + std::to_string(i) + " must be a (token_begin, token_end, key) tuple");
      }
      kvkey::ExtraKey e;
      e.token_begin = py::object(t[0]).cast<std::uint64_t>();
      e.token_end = py::object(t[1]).cast<std::uint64_t>();
      e.key = to_byte_string(py::object(t[2]), "extra key");
      opt.extras.push_back(std::move(e));
      ++i;
    }
  }
  return opt;
}

// ---- the namespace ------------------------------------------------------------------------

using Namespace = kvkey::KeyNamespace<>;

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

struct PyVerdict {
  kvkey::Verdict v;
  bool ok() const { return v.ok(); }
  std::string reason() const { return std::string(kvkey::to_string(v.reason)); }
  std::string field() const { return std::string(v.field); }
};

std::vector<bool> to_results(const py::handle& results) {
  std::vector<bool> out;
  for (py::handle item : py::iter(results)) {
    const int truth = PyObject_IsTrue(item.ptr());
    if (truth < 0) throw py::error_already_set();
    out.push_back(truth != 0);
  }
  return out;
}

std::size_t to_max_tokens(const py::handle& max_tokens) {
  if (max_tokens.is_none()) return std::numeric_limits<std::size_t>::max();
  return max_tokens.cast<std::size_t>();
}

std::string slice_repr(const kvkey::Slice& s) {
  return "Slice(kv_heads=[" + std::to_string(s.kv_head_begin) + ", " + std::to_string(s.kv_head_end) +
         "), layers=[" + std::to_string(s.layer_begin) + ", " + std::to_string(s.layer_end) + "))";
}

// ---- identity parts -------------------------------------------------------------------------

void bind_identity(py::module_& m) {
  py::enum_<kvkey::KvDtype> dtype_enum(m, "KvDtype", "Element type of the stored KV (codes are part of the byte format).");
  dtype_enum.value("unset", kvkey::KvDtype::unset);
  for (const auto& e : kvkey::detail::dtype_names) dtype_enum.value(std::string(e.name).c_str(), e.dtype);
  m.def(
      "kv_dtype_from_string", [](const std::string& s) { return to_dtype(py::str(s), "kv_dtype_from_string"); },
      py::arg("name"), "Parses 'fp16', 'fp8_e4m3', ...; an unknown name raises InputError.");

  py::class_<kvkey::Model>(m, "Model", "The model's weights lineage.")
      .def(py::init([](std::string name, std::string revision, std::uint64_t epoch, const py::object& fp,
                       const py::object& positional) {
             kvkey::Model md;
             md.name = std::move(name);
             md.revision = std::move(revision);
             md.weights_epoch = epoch;
             md.weights_fingerprint = to_optional_digest(fp, "model.weights_fingerprint");
             md.positional_fingerprint = to_optional_digest(positional, "model.positional_fingerprint");
             return md;
           }),
           py::kw_only(), py::arg("name") = "", py::arg("revision") = "", py::arg("weights_epoch") = 0,
           py::arg("weights_fingerprint") = py::none(), py::arg("positional_fingerprint") = py::none())
      .def_readwrite("name", &kvkey::Model::name)
      .def_readwrite("revision", &kvkey::Model::revision)
      .def_readwrite("weights_epoch", &kvkey::Model::weights_epoch)
      .def_property(
          "weights_fingerprint", [](const kvkey::Model& md) { return from_optional_digest(md.weights_fingerprint); },
          [](kvkey::Model& md, const py::object& v) {
            md.weights_fingerprint = to_optional_digest(v, "model.weights_fingerprint");
          },
          "32 bytes or None")
      .def_property(
          "positional_fingerprint",
          [](const kvkey::Model& md) { return from_optional_digest(md.positional_fingerprint); },
          [](kvkey::Model& md, const py::object& v) {
            md.positional_fingerprint = to_optional_digest(v, "model.positional_fingerprint");
          },
          "32 bytes or None: the positional-encoding (RoPE) configuration the engine runs with");

  py::class_<kvkey::Quant>(m, "Quant", "How KV values are quantized.")
      .def(py::init([](std::string scheme, std::uint32_t group_size, const py::object& scale_dtype, bool zero_point,
                       const py::object& scales_fp) {
             kvkey::Quant q;
             q.scheme = std::move(scheme);
             q.group_size = group_size;
             q.scale_dtype = to_optional_dtype(scale_dtype, "kv.quant.scale_dtype");
             q.zero_point = zero_point;
             q.scales_fingerprint = to_optional_digest(scales_fp, "kv.quant.scales_fingerprint");
             return q;
           }),
           py::kw_only(), py::arg("scheme") = "none", py::arg("group_size") = 0, py::arg("scale_dtype") = py::none(),
           py::arg("zero_point") = false, py::arg("scales_fingerprint") = py::none())
      .def_readwrite("scheme", &kvkey::Quant::scheme)
      .def_readwrite("group_size", &kvkey::Quant::group_size)
      .def_property(
          "scale_dtype", [](const kvkey::Quant& q) { return q.scale_dtype; },
          [](kvkey::Quant& q, const py::object& v) { q.scale_dtype = to_optional_dtype(v, "kv.quant.scale_dtype"); },
          "KvDtype, its name, or None")
      .def_readwrite("zero_point", &kvkey::Quant::zero_point)
      .def_property(
          "scales_fingerprint", [](const kvkey::Quant& q) { return from_optional_digest(q.scales_fingerprint); },
          [](kvkey::Quant& q, const py::object& v) {
            q.scales_fingerprint = to_optional_digest(v, "kv.quant.scales_fingerprint");
          },
          "32 bytes or None");

  py::class_<kvkey::Kv>(m, "Kv", "What one stored KV object's bytes are.")
      .def(py::init([](const py::object& dtype, const kvkey::Quant& quant, std::uint32_t block_size,
                       std::uint32_t num_layers, std::uint32_t num_kv_heads, std::uint32_t head_dim, std::string layout,
                       bool mla) {
             kvkey::Kv kv;
             kv.dtype = to_dtype(dtype, "kv.dtype");
             kv.quant = quant;
             kv.block_size = block_size;
             kv.num_layers = num_layers;
             kv.num_kv_heads = num_kv_heads;
             kv.head_dim = head_dim;
             kv.layout = std::move(layout);
             kv.mla = mla;
             return kv;
           }),
           py::kw_only(), py::arg("dtype") = kvkey::KvDtype::unset, py::arg("quant") = kvkey::Quant{},
           py::arg("block_size") = 0, py::arg("num_layers") = 0, py::arg("num_kv_heads") = 0,
           py::arg("head_dim") = 0, py::arg("layout") = "", py::arg("mla") = false)
      .def_property(
          "dtype", [](const kvkey::Kv& kv) { return kv.dtype; },
          [](kvkey::Kv& kv, const py::object& v) { kv.dtype = to_dtype(v, "kv.dtype"); }, "KvDtype or its name")
      .def_readwrite("quant", &kvkey::Kv::quant)
      .def_readwrite("block_size", &kvkey::Kv::block_size)
      .def_readwrite("num_layers", &kvkey::Kv::num_layers)
      .def_readwrite("num_kv_heads", &kvkey::Kv::num_kv_heads)
      .def_readwrite("head_dim", &kvkey::Kv::head_dim)
      .def_readwrite("layout", &kvkey::Kv::layout)
      .def_readwrite("mla", &kvkey::Kv::mla);

  py::class_<kvkey::Shard>(m, "Shard", "Where this process sits in the tensor/pipeline-parallel grid.")
      .def(py::init([](std::uint32_t tp_size, std::uint32_t tp_rank, std::uint32_t pp_size, std::uint32_t pp_rank) {
             return kvkey::Shard{tp_size, tp_rank, pp_size, pp_rank};
           }),
           py::kw_only(), py::arg("tp_size") = 1, py::arg("tp_rank") = 0, py::arg("pp_size") = 1,
           py::arg("pp_rank") = 0)
      .def_readwrite("tp_size", &kvkey::Shard::tp_size)
      .def_readwrite("tp_rank", &kvkey::Shard::tp_rank)
      .def_readwrite("pp_size", &kvkey::Shard::pp_size)
      .def_readwrite("pp_rank", &kvkey::Shard::pp_rank);

  py::class_<kvkey::Adapter>(m, "Adapter", "A LoRA (or other) adapter: its name and its weights' fingerprint.")
      .def(py::init([](std::string name, const py::object& fp) {
             return kvkey::Adapter(std::move(name), to_digest(fp, "adapter.weights_fingerprint"));
           }),
           py::arg("name"), py::arg("weights_fingerprint"))
      .def_readwrite("name", &kvkey::Adapter::name)
      .def_property(
          "weights_fingerprint", [](const kvkey::Adapter& a) { return to_bytes(a.weights_fingerprint); },
          [](kvkey::Adapter& a, const py::object& v) {
            a.weights_fingerprint = to_digest(v, "adapter.weights_fingerprint");
          },
          "32 bytes")
      .def("__repr__", [](const kvkey::Adapter& a) {
        return "Adapter(" + std::string(py::repr(py::str(a.name))) + ", " + a.weights_fingerprint.hex() + ")";
      });

  py::class_<kvkey::Identity>(m, "Identity",
                              "Everything that changes the meaning or the ownership of stored KV bytes. "
                              "Plain data: assign members in place, then build a KeyNamespace, which validates it.")
      .def(py::init([](std::string tenant, const kvkey::Model& model, const kvkey::Kv& kv, const kvkey::Shard& shard,
                       std::optional<kvkey::Adapter> adapter) {
             return kvkey::Identity{std::move(tenant), model, kv, shard, std::move(adapter)};
           }),
           py::kw_only(), py::arg("tenant") = "", py::arg("model") = kvkey::Model{}, py::arg("kv") = kvkey::Kv{},
           py::arg("shard") = kvkey::Shard{}, py::arg("adapter") = py::none())
      .def_readwrite("tenant", &kvkey::Identity::tenant)
      .def_readwrite("model", &kvkey::Identity::model)
      .def_readwrite("kv", &kvkey::Identity::kv)
      .def_readwrite("shard", &kvkey::Identity::shard)
      .def_property(
          "adapter",
          [](py::object self) -> py::object {
            auto& id = self.cast<kvkey::Identity&>();
            if (!id.adapter) return py::none();
            return py::cast(&*id.adapter, py::return_value_policy::reference_internal, self);
          },
          [](kvkey::Identity& id, std::optional<kvkey::Adapter> a) { id.adapter = std::move(a); },
          "Adapter or None")
      .def("copy", [](const kvkey::Identity& id) { return id; }, "An independent copy.")
      .def("__copy__", [](const kvkey::Identity& id) { return id; })
      .def("__deepcopy__", [](const kvkey::Identity& id, const py::object&) { return id; })
      .def("validated",
           [](const kvkey::Identity& id, bool single) {
             return kvkey::validated(id, single ? kvkey::single_tenant : kvkey::Policy{});
           },
           py::kw_only(), py::arg("single_tenant") = false,
           "Checks every field (raises IdentityError naming the first bad one) and returns the identity as encoded.")
      .def("__repr__", [](const kvkey::Identity& id) { return "Identity(" + kvkey::describe(id) + ")"; });
}

// ---- namespace, verdicts, accounting ---------------------------------------------------------

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
        return "Verdict(ok=" + std::string(v.ok() ? "True" : "False") + ", reason='" + v.reason() + "', field='" +
               v.field() + "')";
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
      [](const py::object& results, std::size_t shards_per_block, std::size_t block_size,
         const py::object& max_tokens) {
        return kvkey::reusable_prefix(to_results(results), shards_per_block, block_size, to_max_tokens(max_tokens));
      },
      py::arg("results"), py::arg("shards_per_block"), py::arg("block_size"), py::arg("max_tokens") = py::none(),
      "Counts the leading blocks every shard can serve. results: one bool or Verdict per (block, shard), "
      "block-major; counting stops at the first block any shard misses.");

  py::class_<Namespace>(m, "KeyNamespace", "Keys, block hashes and envelopes of one deployment's rank.")
      .def(py::init([](const kvkey::Identity& id, bool single, const std::string& payload_check) {
             kvkey::Policy policy = single ? kvkey::single_tenant : kvkey::Policy{};
             if (payload_check == "size_only") {
               policy.payload = kvkey::PayloadCheck::size_only;
             } else if (payload_check != "required") {
               throw_input_error("payload_check must be 'required' or 'size_only', not '" + payload_check + "'");
             }
             return Namespace(id, policy);
           }),
           py::arg("identity"), py::kw_only(), py::arg("single_tenant") = false, py::arg("payload_check") = "required",
           "Validates the identity (IdentityError names the bad field). single_tenant=True: a store no one else "
           "shares; the tenant must then be empty. payload_check='size_only': explicit opt-out of payload digests "
           "for callers that cannot see the bytes (then seal/verify also take a payload size).")
      .def_property_readonly(
          "identity", [](const Namespace& ns) { return ns.identity(); }, "the validated identity as encoded (a copy)")
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
             const py::object& previous) {
            const Tokens t(tokens, false);
            return to_list(extend(ns, to_digests(previous, "previous hash"), t, to_options(salt, extras)));
          },
          py::arg("tokens"), py::kw_only(), py::arg("salt") = py::none(), py::arg("extras") = py::none(),
          py::arg("previous") = py::none(),
          "32-byte hashes (bytes) of every full block. tokens: list/sequence of ints or a 1-D int32/int64/uint32 "
          "buffer (numpy), read without per-token conversion. previous: hashes of the first blocks from an earlier "
          "call (incremental). The GIL is released while hashing.")
      .def(
          "extend_block_hashes",
          [](const Namespace& ns, const py::object& previous, const py::object& tokens, const py::object& salt,
             const py::object& extras) {
            const Tokens t(tokens, false);
            return to_list(extend(ns, to_digests(previous, "previous hash"), t, to_options(salt, extras)));
          },
          py::arg("previous"), py::arg("tokens"), py::kw_only(), py::arg("salt") = py::none(),
          py::arg("extras") = py::none(),
          "previous + the hashes of the remaining full blocks of tokens (the whole sequence so far).")
      .def(
          "first_parent", [](const Namespace& ns, const py::object& salt) {
            return to_bytes(ns.first_parent(salt.is_none() ? std::string() : to_byte_string(salt, "salt")));
          },
          py::arg("salt") = py::none())
      .def(
          "object_hash",
          [](const Namespace& ns, const py::object& h) { return to_bytes(ns.object_hash(to_digest(h, "block hash"))); },
          py::arg("block_hash"))
      .def(
          "store_key", [](const Namespace& ns, const py::object& h) { return ns.store_key(to_digest(h, "block hash")); },
          py::arg("block_hash"), "\"kvk1/<tenant>/<model>/e<epoch>/<64 hex>\"")
      .def(
          "seal",
          [](const Namespace& ns, const py::object& h, const py::object& payload) {
            const kvkey::Digest block = to_digest(h, "block hash");
            kvkey::Envelope e;
            if (PyLong_Check(payload.ptr())) {
              e = ns.seal(block, payload.cast<std::uint64_t>());  // size only: the policy must opt out
            } else {
              const BytesView bytes(payload, "payload");
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
            const kvkey::Digest block = to_digest(h, "block hash");
            const BytesView head(header, "header");
            if (PyLong_Check(payload.ptr())) {
              return PyVerdict{ns.verify(head.data(), head.size(), block, payload.cast<std::uint64_t>())};
            }
            const BytesView bytes(payload, "payload");
            py::gil_scoped_release release;
            return PyVerdict{ns.verify(head.data(), head.size(), block, kvkey::Payload(bytes.data(), bytes.size()))};
          },
          py::arg("header"), py::arg("block_hash"), py::arg("payload"),
          "Checks a header and the payload read with it (bytes-like or numpy, zero-copy, GIL released); an int "
          "payload size checks everything but the bytes (never ok unless payload_check='size_only'). Never raises "
          "for bad header or payload bytes: returns a Verdict.")
      .def(
          "reusable_prefix",
          [](const Namespace& ns, const py::object& results, std::size_t shards_per_block,
             const py::object& max_tokens) {
            return ns.reusable_prefix(to_results(results), shards_per_block, to_max_tokens(max_tokens));
          },
          py::arg("results"), py::arg("shards_per_block"), py::arg("max_tokens") = py::none())
      .def("__repr__", [](const Namespace& ns) {
        return "KeyNamespace(" + kvkey::describe(ns.identity()) + ", key_prefix='" + ns.key_prefix() + "')";
      });
}

// ---- kvkey.compat.lmdeploy -------------------------------------------------------------------

void bind_lmdeploy(py::module_& m) {
  m.doc() = "lmdeploy's legacy Mooncake store keys, bit for bit (recognise, enumerate, purge; never for new keys).";
  m.attr("BLOCK_HASH_SCHEMA") = py::bytes(lm::block_hash_schema.data(), lm::block_hash_schema.size());
  m.attr("DEFAULT_MODEL_NAME") = std::string(lm::default_model_name);

  m.def(
      "build_prefix_block_hashes",
      [](const py::object& token_ids, std::uint32_t block_size, const py::object& extra_identity,
         const py::object& previous_hashes) {
        const Tokens t(token_ids, true);
        const std::string extra = to_byte_string(extra_identity, "extra_identity");
        std::vector<kvkey::Digest> hashes = to_digests(previous_hashes, "previous hash");
        {
          py::gil_scoped_release release;
          t.visit([&](const auto* data, std::size_t n) {
            lm::extend_block_hashes(hashes, data, n, block_size, extra);
          });
        }
        return to_list(hashes);
      },
      py::arg("token_ids"), py::arg("block_size"), py::arg("extra_identity") = "",
      py::arg("previous_hashes") = py::none(),
      "lmdeploy's build_prefix_block_hashes: one 32-byte hash (bytes) per full block. extra_identity: str or bytes "
      "(the scheduler passes the adapter name or ''). previous_hashes: hashes of the first blocks (continuation).");

  m.def(
      "build_store_key",
      [](const std::string& cache_prefix, const std::string& model_name, std::uint32_t kv_head_rank,
         const py::object& block_hash) {
        return lm::store_key(cache_prefix, model_name, kv_head_rank, to_digest(block_hash, "block_hash"));
      },
      py::arg("cache_prefix"), py::arg("model_name"), py::arg("kv_head_rank"), py::arg("block_hash"),
      "\"[<cache_prefix>@]<model_name>@tp_rank:<kv_head_rank>@group:0@<64 hex>\"");

  m.def("kv_head_replica_num", &lm::kv_head_replica_num, py::arg("tp_size"), py::arg("num_kv_heads"));
  m.def("kv_head_rank", &lm::kv_head_rank, py::arg("tp_rank"), py::arg("tp_size"), py::arg("num_kv_heads"));
  m.def("shard_key_count", &lm::shard_key_count, py::arg("tp_size"), py::arg("num_kv_heads"));
  m.def(
      "lookup_keys",
      [](const std::string& cache_prefix, const std::string& model_name, std::uint32_t shard_keys,
         const py::object& hashes) {
        return lm::lookup_keys(cache_prefix, model_name, shard_keys, to_digests(hashes, "block hash"));
      },
      py::arg("cache_prefix"), py::arg("model_name"), py::arg("shard_keys"), py::arg("block_hashes"),
      "The keys lmdeploy's lookup checks, block-major.");

  py::class_<lm::LegacyKey>(m, "LegacyKey", "A parsed legacy key.")
      .def_readonly("cache_prefix", &lm::LegacyKey::cache_prefix)
      .def_readonly("model_name", &lm::LegacyKey::model_name)
      .def_readonly("kv_head_rank", &lm::LegacyKey::kv_head_rank)
      .def_property_readonly("block_hash", [](const lm::LegacyKey& k) { return to_bytes(k.block_hash); })
      .def_readonly("ambiguous", &lm::LegacyKey::ambiguous)
      .def("__repr__", [](const lm::LegacyKey& k) {
        return "LegacyKey(cache_prefix=" + std::string(py::repr(py::str(k.cache_prefix))) +
               ", model_name=" + std::string(py::repr(py::str(k.model_name))) +
               ", kv_head_rank=" + std::to_string(k.kv_head_rank) + ", block_hash=" + k.block_hash.hex() +
               ", ambiguous=" + (k.ambiguous ? "True" : "False") + ")";
      });
  m.def("parse_key", [](std::string_view key) { return lm::parse_key(key); }, py::arg("key"),
        "LegacyKey or None. The prefix/model split of a head with '@' is ambiguous: model_name is taken after the "
        "last '@' and `ambiguous` is set.");
  m.def("is_legacy_key", [](std::string_view key) { return lm::is_legacy_key(key); }, py::arg("key"));
  m.def(
      "is_legacy_key_of",
      [](std::string_view key, std::string_view prefix, std::string_view model) {
        return lm::is_legacy_key_of(key, prefix, model);
      },
      py::arg("key"), py::arg("cache_prefix"), py::arg("model_name"));
  m.def(
      "purge_pattern", [](std::string_view p, std::string_view model) { return lm::purge_pattern(p, model); },
      py::arg("cache_prefix"), py::arg("model_name"),
      "Anchored regex (ECMAScript and POSIX ERE) matching every legacy key of the pair; never a kvkey key.");
  m.def(
      "purge_glob", [](std::string_view p, std::string_view model) { return lm::purge_glob(p, model); },
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

  m.def(
      "fingerprint", [](const py::object& data) { return to_bytes(kvkey::fingerprint(to_byte_string(data, "data"))); },
      py::arg("data"), "Plain SHA-256 (as sha256sum prints it) of bytes, as 32 bytes.");
  // The file is read without the GIL; the bytes object is made after.
  m.attr("fingerprint_file") = py::cpp_function(
      [](const py::object& path) {
        const std::string p = py::str(py::module_::import("os").attr("fspath")(path));
        kvkey::Digest d;
        {
          py::gil_scoped_release release;
          d = kvkey::fingerprint_file(p);
        }
        return to_bytes(d);
      },
      py::name("fingerprint_file"), py::scope(m), py::arg("path"),
      "SHA-256 of a file's contents, streamed; IoError (an OSError) when it cannot be read.");

  py::module_ compat = m.def_submodule("compat_lmdeploy");
  bind_lmdeploy(compat);
}
