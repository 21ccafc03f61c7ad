// SPDX-License-Identifier: Apache-2.0
// kvkey::Identity: everything that changes the meaning or the ownership of
// stored KV bytes (model lineage, KV format, tenant, adapter, shard), its
// validation, and visit_identity_fields, the one list of its salient fields.
// Fill one in and build a KeyNamespace (kvkey/key_namespace.hpp) from it.
#ifndef KVKEY_IDENTITY_HPP
#define KVKEY_IDENTITY_HPP

#include <array>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <optional>
#include <tuple>
#include <type_traits>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kvkey/config.hpp"
#include "kvkey/digest.hpp"
#include "kvkey/errors.hpp"
#include "kvkey/text.hpp"

KVKEY_BEGIN_NAMESPACE

/// Element type of the stored KV (and of quantization scales). The numeric codes
/// are part of the byte format (docs/format.md) and never change; new types get
/// new codes. `unset` is not a type: validation rejects it, so a deployment
/// cannot forget to say what its bytes are.
enum class KvDtype : std::uint8_t {
  unset = 0,
  fp32 = 1,
  fp16 = 2,
  bf16 = 3,
  fp8_e4m3 = 4,
  fp8_e5m2 = 5,
  int8 = 6,
  int4 = 7,
  uint8 = 8,
  uint4 = 9,
  fp4_e2m1 = 10,
  fp8_e4m3fnuz = 11,  ///< e4m3 with another exponent bias, no infinities, one NaN (AMD MI300: vLLM's "fp8" on gfx94x)
  fp8_e5m2fnuz = 12,  ///< e5m2, likewise (torch.float8_e5m2fnuz)
};

namespace detail {
struct DtypeName {
  KvDtype dtype;
  std::string_view name;
};
inline constexpr DtypeName dtype_names[] = {
    {KvDtype::fp32, "fp32"},
    {KvDtype::fp16, "fp16"},
    {KvDtype::bf16, "bf16"},
    {KvDtype::fp8_e4m3, "fp8_e4m3"},
    {KvDtype::fp8_e5m2, "fp8_e5m2"},
    {KvDtype::int8, "int8"},
    {KvDtype::int4, "int4"},
    {KvDtype::uint8, "uint8"},
    {KvDtype::uint4, "uint4"},
    {KvDtype::fp4_e2m1, "fp4_e2m1"},
    {KvDtype::fp8_e4m3fnuz, "fp8_e4m3fnuz"},
    {KvDtype::fp8_e5m2fnuz, "fp8_e5m2fnuz"},
};
}  // namespace detail

/// Every KvDtype except `unset`, in code order.
inline constexpr std::size_t kv_dtype_count = std::size(detail::dtype_names);

/// Every KvDtype except `unset`, in code order: the types an identity can name
/// (to_string gives each one's name), e.g. for a tool's list of known dtypes.
[[nodiscard]] constexpr std::array<KvDtype, kv_dtype_count> all_dtypes() noexcept {
  std::array<KvDtype, kv_dtype_count> out{};
  for (std::size_t i = 0; i < kv_dtype_count; ++i) out[i] = detail::dtype_names[i].dtype;
  return out;
}

/// "fp16", "fp8_e4m3", ...; "unset" for KvDtype::unset; "invalid" for a value
/// that is not an enumerator.
[[nodiscard]] constexpr std::string_view to_string(KvDtype d) noexcept {
  if (d == KvDtype::unset) return "unset";
  for (const auto& e : detail::dtype_names) {
    if (e.dtype == d) return e.name;
  }
  return "invalid";
}

/// Parses a dtype name as printed by to_string (exact, lowercase).
[[nodiscard]] constexpr std::optional<KvDtype> kv_dtype_from_string(std::string_view s) noexcept {
  for (const auto& e : detail::dtype_names) {
    if (e.name == s) return e.dtype;
  }
  return std::nullopt;
}

/// The names of all_dtypes(), comma-separated ("fp32, fp16, ..."): the list an
/// "unknown dtype" message offers.
[[nodiscard]] inline std::string known_dtype_names() {
  std::string out;
  for (const auto& e : detail::dtype_names) out.append(out.empty() ? "" : ", ").append(e.name);
  return out;
}

