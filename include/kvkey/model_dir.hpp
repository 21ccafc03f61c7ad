// SPDX-License-Identifier: Apache-2.0
#ifndef KVKEY_MODEL_DIR_HPP
#define KVKEY_MODEL_DIR_HPP

// Opt-in: the identity's model and KV-geometry fields read from what an engine
// loads, a model directory (config.json and weight files, plain or in the
// Hugging Face cache) and a PEFT adapter directory. Needs nlohmann-json
// (CMake target kvkey::model_dir). The rules are in docs/format.md, sections 7-9.

#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "kvkey/config.hpp"
#include "kvkey/detail/strict_json.hpp"
#include "kvkey/digest.hpp"
#include "kvkey/errors.hpp"
#include "kvkey/fingerprint.hpp"
#include "kvkey/geometry.hpp"
#include "kvkey/identity.hpp"
#include "kvkey/identity_file.hpp"  // json_error_reason
#include "kvkey/input_file.hpp"
#include "kvkey/sha256.hpp"

KVKEY_BEGIN_NAMESPACE

/// Where one filled field's value came from, e.g. {"kv.num_kv_heads",
/// "config.json: text_config.num_key_value_heads"}.
struct FieldSource {
  std::string field;
  std::string source;
};

/// One entry of a weights manifest.
struct WeightFile {
  std::string path;             ///< relative path as it appears in the manifest
  Digest sha256;                ///< SHA-256 of the file's content
  std::uint64_t size = 0;       ///< bytes
  bool from_blob_name = false;  ///< taken from the Hugging Face cache blob name, not by reading
};

/// Progress of hashing: bytes hashed so far and bytes to hash in total. Called
/// on the calling thread only, about ten times a second, and once at the end.
using HashProgress = std::function<void(std::uint64_t done, std::uint64_t total)>;

/// How weight files are hashed.
struct FileHashOptions {
  bool verify = false;    ///< also rehash Hugging Face cache blobs and check them against their names
  unsigned threads = 0;   ///< files hashed at once; 0: the hardware's concurrency (at most 16)
  HashProgress progress;  ///< optional
};

/// Options of read_model_dir.
struct ModelDirOptions {
  /// Plain directory: required (an immutable checkpoint id). Hugging Face repo
  /// root: the ref or commit to resolve (default "main"). Snapshot directory:
  /// optional, and then it must name that snapshot (its commit, or a ref to it).
  std::optional<std::string> revision;
  std::optional<std::string> name;  ///< default: ORG/NAME in the cache, else the directory's name
  /// The engine's overrides of config.json, e.g. vLLM's --hf-overrides, applied
  /// before anything is read (docs/format.md, section 8). Must be an object.
  nlohmann::json overrides = nlohmann::json::object();
  FileHashOptions hashing;
};

/// A model directory as read: the identity's model fields and KV geometry,
/// with where each came from.
struct ModelDir {
  std::filesystem::path directory;  ///< the directory whose files were read (the snapshot in a cache)
  Model model;                      ///< name, revision, weights_fingerprint, positional_fingerprint
  std::uint32_t num_layers = 0;
  std::uint32_t num_kv_heads = 0;
  std::uint32_t head_dim = 0;
  bool mla = false;
  std::vector<WeightFile> weight_files;  ///< sorted bytewise by path
  std::string positional_config;         ///< canonical JSON hashed into model.positional_fingerprint
  std::vector<FieldSource> sources;      ///< one entry per filled field

  /// Copies the model fields (except weights_epoch) and the KV geometry into id.
  void apply(Identity& id) const {
    const std::uint64_t epoch = id.model.weights_epoch;
    id.model = model;
    id.model.weights_epoch = epoch;
    id.kv.num_layers = num_layers;
    id.kv.num_kv_heads = num_kv_heads;
    id.kv.head_dim = head_dim;
    id.kv.mla = mla;
  }
};

/// Options of read_adapter_dir.
struct AdapterDirOptions {
  std::optional<std::string> name;  ///< default: ORG/NAME in the cache, else the directory's name
  FileHashOptions hashing;
};

namespace detail {

[[noreturn]] inline void model_dir_fail(const std::filesystem::path& file, std::string_view key,
                                        std::string_view what) {
  std::string m = file.string();
  m.append(": ").append(key).append(": ").append(what);
  throw input_error(m);
}

/// A JSON value for a message: compact, invalid UTF-8 replaced, at most about 60 bytes.
inline std::string json_excerpt(const nlohmann::json& j) {
  std::string s = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  if (s.size() > 60) s = s.substr(0, 57) + "...";
  return s;
}

/// The greatest nesting of arrays and objects in j is at most max_depth
/// (walked with an explicit stack: no recursion on deep input).
inline bool json_depth_at_most(const nlohmann::json& j, std::size_t max_depth) {
  std::vector<std::pair<const nlohmann::json*, std::size_t>> todo{{&j, 0}};
  while (!todo.empty()) {
    const auto [v, depth] = todo.back();
    todo.pop_back();
    if (!v->is_structured()) continue;
    if (depth + 1 > max_depth) return false;
    for (const auto& child : *v) todo.emplace_back(&child, depth + 1);
  }
  return true;
}

}  // namespace detail

/// Limits on the files read_model_dir and read_adapter_dir read (docs/api.md).
inline constexpr std::size_t max_config_file_size = std::size_t{16}
                                                    << 20;                 ///< config.json, adapter_config.json: 16 MiB
inline constexpr std::size_t max_index_file_size = std::size_t{64} << 20;  ///< model.safetensors.index.json: 64 MiB
inline constexpr std::size_t max_config_depth = 64;  ///< nesting of arrays and objects in those files and in overrides

