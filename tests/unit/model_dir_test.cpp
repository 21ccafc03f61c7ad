// kvkey/model_dir.hpp: KV geometry from real config.json files of each
// architecture family, name and revision from the Hugging Face cache, the
// weights and adapter manifests, the positional-encoding fingerprint, and the
// errors for bad input.
#include <kvkey/kvkey.hpp>  // with everything else: no name clashes
#include <kvkey/model_dir.hpp>

#include <catch2/catch.hpp>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "fifo.hpp"
#include "temp_dir.hpp"

namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

using kvkey_test::TempDir;

void write(const fs::path& p, const std::string& content) {
  fs::create_directories(p.parent_path());
  std::ofstream out(p, std::ios::binary);
  out.write(content.data(), static_cast<std::streamsize>(content.size()));
  out.close();
  REQUIRE(out.good());
}

// Config files as the hub publishes them (abridged to the keys that matter and
// a few that do not).
const char* const llama3_8b = R"({
  "architectures": ["LlamaForCausalLM"], "model_type": "llama",
  "hidden_size": 4096, "intermediate_size": 14336, "num_attention_heads": 32,
  "num_hidden_layers": 32, "num_key_value_heads": 8, "max_position_embeddings": 8192,
  "rope_theta": 500000.0, "rope_scaling": null, "rms_norm_eps": 1e-05, "torch_dtype": "bfloat16",
  "vocab_size": 128256
})";

const char* const qwen2_7b = R"({
  "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2",
  "hidden_size": 3584, "num_attention_heads": 28, "num_hidden_layers": 28, "num_key_value_heads": 4,
  "max_position_embeddings": 131072, "rope_theta": 1000000.0, "sliding_window": 131072,
  "use_sliding_window": false, "torch_dtype": "bfloat16"
})";

const char* const gemma_7b = R"({
  "architectures": ["GemmaForCausalLM"], "model_type": "gemma",
  "hidden_size": 3072, "head_dim": 256, "num_attention_heads": 16, "num_hidden_layers": 28,
  "num_key_value_heads": 16, "max_position_embeddings": 8192, "rope_theta": 10000.0
})";

const char* const llava_15_7b = R"({
  "architectures": ["LlavaForConditionalGeneration"], "model_type": "llava",
  "image_token_index": 32000, "projector_hidden_act": "gelu",
  "text_config": {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
    "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 32,
    "max_position_embeddings": 4096, "rope_theta": 10000.0, "vocab_size": 32064
  },
  "vision_config": {"hidden_size": 1024, "num_attention_heads": 16, "num_hidden_layers": 24,
                    "image_size": 336, "patch_size": 14, "model_type": "clip_vision_model"}
})";

const char* const deepseek_v3 = R"({
  "architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3",
  "hidden_size": 7168, "num_attention_heads": 128, "num_hidden_layers": 61, "num_key_value_heads": 128,
  "kv_lora_rank": 512, "q_lora_rank": 1536, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128,
  "max_position_embeddings": 163840, "rope_theta": 10000,
  "rope_scaling": {"beta_fast": 32, "beta_slow": 1, "factor": 40, "mscale": 1.0, "mscale_all_dim": 1.0,
                   "original_max_position_embeddings": 4096, "type": "yarn"}
})";

// A plain model directory with config.json and the given weight files.
fs::path model_dir(const TempDir& t, const std::string& config,
                   const std::vector<std::pair<std::string, std::string>>& files = {{"model.safetensors", "weights"}}) {
  const fs::path d = t.path() / "model";
  write(d / "config.json", config);
  for (const auto& [name, content] : files) write(d / name, content);
  return d;
}

kvkey::ModelDirOptions with_revision(std::string r = "rev-1") {
  kvkey::ModelDirOptions o;
  o.revision = std::move(r);
  return o;
}

std::string source_of(const kvkey::ModelDir& m, const std::string& field) {
  for (const auto& s : m.sources) {
    if (s.field == field) return s.source;
  }
  return "(none)";
}

// The manifest built here from sha256 of each file, independently of the
// library's manifest code: "<hex>  <name>\n" per file, names sorted.
kvkey::Digest manifest_of(const fs::path& dir, std::vector<std::string> names) {
  std::sort(names.begin(), names.end());
  std::string manifest;
  for (const auto& n : names) manifest += kvkey::fingerprint_file((dir / n).string()).hex() + "  " + n + "\n";
  return kvkey::fingerprint(manifest);
}

}  // namespace

TEST_CASE("model_dir: GQA configs take num_key_value_heads and hidden_size / heads", "[model_dir]") {
  TempDir t;
  SECTION("Llama 3") {
    const auto m = kvkey::read_model_dir(model_dir(t, llama3_8b), with_revision());
    CHECK(m.num_layers == 32);
    CHECK(m.num_kv_heads == 8);
    CHECK(m.head_dim == 4096 / 32);
    CHECK_FALSE(m.mla);
    CHECK(source_of(m, "kv.num_kv_heads") == "config.json: num_key_value_heads");
    CHECK(source_of(m, "kv.head_dim") == "config.json: hidden_size / num_attention_heads");
  }
  SECTION("Qwen2") {
    const auto m = kvkey::read_model_dir(model_dir(t, qwen2_7b), with_revision());
    CHECK(m.num_layers == 28);
    CHECK(m.num_kv_heads == 4);
    CHECK(m.head_dim == 128);
  }
  SECTION("no num_key_value_heads: multi-head attention") {
    Json j = Json::parse(llama3_8b);
    j.erase("num_key_value_heads");
    const auto m = kvkey::read_model_dir(model_dir(t, j.dump()), with_revision());
    CHECK(m.num_kv_heads == 32);
  }
}

TEST_CASE("model_dir: an explicit head_dim wins over hidden_size / heads (Gemma)", "[model_dir]") {
  TempDir t;
  const auto m = kvkey::read_model_dir(model_dir(t, gemma_7b), with_revision());
  CHECK(m.head_dim == 256);  // 3072 / 16 would be 192
  CHECK(m.num_kv_heads == 16);
  CHECK(source_of(m, "kv.head_dim") == "config.json: head_dim");
  SECTION("a null head_dim falls back to the division") {
    Json j = Json::parse(gemma_7b);
    j["head_dim"] = nullptr;
    TempDir t2;
    CHECK(kvkey::read_model_dir(model_dir(t2, j.dump()), with_revision()).head_dim == 192);
  }
}

