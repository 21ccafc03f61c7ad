// Argument conversion for the kvkey binding: every Python argument reaches C++
// through one of these helpers, which check it and name it in the error
// (docs/python.md, "Arguments"). Nothing here leaves it to pybind11's own casts,
// whose errors name no parameter.
#ifndef KVKEY_PYTHON_CONVERT_HPP
#define KVKEY_PYTHON_CONVERT_HPP

#include <pybind11/pybind11.h>

#include <kvkey/kvkey.hpp>

#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace kvkey_python {

namespace py = pybind11;

inline std::string type_name(const py::handle& obj) { return Py_TYPE(obj.ptr())->tp_name; }

[[noreturn]] inline void throw_input_error(const std::string& what) { throw kvkey::input_error(what); }

[[noreturn]] inline void throw_type_error(const std::string& field, const std::string& expected,
                                          const py::handle& got) {
  throw py::type_error(field + " must be " + expected + ", not " + type_name(got));
}

// ---- byte strings ---------------------------------------------------------------------------

// The bytes of one byte-string argument, as bytes(memoryview(obj)) gives them:
// a C-contiguous buffer is read in place, any other (strided, reversed,
// Fortran-ordered) is copied in logical order. A str is refused where only
// bytes are meant, else taken as its UTF-8.
class ByteString {
 public:
  enum class Str { refuse, utf8 };

  ByteString(const py::handle& obj, const std::string& field, Str str, const char* expected = "bytes-like") {
    if (PyUnicode_Check(obj.ptr())) {
      if (str == Str::refuse) throw_type_error(field, expected, obj);
      Py_ssize_t n = 0;
      const char* p = PyUnicode_AsUTF8AndSize(obj.ptr(), &n);
      if (p == nullptr) {
        PyErr_Clear();
        throw_input_error(field + " is not valid text: it cannot be encoded as UTF-8 (lone surrogate)");
      }
      view_ = std::string_view(p, static_cast<std::size_t>(n));
      return;
    }
    if (!PyObject_CheckBuffer(obj.ptr())) {
      throw_type_error(field, std::string(expected) + (str == Str::utf8 ? " or str" : ""), obj);
    }
    if (PyObject_GetBuffer(obj.ptr(), &buffer_, PyBUF_FULL_RO) != 0) {
      PyErr_Clear();
      throw_type_error(field, std::string(expected) + " (a readable buffer)", obj);
    }
    held_ = true;
    const auto len = static_cast<std::size_t>(buffer_.len);
    if (PyBuffer_IsContiguous(&buffer_, 'C') != 0) {
      view_ = std::string_view(static_cast<const char*>(buffer_.buf), len);
      return;
    }
    copy_.resize(len);
    if (PyBuffer_ToContiguous(copy_.data(), &buffer_, buffer_.len, 'C') != 0) throw py::error_already_set();
    view_ = copy_;
  }
  ~ByteString() {
    if (held_) PyBuffer_Release(&buffer_);
  }
  ByteString(const ByteString&) = delete;
  ByteString& operator=(const ByteString&) = delete;

  std::string_view view() const noexcept { return view_; }
  std::string str() const { return std::string(view_); }
  const std::uint8_t* data() const noexcept { return reinterpret_cast<const std::uint8_t*>(view_.data()); }
  std::size_t size() const noexcept { return view_.size(); }
  /// True when the bytes are read in place from the object's buffer (not copied, not a str).
  bool in_place() const noexcept { return held_ && copy_.empty() && buffer_.len != 0; }

 private:
  Py_buffer buffer_{};
  bool held_ = false;
  std::string copy_;
  std::string_view view_;
};

// str or bytes-like (a str as UTF-8): salts, extra keys, fingerprinted data.
inline std::string to_byte_string(const py::handle& obj, const std::string& field) {
  return ByteString(obj, field, ByteString::Str::utf8).str();
}

// Any bytes-like object of exactly 32 bytes; a str is refused (bytes.fromhex parses hex).
// The common case, bytes of length 32, without building the field's name.
inline bool exact_digest(PyObject* obj, kvkey::Digest& d) {
  if (!PyBytes_CheckExact(obj) || PyBytes_GET_SIZE(obj) != kvkey::Digest::size_bytes) return false;
  std::memcpy(d.data(), PyBytes_AS_STRING(obj), kvkey::Digest::size_bytes);
  return true;
}