/// True for the enumerators that name a real type (not `unset`, not an
/// out-of-range value read from the wire).
[[nodiscard]] constexpr bool is_valid(KvDtype d) noexcept { return d != KvDtype::unset && to_string(d) != "invalid"; }

/// The model's weights lineage.
struct Model {
  std::string name;                           ///< readable model name, e.g. "Qwen/Qwen2.5-7B-Instruct"
  std::string revision;                       ///< immutable checkpoint id (hub commit, content hash); required
  std::uint64_t weights_epoch = 0;            ///< bumped by the deployment on every accepted weight update
  std::optional<Digest> weights_fingerprint;  ///< optional fingerprint of the live weights
  /// Optional fingerprint of the positional-encoding configuration the engine
  /// runs with (RoPE settings after overrides): cached K is stored after RoPE.
  std::optional<Digest> positional_fingerprint;
};

/// How KV values are quantized. scheme "none" means the KV is stored in kv.dtype
/// without scales; then every other member must keep its default.
struct Quant {
  std::string scheme = "none";               ///< e.g. "none", "per_token_asym", "per_tensor_static"
  std::uint32_t group_size = 0;              ///< elements per scale group; 0 = per tensor / not grouped
  std::optional<KvDtype> scale_dtype;        ///< type of the stored scales, when scales are stored
  bool zero_point = false;                   ///< asymmetric quantization with a stored zero point
  std::optional<Digest> scales_fingerprint;  ///< fingerprint of static (calibrated) scales
};

/// What one stored KV object's bytes are.
struct Kv {
  KvDtype dtype = KvDtype::unset;
  Quant quant;
  std::uint32_t block_size = 0;    ///< tokens per block
  std::uint32_t num_layers = 0;    ///< layers of the whole model
  std::uint32_t num_kv_heads = 0;  ///< KV heads of the whole model (1 for an MLA latent cache)
  std::uint32_t head_dim = 0;      ///< elements per head (latent + rope dims for MLA)
  std::string layout;              ///< the engine's byte layout of one object, e.g. "lmdeploy.v1.layer_major"
  bool mla = false;                ///< multi-head latent attention: the latent cache is whole on every rank
};

/// Where this process sits in the tensor/pipeline-parallel grid.
struct Shard {
  std::uint32_t tp_size = 1;
  std::uint32_t tp_rank = 0;
  std::uint32_t pp_size = 1;
  std::uint32_t pp_rank = 0;
};

/// A LoRA (or other) adapter: its weights, not only its name, are identity.
struct Adapter {
  std::string name;
  Digest weights_fingerprint;

  Adapter() = default;
  Adapter(std::string name_, const Digest& weights_fingerprint_)
      : name(std::move(name_)), weights_fingerprint(weights_fingerprint_) {}
};

/// Everything that changes the meaning or the ownership of stored KV bytes.
/// Plain data: fill it in, then build a KeyNamespace, which validates it.
struct Identity {
  std::string tenant;
  Model model;
  Kv kv;
  Shard shard;
  std::optional<Adapter> adapter;
};

/// The KV-head and layer range one rank holds: [begin, end). Two ranks with the
/// same Slice hold byte-identical objects and share store keys.
struct Slice {
  std::uint32_t kv_head_begin = 0;
  std::uint32_t kv_head_end = 0;
  std::uint32_t layer_begin = 0;
  std::uint32_t layer_end = 0;

  friend bool operator==(const Slice& a, const Slice& b) noexcept {
    return a.kv_head_begin == b.kv_head_begin && a.kv_head_end == b.kv_head_end && a.layer_begin == b.layer_begin &&
           a.layer_end == b.layer_end;
  }
  friend bool operator!=(const Slice& a, const Slice& b) noexcept { return !(a == b); }
};

/// How the namespace treats the tenant.
enum class TenantPolicy : std::uint8_t {
  required,       ///< default: the identity names its tenant
  single_tenant,  ///< the store is not shared: tenant must be empty and is encoded as `single_tenant_name`
  shared_scope,   ///< a shared scope's namespace (kvkey/scope.hpp): tenant is `_scope.<name>`
};