TEST_CASE("model_dir: a nested text_config is read (Llava)", "[model_dir]") {
  TempDir t;
  const auto m = kvkey::read_model_dir(model_dir(t, llava_15_7b), with_revision());
  CHECK(m.num_layers == 32);  // not the vision tower's 24
  CHECK(m.num_kv_heads == 32);
  CHECK(m.head_dim == 128);
  CHECK(source_of(m, "kv.num_layers") == "config.json: text_config.num_hidden_layers");
  SECTION("a sparse text_config is an error naming the missing key, until an override fills it") {
    Json j = Json::parse(llava_15_7b);
    j["text_config"].erase("num_hidden_layers");
    TempDir t2;
    const fs::path d = model_dir(t2, j.dump());
    CHECK_THROWS_WITH(kvkey::read_model_dir(d, with_revision()),
                      Catch::Contains("text_config.num_hidden_layers: required key is missing"));
    auto o = with_revision();
    o.overrides = Json::parse(R"({"text_config": {"num_hidden_layers": 40}})");
    const auto m2 = kvkey::read_model_dir(d, o);
    CHECK(m2.num_layers == 40);
    CHECK(source_of(m2, "kv.num_layers") == "config.json: text_config.num_hidden_layers (from overrides)");
  }
}

TEST_CASE("model_dir: MLA stores one latent head of kv_lora_rank + qk_rope_head_dim (DeepSeek-V3)", "[model_dir]") {
  TempDir t;
  const auto m = kvkey::read_model_dir(model_dir(t, deepseek_v3), with_revision());
  CHECK(m.mla);
  CHECK(m.num_kv_heads == 1);
  CHECK(m.head_dim == 576);
  CHECK(m.num_layers == 61);
  SECTION("without qk_rope_head_dim it is an error naming the key") {
    Json j = Json::parse(deepseek_v3);
    j.erase("qk_rope_head_dim");
    TempDir t2;
    CHECK_THROWS_WITH(kvkey::read_model_dir(model_dir(t2, j.dump()), with_revision()),
                      Catch::Contains("qk_rope_head_dim: required key is missing"));
  }
  SECTION("a null kv_lora_rank is not MLA") {
    Json j = Json::parse(deepseek_v3);
    j["kv_lora_rank"] = nullptr;
    TempDir t2;
    const auto m2 = kvkey::read_model_dir(model_dir(t2, j.dump()), with_revision());
    CHECK_FALSE(m2.mla);
    CHECK(m2.num_kv_heads == 128);
    CHECK(m2.head_dim == 7168 / 128);
  }
}

TEST_CASE("model_dir: missing or inconsistent config values are errors naming the key", "[model_dir]") {
  TempDir t;
  Json j = Json::parse(llama3_8b);
  SECTION("missing layers") {
    j.erase("num_hidden_layers");
    CHECK_THROWS_WITH(kvkey::read_model_dir(model_dir(t, j.dump()), with_revision()),
                      Catch::Contains("config.json: num_hidden_layers: required key is missing"));
  }
  SECTION("hidden_size not a multiple of the heads") {
    j["hidden_size"] = 4095;
    CHECK_THROWS_WITH(kvkey::read_model_dir(model_dir(t, j.dump()), with_revision()),
                      Catch::Contains("hidden_size: 4095 is not a multiple of num_attention_heads 32"));
  }
  SECTION("KV heads that do not divide the attention heads") {
    j["num_key_value_heads"] = 12;
    CHECK_THROWS_WITH(kvkey::read_model_dir(model_dir(t, j.dump()), with_revision()),
                      Catch::Contains("num_key_value_heads: 12 does not divide"));
  }
  SECTION("a value of the wrong type") {
    j["num_attention_heads"] = "32";
    CHECK_THROWS_WITH(kvkey::read_model_dir(model_dir(t, j.dump()), with_revision()),
                      Catch::Contains("num_attention_heads: expected a positive 32-bit integer"));
  }
  SECTION("zero") {
    j["num_hidden_layers"] = 0;
    CHECK_THROWS_AS(kvkey::read_model_dir(model_dir(t, j.dump()), with_revision()), kvkey::input_error);
  }
}

TEST_CASE("model_dir: malformed JSON names the line and column", "[model_dir]") {
  TempDir t;
  const fs::path d = model_dir(t, "{\n  \"num_hidden_layers\": 32,\n  \"hidden_size\": ,\n}\n");
  CHECK_THROWS_WITH(kvkey::read_model_dir(d, with_revision()), Catch::Contains("config.json:3:18: invalid JSON"));
}

TEST_CASE("model_dir: missing config.json and missing weights are errors", "[model_dir]") {
  TempDir t;
  const fs::path d = t.path() / "m";
  fs::create_directories(d);
  write(d / "model.safetensors", "w");
  CHECK_THROWS_WITH(kvkey::read_model_dir(d, with_revision()), Catch::Contains("config.json: missing"));
  CHECK_THROWS_AS(kvkey::read_model_dir(t.path() / "nope", with_revision()), kvkey::io_error);
  fs::remove(d / "model.safetensors");
  write(d / "config.json", llama3_8b);
  fs::create_directories(d / "sub.safetensors");   // directories are not weight files
  write(d / "nested" / "model.safetensors", "w");  // only the top level counts
  CHECK_THROWS_WITH(kvkey::read_model_dir(d, with_revision()), Catch::Contains("no weight files"));
}

TEST_CASE("model_dir: a plain directory needs an explicit revision; the name is the directory's", "[model_dir]") {
  TempDir t;
  const fs::path d = model_dir(t, qwen2_7b);
  CHECK_THROWS_WITH(kvkey::read_model_dir(d), Catch::Contains("revision must be given"));
  const auto m = kvkey::read_model_dir(d, with_revision("abc"));
  CHECK(m.model.name == "model");
  CHECK(m.model.revision == "abc");
  auto o = with_revision();
  o.name = "Qwen/Qwen2-7B";
  CHECK(kvkey::read_model_dir(d, o).model.name == "Qwen/Qwen2-7B");
}

