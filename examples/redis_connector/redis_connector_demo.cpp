// SPDX-License-Identifier: Apache-2.0
// redis_connector_demo: save, look up, load and purge kvkey-keyed KV blocks in
// a running Redis server, through kvkey::Connector over the hiredis store
// adapter (redis_store.hpp).
//
//   redis_connector_demo [port [host]]      (default: $KVKEY_REDIS_PORT or 6379, 127.0.0.1)
//
// Uses the tenant "demo" (purged at start and at the end). Exits 1 if any
// expectation fails, 2 if the server cannot be used.
#include "redis_store.hpp"

#include <kvkey/connector.hpp>
#include <kvkey/key_namespace.hpp>

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

using Namespace = kvkey::KeyNamespace<>;

// One namespace per rank of a deployment.
std::vector<Namespace> ranks_of(const kvkey::Identity& id) {
  const Namespace ns(id);
  std::vector<Namespace> out;
  for (std::uint32_t r = 0; r < id.shard.tp_size; ++r) out.push_back(ns.for_rank(r));
  return out;
}

// Stand-in KV bytes: a pattern from the rank and the block, of the rank's payload size.
std::vector<std::uint8_t> fake_kv(const Namespace& ns, const kvkey::Digest& block) {
  std::vector<std::uint8_t> out(static_cast<std::size_t>(*ns.payload_size()));
  for (std::size_t i = 0; i < out.size(); ++i) {
    out[i] = static_cast<std::uint8_t>(block.data()[i % 32] + i + ns.slice().kv_head_begin);
  }
  return out;
}

void save_all(const kvkey::Connector<>& conn, const std::vector<kvkey::Digest>& blocks) {
  for (std::size_t r = 0; r < conn.ranks().size(); ++r) {
    std::vector<std::vector<std::uint8_t>> kv;
    std::vector<kvkey::Payload> payloads;
    for (const auto& b : blocks) kv.push_back(fake_kv(conn.key_namespace(r), b));
    for (const auto& p : kv) payloads.emplace_back(p.data(), p.size());
    conn.save(blocks, payloads, r);
  }
}

int run(kvkey_redis::RedisStore& store) {
  std::vector<std::int32_t> prompt;
  for (std::int32_t i = 0; i < 64; ++i) prompt.push_back(1000 + 17 * i);  // 4 full blocks
  const std::size_t max_tokens = prompt.size() - 1;                       // the last token is always computed

  const auto chat = ranks_of(chat_identity());
  const kvkey::Connector<> chat_conn(store, chat);
  const std::size_t block_size = chat[0].identity().kv.block_size;
  fmt::print("deployment chat (fp16, tp=2): rank 0 {}, rank 1 {}, {} KV bytes per block and rank\n", chat[0].slice(),
             chat[1].slice(), *chat[0].payload_size());
  fmt::print("purged {} leftover keys under {}\n", store.purge(chat[0].tenant_prefix()), chat[0].tenant_prefix());

  const std::vector<kvkey::Digest> blocks = chat[0].block_hashes(prompt);
  const std::size_t before = chat_conn.lookup(blocks, max_tokens);
  fmt::print("\nfirst request: {} reusable tokens\n", before * block_size);
  expect(before == 0, "empty store, nothing reusable");

  save_all(chat_conn, blocks);
  fmt::print("saved {} blocks on each rank, e.g. {}\n", blocks.size(), chat[0].store_key(blocks[0]));

  const std::size_t after = chat_conn.lookup(blocks, max_tokens);
  fmt::print("second request: {} reusable tokens ({} blocks)\n", after * block_size, after);
  expect(after == 3, "3 of 4 blocks reusable (the 4th ends at the last token)");

  std::size_t good = 0;
  for (std::size_t r = 0; r < chat.size(); ++r) {
    const auto loaded = chat_conn.load(blocks, r);
    for (std::size_t i = 0; i < loaded.size(); ++i) good += loaded[i] && *loaded[i] == fake_kv(chat[r], blocks[i]);
  }
  expect(good == 2 * blocks.size(), "every block of both ranks loads and verifies");

  auto fp8_id = chat_identity();
  fp8_id.kv.dtype = kvkey::KvDtype::fp8_e4m3;
  const auto fp8 = ranks_of(fp8_id);
  const kvkey::Connector<> fp8_conn(store, fp8);
  const std::vector<kvkey::Digest> fp8_blocks = fp8[0].block_hashes(prompt);
  const std::size_t fp8_hits = fp8_conn.lookup(fp8_blocks, max_tokens);
  fmt::print("\nfp8 deployment, same model and prompt: {} reusable tokens\n", fp8_hits * block_size);
  expect(fp8_hits == 0, "another KV format gets no hits");

  // Simulate a store bug or a hostile writer: fp16 bytes under the fp8 key.
  // (Block hashes are per deployment: fp8's key for block 0 is built from
  // fp8's own hash, fp8_blocks[0].)
  const std::string fp16_key = chat[0].store_key(blocks[0]);
  const std::string fp8_key = fp8[0].store_key(fp8_blocks[0]);
  store.connection().command({"COPY", fp16_key, fp8_key});
  const kvkey::Connector<> fp8_rank0(store, fp8[0]);
  const std::size_t existing = fp8_rank0.lookup_existing({fp8_blocks[0]});
  const std::size_t verified = fp8_rank0.lookup({fp8_blocks[0]});
  fmt::print("fp8 rank 0 lookup of that block: {} by existence, {} verified\n", existing, verified);
  expect(existing == 1 && verified == 0, "the verified lookup does not count a foreign header");
  const auto forced = fp8_rank0.load_views({fp8_blocks[0]});
  fmt::print("fp8 reader on fp16 bytes copied under its key: {}\n", forced[0].result.verdict);
  expect(forced[0].result.status == kvkey::LoadResult::Status::rejected && forced[0].result.verdict.field == "kv.dtype",
         "rejected, naming kv.dtype");

  const kvkey::Connector<> epoch1 = chat_conn.with_epoch(1);
  const std::vector<kvkey::Digest> e1_blocks = epoch1.key_namespace().block_hashes(prompt);
  const std::size_t e1 = epoch1.lookup(e1_blocks, max_tokens);
  fmt::print("\nafter a weight update (epoch 1): {} reusable tokens\n", e1 * block_size);
  expect(e1 == 0, "the old epoch's KV is not offered");
  save_all(epoch1, e1_blocks);

  const std::size_t dropped = store.purge(chat[0].key_prefix());
  fmt::print("purged the old epoch: {} objects under {}\n", dropped, chat[0].key_prefix());
  expect(dropped == 9, "4 blocks x 2 ranks, and the fp8 copy: the prefix covers every format of the model");
  expect(epoch1.lookup(e1_blocks, max_tokens) == 3, "epoch 1 keeps its blocks");

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
  kvkey_redis::RedisStore store(options);
  try {
    const int rc = run(store);
    fmt::print("\nredis_connector_demo: {}\n", rc == 0 ? "all expectations met" : "expectations FAILED");
    return rc;
  } catch (const kvkey::store_error& e) {  // kvkey_redis::StoreError included
    fmt::print(stderr, "redis_connector_demo: {}\n", e.what());
    return 2;
  }
}