/// What a namespace demands of the payload (the KV bytes behind a header).
enum class PayloadCheck : std::uint8_t {
  /// default: seal and verify take the bytes; every header carries a payload
  /// digest (or, keyed, a MAC) and verify checks it. A header sealed without
  /// one is rejected (payload_mismatch, "envelope.integrity_mode").
  required,
  /// explicit opt-out for callers that cannot see the bytes (GPU-direct
  /// transfers): the size-only seal/verify are allowed, headers without a
  /// digest are accepted, and a digest is checked only where the bytes are given.
  size_only,
};

/// Options of a KeyNamespace beyond the identity.
struct Policy {
  TenantPolicy tenant = TenantPolicy::required;
  PayloadCheck payload = PayloadCheck::required;
  /// A keyed namespace that stores its payloads encrypted (AES-256-GCM,
  /// docs/format.md "Mode aes256_gcm"). A plain namespace refuses it.
  bool confidential = false;
};

/// The policy for a store that is not shared between tenants, chosen by name:
/// `kvkey::KeyNamespace<> ns{id, kvkey::single_tenant};`
inline constexpr Policy single_tenant{TenantPolicy::single_tenant};

/// The fixed, visible tenant a single-tenant namespace encodes. It starts with
/// '_', which a real tenant cannot, so it never collides with one.
inline constexpr std::string_view single_tenant_name = "_single";

/// What a shared scope's tenant starts with (docs/format.md, section 12): a
/// scope named N has tenant "_scope.N", which no tenant can be.
inline constexpr std::string_view scope_tenant_prefix = "_scope.";

/// Limits on the identity's strings (bytes). They bound the envelope size.
namespace limits {
inline constexpr std::size_t tenant = 64;
inline constexpr std::size_t model_name = 128;
inline constexpr std::size_t revision = 128;
inline constexpr std::size_t quant_scheme = 32;
inline constexpr std::size_t layout = 64;
inline constexpr std::size_t adapter_name = 128;
}  // namespace limits

// ---- the field table -------------------------------------------------------------

/// How a member's value is checked (validated()) and, for strings, what it may
/// hold. Integers, booleans, dtypes and digests are typed by their member.
enum class FieldKind : std::uint8_t {
  value,       ///< no rule beyond its type
  positive,    ///< an integer that must be greater than 0
  text,        ///< free text (names): 1..limit bytes without unsafe code points (kvkey/text.hpp)
  identifier,  ///< 1..limit bytes of printable ASCII without space (revision, layout)
  tenant,      ///< 1..limit bytes of [A-Za-z0-9._-], the first alphanumeric
  scheme,      ///< 1..limit bytes of [a-z0-9._-]
  dtype,       ///< a KvDtype that names a real type (or an optional one)
};

/// What a front end needs to know of a member beyond its kind.
enum FieldFlags : unsigned {
  field_no_flags = 0,
  field_required = 1U,     ///< an identity file must give it (the tool's reader)
  field_file_alt = 2U,     ///< a digest that may be given as "<key minus _fingerprint>_file": a file to hash
  field_not_salient = 4U,  ///< not encoded (the shard enters as the resolved Slice)
};

/// One member of an identity part: its key in the part ("weights_epoch"), its
/// dotted path from the identity ("model.weights_epoch"), the member pointer,
/// its kind, the byte limit of a string (0 for other types) and its flags.
template <class Part, class T>
struct FieldInfo {
  using part_type = Part;
  using type = T;
  std::string_view key;
  std::string_view path;
  T Part::*member;
  FieldKind kind;
  std::size_t limit;
  unsigned flags;
};

/// Fields<P>::members: every member of the part P, in encoding order (the
/// order of the byte format, docs/format.md); Fields<P>::name: the part's
/// name for front ends ("Model"); Fields<P>::positional: whether a front end
/// takes its members positionally (the adapter: `Adapter(name, fingerprint)`).
/// This table is the identity's one description: the encoder, decoder,
/// first_difference, operator==, max_identity_encoding_size, validated(),
/// describe(), the kvkey tool's identity-file reader and writer and the Python
/// classes (and their type stub) are derived from it. A new field is one line
/// here (CONTRIBUTING.md, "Adding an identity field").
template <class P>
struct Fields;

