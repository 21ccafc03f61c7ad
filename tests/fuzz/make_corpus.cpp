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
  kvkey::Identity id;
  id.tenant = "team-a";
  id.model.name = "Qwen/Qwen2.5-7B-Instruct";
  id.model.revision = "a09a35458c702b33eeacc393d103063234e8bc28";
  id.kv.dtype = kvkey::KvDtype::fp16;
  id.kv.block_size = 64;
  id.kv.num_layers = 28;
  id.kv.num_kv_heads = 4;
  id.kv.head_dim = 128;
  id.kv.layout = "lmdeploy.v1";
  return id;
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
  std::cout << "make_corpus: seeds written to " << root << "\n";
  return 0;
}
