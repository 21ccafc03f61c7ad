// SPDX-License-Identifier: Apache-2.0
// `kvkey inspect FILE [--identity CONFIG [--key KEY] [--secret-file F]]`: decode
// an envelope or a whole stored value (the producer's identity, slice, block
// hash, payload size and digest) and, with a reader's identity (and a keyed
// deployment's tenant secret), say whether the value verifies.
#include <kvkey/any_key_namespace.hpp>
#include <kvkey/envelope.hpp>
#include <kvkey/errors.hpp>
#include <kvkey/fmt.hpp>
#include <kvkey/key_namespace.hpp>
#include <kvkey/payload.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cli/command.hpp"
#include "cli/envelope_file.hpp"
#include "cli/identity_config.hpp"
#include "cli/inputs.hpp"
#include "cli/report.hpp"
#include "cli/tool.hpp"

namespace kvkey_tool {

namespace {

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

// The producer's root and store key, as an unkeyed (SHA-256) namespace would
// compute them, when the identity validates and the slice fits a shard.
void append_producer_namespace(std::string& out, const kvkey::EnvelopeContents& c) {
  if (c.namespace_kind == kvkey::NamespaceKind::keyed) {
    print(out, c.integrity == kvkey::IntegrityMode::aes256_gcm
                   ? "producer namespace: keyed, confidential (the payload is AES-256-GCM ciphertext; its plaintext, "
                     "root and keys need the tenant secret)\n"
                   : "producer namespace: keyed (its root and keys need the tenant secret)\n");
    return;
  }
  print(out, "producer namespace (SHA-256):\n");
  kvkey::Identity id = c.identity;
  kvkey::Policy policy;
  if (id.tenant == kvkey::single_tenant_name) {
    id.tenant.clear();
    policy = kvkey::single_tenant;
  }
  const auto shard = shard_for_slice(id.kv, c.slice);
  if (shard) id.shard = *shard;
  try {
    const kvkey::KeyNamespace<> ns(id, policy);
    append_row(out, "root", ns.root().hex(), label_width);
    append_row(out, "store key", shard ? ns.store_key(c.block_hash) : "(the slice fits no shard)", label_width);
  } catch (const kvkey::identity_error& e) {
    append_row(out, "root", fmt::format("(the identity does not validate: {})", e.message()), label_width);
  }
}

struct InspectOptions {
  std::string file;
  std::string identity;     ///< a reader's identity file: say whether the value verifies
  std::string key;          ///< the key the value was read under (checked against the identity)
  std::string secret_file;  ///< a keyed deployment's tenant secret (with identity)
};

// A file holding a header, or a whole stored value (header, then payload), as
// `redis-cli --raw GET` writes it: one trailing newline is ignored when the
// header's payload size says it is not the payload's. Only as many bytes as the
// header claims (and two more, to tell a longer file) are read.
struct ValueFile {
  HeaderFile header;                   // the first envelope_size bytes (or all that was read when it is no envelope)
  std::optional<std::string> payload;  // the bytes after the header, when the file holds more than a header
  std::uint64_t claimed = 0;           // the header's payload size
  bool longer = false;                 // the file holds more than envelope_size + claimed + 1 bytes
  bool newline_ignored = false;
};

ValueFile read_value_file(const std::string& path) {
  const auto claimed_size = [](const std::string& head) -> std::optional<std::uint64_t> {
    const auto parsed = kvkey::parse_envelope(reinterpret_cast<const std::uint8_t*>(head.data()), head.size());
    if (!parsed.contents) return std::nullopt;
    return parsed.contents->payload_size;
  };
  const std::string s = read_at_most_then(path, kvkey::envelope_size, [&](const std::string& head) -> std::size_t {
    const auto claimed = claimed_size(head);
    if (!claimed) return 1;  // enough to tell a longer file
    return static_cast<std::size_t>(std::min<std::uint64_t>(*claimed, max_payload_size)) + 2;
  });
  ValueFile f;
  const auto claimed =
      s.size() >= kvkey::envelope_size ? claimed_size(s.substr(0, kvkey::envelope_size)) : std::nullopt;
  if (!claimed) {  // not a value: reported as the header file it is not
    f.header = header_file(path, s);
    return f;
  }
  f.claimed = *claimed;
  std::size_t rest = s.size() - kvkey::envelope_size;
  if (rest != f.claimed && (rest == f.claimed + 1 || rest == 1) && s.back() == '\n') {
    f.newline_ignored = true;
    --rest;
  }
  f.longer = rest > f.claimed + 1;
  f.header = header_file(path, s.substr(0, kvkey::envelope_size));
  if (rest != 0) f.payload = s.substr(kvkey::envelope_size, rest);
  return f;
}

// As a reader with the identity file o.identity would: is o.key (when given) its key
// for the block the header names, and does the value verify (the payload's size
// and digest too when the file holds it)? Prints the verdict and the field.
int append_reader_check(std::string& out, const InspectOptions& o, const ValueFile& value,
                        const kvkey::EnvelopeContents& c) {
  IdentityConfig config = load_identity_config(o.identity);
  if (!value.payload) config.policy.payload = kvkey::PayloadCheck::size_only;
  const kvkey::AnyKeyNamespace ns = reader_namespace_for(config, o.secret_file);
  require_secret_for(c, o.file, ns, "inspect");
  const std::vector<std::uint8_t>& h = value.header.bytes;
  print(out, "reader ({}{}):\n", display_name(o.identity), ns.keyed() ? ", keyed" : "");
  const std::string expected = ns.store_key(c.block_hash);
  if (!o.key.empty()) {
    append_row(out, "given key",
               o.key == expected ? "the reader's key for the header's block"
                                 : "not the reader's key for the header's block: " + expected,
               label_width);
  }
  kvkey::Verdict v;
  std::uint64_t size = c.payload_size;
  if (value.payload) {
    size = value.payload->size();
    v = ns.verify(h.data(), h.size(), c.block_hash, kvkey::Payload(value.payload->data(), value.payload->size()));
  } else {
    v = verify_without_payload(ns, h, c.block_hash, size);
  }
  append_row(out, "verdict", fmt::format("{}", v), label_width);
  if (!v.ok()) append_mismatch(out, c, v, ns, c.block_hash, size, label_width);
  if (!o.key.empty() && o.key != expected) {
    print(out,
          "does not verify, on field store_key: the value is not under the reader's key for its block (a "
          "value swapped between keys, or another namespace's)\n");
    return exit_rejected;
  }
  if (!v.ok()) {
    print(out, "does not verify, on field {}: the reader treats it as a miss\n", v.field.empty() ? "-" : v.field);
    return exit_rejected;
  }
  print(out, "verifies: identity, slice, block hash, payload size{}\n",
        value.payload ? " and the payload's digest" : " (header only: the payload was not checked)");
  return exit_ok;
}

int run_inspect(const InspectOptions& o, std::string& out) {
  if (o.file == "-" && o.identity == "-") fail("FILE and --identity cannot both be stdin");
  if (!o.key.empty() && o.identity.empty()) fail("--key: needs --identity (the reader whose key it is)");
  if (!o.secret_file.empty() && o.identity.empty()) fail("--secret-file: needs --identity (the reader it keys)");
  const ValueFile value = read_value_file(o.file);
  const HeaderFile& file = value.header;
  const std::string& header_path = o.file;
  const std::vector<std::uint8_t>& h = file.bytes;
  const kvkey::ParsedEnvelope parsed = kvkey::parse_envelope(h.data(), h.size());
  const auto& c = parsed.contents;
  if (!c) fail("{}: not a kvkey envelope: {}", display_name(header_path), not_envelope_reason(file, parsed.verdict));

  if (value.payload) {
    const std::string size_note = value.payload->size() == value.claimed
                                      ? ""
                                      : fmt::format(" ({}the header says {}: a torn or padded value)",
                                                    value.longer ? "or more; " : "", value.claimed);
    print(out, "value: {} ({}-byte kvkey envelope, format version {}, then {} payload bytes{}{})\n",
          display_name(header_path), h.size(), c->version, value.payload->size(), size_note,
          value.newline_ignored ? "; one trailing newline ignored" : "");
  } else {
    print(out, "header: {} ({}-byte kvkey envelope, format version {}{})\n", display_name(header_path), h.size(),
          c->version, value.newline_ignored ? "; one trailing newline ignored" : "");
  }
  print(out, "producer identity (salient fields in encoding order):\n");
  append_fields(out, field_values(c->identity));
  print(out, "envelope:\n");
  append_row(out, "slice", fmt::format("{}", c->slice), label_width);
  append_row(out, "block hash", c->block_hash.hex(), label_width);
  append_row(out, "payload size", fmt::format("{} bytes", c->payload_size), label_width);
  append_row(out, "namespace", std::string(kvkey::to_string(c->namespace_kind)), label_width);
  if (c->secret_id) append_row(out, "secret id", c->secret_id->hex(), label_width);
  append_row(out, "integrity", std::string(kvkey::to_string(c->integrity)), label_width);
  const bool tagged =
      c->integrity == kvkey::IntegrityMode::poly1305 || c->integrity == kvkey::IntegrityMode::aes256_gcm;
  if (tagged) append_row(out, "nonce", to_hex({c->nonce.begin(), c->nonce.end()}), label_width);
  if (c->integrity != kvkey::IntegrityMode::none) {
    append_row(out, tagged ? "payload tag" : "payload digest",
               to_hex({c->payload_digest.begin(), c->payload_digest.end()}), label_width);
  }
  append_producer_namespace(out, *c);
  return o.identity.empty() ? exit_ok : append_reader_check(out, o, value, *c);
}

}  // namespace

std::vector<Command> add_inspect_command(CLI::App& app) {
  auto o = std::make_shared<InspectOptions>();
  auto* cmd = app.add_subcommand("inspect",
                                 "Decode an envelope or a whole stored value: the producer's identity, slice, "
                                 "block hash, payload size and digest; with --identity, whether it verifies");
  cmd->add_option("FILE", o->file,
                  "a header (1024 bytes) or a whole stored value (header, then payload); one trailing "
                  "newline is ignored")
      ->required();
  cmd->add_option("--identity", o->identity,
                  "a reader's identity file (JSON or TOML): say whether the value verifies, and on which field");
  cmd->add_option("--key", o->key, "the key the value was read under (with --identity: checked to be the reader's)");
  cmd->add_option("--secret-file", o->secret_file,
                  "with --identity: a keyed deployment's tenant secret (hex or raw bytes, mode 0600)");
  return {{cmd, [o](std::string& out) { return run_inspect(*o, out); }}};
}

}  // namespace kvkey_tool
