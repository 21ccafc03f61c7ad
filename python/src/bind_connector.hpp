// The connector core in the binding (kvkey._kvkey._Connector): kvkey::Connector
// over the module's KeyNamespace with a Python store plugged in through the
// store protocol (docs/connectors.md). kvkey.Connector and kvkey.aio.Connector
// (python/kvkey/connector.py, aio.py) wrap it. Every store reply is checked
// here, at the seam, for shape and type: a reply list of the wrong length or
// kind is StoreError("protocol") for the call; an entry of the wrong type, a
// StoreError instance or a negative error code is a failure of that key alone.
//
// bind_connector<Ns, VerdictT>(m) adds it once KeyNamespace and Verdict exist
// (bind_connector.cpp, with the module's types).
#ifndef KVKEY_PYTHON_BIND_CONNECTOR_HPP
#define KVKEY_PYTHON_BIND_CONNECTOR_HPP

#include <pybind11/pybind11.h>

#include <kvkey/connector.hpp>
#include <kvkey/kvkey.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <deque>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "convert.hpp"

namespace kvkey_python {

// A Python object (and the buffer read from it) keeping a value's bytes alive.
// Released with the GIL taken: owners may die in threads without it.
struct PyOwner : kvkey::StoreValue::Owner {
  PyObject* obj = nullptr;
  Py_buffer buf{};
  bool has_buf = false;
  explicit PyOwner(PyObject* o) : obj(o) { Py_XINCREF(o); }
  PyOwner(const PyOwner&) = delete;
  PyOwner& operator=(const PyOwner&) = delete;
  ~PyOwner() override {
    if (obj == nullptr && !has_buf) return;
    if (Py_IsInitialized() == 0) return;
    py::gil_scoped_acquire gil;
    if (has_buf) PyBuffer_Release(&buf);
    Py_XDECREF(obj);
  }
};

// A StoreError from the Python store: keeps the Python exception, re-raised as it was.
class PyStoreFailure : public kvkey::store_error {
 public:
  PyStoreFailure(std::string_view kind, const std::string& what, std::shared_ptr<PyOwner> exc)
      : kvkey::store_error(kind, what), exc_(std::move(exc)) {}
  PyObject* exception() const noexcept { return exc_->obj; }

 private:
  std::shared_ptr<PyOwner> exc_;
};

inline py::object store_error_class() { return py::module_::import("kvkey.stores").attr("StoreError"); }

// The kind of a StoreError instance, or "" for anything else.
inline std::string store_error_kind(const py::handle& obj, const py::object& cls) {
  const int r = PyObject_IsInstance(obj.ptr(), cls.ptr());
  if (r < 0) throw py::error_already_set();
  if (r == 0) return {};
  const py::object kind = py::getattr(obj, "kind", py::none());
  return PyUnicode_Check(kind.ptr()) ? py::cast<std::string>(kind) : std::string("other");
}

// kvkey::Store over a Python object with the batched methods of kvkey.stores.Store.
class PyStore : public kvkey::Store {
 public:
  explicit PyStore(py::object store) : store_(std::move(store)), error_cls_(store_error_class()) {
    owned_values_ = py::bool_(py::getattr(store_, "owned_values", py::bool_(false)));
    has_prefix_ = py::hasattr(store_, "get_prefix");
    has_exists_ = py::hasattr(store_, "exists");
    has_into_ = py::hasattr(store_, "get_into");
    // Registered memory (the zero-copy capability): writes from, reads into addresses.
    has_registered_ = py::hasattr(store_, "put_from") && py::hasattr(store_, "get_into_registered");
    has_register_ = py::hasattr(store_, "register_memory");
  }
  PyStore(const PyStore&) = delete;
  PyStore& operator=(const PyStore&) = delete;
  ~PyStore() override {
    py::gil_scoped_acquire gil;
    store_ = py::object();
    error_cls_ = py::object();
  }
  const py::object& object() const { return store_; }

  // ---- the single-key members, over the batched ones (the connector does not call them)
  void put(std::string_view key, const std::uint8_t* data, std::size_t size) override {
    std::vector<kvkey::StoreValue> v(1);
    kvkey::StoreValue a = allocate_value(size);
    if (size != 0) std::memcpy(const_cast<std::uint8_t*>(a.data), data, size);
    v[0] = std::move(a);
    (void)put_many({std::string(key)}, v);
  }
  std::optional<kvkey::Bytes> get(std::string_view key) override { return one(read_many({std::string(key)})); }
  std::optional<kvkey::Bytes> get_prefix(std::string_view key, std::size_t n) override {
    return one(read_prefix_many({std::string(key)}, n));
  }
  bool remove(std::string_view key) override {
    py::gil_scoped_acquire gil;
    return py::cast<long long>(call("delete", py::make_tuple(py::make_tuple(std::string(key))))) > 0;
  }
  bool exists(std::string_view key) override { return probe_many({std::string(key)}).at(0).present; }

