// seed_probe: the lmdeploy prefix-cache probe, with kvkey keys.
//
// A 384-token prompt (a 32-token fragment repeated 12 times) is cut into six
// 64-token blocks. Five scenarios that produce identical keys under the legacy
// scheme (docs/integration/lmdeploy.md) must produce different keys here, and a
// reader must reject a header written under another identity, naming the field.
// Exits 1 if any expectation fails.
#include <kvkey/fmt.hpp>
#include <kvkey/kvkey.hpp>

#include <fmt/format.h>

#include <cstdint>
#include <string_view>
#include <vector>

namespace {

int failures = 0;

void expect(bool ok, std::string_view what) {
  fmt::print("  [{}] {}\n", ok ? "ok" : "FAIL", what);
  if (!ok) ++failures;
}

std::vector<std::int64_t> probe_prompt(std::int64_t base) {
  std::vector<std::int64_t> tokens;
  for (int rep = 0; rep < 12; ++rep) {
    for (std::int64_t i = 0; i < 32; ++i) tokens.push_back(base + i * 7);
  }
  return tokens;
}

kvkey::Identity base_identity() {
  kvkey::Identity id;
  id.tenant = "team-a";
  id.model.name = "Qwen2.5-0.5B-Instruct";
  id.model.revision = "7ae557604adf67be50417f59c2c2f167def9a775";
  id.model.weights_epoch = 0;
  id.kv.dtype = kvkey::KvDtype::fp16;
  id.kv.block_size = 64;
  id.kv.num_layers = 24;
  id.kv.num_kv_heads = 2;
  id.kv.head_dim = 64;
  id.kv.layout = "lmdeploy.mooncake.v1";
  return id;
}

// Block 2's hash and key under id, for the given prompt.
struct Probe {
  kvkey::KeyNamespace<> ns;
  kvkey::Digest block;
  std::string key;
};

Probe probe(const kvkey::Identity& id, const std::vector<std::int64_t>& prompt) {
  kvkey::KeyNamespace<> ns{id};
  const auto hashes = ns.block_hashes(prompt);
  const auto block = hashes.at(2);
  auto key = ns.store_key(block);
  return Probe{std::move(ns), block, std::move(key)};
}

// The reader's verdict on a header the writer sealed for the same prompt block.
// The payload: stand-in KV bytes of the block's size.
kvkey::Verdict cross_verify(const Probe& writer, const Probe& reader, std::uint64_t payload_size) {
  const std::vector<std::uint8_t> kv(payload_size, 0x42);
  const kvkey::Payload payload(kv.data(), kv.size());
  const kvkey::Envelope header = writer.ns.seal(writer.block, payload);
  return reader.ns.verify(header, reader.block, payload);
}

void print_key(std::string_view label, const Probe& p) { fmt::print("  {:<22} {}\n", label, p.key); }

}  // namespace

