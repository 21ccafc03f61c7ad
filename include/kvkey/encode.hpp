// SPDX-License-Identifier: Apache-2.0
// The canonical identity encoding (docs/format.md, "Identity encoding"):
// encode_identity, decode_identity, and the per-field view that names the
// first difference between two identities. A KeyNamespace encodes its identity
// itself; reach for this header to inspect or compare encodings.
#ifndef KVKEY_ENCODE_HPP
#define KVKEY_ENCODE_HPP

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <type_traits>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kvkey/buffer.hpp"
#include "kvkey/config.hpp"
#include "kvkey/detail/endian.hpp"
#include "kvkey/digest.hpp"
#include "kvkey/identity.hpp"

KVKEY_BEGIN_NAMESPACE

/// The 8 ASCII bytes that open every identity encoding (docs/format.md).
inline constexpr char identity_tag[8] = {'k', 'v', 'k', 'e', 'y', '.', 'i', 'd'};

namespace detail {
// The most bytes one member of type T (of kind-limit `limit`) encodes to.
template <class T>
constexpr std::size_t max_encoded_size(std::size_t limit) {
  if constexpr (is_identity_part_v<T>) {
    std::size_t n = 0;
    for_each_field<T>([&n](const auto& info) {
      using M = typename std::decay_t<decltype(info)>::type;
      if ((info.flags & field_not_salient) == 0) n += max_encoded_size<M>(info.limit);
    });
    return n;
  } else if constexpr (std::is_same_v<T, std::string>) {
    return 4 + limit;  // u32 length, then the bytes
  } else if constexpr (std::is_same_v<T, Digest>) {
    return Digest::size_bytes;
  } else if constexpr (std::is_same_v<T, std::optional<Digest>> || std::is_same_v<T, std::optional<KvDtype>> ||
                       std::is_same_v<T, std::optional<Adapter>>) {
    return 1 + max_encoded_size<typename T::value_type>(limit);  // presence byte
  } else {
    static_assert(std::is_integral_v<T> || std::is_enum_v<T>, "a member type the encoder does not know");
    return sizeof(T);
  }
}
}  // namespace detail

/// The largest identity encoding a valid identity can have (all strings at
/// their limits, every optional present), from the field table. It bounds
/// envelope_size.
inline constexpr std::size_t max_identity_encoding_size =
    sizeof identity_tag + 2 + detail::max_encoded_size<Identity>(0);  // tag, format version, the fields

namespace detail {

// ---- primitives: fixed-width little-endian integers, framed strings ----------
// (byte order: kvkey/detail/endian.hpp)

inline void put_u8(Bytes& out, std::uint8_t v) { out.push_back(v); }
template <class U>
void put_le(Bytes& out, U v) {
  std::uint8_t b[sizeof(U)];
  store_le(b, v);
  out.insert(out.end(), b, b + sizeof b);
}
inline void put_u16(Bytes& out, std::uint16_t v) { put_le(out, v); }
inline void put_u32(Bytes& out, std::uint32_t v) { put_le(out, v); }
inline void put_u64(Bytes& out, std::uint64_t v) { put_le(out, v); }
inline void put_bytes(Bytes& out, const void* p, std::size_t n) {
  const auto* b = static_cast<const std::uint8_t*>(p);
  out.insert(out.end(), b, b + n);
}
inline void put_str(Bytes& out, std::string_view s) {
  put_u32(out, static_cast<std::uint32_t>(s.size()));
  put_bytes(out, s.data(), s.size());
}

/// Bounds-checked reader over untrusted bytes. Every get_* returns false (and
/// the reader stays failed) instead of reading past the end.
class Reader {
 public:
  Reader(const std::uint8_t* p, std::size_t n) noexcept : p_(p), n_(n) {}
  bool ok() const noexcept { return ok_; }
  std::size_t remaining() const noexcept { return n_ - pos_; }
  bool take(std::size_t k, const std::uint8_t*& out) noexcept {
    if (!ok_ || k > remaining()) return ok_ = false;
    out = p_ + pos_;
    pos_ += k;
    return true;
  }
  bool get_u8(std::uint8_t& v) noexcept {
    const std::uint8_t* b;
    if (!take(1, b)) return false;
    v = b[0];
    return true;
  }
  bool get_u32(std::uint32_t& v) noexcept {
    const std::uint8_t* b;
    if (!take(4, b)) return false;
    v = load_u32(b);
    return true;
  }
  bool get_u64(std::uint64_t& v) noexcept {
    const std::uint8_t* b;
    if (!take(8, b)) return false;
    v = load_u64(b);
    return true;
  }
  bool fail() noexcept { return ok_ = false; }

 private:
  const std::uint8_t* p_;
  std::size_t n_;
  std::size_t pos_ = 0;
  bool ok_ = true;
};

// ---- one field: the encoder, the decoder ------------------------------------

struct FieldEncoder {
  Bytes& out;
  void operator()(std::string_view, const std::string& s) const { put_str(out, s); }
  void operator()(std::string_view, std::uint32_t v) const { put_u32(out, v); }
  void operator()(std::string_view, std::uint64_t v) const { put_u64(out, v); }
  void operator()(std::string_view, bool v) const { put_u8(out, v ? 1 : 0); }
  void operator()(std::string_view, KvDtype d) const { put_u8(out, static_cast<std::uint8_t>(d)); }
  void operator()(std::string_view, const Digest& d) const { put_bytes(out, d.data(), d.size()); }
  template <class T>
  void operator()(std::string_view path, const std::optional<T>& v) const {
    put_u8(out, v ? 1 : 0);
    if (v) present(path, *v);
  }