  // ---- the batched members the connector calls
  std::vector<kvkey::StoreValue> read_many(const std::vector<std::string>& keys) override {
    py::gil_scoped_acquire gil;
    return values(call("get", py::make_tuple(key_list(keys))), keys.size(), "get");
  }
  std::vector<kvkey::StoreValue> read_prefix_many(const std::vector<std::string>& keys, std::size_t n) override {
    py::gil_scoped_acquire gil;
    if (!has_prefix_) return values(call("get", py::make_tuple(key_list(keys))), keys.size(), "get");
    return values(call("get_prefix", py::make_tuple(key_list(keys), n)), keys.size(), "get_prefix");
  }
  std::vector<kvkey::StoreValue> probe_many(const std::vector<std::string>& keys) override {
    py::gil_scoped_acquire gil;
    if (!has_exists_) {
      std::vector<kvkey::StoreValue> out = values(call("get", py::make_tuple(key_list(keys))), keys.size(), "get");
      for (kvkey::StoreValue& v : out) v = presence(v);
      return out;
    }
    const py::object reply = call("exists", py::make_tuple(key_list(keys)));
    std::vector<kvkey::StoreValue> out;
    each(reply, keys.size(), "exists", [&](const py::handle& item) {
      kvkey::StoreValue v;
      const int flag = is_bool(item) ? (PyObject_IsTrue(item.ptr()) == 1 ? 1 : 0) : zero_or_one(item);
      if (flag >= 0) {
        v.present = flag == 1;
      } else {
        v.error = entry_error(item);
      }
      out.push_back(std::move(v));
    });
    key_errors(reply, out);
    return out;
  }
  std::vector<kvkey::StoreValue> read_into(const std::vector<std::string>& keys,
                                           const std::vector<kvkey::MutableBuffer>& staging) override {
    py::gil_scoped_acquire gil;
    if (has_registered_) {
      const py::object reply =
          call("get_into_registered", py::make_tuple(key_list(keys), addresses(staging), sizes(staging)));
      return sizes_read(reply, keys.size(), staging, "get_into_registered");
    }
    if (!has_into_) return values(call("get", py::make_tuple(key_list(keys))), keys.size(), "get");
    return read_into_arena(keys, staging);
  }
  bool reads_into() const noexcept override { return has_into_ || has_registered_; }
  bool registers_memory() const noexcept override { return has_registered_; }
  std::shared_ptr<kvkey::RegisteredMemory> register_memory(kvkey::MutableBuffer memory) override {
    return std::make_shared<Region>(*this, memory, nullptr);
  }
  std::shared_ptr<kvkey::RegisteredMemory> allocate_memory(std::size_t size) override {
    std::shared_ptr<std::uint8_t[]> bytes(new std::uint8_t[size == 0 ? 1 : size]);
    return std::make_shared<Region>(*this, kvkey::MutableBuffer{bytes.get(), size}, bytes);
  }
  std::vector<kvkey::StoreWrite> write_from(const std::vector<std::string>& keys,
                                            const std::vector<kvkey::ConstBuffer>& values) override {
    if (!has_registered_) return kvkey::Store::write_from(keys, values);
    py::gil_scoped_acquire gil;
    std::vector<kvkey::MutableBuffer> at;
    at.reserve(values.size());
    for (const kvkey::ConstBuffer& v : values) at.push_back({const_cast<void*>(v.data), v.size});
    return writes(call("put_from", py::make_tuple(key_list(keys), addresses(at), sizes(at))), keys.size(), "put_from");
  }
  kvkey::StoreValue allocate_value(std::size_t size) override {
    py::gil_scoped_acquire gil;
    PyObject* b = PyBytes_FromStringAndSize(nullptr, static_cast<Py_ssize_t>(size));
    if (b == nullptr) throw py::error_already_set();
    kvkey::StoreValue v;
    auto owner = std::make_shared<PyOwner>(b);
    Py_DECREF(b);  // the owner holds it
    v.present = true;
    v.data = reinterpret_cast<const std::uint8_t*>(PyBytes_AS_STRING(b));
    v.size = size;
    v.owner = std::move(owner);
    return v;
  }
  std::vector<kvkey::StoreWrite> put_many(const std::vector<std::string>& keys,
                                          const std::vector<kvkey::StoreValue>& values) override {
    py::gil_scoped_acquire gil;
    py::list objs(values.size());
    for (std::size_t i = 0; i < values.size(); ++i) {
      const auto* o = dynamic_cast<const PyOwner*>(values[i].owner.get());
      if (o != nullptr && o->obj != nullptr && !o->has_buf) {
        objs[i] = py::reinterpret_borrow<py::object>(o->obj);
      } else {
        objs[i] = py::bytes(reinterpret_cast<const char*>(values[i].data), values[i].size);
      }
    }
    return writes(call("put", py::make_tuple(key_list(keys), objs)), keys.size(), "put");
  }

