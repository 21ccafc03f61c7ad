// SPDX-License-Identifier: Apache-2.0
// `kvkey init`: an identity file from the model (and adapter) directory an
// engine loads (kvkey/model_dir.hpp).

#include <kvkey/identity_file.hpp>
#include <kvkey/errors.hpp>
#include <kvkey/identity.hpp>
#include <kvkey/model_dir.hpp>

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <limits>
#include <memory>
#include <string>
#include <vector>
#include <optional>

#include "cli/command.hpp"
#include "cli/identity_config.hpp"
#include "cli/inputs.hpp"
#include "cli/tool.hpp"

namespace kvkey_tool {

namespace {

struct InitOptions {
  std::string model;    ///< model directory (plain, HF repo root or snapshot)
  std::string adapter;  ///< PEFT adapter directory; empty = none
  std::string adapter_name;
  std::string name;      ///< model name; empty = from the directory
  std::string revision;  ///< empty = from the HF cache
  std::string tenant;
  bool single_tenant = false;
  std::string kv_dtype;
  std::string gpu_arch;           ///< ROCm gcnArchName: vLLM's "fp8" is fnuz on gfx94x
  std::string quant_policy;       ///< lmdeploy's 4 / 8: the KV quant layout lmdeploy stores
  std::string quant_scheme;       ///< an explicit layout: kv.quant.scheme ...
  std::string quant_group_size;   ///< ... kv.quant.group_size
  std::string quant_scale_dtype;  ///< ... kv.quant.scale_dtype (with --quant-policy: the model's dtype)
  bool quant_zero_point = false;  ///< ... kv.quant.zero_point
  std::string block_size;
  std::string layout;
  std::string tp_size = "1";
  std::string tp_rank = "0";
  std::string pp_size = "1";
  std::string pp_rank = "0";
  std::string weights_epoch = "0";
  std::string overrides;  ///< JSON object, or @FILE
  std::string output;     ///< empty = stdout
  bool verify = false;
  bool progress = false;  ///< always show the progress bar (default: on a terminal, for >= 1 GiB)
  bool sources = false;   ///< print where each value came from on stderr
};

constexpr std::uint64_t progress_threshold = std::uint64_t{1} << 30;  // 1 GiB

// "\r[#####-----]  1.2 / 4.0 GiB  850 MiB/s" on stderr, redrawn in place.
class ProgressBar {
 public:
  explicit ProgressBar(bool always) : always_(always), tty_(::isatty(STDERR_FILENO) == 1) {}
  ~ProgressBar() {
    if (shown_) std::fputc('\n', stderr);
  }
  ProgressBar(const ProgressBar&) = delete;
  ProgressBar& operator=(const ProgressBar&) = delete;

  void operator()(std::uint64_t done, std::uint64_t total) {
    if (total == 0 || !(always_ || (tty_ && total >= progress_threshold))) return;
    constexpr int width = 30;
    const double fraction = total == 0 ? 1.0 : static_cast<double>(done) / static_cast<double>(total);
    const auto filled = static_cast<int>(fraction * width);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    const double gib = 1024.0 * 1024.0 * 1024.0;
    const double rate = seconds > 0 ? static_cast<double>(done) / seconds / (1024.0 * 1024.0) : 0.0;
    fmt::print(stderr, "\rhashing weights [{}{}] {:.2f} / {:.2f} GiB  {:.0f} MiB/s", std::string(filled, '#'),
               std::string(width - filled, '-'), static_cast<double>(done) / gib, static_cast<double>(total) / gib,
               rate);
    std::fflush(stderr);
    shown_ = true;
  }