TEST_CASE("model_dir: weights fingerprint is the sorted sha256sum manifest of the weight files", "[model_dir]") {
  TempDir t;
  SECTION("safetensors only, sorted bytewise (uppercase before lowercase)") {
    const fs::path d = model_dir(t, qwen2_7b,
                                 {{"model-00002-of-00002.safetensors", "second shard"},
                                  {"model-00001-of-00002.safetensors", "first shard"},
                                  {"Z.safetensors", "upper"},
                                  {"pytorch_model.bin", "ignored when safetensors exist"},
                                  {"tokenizer.json", "{}"}});
    const auto m = kvkey::read_model_dir(d, with_revision());
    REQUIRE(m.weight_files.size() == 3);
    CHECK(m.weight_files[0].path == "Z.safetensors");
    CHECK(m.weight_files[1].path == "model-00001-of-00002.safetensors");
    CHECK(m.model.weights_fingerprint ==
          manifest_of(d, {"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors", "Z.safetensors"}));
  }
  SECTION("no safetensors: *.bin, *.pt and *.pth") {
    const fs::path d = model_dir(
        t, qwen2_7b,
        {{"pytorch_model.bin", "bin"}, {"extra.pt", "pt"}, {"more.pth", "pth"}, {"notes.txt", "not weights"}});
    const auto m = kvkey::read_model_dir(d, with_revision());
    CHECK(m.weight_files.size() == 3);
    CHECK(m.model.weights_fingerprint == manifest_of(d, {"pytorch_model.bin", "extra.pt", "more.pth"}));
  }
  SECTION("any byte of any file changes it") {
    const fs::path d = model_dir(t, qwen2_7b, {{"a.safetensors", "aaaa"}, {"b.safetensors", "bbbb"}});
    const auto before = kvkey::read_model_dir(d, with_revision()).model.weights_fingerprint;
    write(d / "b.safetensors", "bbbc");
    CHECK(kvkey::read_model_dir(d, with_revision()).model.weights_fingerprint != before);
  }
}

TEST_CASE("model_dir: files are hashed in parallel with the same result and progress on the caller", "[model_dir]") {
  TempDir t;
  std::vector<std::pair<std::string, std::string>> files;
  std::uint64_t total = 0;
  for (int i = 0; i < 5; ++i) {
    std::string content(static_cast<std::size_t>(100000 * (i + 1)), static_cast<char>('a' + i));
    total += content.size();
    files.emplace_back("shard-" + std::to_string(i) + ".safetensors", std::move(content));
  }
  const fs::path d = model_dir(t, qwen2_7b, files);
  auto one = with_revision();
  one.hashing.threads = 1;
  auto four = with_revision();
  four.hashing.threads = 4;
  std::uint64_t last_done = 0, last_total = 0;
  int calls = 0;
  four.hashing.progress = [&](std::uint64_t done, std::uint64_t all) {
    CHECK(done >= last_done);
    last_done = done;
    last_total = all;
    ++calls;
  };
  const auto a = kvkey::read_model_dir(d, one);
  const auto b = kvkey::read_model_dir(d, four);
  CHECK(a.model.weights_fingerprint == b.model.weights_fingerprint);
  CHECK(calls >= 1);
  CHECK(last_done == total);
  CHECK(last_total == total);
}

TEST_CASE("model_dir: a progress callback that throws stops the hashing and the exception reaches the caller",
          "[model_dir]") {
  TempDir t;
  std::vector<std::pair<std::string, std::string>> files;
  for (int i = 0; i < 4; ++i) files.emplace_back("s" + std::to_string(i) + ".safetensors", std::string(1000, 'x'));
  const fs::path d = model_dir(t, qwen2_7b, files);
  auto o = with_revision();
  o.hashing.threads = 2;
  o.hashing.progress = [](std::uint64_t, std::uint64_t) { throw std::runtime_error("cancelled"); };
  CHECK_THROWS_WITH(kvkey::read_model_dir(d, o), "cancelled");
}

namespace {

// A Hugging Face cache entry: models--ORG--NAME/{blobs,refs,snapshots} with the
// snapshot's files as relative symlinks into blobs/, as huggingface_hub makes it.
struct HfRepo {
  fs::path root;
  std::string commit = "0123456789abcdef0123456789abcdef01234567";
  fs::path snapshot() const { return root / "snapshots" / commit; }

  HfRepo(const fs::path& cache, const std::string& folder) : root(cache / folder) {
    fs::create_directories(root / "blobs");
    fs::create_directories(snapshot());
    write(root / "refs" / "main", commit);
  }
  // An LFS file: blob named by its SHA-256 (or by `name_as` when given).
  void lfs(const std::string& file, const std::string& content, const std::string& name_as = {}) const {
    const std::string blob = name_as.empty() ? kvkey::fingerprint(content).hex() : name_as;
    write(root / "blobs" / blob, content);
    fs::create_symlink(fs::path("../../blobs") / blob, snapshot() / file);
  }
  // A small git file: blob named by a 40-hex git object id.
  void git(const std::string& file, const std::string& content, const std::string& oid) const {
    write(root / "blobs" / oid, content);
    fs::create_symlink(fs::path("../../blobs") / oid, snapshot() / file);
  }
};

}  // namespace