 private:
  // Memory registered with the Python store while this lives: store.register_memory(address,
  // size) where the store has it; its result's close() unregisters it.
  struct Region : kvkey::RegisteredMemory {
    Region(PyStore& s, kvkey::MutableBuffer m, std::shared_ptr<void> keep)
        : kvkey::RegisteredMemory(m, std::move(keep)) {
      if (!s.has_register_) return;
      py::gil_scoped_acquire gil;
      const py::object h = s.call("register_memory", py::make_tuple(reinterpret_cast<std::uintptr_t>(m.data), m.size));
      handle = std::make_shared<PyOwner>(h.ptr());
    }
    Region(const Region&) = delete;
    Region& operator=(const Region&) = delete;
    ~Region() override {
      if (!handle || handle->obj == nullptr || Py_IsInitialized() == 0) return;
      py::gil_scoped_acquire gil;
      if (handle->obj != Py_None) {
        PyObject* r = PyObject_CallMethod(handle->obj, "close", nullptr);
        if (r == nullptr) PyErr_Clear();
        Py_XDECREF(r);
      }
      handle.reset();
    }
    std::shared_ptr<PyOwner> handle;
  };
  // get_into for a Python store: it is lent views of a bytearray the binding
  // owns (one per call), never of the connector's staging, so a store that
  // keeps a view (np.frombuffer(view), memoryview(view), view.obj) keeps that
  // bytearray alive and never points at freed memory. The views are released
  // after the call; when nothing else holds the bytearray then, each value is
  // verified where the store wrote it (no copy; the bytearray is its owner);
  // when the store kept something, each value is first copied into staging,
  // which the store cannot reach, so what it writes later is never verified
  // nor served.
  std::vector<kvkey::StoreValue> read_into_arena(const std::vector<std::string>& keys,
                                                 const std::vector<kvkey::MutableBuffer>& staging) {
    std::size_t total = 0;
    for (const kvkey::MutableBuffer& b : staging) total += b.size;
    PyObject* ba = PyByteArray_FromStringAndSize(nullptr, static_cast<Py_ssize_t>(total));
    if (ba == nullptr) throw py::error_already_set();
    const py::object arena = py::reinterpret_steal<py::object>(ba);
    auto* base = reinterpret_cast<std::uint8_t*>(PyByteArray_AS_STRING(ba));
    std::vector<kvkey::MutableBuffer> lent(staging.size());
    py::list views(staging.size());
    {
      PyObject* whole = PyMemoryView_FromObject(ba);
      if (whole == nullptr) throw py::error_already_set();
      const py::object all = py::reinterpret_steal<py::object>(whole);
      std::size_t off = 0;
      for (std::size_t i = 0; i < staging.size(); ++i) {
        lent[i] = {base + off, staging[i].size};
        PyObject* slice = PySlice_New(py::int_(off).ptr(), py::int_(off + staging[i].size).ptr(), nullptr);
        if (slice == nullptr) throw py::error_already_set();
        PyObject* mv = PyObject_GetItem(whole, slice);
        Py_DECREF(slice);
        if (mv == nullptr) throw py::error_already_set();
        views[i] = py::reinterpret_steal<py::object>(mv);
        off += staging[i].size;
      }
      release(py::make_tuple(all));
    }
    py::object reply;
    try {
      reply = call("get_into", py::make_tuple(key_list(keys), views));
    } catch (...) {
      release(views);
      throw;
    }
    release(views);  // a view the store kept (exported: np.frombuffer) stays valid: it holds the bytearray
    const bool kept = Py_REFCNT(ba) > 1 || reinterpret_cast<PyByteArrayObject*>(ba)->ob_exports > 0;
    if (reinterpret_cast<std::uint8_t*>(PyByteArray_AS_STRING(ba)) != base ||
        static_cast<std::size_t>(PyByteArray_GET_SIZE(ba)) != total) {
      // The store resized the bytearray behind the views (view.obj): nothing in it is the values.
      throw kvkey::store_error("protocol", "get_into: the store resized the memory it was lent");
    }
    if (kept) {
      for (std::size_t i = 0; i < staging.size(); ++i) {
        if (staging[i].size != 0) std::memcpy(staging[i].data, lent[i].data, staging[i].size);
      }
      return sizes_read(reply, keys.size(), staging, "get_into");
    }
    std::vector<kvkey::StoreValue> out = sizes_read(reply, keys.size(), lent, "get_into");
    const auto owner = std::make_shared<PyOwner>(ba);
    for (std::size_t i = 0; i < out.size(); ++i) {
      if (!out[i].present) continue;
      if (out[i].size > lent[i].size) {  // did not fit: staged, so the connector names it and never serves it
        if (lent[i].size != 0) std::memcpy(staging[i].data, lent[i].data, lent[i].size);
        out[i].data = static_cast<const std::uint8_t*>(staging[i].data);
        continue;
      }
      out[i].owner = owner;
    }
    return out;
  }
  static py::list addresses(const std::vector<kvkey::MutableBuffer>& at) {
    py::list out(at.size());
    for (std::size_t i = 0; i < at.size(); ++i) out[i] = py::int_(reinterpret_cast<std::uintptr_t>(at[i].data));
    return out;
  }
  static py::list sizes(const std::vector<kvkey::MutableBuffer>& at) {
    py::list out(at.size());
    for (std::size_t i = 0; i < at.size(); ++i) out[i] = py::int_(at[i].size);
    return out;
  }
  // A put / put_from reply: None (all stored), or per key a bool, 1 / 0, or a key's failure.
  std::vector<kvkey::StoreWrite> writes(const py::object& reply, std::size_t n, const char* what) const {
    std::vector<kvkey::StoreWrite> out;
    if (reply.is_none()) return std::vector<kvkey::StoreWrite>(n);
    each(reply, n, what, [&](const py::handle& item) {
      kvkey::StoreWrite w;
      const int flag = is_bool(item) ? (PyObject_IsTrue(item.ptr()) == 1 ? 1 : 0) : zero_or_one(item);
      if (flag >= 0) {
        w.stored = flag == 1;
      } else {
        w.stored = false;
        w.error = entry_error(item);
      }
      out.push_back(std::move(w));
    });
    key_errors(reply, out);
    return out;
  }
  // A get_into / get_into_registered reply: per key the value's size (read into
  // staging[i]), None (missing), a negative error code or a key's failure.
  std::vector<kvkey::StoreValue> sizes_read(const py::object& reply, std::size_t n,
                                            const std::vector<kvkey::MutableBuffer>& staging, const char* what) const {
    std::vector<kvkey::StoreValue> out;
    std::size_t i = 0;
    each(reply, n, what, [&](const py::handle& item) {
      kvkey::StoreValue v;
      if (item.is_none()) {
      } else if (!is_bool(item) && PyLong_Check(item.ptr()) != 0) {
        int overflow = 0;
        const long long got = PyLong_AsLongLongAndOverflow(item.ptr(), &overflow);
        if (overflow < 0 || (overflow == 0 && got < 0)) {
          v.error = "server";  // a negative error code: an error, never a hit
        } else if (overflow == 0) {
          v.present = true;
          v.data = static_cast<const std::uint8_t*>(staging[i].data);
          v.size = static_cast<std::size_t>(got);
        }  // 2^63 and beyond: no value this connector could hold, a miss
      } else {
        v.error = entry_error(item);
      }
      ++i;
      out.push_back(std::move(v));
    });
    key_errors(reply, out);
    return out;
  }
  static std::optional<kvkey::Bytes> one(const std::vector<kvkey::StoreValue>& v) {
    if (v.empty() || !v[0].present) return std::nullopt;
    return kvkey::Bytes(v[0].data, v[0].data + v[0].size);
  }
  static kvkey::StoreValue presence(const kvkey::StoreValue& v) {
    kvkey::StoreValue p;
    p.present = v.present;
    p.error = v.error;
    return p;
  }
  static void release(const py::handle& views) {
    for (const py::handle& v : py::reinterpret_borrow<py::iterable>(views)) {
      PyObject* r = PyObject_CallMethod(v.ptr(), "release", nullptr);  // BufferError while exported: kept
      if (r == nullptr) PyErr_Clear();
      Py_XDECREF(r);
    }
  }
  static py::list key_list(const std::vector<std::string>& keys) {
    py::list out(keys.size());
    for (std::size_t i = 0; i < keys.size(); ++i) {
      PyObject* s = PyUnicode_FromStringAndSize(keys[i].data(), static_cast<Py_ssize_t>(keys[i].size()));
      if (s == nullptr) throw py::error_already_set();
      PyList_SET_ITEM(out.ptr(), static_cast<Py_ssize_t>(i), s);
    }
    return out;
  }

