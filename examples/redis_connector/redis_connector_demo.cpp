// SPDX-License-Identifier: Apache-2.0
// redis_connector_demo: save, look up, load and purge kvkey-keyed KV blocks in
// a running Redis server.
//
//   redis_connector_demo [port [host]]      (default: $KVKEY_REDIS_PORT or 6379, 127.0.0.1)
//
// Uses the tenant "demo" (purged at start and at the end). Exits 1 if any
// expectation fails, 2 if the server cannot be used.
#include "redis_connector.hpp"

#include <kvkey/fmt.hpp>

#include <fmt/format.h>

#include <csignal>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

namespace {

int failures = 0;

void expect(bool ok, std::string_view what) {
  fmt::print("  [{}] {}\n", ok ? "ok" : "FAIL", what);
  if (!ok) ++failures;
}

kvkey::Identity chat_identity() {
  kvkey::Identity id;
  id.tenant = "demo";
  id.model.name = "Llama-3.1-8B-Instruct";
  id.model.revision = "0e9e39f249a16976918f6564b8830bc894c89659";
  id.kv.dtype = kvkey::KvDtype::fp16;
  id.kv.block_size = 16;
  id.kv.num_layers = 32;
  id.kv.num_kv_heads = 8;
  id.kv.head_dim = 128;
  id.kv.layout = "demo.layer_major.v1";
  id.shard.tp_size = 2;
  return id;
}

// One namespace per rank of a deployment.
std::vector<kvkey_redis::Namespace> ranks_of(kvkey::Identity id) {
  std::vector<kvkey_redis::Namespace> out;
  for (std::uint32_t r = 0; r < id.shard.tp_size; ++r) {
    id.shard.tp_rank = r;
    out.emplace_back(id);
  }
  return out;
}

std::vector<const kvkey_redis::Namespace*> pointers(const std::vector<kvkey_redis::Namespace>& ranks) {
  std::vector<const kvkey_redis::Namespace*> out;
  for (const auto& ns : ranks) out.push_back(&ns);
  return out;
}

// A rank's KV bytes for one block: layers * (K, V) * its heads * head_dim * tokens * element size.
std::size_t block_bytes(const kvkey_redis::Namespace& ns) {
  const auto& kv = ns.identity().kv;
  const auto& s = ns.slice();
  const std::size_t element = kv.dtype == kvkey::KvDtype::fp16 ? 2 : 1;
  return std::size_t{s.layer_end - s.layer_begin} * 2 * (s.kv_head_end - s.kv_head_begin) * kv.head_dim *
         kv.block_size * element;
}

// Stand-in KV bytes: a pattern from the rank and the block.
std::vector<std::uint8_t> fake_kv(const kvkey_redis::Namespace& ns, const kvkey::Digest& block) {
  std::vector<std::uint8_t> out(block_bytes(ns));
  for (std::size_t i = 0; i < out.size(); ++i) {
    out[i] = static_cast<std::uint8_t>(block.data()[i % 32] + i + ns.slice().kv_head_begin);
  }
  return out;
}

void save_all(kvkey_redis::Connector& store, const kvkey_redis::Namespace& ns,
              const std::vector<kvkey::Digest>& blocks) {
  std::vector<std::vector<std::uint8_t>> kv;
  std::vector<kvkey_redis::BlockPayload> payloads;
  for (const auto& b : blocks) kv.push_back(fake_kv(ns, b));
  for (std::size_t i = 0; i < blocks.size(); ++i) payloads.push_back({blocks[i], kv[i].data(), kv[i].size()});
  store.save(ns, payloads);
}

int run(kvkey_redis::Connector& store) {
  std::vector<std::int32_t> prompt;
  for (std::int32_t i = 0; i < 64; ++i) prompt.push_back(1000 + 17 * i);  // 4 full blocks
  const std::size_t max_tokens = prompt.size() - 1;                       // the last token is always computed

  const auto chat = ranks_of(chat_identity());
  fmt::print("deployment chat (fp16, tp=2): rank 0 {}, rank 1 {}, {} KV bytes per block and rank\n", chat[0].slice(),
             chat[1].slice(), block_bytes(chat[0]));
  fmt::print("purged {} leftover keys under {}\n", store.purge(chat[0].tenant_prefix()), chat[0].tenant_prefix());

  auto before = store.lookup(pointers(chat), prompt, {}, max_tokens);
  fmt::print("\nfirst request: {} reusable tokens\n", before.prefix.tokens);
  expect(before.prefix.tokens == 0, "empty store, nothing reusable");
  for (const auto& ns : chat) save_all(store, ns, before.blocks);
  fmt::print("saved {} blocks on each rank, e.g. {}\n", before.blocks.size(), chat[0].store_key(before.blocks[0]));

  auto after = store.lookup(pointers(chat), prompt, {}, max_tokens);
  fmt::print("second request: {} reusable tokens ({} blocks)\n", after.prefix.tokens, after.prefix.blocks);
  expect(after.prefix.blocks == 3, "3 of 4 blocks reusable (the 4th ends at the last token)");
  std::size_t good = 0;
  for (const auto& ns : chat) {
    const auto loaded = store.load(ns, after.blocks, block_bytes(ns));
    for (std::size_t i = 0; i < loaded.size(); ++i) {
      good += loaded[i].status == kvkey_redis::LoadStatus::loaded && loaded[i].payload == fake_kv(ns, after.blocks[i]);
    }
  }
  expect(good == 2 * after.blocks.size(), "every block of both ranks loads and verifies");

  auto fp8_id = chat_identity();
  fp8_id.kv.dtype = kvkey::KvDtype::fp8_e4m3;
  const auto fp8 = ranks_of(fp8_id);
  const auto fp8_lookup = store.lookup(pointers(fp8), prompt, {}, max_tokens);
  fmt::print("\nfp8 deployment, same model and prompt: {} reusable tokens\n", fp8_lookup.prefix.tokens);
  expect(fp8_lookup.prefix.tokens == 0, "another KV format gets no hits");
  // Simulate a store bug or a hostile writer: fp16 bytes under the fp8 key.
  // (Block hashes are per deployment: fp8's key for block 0 is built from
  // fp8's own hash, fp8_lookup.blocks[0].)
  const std::string fp16_key = chat[0].store_key(after.blocks[0]);
  const std::string fp8_key = fp8[0].store_key(fp8_lookup.blocks[0]);
  store.connection().command({"COPY", fp16_key, fp8_key});
  const std::size_t existing = store.lookup_existing({&fp8[0]}, {fp8_lookup.blocks[0]}).prefix.blocks;
  const std::size_t verified = store.lookup({&fp8[0]}, {fp8_lookup.blocks[0]}).prefix.blocks;
  fmt::print("fp8 rank 0 lookup of that block: {} by existence, {} verified\n", existing, verified);
  expect(existing == 1 && verified == 0, "the verified lookup does not count a foreign header");
  const auto forced = store.load(fp8[0], {fp8_lookup.blocks[0]}, block_bytes(fp8[0]));
  fmt::print("fp8 reader on fp16 bytes copied under its key: {}\n", forced[0].verdict);
  expect(forced[0].status == kvkey_redis::LoadStatus::rejected && forced[0].verdict.field == "kv.dtype",
         "rejected, naming kv.dtype");

  auto epoch1_id = chat_identity();
  epoch1_id.model.weights_epoch = 1;
  const auto epoch1 = ranks_of(epoch1_id);
  const auto e1 = store.lookup(pointers(epoch1), prompt, {}, max_tokens);
  fmt::print("\nafter a weight update (epoch 1): {} reusable tokens\n", e1.prefix.tokens);
  expect(e1.prefix.tokens == 0, "the old epoch's KV is not offered");
  for (const auto& ns : epoch1) save_all(store, ns, e1.blocks);
  const std::size_t dropped = store.purge(chat[0].key_prefix());
  fmt::print("purged the old epoch: {} objects under {}\n", dropped, chat[0].key_prefix());
  expect(dropped == 9, "4 blocks x 2 ranks, and the fp8 copy: the prefix covers every format of the model");
  expect(store.lookup(pointers(epoch1), prompt, {}, max_tokens).prefix.blocks == 3, "epoch 1 keeps its blocks");

  const std::size_t rest = store.purge(chat[0].tenant_prefix());
  fmt::print("purged the tenant: {} objects under {}\n", rest, chat[0].tenant_prefix());
  expect(rest == 8, "epoch 1's 4 blocks x 2 ranks removed");
  return failures == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  std::signal(SIGPIPE, SIG_IGN);  // a closed connection must be an error, not the end of the process
  kvkey_redis::Options options;
  const char* env_port = std::getenv("KVKEY_REDIS_PORT");
  if (argc > 1) {
    options.port = std::atoi(argv[1]);
  } else if (env_port != nullptr) {
    options.port = std::atoi(env_port);
  }
  if (argc > 2) options.host = argv[2];
  kvkey_redis::Connector store(options);
  try {
    const int rc = run(store);
    fmt::print("\nredis_connector_demo: {}\n", rc == 0 ? "all expectations met" : "expectations FAILED");
    return rc;
  } catch (const kvkey_redis::StoreError& e) {
    fmt::print(stderr, "redis_connector_demo: {}\n", e.what());
    return 2;
  }
}
