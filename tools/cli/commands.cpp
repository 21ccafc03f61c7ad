// SPDX-License-Identifier: Apache-2.0
#include "cli/commands.hpp"

#include <kvkey/encode.hpp>
#include <kvkey/envelope.hpp>
#include <kvkey/errors.hpp>
#include <kvkey/fmt.hpp>
#include <kvkey/key_namespace.hpp>

#include <fmt/format.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iterator>
#include <limits>
#include <optional>

#include "cli/identity_config.hpp"
#include "cli/inputs.hpp"
#include "cli/report.hpp"
#include "cli/tool.hpp"

namespace kvkey_tool {

namespace {

constexpr std::size_t label_width = 28;

template <class... Args>
void print(std::string& out, fmt::format_string<Args...> f, Args&&... args) {
  fmt::format_to(std::back_inserter(out), f, std::forward<Args>(args)...);
}

void append_fields(std::string& out, const std::vector<FieldValue>& fields) {
  for (const auto& f : fields) append_row(out, f.path, f.value, label_width);
}

std::string shard_text(const kvkey::Shard& s) {
  return fmt::format("tp_rank {} of tp_size {}, pp_rank {} of pp_size {}", s.tp_rank, s.tp_size, s.pp_rank,
                     s.pp_size);
}

Json slice_json(const kvkey::Slice& s) {
  return Json{{"kv_head_begin", s.kv_head_begin},
              {"kv_head_end", s.kv_head_end},
              {"layer_begin", s.layer_begin},
              {"layer_end", s.layer_end}};
}

Json extras_json(const std::vector<kvkey::ExtraKey>& extras) {
  Json j = Json::array();
  for (const auto& e : extras) j.push_back(Json{{"token_begin", e.token_begin}, {"token_end", e.token_end}, {"key", e.key}});
  return j;
}

// "BEGIN:END:KEY" (the key may contain ':').
kvkey::ExtraKey parse_extra(const std::string& spec) {
  const auto a = spec.find(':');
  const auto b = a == std::string::npos ? a : spec.find(':', a + 1);
  auto number = [&](std::string_view s) {
    const auto v = parse_unsigned(s, std::numeric_limits<std::uint64_t>::max());
    if (!v) fail("--extra {}: expected BEGIN:END:KEY with token positions", quote(spec));
    return *v;
  };
  if (b == std::string::npos) fail("--extra {}: expected BEGIN:END:KEY", quote(spec));
  kvkey::ExtraKey e;
  e.token_begin = number(std::string_view(spec).substr(0, a));
  e.token_end = number(std::string_view(spec).substr(a + 1, b - a - 1));
  e.key = spec.substr(b + 1);
  if (e.token_begin >= e.token_end) fail("--extra {}: BEGIN must be below END", quote(spec));
  return e;
}

void write_file(const std::string& path, const std::uint8_t* data, std::size_t size) {
  errno = 0;
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) fail("cannot write {}: {}", display_name(path), errno != 0 ? std::strerror(errno) : "unknown error");
  const bool ok = std::fwrite(data, 1, size, f) == size;
  const int err = errno;
  if (std::fclose(f) != 0 || !ok) fail("cannot write {}: {}", display_name(path), std::strerror(err != 0 ? err : errno));
}

// A header file: at most one byte more than an envelope is read (enough to
// tell that it is not one), and the file's size is kept for messages.
struct HeaderFile {
  std::vector<std::uint8_t> bytes;
  std::string size;  // "1024", or "more than 1024" when it cannot be told
};

HeaderFile read_header(const std::string& path) {
  const std::string s = read_at_most(path, kvkey::envelope_size + 1);
  HeaderFile h{std::vector<std::uint8_t>(s.begin(), s.end()), std::to_string(s.size())};
  if (s.size() > kvkey::envelope_size) {
    std::error_code ec;
    const auto n = path == "-" ? 0 : std::filesystem::file_size(path, ec);
    h.size = path == "-" || ec ? fmt::format("more than {}", kvkey::envelope_size) : std::to_string(n);
  }
  return h;
}

// Why bytes are not a decodable envelope (parse_envelope's verdict), in one phrase.
std::string not_envelope_reason(const HeaderFile& file, const kvkey::Verdict& why) {
  const std::vector<std::uint8_t>& h = file.bytes;
  const std::string& f = why.field;
  if (f == "envelope.size" && h.size() != kvkey::envelope_size) {
    return fmt::format("it is {} bytes, an envelope is exactly {}", file.size, kvkey::envelope_size);
  }
  if (f == "envelope.magic") return "it does not start with the envelope magic \"KVKEYENV\"";
  if (f == "envelope.format_version") {
    const unsigned version = unsigned{h[8]} | unsigned{h[9]} << 8;  // u16le at offset 8
    return fmt::format("format version {}, this tool reads version {}", version, kvkey::format_version);
  }
  if (f == "envelope.size") return "its size field is not 1024";
  if (f == "envelope.identity") return "its identity encoding is malformed";
  if (f == "envelope.padding") return "a reserved byte or a byte after the identity encoding is not zero";
  return fmt::format("its {} field is malformed", f.substr(f.find('.') + 1));
}

// The payload file's bytes (read whole).
std::string read_payload(const std::string& path) { return read_limited(path, max_payload_size, "a payload file"); }

// The shard that gives `slice` under kv, when there is one (the envelope keeps
// the slice, not the shard): lets inspect show the producer's store key.
std::optional<kvkey::Shard> shard_for_slice(const kvkey::Kv& kv, const kvkey::Slice& s) {
  if (s.kv_head_end <= s.kv_head_begin || s.layer_end <= s.layer_begin || kv.num_kv_heads == 0) return std::nullopt;
  kvkey::Shard shard;
  if (!kv.mla) {
    const std::uint32_t per_rank = s.kv_head_end - s.kv_head_begin;
    if (kv.num_kv_heads % per_rank != 0) return std::nullopt;
    shard.tp_size = kv.num_kv_heads / per_rank;
    shard.tp_rank = s.kv_head_begin / per_rank;
  }
  const std::uint32_t per_stage = s.layer_end - s.layer_begin;
  if (kv.num_layers % per_stage != 0) return std::nullopt;
  shard.pp_size = kv.num_layers / per_stage;
  shard.pp_rank = s.layer_begin / per_stage;
  try {
    if (kvkey::resolve_slice(kv, shard) == s) return shard;
  } catch (const kvkey::identity_error&) {
  }
  return std::nullopt;
}

}  // namespace