TEST_CASE("model_dir: the Hugging Face cache gives name, revision and blob-named hashes", "[model_dir]") {
  TempDir t;
  const HfRepo repo(t.path(), "models--Qwen--Qwen2-7B");
  repo.git("config.json", qwen2_7b, "1111111111111111111111111111111111111111");
  repo.lfs("model-00001-of-00002.safetensors", "shard one");
  repo.lfs("model-00002-of-00002.safetensors", "shard two");

  SECTION("a snapshot directory") {
    const auto m = kvkey::read_model_dir(repo.snapshot());
    CHECK(m.model.name == "Qwen/Qwen2-7B");
    CHECK(m.model.revision == repo.commit);
    CHECK(m.num_kv_heads == 4);
    for (const auto& f : m.weight_files) CHECK(f.from_blob_name);
    CHECK(m.model.weights_fingerprint ==
          manifest_of(repo.snapshot(), {"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"}));
    CHECK(source_of(m, "model.revision") == "Hugging Face cache: snapshot directory name");
  }
  SECTION("the same files copied to a plain directory give the same fingerprint") {
    const fs::path plain = t.path() / "copy";
    fs::create_directories(plain);
    for (const auto& e : fs::directory_iterator(repo.snapshot())) {
      fs::copy_file(e.path(), plain / e.path().filename());  // follows the symlink
    }
    const auto a = kvkey::read_model_dir(repo.snapshot());
    const auto b = kvkey::read_model_dir(plain, with_revision(repo.commit));
    CHECK(a.model.weights_fingerprint == b.model.weights_fingerprint);
    CHECK(a.model.positional_fingerprint == b.model.positional_fingerprint);
    for (const auto& f : b.weight_files) CHECK_FALSE(f.from_blob_name);
  }
  SECTION("the repo root resolves refs/main, or another ref, or a commit") {
    CHECK(kvkey::read_model_dir(repo.root).model.revision == repo.commit);
    const std::string other = "89abcdef0123456789abcdef0123456789abcdef";
    fs::create_directories(repo.root / "snapshots" / other);
    fs::copy(repo.snapshot(), repo.root / "snapshots" / other,
             fs::copy_options::copy_symlinks | fs::copy_options::recursive);
    write(repo.root / "refs" / "v2", other);
    kvkey::ModelDirOptions o;
    o.revision = "v2";
    const auto m = kvkey::read_model_dir(repo.root, o);
    CHECK(m.model.revision == other);
    CHECK(m.directory == repo.root / "snapshots" / other);
    CHECK(source_of(m, "model.revision") == "Hugging Face cache: refs/v2");
    o.revision = other;
    CHECK(kvkey::read_model_dir(repo.root, o).model.revision == other);
  }
  SECTION("a revision that is not a snapshot is an error") {
    kvkey::ModelDirOptions o;
    o.revision = "fedcba9876543210fedcba9876543210fedcba98";
    CHECK_THROWS_WITH(kvkey::read_model_dir(repo.root, o), Catch::Contains("neither a ref in refs/ nor a commit"));
    CHECK_THROWS_WITH(kvkey::read_model_dir(repo.snapshot(), o), Catch::Contains("does not name this snapshot"));
    o.revision = "main";  // a ref to this snapshot is fine
    CHECK(kvkey::read_model_dir(repo.snapshot(), o).model.revision == repo.commit);
    write(repo.root / "refs" / "stale", "fedcba9876543210fedcba9876543210fedcba98");
    o.revision = "stale";
    CHECK_THROWS_WITH(kvkey::read_model_dir(repo.root, o), Catch::Contains("has no directory in snapshots/"));
    fs::create_directories(repo.root / "snapshots" / "not-a-commit");
    CHECK_THROWS_WITH(kvkey::read_model_dir(repo.root / "snapshots" / "not-a-commit"),
                      Catch::Contains("not a snapshot"));
  }
  SECTION("a broken symlink is an error") {
    fs::create_symlink("../../blobs/" + std::string(64, 'e'), repo.snapshot() / "model-00003-of-00003.safetensors");
    CHECK_THROWS_WITH(kvkey::read_model_dir(repo.snapshot()), Catch::Contains("broken symlink"));
  }
}

TEST_CASE("model_dir: blob names are trusted without reading; verify rehashes and reports mismatches", "[model_dir]") {
  TempDir t;
  const HfRepo repo(t.path(), "models--org--tampered");
  repo.git("config.json", llama3_8b, "2222222222222222222222222222222222222222");
  const std::string claimed = kvkey::fingerprint("what the hub served").hex();
  repo.lfs("model.safetensors", "bytes changed on disk", claimed);
  const auto m = kvkey::read_model_dir(repo.snapshot());
  REQUIRE(m.weight_files.size() == 1);
  CHECK(m.weight_files[0].sha256.hex() == claimed);  // the name, not the content
  kvkey::ModelDirOptions o;
  o.hashing.verify = true;
  CHECK_THROWS_WITH(kvkey::read_model_dir(repo.snapshot(), o),
                    Catch::Contains("model.safetensors: blob " + claimed) &&
                        Catch::Contains(kvkey::fingerprint("bytes changed on disk").hex()));
}

TEST_CASE("model_dir: the positional fingerprint covers RoPE settings after overrides", "[model_dir]") {
  TempDir t;
  const fs::path d = model_dir(t, llama3_8b);
  const auto base = kvkey::read_model_dir(d, with_revision());
  // The canonical JSON, written out by hand from the rules in docs/format.md.
  CHECK(base.positional_config == R"({"max_position_embeddings":8192,"rope_theta":500000})");
  REQUIRE(base.model.positional_fingerprint);
  CHECK(*base.model.positional_fingerprint == kvkey::fingerprint(base.positional_config));

  auto o = with_revision();
  SECTION("an override of rope_theta changes it") {
    o.overrides = Json::parse(R"({"rope_theta": 1000000})");
    CHECK(kvkey::read_model_dir(d, o).model.positional_fingerprint != base.model.positional_fingerprint);
  }
  SECTION("rope_scaling changes it; key order and number spelling do not") {
    o.overrides = Json::parse(R"({"rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0}})");
    const auto a = kvkey::read_model_dir(d, o);
    CHECK(a.positional_config ==
          R"({"max_position_embeddings":8192,"rope_scaling":{"factor":8,"low_freq_factor":1,"rope_type":"llama3"},)"
          R"("rope_theta":500000})");
    o.overrides = Json::parse(R"({"rope_scaling": {"low_freq_factor": 1, "factor": 8, "rope_type": "llama3"}})");
    CHECK(kvkey::read_model_dir(d, o).model.positional_fingerprint == a.model.positional_fingerprint);
  }
  SECTION("partial_rotary_factor and max_position_embeddings change it; unrelated keys do not") {
    o.overrides = Json::parse(R"({"partial_rotary_factor": 0.5})");
    const auto a = kvkey::read_model_dir(d, o);
    CHECK(a.positional_config.find("\"partial_rotary_factor\":0.5") != std::string::npos);
    CHECK(a.model.positional_fingerprint != base.model.positional_fingerprint);
    o.overrides = Json::parse(R"({"max_position_embeddings": 16384})");
    CHECK(kvkey::read_model_dir(d, o).model.positional_fingerprint != base.model.positional_fingerprint);
    o.overrides = Json::parse(R"({"rms_norm_eps": 1e-06, "rope_scaling": null})");
    CHECK(kvkey::read_model_dir(d, o).model.positional_fingerprint == base.model.positional_fingerprint);
  }
  SECTION("MLA includes qk_rope_head_dim") {
    TempDir t2;
    const auto m = kvkey::read_model_dir(model_dir(t2, deepseek_v3), with_revision());
    CHECK(m.positional_config.find("\"qk_rope_head_dim\":64") != std::string::npos);
  }
  SECTION("an object for a parameter replaces it whole; a *_config object is applied key by key") {
    o.overrides = Json::parse(R"({"rope_scaling": {"rope_type": "linear", "factor": 2}})");
    const auto a = kvkey::read_model_dir(d, o);
    o.overrides = Json::parse(R"({"rope_scaling": {"factor": 2}})");
    const auto b = kvkey::read_model_dir(d, o);
    CHECK(b.positional_config == R"({"max_position_embeddings":8192,"rope_scaling":{"factor":2},"rope_theta":500000})");
    CHECK(a.model.positional_fingerprint != b.model.positional_fingerprint);
    TempDir t2;
    const fs::path llava = model_dir(t2, llava_15_7b);
    o.overrides = Json::parse(R"({"text_config": {"rope_theta": 20000}})");
    const auto c = kvkey::read_model_dir(llava, o);
    CHECK(c.num_layers == 32);  // the rest of text_config is kept
    CHECK(c.positional_config == R"({"max_position_embeddings":4096,"rope_theta":20000})");
  }
  SECTION("overrides must be an object") {
    o.overrides = Json::array();
    CHECK_THROWS_WITH(kvkey::read_model_dir(d, o), Catch::Contains("overrides: expected a JSON object"));
  }
}