template <>
struct Fields<Model> {
  static constexpr std::string_view name = "Model";
  static constexpr bool positional = false;
  static constexpr auto members = std::make_tuple(
      FieldInfo<Model, std::string>{"name", "model.name", &Model::name, FieldKind::text, limits::model_name,
                                    field_required},
      FieldInfo<Model, std::string>{"revision", "model.revision", &Model::revision, FieldKind::identifier,
                                    limits::revision, field_required},
      FieldInfo<Model, std::uint64_t>{"weights_epoch", "model.weights_epoch", &Model::weights_epoch, FieldKind::value,
                                      0, field_no_flags},
      FieldInfo<Model, std::optional<Digest>>{"weights_fingerprint", "model.weights_fingerprint",
                                              &Model::weights_fingerprint, FieldKind::value, 0, field_file_alt},
      FieldInfo<Model, std::optional<Digest>>{"positional_fingerprint", "model.positional_fingerprint",
                                              &Model::positional_fingerprint, FieldKind::value, 0, field_no_flags});
};

template <>
struct Fields<Quant> {
  static constexpr std::string_view name = "Quant";
  static constexpr bool positional = false;
  static constexpr auto members = std::make_tuple(
      FieldInfo<Quant, std::string>{"scheme", "kv.quant.scheme", &Quant::scheme, FieldKind::scheme,
                                    limits::quant_scheme, field_no_flags},
      FieldInfo<Quant, std::uint32_t>{"group_size", "kv.quant.group_size", &Quant::group_size, FieldKind::value, 0,
                                      field_no_flags},
      FieldInfo<Quant, std::optional<KvDtype>>{"scale_dtype", "kv.quant.scale_dtype", &Quant::scale_dtype,
                                               FieldKind::dtype, 0, field_no_flags},
      FieldInfo<Quant, bool>{"zero_point", "kv.quant.zero_point", &Quant::zero_point, FieldKind::value, 0,
                             field_no_flags},
      FieldInfo<Quant, std::optional<Digest>>{"scales_fingerprint", "kv.quant.scales_fingerprint",
                                              &Quant::scales_fingerprint, FieldKind::value, 0, field_file_alt});
};

template <>
struct Fields<Kv> {
  static constexpr std::string_view name = "Kv";
  static constexpr bool positional = false;
  static constexpr auto members = std::make_tuple(
      FieldInfo<Kv, KvDtype>{"dtype", "kv.dtype", &Kv::dtype, FieldKind::dtype, 0, field_required},
      FieldInfo<Kv, Quant>{"quant", "kv.quant", &Kv::quant, FieldKind::value, 0, field_no_flags},
      FieldInfo<Kv, std::uint32_t>{"block_size", "kv.block_size", &Kv::block_size, FieldKind::positive, 0,
                                   field_required},
      FieldInfo<Kv, std::uint32_t>{"num_layers", "kv.num_layers", &Kv::num_layers, FieldKind::positive, 0,
                                   field_required},
      FieldInfo<Kv, std::uint32_t>{"num_kv_heads", "kv.num_kv_heads", &Kv::num_kv_heads, FieldKind::positive, 0,
                                   field_required},
      FieldInfo<Kv, std::uint32_t>{"head_dim", "kv.head_dim", &Kv::head_dim, FieldKind::positive, 0, field_required},
      FieldInfo<Kv, std::string>{"layout", "kv.layout", &Kv::layout, FieldKind::identifier, limits::layout,
                                 field_required},
      FieldInfo<Kv, bool>{"mla", "kv.mla", &Kv::mla, FieldKind::value, 0, field_no_flags});
};