// ---- identity -------------------------------------------------------------------

int run_identity(const std::string& config_path, std::string& out) {
  const IdentityConfig config = load_identity_config(config_path);
  const kvkey::KeyNamespace<> ns = namespace_for(config);
  print(out, "config: {}\n", display_name(config_path));
  print(out, "identity (validated; salient fields in encoding order):\n");
  append_fields(out, field_values(ns.identity()));
  if (!config.fingerprinted_files.empty()) {
    print(out, "fingerprinted files (SHA-256 of the contents):\n");
    for (const auto& [field, file] : config.fingerprinted_files) append_row(out, field, display_name(file), label_width);
  }
  print(out, "namespace:\n");
  append_row(out, "policy",
             ns.policy().tenant == kvkey::TenantPolicy::single_tenant ? "single_tenant" : "required", label_width);
  append_row(out, "shard", shard_text(ns.identity().shard), label_width);
  append_row(out, "slice", fmt::format("{}", ns.slice()), label_width);
  append_row(out, "encoding", fmt::format("{} bytes", ns.encoding().size()), label_width);
  append_row(out, "", to_hex(ns.encoding()), label_width);
  append_row(out, "root", ns.root().hex(), label_width);
  append_row(out, "key prefix", ns.key_prefix(), label_width);
  append_row(out, "tenant prefix", ns.tenant_prefix(), label_width);
  return exit_ok;
}

// ---- keys -----------------------------------------------------------------------

