#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""`kvkey init`: identity files from model and adapter directories.

Run by CTest (tools/CMakeLists.txt):
    KVKEY_TOOL=build/x/tools/kvkey /usr/bin/python3 tools/tests/init_test.py

Fingerprints are checked against independent computations: the real `sha256sum`
binary for the weights manifests, and Python's json + hashlib for the
positional-encoding fingerprint (docs/format.md, sections 7 and 8).
"""
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

TOOL = os.environ.get("KVKEY_TOOL", "")
COMMIT = "0123456789abcdef0123456789abcdef01234567"
QWEN2 = {
    "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 896,
    "num_attention_heads": 14, "num_hidden_layers": 24, "num_key_value_heads": 2,
    "max_position_embeddings": 32768, "rope_theta": 1000000.0, "rope_scaling": None,
    "torch_dtype": "bfloat16",
}
BASE_ARGS = ["--tenant", "team-a", "--kv-dtype", "fp16", "--block-size", "64", "--layout", "vllm.v1"]


def run(*args):
    # The timeout only keeps a regression that blocks (a FIFO) from hanging the suite.
    p = subprocess.run([TOOL, *args], capture_output=True, timeout=600)
    return p.returncode, p.stdout.decode(), p.stderr.decode()


def sha256sum_manifest(directory, names):
    """`cd DIR && sha256sum NAMES... | sha256sum` with the real binaries, names sorted bytewise."""
    names = sorted(names, key=lambda n: n.encode())
    listing = subprocess.run(["sha256sum", "--", *names], cwd=directory, capture_output=True, check=True).stdout
    return subprocess.run(["sha256sum"], input=listing, capture_output=True, check=True).stdout.decode()[:64]


def canonical_positional(config):
    """docs/format.md, section 8, in Python."""
    keys = ["max_position_embeddings", "original_max_position_embeddings", "partial_rotary_factor",
            "position_embedding_type", "qk_rope_head_dim", "rope_local_base_freq", "rope_parameters",
            "rope_scaling", "rope_theta", "rope_type", "rotary_dim", "rotary_emb_base", "rotary_pct"]

    def canon(v):
        if isinstance(v, dict):
            return {k: canon(x) for k, x in v.items()}
        if isinstance(v, list):
            return [canon(x) for x in v]
        if isinstance(v, float) and v.is_integer() and abs(v) < 1e16:
            return int(v)
        return v

    section = config.get("text_config") or config
    picked = {k: canon(section[k]) for k in keys if section.get(k) is not None}
    text = json.dumps(picked, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()


class InitTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="kvkey-init-")
        self.weights = {"model-00001-of-00002.safetensors": os.urandom(300000),
                        "model-00002-of-00002.safetensors": os.urandom(200000)}
        self.repo = self.hf_repo("models--Qwen--Qwen2.5-0.5B", QWEN2, self.weights)
        self.snapshot = os.path.join(self.repo, "snapshots", COMMIT)

    def tearDown(self):
        shutil.rmtree(self.tmp)

    def path(self, *parts):
        return os.path.join(self.tmp, *parts)

    def hf_repo(self, folder, config, weights, extra=None):
        """A Hugging Face cache repo as huggingface_hub lays it out: files are relative
        symlinks into blobs/, LFS blobs named by their SHA-256, git blobs by a 40-hex id."""
        root = self.path("hub", folder)
        snap = os.path.join(root, "snapshots", COMMIT)
        os.makedirs(os.path.join(root, "blobs"))
        os.makedirs(snap)
        os.makedirs(os.path.join(root, "refs"))
        with open(os.path.join(root, "refs", "main"), "w") as f:
            f.write(COMMIT)
        files = {"config.json": json.dumps(config, indent=2).encode()}
        files.update(extra or {})
        for i, (name, data) in enumerate(files.items()):
            blob = "%040x" % (i + 1)  # a git object id
            self.put_blob(root, snap, name, data, blob)
        for name, data in weights.items():
            self.put_blob(root, snap, name, data, hashlib.sha256(data).hexdigest())
        return root

    @staticmethod
    def put_blob(root, snap, name, data, blob):
        with open(os.path.join(root, "blobs", blob), "wb") as f:
            f.write(data)
        os.symlink(os.path.join("..", "..", "blobs", blob), os.path.join(snap, name))

    def plain_copy(self, src, name="plain"):
        dst = self.path(name)
        shutil.copytree(src, dst, symlinks=False)  # follows the symlinks: regular files
        return dst

    def init(self, *args):
        rc, out, err = run("init", *args)
        self.assertEqual(rc, 0, err)
        self.assertEqual(err, "")
        return json.loads(out)

    def assert_error(self, args, pattern):
        rc, out, err = run(*args)
        self.assertEqual(rc, 2, err)
        self.assertEqual(out, "")
        self.assertEqual(len(err.splitlines()), 1, err)
        self.assertRegex(err, r"^kvkey: error: " + pattern)
        return err

    # ---- done when: cache and plain copy agree with sha256sum ----------------------------

    def test_cache_and_plain_copy_give_the_sha256sum_manifest(self):
        cached = self.init("--model", self.snapshot, *BASE_ARGS)
        plain_dir = self.plain_copy(self.snapshot)
        plain = self.init("--model", plain_dir, "--revision", COMMIT, *BASE_ARGS)
        expected = sha256sum_manifest(plain_dir, list(self.weights))
        self.assertEqual(cached["model"]["weights_fingerprint"], expected)
        self.assertEqual(plain["model"]["weights_fingerprint"], expected)
        self.assertEqual(sha256sum_manifest(self.snapshot, list(self.weights)), expected)  # through the symlinks
        self.assertEqual(cached["model"]["name"], "Qwen/Qwen2.5-0.5B")
        self.assertEqual(cached["model"]["revision"], COMMIT)
        self.assertEqual(plain["model"]["name"], "plain")
        self.assertEqual(cached["kv"], {"dtype": "fp16",
                                        "quant": {"scheme": "none", "group_size": 0, "zero_point": False},
                                        "block_size": 64, "num_layers": 24, "num_kv_heads": 2,
                                        "head_dim": 64, "layout": "vllm.v1", "mla": False})
        self.assertEqual(cached["shard"], {"tp_size": 1, "tp_rank": 0, "pp_size": 1, "pp_rank": 0})
        self.assertEqual(cached["model"]["positional_fingerprint"], canonical_positional(QWEN2))
        self.assertEqual(cached["model"]["positional_fingerprint"], plain["model"]["positional_fingerprint"])

    def test_repo_root_resolves_refs_main(self):
        j = self.init("--model", self.repo, *BASE_ARGS)
        self.assertEqual(j["model"]["revision"], COMMIT)
        self.assertEqual(j["model"]["name"], "Qwen/Qwen2.5-0.5B")

    def test_output_is_an_identity_file_kvkey_identity_reads(self):
        out = self.path("id.json")
        rc, stdout, err = run("init", "--model", self.repo, "--tp-size", "2", "--tp-rank", "1", "-o", out, *BASE_ARGS)
        self.assertEqual((rc, stdout, err), (0, "", ""))
        self.assertEqual(oct(os.stat(out).st_mode & 0o777), "0o644")
        rc, text, err = run("identity", out)
        self.assertEqual(rc, 0, err)
        with open(out) as f:
            written = json.load(f)
        self.assertRegex(text, r"model\.weights_fingerprint +%s" % written["model"]["weights_fingerprint"])
        self.assertRegex(text, r"slice +heads \[1, 2\) layers \[0, 24\)")

    def test_adapter_fingerprint_covers_weights_and_config(self):
        adapter = self.path("sql-lora")
        os.makedirs(adapter)
        with open(os.path.join(adapter, "adapter_config.json"), "w") as f:
            json.dump({"r": 8, "lora_alpha": 16, "target_modules": ["q_proj", "v_proj"]}, f)
        with open(os.path.join(adapter, "adapter_model.safetensors"), "wb") as f:
            f.write(os.urandom(5000))
        j = self.init("--model", self.repo, "--adapter", adapter, *BASE_ARGS)
        self.assertEqual(j["adapter"], {"name": "sql-lora", "weights_fingerprint": sha256sum_manifest(
            adapter, ["adapter_model.safetensors", "adapter_config.json"])})
        j2 = self.init("--model", self.repo, "--adapter", adapter, "--adapter-name", "sql", *BASE_ARGS)
        self.assertEqual(j2["adapter"]["name"], "sql")

    def test_overrides_change_only_the_positional_fingerprint(self):
        base = self.init("--model", self.repo, *BASE_ARGS)
        override = {"rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}}
        j = self.init("--model", self.repo, "--override", json.dumps(override), *BASE_ARGS)
        self.assertNotEqual(j["model"]["positional_fingerprint"], base["model"]["positional_fingerprint"])
        self.assertEqual(j["model"]["positional_fingerprint"], canonical_positional(dict(QWEN2, **override)))
        self.assertEqual(j["model"]["weights_fingerprint"], base["model"]["weights_fingerprint"])
        with open(self.path("over.json"), "w") as f:
            json.dump(override, f)
        self.assertEqual(self.init("--model", self.repo, "--override", "@" + self.path("over.json"), *BASE_ARGS), j)

    def test_progress_bar_on_stderr(self):
        plain_dir = self.plain_copy(self.snapshot)
        rc, out, err = run("init", "--model", plain_dir, "--revision", "r1", "--progress", *BASE_ARGS)
        self.assertEqual(rc, 0, err)
        self.assertRegex(err, r"hashing weights \[#+\] [0-9.]+ / [0-9.]+ GiB +[0-9]+ MiB/s\n$")
        rc, out, err = run("init", "--model", plain_dir, "--revision", "r1", *BASE_ARGS)
        self.assertEqual(err, "")  # not a terminal, and small

    def test_sources(self):
        rc, out, err = run("init", "--model", self.snapshot, "--sources", *BASE_ARGS)
        self.assertEqual(rc, 0, err)
        self.assertRegex(err, r"kv\.num_kv_heads +config\.json: num_key_value_heads")
        self.assertRegex(err, r"model\.revision +Hugging Face cache: snapshot directory name")

    # ---- bad input -------------------------------------------------------------------------

    def test_verify_reports_a_blob_that_does_not_match_its_name(self):
        name = "model-00002-of-00002.safetensors"
        blob = os.path.realpath(os.path.join(self.snapshot, name))
        with open(blob, "r+b") as f:
            first = f.read(1)
            f.seek(0)
            f.write(bytes([first[0] ^ 0xFF]))  # always a change (random weights may start with any byte)
        self.init("--model", self.snapshot, *BASE_ARGS)  # trusted by name
        self.assert_error(["init", "--model", self.snapshot, "--verify", *BASE_ARGS],
                          r"verify: 1 cache blob\(s\) do not match their names: %s: blob %s" %
                          (name, os.path.basename(blob)))

    def test_kv_dtype_takes_the_engine_spellings(self):
        """Every name kv_dtype_from_engine accepts, with the same refusals."""
        for name, dtype in [("fp8", "fp8_e4m3"), ("bfloat16", "bf16"), ("torch.bfloat16", "bf16"), ("half", "fp16"),
                            ("float16", "fp16"), ("torch.float8_e5m2", "fp8_e5m2"), ("float8_e4m3fn", "fp8_e4m3"),
                            ("float32", "fp32"), ("bf16", "bf16"), ("float8_e4m3fnuz", "fp8_e4m3fnuz")]:
            made = self.init("--model", self.repo, *BASE_ARGS[:2], "--kv-dtype", name, *BASE_ARGS[4:])
            self.assertEqual(made["kv"]["dtype"], dtype, name)
        for name, pattern in [("auto", r"kv dtype \"auto\" means the model's dtype: resolve it first"),
                              ("fp8_inc", r"kv dtype \"fp8_inc\" stores scales inside the cache"),
                              ("FP8", r"unknown kv dtype \"FP8\"")]:
            self.assert_error(["init", "--model", self.repo, *BASE_ARGS[:2], "--kv-dtype", name, *BASE_ARGS[4:]],
                              "--kv-dtype: " + pattern)

    def test_fp8_follows_the_platform(self):
        args = ["--model", self.repo, *BASE_ARGS[:2], "--kv-dtype", "fp8", *BASE_ARGS[4:]]
        self.assertEqual(self.init(*args)["kv"]["dtype"], "fp8_e4m3")
        self.assertEqual(self.init(*args, "--gpu-arch", "gfx942:sramecc+:xnack-")["kv"]["dtype"], "fp8_e4m3fnuz")
        self.assertEqual(self.init(*args, "--gpu-arch", "gfx950")["kv"]["dtype"], "fp8_e4m3")

    def test_quantized_kv_takes_its_layout_or_is_refused(self):
        def args(dtype, *extra):
            return ["--model", self.repo, *BASE_ARGS[:2], "--kv-dtype", dtype, *BASE_ARGS[4:], *extra]

        for dtype in ("int8", "int4"):
            self.assert_error(["init", *args(dtype)], r"--kv-dtype %s: .*quant layout.*--quant-policy" % dtype)
        self.assert_error(["init", *args("int8", "--quant-policy", "8")], r"--quant-scale-dtype .*model's dtype")
        self.assert_error(["init", *args("int8", "--quant-policy", "4", "--quant-scale-dtype", "bf16")],
                          r"--kv-dtype .*quant_policy 4 stores int4")
        for dtype, policy in (("int8", "8"), ("int4", "4")):
            made = self.init(*args(dtype, "--quant-policy", policy, "--quant-scale-dtype", "bfloat16"))
            q = made["kv"]["quant"]
            self.assertEqual((made["kv"]["dtype"], q["scheme"], q["scale_dtype"], q["zero_point"]),
                             (dtype, "per_token_head_asym", "bf16", True))
            self.assertEqual(q["group_size"], made["kv"]["head_dim"])
        made = self.init(*args("int8", "--quant-scheme", "per_token", "--quant-group-size", "32",
                               "--quant-scale-dtype", "fp16"))
        self.assertEqual(made["kv"]["quant"]["scheme"], "per_token")
        self.assertEqual(made["kv"]["quant"]["group_size"], 32)
        self.assert_error(["init", *args("int8", "--quant-group-size", "32")], r"--quant-group-size.*: need --quant-scheme")

    def test_single_tenant(self):
        made = self.init("--model", self.repo, "--single-tenant", *BASE_ARGS[2:])
        self.assertEqual(made["policy"], "single_tenant")
        self.assertNotIn("tenant", made)
        with open(self.path("single.json"), "w") as f:
            json.dump(made, f)
        rc, out, err = run("identity", self.path("single.json"))
        self.assertEqual(rc, 0, err)
        self.assertRegex(out, r"\n  tenant +\"_single\"\n")
        self.assertRegex(out, r"\n  policy +single_tenant\n")
        self.assert_error(["init", "--model", self.repo, *BASE_ARGS[2:]],
                          r"--tenant: required \(or --single-tenant, for a store no one else shares\)")
        self.assert_error(["init", "--model", self.repo, "--single-tenant", *BASE_ARGS],
                          r"--tenant \(tenant\): .*single_tenant policy")

    def test_errors_name_the_problem(self):
        plain = self.plain_copy(self.snapshot)
        self.assert_error(["init", "--model", plain, *BASE_ARGS], r".*not in a Hugging Face cache, so the revision "
                                                                  r"must be given")
        self.assert_error(["init", "--model", self.repo, "--revision", "v9", *BASE_ARGS],
                          r".*revision 'v9' is neither a ref in refs/ nor a commit in snapshots/")
        self.assert_error(["init", "--model", self.path("nope"), "--revision", "r", *BASE_ARGS], r".*not a directory")
        self.assert_error(["init", "--model", self.repo, *BASE_ARGS[:2], "--kv-dtype", "fp9", *BASE_ARGS[4:]],
                          r"--kv-dtype: unknown kv dtype \"fp9\" \(accepted: fp32, ")
        self.assert_error(["init", "--model", self.repo, "--tenant", "a/b", *BASE_ARGS[2:]],
                          r"--tenant \(tenant\): byte 1 is not allowed")
        self.assert_error(["init", "--model", self.repo, "--tp-size", "3", *BASE_ARGS],
                          r"--tp-size \(shard.tp_size\): 3 is not a multiple of kv.num_kv_heads 2")
        self.assert_error(["init", "--model", self.repo, "--override", "{\"rope_theta\": }", *BASE_ARGS],
                          r"--override:1:16: invalid JSON")
        self.assert_error(["init", "--model", self.repo, "--override", "[1]", *BASE_ARGS],
                          r"--override: expected a JSON object")
        # the identity files' parser: duplicate keys and deep nesting are refused
        self.assert_error(["init", "--model", self.repo, "--override", '{"rope_theta": 1, "rope_theta": 2}',
                           *BASE_ARGS], r"--override: rope_theta: duplicate key")
        self.assert_error(["init", "--model", self.repo, "--override", "[" * 40 + "]" * 40, *BASE_ARGS],
                          r"--override: invalid JSON: nested deeper than 32 levels")
        # malformed config.json: line and column
        with open(os.path.join(plain, "config.json"), "w") as f:
            f.write('{\n  "num_hidden_layers": 24,\n  "hidden_size" 896\n}\n')
        self.assert_error(["init", "--model", plain, "--revision", "r", *BASE_ARGS],
                          r".*plain/config\.json:3:19: invalid JSON: syntax error while parsing object separator")
        with open(os.path.join(plain, "config.json"), "w") as f:
            json.dump(dict(QWEN2, num_key_value_heads=None, num_attention_heads=None), f)
        self.assert_error(["init", "--model", plain, "--revision", "r", *BASE_ARGS],
                          r".*config\.json: num_attention_heads: required key is missing")
        os.remove(os.path.join(plain, "config.json"))
        self.assert_error(["init", "--model", plain, "--revision", "r", *BASE_ARGS], r".*config\.json: missing")
        # a broken symlink in the cache
        os.remove(os.path.realpath(os.path.join(self.snapshot, "model-00001-of-00002.safetensors")))
        self.assert_error(["init", "--model", self.snapshot, *BASE_ARGS],
                          r".*model-00001-of-00002\.safetensors: broken symlink")
        # no weight files
        empty = self.path("empty")
        os.makedirs(empty)
        with open(os.path.join(empty, "config.json"), "w") as f:
            json.dump(QWEN2, f)
        self.assert_error(["init", "--model", empty, "--revision", "r", *BASE_ARGS], r".*no weight files")

    # ---- hostile model directories (issue 19) ----------------------------------------------

    def hostile_plain(self):
        plain = self.plain_copy(self.snapshot)
        return plain, os.path.join(plain, "config.json")

    def test_a_fifo_or_a_device_config_is_refused_at_once(self):
        plain, config = self.hostile_plain()
        os.remove(config)
        os.mkfifo(config)
        self.assert_error(["init", "--model", plain, "--revision", "r", *BASE_ARGS],
                          r".*plain/config\.json: not a regular file \(a FIFO\)$")
        os.remove(config)
        os.symlink("/dev/zero", config)
        self.assert_error(["init", "--model", plain, "--revision", "r", *BASE_ARGS],
                          r".*plain/config\.json: not a regular file \(a character device\)$")
        os.remove(config)
        with open(config, "w") as f:
            json.dump(QWEN2, f)
        adapter = self.path("lora")
        os.makedirs(adapter)
        with open(os.path.join(adapter, "adapter_model.safetensors"), "wb") as f:
            f.write(b"lora")
        os.mkfifo(os.path.join(adapter, "adapter_config.json"))
        self.assert_error(["init", "--model", plain, "--revision", "r", "--adapter", adapter, *BASE_ARGS],
                          r".*lora/adapter_config\.json: not a regular file \(a FIFO\)$")

    def test_config_limits_size_and_depth(self):
        plain, config = self.hostile_plain()
        with open(config, "r+b") as f:
            f.truncate(16 * 1024 * 1024 + 7)
        self.assert_error(["init", "--model", plain, "--revision", "r", *BASE_ARGS],
                          r".*config\.json: larger than the 16777216-byte limit")
        text = json.dumps(QWEN2)[:-1] + ', "rope_scaling": {"factor": ' + "[" * 120000 + "]" * 120000 + "}}"
        with open(config, "w") as f:
            f.write(text)
        self.assert_error(["init", "--model", plain, "--revision", "r", *BASE_ARGS],
                          r".*config\.json: rope_scaling\.factor(\[0\])+: nested deeper than 64 levels$")

    def test_number_out_of_range_names_the_file_and_key(self):
        plain, config = self.hostile_plain()
        for text, key in [('"rope_theta": 1e400', "rope_theta"),
                          ('"text_config": {"num_hidden_layers": 24, "rope_scaling": {"factor": -1e4000}}',
                           r"text_config\.rope_scaling\.factor")]:
            with open(config, "w") as f:
                f.write(json.dumps(QWEN2)[:-1] + ", " + text + "}")
            err = self.assert_error(["init", "--model", plain, "--revision", "r", *BASE_ARGS],
                                    r".*plain/config\.json: %s: number out of range$" % key)
            self.assertNotIn("unexpected failure", err)

    def test_index_shards_are_covered_and_must_stay_inside(self):
        plain, _ = self.hostile_plain()
        os.makedirs(os.path.join(plain, "parts"))
        with open(os.path.join(plain, "parts", "extra.safetensors"), "wb") as f:
            f.write(os.urandom(1000))
        index = os.path.join(plain, "model.safetensors.index.json")
        names = list(self.weights) + ["parts/extra.safetensors"]
        with open(index, "w") as f:
            json.dump({"weight_map": {"t%d" % i: n for i, n in enumerate(names)}}, f)
        j = self.init("--model", plain, "--revision", "r", *BASE_ARGS)
        self.assertEqual(j["model"]["weights_fingerprint"], sha256sum_manifest(plain, names))
        with open(index, "w") as f:
            json.dump({"weight_map": {"lm_head.weight": "parts/../../outside.safetensors"}}, f)
        self.assert_error(["init", "--model", plain, "--revision", "r", *BASE_ARGS],
                          r".*plain/model\.safetensors\.index\.json: weight_map\.lm_head\.weight: "
                          r"'parts/\.\./\.\./outside\.safetensors' has a '\.\.' component")

    def test_revisions_must_stay_in_refs(self):
        for revision, message in [("main\x01", r"revision: byte 4 is a control character"),
                                  (self.path("hub"), r"revision: '.*' is an absolute path"),
                                  ("../../models--Qwen--Qwen2.5-0.5B/refs/main", r"revision: '.*' has a '\.\.' component")]:
            self.assert_error(["init", "--model", self.repo, "--revision", revision, *BASE_ARGS], message)

    def test_output_is_atomic_and_untouched_on_error(self):
        out = self.path("id.json")
        with open(out, "w") as f:
            f.write("previous\n")
        self.assert_error(["init", "--model", self.repo, "--revision", "v9", "-o", out, *BASE_ARGS], r".*v9")
        with open(out) as f:
            self.assertEqual(f.read(), "previous\n")
        rc, _, err = run("init", "--model", self.repo, "-o", out, *BASE_ARGS)
        self.assertEqual(rc, 0, err)
        self.assertEqual(sorted(os.listdir(self.tmp)), ["hub", "id.json"])  # no temp file left
        with open(out) as f:
            self.assertEqual(json.load(f), self.init("--model", self.repo, *BASE_ARGS))
        self.assert_error(["init", "--model", self.repo, "-o", self.path("no-such-dir", "id.json"), *BASE_ARGS],
                          r"cannot write .*no-such-dir/id\.json")


if __name__ == "__main__":
    if not TOOL:
        sys.exit("set KVKEY_TOOL to the kvkey executable")
    unittest.main(verbosity=2)