/// Parses JSON text that messages call `name`, refusing nesting deeper than
/// max_depth before the parser builds it. Throws input_error:
/// "NAME:LINE:COLUMN: invalid JSON: REASON" on a syntax error (invalid UTF-8
/// too), "NAME: PATH: nested deeper than N levels", "NAME: PATH: number out of
/// range" (PATH: the value's key path, e.g. rope_scaling.factor or a[2]).
[[nodiscard]] inline nlohmann::json parse_json_text(std::string_view text, const std::string& name,
                                                    std::size_t max_depth = max_config_depth) {
  detail::StrictJsonTracker tracker(max_depth);
  try {
    return nlohmann::json::parse(text.begin(), text.end(), std::ref(tracker));
  } catch (const detail::JsonTooDeep&) {
    throw input_error(name + ": " + tracker.path() + ": nested deeper than " + std::to_string(max_depth) + " levels");
  } catch (const nlohmann::json::parse_error& e) {
    const TextPosition at = text_position(text, e.byte == 0 ? 0 : e.byte - 1);
    throw input_error(name + ":" + std::to_string(at.line) + ":" + std::to_string(at.column) +
                      ": invalid JSON: " + std::string(json_error_reason(e.what())));
  } catch (const nlohmann::json::out_of_range&) {  // a number beyond double: 1e400
    throw input_error(name + ": " + tracker.path() + ": number out of range");
  } catch (const nlohmann::json::exception& e) {
    throw input_error(name + ": " + tracker.path() + ": " + std::string(json_error_reason(e.what())));
  }
}

/// A JSON file as parse_json_text parses it, read through InputFile (a regular
/// file of at most max_size bytes; never blocks). Messages name the file's path.
[[nodiscard]] inline nlohmann::json read_json_file(const std::filesystem::path& file,
                                                   std::size_t max_size = max_config_file_size,
                                                   std::size_t max_depth = max_config_depth) {
  InputFile in(file.string(), file.string());
  const std::string text = in.read_all(max_size, "JSON configuration files");
  return parse_json_text(text, file.string(), max_depth);
}