template <>
struct Fields<Shard> {
  static constexpr std::string_view name = "Shard";
  static constexpr bool positional = false;
  // Not salient: the shard enters the object hash and the envelope as the resolved Slice (resolve_slice checks it).
  static constexpr auto members =
      std::make_tuple(FieldInfo<Shard, std::uint32_t>{"tp_size", "shard.tp_size", &Shard::tp_size, FieldKind::value, 0,
                                                      field_not_salient},
                      FieldInfo<Shard, std::uint32_t>{"tp_rank", "shard.tp_rank", &Shard::tp_rank, FieldKind::value, 0,
                                                      field_not_salient},
                      FieldInfo<Shard, std::uint32_t>{"pp_size", "shard.pp_size", &Shard::pp_size, FieldKind::value, 0,
                                                      field_not_salient},
                      FieldInfo<Shard, std::uint32_t>{"pp_rank", "shard.pp_rank", &Shard::pp_rank, FieldKind::value, 0,
                                                      field_not_salient});
};

template <>
struct Fields<Adapter> {
  static constexpr std::string_view name = "Adapter";
  static constexpr bool positional = true;
  static constexpr auto members = std::make_tuple(
      FieldInfo<Adapter, std::string>{"name", "adapter.name", &Adapter::name, FieldKind::text, limits::adapter_name,
                                      field_required},
      FieldInfo<Adapter, Digest>{"weights_fingerprint", "adapter.weights_fingerprint", &Adapter::weights_fingerprint,
                                 FieldKind::value, 0, field_required | field_file_alt});
};

template <>
struct Fields<Identity> {
  static constexpr std::string_view name = "Identity";
  static constexpr bool positional = false;
  static constexpr auto members = std::make_tuple(
      FieldInfo<Identity, std::string>{"tenant", "tenant", &Identity::tenant, FieldKind::tenant, limits::tenant,
                                       field_no_flags},
      FieldInfo<Identity, Model>{"model", "model", &Identity::model, FieldKind::value, 0, field_required},
      FieldInfo<Identity, Kv>{"kv", "kv", &Identity::kv, FieldKind::value, 0, field_required},
      FieldInfo<Identity, Shard>{"shard", "shard", &Identity::shard, FieldKind::value, 0, field_not_salient},
      FieldInfo<Identity, std::optional<Adapter>>{"adapter", "adapter", &Identity::adapter, FieldKind::value, 0,
                                                  field_no_flags});
};

/// True for the identity's part structs (the types Fields describes).
template <class T, class = void>
struct is_identity_part : std::false_type {};
template <class T>
struct is_identity_part<T, std::void_t<decltype(Fields<T>::members)>> : std::true_type {};
template <class T>
inline constexpr bool is_identity_part_v = is_identity_part<T>::value;

/// Calls f(info) for every FieldInfo of the part P, in table order.
template <class P, class F>
constexpr void for_each_field(F&& f) {
  std::apply([&f](const auto&... info) { (f(info), ...); }, Fields<P>::members);
}

namespace detail {
template <class Part, class Visitor>
void visit_salient(Part& part, Visitor& v) {
  using P = std::remove_const_t<Part>;
  for_each_field<P>([&part, &v](const auto& info) {
    if ((info.flags & field_not_salient) != 0) return;
    auto& value = part.*(info.member);
    if constexpr (is_identity_part_v<typename std::decay_t<decltype(info)>::type>) {
      visit_salient(value, v);
    } else {
      v(info.path, value);
    }
  });
}
}  // namespace detail

/// The salient fields, in encoding order: the table walked down to its leaves
/// (the shard is skipped: it enters the object hash and the envelope as the
/// resolved Slice). The canonical encoder, the decoder, the mismatch report,
/// describe() and the tests walk it.
///
/// v(path, member) is called for each field. Member types: std::string,
/// std::uint32_t, std::uint64_t, bool, KvDtype, std::optional<KvDtype>,
/// std::optional<Digest>, std::optional<Adapter>; for the adapter, the visitor
/// walks its members with visit_adapter_fields.
template <class Id, class Visitor>
void visit_identity_fields(Id& id, Visitor&& v) {
  detail::visit_salient(id, v);
}

/// The adapter's members, in encoding order (present adapters only).
template <class A, class Visitor>
void visit_adapter_fields(A& a, Visitor&& v) {
  detail::visit_salient(a, v);
}

