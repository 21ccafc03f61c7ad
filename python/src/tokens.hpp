// Token ids for the kvkey binding: borrowed from an integer buffer, or
// converted once from a sequence of ints (docs/python.md, "Conventions").
#ifndef KVKEY_PYTHON_TOKENS_HPP
#define KVKEY_PYTHON_TOKENS_HPP

#include <pybind11/pybind11.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "convert.hpp"

namespace kvkey_python {

// Token ids as the C++ API takes them: borrowed from a 1-D C-contiguous buffer
// of int32/int64/uint32/uint64 (numpy arrays, array.array) without copying,
// else converted once from any sequence of ints. A list or tuple is read
// straight from its item array, exact ints first, in one pass.
class Tokens {
 public:
  enum class Kind { i32, i64, u32, u64 };

  // allow_u64: hand out uint64 (the legacy scheme takes ids up to 2^64 - 1).
  // skip: the ids [0, skip) are not read (their slots stay unset), for a C++
  // call that reads only the later ones (an extension past known blocks).
  Tokens(const py::handle& obj, bool allow_u64, std::size_t skip = 0) {
    if (PyObject_CheckBuffer(obj.ptr()) && !PyUnicode_Check(obj.ptr()) && borrow(obj, allow_u64)) return;
    convert(obj, allow_u64, skip);
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

  [[noreturn]] static void not_an_int(std::size_t i, PyObject* item) {
    PyErr_Clear();
    throw py::type_error("token " + std::to_string(i) + " is not an int (" + type_name(item) + ")");
  }

  [[noreturn]] static void out_of_range(std::size_t i, PyObject* index, bool allow_u64) {
    PyErr_Clear();
    throw_input_error("token " + std::to_string(i) + " is " + std::string(py::str(index)) +
                      (allow_u64 ? ", token ids must lie in [0, 2^64)" : ", outside [0, 2^32)"));
  }

  // Item i of a list or tuple, or of any sequence (a new reference either way).
  static py::object item(PyObject* seq, bool fast, std::size_t i) {
    if (!fast) return py::reinterpret_steal<py::object>(PySequence_GetItem(seq, static_cast<Py_ssize_t>(i)));
    if (static_cast<Py_ssize_t>(i) >= PySequence_Fast_GET_SIZE(seq)) {
      throw py::value_error("tokens changed size while being read");
    }
    return py::reinterpret_borrow<py::object>(PySequence_Fast_GET_ITEM(seq, static_cast<Py_ssize_t>(i)));
  }

  // One id as int64; false when it does not fit (then `index` holds the int).
  static bool to_i64(PyObject* obj, std::size_t i, std::int64_t& out, py::object& index) {
    int overflow = 0;
    if (PyLong_CheckExact(obj)) {
      out = PyLong_AsLongLongAndOverflow(obj, &overflow);
      if (overflow == 0) return true;
      index = py::reinterpret_borrow<py::object>(obj);
      return false;
    }
    index = py::reinterpret_steal<py::object>(PyNumber_Index(obj));
    if (!index) not_an_int(i, obj);
    out = PyLong_AsLongLongAndOverflow(index.ptr(), &overflow);
    return overflow == 0;
  }

  void convert(const py::handle& obj, bool allow_u64, std::size_t skip) {
    PyObject* seq = obj.ptr();
    const bool fast = PyList_CheckExact(seq) || PyTuple_CheckExact(seq);
    if (!fast && (PyUnicode_Check(seq) || !PySequence_Check(seq))) {
      throw py::type_error("tokens must be a sequence of ints or a 1-D integer buffer, not " + type_name(obj));
    }
    const Py_ssize_t len = fast ? PySequence_Fast_GET_SIZE(seq) : PySequence_Size(seq);
    if (len < 0) throw py::error_already_set();
    const auto n = static_cast<std::size_t>(len);
    skip = std::min(skip, n);
    i64_.reset(new std::int64_t[n]);  // [0, skip) is never read
    std::size_t start = skip;
    if (fast) {
      // The common case: a list of exact ints, read without touching the refcounts.
      PyObject** items = PySequence_Fast_ITEMS(seq);
      std::size_t i = start;
      for (; i < n; ++i) {
        PyObject* it = items[i];
        if (!PyLong_CheckExact(it)) break;
        int overflow = 0;
        i64_[i] = PyLong_AsLongLongAndOverflow(it, &overflow);
        if (overflow != 0) break;
      }
      start = i;  // the rest (if any) takes the general path below
    }
    for (std::size_t i = start; i < n; ++i) {
      const py::object it = item(seq, fast, i);
      if (!it) throw py::error_already_set();
      py::object index;
      if (to_i64(it.ptr(), i, i64_[i], index)) continue;
      if (!index || PyErr_Occurred() != nullptr) out_of_range(i, index ? index.ptr() : it.ptr(), allow_u64);
      int sign = 0;
      (void)PyLong_AsLongLongAndOverflow(index.ptr(), &sign);
      if (sign < 0 || !allow_u64) out_of_range(i, index.ptr(), allow_u64);
      convert_u64(seq, fast, n, skip, i);  // ids beyond 2^63 - 1: the legacy scheme's full range
      return;
    }
    kind_ = Kind::i64;
    data_ = i64_.get();
    count_ = n;
  }

  // Continues from token `from` (the first id above 2^63 - 1) with uint64 storage.
  void convert_u64(PyObject* seq, bool fast, std::size_t n, std::size_t skip, std::size_t from) {
    u64_.reset(new std::uint64_t[n]);
    for (std::size_t i = skip; i < from; ++i) {
      if (i64_[i] < 0)
        throw_input_error("token " + std::to_string(i) + " is " + std::to_string(i64_[i]) +
                          ", token ids must lie in [0, 2^64)");
      u64_[i] = static_cast<std::uint64_t>(i64_[i]);
    }
    i64_.reset();
    for (std::size_t i = from; i < n; ++i) {
      const py::object it = item(seq, fast, i);
      if (!it) throw py::error_already_set();
      const auto index = py::reinterpret_steal<py::object>(PyNumber_Index(it.ptr()));
      if (!index) not_an_int(i, it.ptr());
      u64_[i] = PyLong_AsUnsignedLongLong(index.ptr());
      if (PyErr_Occurred() != nullptr) out_of_range(i, index.ptr(), true);
    }
    kind_ = Kind::u64;
    data_ = u64_.get();
    count_ = n;
  }

  Kind kind_ = Kind::i64;
  const void* data_ = nullptr;
  std::size_t count_ = 0;
  std::optional<py::buffer_info> view_;
  std::unique_ptr<std::int64_t[]> i64_;
  std::unique_ptr<std::uint64_t[]> u64_;
};

}  // namespace kvkey_python

#endif  // KVKEY_PYTHON_TOKENS_HPP
