// SPDX-License-Identifier: Apache-2.0
// `kvkey verify CONFIG HEADER_FILE --block H --payload FILE`: check an
// envelope against a configuration, as a reader would (a keyed deployment's
// reader with --secret-file: its tenant secret).
#include <kvkey/any_key_namespace.hpp>
#include <kvkey/envelope.hpp>
#include <kvkey/fmt.hpp>
#include <kvkey/key_namespace.hpp>
#include <kvkey/payload.hpp>

#include <fmt/format.h>

#include <cstdint>
#include <memory>
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

struct VerifyOptions {
  std::string config;
  std::string header;
  std::string block;        ///< 64 hex
  std::string size;         ///< payload size in bytes, decimal (size-only check), or
  std::string payload;      ///< the payload file (checks the digest)
  std::string secret_file;  ///< a keyed deployment's tenant secret
};

int run_verify(const VerifyOptions& o, std::string& out) {
  IdentityConfig config = load_identity_config(o.config);
  // --size checks everything but the bytes: an explicit opt-out of the digest check.
  if (o.payload.empty()) config.policy.payload = kvkey::PayloadCheck::size_only;
  const kvkey::AnyKeyNamespace ns = reader_namespace_for(config, o.secret_file);
  if (o.config == "-" && o.header == "-") fail("CONFIG and HEADER_FILE cannot both be stdin");
  const HeaderFile file = read_header(o.header);
  const std::vector<std::uint8_t>& h = file.bytes;
  const kvkey::ParsedEnvelope parsed = kvkey::parse_envelope(h.data(), h.size());
  if (parsed.contents) require_secret_for(*parsed.contents, o.header, ns, "verify");
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
    v = verify_without_payload(ns, h, block, size);
  }

  print(out, "verdict: {}\n", v);
  if (v.ok()) {
    print(out, "accepted: the header matches the reader's identity, slice, block hash, payload size{}\n",
          o.payload.empty() ? " (size only: the payload bytes were not checked)" : " and the payload's digest");
    return exit_ok;
  }
  if (!parsed.contents) {
    append_row(out, "header", fmt::format("not a kvkey envelope: {}", not_envelope_reason(file, parsed.verdict)), 14);
  } else {
    append_mismatch(out, *parsed.contents, v, ns, block, size);
  }
  print(out, "rejected: the object must be treated as a miss\n");
  return exit_rejected;
}

}  // namespace

std::vector<Command> add_verify_command(CLI::App& app) {
  auto o = std::make_shared<VerifyOptions>();
  auto* cmd = app.add_subcommand("verify", "Verify an envelope against a configuration, as a reader would");
  cmd->add_option("CONFIG", o->config, "the reader's identity file (JSON or TOML)")->required();
  cmd->add_option("HEADER_FILE", o->header, "envelope file")->required();
  cmd->add_option("--block", o->block, "the block hash the reader looks up (64 hex)")->required();
  auto* payload = cmd->add_option("--payload", o->payload,
                                  "the payload (KV bytes) file read with the header: checks size and digest");
  auto* size = cmd->add_option("--size", o->size,
                               "size-only check without the bytes: the payload size the reader "
                               "expects (the digest is not checked)")
                   ->excludes(payload);
  cmd->add_option("--secret-file", o->secret_file,
                  "a keyed deployment's tenant secret (hex or raw bytes, mode 0600): the reader is keyed under it");
  cmd->callback([payload, size] {
    if (payload->count() + size->count() == 0) throw CLI::ValidationError("give --payload FILE (or --size N)");
  });
  return {{cmd, [o](std::string& out) { return run_verify(*o, out); }}};
}

}  // namespace kvkey_tool