namespace detail {
template <class P>
bool parts_equal(const P& a, const P& b) {
  bool equal = true;
  for_each_field<P>([&](const auto& info) { equal = equal && a.*(info.member) == b.*(info.member); });
  return equal;
}
}  // namespace detail

/// Value equality, member by member (the shard included): equal identities are
/// the same deployment rank. Validation plays no part; see docs/api.md.
inline bool operator==(const Model& a, const Model& b) { return detail::parts_equal(a, b); }
inline bool operator==(const Quant& a, const Quant& b) { return detail::parts_equal(a, b); }
inline bool operator==(const Kv& a, const Kv& b) { return detail::parts_equal(a, b); }
inline bool operator==(const Shard& a, const Shard& b) { return detail::parts_equal(a, b); }
inline bool operator==(const Adapter& a, const Adapter& b) { return detail::parts_equal(a, b); }
inline bool operator==(const Identity& a, const Identity& b) { return detail::parts_equal(a, b); }
inline bool operator!=(const Model& a, const Model& b) { return !(a == b); }
inline bool operator!=(const Quant& a, const Quant& b) { return !(a == b); }
inline bool operator!=(const Kv& a, const Kv& b) { return !(a == b); }
inline bool operator!=(const Shard& a, const Shard& b) { return !(a == b); }
inline bool operator!=(const Adapter& a, const Adapter& b) { return !(a == b); }
inline bool operator!=(const Identity& a, const Identity& b) { return !(a == b); }

namespace detail {
struct FieldNameCollector {
  std::vector<std::string_view>& names;
  template <class T>
  void operator()(std::string_view path, const T&) const {
    names.push_back(path);
  }
  void operator()(std::string_view path, const std::optional<Adapter>& a) const {
    names.push_back(path);
    visit_adapter_fields(*a, *this);
  }
};
}  // namespace detail

/// The dotted path of every salient field in encoding order, as the visitors
/// name them: "tenant", "model.name", ..., "kv.mla", "adapter", then the
/// adapter's members "adapter.name", "adapter.weights_fingerprint". Its size()
/// is the number of salient fields. A printout of an identity (describe(), the
/// CLI, the Python repr) is checked against it.
[[nodiscard]] inline const std::vector<std::string_view>& identity_field_names() {
  static const std::vector<std::string_view> names = [] {
    std::vector<std::string_view> out;
    Identity id;
    id.adapter.emplace();
    visit_identity_fields(id, detail::FieldNameCollector{out});
    return out;
  }();
  return names;
}

namespace detail {

inline bool is_alnum(char c) noexcept {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}

inline void check_length(std::string_view field, std::string_view s, std::size_t max) {
  if (s.empty()) throw identity_error(field, "must not be empty");
  if (s.size() > max) {
    throw identity_error(field,
                         "is " + std::to_string(s.size()) + " bytes, at most " + std::to_string(max) + " allowed");
  }
}

// Printable ASCII without space: revisions and layouts are identifiers.
inline void check_printable(std::string_view field, std::string_view s, std::size_t max) {
  check_length(field, s, max);
  for (std::size_t i = 0; i < s.size(); ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x21 || c > 0x7e) {
      throw identity_error(field, "byte " + std::to_string(i) +
                                      " is not printable ASCII (space and control characters are not allowed)");
    }
  }
}

// "U+202E"
inline std::string code_point_name(std::uint32_t cp) {
  std::string s = "U+0000";
  for (std::size_t i = 5; i >= 2; --i, cp >>= 4) s[i] = "0123456789ABCDEF"[cp & 0xf];
  return s;
}

// What kind of unsafe code point (kvkey/text.hpp) cp is, for messages.
inline std::string unsafe_kind(std::uint32_t cp) {
  if (cp >= 0x80 && cp <= 0x9f) return "a C1 control character (" + code_point_name(cp) + ")";
  const bool bidi =
      cp == 0x061c || cp == 0x200e || cp == 0x200f || (cp >= 0x202a && cp <= 0x202e) || (cp >= 0x2066 && cp <= 0x2069);
  return (bidi ? "a bidirectional formatting character (" : "an invisible formatting character (") +
         code_point_name(cp) + ")";
}