inline kvkey::Digest to_digest(const py::handle& obj, const std::string& field) {
  kvkey::Digest d;
  if (exact_digest(obj.ptr(), d)) return d;
  if (PyUnicode_Check(obj.ptr())) {
    throw py::type_error(field + " must be 32 bytes (bytes-like), not str; use bytes.fromhex() for hex");
  }
  const ByteString b(obj, field, ByteString::Str::refuse, "32 bytes (bytes-like)");
  if (b.size() != kvkey::Digest::size_bytes) {
    throw_input_error(field + " must be 32 bytes, got " + std::to_string(b.size()));
  }
  std::memcpy(d.data(), b.data(), kvkey::Digest::size_bytes);
  return d;
}

inline std::optional<kvkey::Digest> to_optional_digest(const py::handle& obj, const std::string& field) {
  if (obj.is_none()) return std::nullopt;
  return to_digest(obj, field);
}

// ---- text -----------------------------------------------------------------------------------

// A str, as UTF-8. Bytes are refused (they would be read back as undecodable
// text), and so is a str that UTF-8 cannot encode (a lone surrogate).
inline std::string to_text(const py::handle& obj, const std::string& field) {
  if (!PyUnicode_Check(obj.ptr())) throw_type_error(field, "str", obj);
  return ByteString(obj, field, ByteString::Str::utf8).str();
}

// A str made from bytes the binding wrote; never raises (bad UTF-8 is shown escaped).
inline py::str to_py_text(std::string_view s) {
  PyObject* o = PyUnicode_DecodeUTF8(s.data(), static_cast<Py_ssize_t>(s.size()), "backslashreplace");
  if (o == nullptr) throw py::error_already_set();
  return py::reinterpret_steal<py::str>(o);
}

// repr() of a Python str: quoted, control and bidirectional characters escaped.
inline std::string quoted(std::string_view s) { return py::repr(to_py_text(s)); }

// ---- integers and booleans --------------------------------------------------------------------

// A non-negative int (or anything with __index__, e.g. numpy integers) that fits T.
template <class T>
T to_uint(const py::handle& obj, const std::string& field) {
  static_assert(std::is_unsigned_v<T>);
  if (!PyLong_Check(obj.ptr()) && (PyFloat_Check(obj.ptr()) || !PyIndex_Check(obj.ptr()))) {
    throw_type_error(field, "an int", obj);
  }
  const auto index = py::reinterpret_steal<py::object>(PyNumber_Index(obj.ptr()));
  if (!index) {
    PyErr_Clear();
    throw_type_error(field, "an int", obj);
  }
  const unsigned long long v = PyLong_AsUnsignedLongLong(index.ptr());
  const bool failed = v == static_cast<unsigned long long>(-1) && PyErr_Occurred() != nullptr;
  if (failed) PyErr_Clear();
  if (failed || v > std::numeric_limits<T>::max()) {
    const std::size_t bits = py::cast<std::size_t>(index.attr("bit_length")());
    const std::string shown = bits <= 256 ? std::string(py::str(index)) : "an int of " + std::to_string(bits) + " bits";
    throw_input_error(field + " is " + shown + ", must lie in [0, 2^" + std::to_string(std::numeric_limits<T>::digits) +
                      ")");
  }
  return static_cast<T>(v);
}

// True for an argument that is an integer wherever the binding takes either an
// int or bytes (a payload size or the payload): a Python int, or any other
// object with __index__ that is not an array. numpy integer scalars export the
// buffer protocol too (their 1 to 8 bytes), and an ndarray has __index__ (for
// 0-d integer arrays); a buffer exporter with __index__ is an integer only when
// it is a numpy scalar (numpy.generic), so np.int64(5) means 5, as int 5 does.
inline bool is_integer(const py::handle& obj) {
  PyObject* o = obj.ptr();
  if (PyLong_Check(o)) return true;
  if (PyFloat_Check(o) || !PyIndex_Check(o)) return false;
  if (!PyObject_CheckBuffer(o)) return true;
  // Only numpy makes buffer exporters with __index__ of its own; it is loaded if o is one.
  PyObject* numpy = PyImport_GetModule(py::str("numpy").ptr());
  if (numpy == nullptr) {
    if (PyErr_Occurred() != nullptr) throw py::error_already_set();
    return false;
  }
  const auto module = py::reinterpret_steal<py::object>(numpy);
  const py::object generic = py::getattr(module, "generic", py::none());
  if (generic.is_none()) return false;
  const int r = PyObject_IsInstance(o, generic.ptr());
  if (r < 0) throw py::error_already_set();
  return r == 1;
}

inline bool is_bool(const py::handle& obj) {
  if (PyBool_Check(obj.ptr())) return true;
  const std::string_view name = Py_TYPE(obj.ptr())->tp_name;
  return name == "numpy.bool_" || name == "numpy.bool";
}

// True or False (numpy's bool too); no other truthy object.
inline bool to_bool(const py::handle& obj, const std::string& field) {
  if (!is_bool(obj)) throw_type_error(field, "a bool", obj);
  return PyObject_IsTrue(obj.ptr()) == 1;
}