TEST_CASE("model_dir: apply fills the identity's model and geometry, keeping the epoch", "[model_dir]") {
  TempDir t;
  const auto m = kvkey::read_model_dir(model_dir(t, deepseek_v3), with_revision("r1"));
  kvkey::Identity id;
  id.model.weights_epoch = 7;
  m.apply(id);
  CHECK(id.model.name == "model");
  CHECK(id.model.revision == "r1");
  CHECK(id.model.weights_epoch == 7);
  CHECK(id.model.weights_fingerprint == m.model.weights_fingerprint);
  CHECK(id.model.positional_fingerprint == m.model.positional_fingerprint);
  CHECK(id.kv.mla);
  CHECK(id.kv.num_kv_heads == 1);
  CHECK(id.kv.head_dim == 576);
  CHECK(id.kv.num_layers == 61);
}

TEST_CASE("model_dir: quantized KV needs its quant layout, never a scheme none identity", "[model_dir]") {
  TempDir t;
  const fs::path dir = model_dir(t, llama3_8b);
  kvkey::DeploymentParams p;
  p.tenant = "t";
  p.block_size = 64;
  p.layout = "lmdeploy.v1";
  p.revision = "r1";
  for (const kvkey::KvDtype d : {kvkey::KvDtype::int8, kvkey::KvDtype::int4, kvkey::KvDtype::uint8}) {
    p.kv_dtype = d;
    CAPTURE(kvkey::to_string(d));
    try {
      (void)kvkey::identity_from_model_dir(dir, p);
      FAIL("an integer kv dtype without a quant layout was accepted");
    } catch (const kvkey::input_error& e) {
      CHECK(e.field() == "kv.quant");
      CHECK_THAT(e.detail(), Catch::Contains("quant layout"));
    }
  }
  // lmdeploy's quant_policy: its layout, with the model's dtype for the scales
  p.kv_dtype = kvkey::KvDtype::unset;
  p.quant_policy = 8;
  CHECK_THROWS_MATCHES(kvkey::identity_from_model_dir(dir, p), kvkey::input_error,
                       Catch::Predicate<kvkey::input_error>(
                           [](const kvkey::input_error& e) { return e.field() == "quant_scale_dtype"; }));
  p.quant_scale_dtype = kvkey::KvDtype::bf16;
  const kvkey::Identity int8 = kvkey::identity_from_model_dir(dir, p).identity;
  CHECK(int8.kv.dtype == kvkey::KvDtype::int8);
  CHECK(int8.kv.quant == kvkey::quant_from_quant_policy(8, kvkey::KvDtype::bf16, 128));
  p.quant_policy = 4;
  const kvkey::Identity int4 = kvkey::identity_from_model_dir(dir, p).identity;
  CHECK(int4.kv.dtype == kvkey::KvDtype::int4);
  CHECK(int4.kv.quant.group_size == 128);
  p.kv_dtype = kvkey::KvDtype::int8;  // disagrees with quant_policy 4
  CHECK_THROWS_AS(kvkey::identity_from_model_dir(dir, p), kvkey::input_error);
  // an explicit layout
  p.quant_policy.reset();
  kvkey::Quant q;
  q.scheme = "per_token";
  q.scale_dtype = kvkey::KvDtype::fp16;
  p.quant = q;
  CHECK(kvkey::identity_from_model_dir(dir, p).identity.kv.quant == q);
  // fp16 KV needs none
  p.quant.reset();
  p.kv_dtype = kvkey::KvDtype::fp16;
  CHECK(kvkey::identity_from_model_dir(dir, p).identity.kv.quant.scheme == "none");
}

TEST_CASE("model_dir: a PEFT adapter's fingerprint covers its weights and its config", "[model_dir]") {
  TempDir t;
  const fs::path d = t.path() / "my-lora";
  write(d / "adapter_config.json", R"({"r": 16, "lora_alpha": 32, "target_modules": ["q_proj", "v_proj"]})");
  write(d / "adapter_model.safetensors", "lora weights");
  write(d / "README.md", "not part of it");
  const kvkey::Adapter a = kvkey::read_adapter_dir(d);
  CHECK(a.name == "my-lora");
  CHECK(a.weights_fingerprint == manifest_of(d, {"adapter_config.json", "adapter_model.safetensors"}));
  SECTION("a config change (rank, alpha, targets) changes it") {
    write(d / "adapter_config.json", R"({"r": 16, "lora_alpha": 16, "target_modules": ["q_proj", "v_proj"]})");
    CHECK(kvkey::read_adapter_dir(d).weights_fingerprint != a.weights_fingerprint);
  }
  SECTION(".bin when there is no safetensors file; a name can be given") {
    fs::remove(d / "adapter_model.safetensors");
    write(d / "adapter_model.bin", "lora weights");
    kvkey::AdapterDirOptions o;
    o.name = "sql-lora";
    const auto b = kvkey::read_adapter_dir(d, o);
    CHECK(b.name == "sql-lora");
    CHECK(b.weights_fingerprint == manifest_of(d, {"adapter_config.json", "adapter_model.bin"}));
  }
  SECTION("errors") {
    fs::remove(d / "adapter_model.safetensors");
    CHECK_THROWS_WITH(kvkey::read_adapter_dir(d), Catch::Contains("no adapter_model.safetensors"));
    write(d / "adapter_model.safetensors", "w");
    write(d / "adapter_config.json", "{\"r\": 16,,}");
    CHECK_THROWS_WITH(kvkey::read_adapter_dir(d), Catch::Contains("adapter_config.json:1:10: invalid JSON"));
    fs::remove(d / "adapter_config.json");
    CHECK_THROWS_WITH(kvkey::read_adapter_dir(d), Catch::Contains("adapter_config.json: missing"));
  }
}

