// SPDX-License-Identifier: Apache-2.0
// `kvkey inspect HEADER_FILE`: decode an envelope (the producer's identity,
// slice, block hash, payload size and digest).
#include <kvkey/envelope.hpp>
#include <kvkey/errors.hpp>
#include <kvkey/fmt.hpp>
#include <kvkey/key_namespace.hpp>

#include <fmt/format.h>

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
  if (c->secret_id) append_row(out, "secret id", c->secret_id->hex(), label_width);
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
    append_row(out, "root", fmt::format("(the identity does not validate: {})", e.message()), label_width);
  }
  return exit_ok;
}

}  // namespace

std::vector<Command> add_inspect_command(CLI::App& app) {
  auto header = std::make_shared<std::string>();
  auto* cmd = app.add_subcommand("inspect",
                                 "Decode an envelope: the producer's identity, slice, block "
                                 "hash, payload size and digest");
  cmd->add_option("HEADER_FILE", *header, "envelope file (1024 bytes)")->required();
  return {{cmd, [header](std::string& out) { return run_inspect(*header, out); }}};
}

}  // namespace kvkey_tool