int run_keys(const KeysOptions& o, std::string& out) {
  if (o.config == "-" && o.tokens == "-") fail("CONFIG and --tokens cannot both be stdin");
  const kvkey::KeyNamespace<> ns = load_namespace(o.config);
  const std::vector<std::int64_t> tokens = read_tokens(o.tokens);
  kvkey::HashOptions opt;
  opt.salt = o.salt;
  for (const auto& spec : o.extras) opt.extras.push_back(parse_extra(spec));
  const std::vector<kvkey::Digest> hashes = ns.block_hashes(tokens, opt);
  const std::uint32_t bs = ns.block_size();

  if (o.json) {
    Json blocks = Json::array();
    for (std::size_t i = 0; i < hashes.size(); ++i) {
      blocks.push_back(Json{{"index", i},
                            {"token_begin", i * bs},
                            {"token_end", (i + 1) * bs},
                            {"block_hash", hashes[i].hex()},
                            {"object_hash", ns.object_hash(hashes[i]).hex()},
                            {"store_key", ns.store_key(hashes[i])}});
    }
    const Json j{{"config", display_name(o.config)},
                 {"root", ns.root().hex()},
                 {"salt", o.salt},
                 {"extras", extras_json(opt.extras)},
                 {"first_parent", ns.first_parent(o.salt).hex()},
                 {"block_size", bs},
                 {"token_count", tokens.size()},
                 {"slice", slice_json(ns.slice())},
                 {"key_prefix", ns.key_prefix()},
                 {"tenant_prefix", ns.tenant_prefix()},
                 {"blocks", std::move(blocks)}};
    append_json(out, j);
    return exit_ok;
  }

  print(out, "config: {}\n", display_name(o.config));
  append_row(out, "root", ns.root().hex(), 14);
  append_row(out, "salt", o.salt.empty() ? std::string("none") : quote(o.salt, no_limit), 14);
  for (const auto& e : opt.extras) {
    append_row(out, "extra", fmt::format("tokens [{}, {}) key {}", e.token_begin, e.token_end, quote(e.key, no_limit)), 14);
  }
  append_row(out, "first parent", ns.first_parent(o.salt).hex(), 14);
  append_row(out, "tokens",
             fmt::format("{} ({} full blocks of {}; {} trailing tokens not hashed)", tokens.size(), hashes.size(), bs,
                         tokens.size() - hashes.size() * bs),
             14);
  append_row(out, "slice", fmt::format("{}", ns.slice()), 14);
  append_row(out, "key prefix", ns.key_prefix(), 14);
  for (std::size_t i = 0; i < hashes.size(); ++i) {
    print(out, "block {} (tokens [{}, {})):\n", i, i * bs, (i + 1) * bs);
    append_row(out, "block hash", hashes[i].hex(), 14);
    append_row(out, "store key", ns.store_key(hashes[i]), 14);
  }
  return exit_ok;
}

// ---- seal -----------------------------------------------------------------------

int run_seal(const SealOptions& o, std::string& out) {
  IdentityConfig config = load_identity_config(o.config);
  // --size seals without the bytes: an explicit opt-out of the payload digest.
  if (o.payload.empty()) config.policy.payload = kvkey::PayloadCheck::size_only;
  const kvkey::KeyNamespace<> ns = namespace_for(config);
  const kvkey::Digest block = parse_digest(o.block, "--block");
  kvkey::Envelope e{};
  std::uint64_t size = 0;
  if (!o.payload.empty()) {
    if (o.config == "-" && o.payload == "-") fail("CONFIG and --payload cannot both be stdin");
    const std::string bytes = read_payload(o.payload);
    size = bytes.size();
    e = ns.seal(block, kvkey::Payload(bytes.data(), bytes.size()));
  } else {
    size = parse_uint_option(o.size, 64, "--size");
    e = ns.seal(block, size);
  }
  if (o.output == "-") {  // stdout: the envelope's bytes and nothing else
    out.append(reinterpret_cast<const char*>(e.data()), e.size());
    return exit_ok;
  }
  write_file(o.output, e.data(), e.size());
  print(out, "wrote {}: a {}-byte envelope\n", display_name(o.output), e.size());
  append_row(out, "block hash", block.hex(), 14);
  append_row(out, "payload size", std::to_string(size), 14);
  const auto digest = e.begin() + kvkey::envelope_layout::payload_digest;
  append_row(out, "integrity",
             o.payload.empty() ? std::string("none (size only)") : "xxh3_128 " + to_hex({digest, digest + 16}), 14);
  append_row(out, "slice", fmt::format("{}", ns.slice()), 14);
  append_row(out, "store key", ns.store_key(block), 14);
  return exit_ok;
}

// ---- inspect --------------------------------------------------------------------

