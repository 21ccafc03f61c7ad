// SPDX-License-Identifier: Apache-2.0
// kvkey.compat.lmdeploy: the binding of kvkey/compat/lmdeploy.hpp, lmdeploy's
// legacy Mooncake store keys bit for bit.
#include <pybind11/operators.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <kvkey/compat/lmdeploy.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "binding.hpp"
#include "convert.hpp"
#include "tokens.hpp"

namespace kvkey_python {

namespace {

namespace lm = kvkey::compat::lmdeploy;

std::uint32_t u32(const py::handle& obj, const char* field) { return to_uint<std::uint32_t>(obj, field); }

// lookup_keys makes shard_keys keys per block: a bound far above any real
// tensor-parallel size keeps a wrong argument from allocating gigabytes.
constexpr std::uint32_t max_shard_keys = 4096;

// m.name(tp_size, num_kv_heads), both checked.
void def_tp_heads(py::module_& m, const char* name, std::uint32_t (*f)(std::uint32_t, std::uint32_t)) {
  m.def(
      name,
      [f](const py::object& tp_size, const py::object& heads) {
        return f(u32(tp_size, "tp_size"), u32(heads, "num_kv_heads"));
      },
      py::arg("tp_size"), py::arg("num_kv_heads"));
}
}  // namespace

void bind_lmdeploy(py::module_& m) {
  m.doc() = "lmdeploy's legacy Mooncake store keys, bit for bit (recognise, enumerate, purge; never for new keys).";
  m.attr("BLOCK_HASH_SCHEMA") = py::bytes(lm::block_hash_schema.data(), lm::block_hash_schema.size());
  m.attr("DEFAULT_MODEL_NAME") = std::string(lm::default_model_name);

  m.def(
      "build_prefix_block_hashes",
      [](const py::object& token_ids, const py::object& block_size, const py::object& extra_identity,
         const py::object& previous_hashes) {
        const Tokens t(token_ids, true);
        const std::uint32_t bs = u32(block_size, "block_size");
        const std::string extra = to_byte_string(extra_identity, "extra_identity");
        std::vector<kvkey::Digest> hashes = to_digests(previous_hashes, "previous_hashes");
        {
          py::gil_scoped_release release;
          t.visit([&](const auto* data, std::size_t n) { lm::extend_block_hashes(hashes, data, n, bs, extra); });
        }
        return to_list(hashes);
      },
      py::arg("token_ids"), py::arg("block_size"), py::arg("extra_identity") = "",
      py::arg("previous_hashes") = py::none(),
      "lmdeploy's build_prefix_block_hashes: one 32-byte hash (bytes) per full block. extra_identity: str or bytes "
      "(the scheduler passes the adapter name or ''). previous_hashes: hashes of the first blocks (continuation).");

  m.def(
      "build_store_key",
      [](const py::object& cache_prefix, const py::object& model_name, const py::object& kv_head_rank,
         const py::object& block_hash) {
        return lm::store_key(to_text(cache_prefix, "cache_prefix"), to_text(model_name, "model_name"),
                             u32(kv_head_rank, "kv_head_rank"), to_digest(block_hash, "block_hash"));
      },
      py::arg("cache_prefix"), py::arg("model_name"), py::arg("kv_head_rank"), py::arg("block_hash"),
      "\"[<cache_prefix>@]<model_name>@tp_rank:<kv_head_rank>@group:0@<64 hex>\"");

  def_tp_heads(m, "kv_head_replica_num", &lm::kv_head_replica_num);
  m.def(
      "kv_head_rank",
      [](const py::object& tp_rank, const py::object& tp_size, const py::object& heads) {
        return lm::kv_head_rank(u32(tp_rank, "tp_rank"), u32(tp_size, "tp_size"), u32(heads, "num_kv_heads"));
      },
      py::arg("tp_rank"), py::arg("tp_size"), py::arg("num_kv_heads"));
  def_tp_heads(m, "shard_key_count", &lm::shard_key_count);
  m.def(
      "lookup_keys",
      [](const py::object& cache_prefix, const py::object& model_name, const py::object& shard_keys,
         const py::object& hashes) {
        const std::uint32_t shards = u32(shard_keys, "shard_keys");
        if (shards > max_shard_keys) {
          throw_input_error("shard_keys is " + std::to_string(shards) + ", at most " + std::to_string(max_shard_keys) +
                            " (one key per KV-head shard of a block)");
        }
        return lm::lookup_keys(to_text(cache_prefix, "cache_prefix"), to_text(model_name, "model_name"), shards,
                               to_digests(hashes, "block_hashes"));
      },
      py::arg("cache_prefix"), py::arg("model_name"), py::arg("shard_keys"), py::arg("block_hashes"),
      "The keys lmdeploy's lookup checks, block-major.");

  py::class_<lm::LegacyKey>(m, "LegacyKey", "A parsed legacy key.")
      .def_property_readonly("cache_prefix", [](const lm::LegacyKey& k) { return to_py_text(k.cache_prefix); })
      .def_property_readonly("model_name", [](const lm::LegacyKey& k) { return to_py_text(k.model_name); })
      .def_readonly("kv_head_rank", &lm::LegacyKey::kv_head_rank)
      .def_property_readonly("block_hash", [](const lm::LegacyKey& k) { return to_bytes(k.block_hash); })
      .def_readonly("ambiguous", &lm::LegacyKey::ambiguous)
      .def("__repr__", [](const lm::LegacyKey& k) {
        return "LegacyKey(cache_prefix=" + quoted(k.cache_prefix) + ", model_name=" + quoted(k.model_name) +
               ", kv_head_rank=" + std::to_string(k.kv_head_rank) + ", block_hash=" + k.block_hash.hex() +
               ", ambiguous=" + bool_repr(k.ambiguous) + ")";
      });
  m.def(
      "parse_key", [](const py::object& key) { return lm::parse_key(to_text(key, "key")); }, py::arg("key"),
      "LegacyKey or None. The prefix/model split of a head with '@' is ambiguous: model_name is taken after the "
      "last '@' and `ambiguous` is set.");
  m.def(
      "is_legacy_key", [](const py::object& key) { return lm::is_legacy_key(to_text(key, "key")); }, py::arg("key"));
  m.def(
      "is_legacy_key_of",
      [](const py::object& key, const py::object& prefix, const py::object& model) {
        return lm::is_legacy_key_of(to_text(key, "key"), to_text(prefix, "cache_prefix"), to_text(model, "model_name"));
      },
      py::arg("key"), py::arg("cache_prefix"), py::arg("model_name"));
  m.def(
      "purge_pattern",
      [](const py::object& prefix, const py::object& model) {
        return lm::purge_pattern(to_text(prefix, "cache_prefix"), to_text(model, "model_name"));
      },
      py::arg("cache_prefix"), py::arg("model_name"),
      "Anchored regex (ECMAScript and POSIX ERE) matching every legacy key of the pair; never a kvkey key.");
  m.def(
      "purge_glob",
      [](const py::object& prefix, const py::object& model) {
        return lm::purge_glob(to_text(prefix, "cache_prefix"), to_text(model, "model_name"));
      },
      py::arg("cache_prefix"), py::arg("model_name"),
      "Redis SCAN MATCH glob finding every legacy key of the pair (looser: filter with is_legacy_key_of).");
}

}  // namespace kvkey_python
