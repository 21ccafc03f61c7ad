// Token ids for the kvkey binding: borrowed from an integer buffer, or
// converted once from a sequence of ints (docs/python.md, "Conventions").
#ifndef KVKEY_PYTHON_TOKENS_HPP
#define KVKEY_PYTHON_TOKENS_HPP

#include <pybind11/pybind11.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "convert.hpp"

namespace kvkey_python {

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
                           type_name(obj));
    }
    const auto n = static_cast<std::size_t>(py::len(seq));
    i64_.reserve(n);
    for (std::size_t i = 0; i < n; ++i) {
      const py::object item = seq[i];
      py::object index = py::reinterpret_steal<py::object>(PyNumber_Index(item.ptr()));
      if (!index) {
        PyErr_Clear();
        throw py::type_error("token " + std::to_string(i) + " is not an int (" +
                             type_name(item) + ")");
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

}  // namespace kvkey_python

#endif  // KVKEY_PYTHON_TOKENS_HPP
