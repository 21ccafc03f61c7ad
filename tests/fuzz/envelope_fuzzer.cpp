// Header verification on untrusted bytes: KeyNamespace::verify and
// parse_envelope must never crash, never accept anything but the exact header
// the reader would have sealed (up to a keyed header's nonce and tag), and
// name a reason that matches the bytes.
//
// Input: one mode byte, then
//   mode even: (u16le offset, u8 value) edits applied to a valid header;
//   mode odd:  the header bytes themselves (any length).
#include "fuzz_common.hpp"

namespace {

using kvkey_fuzz::require;

struct Fixture {
  kvkey::KeyNamespace<> plain{kvkey_fuzz::fixture_identity()};
  kvkey::KeyNamespace<kvkey::HmacSha256> keyed{kvkey_fuzz::fixture_identity(),
                                               kvkey::TenantSecret{std::string(kvkey_fuzz::fixture_secret())}};
};

bool same_encoding(const kvkey::Identity& a, const kvkey::Bytes& encoding) {
  return kvkey::encode_identity(a) == encoding;
}

kvkey::Payload payload() { return kvkey_fuzz::fixture_payload_bytes(); }

// Equal outside the nonce and the digest: a keyed seal draws a fresh nonce.
bool same_but_tag(const std::uint8_t* a, const std::uint8_t* b) {
  namespace L = kvkey::envelope_layout;
  return std::memcmp(a, b, L::nonce) == 0 &&
         std::memcmp(a + L::secret_id, b + L::secret_id, kvkey::envelope_size - L::secret_id) == 0;
}

template <class Hash>
void check(const kvkey::KeyNamespace<Hash>& ns, const std::uint8_t* header, std::size_t len) {
  const kvkey::Digest block = ns.block_hashes(kvkey_fuzz::fixture_tokens()).at(1);
  const std::uint64_t size = kvkey_fuzz::fixture_payload;
  const kvkey::Envelope expected = ns.seal(block, payload());
  const kvkey::Verdict v = ns.verify(header, len, block, payload());
  const kvkey::ParsedEnvelope parsed = kvkey::parse_envelope(header, len);
  const auto& contents = parsed.contents;
  const bool keyed = ns.namespace_kind == kvkey::NamespaceKind::keyed;

  const bool sized = len == kvkey::envelope_size;
  if (keyed) {
    require(!v.ok() || (sized && same_but_tag(header, expected.data())),
            "verify accepts only the header the reader would seal, up to the nonce and tag");
  } else {
    require(v.ok() == (sized && std::memcmp(header, expected.data(), len) == 0),
            "verify accepts exactly the header the reader would seal");
  }
  require(v.ok() == v.field.empty(), "a rejection names a field, an acceptance none");
  require(contents.has_value() == parsed.verdict.ok(), "the parser gives contents or the reason why not");
  if (!contents) {
    require(v.reason == parsed.verdict.reason && v.field == parsed.verdict.field,
            "an undecodable header gets the parser's reason and field");
    return;
  }
  const bool same_identity = same_encoding(contents->identity, ns.encoding());
  const bool same_slice = contents->slice == ns.slice();
  const bool same_kind = contents->namespace_kind == ns.namespace_kind;
  switch (v.reason) {
    case kvkey::Reason::ok:
      require(same_kind && same_identity && same_slice && contents->block_hash == block &&
                  contents->payload_size == size && contents->integrity == ns.integrity_mode() &&
                  contents->secret_id == ns.secret_id(),
              "an accepted header decodes to the reader's own contents");
      break;
    case kvkey::Reason::identity_mismatch:
      if (v.field == "envelope.namespace_kind") {
        require(!same_kind, "'envelope.namespace_kind' is named only for the other kind");
      } else if (v.field == "tenant.secret_id") {
        require(same_kind && same_identity && contents->secret_id != ns.secret_id(),
                "'tenant.secret_id' is named only when only the sealing secret differs");
      } else if (v.field == "shard") {
        require(same_kind && same_identity && !same_slice, "'shard' is named only when only the slice differs");
      } else {
        require(same_kind && !same_identity, "identity_mismatch only for another identity");
        require(v.field == kvkey::first_difference(contents->identity, ns.identity()),
                "identity_mismatch names the first differing field");
      }
      break;
    case kvkey::Reason::block_mismatch:
      require(same_kind && same_identity && same_slice && contents->block_hash != block,
              "block_mismatch means another block");
      break;
    case kvkey::Reason::size_mismatch:
      require(
          same_kind && same_identity && same_slice && contents->block_hash == block && contents->payload_size != size,
          "size_mismatch means another payload size");
      break;
    case kvkey::Reason::payload_mismatch:
      require(
          same_kind && same_identity && same_slice && contents->block_hash == block && contents->payload_size == size,
          "payload_mismatch only when everything but the digest agrees");
      require(v.field == (contents->integrity == kvkey::IntegrityMode::none ? "envelope.integrity_mode" : "payload"),
              "payload_mismatch names the missing digest or the payload");
      break;
    case kvkey::Reason::not_granted: kvkey_fuzz::fail("an envelope is never not_granted (a scope's grant is)");
    case kvkey::Reason::malformed:
    case kvkey::Reason::unsupported_version: kvkey_fuzz::fail("a decodable header is never malformed");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const Fixture fixture;
  if (size == 0) return 0;
  const bool raw = (data[0] & 1) != 0;
  ++data;
  --size;
  if (raw) {
    check(fixture.plain, data, size);
    check(fixture.keyed, data, size);
    return 0;
  }
  const kvkey::Digest block = fixture.plain.block_hashes(kvkey_fuzz::fixture_tokens()).at(1);
  kvkey::Envelope header = fixture.plain.seal(block, payload());
  for (std::size_t i = 0; i + 3 <= size; i += 3) {
    const std::size_t offset = (data[i] | (std::size_t{data[i + 1]} << 8)) % kvkey::envelope_size;
    header[offset] = data[i + 2];
  }
  check(fixture.plain, header.data(), header.size());
  check(fixture.keyed, header.data(), header.size());
  return 0;
}