TEST_CASE("model_dir: canonical_json sorts keys, drops whitespace and writes integral numbers as integers",
          "[model_dir]") {
  CHECK(kvkey::canonical_json(Json::parse(R"({"b": [1.0, 2.5, -0.0], "a": {"y": true, "x": null}})")) ==
        R"({"a":{"x":null,"y":true},"b":[1,2.5,0]})");
  CHECK(kvkey::canonical_json(Json::parse(R"({"s": "tab\there", "e": 1e-05, "big": 1e16})")) ==
        R"({"big":1e+16,"e":1e-05,"s":"tab\there"})");
  CHECK(kvkey::canonical_json(Json::parse("[9007199254740994.0, 9999999999999998.0, 999999999999999.5]")) ==
        "[9007199254740994,9999999999999998,999999999999999.5]");
  CHECK_THROWS_WITH(kvkey::canonical_json(Json::parse("[1000000000000000.5]")),
                    Catch::Contains("has a fraction and a magnitude of 1e15 or more"));
}

// ---- hostile model directories -------------------------------------------------------

namespace {

// The message of the input_error or io_error f throws ("(none)" if it throws nothing).
template <class F>
std::string kvkey_error_of(F&& f) {
  try {
    f();
  } catch (const kvkey::input_error& e) {
    return std::string("input_error: ") + e.what();
  } catch (const kvkey::io_error& e) {
    return std::string("io_error: ") + e.what();
  }
  return "(none)";
}

// n arrays nested around 1: "[[[1]]]".
std::string nested_arrays(std::size_t n) { return std::string(n, '[') + "1" + std::string(n, ']'); }

}  // namespace

TEST_CASE("model_dir: a FIFO config.json or adapter_config.json is refused at once", "[model_dir][hostile]") {
  TempDir t;
  const fs::path d = t.path() / "m";
  write(d / "model.safetensors", "w");
  REQUIRE(kvkey_test::make_fifo((d / "config.json").string()));
  const std::string what = kvkey_test::refusal_of_fifo((d / "config.json").string(),
                                                       [&] { (void)kvkey::read_model_dir(d, with_revision()); });
  CHECK_THAT(what, Catch::Contains("config.json: not a regular file (a FIFO)"));

  const fs::path a = t.path() / "lora";
  write(a / "adapter_model.safetensors", "lora");
  REQUIRE(kvkey_test::make_fifo((a / "adapter_config.json").string()));
  const std::string adapter =
      kvkey_test::refusal_of_fifo((a / "adapter_config.json").string(), [&] { (void)kvkey::read_adapter_dir(a); });
  CHECK_THAT(adapter, Catch::Contains("adapter_config.json: not a regular file (a FIFO)"));
}

TEST_CASE("model_dir: a weight file that is a FIFO is refused, not waited on", "[model_dir][hostile]") {
  TempDir t;
  const fs::path d = model_dir(t, qwen2_7b, {{"a.safetensors", "a"}});
  REQUIRE(kvkey_test::make_fifo((d / "b.safetensors").string()));
  const std::string what = kvkey_test::refusal_of_fifo((d / "b.safetensors").string(),
                                                       [&] { (void)kvkey::read_model_dir(d, with_revision()); });
  CHECK_THAT(what, Catch::Contains("b.safetensors: not a regular file"));
}

TEST_CASE("model_dir: config files must be regular files within the size limit", "[model_dir][hostile]") {
  TempDir t;
  const fs::path d = model_dir(t, qwen2_7b);
  SECTION("a device") {
    fs::remove(d / "config.json");
    fs::create_symlink("/dev/null", d / "config.json");
    CHECK(kvkey_error_of([&] { (void)kvkey::read_model_dir(d, with_revision()); }) ==
          "io_error: [kvkey.io_error] " + (d / "config.json").string() + ": not a regular file (a character device)");
  }
  SECTION("larger than max_config_file_size (refused by its size, before it is read)") {
    { std::ofstream grow(d / "config.json", std::ios::binary | std::ios::app); }
    fs::resize_file(d / "config.json", kvkey::max_config_file_size + 1);  // sparse: nothing to read quickly
    CHECK_THAT(
        kvkey_error_of([&] { (void)kvkey::read_model_dir(d, with_revision()); }),
        Catch::StartsWith("input_error: ") && Catch::Contains("config.json: larger than the 16777216-byte limit"));
  }
  SECTION("an adapter config too") {
    const fs::path a = t.path() / "lora";
    write(a / "adapter_model.safetensors", "lora");
    write(a / "adapter_config.json", "{}");
    fs::resize_file(a / "adapter_config.json", kvkey::max_config_file_size + 100);
    CHECK_THAT(kvkey_error_of([&] { (void)kvkey::read_adapter_dir(a); }),
               Catch::Contains("adapter_config.json: larger than the 16777216-byte limit"));
  }
}

TEST_CASE("model_dir: nesting deeper than max_config_depth is refused before it is built", "[model_dir][hostile]") {
  TempDir t;
  const std::string base = R"({"num_hidden_layers": 2, "num_attention_heads": 4, "hidden_size": 64, )";
  SECTION("one level too deep, in a positional key") {
    const fs::path d =
        model_dir(t, base + R"("rope_scaling": {"factor": )" + nested_arrays(kvkey::max_config_depth - 1) + "}}");
    CHECK_THAT(kvkey_error_of([&] { (void)kvkey::read_model_dir(d, with_revision()); }),
               Catch::StartsWith("input_error: ") && Catch::Contains("config.json: rope_scaling.factor[0][0]") &&
                   Catch::Contains("nested deeper than 64 levels"));
  }
  SECTION("the greatest depth allowed is read") {
    const fs::path d =
        model_dir(t, base + R"("rope_scaling": {"factor": )" + nested_arrays(kvkey::max_config_depth - 2) + "}}");
    const auto m = kvkey::read_model_dir(d, with_revision());
    CHECK(m.positional_config.find(nested_arrays(kvkey::max_config_depth - 2)) != std::string::npos);
  }
  SECTION("200000 levels in head_dim: an error, no crash") {
    const fs::path d = model_dir(t, base + R"("head_dim": )" + nested_arrays(200000) + "}");
    CHECK_THAT(kvkey_error_of([&] { (void)kvkey::read_model_dir(d, with_revision()); }),
               Catch::Contains("config.json: head_dim[0][0]") && Catch::Contains("nested deeper than 64 levels"));
  }
  SECTION("in adapter_config.json") {
    const fs::path a = t.path() / "lora";
    write(a / "adapter_model.safetensors", "lora");
    write(a / "adapter_config.json", R"({"target_modules": )" + nested_arrays(100000) + "}");
    CHECK_THAT(kvkey_error_of([&] { (void)kvkey::read_adapter_dir(a); }),
               Catch::Contains("adapter_config.json: target_modules[0]") && Catch::Contains("nested deeper"));
  }
  SECTION("in overrides, built in C++ (checked without recursion)") {
    const fs::path d = model_dir(t, qwen2_7b);
    auto o = with_revision();
    Json deep = Json::array();
    for (int i = 0; i < 100; ++i) deep = Json::array({deep});
    o.overrides = Json::object({{"rope_scaling", deep}});
    CHECK_THAT(kvkey_error_of([&] { (void)kvkey::read_model_dir(d, o); }),
               Catch::Contains("overrides: nested deeper than 64 levels"));
  }
}