  // Calls store.<method>(*args); a StoreError becomes a PyStoreFailure, anything else passes through.
  py::object call(const char* method, const py::tuple& args) {
    try {
      return store_.attr(method)(*args);
    } catch (py::error_already_set& e) {
      const std::string kind = store_error_kind(e.value(), error_cls_);
      if (kind.empty()) throw;
      const std::string what = py::str(e.value());
      throw PyStoreFailure(kind, what, std::make_shared<PyOwner>(e.value().ptr()));
    }
  }

  // The kind of failure of an entry that is not what the protocol allows.
  std::string entry_error(const py::handle& item) const {
    std::string kind = store_error_kind(item, error_cls_);
    if (!kind.empty()) return kind;
    if (!is_bool(item) && PyLong_Check(item.ptr()) != 0) {
      int overflow = 0;
      const long long n = PyLong_AsLongLongAndOverflow(item.ptr(), &overflow);
      if (overflow < 0 || (overflow == 0 && n < 0)) return "server";  // an error code
    }
    return "protocol";
  }

  // The per-key failures a store reports beside its entries (kvkey.stores.Replies.errors:
  // position -> StoreError); each one fails its key alone.
  template <class T>
  void key_errors(const py::object& reply, std::vector<T>& out) const {
    const py::object errors = py::getattr(reply, "errors", py::none());
    if (errors.is_none() || !PyDict_Check(errors.ptr())) return;
    for (const auto& item : py::reinterpret_borrow<py::dict>(errors)) {
      if (PyLong_Check(item.first.ptr()) == 0) continue;
      const long long i = PyLong_AsLongLong(item.first.ptr());
      if (i < 0 || static_cast<std::size_t>(i) >= out.size()) {
        PyErr_Clear();
        continue;
      }
      std::string kind = store_error_kind(item.second, error_cls_);
      fail(out[static_cast<std::size_t>(i)], kind.empty() ? std::string("protocol") : std::move(kind));
    }
  }
  static void fail(kvkey::StoreValue& v, std::string kind) { v = kvkey::StoreValue::failed(std::move(kind)); }
  static void fail(kvkey::StoreWrite& w, std::string kind) {
    w.stored = false;
    w.error = std::move(kind);
  }

