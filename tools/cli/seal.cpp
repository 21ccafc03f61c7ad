// SPDX-License-Identifier: Apache-2.0
// `kvkey seal CONFIG --block H --payload FILE -o OUT`: the envelope a
// deployment stores with a block.
#include <kvkey/envelope.hpp>
#include <kvkey/fmt.hpp>
#include <kvkey/key_namespace.hpp>
#include <kvkey/payload.hpp>

#include <fmt/format.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
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

struct SealOptions {
  std::string config;
  std::string block;    ///< 64 hex
  std::string size;     ///< payload size in bytes, decimal (size-only envelope), or
  std::string payload;  ///< the payload file (an envelope with its digest)
  std::string output;
};

void write_file(const std::string& path, const std::uint8_t* data, std::size_t size) {
  errno = 0;
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr)
    fail("cannot write {}: {}", display_name(path), errno != 0 ? std::strerror(errno) : "unknown error");
  const bool ok = std::fwrite(data, 1, size, f) == size;
  const int err = errno;
  if (std::fclose(f) != 0 || !ok)
    fail("cannot write {}: {}", display_name(path), std::strerror(err != 0 ? err : errno));
}

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

}  // namespace

std::vector<Command> add_seal_command(CLI::App& app) {
  auto o = std::make_shared<SealOptions>();
  auto* cmd = app.add_subcommand("seal", "Write the envelope (header) a deployment stores with a block");
  cmd->add_option("CONFIG", o->config, "identity file (JSON or TOML)")->required();
  cmd->add_option("--block", o->block, "block hash (64 hex)")->required();
  auto* payload = cmd->add_option("--payload", o->payload, "the payload (KV bytes) file: its digest is sealed");
  auto* size = cmd->add_option("--size", o->size, "size-only envelope (integrity mode none) for this payload size")
                   ->excludes(payload);
  cmd->callback([payload, size] {
    if (payload->count() + size->count() == 0) throw CLI::ValidationError("give --payload FILE (or --size N)");
  });
  cmd->add_option("-o,--output", o->output, "file to write; - writes the envelope to stdout")->required();
  return {{cmd, [o](std::string& out) { return run_seal(*o, out); }}};
}

}  // namespace kvkey_tool