TEST_CASE("model_dir: a number beyond double is an input_error naming the file and the key", "[model_dir][hostile]") {
  TempDir t;
  const std::map<std::string, std::string> cases = {
      {R"({"rope_theta": 1e400})", "config.json: rope_theta: number out of range"},
      {R"({"rope_scaling": {"type": "yarn", "factor": -2.5e999}})",
       "config.json: rope_scaling.factor: number out of range"},
      {R"({"rope_scaling": {"mrope_section": [16, 24, 1e309]}})",
       "config.json: rope_scaling.mrope_section[2]: number out of range"},
      {R"({"text_config": {"num_hidden_layers": 123456789e300000}})",
       "config.json: text_config.num_hidden_layers: number out of range"},
  };
  for (const auto& [config, message] : cases) {
    CAPTURE(config);
    TempDir each;
    const fs::path d = model_dir(each, config);
    CHECK_THAT(kvkey_error_of([&] { (void)kvkey::read_model_dir(d, with_revision()); }),
               Catch::StartsWith("input_error: [kvkey.input_error] ") && Catch::EndsWith(message));
  }
  SECTION("a value of the wrong type is described without failing on invalid UTF-8 or a huge value") {
    auto o = with_revision();
    o.overrides = Json::object({{"num_hidden_layers", std::string("\xff\xfe")}});
    const fs::path d = model_dir(t, qwen2_7b);
    CHECK_THAT(kvkey_error_of([&] { (void)kvkey::read_model_dir(d, o); }),
               Catch::Contains("num_hidden_layers: expected a positive 32-bit integer"));
    o.overrides = Json::object({{"num_hidden_layers", std::string(100000, 'x')}});
    CHECK(kvkey_error_of([&] { (void)kvkey::read_model_dir(d, o); }).size() < 1000);
  }
  SECTION("parse_json_text names what it parses") {
    CHECK_THROWS_WITH(kvkey::parse_json_text(R"({"a": [1, {"b": 1E+999}]})", "overrides"),
                      Catch::EndsWith("overrides: a[1].b: number out of range"));
    CHECK_THROWS_WITH(kvkey::parse_json_text("1e999", "x.json"),
                      Catch::EndsWith("x.json: (top level): number out of range"));
    CHECK_THROWS_WITH(kvkey::parse_json_text("{\n \"a\": tru\n}", "x.json"),
                      Catch::Contains("x.json:2:10: invalid JSON"));
    CHECK_THROWS_WITH(kvkey::parse_json_text("[[[]]]", "x.json", 2),
                      Catch::EndsWith("x.json: [0][0]: nested deeper than 2 levels"));
  }
}

TEST_CASE("model_dir: model.safetensors.index.json names shards, subdirectories too", "[model_dir][index]") {
  TempDir t;
  const std::string index_of_two = R"({"metadata": {"total_size": 8}, "weight_map": {
      "lm_head.weight": "model-00002-of-00002.safetensors",
      "model.embed_tokens.weight": "model-00001-of-00002.safetensors",
      "model.norm.weight": "model-00002-of-00002.safetensors"}})";
  SECTION("an index naming only top-level files leaves the fingerprint as it was") {
    const fs::path d = model_dir(
        t, qwen2_7b, {{"model-00001-of-00002.safetensors", "one"}, {"model-00002-of-00002.safetensors", "two"}});
    const auto without = kvkey::read_model_dir(d, with_revision());
    write(d / "model.safetensors.index.json", index_of_two);
    const auto with = kvkey::read_model_dir(d, with_revision());
    CHECK(with.model.weights_fingerprint == without.model.weights_fingerprint);
    CHECK(with.model.weights_fingerprint ==
          manifest_of(d, {"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"}));
  }
  SECTION("shards in subdirectories are covered; a top-level decoy does not hide them") {
    const fs::path d = model_dir(t, qwen2_7b,
                                 {{"decoy.safetensors", "decoy"},
                                  {"weights/a.safetensors", "real a"},
                                  {"weights/deep/b.safetensors", "real b"}});
    write(d / "model.safetensors.index.json",
          R"({"weight_map": {"x": "weights/a.safetensors", "y": "./weights/deep/b.safetensors",
                             "z": "weights//a.safetensors"}})");
    const auto m = kvkey::read_model_dir(d, with_revision());
    REQUIRE(m.weight_files.size() == 3);
    CHECK(m.weight_files[0].path == "decoy.safetensors");
    CHECK(m.weight_files[1].path == "weights/a.safetensors");
    CHECK(m.weight_files[2].path == "weights/deep/b.safetensors");
    CHECK(m.model.weights_fingerprint ==
          manifest_of(d, {"decoy.safetensors", "weights/a.safetensors", "weights/deep/b.safetensors"}));
    write(d / "weights" / "deep" / "b.safetensors", "rewritten");
    CHECK(kvkey::read_model_dir(d, with_revision()).model.weights_fingerprint != m.model.weights_fingerprint);
  }
  SECTION("an index is enough: no top-level shard at all") {
    const fs::path d = model_dir(t, qwen2_7b, {{"pytorch_model.bin", "ignored"}, {"sub/only.safetensors", "only"}});
    write(d / "model.safetensors.index.json", R"({"weight_map": {"w": "sub/only.safetensors"}})");
    const auto m = kvkey::read_model_dir(d, with_revision());
    REQUIRE(m.weight_files.size() == 1);
    CHECK(m.model.weights_fingerprint == manifest_of(d, {"sub/only.safetensors"}));
  }
}