// 1 or 0 for an int equal to 1 or 0 (Python's, numpy's: anything with
// __index__ but a bool or a float); -1 for anything else.
inline int zero_or_one(const py::handle& obj) {
  if (is_bool(obj) || PyFloat_Check(obj.ptr()) || !PyIndex_Check(obj.ptr())) return -1;
  const auto index = py::reinterpret_steal<py::object>(PyNumber_Index(obj.ptr()));
  if (!index) {
    PyErr_Clear();
    return -1;
  }
  int overflow = 0;
  const long v = PyLong_AsLongAndOverflow(index.ptr(), &overflow);
  if (v == -1 && PyErr_Occurred() != nullptr) PyErr_Clear();
  return overflow == 0 && (v == 0 || v == 1) ? static_cast<int>(v) : -1;
}

// ---- containers and instances -----------------------------------------------------------------

// Calls f(item, index) for each item of an iterable; a non-iterable is a TypeError naming the field.
template <class F>
void for_each_item(const py::handle& obj, const std::string& field, const char* expected, F&& f) {
  if (PyUnicode_Check(obj.ptr()) || PyBytes_Check(obj.ptr())) throw_type_error(field, expected, obj);
  auto it = py::reinterpret_steal<py::object>(PyObject_GetIter(obj.ptr()));
  if (!it) {
    PyErr_Clear();
    throw_type_error(field, expected, obj);
  }
  std::size_t i = 0;
  while (auto item = py::reinterpret_steal<py::object>(PyIter_Next(it.ptr()))) f(item, i++);
  if (PyErr_Occurred() != nullptr) throw py::error_already_set();
}

inline std::string indexed(const std::string& field, std::size_t i) { return field + "[" + std::to_string(i) + "]"; }

inline std::vector<kvkey::Digest> to_digests(const py::handle& obj, const std::string& field) {
  std::vector<kvkey::Digest> out;
  if (obj.is_none()) return out;
  for_each_item(obj, field, "a list of 32-byte digests", [&](const py::handle& item, std::size_t i) {
    kvkey::Digest d;
    out.push_back(exact_digest(item.ptr(), d) ? d : to_digest(item, indexed(field, i)));
  });
  return out;
}

// The C++ object behind an instance of a bound class, or a TypeError naming the field.
template <class T>
T& to_instance(const py::handle& obj, const std::string& field) {
  if (!py::isinstance<T>(obj)) {
    const py::str name = py::type::of<T>().attr("__name__");
    throw_type_error(field, "a kvkey." + std::string(name), obj);
  }
  return obj.cast<T&>();
}

// A filesystem path as os.fsencode(os.fspath(obj)) gives it: str (encoded with
// the filesystem encoding and its surrogateescape), bytes or os.PathLike. A NUL
// byte is refused: the C library would stop reading the name there.
inline std::string to_path(const py::handle& obj, const std::string& field) {
  py::object fspath;
  try {
    fspath = py::module_::import("os").attr("fspath")(obj);
  } catch (py::error_already_set& e) {
    if (!e.matches(PyExc_TypeError)) throw;
    throw_type_error(field, "str, bytes or os.PathLike", obj);
  }
  const py::bytes encoded = py::module_::import("os").attr("fsencode")(fspath);
  std::string path = encoded;
  if (const auto nul = path.find('\0'); nul != std::string::npos) {
    throw py::value_error(field + " contains a NUL byte (at byte " + std::to_string(nul) + ")");
  }
  return path;
}

// ---- dtypes ----------------------------------------------------------------------------

// A dtype name ("fp16"; "unset" is no type, as in the CLI's configs) or a KvDtype.
inline kvkey::KvDtype to_dtype(const py::handle& obj, const std::string& field) {
  if (PyUnicode_Check(obj.ptr())) {
    const std::string s = to_text(obj, field);
    if (auto d = kvkey::kv_dtype_from_string(s)) return *d;
    const std::string shown = s.size() <= 64 ? s : s.substr(0, 64) + "...";
    throw kvkey::input_error(
        field, "unknown dtype " + kvkey_python::quoted(shown) + " (known: " + kvkey::known_dtype_names() + ")");
  }
  if (!py::isinstance<kvkey::KvDtype>(obj)) throw_type_error(field, "a KvDtype or its name", obj);
  return obj.cast<kvkey::KvDtype>();
}

inline std::optional<kvkey::KvDtype> to_optional_dtype(const py::handle& obj, const std::string& field) {
  if (obj.is_none()) return std::nullopt;
  return to_dtype(obj, field);
}

}  // namespace kvkey_python

#endif  // KVKEY_PYTHON_CONVERT_HPP