  // Calls f(item) for each entry of a reply that must be a list or tuple of n entries.
  template <class F>
  void each(const py::object& reply, std::size_t n, const char* call, F&& f) const {
    if (!PyList_Check(reply.ptr()) && !PyTuple_Check(reply.ptr())) {
      if (PyCoro_CheckExact(reply.ptr())) {  // never awaited: closed, and the store named for what it is
        reply.attr("close")();
        throw kvkey::store_error("protocol", std::string(call) +
                                                 " answered a coroutine, not a list: an asyncio store, for "
                                                 "kvkey.aio.Connector");
      }
      throw kvkey::store_error("protocol", std::string(call) + " answered a " + type_name(reply) + ", not a list");
    }
    const py::sequence seq = py::reinterpret_borrow<py::sequence>(reply);
    if (seq.size() != n) {
      throw kvkey::store_error("protocol", std::string(call) + " returned " + std::to_string(seq.size()) +
                                               " replies for " + std::to_string(n) + " keys");
    }
    for (std::size_t i = 0; i < n; ++i) f(seq[i]);
  }

  // A get / get_prefix reply: None, bytes (a Prefix with its total_size), another
  // buffer (copied unless the store hands its values over), or a key's failure.
  std::vector<kvkey::StoreValue> values(const py::object& reply, std::size_t n, const char* call) {
    std::vector<kvkey::StoreValue> out;
    out.reserve(n);
    each(reply, n, call, [&](const py::handle& item) {
      kvkey::StoreValue v;
      PyObject* o = item.ptr();
      if (item.is_none()) {
        out.push_back(std::move(v));
        return;
      }
      py::object held = py::reinterpret_borrow<py::object>(item);
      if (!PyBytes_Check(o) && PyObject_CheckBuffer(o) && !PyUnicode_Check(o) && !owned_values_) {
        // Bytes the store may reuse: copied before anything verifies them.
        const ByteString b(item, "value", ByteString::Str::refuse);
        held = py::bytes(b.view().data(), b.view().size());
        o = held.ptr();
      }
      if (PyBytes_Check(o)) {
        auto owner = std::make_shared<PyOwner>(o);
        v.present = true;
        v.data = reinterpret_cast<const std::uint8_t*>(PyBytes_AS_STRING(o));
        v.size = static_cast<std::size_t>(PyBytes_GET_SIZE(o));
        v.owner = std::move(owner);
      } else if (PyObject_CheckBuffer(o) && !PyUnicode_Check(o)) {
        auto owner = std::make_shared<PyOwner>(o);
        if (PyObject_GetBuffer(o, &owner->buf, PyBUF_C_CONTIGUOUS) != 0) {
          PyErr_Clear();
          v.error = "protocol";
          out.push_back(std::move(v));
          return;
        }
        owner->has_buf = true;
        v.present = true;
        v.data = static_cast<const std::uint8_t*>(owner->buf.buf);
        v.size = static_cast<std::size_t>(owner->buf.len);
        v.owner = std::move(owner);
      } else {
        v.error = entry_error(item);
        out.push_back(std::move(v));
        return;
      }
      const py::object total = py::getattr(item, "total_size", py::none());
      if (!total.is_none()) {
        if (is_bool(total) || PyLong_Check(total.ptr()) == 0) {
          v = kvkey::StoreValue::failed("protocol");
        } else {
          int overflow = 0;
          const long long t = PyLong_AsLongLongAndOverflow(total.ptr(), &overflow);
          unsigned long long u = 0;
          if (overflow > 0) {
            u = PyLong_AsUnsignedLongLong(total.ptr());
            if (PyErr_Occurred() != nullptr) {
              PyErr_Clear();
              v = kvkey::StoreValue{};  // 2^64 or more: no such value, a miss
            } else {
              v.total_size = u;
            }
          } else if (overflow < 0 || t < 0) {
            v = kvkey::StoreValue::failed("protocol");
          } else {
            v.total_size = static_cast<std::uint64_t>(t);
          }
        }
      }
      out.push_back(std::move(v));
    });
    key_errors(reply, out);
    return out;
  }