TEST_CASE("model_dir: an index entry that leaves the model directory is an error naming the index and the entry",
          "[model_dir][index]") {
  TempDir t;
  const fs::path d = model_dir(t, qwen2_7b, {{"a.safetensors", "a"}});
  write(t.path() / "outside" / "evil.safetensors", "evil");
  const fs::path index = d / "model.safetensors.index.json";
  const auto error_for = [&](const std::string& entry) {
    write(index, Json::object({{"weight_map", Json::object({{"model.layers.0.weight", entry}})}}).dump());
    return kvkey_error_of([&] { (void)kvkey::read_model_dir(d, with_revision()); });
  };
  const std::string where = index.string() + ": weight_map.model.layers.0.weight: ";
  CHECK_THAT(error_for("../outside/evil.safetensors"), Catch::StartsWith("input_error: ") &&
                                                           Catch::Contains(where + "'../outside/evil.safetensors'") &&
                                                           Catch::Contains("leaves the model directory"));
  CHECK_THAT(error_for("sub/../../outside/evil.safetensors"), Catch::Contains("'..' component"));
  CHECK_THAT(error_for((t.path() / "outside" / "evil.safetensors").string()),
             Catch::Contains(where) && Catch::Contains("absolute path"));
  fs::create_directory_symlink(t.path() / "outside", d / "linked");
  CHECK_THAT(error_for("linked/evil.safetensors"),
             Catch::Contains(where + "'linked/evil.safetensors' resolves to ") && Catch::Contains("outside the model"));
  fs::create_symlink(t.path() / "outside" / "evil.safetensors", d / "b.safetensors");
  CHECK_THAT(error_for("b.safetensors"), Catch::Contains("outside the model directory"));
  fs::remove(d / "b.safetensors");
  CHECK_THAT(error_for(std::string("a.safetensors\0x", 15)), Catch::Contains("control character"));
  CHECK_THAT(error_for(""), Catch::Contains("is empty"));
  CHECK_THAT(error_for("missing.safetensors"),
             Catch::StartsWith("io_error: ") && Catch::Contains(where + "'missing.safetensors' does not exist"));
  write(index, R"({"weight_map": {"w": 7}})");
  CHECK_THAT(kvkey_error_of([&] { (void)kvkey::read_model_dir(d, with_revision()); }),
             Catch::Contains("weight_map.w: expected a file name, got 7"));
  write(index, R"({"weight_map": {"w": "a.safetensors"}, "metadata": {"total_size": 1e500}})");
  CHECK_THAT(kvkey_error_of([&] { (void)kvkey::read_model_dir(d, with_revision()); }),
             Catch::Contains("model.safetensors.index.json: metadata.total_size: number out of range"));
}

TEST_CASE("model_dir: cache links are checked by their real path, not lexically", "[model_dir][hostile]") {
  TempDir t;
  const HfRepo repo(t.path(), "models--org--linked");
  repo.git("config.json", qwen2_7b, "3333333333333333333333333333333333333333");
  const std::string genuine = "the weights the hub served";
  const std::string sha = kvkey::fingerprint(genuine).hex();
  write(repo.root / "blobs" / sha, genuine);
  // snapshot/sub -> t/evil/a/b, so sub/../../../blobs/<sha> is t/blobs/<sha> to the
  // kernel, while it normalises lexically to the repo's own blobs/<sha>.
  fs::create_directories(t.path() / "evil" / "a" / "b");
  fs::create_directory_symlink(t.path() / "evil" / "a" / "b", repo.snapshot() / "sub");
  const std::string planted = "planted weights";
  write(t.path() / "blobs" / sha, planted);
  fs::create_symlink("sub/../../../blobs/" + sha, repo.snapshot() / "model.safetensors");
  REQUIRE(kvkey::fingerprint_file((repo.snapshot() / "model.safetensors").string()) == kvkey::fingerprint(planted));
  const auto m = kvkey::read_model_dir(repo.snapshot());
  REQUIRE(m.weight_files.size() == 1);
  CHECK_FALSE(m.weight_files[0].from_blob_name);
  CHECK(m.weight_files[0].sha256 == kvkey::fingerprint(planted));
  SECTION("a genuine link is still taken by its blob name") {
    fs::remove(repo.snapshot() / "model.safetensors");
    fs::create_symlink("../../blobs/" + sha, repo.snapshot() / "model.safetensors");
    const auto g = kvkey::read_model_dir(repo.snapshot());
    CHECK(g.weight_files[0].from_blob_name);
    CHECK(g.weight_files[0].sha256.hex() == sha);
  }
}

TEST_CASE("model_dir: revisions that are not refs inside refs/ are refused, naming revision", "[model_dir][hostile]") {
  TempDir t;
  const HfRepo repo(t.path(), "models--org--revs");
  repo.git("config.json", qwen2_7b, "4444444444444444444444444444444444444444");
  repo.lfs("model.safetensors", "w");
  const std::string other = "fedcba9876543210fedcba9876543210fedcba98";
  fs::create_directories(repo.root / "snapshots" / other);
  fs::copy(repo.snapshot(), repo.root / "snapshots" / other,
           fs::copy_options::copy_symlinks | fs::copy_options::recursive);
  write(t.path() / "planted-ref", other);
  const auto error_for = [&](const fs::path& dir, const std::string& revision) {
    kvkey::ModelDirOptions o;
    o.revision = revision;
    return kvkey_error_of([&] { (void)kvkey::read_model_dir(dir, o); });
  };
  CHECK_THAT(error_for(repo.root, std::string("main\0evil", 9)),
             Catch::Equals("input_error: [kvkey.input_error] revision: byte 4 is a control character"));
  CHECK_THAT(error_for(repo.snapshot(), std::string("main\0", 5)), Catch::Contains("revision: byte 4 is a control"));
  CHECK_THAT(error_for(repo.root, "main\n"), Catch::Contains("revision: byte 4 is a control character"));
  CHECK_THAT(error_for(repo.root, "v1\x7f"), Catch::Contains("revision: byte 2 is a control character"));
  CHECK_THAT(error_for(repo.root, (t.path() / "planted-ref").string()),
             Catch::StartsWith("input_error: ") && Catch::Contains("revision: '") && Catch::Contains("absolute path"));
  CHECK_THAT(error_for(repo.root, "../../../planted-ref"),
             Catch::Contains("revision: '../../../planted-ref' has a '..'"));
  CHECK_THAT(error_for(repo.root, "pr/../../main"), Catch::Contains("has a '..' component"));
  fs::create_symlink(t.path() / "planted-ref", repo.root / "refs" / "escape");
  CHECK_THAT(error_for(repo.root, "escape"),
             Catch::Contains("revision: refs/escape resolves to") && Catch::Contains("outside"));
  CHECK_THAT(error_for(model_dir(t, qwen2_7b), "\x1b[31m"), Catch::Contains("revision: byte 0 is a control"));
  SECTION("refs in subdirectories (refs/pr/1) still resolve") {
    write(repo.root / "refs" / "pr" / "1", other);
    kvkey::ModelDirOptions o;
    o.revision = "pr/1";
    CHECK(kvkey::read_model_dir(repo.root, o).model.revision == other);
  }
}