int run_inspect(const std::string& header_path, std::string& out) {
  const HeaderFile file = read_header(header_path);
  const std::vector<std::uint8_t>& h = file.bytes;
  const kvkey::ParsedEnvelope parsed = kvkey::parse_envelope(h.data(), h.size());
  const auto& c = parsed.contents;
  if (!c) fail("{}: not a kvkey envelope: {}", display_name(header_path), not_envelope_reason(file, parsed.verdict));

  print(out, "header: {} ({}-byte kvkey envelope, format version {})\n", display_name(header_path), h.size(),
        c->version);
  print(out, "producer identity (salient fields in encoding order):\n");
  append_fields(out, field_values(c->identity));
  print(out, "envelope:\n");
  append_row(out, "slice", fmt::format("{}", c->slice), label_width);
  append_row(out, "block hash", c->block_hash.hex(), label_width);
  append_row(out, "payload size", fmt::format("{} bytes", c->payload_size), label_width);
  append_row(out, "namespace", std::string(kvkey::to_string(c->namespace_kind)), label_width);
  append_row(out, "integrity", std::string(kvkey::to_string(c->integrity)), label_width);
  if (c->integrity == kvkey::IntegrityMode::poly1305) {
    append_row(out, "nonce", to_hex({c->nonce.begin(), c->nonce.end()}), label_width);
  }
  if (c->integrity != kvkey::IntegrityMode::none) {
    append_row(out, c->integrity == kvkey::IntegrityMode::poly1305 ? "payload tag" : "payload digest",
               to_hex({c->payload_digest.begin(), c->payload_digest.end()}), label_width);
  }
  if (c->namespace_kind == kvkey::NamespaceKind::keyed) {
    print(out, "producer namespace: keyed (its root and keys need the tenant secret)\n");
    return exit_ok;
  }

  // The producer's root and store key, as an unkeyed (SHA-256) namespace would
  // compute them, when the identity validates and the slice fits a shard.
  print(out, "producer namespace (SHA-256):\n");
  kvkey::Identity id = c->identity;
  kvkey::Policy policy;
  if (id.tenant == kvkey::single_tenant_name) {
    id.tenant.clear();
    policy = kvkey::single_tenant;
  }
  const auto shard = shard_for_slice(id.kv, c->slice);
  if (shard) id.shard = *shard;
  try {
    const kvkey::KeyNamespace<> ns(id, policy);
    append_row(out, "root", ns.root().hex(), label_width);
    append_row(out, "store key", shard ? ns.store_key(c->block_hash) : "(the slice fits no shard)", label_width);
  } catch (const kvkey::identity_error& e) {
    append_row(out, "root", fmt::format("(the identity does not validate: {})", without_error_id(e.what())),
               label_width);
  }
  return exit_ok;
}

// ---- verify ---------------------------------------------------------------------