namespace detail {

inline bool is_lower_hex(std::string_view s, std::size_t n) {
  if (s.size() != n) return false;
  return std::all_of(s.begin(), s.end(), [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

inline bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// ---- the Hugging Face cache (huggingface_hub/file_download.py) ----------------

/// A directory's place in a Hugging Face cache, if it has one.
struct HfLocation {
  std::filesystem::path repo_root;  ///< .../models--ORG--NAME
  std::filesystem::path snapshot;   ///< .../snapshots/<commit>
  std::string repo_id;              ///< ORG/NAME
  std::string commit;               ///< 40 hex
  std::string revision_source;      ///< how the commit was found
};

/// "models--ORG--NAME" -> "ORG/NAME" (repo_folder_name joins "models", ORG and
/// NAME with "--"; repo ids cannot contain "--").
inline std::optional<std::string> hf_repo_id(const std::string& folder) {
  static constexpr std::string_view prefix = "models--";
  if (folder.compare(0, prefix.size(), prefix) != 0 || folder.size() == prefix.size()) return std::nullopt;
  std::string id = folder.substr(prefix.size());
  for (std::size_t at = id.find("--"); at != std::string::npos; at = id.find("--", at + 1)) id.replace(at, 2, "/");
  if (id.front() == '/' || id.back() == '/') return std::nullopt;
  return id;
}

inline bool is_dir(const std::filesystem::path& p) {
  std::error_code ec;
  return std::filesystem::is_directory(p, ec);
}

/// A revision (a ref name, a commit or a checkpoint id) is refused with an
/// input_error naming `revision` when it is empty, holds a control character
/// (NUL included: the file system would see only the part before it), is an
/// absolute path or has a ".." component: as a ref it must name a file inside refs/.
inline void check_revision(const std::string& rev) {
  if (rev.empty()) throw input_error("revision: empty");
  for (std::size_t i = 0; i < rev.size(); ++i) {
    const auto c = static_cast<unsigned char>(rev[i]);
    if (c < 0x20 || c == 0x7f) throw input_error("revision: byte " + std::to_string(i) + " is a control character");
  }
  if (rev.front() == '/') {
    throw input_error("revision: '" + rev + "' is an absolute path; a revision is a ref (a file in refs/) or a commit");
  }
  for (std::size_t begin = 0; begin <= rev.size();) {
    std::size_t end = rev.find('/', begin);
    if (end == std::string::npos) end = rev.size();
    if (rev.compare(begin, end - begin, "..") == 0) {
      throw input_error("revision: '" + rev + "' has a '..' component; a ref lies inside refs/");
    }
    begin = end + 1;
  }
}

/// p lies strictly inside dir (both real paths, as std::filesystem::canonical gives them).
inline bool is_within(const std::filesystem::path& p, const std::filesystem::path& dir) {
  auto pi = p.begin();
  for (auto di = dir.begin(); di != dir.end(); ++di, ++pi) {
    if (pi == p.end() || *pi != *di) return false;
  }
  return pi != p.end();
}

/// The real path of p (every symlink resolved), or an empty path when it does not resolve.
inline std::filesystem::path real_path(const std::filesystem::path& p) {
  std::error_code ec;
  std::filesystem::path real = std::filesystem::canonical(p, ec);
  return ec ? std::filesystem::path() : real;
}

/// The commit a ref names: refs/<ref> holds it (40 hex, no newline; tolerated).
/// The ref must resolve (symlinks included) to a file inside refs/.
inline std::optional<std::string> read_ref(const std::filesystem::path& repo_root, const std::string& ref) {
  check_revision(ref);
  const std::filesystem::path file = repo_root / "refs" / ref;
  std::error_code ec;
  if (!std::filesystem::is_regular_file(file, ec)) return std::nullopt;
  const std::filesystem::path real = real_path(file);
  if (!is_within(real, real_path(repo_root / "refs"))) {
    throw input_error("revision: refs/" + ref + " resolves to " + real.string() + ", outside " +
                      (repo_root / "refs").string());
  }
  InputFile in(file.string(), file.string());
  std::string commit = in.read_all(4096, "refs files");
  while (!commit.empty() && (commit.back() == '\n' || commit.back() == '\r' || commit.back() == ' ')) commit.pop_back();
  if (!is_lower_hex(commit, 40)) {
    throw input_error(file.string() + ": does not hold a 40-hex commit");
  }
  return commit;
}

/// Recognises a repo root (models--ORG--NAME with snapshots/) or a snapshot
/// directory (models--ORG--NAME/snapshots/<40 hex>) and resolves the revision.
inline std::optional<HfLocation> locate_hf(const std::filesystem::path& dir,
                                           const std::optional<std::string>& revision) {
  const std::filesystem::path d = std::filesystem::absolute(dir).lexically_normal();
  const std::filesystem::path clean = d.filename().empty() ? d.parent_path() : d;
  HfLocation loc;
  if (const auto id = hf_repo_id(clean.filename().string()); id && is_dir(clean / "snapshots")) {
    loc.repo_root = clean;
    loc.repo_id = *id;
    const std::string rev = revision.value_or("main");
    if (const auto commit = read_ref(clean, rev)) {
      loc.commit = *commit;
      loc.revision_source = "refs/" + rev;
    } else if (is_lower_hex(rev, 40) && is_dir(clean / "snapshots" / rev)) {
      loc.commit = rev;
      loc.revision_source = "snapshots/" + rev;
    } else {
      throw input_error(clean.string() + ": revision '" + rev +
                        "' is neither a ref in refs/ nor a commit in snapshots/ (not downloaded?)");
    }
    loc.snapshot = clean / "snapshots" / loc.commit;
    if (!is_dir(loc.snapshot)) {
      throw input_error(clean.string() + ": refs/" + rev + " names commit " + loc.commit +
                        ", which has no directory in snapshots/");
    }
    return loc;
  }
  const std::filesystem::path parent = clean.parent_path();
  const auto id = hf_repo_id(parent.parent_path().filename().string());
  if (parent.filename() != "snapshots" || !id) return std::nullopt;
  const std::string name = clean.filename().string();
  if (!is_lower_hex(name, 40)) {
    throw input_error(clean.string() + ": not a snapshot: snapshot directories are named by their 40-hex commit");
  }
  loc.repo_root = parent.parent_path();
  loc.repo_id = *id;
  loc.commit = name;
  loc.snapshot = clean;
  loc.revision_source = "snapshot directory name";
  if (revision && *revision != name) {
    const auto via_ref = read_ref(loc.repo_root, *revision);
    if (!via_ref || *via_ref != name) {
      throw input_error(clean.string() + ": revision '" + *revision + "' does not name this snapshot (" + name + ")");
    }
  }
  return loc;
}

/// The real path of a cache repo's blobs/ directory, if there is one.
inline std::optional<std::filesystem::path> blobs_real_path(const std::optional<HfLocation>& hf) {
  if (!hf) return std::nullopt;
  std::filesystem::path real = real_path(hf->repo_root / "blobs");
  if (real.empty()) return std::nullopt;
  return real;
}

// ---- weight files and the manifest ----------------------------------------------

struct FileToHash {
  std::filesystem::path path;  ///< what to read
  std::string name;            ///< manifest path
  std::uint64_t size = 0;
  std::optional<Digest> claimed;  ///< from a blob name
  Digest computed;
  bool hash = true;
};

/// The entry for dir/name: follows symlinks (a broken one is an error). A file
/// whose real path (every symlink resolved, as the kernel opens it) is exactly
/// <blobs_real>/<64 hex> gives its hash by that name without reading;
/// blobs_real is the real path of the cache's blobs/ directory.
inline FileToHash weight_entry(const std::filesystem::path& dir, const std::string& name,
                               const std::optional<std::filesystem::path>& blobs_real, bool verify) {
  namespace fs = std::filesystem;
  if (name.find('\n') != std::string::npos || name.find('\\') != std::string::npos) {
    throw input_error((dir / name).string() +
                      ": file name contains a newline or backslash (sha256sum escapes "
                      "those; rename the file)");
  }
  FileToHash f;
  f.name = name;
  f.path = dir / name;
  std::error_code ec;
  const fs::file_status link = fs::symlink_status(f.path, ec);
  if (ec) throw io_error("cannot stat " + f.path.string() + ": " + ec.message());
  const fs::path real = real_path(f.path);
  if (real.empty()) {
    if (fs::is_symlink(link)) {
      throw io_error(f.path.string() + ": broken symlink (its target " + fs::read_symlink(f.path, ec).string() +
                     " does not exist)");
    }
    throw io_error("cannot resolve " + f.path.string());
  }
  const std::string blob = real.filename().string();
  if (blobs_real && is_lower_hex(blob, 64) && real.parent_path() == *blobs_real) {
    f.claimed = Digest::from_hex(blob);
    f.hash = verify;
  }
  const fs::file_status st = fs::status(f.path, ec);
  if (ec || !fs::is_regular_file(st)) {
    throw io_error(f.path.string() + ": not a regular file" + (ec ? " (" + ec.message() + ")" : std::string()));
  }
  f.size = static_cast<std::uint64_t>(fs::file_size(f.path, ec));
  if (ec) throw io_error("cannot stat " + f.path.string() + ": " + ec.message());
  return f;
}

/// SHA-256 of one file, adding bytes to `done` as it goes; stops early when
/// `stop` is set.
inline Digest hash_file_counting(const std::filesystem::path& path, std::atomic<std::uint64_t>& done,
                                 const std::atomic<bool>& stop) {
  InputFile file(path.string());  // a file swapped for a FIFO since weight_entry looked is refused, never waited on
  return sha256_file(file, std::size_t{4} << 20, [&](std::size_t n) {
    done.fetch_add(n, std::memory_order_relaxed);
    return !stop.load(std::memory_order_relaxed);
  });
}

/// Hashes every file whose `hash` is set, several files at once; progress is
/// reported on the calling thread. The first failure (in file order) is rethrown.
inline void hash_files(std::vector<FileToHash>& files, const FileHashOptions& o) {
  std::vector<std::size_t> todo;
  std::uint64_t total = 0;
  for (std::size_t i = 0; i < files.size(); ++i) {
    if (files[i].hash) {
      todo.push_back(i);
      total += files[i].size;
    }
  }
  // Largest first: the slowest file starts at once.
  std::stable_sort(todo.begin(), todo.end(),
                   [&](std::size_t a, std::size_t b) { return files[a].size > files[b].size; });
  unsigned threads = o.threads != 0 ? o.threads : std::max(1u, std::thread::hardware_concurrency());
  threads = static_cast<unsigned>(std::min<std::size_t>({threads, 16u, std::max<std::size_t>(todo.size(), 1)}));

  std::atomic<std::uint64_t> done{0};
  std::atomic<std::size_t> next{0};
  std::atomic<bool> stop{false};
  std::vector<std::exception_ptr> errors(files.size());
  std::mutex m;
  std::condition_variable cv;
  std::size_t finished_workers = 0;
  auto work = [&] {
    for (std::size_t k = next.fetch_add(1); k < todo.size() && !stop.load(); k = next.fetch_add(1)) {
      FileToHash& f = files[todo[k]];
      try {
        f.computed = hash_file_counting(f.path, done, stop);
      } catch (...) {
        errors[todo[k]] = std::current_exception();
        stop.store(true);
      }
    }
    const std::lock_guard<std::mutex> lock(m);
    ++finished_workers;
    cv.notify_all();
  };
  std::vector<std::thread> pool;
  if (!todo.empty()) {
    pool.reserve(threads);
    try {
      for (unsigned t = 0; t < threads; ++t) pool.emplace_back(work);
    } catch (...) {
      stop.store(true);
      for (auto& th : pool) th.join();
      throw;
    }
  }
  try {
    std::unique_lock<std::mutex> lock(m);
    while (finished_workers < pool.size()) {
      if (cv.wait_for(lock, std::chrono::milliseconds(100), [&] { return finished_workers == pool.size(); })) break;
      if (o.progress) {
        lock.unlock();
        o.progress(done.load(), total);
        lock.lock();
      }
    }
  } catch (...) {  // the progress callback threw: stop the workers first
    stop.store(true);
    for (auto& th : pool) th.join();
    throw;
  }
  for (auto& th : pool) th.join();
  for (const auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
  if (o.progress) o.progress(done.load(), total);
}

/// Collects and hashes the named files of dir, sorted bytewise, and checks
/// cache blobs under verify.
inline std::vector<WeightFile> manifest_files(const std::filesystem::path& dir, std::vector<std::string> names,
                                              const std::optional<std::filesystem::path>& blobs_dir,
                                              const FileHashOptions& o) {
  std::sort(names.begin(), names.end());
  std::vector<FileToHash> files;
  files.reserve(names.size());
  for (const auto& n : names) files.push_back(weight_entry(dir, n, blobs_dir, o.verify));
  hash_files(files, o);
  std::string mismatches;
  std::vector<WeightFile> out;
  out.reserve(files.size());
  for (const auto& f : files) {
    if (f.claimed && f.hash && f.computed != *f.claimed) {
      mismatches += (mismatches.empty() ? "" : "; ") + f.name + ": blob " + f.claimed->hex() +
                    " holds content whose SHA-256 is " + f.computed.hex();
    }
    out.push_back(WeightFile{f.name, f.claimed ? *f.claimed : f.computed, f.size, f.claimed && !f.hash});
  }
  if (!mismatches.empty()) {
    throw io_error("verify: " + std::to_string(std::count(mismatches.begin(), mismatches.end(), ';') + 1) +
                   " cache blob(s) do not match their names: " + mismatches);
  }
  return out;
}

/// The files model.safetensors.index.json (`index`) names in "weight_map", as
/// clean relative paths (subdirectories included). A name that is empty, holds
/// a control character, is absolute, has a ".." component or resolves (symlinks
/// included) outside dir is an input_error naming the index file and the entry;
/// in a cache, a file resolving into the repo's blobs/ (blobs_real) is inside.
inline std::vector<std::string> index_weight_files(const std::filesystem::path& dir, const std::filesystem::path& index,
                                                   const std::optional<std::filesystem::path>& blobs_real) {
  namespace fs = std::filesystem;
  const nlohmann::json j = read_json_file(index, max_index_file_size);
  if (!j.is_object()) throw input_error(index.string() + ": expected a JSON object");
  const auto map = j.find("weight_map");
  if (map == j.end() || !map->is_object()) model_dir_fail(index, "weight_map", "expected an object of file names");
  std::map<std::string, std::string> files;  // file name -> the first tensor naming it
  for (const auto& [tensor, file] : map->items()) {
    const std::string key = "weight_map." + printable(tensor);
    if (!file.is_string()) model_dir_fail(index, key, "expected a file name, got " + json_excerpt(file));
    files.emplace(file.get_ref<const std::string&>(), key);
  }
  const fs::path dir_real = real_path(dir);
  std::vector<std::string> out;
  for (const auto& [name, key] : files) {
    const auto bad = [&, &n = name, &k = key](const std::string& why) {
      model_dir_fail(index, k, "'" + printable(n) + "' " + why);
    };
    if (name.empty()) bad("is empty");
    if (std::any_of(name.begin(), name.end(),
                    [](char c) { return static_cast<unsigned char>(c) < 0x20 || c == 0x7f; })) {
      bad("holds a control character");
    }
    if (name.front() == '/') bad("is an absolute path: it leaves the model directory");
    for (const auto& part : fs::path(name)) {
      if (part == "..") bad("has a '..' component: it leaves the model directory");
    }
    const std::string clean = fs::path(name).lexically_normal().generic_string();
    if (clean.empty() || clean == "." || clean.back() == '/') bad("names a directory, not a file");
    const fs::path real = real_path(dir / clean);
    if (real.empty()) throw io_error(index.string() + ": " + key + ": '" + printable(name) + "' does not exist");
    if (!is_within(real, dir_real) && !(blobs_real && real.parent_path() == *blobs_real)) {
      bad("resolves to " + real.string() + ", outside the model directory");
    }
    out.push_back(clean);
  }
  return out;
}

/// The weight files: the top-level *.safetensors and every file
/// model.safetensors.index.json names; when there are none, the top-level
/// *.bin, *.pt and *.pth (regular files or symlinks to them; a broken symlink
/// is reported later by weight_entry). Sorted bytewise, each name once.
inline std::vector<std::string> weight_file_names(const std::filesystem::path& dir,
                                                  const std::optional<std::filesystem::path>& blobs_real) {
  namespace fs = std::filesystem;
  std::vector<std::string> safetensors, other;
  std::error_code ec;
  fs::directory_iterator it(dir, ec);
  if (ec) throw io_error("cannot list " + dir.string() + ": " + ec.message());
  for (const auto& entry : it) {
    const std::string name = entry.path().filename().string();
    std::error_code e2;
    if (entry.is_directory(e2)) continue;
    if (ends_with(name, ".safetensors")) {
      safetensors.push_back(name);
    } else if (ends_with(name, ".bin") || ends_with(name, ".pt") || ends_with(name, ".pth")) {
      other.push_back(name);
    }
  }
  const fs::path index = dir / "model.safetensors.index.json";
  if (fs::exists(fs::symlink_status(index, ec))) {
    for (auto& name : index_weight_files(dir, index, blobs_real)) safetensors.push_back(std::move(name));
  }
  auto& chosen = safetensors.empty() ? other : safetensors;
  if (chosen.empty()) {
    throw input_error(dir.string() +
                      ": no weight files (looked for *.safetensors and model.safetensors.index.json, "
                      "then *.bin, *.pt and *.pth at the top level)");
  }
  std::sort(chosen.begin(), chosen.end());
  chosen.erase(std::unique(chosen.begin(), chosen.end()), chosen.end());
  return chosen;
}

// ---- config.json -------------------------------------------------------------------

/// Reads one config section ("" for the top level, "text_config" when nested).
class ConfigReader {
 public:
  ConfigReader(const nlohmann::json& section, std::string prefix, std::filesystem::path file,
               const nlohmann::json& override_section)
      : j_(section), prefix_(std::move(prefix)), file_(std::move(file)), override_section_(override_section) {}

  std::string key(std::string_view k) const {
    return prefix_.empty() ? std::string(k) : prefix_ + "." + std::string(k);
  }

  const nlohmann::json* find(std::string_view k) const {
    const auto it = j_.find(k);
    return it == j_.end() || it->is_null() ? nullptr : &*it;
  }

  std::uint32_t positive(std::string_view k) const {
    const nlohmann::json* v = find(k);
    if (v == nullptr) fail(k, "required key is missing (or null)");
    if (!v->is_number_integer() || v->get<std::int64_t>() <= 0 ||
        v->get<std::uint64_t>() > std::numeric_limits<std::uint32_t>::max()) {
      fail(k, "expected a positive 32-bit integer, got " + json_excerpt(*v));
    }
    return static_cast<std::uint32_t>(v->get<std::uint64_t>());
  }

  /// "config.json: text_config.num_hidden_layers", or "... (override)".
  std::string source(std::string_view k) const {
    const bool overridden = override_section_.is_object() && override_section_.contains(std::string(k));
    return "config.json: " + key(k) + (overridden ? " (from overrides)" : "");
  }

  [[noreturn]] void fail(std::string_view k, std::string_view what) const { model_dir_fail(file_, key(k), what); }

 private:
  const nlohmann::json& j_;
  std::string prefix_;
  std::filesystem::path file_;
  const nlohmann::json& override_section_;
};

/// Applies engine overrides as vLLM's --hf-overrides does
/// (ModelConfig._apply_dict_overrides): every key replaces its value, except
/// that an object given for a sub-configuration (a key ending in "_config"
/// whose value is an object, e.g. text_config) is applied to it by the same rule.
inline void apply_overrides(nlohmann::json& config, const nlohmann::json& overrides) {
  for (const auto& [key, value] : overrides.items()) {
    const auto it = config.find(key);
    if (value.is_object() && ends_with(key, "_config") && it != config.end() && it->is_object()) {
      apply_overrides(*it, value);
    } else {
      config[key] = value;
    }
  }
}

/// Numbers in canonical form: integral values with magnitude below 1e16 become
/// integers; the others keep their double value (see canonical_json). A
/// fraction of magnitude 1e15 or more is an input_error.
inline nlohmann::json canonical_numbers(const nlohmann::json& j, const std::string& where) {
  if (j.is_object()) {
    nlohmann::json out = nlohmann::json::object();
    for (const auto& [k, v] : j.items()) out[k] = canonical_numbers(v, where);
    return out;
  }
  if (j.is_array()) {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& v : j) out.push_back(canonical_numbers(v, where));
    return out;
  }
  if (j.is_number_float()) {
    const double d = j.get<double>();
    if (d > -1e16 && d < 1e16 && static_cast<double>(static_cast<std::int64_t>(d)) == d) {
      return nlohmann::json(static_cast<std::int64_t>(d));
    }
    // Python's repr and nlohmann's dump disagree on the notation of fractions in
    // [1e15, 1e16) (positional there, an exponent here): refuse rather than differ.
    if ((d <= -1e15 || d >= 1e15) && std::floor(d) != d) {
      throw input_error(where + ": " + j.dump() + " has a fraction and a magnitude of 1e15 or more");
    }
  }
  return j;
}

/// canonical_json; errors start with `where`.
inline std::string canonical_json_of(const nlohmann::json& j, const std::string& where) {
  try {
    return canonical_numbers(j, where).dump();
  } catch (const nlohmann::json::type_error& e) {
    throw input_error(where + ": " + std::string(json_error_reason(e.what())));
  }
}

}  // namespace detail

/// The config.json keys that change post-RoPE K (or the positions it is applied
/// at): the positional-encoding fingerprint covers those present and not null.
inline constexpr std::string_view positional_keys[] = {
    "max_position_embeddings",
    "original_max_position_embeddings",
    "partial_rotary_factor",
    "position_embedding_type",
    "qk_rope_head_dim",
    "rope_local_base_freq",
    "rope_parameters",
    "rope_scaling",
    "rope_theta",
    "rope_type",
    "rotary_dim",
    "rotary_emb_base",
    "rotary_pct",
};

/// Canonical JSON (docs/format.md, section 8): object keys sorted bytewise, no
/// whitespace, integral numbers of magnitude below 1e16 written as integers, other
/// numbers as Python's repr writes them (shortest round-trip digits), strings as
/// UTF-8 with only '"', '\\' and control characters escaped. Throws input_error
/// on invalid UTF-8 and on a fraction of magnitude 1e15 or more.
inline std::string canonical_json(const nlohmann::json& j) { return detail::canonical_json_of(j, "canonical JSON"); }

/// SHA-256 of the manifest "<sha256 hex>  <path>\n" over files in the given
/// order (sorted bytewise for a weights fingerprint): what
/// `sha256sum FILES... | sha256sum` prints.
inline Digest weights_manifest_fingerprint(const std::vector<WeightFile>& files) {
  Sha256 h;
  for (const auto& f : files) {
    const std::string line = f.sha256.hex() + "  " + f.path + "\n";
    h.update(line.data(), line.size());
  }
  return h.result();
}

/// Reads a model directory: config.json (with overrides) into the KV geometry
/// and the positional-encoding fingerprint, the weight files into the weights
/// fingerprint, the Hugging Face cache (if any) into name and revision.
/// Throws input_error (a missing or inconsistent config key, named; malformed
/// JSON with line and column; a revision that is not a snapshot) or io_error
/// (unreadable or broken files, verify mismatches).
inline ModelDir read_model_dir(const std::filesystem::path& path, const ModelDirOptions& o = {}) {
  namespace fs = std::filesystem;
  if (!detail::is_dir(path)) throw io_error(path.string() + ": not a directory");
  if (!detail::json_depth_at_most(o.overrides, max_config_depth)) {
    throw input_error("overrides: nested deeper than " + std::to_string(max_config_depth) + " levels");
  }
  if (!o.overrides.is_object()) {
    throw input_error("overrides: expected a JSON object, got " + detail::json_excerpt(o.overrides));
  }
  if (o.revision) detail::check_revision(*o.revision);
  ModelDir out;
  const auto hf = detail::locate_hf(path, o.revision);
  out.directory = hf ? hf->snapshot : path;
  if (hf) {
    out.model.name = o.name.value_or(hf->repo_id);
    out.model.revision = hf->commit;
    out.sources.push_back(
        {"model.name", o.name ? "option" : "Hugging Face cache folder " + hf->repo_root.filename().string()});
    out.sources.push_back({"model.revision", "Hugging Face cache: " + hf->revision_source});
  } else {
    if (!o.revision) {
      throw input_error(path.string() +
                        ": not in a Hugging Face cache, so the revision must be given (an immutable "
                        "checkpoint id)");
    }
    const fs::path clean = fs::absolute(path).lexically_normal();
    out.model.name = o.name.value_or((clean.filename().empty() ? clean.parent_path() : clean).filename().string());
    out.model.revision = *o.revision;
    out.sources.push_back({"model.name", o.name ? "option" : "directory name"});
    out.sources.push_back({"model.revision", "option"});
  }

  // config.json
  const fs::path config_file = out.directory / "config.json";
  std::error_code ec;
  if (!fs::exists(config_file, ec)) {
    if (fs::is_symlink(fs::symlink_status(config_file, ec))) {
      throw io_error(config_file.string() + ": broken symlink");
    }
    throw io_error(config_file.string() + ": missing (not a model directory?)");
  }
  nlohmann::json config = read_json_file(config_file);
  if (!config.is_object()) throw input_error(config_file.string() + ": expected a JSON object");
  detail::apply_overrides(config, o.overrides);
  const nlohmann::json* text = nullptr;
  if (const auto it = config.find("text_config"); it != config.end() && !it->is_null()) {
    if (!it->is_object()) detail::model_dir_fail(config_file, "text_config", "expected an object");
    text = &*it;
  }
  const nlohmann::json empty = nlohmann::json::object();
  const nlohmann::json* override_text = &empty;
  if (text != nullptr) {
    const auto it = o.overrides.find("text_config");
    if (it != o.overrides.end()) override_text = &*it;
  }
  const detail::ConfigReader c(text != nullptr ? *text : config, text != nullptr ? "text_config" : "", config_file,
                               text != nullptr ? *override_text : o.overrides);

  out.num_layers = c.positive("num_hidden_layers");
  out.sources.push_back({"kv.num_layers", c.source("num_hidden_layers")});
  if (c.find("kv_lora_rank") != nullptr) {
    out.mla = true;
    out.num_kv_heads = 1;
    const std::uint32_t rank = c.positive("kv_lora_rank");
    const std::uint32_t rope = c.positive("qk_rope_head_dim");
    if (rank > std::numeric_limits<std::uint32_t>::max() - rope) c.fail("kv_lora_rank", "too large");
    out.head_dim = rank + rope;
    out.sources.push_back({"kv.mla", c.source("kv_lora_rank") + " present"});
    out.sources.push_back({"kv.num_kv_heads", "1 (MLA latent cache)"});
    out.sources.push_back({"kv.head_dim", c.source("kv_lora_rank") + " + " + c.key("qk_rope_head_dim")});
  } else {
    const std::uint32_t heads = c.positive("num_attention_heads");
    if (c.find("num_key_value_heads") != nullptr) {
      out.num_kv_heads = c.positive("num_key_value_heads");
      if (out.num_kv_heads > heads || heads % out.num_kv_heads != 0) {
        c.fail("num_key_value_heads", std::to_string(out.num_kv_heads) + " does not divide " +
                                          c.key("num_attention_heads") + " " + std::to_string(heads));
      }
      out.sources.push_back({"kv.num_kv_heads", c.source("num_key_value_heads")});
    } else {
      out.num_kv_heads = heads;
      out.sources.push_back({"kv.num_kv_heads", c.source("num_attention_heads") + " (no num_key_value_heads)"});
    }
    if (c.find("head_dim") != nullptr) {
      out.head_dim = c.positive("head_dim");
      out.sources.push_back({"kv.head_dim", c.source("head_dim")});
    } else {
      const std::uint32_t hidden = c.positive("hidden_size");
      if (hidden % heads != 0) {
        c.fail("hidden_size", std::to_string(hidden) + " is not a multiple of " + c.key("num_attention_heads") + " " +
                                  std::to_string(heads) + " (and there is no head_dim)");
      }
      out.head_dim = hidden / heads;
      out.sources.push_back({"kv.head_dim", c.source("hidden_size") + " / " + c.key("num_attention_heads")});
    }
  }

  // The positional-encoding configuration.
  nlohmann::json positional = nlohmann::json::object();
  for (std::string_view k : positional_keys) {
    if (const nlohmann::json* v = c.find(k)) positional[std::string(k)] = *v;
  }
  out.positional_config = detail::canonical_json_of(positional, config_file.string() + ": positional keys");
  out.model.positional_fingerprint = Sha256::hash(out.positional_config.data(), out.positional_config.size());
  out.sources.push_back({"model.positional_fingerprint", "SHA-256 of " + out.positional_config});

  // Weights.
  const std::optional<fs::path> blobs = detail::blobs_real_path(hf);
  out.weight_files =
      detail::manifest_files(out.directory, detail::weight_file_names(out.directory, blobs), blobs, o.hashing);
  out.model.weights_fingerprint = weights_manifest_fingerprint(out.weight_files);
  std::size_t from_names = 0;
  for (const auto& f : out.weight_files) from_names += f.from_blob_name ? 1 : 0;
  out.sources.push_back({"model.weights_fingerprint",
                         "manifest of " + std::to_string(out.weight_files.size()) + " weight file(s)" +
                             (from_names != 0 ? ", " + std::to_string(from_names) + " hashed by their cache blob names"
                                              : std::string())});
  return out;
}

/// Reads a PEFT adapter directory: name (default: ORG/NAME in a Hugging Face
/// cache, else the directory's name) and the weights fingerprint, the manifest
/// over adapter_config.json and adapter_model.safetensors (else adapter_model.bin).
inline Adapter read_adapter_dir(const std::filesystem::path& path, const AdapterDirOptions& o = {}) {
  namespace fs = std::filesystem;
  if (!detail::is_dir(path)) throw io_error(path.string() + ": not a directory");
  const auto hf = detail::locate_hf(path, std::nullopt);
  const fs::path dir = hf ? hf->snapshot : path;
  const fs::path config_file = dir / "adapter_config.json";
  std::error_code ec;
  if (!fs::exists(config_file, ec)) throw io_error(config_file.string() + ": missing (not a PEFT adapter directory?)");
  const nlohmann::json config = read_json_file(config_file);
  if (!config.is_object()) throw input_error(config_file.string() + ": expected a JSON object");
  std::string weights;
  for (const char* candidate : {"adapter_model.safetensors", "adapter_model.bin"}) {
    if (fs::exists(fs::symlink_status(dir / candidate, ec))) {
      weights = candidate;
      break;
    }
  }
  if (weights.empty()) throw io_error(dir.string() + ": no adapter_model.safetensors or adapter_model.bin");
  const std::optional<fs::path> blobs = detail::blobs_real_path(hf);
  const auto files = detail::manifest_files(dir, {"adapter_config.json", weights}, blobs, o.hashing);
  const fs::path clean = fs::absolute(path).lexically_normal();
  std::string name = o.name ? *o.name
                     : hf   ? hf->repo_id
                            : (clean.filename().empty() ? clean.parent_path() : clean).filename().string();
  return Adapter(std::move(name), weights_manifest_fingerprint(files));
}

/// What a deployment says that its model directory does not: the parameters of
/// identity_from_model_dir (the flags of `kvkey init`, the keywords of
/// Identity.from_model_dir).
struct DeploymentParams {
  std::string tenant;
  KvDtype kv_dtype = KvDtype::unset;
  /// The KV quant layout (kv.quant). Required for an integer kv_dtype (int8,
  /// int4, ...): given here, or as lmdeploy's quant_policy below.
  std::optional<Quant> quant;
  /// lmdeploy's quant_policy (4 or 8): kv_dtype int4 / int8 and the layout
  /// quant_from_quant_policy gives, with quant_scale_dtype (the model's dtype)
  /// and the model's head_dim. Not with quant; kv_dtype unset or the same.
  std::optional<std::uint32_t> quant_policy;
  KvDtype quant_scale_dtype = KvDtype::unset;
  std::uint32_t block_size = 0;
  std::string layout;
  Shard shard;  ///< tp_size, tp_rank, pp_size, pp_rank
  std::uint64_t weights_epoch = 0;
  std::optional<std::string> revision;  ///< as ModelDirOptions::revision
  std::optional<std::string> name;      ///< as ModelDirOptions::name
  /// The engine's overrides of config.json (ModelDirOptions::overrides). Must be an object.
  nlohmann::json overrides = nlohmann::json::object();
  std::optional<std::filesystem::path> adapter_dir;  ///< a PEFT adapter directory
  std::optional<std::string> adapter_name;           ///< as AdapterDirOptions::name; needs adapter_dir
  bool verify = false;                               ///< FileHashOptions::verify, for the model and the adapter
  HashProgress progress;  ///< optional: hashing progress (the model's files, then the adapter's)
  Policy policy;          ///< the namespace's policy the identity is validated under
};

/// The result of identity_from_model_dir: the validated identity and where
/// each field read from the directories came from.
struct ModelDirIdentity {
  Identity identity;
  std::vector<FieldSource> sources;
};

/// The identity of a deployment of the model directory `model_dir` (plain, a
/// Hugging Face cache repo or snapshot) as an engine loads it: the deployment
/// parameters, then read_model_dir (geometry, name, revision, fingerprints),
/// then read_adapter_dir when an adapter is given, then validated(). The one
/// assembly behind `kvkey init` and Identity.from_model_dir. Throws what
/// read_model_dir and read_adapter_dir throw, input_error("adapter_name") for
/// an adapter name without an adapter directory, input_error("kv.quant") for
/// an integer kv_dtype without its quant layout (never a scheme "none"
/// identity for quantized KV), and identity_error when the result does not
/// validate. identity is returned as given (not as encoded:
/// validated()'s single_tenant substitution is not applied).
[[nodiscard]] inline ModelDirIdentity identity_from_model_dir(const std::filesystem::path& model_dir,
                                                              const DeploymentParams& p) {
  ModelDirIdentity out;
  Identity& id = out.identity;
  id.tenant = p.tenant;
  id.kv.dtype = p.kv_dtype;
  id.kv.block_size = p.block_size;
  id.kv.layout = p.layout;
  id.shard = p.shard;
  id.model.weights_epoch = p.weights_epoch;
  if (p.adapter_name && !p.adapter_dir) throw input_error("adapter_name", "needs an adapter directory");
  ModelDirOptions mo;
  mo.revision = p.revision;
  mo.name = p.name;
  mo.overrides = p.overrides;
  mo.hashing.verify = p.verify;
  mo.hashing.progress = p.progress;
  if (p.quant && p.quant_policy) throw input_error("quant_policy", "give the quant layout or quant_policy, not both");
  if (p.quant_policy) {
    const KvDtype d = kv_dtype_from_quant_policy(*p.quant_policy);  // input_error unless 4 or 8
    if (p.kv_dtype != KvDtype::unset && p.kv_dtype != d) {
      throw input_error("kv_dtype", "quant_policy " + std::to_string(*p.quant_policy) + " stores " +
                                        std::string(to_string(d)) + " KV, not " + std::string(to_string(p.kv_dtype)));
    }
    if (p.quant_scale_dtype == KvDtype::unset) {
      throw input_error("quant_scale_dtype", "lmdeploy's quant_policy " + std::to_string(*p.quant_policy) +
                                                 " keeps a scale and a zero point per token and KV head in the "
                                                 "model's dtype: give that dtype (e.g. bfloat16)");
    }
    id.kv.dtype = d;
  }
  if (p.quant) id.kv.quant = *p.quant;
  if (is_integer_dtype(id.kv.dtype) && !p.quant_policy && id.kv.quant.scheme == "none") {
    throw input_error("kv.quant", std::string(to_string(id.kv.dtype)) +
                                      " KV is quantized: give its quant layout (scheme, group size, scale dtype, "
                                      "zero point) or lmdeploy's quant_policy; a scheme \"none\" identity would "
                                      "describe other bytes");
  }
  const ModelDir m = read_model_dir(model_dir, mo);
  m.apply(id);
  if (p.quant_policy) id.kv.quant = quant_from_quant_policy(*p.quant_policy, p.quant_scale_dtype, id.kv.head_dim);
  out.sources = m.sources;
  if (p.adapter_dir) {
    AdapterDirOptions ao;
    ao.name = p.adapter_name;
    ao.hashing.verify = p.verify;
    ao.hashing.progress = p.progress;
    id.adapter = read_adapter_dir(*p.adapter_dir, ao);
    out.sources.push_back(
        {"adapter", "manifest of " + p.adapter_dir->string() + ": adapter_config.json and adapter_model.*"});
  }
  (void)validated(id, p.policy);
  return out;
}

KVKEY_END_NAMESPACE

#endif  // KVKEY_MODEL_DIR_HPP