  py::object store_;
  py::object error_cls_;
  bool owned_values_ = false;
  bool has_prefix_ = false;
  bool has_exists_ = false;
  bool has_into_ = false;
  bool has_registered_ = false;
  bool has_register_ = false;
};

// A buffer argument held for the length of a call: read-only (payloads) or writable (destinations).
struct HeldBuffer {
  Py_buffer buf{};
  bool held = false;
  HeldBuffer(const py::handle& obj, const std::string& field, bool writable) {
    const int flags = writable ? (PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) : PyBUF_C_CONTIGUOUS;
    if (PyUnicode_Check(obj.ptr()) || PyObject_GetBuffer(obj.ptr(), &buf, flags) != 0) {
      PyErr_Clear();
      throw py::type_error(
          field +
          (writable ? " must be a writable, C-contiguous buffer" : " must be a C-contiguous bytes-like object") +
          ", not " + type_name(obj));
    }
    held = true;
  }
  HeldBuffer(const HeldBuffer&) = delete;
  HeldBuffer& operator=(const HeldBuffer&) = delete;
  HeldBuffer(HeldBuffer&& o) noexcept : buf(o.buf), held(o.held) { o.held = false; }
  HeldBuffer& operator=(HeldBuffer&&) = delete;
  ~HeldBuffer() {
    if (held) PyBuffer_Release(&buf);
  }
};

// One block's buffers: a buffer, or a list / tuple of buffers (per-layer K and V).
inline bool is_parts(const py::handle& obj) { return PyList_Check(obj.ptr()) || PyTuple_Check(obj.ptr()); }

template <class F>
void each_part(const py::handle& obj, const std::string& field, F&& f) {
  if (!is_parts(obj)) {
    f(obj, field);
    return;
  }
  const py::sequence seq = py::reinterpret_borrow<py::sequence>(obj);
  for (std::size_t i = 0; i < seq.size(); ++i) f(seq[i], indexed(field, i));
}

// Payload arguments: per block one buffer or a list of parts, held while the call runs (a
// part that is not C-contiguous is copied in logical order, as bytes(memoryview(p)) would).
struct HeldPayloads {
  std::deque<ByteString> held;
  std::vector<std::vector<kvkey::ConstBuffer>> parts;
  std::vector<kvkey::Payload> payloads;
  HeldPayloads(const py::handle& obj, const std::string& field) {
    for_each_item(obj, field, "a list of payloads (buffers, or lists of buffers)",
                  [&](const py::handle& item, std::size_t i) {
                    parts.emplace_back();
                    each_part(item, indexed(field, i), [&](const py::handle& p, const std::string& f) {
                      held.emplace_back(p, f, ByteString::Str::refuse, "bytes-like (the KV bytes)");
                      parts.back().push_back({held.back().data(), held.back().size()});
                    });
                  });
    payloads.reserve(parts.size());
    for (const auto& p : parts) payloads.emplace_back(p.data(), p.size());
  }
};

struct HeldDestinations {
  std::deque<HeldBuffer> held;
  std::vector<std::vector<kvkey::MutableBuffer>> parts;
  HeldDestinations(const py::handle& obj, const std::string& field) {
    for_each_item(obj, field, "a list of buffers (or lists of buffers)", [&](const py::handle& item, std::size_t i) {
      parts.emplace_back();
      each_part(item, indexed(field, i), [&](const py::handle& p, const std::string& f) {
        held.emplace_back(p, f, true);
        parts.back().push_back({held.back().buf.buf, static_cast<std::size_t>(held.back().buf.len)});
      });
    });
  }
};

template <class Ns, class VerdictT>
class PyConnector {
 public:
  using Core = kvkey::Connector<kvkey::AnyKeyNamespace>;

  PyConnector(const py::object& store, const py::object& ranks, const py::object& metrics,
              const py::object& payload_size, bool raise_errors, std::size_t lookup_batch, const py::object& log,
              double log_interval, unsigned digest_threads)
      : store_(std::make_shared<PyStore>(store)),
        recorder_(std::make_shared<PyOwner>(metrics.ptr())),
        log_(std::make_shared<PyOwner>(log.ptr())) {
    std::vector<Ns> namespaces;
    for_each_item(ranks, "ns", "a KeyNamespace or a list of them", [&](const py::handle& item, std::size_t i) {
      if (!py::isinstance<Ns>(item)) {
        throw py::type_error("Connector: ns[" + std::to_string(i) + "] is a " + type_name(item) +
                             ", expected kvkey.KeyNamespace");
      }
      namespaces.push_back(item.cast<const Ns&>());
    });
    typename Core::Options opt;
    if (!payload_size.is_none()) opt.payload_size = to_uint<std::uint64_t>(payload_size, "payload_size");
    opt.raise_errors = raise_errors;
    opt.lookup_batch = lookup_batch;
    opt.digest_threads = digest_threads;
    if (py::isinstance<kvkey::Metrics>(metrics)) {
      opt.metrics = &metrics.cast<kvkey::Metrics&>();  // recorded without the GIL; recorder_ keeps it alive
    } else if (!metrics.is_none()) {
      opt.observer = [rec = recorder_](const kvkey::ConnectorCall& c) { replay(rec->obj, c); };
    }
    if (!log.is_none()) {
      opt.log = [l = log_](const kvkey::StoreFailureLog& line) {
        py::gil_scoped_acquire gil;
        py::handle(l->obj)(line.kind, line.count, line.total, line.message);
      };
    }
    opt.log_interval = std::chrono::milliseconds(static_cast<long long>(log_interval * 1000));
    core_ = std::make_unique<Core>(*store_, std::move(namespaces), std::move(opt));
  }

  std::size_t save(const py::object& hashes, const py::object& payloads, std::size_t rank) {
    const std::vector<kvkey::Digest> blocks = to_digests(hashes, "block_hashes");
    const HeldPayloads held(payloads, "payloads");
    return guarded([&] { return core_->save(blocks, held.payloads, rank); });
  }