// Free text (model and adapter names): any bytes except the unsafe code points
// of kvkey/text.hpp (controls, invisible and bidirectional formatting
// characters), which would make a printed name read differently from its bytes.
inline void check_text(std::string_view field, std::string_view s, std::size_t max) {
  check_length(field, s, max);
  const UnsafeCodePoint bad = find_unsafe_code_point(s);
  if (bad.offset == s.size()) return;
  if (bad.code_point < 0x20 || bad.code_point == 0x7f) {
    throw identity_error(field, "byte " + std::to_string(bad.offset) + " is a control character");
  }
  throw identity_error(field, "byte " + std::to_string(bad.offset) + " starts " + unsafe_kind(bad.code_point));
}

inline void check_tenant(std::string_view t, std::size_t max = limits::tenant) {
  if (t.empty()) {
    throw identity_error("tenant",
                         "must not be empty: name the tenant, or build the namespace with the "
                         "kvkey::single_tenant policy for a store no one else shares");
  }
  check_length("tenant", t, max);
  if (!is_alnum(t[0])) throw identity_error("tenant", "must start with a letter or digit");
  for (std::size_t i = 0; i < t.size(); ++i) {
    const char c = t[i];
    if (!is_alnum(c) && c != '.' && c != '_' && c != '-') {
      throw identity_error("tenant",
                           "byte " + std::to_string(i) + " is not allowed: use letters, digits, '.', '_' and '-' only");
    }
  }
}

inline void check_scheme(std::string_view s, std::size_t max) {
  check_length("kv.quant.scheme", s, max);
  for (char c : s) {
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-')) {
      throw identity_error("kv.quant.scheme", "use lowercase letters, digits, '.', '_' and '-' only");
    }
  }
}

inline void check_positive(std::string_view field, std::uint32_t v) {
  if (v == 0) throw identity_error(field, "must be greater than 0");
}

inline std::string str(std::uint32_t v) { return std::to_string(v); }

// One member's own rule, by its kind (FieldKind); skip_tenant: the
// single_tenant policy has replaced the tenant already.
template <class Info>
void check_member(const Info& info, const std::string& s, bool skip_tenant) {
  switch (info.kind) {
    case FieldKind::text: return check_text(info.path, s, info.limit);
    case FieldKind::identifier: return check_printable(info.path, s, info.limit);
    case FieldKind::tenant: return skip_tenant ? void() : check_tenant(s, info.limit);
    case FieldKind::scheme: return check_scheme(s, info.limit);
    default: return;
  }
}
template <class Info>
void check_member(const Info& info, std::uint32_t v, bool) {
  if (info.kind == FieldKind::positive) check_positive(info.path, v);
}
template <class Info>
void check_member(const Info& info, KvDtype d, bool) {
  if (!is_valid(d)) throw identity_error(info.path, d == KvDtype::unset ? "must be set" : "is not a known dtype code");
}
template <class Info>
void check_member(const Info& info, const std::optional<KvDtype>& d, bool) {
  if (d && !is_valid(*d)) throw identity_error(info.path, "is not a known dtype");
}
template <class Info, class T>
void check_member(const Info&, const T&, bool) {}  // integers without a rule, bool, digests

// Every member's own rule, in table order (parts and a present adapter included).
template <class P>
void check_members(const P& part, bool skip_tenant) {
  for_each_field<P>([&](const auto& info) {
    const auto& value = part.*(info.member);
    using T = typename std::decay_t<decltype(info)>::type;
    if constexpr (is_identity_part_v<T>) {
      check_members(value, skip_tenant);
    } else if constexpr (std::is_same_v<T, std::optional<Adapter>>) {
      if (value) check_members(*value, skip_tenant);
    } else {
      check_member(info, value, skip_tenant);
    }
  });
}

}  // namespace detail