 private:
  bool always_;
  bool tty_;
  bool shown_ = false;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
};

// Writes text to path through a temp file in the same directory and a rename,
// so a reader sees the old file or the whole new one, never a part.
void write_atomically(const std::string& path, const std::string& text) {
  namespace fs = std::filesystem;
  const fs::path target(path);
  const fs::path dir = target.parent_path().empty() ? fs::path(".") : target.parent_path();
  std::string tmpl = (dir / ("." + target.filename().string() + ".tmp.XXXXXX")).string();
  errno = 0;
  const int fd = ::mkstemp(tmpl.data());
  if (fd < 0) fail("cannot write {}: {}", path, std::strerror(errno));
  std::size_t written = 0;
  int err = 0;
  while (written < text.size()) {
    const ssize_t n = ::write(fd, text.data() + written, text.size() - written);
    if (n < 0) {
      if (errno == EINTR) continue;
      err = errno;
      break;
    }
    written += static_cast<std::size_t>(n);
  }
  if (err == 0 && ::fsync(fd) != 0) err = errno;
  if (::close(fd) != 0 && err == 0) err = errno;
  if (err == 0) {
    // mkstemp makes the file 0600; an identity file is not secret.
    ::fchmodat(AT_FDCWD, tmpl.c_str(), 0644, 0);
    if (std::rename(tmpl.c_str(), path.c_str()) != 0) err = errno;
  }
  if (err != 0) {
    ::unlink(tmpl.c_str());
    fail("cannot write {}: {}", path, std::strerror(err));
  }
}

nlohmann::json parse_overrides(const std::string& spec) {
  if (spec.empty()) return nlohmann::json::object();
  const bool from_file = spec.front() == '@';
  const std::string where = from_file ? spec.substr(1) : "--override";
  const std::string bytes = from_file ? read_limited(where, max_config_size, "an overrides file") : spec;
  // The identity files' parser: its nesting limit, duplicate-key and NUL checks apply here too.
  const Json j = parse_json(from_file ? text_body(bytes, where) : std::string_view(bytes), where);
  if (!j.is_object()) fail("{}: expected a JSON object (like vLLM's --hf-overrides), got {}", where, j.type_name());
  return nlohmann::json::parse(j.dump());  // read_model_dir takes nlohmann::json
}

std::uint32_t u32_option(const std::string& text, std::string_view what) {
  return static_cast<std::uint32_t>(parse_uint_option(text, 32, what));
}

// The option that sets an identity field, for messages.
std::string_view option_of(std::string_view field) {
  if (field == "tenant") return "--tenant";
  if (field == "kv.dtype" || field == "kv_dtype") return "--kv-dtype";
  if (field == "kv.quant" || field == "kv.quant.scheme") return "--quant-scheme";
  if (field == "kv.quant.group_size") return "--quant-group-size";
  if (field == "kv.quant.scale_dtype" || field == "quant_scale_dtype") return "--quant-scale-dtype";
  if (field == "kv.quant.zero_point") return "--quant-zero-point";
  if (field == "quant_policy") return "--quant-policy";
  if (field == "kv.block_size") return "--block-size";
  if (field == "kv.layout") return "--layout";
  if (field == "shard.tp_size") return "--tp-size";
  if (field == "shard.tp_rank") return "--tp-rank";
  if (field == "shard.pp_size") return "--pp-size";
  if (field == "shard.pp_rank") return "--pp-rank";
  if (field == "model.name") return "--name";
  if (field == "model.revision") return "--revision";
  if (field == "adapter.name") return "--adapter-name";
  return "--model";
}

int run_init(const InitOptions& o, std::string& out) {
  // The options as the library's deployment parameters; kvkey::identity_from_model_dir does the rest.
  kvkey::DeploymentParams p;
  if (o.single_tenant) p.policy = kvkey::single_tenant;
  if (!o.single_tenant && o.tenant.empty()) {
    fail("--tenant: required (or --single-tenant, for a store no one else shares)");
  }
  p.tenant = o.tenant;
  kvkey::EnginePlatform platform;
  platform.gpu_arch = o.gpu_arch;
  p.kv_dtype = parse_engine_dtype(o.kv_dtype, "--kv-dtype", platform);
  if (!o.quant_policy.empty()) {
    if (!o.quant_scheme.empty() || !o.quant_group_size.empty() || o.quant_zero_point) {
      fail(
          "--quant-policy: gives lmdeploy's whole layout; not with --quant-scheme, --quant-group-size or "
          "--quant-zero-point");
    }
    p.quant_policy = u32_option(o.quant_policy, "--quant-policy");
  } else if (!o.quant_scheme.empty()) {
    kvkey::Quant q;
    q.scheme = o.quant_scheme;
    if (!o.quant_group_size.empty()) q.group_size = u32_option(o.quant_group_size, "--quant-group-size");
    if (!o.quant_scale_dtype.empty()) q.scale_dtype = parse_engine_dtype(o.quant_scale_dtype, "--quant-scale-dtype");
    q.zero_point = o.quant_zero_point;
    p.quant = q;
  } else if (!o.quant_group_size.empty() || o.quant_zero_point) {
    fail("--quant-group-size, --quant-zero-point: need --quant-scheme");
  }
  if (!o.quant_scale_dtype.empty() && o.quant_scheme.empty() && o.quant_policy.empty()) {
    fail("--quant-scale-dtype: needs --quant-scheme or --quant-policy");
  }
  if (!o.quant_policy.empty() && !o.quant_scale_dtype.empty()) {
    p.quant_scale_dtype = parse_engine_dtype(o.quant_scale_dtype, "--quant-scale-dtype");
  }
  p.block_size = u32_option(o.block_size, "--block-size");
  p.layout = o.layout;
  p.shard.tp_size = u32_option(o.tp_size, "--tp-size");
  p.shard.tp_rank = u32_option(o.tp_rank, "--tp-rank");
  p.shard.pp_size = u32_option(o.pp_size, "--pp-size");
  p.shard.pp_rank = u32_option(o.pp_rank, "--pp-rank");
  p.weights_epoch = parse_uint_option(o.weights_epoch, 64, "--weights-epoch");
  if (!o.revision.empty()) p.revision = o.revision;
  if (!o.name.empty()) p.name = o.name;
  p.overrides = parse_overrides(o.overrides);
  if (!o.adapter.empty()) p.adapter_dir = o.adapter;
  if (!o.adapter_name.empty()) p.adapter_name = o.adapter_name;
  p.verify = o.verify;
  if (p.adapter_name && !p.adapter_dir) fail("--adapter-name: needs --adapter");
  kvkey::ModelDirIdentity made;
  try {
    ProgressBar bar(o.progress);
    p.progress = [&bar](std::uint64_t done, std::uint64_t total) { bar(done, total); };
    made = kvkey::identity_from_model_dir(o.model, p);
  } catch (const kvkey::identity_error& e) {
    fail("{} ({}): {}", option_of(e.field()), e.field(), e.detail());
  } catch (const kvkey::input_error& e) {
    if (e.field().empty()) fail("{}", e.message());
    if (e.field() == "kv.quant") {
      fail(
          "--kv-dtype {}: {} (--quant-scheme S --quant-group-size N --quant-scale-dtype D [--quant-zero-point], "
          "or --quant-policy 4|8 --quant-scale-dtype D)",
          o.kv_dtype, e.detail());
    }
    fail("{} ({}): {}", option_of(e.field()), e.field(), e.detail());
  } catch (const kvkey::error& e) {
    fail("{}", e.message());
  }
  const kvkey::Identity& id = made.identity;
  const std::vector<kvkey::FieldSource>& sources = made.sources;

  // Exactly the identity file format `kvkey identity` reads (docs/cli.md).
  Json j = kvkey::identity_file_json(id);
  if (o.single_tenant) {  // the policy in the file; the tenant stays absent (docs/cli.md)
    j.erase("tenant");
    j["policy"] = "single_tenant";
  }
  const std::string text = j.dump(2) + "\n";

  if (o.sources) {
    for (const auto& s : sources) fmt::print(stderr, "  {:<30} {}\n", s.field, s.source);
  }
  if (o.output.empty()) {
    out += text;
  } else {
    write_atomically(o.output, text);
  }
  return exit_ok;
}

}  // namespace

std::vector<Command> add_init_command(CLI::App& app) {
  auto options = std::make_shared<InitOptions>();
  InitOptions& o = *options;
  auto* cmd = app.add_subcommand("init",
                                 "Write an identity file from the model (and adapter) directory an engine "
                                 "loads: geometry from config.json, name and revision from the Hugging Face "
                                 "cache, weights fingerprints");
  cmd->add_option("--model", o.model,
                  "model directory: plain, a Hugging Face cache repo (models--ORG--NAME) or one "
                  "of its snapshots")
      ->required();
  cmd->add_option("--adapter", o.adapter, "PEFT adapter directory (adapter_config.json + adapter_model.*)");
  cmd->add_option("--adapter-name", o.adapter_name, "adapter name (default: the adapter directory's name)");
  cmd->add_option("--tenant", o.tenant, "owner of the bytes (required unless --single-tenant)");
  cmd->add_flag("--single-tenant", o.single_tenant,
                "the single_tenant policy: a store no one else shares (no --tenant; the file says policy)");
  cmd->add_option("--kv-dtype", o.kv_dtype,
                  "KV element type: kvkey's name (fp16, bf16, fp8_e4m3, ...) or an engine's (bfloat16, "
                  "torch.float16, fp8, ...)")
      ->required();
  cmd->add_option("--gpu-arch", o.gpu_arch,
                  "the GPU's ROCm gcnArchName where the engine runs on ROCm (e.g. gfx942): vLLM's fp8 is "
                  "fp8_e4m3fnuz on gfx94x, fp8_e4m3 elsewhere");
  cmd->add_option("--quant-policy", o.quant_policy,
                  "lmdeploy's quant_policy 4 or 8 (--kv-dtype int4 / int8): its layout, a scale and a zero point "
                  "per token and KV head in the model's dtype (--quant-scale-dtype)");
  cmd->add_option("--quant-scheme", o.quant_scheme, "kv.quant.scheme of quantized KV (int8, int4, ...)");
  cmd->add_option("--quant-group-size", o.quant_group_size, "kv.quant.group_size: elements per scale");
  cmd->add_option("--quant-scale-dtype", o.quant_scale_dtype, "kv.quant.scale_dtype: the scales' dtype");
  cmd->add_flag("--quant-zero-point", o.quant_zero_point, "kv.quant.zero_point: the scales have zero points");
  cmd->add_option("--block-size", o.block_size, "tokens per block")->required();
  cmd->add_option("--layout", o.layout, "the engine's byte layout of one stored object")->required();
  cmd->add_option("--tp-size", o.tp_size, "tensor-parallel size (default 1)");
  cmd->add_option("--tp-rank", o.tp_rank, "this rank (default 0)");
  cmd->add_option("--pp-size", o.pp_size, "pipeline-parallel size (default 1)");
  cmd->add_option("--pp-rank", o.pp_rank, "this pipeline stage (default 0)");
  cmd->add_option("--weights-epoch", o.weights_epoch, "weights epoch (default 0)");
  cmd->add_option("--name", o.name, "model name (default: ORG/NAME in the cache, else the directory's name)");
  cmd->add_option("--revision", o.revision,
                  "immutable checkpoint id; in a cache repo: the ref or commit "
                  "(default main); required for a plain directory");
  cmd->add_option("--override", o.overrides,
                  "JSON object merged into config.json first (the engine's "
                  "--hf-overrides), or @FILE");
  cmd->add_flag("--verify", o.verify, "rehash Hugging Face cache blobs and fail on any that does not match its name");
  cmd->add_flag("--progress", o.progress,
                "always show the hashing progress bar on stderr (default: on a "
                "terminal, for 1 GiB or more)");
  cmd->add_flag("--sources", o.sources, "print where each value came from on stderr");
  cmd->add_option("-o,--output", o.output, "write the file atomically (default: stdout)");
  return {{cmd, [options](std::string& out) { return run_init(*options, out); }}};
}

}  // namespace kvkey_tool
