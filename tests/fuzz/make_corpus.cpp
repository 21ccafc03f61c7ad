// Writes the seed corpora of the fuzz targets: tests/fuzz/corpus/<target>/.
// Run through tests/fuzz/make-corpus.sh; the output is committed. Every seed is
// built with kvkey's own API, so a format change shows up as a corpus diff.
#include <sys/stat.h>

#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "fuzz_common.hpp"

namespace {

std::string root;

void write(const std::string& target, const std::string& name, const std::vector<std::uint8_t>& bytes) {
  const std::string dir = root + "/" + target;
  ::mkdir(dir.c_str(), 0755);
  std::ofstream out(dir + "/" + name, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  if (!out) {
    std::cerr << "make_corpus: cannot write " << dir << "/" << name << "\n";
    std::exit(1);
  }
}
void write(const std::string& target, const std::string& name, std::string_view text) {
  write(target, name, std::vector<std::uint8_t>(text.begin(), text.end()));
}

std::vector<std::uint8_t> with_mode(std::uint8_t mode, const std::uint8_t* p, std::size_t n) {
  std::vector<std::uint8_t> v{mode};
  v.insert(v.end(), p, p + n);
  return v;
}

kvkey::Identity plain_identity() {
  return kvkey_test::make_identity("team-a", "Qwen/Qwen2.5-7B-Instruct", kvkey_test::qwen_7b_revision,
                                   {kvkey::KvDtype::fp16, 64, 28, 4, 128, "lmdeploy.v1"});
}

void envelope_seeds() {
  const kvkey::KeyNamespace<> ns{kvkey_fuzz::fixture_identity()};
  const auto blocks = ns.block_hashes(kvkey_fuzz::fixture_tokens());
  const kvkey::Payload payload = kvkey_fuzz::fixture_payload_bytes();
  const auto raw = [](const kvkey::Envelope& e) { return with_mode(1, e.data(), e.size()); };
  write("envelope", "valid", raw(ns.seal(blocks.at(1), payload)));
  write("envelope", "other_block", raw(ns.seal(blocks.at(0), payload)));
  std::vector<std::uint8_t> longer(kvkey_fuzz::fixture_payload + 1, 0x11);
  write("envelope", "other_payload", raw(ns.seal(blocks.at(1), kvkey::Payload(longer.data(), longer.size()))));
  const kvkey::KeyNamespace<> size_only{kvkey_fuzz::fixture_identity(),
                                        kvkey::Policy{kvkey::TenantPolicy::required, kvkey::PayloadCheck::size_only}};
  write("envelope", "size_only", raw(size_only.seal(blocks.at(1), kvkey_fuzz::fixture_payload)));
  const kvkey::KeyNamespace<kvkey::HmacSha256> keyed{kvkey_fuzz::fixture_identity(),
                                                     kvkey::TenantSecret{std::string(kvkey_fuzz::fixture_secret())}};
  write("envelope", "keyed_valid", raw(keyed.seal(keyed.block_hashes(kvkey_fuzz::fixture_tokens()).at(1), payload)));
  auto other = kvkey_fuzz::fixture_identity();
  other.shard.tp_rank = 0;
  write("envelope", "other_shard", raw(kvkey::KeyNamespace<>{other}.seal(blocks.at(1), payload)));
  const kvkey::KeyNamespace<> plain{plain_identity()};
  write("envelope", "other_identity", raw(plain.seal(plain.root(), payload)));
  const kvkey::Envelope valid = ns.seal(blocks.at(1), payload);
  write("envelope", "truncated", with_mode(1, valid.data(), 100));
  // Edits: the identity length, a byte inside the identity, the version.
  write("envelope", "edit_identity_len", std::vector<std::uint8_t>{0, kvkey::envelope_layout::identity_len, 0, 0xff});
  write("envelope", "edit_identity_byte", std::vector<std::uint8_t>{0, 100, 0, 'X'});
  write("envelope", "edit_version", std::vector<std::uint8_t>{0, kvkey::envelope_layout::version, 0, 2});
  write("envelope", "edit_padding", std::vector<std::uint8_t>{0, 0xff, 0x03, 1});
}

void hex_seeds() {
  const kvkey::Digest d = kvkey::fingerprint("kvkey");
  write("hex", "lower", d.hex());
  std::string upper = d.hex();
  for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  write("hex", "upper", upper);
  write("hex", "short", d.hex().substr(0, 63));
  write("hex", "bad_char", d.hex().substr(0, 63) + "g");
  write("hex", "raw32", std::vector<std::uint8_t>(d.begin(), d.end()));
  write("hex", "base64_pad1", "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=");
  write("hex", "base64_pad2", "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8gIQ==");
}

void identity_seeds() {
  write("identity", "fixture", kvkey_fuzz::write_identity(kvkey_fuzz::fixture_identity(), false));
  write("identity", "plain", kvkey_fuzz::write_identity(plain_identity(), false));
  auto single = plain_identity();
  single.tenant.clear();
  write("identity", "single_tenant", kvkey_fuzz::write_identity(single, true));
  auto mla = plain_identity();
  mla.kv.mla = true;
  mla.kv.num_kv_heads = 1;
  mla.kv.head_dim = 576;
  mla.shard.tp_size = 8;
  mla.shard.tp_rank = 5;
  mla.shard.pp_size = 2;
  mla.shard.pp_rank = 1;
  write("identity", "mla_pp", kvkey_fuzz::write_identity(mla, false));
  auto replicas = plain_identity();
  replicas.shard.tp_size = 8;
  replicas.shard.tp_rank = 3;
  replicas.model.weights_epoch = 1ULL << 40;
  write("identity", "replicated_heads", kvkey_fuzz::write_identity(replicas, false));
}

void decode_identity_seeds() {
  for (const auto& [name, id] : {std::pair<const char*, kvkey::Identity>{"fixture", kvkey_fuzz::fixture_identity()},
                                 std::pair<const char*, kvkey::Identity>{"plain", plain_identity()}}) {
    const kvkey::Bytes e = kvkey::encode_identity(id);
    write("decode_identity", std::string(name) + "_raw", with_mode(0, e.data(), e.size()));
    const std::size_t head = sizeof kvkey::identity_tag + 2;
    write("decode_identity", std::string(name) + "_fields", with_mode(1, e.data() + head, e.size() - head));
  }
}

void lmdeploy_key_seeds() {
  const std::string hex = kvkey::fingerprint("block").hex();
  write("lmdeploy_key", "plain", "Qwen2.5-7B-Instruct@tp_rank:0@group:0@" + hex);
  write("lmdeploy_key", "prefix", "tenantA@Qwen2.5-7B-Instruct@tp_rank:3@group:0@" + hex);
  write("lmdeploy_key", "ambiguous", "tenantA@M@x@tp_rank:12@group:0@" + hex);
  write("lmdeploy_key", "trailing_at", "model@@tp_rank:1@group:0@" + hex);
  const kvkey::KeyNamespace<> ns{plain_identity()};
  write("lmdeploy_key", "kvkey_key", ns.store_key(ns.root()));
}

// tool_inputs: a mode byte (0 JSON identity file, 1 TOML identity file, 2
// token file) and the file's text.
void tool_input(const std::string& name, char mode, std::string_view text) {
  write("tool_inputs", name, std::string(1, mode) + std::string(text));
}

void tool_inputs_seeds() {
  const std::string json = R"({"tenant": "team-a", "model": {"name": "Qwen2.5-0.5B-Instruct", "revision": "7ae5576",
 "weights_epoch": 0}, "kv": {"dtype": "int4", "quant": {"scheme": "per_token_asym", "group_size": 64,
 "scale_dtype": "fp16", "zero_point": true}, "block_size": 64, "num_layers": 24, "num_kv_heads": 2,
 "head_dim": 64, "layout": "lmdeploy.mooncake.v1", "mla": false}, "shard": {"tp_size": 4, "tp_rank": 1},
 "adapter": {"name": "base", "weights_fingerprint": ")" +
                           kvkey::fingerprint("adapter").hex() + R"("}}
)";
  const std::string toml = R"(tenant = "team-a"