  // save through the staging Slots (gathered there, sealed, written from there).
  std::size_t save_staged(const py::object& hashes, const py::object& payloads, const py::object& staging,
                          const py::object& indices, std::size_t rank) {
    const std::vector<kvkey::Digest> blocks = to_digests(hashes, "block_hashes");
    const HeldPayloads held(payloads, "payloads");
    const kvkey::Slots s = to_slots(staging);
    const std::vector<std::size_t> idx = to_indices(indices);
    return guarded([&] { return core_->save(blocks, held.payloads, s, idx, rank); });
  }

  std::size_t lookup(const py::object& hashes, const py::object& max_tokens, bool existing) {
    const std::vector<kvkey::Digest> blocks = to_digests(hashes, "block_hashes");
    std::optional<std::size_t> cap;
    if (!max_tokens.is_none()) cap = to_uint<std::size_t>(max_tokens, "max_tokens");
    return guarded([&] { return existing ? core_->lookup_existing(blocks, cap) : core_->lookup(blocks, cap); });
  }

  // [memoryview of the verified payload, or None] per block.
  py::list load(const py::object& hashes, std::size_t rank) {
    const std::vector<kvkey::Digest> blocks = to_digests(hashes, "block_hashes");
    std::vector<kvkey::LoadedView> views = guarded([&] { return core_->load_views(blocks, rank); });
    py::list out(views.size());
    for (std::size_t i = 0; i < views.size(); ++i) {
      if (!views[i].result.loaded()) {
        out[i] = py::none();
        continue;
      }
      const auto* owner = dynamic_cast<const PyOwner*>(views[i].owner.get());
      py::object mv;
      if (owner != nullptr && owner->obj != nullptr) {
        const auto* base = static_cast<const std::uint8_t*>(
            owner->has_buf ? owner->buf.buf : static_cast<void*>(PyBytes_AS_STRING(owner->obj)));
        const auto begin = static_cast<const std::uint8_t*>(views[i].payload.data) - base;
        mv = py::reinterpret_steal<py::object>(PyMemoryView_FromObject(owner->obj));
        if (!mv) throw py::error_already_set();
        if (py::cast<std::string>(mv.attr("format")) != "B" || py::cast<int>(mv.attr("ndim")) != 1) {
          mv = mv.attr("cast")("B");
        }
        mv = mv[py::slice(begin, begin + static_cast<Py_ssize_t>(views[i].payload.size), 1)].attr("toreadonly")();
      } else {
        mv = py::memoryview(py::bytes(static_cast<const char*>(views[i].payload.data), views[i].payload.size));
      }
      out[i] = mv;
    }
    return out;
  }

  // (status, Verdict or None, nbytes) per block.
  py::list load_into(const py::object& hashes, const py::object& buffers, std::size_t rank) {
    const std::vector<kvkey::Digest> blocks = to_digests(hashes, "block_hashes");
    const HeldDestinations dest(buffers, "buffers");
    if (dest.parts.size() != blocks.size()) {
      throw kvkey::input_error("buffers", "load_into: " + std::to_string(blocks.size()) + " block hashes but " +
                                              std::to_string(dest.parts.size()) + " buffers");
    }
    return results(guarded([&] { return core_->load_into(blocks, dest.parts, rank); }));
  }
  // load_into the buffers through the staging Slots (read and verified there, then copied).
  py::list load_into_staged(const py::object& hashes, const py::object& buffers, const py::object& staging,
                            const py::object& indices, std::size_t rank) {
    const std::vector<kvkey::Digest> blocks = to_digests(hashes, "block_hashes");
    const HeldDestinations dest(buffers, "buffers");
    if (dest.parts.size() != blocks.size()) {
      throw kvkey::input_error("buffers", "load_into: " + std::to_string(blocks.size()) + " block hashes but " +
                                              std::to_string(dest.parts.size()) + " buffers");
    }
    const kvkey::Slots s = to_slots(staging);
    const std::vector<std::size_t> idx = to_indices(indices);
    return results(guarded([&] { return core_->load_into(blocks, dest.parts, s, idx, rank); }));
  }

  // (status, Verdict or None, nbytes) per block.
  static py::list results(const std::vector<kvkey::LoadResult>& res) {
    py::list out(res.size());
    static const char* const names[] = {"loaded", "missing", "rejected"};
    for (std::size_t i = 0; i < res.size(); ++i) {
      const py::object verdict = res[i].status == kvkey::LoadResult::Status::missing
                                     ? py::object(py::none())
                                     : py::cast(VerdictT{res[i].verdict});
      out[i] = py::make_tuple(names[static_cast<int>(res[i].status)], verdict, res[i].nbytes);
    }
    return out;
  }

  // The zero-copy path over a kvkey.Slots: count slots of payload_size-byte
  // payloads at address (memory the Python Slots holds and registered).
  std::size_t save_from(const py::object& hashes, const py::object& slots, const py::object& indices,
                        std::size_t rank) {
    const std::vector<kvkey::Digest> blocks = to_digests(hashes, "block_hashes");
    const kvkey::Slots s = to_slots(slots);
    const std::vector<std::size_t> idx = to_indices(indices);
    return guarded([&] { return core_->save_from(blocks, s, idx, rank); });
  }
  py::list load_into_slots(const py::object& hashes, const py::object& slots, const py::object& indices,
                           std::size_t rank) {
    const std::vector<kvkey::Digest> blocks = to_digests(hashes, "block_hashes");
    const kvkey::Slots s = to_slots(slots);
    const std::vector<std::size_t> idx = to_indices(indices);
    return results(guarded([&] { return core_->load_into(blocks, s, idx, rank); }));
  }