int main() {
  const auto prompt = probe_prompt(1000);
  constexpr std::uint64_t payload = 24 * 2 * 2 * 64 * 64 * 2;  // layers * K,V * heads * head_dim * block * 2 bytes
  fmt::print("prompt: {} tokens, block size 64 -> {} full blocks; showing block 2\n\n", prompt.size(),
             prompt.size() / 64);

  fmt::print("(A) KV dtype: fp16 vs fp8_e4m3 vs int4\n");
  auto fp8_id = base_identity();
  fp8_id.kv.dtype = kvkey::KvDtype::fp8_e4m3;
  auto int4_id = base_identity();
  int4_id.kv.dtype = kvkey::KvDtype::int4;
  int4_id.kv.quant.scheme = "per_token_asym";
  int4_id.kv.quant.scale_dtype = kvkey::KvDtype::fp16;
  int4_id.kv.quant.zero_point = true;
  const Probe fp16 = probe(base_identity(), prompt);
  const Probe fp8 = probe(fp8_id, prompt);
  const Probe int4 = probe(int4_id, prompt);
  print_key("fp16", fp16);
  print_key("fp8_e4m3", fp8);
  print_key("int4", int4);
  expect(fp16.key != fp8.key && fp16.key != int4.key && fp8.key != int4.key, "three formats, three keys");
  for (const auto* reader : {&fp8, &int4}) {
    const auto v = cross_verify(fp16, *reader, payload);
    fmt::print("  {} reader on fp16 header: {}\n", kvkey::to_string(reader->ns.identity().kv.dtype), v);
    expect(v.reason == kvkey::Reason::identity_mismatch && v.field == "kv.dtype", "rejected, naming kv.dtype");
  }
  const auto v16 = cross_verify(fp16, fp16, payload);
  fmt::print("  fp16 reader on fp16 header: {}\n", v16);
  expect(v16.ok(), "own header accepted");

  fmt::print("\n(B) weights epoch: 0 vs 1 (after a weight update)\n");
  auto epoch1_id = base_identity();
  epoch1_id.model.weights_epoch = 1;
  const Probe epoch1 = probe(epoch1_id, prompt);
  print_key("epoch 0", fp16);
  print_key("epoch 1", epoch1);
  expect(fp16.key != epoch1.key, "epochs give different keys");
  const auto vb = cross_verify(fp16, epoch1, payload);
  fmt::print("  epoch-1 reader on epoch-0 header: {}\n", vb);
  expect(vb.reason == kvkey::Reason::identity_mismatch && vb.field == "model.weights_epoch",
         "rejected, naming model.weights_epoch");

  fmt::print("\n(C) tenants: team-a vs team-b, and no tenant\n");
  auto team_b_id = base_identity();
  team_b_id.tenant = "team-b";
  const Probe team_b = probe(team_b_id, prompt);
  print_key("team-a", fp16);
  print_key("team-b", team_b);
  expect(fp16.key != team_b.key, "tenants give different keys");
  const auto vc = cross_verify(fp16, team_b, payload);
  fmt::print("  team-b reader on team-a header: {}\n", vc);
  expect(vc.reason == kvkey::Reason::identity_mismatch && vc.field == "tenant", "rejected, naming tenant");
  auto anonymous = base_identity();
  anonymous.tenant.clear();
  try {
    kvkey::KeyNamespace<> ns{anonymous};
    expect(false, "empty tenant refused");
  } catch (const kvkey::identity_error& e) {
    fmt::print("  empty tenant: {}\n", e.what());
    expect(e.field() == "tenant", "empty tenant refused");
  }

  fmt::print("\n(D) adapter 'base' with two different weight files\n");
  auto lora1_id = base_identity();
  lora1_id.adapter = kvkey::Adapter("base", kvkey::fingerprint("adapter weights, version 1"));
  auto lora2_id = base_identity();
  lora2_id.adapter = kvkey::Adapter("base", kvkey::fingerprint("adapter weights, version 2"));
  const Probe lora1 = probe(lora1_id, prompt);
  const Probe lora2 = probe(lora2_id, prompt);
  print_key("base (weights v1)", lora1);
  print_key("base (weights v2)", lora2);
  expect(lora1.key != lora2.key, "same adapter name, different weights: different keys");
  const auto vd = cross_verify(lora1, lora2, payload);
  fmt::print("  v2 reader on v1 header: {}\n", vd);
  expect(vd.reason == kvkey::Reason::identity_mismatch && vd.field == "adapter.weights_fingerprint",
         "rejected, naming adapter.weights_fingerprint");

  fmt::print("\n(E) different tokens\n");
  const Probe other = probe(base_identity(), probe_prompt(2000));
  print_key("prompt 1", fp16);
  print_key("prompt 2", other);
  expect(fp16.key != other.key, "different tokens give different keys");
  const auto ve = cross_verify(Probe{other.ns, other.block, other.key}, fp16, payload);
  fmt::print("  reader of prompt 1 on prompt 2's header: {}\n", ve);
  expect(ve.reason == kvkey::Reason::block_mismatch, "rejected as another block");

  if (failures != 0) {
    fmt::print("\nseed_probe: {} expectation(s) FAILED\n", failures);
    return 1;
  }
  fmt::print("\nseed_probe: all expectations met\n");
  return 0;
}
