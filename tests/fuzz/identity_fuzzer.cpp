// Identity validation from arbitrary field values (the input format is
// kvkey_fuzz::read_identity's): validated() and the KeyNamespace constructor
// may throw identity_error only, naming a real field, and agree on what is
// valid; a valid identity round-trips through encode_identity/decode_identity
// and yields well-formed keys and a header that verifies.
#include <set>
#include <string>

#include "fuzz_common.hpp"

namespace {

using kvkey_fuzz::require;

const std::set<std::string, std::less<>>& known_fields() {
  static const std::set<std::string, std::less<>> fields = [] {
    std::set<std::string, std::less<>> f{"shard.tp_size", "shard.tp_rank", "shard.pp_size", "shard.pp_rank"};
    kvkey::Identity id;
    id.adapter = kvkey::Adapter{};
    for (const auto& e : kvkey::encoded_fields(id)) f.emplace(e.path);
    return f;
  }();
  return fields;
}

void check_valid(const kvkey::Identity& input, const kvkey::Policy& policy, const kvkey::Identity& v) {
  const kvkey::KeyNamespace<> ns{input, policy};  // must not throw: validated() accepted the identity
  const kvkey::Bytes encoding = kvkey::encode_identity(v);
  require(ns.encoding() == encoding, "the namespace encodes the validated identity");
  require(ns.root() == kvkey::Sha256::hash(encoding.data(), encoding.size()), "root = SHA-256(encoding)");
  require(encoding.size() <= kvkey::max_identity_encoding_size, "encoding within the documented bound");

  auto decoded = kvkey::decode_identity(encoding.data(), encoding.size());
  require(decoded.has_value(), "a valid identity's encoding decodes");
  require(kvkey::encode_identity(*decoded) == encoding, "decode/encode round trip");
  require(kvkey::first_difference(*decoded, v).empty(), "the decoded identity has no differing field");
  decoded->shard = v.shard;
  if (policy.tenant == kvkey::TenantPolicy::single_tenant) decoded->tenant.clear();
  require(kvkey::encode_identity(kvkey::validated(*decoded, policy)) == encoding, "the decoded identity is valid");

  const std::string key = ns.store_key(ns.root());
  require(key.size() <= kvkey::max_store_key_size, "store key within max_store_key_size");
  require(key.compare(0, ns.key_prefix().size(), ns.key_prefix()) == 0, "store key starts with key_prefix");
  for (char c : key) require(c > 0x20 && c < 0x7f, "store key is printable ASCII without spaces");
  require(key.compare(0, ns.tenant_prefix().size(), ns.tenant_prefix()) == 0, "key_prefix starts with tenant_prefix");

  const std::uint8_t byte = 0x42;
  const kvkey::Envelope header = ns.seal(ns.root(), kvkey::Payload(&byte, 1));
  require(ns.verify(header, ns.root(), kvkey::Payload(&byte, 1)).ok(), "own header verifies");
  const auto contents = kvkey::decode_envelope(header.data(), header.size());
  require(contents && kvkey::encode_identity(contents->identity) == encoding && contents->slice == ns.slice(),
          "own header decodes to the identity and slice");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const kvkey_fuzz::FuzzedIdentity f = kvkey_fuzz::read_identity(data, size);
  std::optional<kvkey::Identity> v;
  try {
    v = kvkey::validated(f.id, f.policy);
  } catch (const kvkey::identity_error& e) {
    require(known_fields().count(e.field()) == 1, "identity_error names a real field");
    require(std::string_view(e.what()).rfind("[kvkey.identity_error] " + e.field() + ": ", 0) == 0,
            "identity_error message starts with its id and field");
    bool namespace_refused = false;
    try {
      const kvkey::KeyNamespace<> ns{f.id, f.policy};
    } catch (const kvkey::identity_error& e2) {
      namespace_refused = e2.field() == e.field();
    }
    require(namespace_refused, "KeyNamespace refuses what validated() refuses, naming the same field");
    return 0;
  }
  check_valid(f.id, f.policy, *v);
  return 0;
}