/// Resolves the rank's slice: tp <= H needs H % tp == 0 and gives heads
/// [r*H/tp, (r+1)*H/tp); tp > H needs tp % H == 0 and gives head r/(tp/H)
/// (replicas); an MLA latent cache is whole on every rank; layers split evenly
/// across pp stages. Throws identity_error naming the field on bad geometry.
[[nodiscard]] inline Slice resolve_slice(const Kv& kv, const Shard& shard) {
  using detail::str;
  detail::check_positive("kv.num_layers", kv.num_layers);
  detail::check_positive("kv.num_kv_heads", kv.num_kv_heads);
  detail::check_positive("shard.tp_size", shard.tp_size);
  detail::check_positive("shard.pp_size", shard.pp_size);
  if (shard.tp_rank >= shard.tp_size) {
    throw identity_error("shard.tp_rank", str(shard.tp_rank) + " is not below shard.tp_size " + str(shard.tp_size));
  }
  if (shard.pp_rank >= shard.pp_size) {
    throw identity_error("shard.pp_rank", str(shard.pp_rank) + " is not below shard.pp_size " + str(shard.pp_size));
  }
  const std::uint32_t heads = kv.num_kv_heads;
  const std::uint32_t tp = shard.tp_size;
  const std::uint32_t r = shard.tp_rank;
  Slice s;
  if (kv.mla) {
    s.kv_head_begin = 0;
    s.kv_head_end = heads;
  } else if (tp <= heads) {
    if (heads % tp != 0) {
      throw identity_error("shard.tp_size", str(tp) + " does not divide kv.num_kv_heads " + str(heads));
    }
    const std::uint32_t per_rank = heads / tp;
    s.kv_head_begin = r * per_rank;
    s.kv_head_end = (r + 1) * per_rank;
  } else {
    if (tp % heads != 0) {
      throw identity_error("shard.tp_size", str(tp) + " is not a multiple of kv.num_kv_heads " + str(heads) +
                                                " (more ranks than heads requires whole replicas)");
    }
    const std::uint32_t head = r / (tp / heads);
    s.kv_head_begin = head;
    s.kv_head_end = head + 1;
  }
  if (kv.num_layers % shard.pp_size != 0) {
    throw identity_error("shard.pp_size", str(shard.pp_size) + " does not divide kv.num_layers " + str(kv.num_layers));
  }
  const std::uint32_t per_stage = kv.num_layers / shard.pp_size;
  s.layer_begin = shard.pp_rank * per_stage;
  s.layer_end = (shard.pp_rank + 1) * per_stage;
  return s;
}

/// Checks every field and returns the identity as it is encoded: under the
/// single_tenant policy the (empty) tenant becomes single_tenant_name.
/// Throws identity_error whose field() names the first invalid field.
[[nodiscard]] inline Identity validated(Identity id, const Policy& policy = {}) {
  if (policy.tenant == TenantPolicy::single_tenant) {
    if (!id.tenant.empty()) {
      throw identity_error("tenant",
                           "must be empty under the single_tenant policy (got a tenant name; "
                           "drop the policy to use it)");
    }
    id.tenant = std::string(single_tenant_name);
  }
  if (policy.tenant == TenantPolicy::shared_scope) {
    const std::string_view t = id.tenant;
    if (t.substr(0, scope_tenant_prefix.size()) != scope_tenant_prefix) {
      throw identity_error("tenant", "must be \"_scope.<name>\" in a shared scope's namespace");
    }
    detail::check_tenant(t.substr(scope_tenant_prefix.size()), limits::tenant - scope_tenant_prefix.size());
  }
  // Every member by its kind (the field table), then the rules that join members.
  detail::check_members(id, policy.tenant != TenantPolicy::required);
  const Quant& q = id.kv.quant;
  if (q.scheme == "none") {
    if (q.group_size != 0) throw identity_error("kv.quant.group_size", "must be 0 when kv.quant.scheme is \"none\"");
    if (q.scale_dtype) throw identity_error("kv.quant.scale_dtype", "must be empty when kv.quant.scheme is \"none\"");
    if (q.zero_point) throw identity_error("kv.quant.zero_point", "must be false when kv.quant.scheme is \"none\"");
    if (q.scales_fingerprint) {
      throw identity_error("kv.quant.scales_fingerprint", "must be empty when kv.quant.scheme is \"none\"");
    }
  }
  (void)resolve_slice(id.kv, id.shard);  // geometry
  return id;
}

KVKEY_END_NAMESPACE

#endif  // KVKEY_IDENTITY_HPP
