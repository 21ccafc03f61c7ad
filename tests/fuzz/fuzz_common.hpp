// Shared pieces of the libFuzzer targets and the seed-corpus generator.
#ifndef KVKEY_TESTS_FUZZ_COMMON_HPP
#define KVKEY_TESTS_FUZZ_COMMON_HPP

#include <kvkey/hmac.hpp>
#include <kvkey/kvkey.hpp>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "support/fixtures.hpp"

namespace kvkey_fuzz {

/// A broken invariant: print it and abort, which libFuzzer reports as a crash
/// and saves the input.
[[noreturn]] inline void fail(const char* what) {
  std::fprintf(stderr, "kvkey fuzz invariant violated: %s\n", what);
  std::abort();
}
inline void require(bool ok, const char* what) {
  if (!ok) fail(what);
}

/// The identity the envelope target verifies against: every optional present,
/// so that header edits reach every field.
inline kvkey::Identity fixture_identity() {
  kvkey::Identity id =
      kvkey_test::with_optionals(kvkey_test::make_identity("fuzz-tenant", "org/model@v1 %20", "0123456789abcdef",
                                                           {kvkey::KvDtype::int4, 4, 8, 4, 32, "fuzz.v1"}),
                                 {kvkey::KvDtype::int4, "weights", "scales", "lora", "adapter"});
  id.model.weights_epoch = 7;
  id.shard.tp_size = 2;
  id.shard.tp_rank = 1;
  return id;
}
inline const char* fixture_secret() { return "fuzz-secret-0123456789abcdef0123456789"; }
inline constexpr std::uint64_t fixture_payload = 4096;

/// The fixture_payload bytes every envelope seed and check uses.
inline kvkey::Payload fixture_payload_bytes() {
  static const std::vector<std::uint8_t> bytes = [] {
    std::vector<std::uint8_t> b(fixture_payload);
    for (std::size_t i = 0; i < b.size(); ++i) b[i] = static_cast<std::uint8_t>(i * 7 + 1);
    return b;
  }();
  return {bytes.data(), bytes.size()};
}
inline const std::vector<std::uint32_t>& fixture_tokens() {
  static const std::vector<std::uint32_t> t{1, 2, 3, 4, 5, 6, 7, 8};
  return t;
}

// ---- the identity target's input format ---------------------------------------
// Each field of visit_identity_fields, then the shard and the policy, read from
// the fuzz bytes (zeros once they run out). Small integers take one byte; 0xff
// escapes to the full width.

class FieldReader {
 public:
  FieldReader(const std::uint8_t* p, std::size_t n) : p_(p), n_(n) {}
  std::uint8_t byte() { return pos_ < n_ ? p_[pos_++] : 0; }
  void operator()(std::string_view, std::string& s) {
    const std::size_t len = byte() % 160;  // beyond every limit, to reach the length checks
    s.clear();
    for (std::size_t i = 0; i < len; ++i) s.push_back(static_cast<char>(byte()));
  }
  void operator()(std::string_view, std::uint32_t& v) { v = static_cast<std::uint32_t>(wide(4)); }
  void operator()(std::string_view, std::uint64_t& v) { v = wide(8); }
  void operator()(std::string_view, bool& v) { v = (byte() & 1) != 0; }
  void operator()(std::string_view, kvkey::KvDtype& d) { d = static_cast<kvkey::KvDtype>(byte()); }
  void operator()(std::string_view, kvkey::Digest& d) {
    for (std::size_t i = 0; i < kvkey::Digest::size_bytes; ++i) d[i] = byte();
  }
  template <class T>
  void operator()(std::string_view path, std::optional<T>& v) {
    if ((byte() & 1) == 0) {
      v.reset();
      return;
    }
    fill(path, v.emplace());
  }

 private:
  std::uint64_t wide(int bytes) {
    const std::uint8_t b = byte();
    if (b != 0xff) return b;
    std::uint64_t v = 0;
    for (int i = 0; i < bytes; ++i) v |= std::uint64_t{byte()} << (8 * i);
    return v;
  }
  void fill(std::string_view path, kvkey::KvDtype& d) { (*this)(path, d); }
  void fill(std::string_view path, kvkey::Digest& d) { (*this)(path, d); }
  void fill(std::string_view, kvkey::Adapter& a) { kvkey::visit_adapter_fields(a, *this); }

  const std::uint8_t* p_;
  std::size_t n_;
  std::size_t pos_ = 0;
};

/// The inverse of FieldReader, for seeds: bytes that read back as `value`.
class FieldWriter {
 public:
  std::vector<std::uint8_t> out;
  void operator()(std::string_view, const std::string& s) {
    out.push_back(static_cast<std::uint8_t>(s.size()));
    out.insert(out.end(), s.begin(), s.end());
  }
  void operator()(std::string_view, std::uint32_t v) { wide(v, 4); }
  void operator()(std::string_view, std::uint64_t v) { wide(v, 8); }
  void operator()(std::string_view, bool v) { out.push_back(v ? 1 : 0); }
  void operator()(std::string_view, kvkey::KvDtype d) { out.push_back(static_cast<std::uint8_t>(d)); }
  void operator()(std::string_view, const kvkey::Digest& d) { out.insert(out.end(), d.begin(), d.end()); }
  template <class T>
  void operator()(std::string_view path, const std::optional<T>& v) {
    out.push_back(v ? 1 : 0);
    if (v) put(path, *v);
  }

 private:
  void wide(std::uint64_t v, int bytes) {
    if (v < 0xff) {
      out.push_back(static_cast<std::uint8_t>(v));
      return;
    }
    out.push_back(0xff);
    for (int i = 0; i < bytes; ++i) out.push_back(static_cast<std::uint8_t>(v >> (8 * i)));
  }
  void put(std::string_view path, kvkey::KvDtype d) { (*this)(path, d); }
  void put(std::string_view path, const kvkey::Digest& d) { (*this)(path, d); }
  void put(std::string_view, const kvkey::Adapter& a) { kvkey::visit_adapter_fields(a, *this); }
};

/// Reads an identity, its shard and a policy in the identity target's format.
struct FuzzedIdentity {
  kvkey::Identity id;
  kvkey::Policy policy;
};
inline FuzzedIdentity read_identity(const std::uint8_t* data, std::size_t size) {
  FieldReader in(data, size);
  FuzzedIdentity f;
  kvkey::visit_identity_fields(f.id, in);
  in("shard.tp_size", f.id.shard.tp_size);
  in("shard.tp_rank", f.id.shard.tp_rank);
  in("shard.pp_size", f.id.shard.pp_size);
  in("shard.pp_rank", f.id.shard.pp_rank);
  bool single = false;
  in("policy", single);
  if (single) f.policy = kvkey::single_tenant;
  return f;
}
inline std::vector<std::uint8_t> write_identity(const kvkey::Identity& id, bool single_tenant) {
  FieldWriter out;
  kvkey::visit_identity_fields(id, out);
  out("shard.tp_size", id.shard.tp_size);
  out("shard.tp_rank", id.shard.tp_rank);
  out("shard.pp_size", id.shard.pp_size);
  out("shard.pp_rank", id.shard.pp_rank);
  out("policy", single_tenant);
  return out.out;
}

}  // namespace kvkey_fuzz

#endif  // KVKEY_TESTS_FUZZ_COMMON_HPP