  py::object last_error() const {
    const std::exception_ptr e = core_->last_error();
    if (!e) return py::none();
    try {
      std::rethrow_exception(e);
    } catch (const PyStoreFailure& f) {
      return py::reinterpret_borrow<py::object>(f.exception());
    } catch (const kvkey::store_error& f) {
      return store_error_class()(std::string(f.kind()), std::string(f.what()));
    }
  }
  void clear_last_error() const { core_->clear_last_error(); }
  std::optional<std::uint64_t> payload_size(std::size_t rank) const { return core_->payload_size(rank); }

 private:
  // A kvkey.Slots (its address, count and payload_size) as kvkey::Slots over its memory.
  static kvkey::Slots to_slots(const py::object& slots) {
    const auto address = to_uint<std::uintptr_t>(slots.attr("memory_address"), "slots.memory_address");
    const auto count = to_uint<std::size_t>(slots.attr("count"), "slots.count");
    const auto payload = to_uint<std::uint64_t>(slots.attr("payload_size"), "slots.payload_size");
    const std::size_t stride = kvkey::value_size(payload);
    if (count == 0 || count > std::numeric_limits<std::size_t>::max() / stride) {
      throw kvkey::input_error("slots",
                               "Slots: " + std::to_string(count) + " slots of " + std::to_string(stride) + " bytes");
    }
    auto memory = std::make_shared<kvkey::RegisteredMemory>(
        kvkey::MutableBuffer{reinterpret_cast<void*>(address), count * stride});
    return kvkey::Slots(std::move(memory), count, payload);
  }
  static std::vector<std::size_t> to_indices(const py::object& indices) {
    std::vector<std::size_t> out;
    if (indices.is_none()) return out;
    for_each_item(indices, "indices", "a list of slot indices", [&](const py::handle& item, std::size_t i) {
      out.push_back(to_uint<std::size_t>(item, indexed("indices", i)));
    });
    return out;
  }

  template <class F>
  auto guarded(F&& f) -> decltype(f()) {
    try {
      py::gil_scoped_release release;
      return f();
    } catch (const PyStoreFailure& e) {
      PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(e.exception())), e.exception());
      throw py::error_already_set();
    } catch (const kvkey::store_error& e) {
      const py::object exc = store_error_class()(std::string(e.kind()), std::string(e.what()));
      PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(exc.ptr())), exc.ptr());
      throw py::error_already_set();
    }
  }

  // Records a call in a Python recorder with the methods of kvkey.Metrics, as ConnectorCall::record does.
  static void replay(PyObject* rec, const kvkey::ConnectorCall& c) {
    py::gil_scoped_acquire gil;
    const py::handle r(rec);
    const auto rejections = [&] {
      for (const kvkey::Verdict& v : c.rejections) r.attr("record_rejection")(VerdictT{v});
    };
    if (c.op == kvkey::ConnectorCall::Op::lookup) {
      rejections();
      r.attr("record_lookup")(c.counts[0], c.counts[1], c.counts[2]);
    } else if (c.op == kvkey::ConnectorCall::Op::load) {
      r.attr("record_load")(c.counts[0], c.counts[1], c.counts[2]);
      rejections();
      if (c.false_hits != 0) r.attr("record_false_hits")(c.false_hits);
      if (c.payload_bytes != 0) r.attr("record_payload_bytes")(c.payload_bytes);
    } else {
      r.attr("record_save")(c.counts[0], c.counts[1]);
    }
    for (const std::string& k : c.store_errors) r.attr("record_store_error")(k);
  }

  std::shared_ptr<PyStore> store_;
  std::shared_ptr<PyOwner> recorder_;
  std::shared_ptr<PyOwner> log_;
  std::unique_ptr<Core> core_;
};

template <class Ns, class VerdictT>
void bind_connector(py::module_& m) {
  using C = PyConnector<Ns, VerdictT>;
  py::class_<C>(m, "_Connector", "kvkey::Connector over a Python store (wrapped by kvkey.Connector).")
      .def(py::init<const py::object&, const py::object&, const py::object&, const py::object&, bool, std::size_t,
                    const py::object&, double, unsigned>(),
           py::arg("store"), py::arg("ranks"), py::arg("metrics"), py::arg("payload_size"), py::arg("raise_errors"),
           py::arg("lookup_batch"), py::arg("log"), py::arg("log_interval"), py::arg("digest_threads") = 1)
      .def("save", &C::save)
      .def("save_staged", &C::save_staged)
      .def("lookup", &C::lookup)
      .def("load", &C::load)
      .def("load_into", &C::load_into)
      .def("save_from", &C::save_from)
      .def("load_into_slots", &C::load_into_slots)
      .def("load_into_staged", &C::load_into_staged)
      .def("last_error", &C::last_error)
      .def("clear_last_error", &C::clear_last_error)
      .def("payload_size", &C::payload_size);
}

}  // namespace kvkey_python

#endif  // KVKEY_PYTHON_BIND_CONNECTOR_HPP