 private:
  void present(std::string_view path, const KvDtype& d) const { (*this)(path, d); }
  void present(std::string_view path, const Digest& d) const { (*this)(path, d); }
  void present(std::string_view, const Adapter& a) const { visit_adapter_fields(a, *this); }
};

struct FieldDecoder {
  Reader& in;
  // Strings longer than this cannot be valid (limits:: bounds all of them).
  static constexpr std::uint32_t max_string = 1024;

  bool operator()(std::string_view, std::string& s) const {
    std::uint32_t n;
    const std::uint8_t* b;
    if (!in.get_u32(n) || n > max_string || !in.take(n, b)) return in.fail();
    s.assign(reinterpret_cast<const char*>(b), n);
    return true;
  }
  bool operator()(std::string_view, std::uint32_t& v) const { return in.get_u32(v); }
  bool operator()(std::string_view, std::uint64_t& v) const { return in.get_u64(v); }
  bool operator()(std::string_view, bool& v) const {
    std::uint8_t b;
    if (!in.get_u8(b) || b > 1) return in.fail();
    v = b == 1;
    return true;
  }
  bool operator()(std::string_view, KvDtype& d) const {
    std::uint8_t b;
    if (!in.get_u8(b)) return false;
    d = static_cast<KvDtype>(b);
    return is_valid(d) || in.fail();
  }
  bool operator()(std::string_view, Digest& d) const {
    const std::uint8_t* b;
    if (!in.take(Digest::size_bytes, b)) return false;
    std::memcpy(d.data(), b, Digest::size_bytes);
    return true;
  }
  template <class T>
  bool operator()(std::string_view path, std::optional<T>& v) const {
    std::uint8_t present;
    if (!in.get_u8(present) || present > 1) return in.fail();
    if (present == 0) {
      v.reset();
      return true;
    }
    return fill(path, v.emplace());
  }

 private:
  bool fill(std::string_view path, KvDtype& d) const { return (*this)(path, d); }
  bool fill(std::string_view path, Digest& d) const { return (*this)(path, d); }
  bool fill(std::string_view, Adapter& a) const {
    visit_adapter_fields(a, [this](std::string_view p, auto& m) { (*this)(p, m); });
    return in.ok();
  }
};

}  // namespace detail

/// The canonical encoding of a (validated) identity: identity_tag, the format
/// version (u16le), then every field of visit_identity_fields in order. The
/// shard is not part of it. docs/format.md specifies every byte.
[[nodiscard]] inline Bytes encode_identity(const Identity& id) {
  Bytes out;
  out.reserve(256);
  detail::put_bytes(out, identity_tag, sizeof identity_tag);
  detail::put_u16(out, format_version);
  visit_identity_fields(id, detail::FieldEncoder{out});
  return out;
}

/// Parses an identity encoding produced by encode_identity. Returns nullopt if
/// the bytes are not exactly one well-formed encoding of the current format
/// version. The result's shard is left at its defaults. Never reads out of bounds.
[[nodiscard]] inline std::optional<Identity> decode_identity(const std::uint8_t* data, std::size_t size) {
  detail::Reader in(data, size);
  const std::uint8_t* tag;
  if (!in.take(sizeof identity_tag, tag) || std::memcmp(tag, identity_tag, sizeof identity_tag) != 0) {
    return std::nullopt;
  }
  const std::uint8_t* ver;
  if (!in.take(2, ver) || detail::load_u16(ver) != format_version) return std::nullopt;
  Identity id;
  visit_identity_fields(id, [&in](std::string_view p, auto& m) { detail::FieldDecoder{in}(p, m); });
  if (!in.ok() || in.remaining() != 0) return std::nullopt;
  return id;
}

/// One salient field and its encoded bytes.
struct EncodedField {
  std::string_view path;  ///< dotted path, e.g. "kv.quant.group_size" (static storage)
  Bytes bytes;            ///< the field's bytes in the canonical encoding
};

namespace detail {
struct Flattener {
  std::vector<EncodedField>& fields;
  template <class T>
  void operator()(std::string_view path, const T& v) const {
    Bytes b;
    FieldEncoder{b}(path, v);
    fields.push_back({path, std::move(b)});
  }
  void operator()(std::string_view path, const std::optional<Adapter>& a) const {
    fields.push_back({path, Bytes{static_cast<std::uint8_t>(a ? 1 : 0)}});
    if (a) visit_adapter_fields(*a, *this);
  }
};
}  // namespace detail

/// The identity as a flat list of (path, bytes), in encoding order; the adapter
/// contributes "adapter" (its presence byte) and, when present, its members.
/// Concatenating the bytes after the tag and version gives encode_identity.
/// The mismatch report and the tests walk this list.
[[nodiscard]] inline std::vector<EncodedField> encoded_fields(const Identity& id) {
  std::vector<EncodedField> fields;
  visit_identity_fields(id, detail::Flattener{fields});
  return fields;
}

/// The dotted path of the first salient field in which a and b differ, or an
/// empty view when they encode the same.
[[nodiscard]] inline std::string_view first_difference(const Identity& a, const Identity& b) {
  const auto fa = encoded_fields(a);
  const auto fb = encoded_fields(b);
  const std::size_t n = fa.size() < fb.size() ? fa.size() : fb.size();
  for (std::size_t i = 0; i < n; ++i) {
    if (fa[i].bytes != fb[i].bytes) return fa[i].path;
  }
  if (fa.size() != fb.size()) return "adapter";  // unreachable: presence byte differs first
  return {};
}

KVKEY_END_NAMESPACE

#endif  // KVKEY_ENCODE_HPP