int run_verify(const VerifyOptions& o, std::string& out) {
  IdentityConfig config = load_identity_config(o.config);
  // --size checks everything but the bytes: an explicit opt-out of the digest check.
  if (o.payload.empty()) config.policy.payload = kvkey::PayloadCheck::size_only;
  const kvkey::KeyNamespace<> ns = namespace_for(config);
  if (o.config == "-" && o.header == "-") fail("CONFIG and HEADER_FILE cannot both be stdin");
  const HeaderFile file = read_header(o.header);
  const std::vector<std::uint8_t>& h = file.bytes;
  const kvkey::Digest block = parse_digest(o.block, "--block");
  std::uint64_t size = 0;
  kvkey::Verdict v;
  if (!o.payload.empty()) {
    if (o.payload == "-" && (o.config == "-" || o.header == "-")) fail("--payload cannot be stdin with another input");
    const std::string bytes = read_payload(o.payload);
    size = bytes.size();
    v = ns.verify(h.data(), h.size(), block, kvkey::Payload(bytes.data(), bytes.size()));
  } else {
    size = parse_uint_option(o.size, 64, "--size");
    v = ns.verify(h.data(), h.size(), block, size);
  }

  print(out, "verdict: {}\n", v);
  if (v.ok()) {
    print(out, "accepted: the header matches the reader's identity, slice, block hash, payload size{}\n",
          o.payload.empty() ? " (size only: the payload bytes were not checked)" : " and the payload's digest");
    return exit_ok;
  }
  const kvkey::ParsedEnvelope parsed = kvkey::parse_envelope(h.data(), h.size());
  const auto& theirs = parsed.contents;
  if (theirs && v.reason == kvkey::Reason::identity_mismatch && v.field != "shard") {
    append_row(out, "header has", value_of(field_values(theirs->identity), v.field), 14);
    append_row(out, "reader has", value_of(field_values(ns.identity()), v.field), 14);
  } else if (theirs && v.reason == kvkey::Reason::identity_mismatch) {
    append_row(out, "header slice", fmt::format("{}", theirs->slice), 14);
    append_row(out, "reader slice", fmt::format("{}", ns.slice()), 14);
  } else if (theirs && v.reason == kvkey::Reason::block_mismatch) {
    append_row(out, "header block", theirs->block_hash.hex(), 14);
    append_row(out, "reader block", block.hex(), 14);
  } else if (theirs && v.reason == kvkey::Reason::size_mismatch) {
    append_row(out, "header size", std::to_string(theirs->payload_size), 14);
    append_row(out, "reader size", std::to_string(size), 14);
  } else if (theirs && v.reason == kvkey::Reason::payload_mismatch) {
    append_row(out, "header has", fmt::format("{} {}", kvkey::to_string(theirs->integrity),
                                              to_hex({theirs->payload_digest.begin(), theirs->payload_digest.end()})),
               14);
  } else if (!theirs) {
    append_row(out, "header", fmt::format("not a kvkey envelope: {}", not_envelope_reason(file, parsed.verdict)), 14);
  }
  print(out, "rejected: the object must be treated as a miss\n");
  return exit_rejected;
}

// ---- diff -----------------------------------------------------------------------

namespace {
void compare(std::string& out, std::string_view what, const std::string& a, const std::string& b) {
  if (a == b) return print(out, "{}: same, {}\n", what, a);
  print(out, "{}: different\n  A: {}\n  B: {}\n", what, a, b);
}
}  // namespace

int run_diff(const std::string& config_a, const std::string& config_b, std::string& out) {
  if (config_a == "-" && config_b == "-") fail("CONFIG_A and CONFIG_B cannot both be stdin");
  const kvkey::KeyNamespace<> a = load_namespace(config_a);
  const kvkey::KeyNamespace<> b = load_namespace(config_b);

  // Compare the encoded bytes field by field (the format's own list), print the values.
  const auto ea = kvkey::encoded_fields(a.identity());
  const auto eb = kvkey::encoded_fields(b.identity());
  std::vector<std::string_view> differing;
  for (const auto& f : ea) {
    const auto it = std::find_if(eb.begin(), eb.end(), [&](const kvkey::EncodedField& g) { return g.path == f.path; });
    if (it == eb.end() || it->bytes != f.bytes) differing.push_back(f.path);
  }
  for (const auto& g : eb) {
    if (std::none_of(ea.begin(), ea.end(), [&](const kvkey::EncodedField& f) { return f.path == g.path; })) {
      differing.push_back(g.path);
    }
  }
  const bool same_identity = a.encoding() == b.encoding();
  const bool same_slice = a.slice() == b.slice();

  print(out, "A: {}\nB: {}\n", display_name(config_a), display_name(config_b));
  const auto va = field_values(a.identity());
  const auto vb = field_values(b.identity());
  print(out, "differing salient fields: {}\n", differing.size());
  for (std::string_view path : differing) {
    append_row(out, path, "A: " + value_of(va, path), label_width);
    append_row(out, "", "B: " + value_of(vb, path), label_width);
  }
  compare(out, "slice", fmt::format("{}", a.slice()), fmt::format("{}", b.slice()));
  compare(out, "key prefix", a.key_prefix(), b.key_prefix());
  if (same_identity && same_slice) {
    print(out, "verdict: share: same identity and slice, so the same block hashes, store keys and objects\n");
    return exit_ok;
  }
  if (same_identity) {
    print(out,
          "verdict: same block hashes, different objects: same identity, different slice, so each deployment "
          "stores its own objects under its own keys\n");
  } else {
    print(out, "verdict: no sharing: the identities differ, so block hashes, store keys and objects all differ\n");
  }
  return exit_rejected;
}

}  // namespace kvkey_tool