policy = "required"
[model]
name = "Qwen2.5-0.5B-Instruct"
revision = "7ae5576"
weights_epoch = 0
[kv]
dtype = "fp16"
block_size = 64
num_layers = 24
num_kv_heads = 2
head_dim = 64
layout = "lmdeploy.mooncake.v1"
[kv.quant]
scheme = "none"
)";
  const std::string bom = "\xef\xbb\xbf";
  tool_input("config_json", 0, json);
  tool_input("config_toml", 1, toml);
  tool_input("config_single_tenant", 0, R"({"policy": "single_tenant", "model": {"name": "m", "revision": "r"},
 "kv": {"dtype": "bf16", "block_size": 16, "num_layers": 2, "num_kv_heads": 1, "head_dim": 8, "layout": "l"}})");
  tool_input("config_bom", 0, bom + json);
  tool_input("config_bom_toml", 1, bom + toml);
  tool_input("config_nul_tail", 0, json + std::string(1, '\0') + R"({"tenant":"evil"})");
  tool_input("config_nul_path", 0, R"({"model": {"name": "m", "revision": "r", "weights_file": "w.txt\u0000.evil"}})");
  tool_input("config_deep", 0, R"({"tenant": )" + std::string(5000, '[') + std::string(5000, ']') + "}");
  tool_input("config_deep_toml", 1, "tenant = " + std::string(300, '[') + std::string(300, ']') + "\n");
  tool_input("config_minus_zero", 0, R"({"tenant": "t", "model": {"name": "m", "revision": "r"}, "kv": {"dtype": "fp16",
 "block_size": -0, "num_layers": 99999999999999999999}})");
  tool_input("config_overflow", 0, R"({"kv": {"num_layers": 1e400}})");
  tool_input("config_inf_toml", 1, "[kv]\nblock_size = inf\nnum_layers = -nan\n");
  tool_input("config_controls", 0, R"({"kv": {"\u001b[31m\u202e\u0085": 1}, "zz": {}})");
  tool_input("config_raw_escape", 0, "{\"kv\": {\"\x1b[31m\": 1}}");
  tool_input("config_duplicate", 0, R"({"kv": {"dtype": "fp16", "dtype": "fp32"}})");
  tool_input("tokens_json", 2, "[0, 1, 4294967295, 151643]");
  tool_input("tokens_text", 2, "1 2, 3\n4,5\t6");
  tool_input("tokens_bom", 2, bom + "[1, 2, 3]");
  tool_input("tokens_nul", 2, std::string("[1,2,3]\0,4,5,6]", 15));
  tool_input("tokens_deep", 2, std::string(5000, '[') + std::string(5000, ']'));
  tool_input("tokens_huge", 2, "[18446744073709551616, -0, 1e400, 4294967296, \"x\"]");
  tool_input("tokens_text_bad", 2, "1 2 \x1b[31m -3 ,,");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: kvkey_fuzz_make_corpus OUTPUT_DIR (tests/fuzz/corpus)\n";
    return 2;
  }
  root = argv[1];
  ::mkdir(root.c_str(), 0755);
  envelope_seeds();
  hex_seeds();
  identity_seeds();
  decode_identity_seeds();
  lmdeploy_key_seeds();
  tool_inputs_seeds();
  std::cout << "make_corpus: seeds written to " << root << "\n";
  return 0;
}
