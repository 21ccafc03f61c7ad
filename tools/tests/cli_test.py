#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Runs the kvkey tool as a process on the committed examples and checks its
stdout, stderr and exit status.

Run by CTest (tools/CMakeLists.txt), one test class per CTest test:
    KVKEY_TOOL=build/x/tools/kvkey KVKEY_SOURCE_DIR=. /usr/bin/python3 tools/tests/cli_test.py KeysTest

Values the tool prints are checked against an independent computation: `spec`
below re-implements the byte formats (identity encoding, chain, object hash,
store key, envelope) from docs/format.md with hashlib, so a tool that printed
something other than what the format defines fails here.
"""
import hashlib
import hmac
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import unittest

TOOL = os.environ.get("KVKEY_TOOL", "")
SOURCE = os.environ.get("KVKEY_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
SEED_PROBE = os.environ.get("KVKEY_SEED_PROBE", "")
EXAMPLES = os.path.join(SOURCE, "examples", "identities")
DATA = os.path.join(SOURCE, "tools", "tests", "data")
PROBE_TOKENS = os.path.join(EXAMPLES, "prompts", "probe.txt")
PAYLOAD = 24 * 2 * 2 * 64 * 64 * 2  # layers * K,V * heads * head_dim * block * 2 bytes, as in seed_probe


def example(name):
    return os.path.join(EXAMPLES, name + ".json")


def run(*args, stdin=None, cwd=None, timeout=None):
    p = subprocess.run([TOOL, *args], input=stdin, capture_output=True, cwd=cwd, timeout=timeout)
    return p.returncode, p.stdout.decode(), p.stderr.decode()


def load(path):
    with open(path) as f:
        return json.load(f)


def probe_tokens():
    with open(PROBE_TOKENS) as f:
        return [int(t) for t in f.read().split()]


# ---- the byte formats, re-implemented -------------------------------------------

class spec:
    DTYPES = {"fp32": 1, "fp16": 2, "bf16": 3, "fp8_e4m3": 4, "fp8_e5m2": 5, "int8": 6, "int4": 7,
              "uint8": 8, "uint4": 9, "fp4_e2m1": 10}
    # The salient fields in encoding order (adapter members only when present).
    FIELDS = ["tenant", "model.name", "model.revision", "model.weights_epoch", "model.weights_fingerprint",
              "model.positional_fingerprint", "kv.dtype", "kv.quant.scheme", "kv.quant.group_size", "kv.quant.scale_dtype", "kv.quant.zero_point",
              "kv.quant.scales_fingerprint", "kv.block_size", "kv.num_layers", "kv.num_kv_heads", "kv.head_dim",
              "kv.layout", "kv.mla", "adapter", "adapter.name", "adapter.weights_fingerprint"]

    @staticmethod
    def string(s):
        b = s.encode()
        return struct.pack("<I", len(b)) + b

    @staticmethod
    def optional(v, encode):
        return b"\x00" if v is None else b"\x01" + encode(v)

    @staticmethod
    def file_fingerprint(config_path, section, hex_key, file_key):
        if section.get(hex_key) is not None:
            return bytes.fromhex(section[hex_key])
        if section.get(file_key) is not None:
            with open(os.path.join(os.path.dirname(config_path), section[file_key]), "rb") as f:
                return hashlib.sha256(f.read()).digest()
        return None

    @classmethod
    def encoding(cls, config_path):
        c = load(config_path)
        m, kv = c["model"], c["kv"]
        q = kv.get("quant", {})
        tenant = "_single" if c.get("policy") == "single_tenant" else c["tenant"]
        out = b"kvkey.id" + struct.pack("<H", 4)
        out += cls.string(tenant) + cls.string(m["name"]) + cls.string(m["revision"])
        out += struct.pack("<Q", m.get("weights_epoch", 0))
        out += cls.optional(cls.file_fingerprint(config_path, m, "weights_fingerprint", "weights_file"), bytes)
        out += cls.optional(m.get("positional_fingerprint"), bytes.fromhex)
        out += bytes([cls.DTYPES[kv["dtype"]]])
        out += cls.string(q.get("scheme", "none")) + struct.pack("<I", q.get("group_size", 0))
        out += cls.optional(q.get("scale_dtype"), lambda d: bytes([cls.DTYPES[d]]))
        out += bytes([1 if q.get("zero_point", False) else 0])
        out += cls.optional(cls.file_fingerprint(config_path, q, "scales_fingerprint", "scales_file"), bytes)
        out += struct.pack("<IIII", kv["block_size"], kv["num_layers"], kv["num_kv_heads"], kv["head_dim"])
        out += cls.string(kv["layout"]) + bytes([1 if kv.get("mla", False) else 0])
        a = c.get("adapter")
        out += cls.optional(a, lambda a: cls.string(a["name"]) + cls.file_fingerprint(
            config_path, a, "weights_fingerprint", "weights_file"))
        return out

    @staticmethod
    def slice(config_path):
        c = load(config_path)
        kv, sh = c["kv"], c.get("shard", {})
        heads, layers = kv["num_kv_heads"], kv["num_layers"]
        tp, r = sh.get("tp_size", 1), sh.get("tp_rank", 0)
        pp, pr = sh.get("pp_size", 1), sh.get("pp_rank", 0)
        if kv.get("mla", False):
            h = (0, heads)
        elif tp <= heads:
            h = (r * heads // tp, (r + 1) * heads // tp)
        else:
            h = (r // (tp // heads), r // (tp // heads) + 1)
        return h + (pr * layers // pp, (pr + 1) * layers // pp)

    @staticmethod
    def first_parent(root, salt):
        if not salt:
            return root
        return hashlib.sha256(b"S" + root + spec.string(salt)).digest()

    @staticmethod
    def block_hashes(root, tokens, block_size, salt="", extras=()):
        extras = sorted(extras)
        parent = spec.first_parent(root, salt)
        out = []
        for b in range(len(tokens) // block_size):
            lo, hi = b * block_size, (b + 1) * block_size
            msg = b"B" + parent + b"".join(struct.pack("<I", t) for t in tokens[lo:hi])
            overlapping = [e for e in extras if e[0] < hi and e[1] > lo]
            msg += struct.pack("<I", len(overlapping))
            for begin, end, key in overlapping:
                msg += struct.pack("<QQ", begin, end) + spec.string(key)
            parent = hashlib.sha256(msg).digest()
            out.append(parent)
        return out

    @staticmethod
    def object_hash(block, slice_):
        return hashlib.sha256(b"O" + block + struct.pack("<IIII", *slice_)).digest()

    @staticmethod
    def key_prefix(config_path):
        c = load(config_path)
        tenant = "_single" if c.get("policy") == "single_tenant" else c["tenant"]
        segment = ""
        for byte in c["model"]["name"].encode():
            ch = chr(byte)
            piece = ch if (ch.isascii() and ch.isalnum()) or ch in "._-" else "%%%02X" % byte
            if len(segment) + len(piece) > 80:
                break
            segment += piece
        return "kvk4/%s/p/%s/e%d/" % (tenant, segment, c["model"].get("weights_epoch", 0))

    @staticmethod
    def envelope(encoding, slice_, block, payload_size, mode=0, digest=bytes(16)):
        """A plain namespace's envelope: integrity mode 0 (size only) or 1 (xxh3_128 digest)."""
        head = b"KVKEYENV" + struct.pack("<HHI", 4, 1024, len(encoding)) + block
        head += struct.pack("<Q", payload_size) + struct.pack("<IIII", *slice_)
        head += bytes([1, mode]) + bytes(6) + bytes(16) + digest + bytes(8) + encoding  # secret id: plain, zero
        return head + bytes(1024 - len(head))


# ---- helpers ----------------------------------------------------------------------

def field_rows(text):
    """The "  <path>  <value>" rows of the "...identity (...):" section of a printout, as a dict."""
    rows, inside = {}, False
    for line in text.splitlines():
        if not line.startswith("  "):
            inside = re.match(r"^(producer )?identity \(.*\):$", line) is not None
            continue
        m = re.match(r"^  ([a-z_.]+) +(.+)$", line)
        if inside and m:
            rows[m.group(1)] = m.group(2)
    return rows


def row(text, label):
    m = re.search(r"^  %s +(.+)$" % re.escape(label), text, re.M)
    if m is None:
        raise AssertionError("no row %r in:\n%s" % (label, text))
    return m.group(1)


def keys_json(config, *extra):
    rc, out, err = run("keys", config, "--tokens", PROBE_TOKENS, "--json", *extra)
    if rc != 0:
        raise AssertionError("kvkey keys failed: %s" % err)
    return json.loads(out)


class ToolTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="kvkey-cli-")

    def tearDown(self):
        shutil.rmtree(self.tmp)

    def tmp_path(self, name):
        return os.path.join(self.tmp, name)

    def write_config(self, name, data):
        path = self.tmp_path(name)
        with open(path, "w") as f:
            json.dump(data, f)
        return path

    def ok(self, *args, **kw):
        rc, out, err = run(*args, **kw)
        self.assertEqual(rc, 0, "kvkey %s: %s" % (" ".join(args), err))
        self.assertEqual(err, "")
        return out

    def assert_error(self, args, *patterns, stdin=None):
        """Exit status 2, nothing on stdout, one line on stderr matching every pattern."""
        rc, out, err = run(*args, stdin=stdin)
        self.assertEqual(rc, 2, "kvkey %s: expected exit 2, stderr: %s" % (" ".join(args), err))
        self.assertEqual(out, "", "partial output on stdout")
        lines = err.splitlines()
        self.assertEqual(len(lines), 1, "expected one line on stderr, got: %r" % err)
        self.assertTrue(lines[0].startswith("kvkey: error: "), lines[0])
        for p in patterns:
            self.assertRegex(lines[0], p)
        return lines[0]

    def seal(self, config, block, size=PAYLOAD, name="header.bin"):
        path = self.tmp_path(name)
        self.ok("seal", config, "--block", block, "--size", str(size), "-o", path)
        return path


# ---- subcommands -------------------------------------------------------------------

class IdentityTest(ToolTest):
    def test_every_example_prints_every_field_in_encoding_order(self):
        names = [n[:-5] for n in sorted(os.listdir(EXAMPLES)) if n.endswith(".json")]
        self.assertGreaterEqual(len(names), 10)
        for name in names:
            out = self.ok("identity", example(name))
            printed = list(field_rows(out))
            has_adapter = "adapter" in load(example(name))
            expected = [f for f in spec.FIELDS if has_adapter or not f.startswith("adapter.")]
            self.assertEqual(printed, expected, name)

    def test_field_list_is_the_librarys(self):
        # The printouts above are checked against spec.FIELDS; it must be the library's list
        # (tests/data/identity_fields.txt, checked against kvkey::identity_field_names() by the C++ tests).
        with open(os.path.join(SOURCE, "tests", "data", "identity_fields.txt")) as f:
            committed = [line.strip() for line in f if line.strip() and not line.startswith("#")]
        self.assertEqual(spec.FIELDS, committed)

    def test_encoding_and_root_follow_the_format(self):
        for name in ["qwen-fp16", "qwen-fp8", "qwen-int4", "qwen-epoch1", "tenant-b", "lora", "tp4-rank1",
                     "single-tenant"]:
            out = self.ok("identity", example(name))
            encoding = spec.encoding(example(name))
            self.assertEqual(row(out, "encoding"), "%d bytes" % len(encoding), name)
            self.assertIn("\n" + " " * 31 + encoding.hex() + "\n", out, name)
            self.assertEqual(row(out, "root"), hashlib.sha256(encoding).hexdigest(), name)
            self.assertEqual(row(out, "key prefix"), spec.key_prefix(example(name)), name)

    def test_field_values(self):
        rows = field_rows(self.ok("identity", example("qwen-int4")))
        self.assertEqual(rows["tenant"], '"team-a"')
        self.assertEqual(rows["model.revision"], '"7ae557604adf67be50417f59c2c2f167def9a775"')
        self.assertEqual(rows["kv.dtype"], "int4")
        self.assertEqual(rows["kv.quant.scheme"], '"per_token_asym"')
        self.assertEqual(rows["kv.quant.scale_dtype"], "fp16")
        self.assertEqual(rows["kv.quant.zero_point"], "true")
        self.assertEqual(rows["model.weights_fingerprint"], "none")
        self.assertEqual(rows["adapter"], "none")

    def test_slice_shard_and_prefixes(self):
        cases = {"qwen-fp16": "heads [0, 2) layers [0, 24)", "tp2-rank0": "heads [0, 1) layers [0, 24)",
                 "tp2-rank1": "heads [1, 2) layers [0, 24)", "tp4-rank1": "heads [0, 1) layers [0, 24)"}
        for name, expected in cases.items():
            out = self.ok("identity", example(name))
            self.assertEqual(row(out, "slice"), expected, name)
            s = spec.slice(example(name))
            self.assertEqual(expected, "heads [%d, %d) layers [%d, %d)" % s)
        out = self.ok("identity", example("tp4-rank1"))
        self.assertEqual(row(out, "shard"), "tp_rank 1 of tp_size 4, pp_rank 0 of pp_size 1")
        self.assertEqual(row(out, "tenant prefix"), "kvk4/team-a/")
        self.assertEqual(row(self.ok("identity", example("qwen-epoch1")), "key prefix"),
                         "kvk4/team-a/p/Qwen2.5-0.5B-Instruct/e1/")

    def test_single_tenant_policy(self):
        out = self.ok("identity", example("single-tenant"))
        self.assertEqual(row(out, "policy"), "single_tenant")
        self.assertEqual(field_rows(out)["tenant"], '"_single"')
        self.assertEqual(field_rows(out)["model.weights_fingerprint"],
                         load(example("single-tenant"))["model"]["weights_fingerprint"])
        self.assertEqual(field_rows(out)["kv.dtype"], "bf16")
        self.assertEqual(row(out, "tenant prefix"), "kvk4/_single/")

    def test_weights_file_is_fingerprinted_relative_to_the_config(self):
        with open(os.path.join(EXAMPLES, "adapter-weights.txt"), "rb") as f:
            expected = hashlib.sha256(f.read()).hexdigest()
        # From another working directory: the path is resolved against the config file's directory.
        out = self.ok("identity", os.path.abspath(example("lora")), cwd=self.tmp)
        self.assertEqual(field_rows(out)["adapter.weights_fingerprint"], expected)
        self.assertEqual(field_rows(out)["adapter.name"], '"base"')
        self.assertRegex(out, r"fingerprinted files.*\n  adapter.weights_fingerprint +\S*adapter-weights.txt\n")
        # Another file under the same adapter name: another identity.
        with open(self.tmp_path("adapter-weights.txt"), "wb") as f:
            f.write(b"adapter weights, version 2")
        moved = self.write_config("lora.json", load(example("lora")))
        self.assertNotEqual(row(self.ok("identity", moved), "root"), row(out, "root"))

    def test_toml_is_the_same_identity(self):
        toml_out = self.ok("identity", os.path.join(EXAMPLES, "qwen-fp16.toml"))
        json_out = self.ok("identity", example("qwen-fp16"))
        self.assertEqual(toml_out.split("\n", 1)[1], json_out.split("\n", 1)[1])
        rc, out, err = run("diff", os.path.join(EXAMPLES, "qwen-fp16.toml"), example("qwen-fp16"))
        self.assertEqual((rc, err), (0, ""))
        self.assertIn("verdict: share:", out)

    def test_config_from_stdin(self):
        with open(example("qwen-fp8"), "rb") as f:
            out = self.ok("identity", "-", stdin=f.read())
        self.assertTrue(out.startswith("config: stdin\n"))
        self.assertEqual(row(out, "root"), row(self.ok("identity", example("qwen-fp8")), "root"))


class KeysTest(ToolTest):
    CONFIGS = ["qwen-fp16", "qwen-fp8", "qwen-int4", "qwen-epoch1", "tenant-b", "lora", "tp2-rank1", "tp4-rank1",
               "single-tenant"]

    def check_against_spec(self, name, j, tokens, salt="", extras=()):
        root = hashlib.sha256(spec.encoding(example(name))).digest()
        self.assertEqual(j["root"], root.hex(), name)
        self.assertEqual(j["first_parent"], spec.first_parent(root, salt).hex(), name)
        slice_ = spec.slice(example(name))
        self.assertEqual(tuple(j["slice"][k] for k in ("kv_head_begin", "kv_head_end", "layer_begin", "layer_end")),
                         slice_)
        hashes = spec.block_hashes(root, tokens, 64, salt, extras)
        self.assertEqual(len(j["blocks"]), len(hashes), name)
        for i, (b, h) in enumerate(zip(j["blocks"], hashes)):
            self.assertEqual((b["index"], b["token_begin"], b["token_end"]), (i, 64 * i, 64 * (i + 1)))
            self.assertEqual(b["block_hash"], h.hex(), "%s block %d" % (name, i))
            obj = spec.object_hash(h, slice_).hex()
            self.assertEqual(b["object_hash"], obj)
            self.assertEqual(b["store_key"], spec.key_prefix(example(name)) + obj)

    def test_keys_follow_the_format(self):
        tokens = probe_tokens()
        self.assertEqual(len(tokens), 384)
        for name in self.CONFIGS:
            j = keys_json(example(name))
            self.assertEqual((j["block_size"], j["token_count"]), (64, 384))
            self.assertEqual(j["key_prefix"], spec.key_prefix(example(name)))
            self.check_against_spec(name, j, tokens)

    def test_salt_changes_every_block(self):
        plain = keys_json(example("qwen-fp16"))
        salted = keys_json(example("qwen-fp16"), "--salt", "user-42")
        self.assertEqual(salted["salt"], "user-42")
        self.check_against_spec("qwen-fp16", salted, probe_tokens(), salt="user-42")
        for a, b in zip(plain["blocks"], salted["blocks"]):
            self.assertNotEqual(a["block_hash"], b["block_hash"])

    def test_extras_enter_the_blocks_they_overlap(self):
        plain = keys_json(example("qwen-fp16"))
        j = keys_json(example("qwen-fp16"), "--extra", "70:80:image-sha", "--extra", "0:10:a:b")
        self.assertEqual([(e["token_begin"], e["token_end"], e["key"]) for e in j["extras"]],
                         [(70, 80, "image-sha"), (0, 10, "a:b")])
        self.check_against_spec("qwen-fp16", j, probe_tokens(), extras=[(70, 80, "image-sha"), (0, 10, "a:b")])
        only_block1 = keys_json(example("qwen-fp16"), "--extra", "70:80:image-sha")
        self.assertEqual(only_block1["blocks"][0], plain["blocks"][0])
        self.assertNotEqual(only_block1["blocks"][1], plain["blocks"][1])

    def test_token_file_formats_agree(self):
        tokens = probe_tokens()[:130]  # two full blocks and a 2-token tail
        files = {"spaces.txt": " ".join(map(str, tokens)) + "\n",
                 "lines.txt": "\n".join(map(str, tokens)),
                 "commas.txt": ",".join(map(str, tokens)) + ",\n",
                 "mixed.txt": ", ".join(map(str, tokens[:60])) + "\n" + "\t".join(map(str, tokens[60:])),
                 "array.json": json.dumps(tokens)}
        outputs = []
        for name, text in files.items():
            with open(self.tmp_path(name), "w") as f:
                f.write(text)
            j = json.loads(self.ok("keys", example("qwen-fp16"), "--tokens", self.tmp_path(name), "--json"))
            del j["config"]
            outputs.append(j)
        j = json.loads(self.ok("keys", example("qwen-fp16"), "--tokens", "-", "--json",
                               stdin=json.dumps(tokens).encode()))
        del j["config"]
        outputs.append(j)
        for o in outputs[1:]:
            self.assertEqual(o, outputs[0])
        self.assertEqual((outputs[0]["token_count"], len(outputs[0]["blocks"])), (130, 2))
        self.check_against_spec("qwen-fp16", outputs[0], tokens)

    def test_text_output_matches_json(self):
        j = keys_json(example("lora"))
        out = self.ok("keys", example("lora"), "--tokens", PROBE_TOKENS)
        self.assertEqual(row(out, "root"), j["root"])
        self.assertEqual(row(out, "salt"), "none")
        self.assertEqual(row(out, "tokens"), "384 (6 full blocks of 64; 0 trailing tokens not hashed)")
        self.assertEqual(re.findall(r"^  block hash +(\S+)$", out, re.M), [b["block_hash"] for b in j["blocks"]])
        self.assertEqual(re.findall(r"^  store key +(\S+)$", out, re.M), [b["store_key"] for b in j["blocks"]])

    def test_content_addressing_across_shards(self):
        # Same identity: same block hashes. Same slice (tp2 rank 0, tp4 rank 1): same store keys.
        tp2r0, tp4r1, tp2r1 = (keys_json(example(n)) for n in ("tp2-rank0", "tp4-rank1", "tp2-rank1"))
        self.assertEqual([b["block_hash"] for b in tp2r0["blocks"]], [b["block_hash"] for b in tp2r1["blocks"]])
        self.assertEqual(tp2r0["blocks"], tp4r1["blocks"])
        for a, b in zip(tp2r0["blocks"], tp2r1["blocks"]):
            self.assertNotEqual(a["store_key"], b["store_key"])

    def test_dtype_alone_changes_every_key(self):
        fp16, fp8 = keys_json(example("qwen-fp16")), keys_json(example("qwen-fp8"))
        for a, b in zip(fp16["blocks"], fp8["blocks"]):
            self.assertNotEqual(a["block_hash"], b["block_hash"])
            self.assertNotEqual(a["store_key"], b["store_key"])
        rc, out, _ = run("diff", example("qwen-fp16"), example("qwen-fp8"))
        self.assertEqual(re.findall(r"^  ([a-z_.]+) +A: ", out, re.M), ["kv.dtype"])


class SeedProbeTest(ToolTest):
    """The tool agrees with examples/seed_probe (library code, another program)."""

    LABELS = {"fp16": "qwen-fp16", "fp8_e4m3": "qwen-fp8", "int4": "qwen-int4", "epoch 1": "qwen-epoch1",
              "team-b": "tenant-b", "base (weights v1)": "lora"}

    def test_block_2_keys_match_seed_probe(self):
        p = subprocess.run([SEED_PROBE], capture_output=True, text=True)
        self.assertEqual(p.returncode, 0, p.stdout)
        printed = dict(re.findall(r"^  (.+?) +(kvk4/\S+)$", p.stdout, re.M))
        for label, name in self.LABELS.items():
            self.assertEqual(keys_json(example(name))["blocks"][2]["store_key"], printed[label], label)


class SealTest(ToolTest):
    def test_envelope_bytes_follow_the_format(self):
        for name in ["qwen-fp16", "lora", "tp4-rank1", "single-tenant"]:
            block = keys_json(example(name))["blocks"][2]
            rc, out, err = run("seal", example(name), "--block", block["block_hash"], "--size", str(PAYLOAD),
                               "-o", self.tmp_path("h.bin"))
            self.assertEqual((rc, err), (0, ""))
            with open(self.tmp_path("h.bin"), "rb") as f:
                header = f.read()
            expected = spec.envelope(spec.encoding(example(name)), spec.slice(example(name)),
                                     bytes.fromhex(block["block_hash"]), PAYLOAD)
            self.assertEqual(header, expected, name)
            self.assertEqual(row(out, "store key"), block["store_key"])
            self.assertEqual(row(out, "payload size"), str(PAYLOAD))

    def test_largest_payload_size(self):
        path = self.seal(example("qwen-fp16"), "ab" * 32, size=2**64 - 1)
        with open(path, "rb") as f:
            self.assertEqual(struct.unpack_from("<Q", f.read(), 48)[0], 2**64 - 1)

    def test_bad_arguments_write_nothing(self):
        out = self.tmp_path("never.bin")
        self.assert_error(["seal", example("qwen-fp16"), "--block", "ab" * 31, "--size", "1", "-o", out],
                          r"--block: hex digest must be 64 hex characters, got 62")
        self.assert_error(["seal", example("qwen-fp16"), "--block", "zz" * 32, "--size", "1", "-o", out],
                          r"--block: hex digest has a non-hex character at position 0")
        for size in ["-1", "18446744073709551616", "1e3", ""]:
            self.assert_error(["seal", example("qwen-fp16"), "--block", "ab" * 32, "--size", size, "-o", out],
                              r"--size: expected an integer in \[0, 2\^64\)")
        self.assert_error(["seal", os.path.join(DATA, "unknown-dtype.json"), "--block", "ab" * 32, "--size", "1",
                           "-o", out], r"kv\.dtype")
        self.assertFalse(os.path.exists(out))
        self.assert_error(["seal", example("qwen-fp16"), "--block", "ab" * 32, "--size", "1",
                           "-o", os.path.join(self.tmp, "no-such-dir", "h.bin")],
                          r"cannot write \S*no-such-dir/h\.bin: No such file or directory")


class InspectTest(ToolTest):
    def test_inspect_shows_the_producer(self):
        for name in ["qwen-fp16", "qwen-int4", "lora", "tp4-rank1", "single-tenant"]:
            block = keys_json(example(name))["blocks"][3]
            header = self.seal(example(name), block["block_hash"])
            out = self.ok("inspect", header)
            ident = self.ok("identity", example(name))
            self.assertEqual(field_rows(out), field_rows(ident), name)
            self.assertEqual(row(out, "slice"), row(ident, "slice"))
            self.assertEqual(row(out, "block hash"), block["block_hash"])
            self.assertEqual(row(out, "payload size"), "%d bytes" % PAYLOAD)
            self.assertEqual(row(out, "root"), row(ident, "root"), name)
            self.assertEqual(row(out, "store key"), block["store_key"], name)
            self.assertTrue(out.startswith("header: %s (1024-byte kvkey envelope, format version 4)\n" % header))
            self.assertEqual((row(out, "namespace"), row(out, "integrity")), ("plain", "none"))

    def test_escapes_strings(self):
        cfg = load(example("qwen-fp16"))
        cfg["model"]["name"] = "Qwen \"2.5\"\\ 0.5B"
        header = self.seal(self.write_config("quoted.json", cfg), "00" * 32)
        self.assertEqual(field_rows(self.ok("inspect", header))["model.name"], r'"Qwen \"2.5\"\\ 0.5B"')

    def test_non_envelopes_are_errors(self):
        self.assert_error(["inspect", os.path.join(DATA, "not-envelope.bin")],
                          r"not-envelope\.bin: not a kvkey envelope: it is 30 bytes, an envelope is exactly 1024")
        with open(self.seal(example("qwen-fp16"), "00" * 32), "rb") as f:
            good = f.read()
        cases = {"zeros.bin": (bytes(1024), r"it does not start with the envelope magic"),
                 "version.bin": (good[:8] + b"\x01" + good[9:], r"format version 1, this tool reads version 4"),
                 "padding.bin": (good[:1023] + b"\x01", r"a reserved byte or a byte after the identity encoding is not zero"),
                 "identity.bin": (good[:120] + b"X" + good[121:], r"its identity encoding is malformed"),
                 "secret.bin": (good[:112] + b"X" + good[113:], r"its secret_id field is malformed"),
                 "kind.bin": (good[:72] + b"\x07" + good[73:], r"its namespace_kind field is malformed"),
                 "size.bin": (good[:10] + b"\x00\x08" + good[12:], r"its size field is not 1024"),
                 "long.bin": (bytes(1025), r"it is 1025 bytes, an envelope is exactly 1024")}
        for name, (data, pattern) in cases.items():
            with open(self.tmp_path(name), "wb") as f:
                f.write(data)
            self.assert_error(["inspect", self.tmp_path(name)], re.escape(name) + ": not a kvkey envelope: " + pattern)
        self.assert_error(["inspect", self.tmp_path("missing.bin")],
                          r"cannot open \S*missing\.bin: No such file or directory")


class InspectValueTest(ToolTest):
    """inspect of a whole stored value as `redis-cli --raw GET` writes it (a trailing newline),
    and with a reader's identity and key: whether it verifies, and on which field."""

    def setUp(self):
        super().setUp()
        self.config = example("qwen-fp16")
        self.blocks = keys_json(self.config)["blocks"]
        self.payload = os.urandom(PAYLOAD - 1) + b"\n"  # a payload that ends with a newline itself
        with open(self.tmp_path("kv.bin"), "wb") as f:
            f.write(self.payload)
        header = self.tmp_path("h.bin")
        self.ok("seal", self.config, "--block", self.blocks[3]["block_hash"], "--payload", self.tmp_path("kv.bin"),
                "-o", header)
        with open(header, "rb") as f:
            self.header = f.read()
        self.key = self.blocks[3]["store_key"]

    def write(self, name, data):
        with open(self.tmp_path(name), "wb") as f:
            f.write(data)
        return self.tmp_path(name)

    def check(self, path, *extra):
        rc, out, err = run("inspect", path, "--identity", self.config, "--key", self.key, *extra)
        self.assertEqual(err, "")
        return rc, out

    def test_a_whole_value_with_or_without_a_trailing_newline(self):
        for newline in (b"", b"\n"):
            path = self.write("value.bin", self.header + self.payload + newline)
            out = self.ok("inspect", path)
            self.assertRegex(out.splitlines()[0], r"^value: \S+value\.bin \(1024-byte kvkey envelope, format version "
                             r"\d+, then %d payload bytes%s\)$" %
                             (PAYLOAD, "; one trailing newline ignored" if newline else ""))
            self.assertEqual(row(out, "store key"), self.key)
            rc, out = self.check(path)
            self.assertEqual((rc, row(out, "verdict")), (0, "ok"))
            self.assertEqual(row(out, "given key"), "the reader's key for the header's block")
            self.assertIn("\nverifies: identity, slice, block hash, payload size and the payload's digest\n", out)

    def test_a_header_with_a_trailing_newline(self):
        """`redis-cli --raw GETRANGE key 0 1023 > h` writes 1,025 bytes."""
        path = self.write("h.nl", self.header + b"\n")
        self.assertRegex(self.ok("inspect", path).splitlines()[0],
                         r"^header: \S+h\.nl \(1024-byte kvkey envelope, format version \d+; one trailing newline "
                         r"ignored\)$")
        rc, out = self.check(path)
        self.assertEqual(rc, 0)
        self.assertIn("(header only: the payload was not checked)", out)
        self.assertEqual(self.ok("inspect", "-", stdin=self.header + b"\n"), self.ok("inspect", path).replace(
            path, "stdin"))

    def test_says_on_which_field_a_value_fails(self):
        value = self.header + self.payload
        bf16 = load(self.config)
        bf16["kv"]["dtype"] = "bf16"
        rc, out, _ = run("inspect", self.write("v.bin", value), "--identity", self.write_config("bf16.json", bf16))
        self.assertEqual((rc, row(out, "verdict")), (1, "identity_mismatch (kv.dtype)"))
        self.assertEqual((row(out, "header has"), row(out, "reader has")), ("fp16", "bf16"))
        self.assertIn("\ndoes not verify, on field kv.dtype: the reader treats it as a miss\n", out)

        flipped = bytearray(value)
        flipped[2000] ^= 0x01
        rc, out = self.check(self.write("flipped.bin", bytes(flipped)))
        self.assertEqual((rc, row(out, "verdict")), (1, "payload_mismatch (payload)"))
        self.assertIn("on field payload:", out)

        rc, out = self.check(self.write("torn.bin", value[:-100]))
        self.assertIn("then %d payload bytes (the header says %d: a torn or padded value)" % (PAYLOAD - 100, PAYLOAD),
                      out.splitlines()[0])
        self.assertEqual((rc, row(out, "verdict")), (1, "size_mismatch (payload_size)"))

        rc, out, _ = run("inspect", self.write("v.bin", value), "--identity", self.config, "--key",
                         self.blocks[4]["store_key"])
        self.assertEqual((rc, row(out, "verdict")), (1, "ok"))
        self.assertEqual(row(out, "given key"), "not the reader's key for the header's block: " + self.key)
        self.assertIn("does not verify, on field store_key:", out)

        self.assert_error(["inspect", self.write("v.bin", value), "--key", self.key], r"--key: needs --identity")


class PayloadTest(ToolTest):
    """seal --payload / verify --payload / inspect against tests/vectors/format-v4.json."""

    def vectors(self):
        return load(os.path.join(SOURCE, "tests", "vectors", "format-v4.json"))

    def config_of(self, case):
        """The tool's identity config for a vectors case (dotted field paths -> sections)."""
        ident = case["identity"]
        c = {"model": {}, "kv": {"quant": {}}, "shard": case["shard"]}
        if case["tenant_policy"] == "single_tenant":
            c["policy"] = "single_tenant"
        else:
            c["tenant"] = ident["tenant"]
        for path, value in ident.items():
            parts = path.split(".")
            if path == "tenant" or value is None:
                continue
            if path == "adapter":
                c["adapter"] = value
            elif len(parts) == 3:
                c["kv"]["quant"][parts[2]] = value
            else:
                c[parts[0]][parts[1]] = value
        return self.write_config(case["name"] + ".json", c)

    def test_seal_and_inspect_reproduce_the_vectors(self):
        for case in self.vectors()["cases"]:
            config = self.config_of(case)
            payload = bytes((j + 31 * 1) % 251 for j in range(case["payload_size"]))  # block 1
            with open(self.tmp_path("kv.bin"), "wb") as f:
                f.write(payload)
            header = self.tmp_path("h.bin")
            self.ok("seal", config, "--block", case["blocks"][1], "--payload", self.tmp_path("kv.bin"), "-o", header)
            with open(header, "rb") as f:
                self.assertEqual(f.read().hex(), case["envelopes"][1], case["name"])
            out = self.ok("inspect", header)
            self.assertEqual(row(out, "integrity"), "xxh3_128")
            self.assertEqual(row(out, "payload digest"), case["payload_digests"][1])
            self.assertEqual(row(out, "payload size"), "%d bytes" % case["payload_size"])
            rc, out, err = run("verify", config, header, "--block", case["blocks"][1], "--payload",
                               self.tmp_path("kv.bin"))
            self.assertEqual((rc, err, out.splitlines()[0]), (0, "", "verdict: ok"), case["name"])
            damaged = bytearray(payload)
            damaged[len(damaged) // 2] ^= 0x40
            with open(self.tmp_path("bad.bin"), "wb") as f:
                f.write(damaged)
            rc, out, _ = run("verify", config, header, "--block", case["blocks"][1], "--payload", self.tmp_path("bad.bin"))
            self.assertEqual((rc, out.splitlines()[0]), (1, "verdict: payload_mismatch (payload)"), case["name"])
            self.assertEqual(row(out, "header has"), "xxh3_128 " + case["payload_digests"][1])

    def test_keyed_headers_show_their_tag(self):
        keyed = self.vectors()["keyed"]
        with open(self.tmp_path("k.bin"), "wb") as f:
            f.write(bytes.fromhex(keyed["envelopes"][0]))
        out = self.ok("inspect", self.tmp_path("k.bin"))
        self.assertEqual((row(out, "namespace"), row(out, "integrity")), ("keyed", "poly1305"))
        self.assertEqual(row(out, "nonce"), keyed["envelopes"][0][160:192])
        self.assertEqual(row(out, "payload tag"), keyed["envelopes"][0][192:224])
        self.assertEqual(row(out, "secret id"), keyed["secret_id"])
        self.assertEqual(keyed["envelopes"][0][224:240], keyed["secret_id"])

    def test_keyed_headers_verify_with_the_secret(self):
        keyed = self.vectors()["keyed"]
        case = next(c for c in self.vectors()["cases"] if c["name"] == keyed["case"])
        config = self.config_of(case)
        secret = self.tmp_path("tenant.secret")
        with open(secret, "w") as f:
            f.write(keyed["secret_hex"] + "\n")
        os.chmod(secret, 0o600)
        rotated = self.tmp_path("rotated.secret")
        with open(rotated, "w") as f:
            f.write(keyed["rotated"]["secret_hex"] + "\n")
        os.chmod(rotated, 0o600)
        header = self.tmp_path("k.bin")
        with open(header, "wb") as f:
            f.write(bytes.fromhex(keyed["envelopes"][1]))
        payload = bytes((j + 31 * 1) % 251 for j in range(case["payload_size"]))  # block 1
        with open(self.tmp_path("kv.bin"), "wb") as f:
            f.write(payload)
        block = keyed["blocks"][1]

        rc, out, err = run("verify", config, header, "--block", block, "--payload", self.tmp_path("kv.bin"),
                           "--secret-file", secret)
        self.assertEqual((rc, err, out.splitlines()[0]), (0, "", "verdict: ok"), out)
        # Size only: a keyed reader's check of everything but the tag, never a namespace_kind or
        # payload mismatch for a valid header; another size is still refused.
        rc, out, _ = run("verify", config, header, "--block", block, "--size", str(case["payload_size"]),
                         "--secret-file", secret)
        self.assertEqual((rc, out.splitlines()[0]), (0, "verdict: ok"), out)
        self.assertIn("size only: the payload bytes were not checked", out)
        rc, out, _ = run("verify", config, header, "--block", block, "--size", str(case["payload_size"] + 1),
                         "--secret-file", secret)
        self.assertEqual((rc, out.splitlines()[0]), (1, "verdict: size_mismatch (payload_size)"), out)
        rc, out, _ = run("inspect", header, "--identity", config, "--secret-file", secret, "--key", keyed["keys"][1])
        self.assertEqual((rc, row(out, "verdict")), (0, "ok"), out)
        self.assertIn("header only: the payload was not checked", out)
        rc, out, _ = run("verify", config, header, "--block", block, "--size", str(case["payload_size"]),
                         "--secret-file", rotated)
        self.assertEqual(rc, 1, out)
        # Without the secret the header cannot be checked: an error naming the option, not a rejection.
        self.assert_error(["verify", config, header, "--block", block, "--payload", self.tmp_path("kv.bin")],
                          r"keyed namespace \(secret id %s\)" % keyed["secret_id"], r"--secret-file")
        # Another secret (a rotated one) is another namespace: rejected, never accepted.
        rc, out, _ = run("verify", config, header, "--block", block, "--payload", self.tmp_path("kv.bin"),
                         "--secret-file", rotated)
        self.assertEqual(rc, 1, out)
        self.assertNotIn("accepted", out)
        damaged = bytearray(payload)
        damaged[7] ^= 0x01
        with open(self.tmp_path("bad.bin"), "wb") as f:
            f.write(damaged)
        rc, out, _ = run("verify", config, header, "--block", block, "--payload", self.tmp_path("bad.bin"),
                         "--secret-file", secret)
        self.assertEqual((rc, out.splitlines()[0]), (1, "verdict: payload_mismatch (payload)"))

        value = self.tmp_path("value.bin")
        with open(value, "wb") as f:
            f.write(bytes.fromhex(keyed["envelopes"][1]) + payload)
        rc, out, err = run("inspect", value, "--identity", config, "--secret-file", secret, "--key", keyed["keys"][1])
        self.assertEqual((rc, err), (0, ""), out)
        self.assertEqual(row(out, "verdict"), "ok")
        self.assertEqual(row(out, "given key"), "the reader's key for the header's block")
        self.assertIn("verifies: identity, slice, block hash, payload size and the payload's digest", out)
        self.assert_error(["inspect", value, "--identity", config], r"inspect: .* keyed namespace", r"--secret-file")
        self.assert_error(["inspect", value, "--secret-file", secret], r"--secret-file: needs --identity")
        rc, out, _ = run("inspect", value, "--identity", config, "--secret-file", rotated)
        self.assertEqual(rc, 1, out)
        self.assertIn("does not verify", out)


class VerifyTest(ToolTest):
    def setUp(self):
        super().setUp()
        self.block = keys_json(example("qwen-fp16"))["blocks"][2]["block_hash"]
        self.header = self.seal(example("qwen-fp16"), self.block)

    def verify(self, config, header=None, block=None, size=PAYLOAD):
        return run("verify", config, header or self.header, "--block", block or self.block, "--size", str(size))

    def test_own_header_is_accepted(self):
        rc, out, err = self.verify(example("qwen-fp16"))
        self.assertEqual((rc, err), (0, ""))
        self.assertTrue(out.startswith("verdict: ok\naccepted"))
        # A deployment holding the same slice under another shard layout reads it too.
        header = self.seal(example("tp2-rank0"), self.block, name="tp2.bin")
        self.assertEqual(self.verify(example("tp4-rank1"), header=header)[0], 0)

    def test_identity_mismatch_names_the_field(self):
        cases = {"qwen-fp8": ("kv.dtype", "fp16", "fp8_e4m3"),
                 "qwen-int4": ("kv.dtype", "fp16", "int4"),
                 "qwen-epoch1": ("model.weights_epoch", "0", "1"),
                 "tenant-b": ("tenant", '"team-a"', '"team-b"'),
                 "lora": ("adapter", "none", "present"),
                 "single-tenant": ("tenant", '"team-a"', '"_single"')}
        for name, (field, theirs, ours) in cases.items():
            rc, out, err = self.verify(example(name))
            self.assertEqual((rc, err), (1, ""), name)
            self.assertEqual(out.splitlines()[0], "verdict: identity_mismatch (%s)" % field, name)
            self.assertEqual(row(out, "header has"), theirs, name)
            self.assertEqual(row(out, "reader has"), ours, name)
            self.assertTrue(out.endswith("rejected: the object must be treated as a miss\n"))

    def test_other_rejections(self):
        rc, out, _ = self.verify(example("tp2-rank1"))
        self.assertEqual((rc, out.splitlines()[0]), (1, "verdict: identity_mismatch (shard)"))
        self.assertEqual(row(out, "header slice"), "heads [0, 2) layers [0, 24)")
        self.assertEqual(row(out, "reader slice"), "heads [1, 2) layers [0, 24)")
        other = keys_json(example("qwen-fp16"))["blocks"][3]["block_hash"]
        rc, out, _ = self.verify(example("qwen-fp16"), block=other)
        self.assertEqual((rc, out.splitlines()[0]), (1, "verdict: block_mismatch (block_hash)"))
        self.assertEqual(row(out, "reader block"), other)
        rc, out, _ = self.verify(example("qwen-fp16"), size=PAYLOAD - 1)
        self.assertEqual((rc, out.splitlines()[0]), (1, "verdict: size_mismatch (payload_size)"))
        self.assertEqual(row(out, "reader size"), str(PAYLOAD - 1))
        # A non-envelope is a miss for a reader: a verdict, not an input error.
        rc, out, _ = self.verify(example("qwen-fp16"), header=os.path.join(DATA, "not-envelope.bin"))
        self.assertEqual((rc, out.splitlines()[0]), (1, "verdict: malformed (envelope.size)"))
        with open(self.tmp_path("zeros.bin"), "wb") as f:
            f.write(bytes(1024))
        rc, out, _ = self.verify(example("qwen-fp16"), header=self.tmp_path("zeros.bin"))
        self.assertEqual((rc, out.splitlines()[0]), (1, "verdict: malformed (envelope.magic)"))

    def test_input_errors(self):
        self.assert_error(["verify", example("qwen-fp16"), self.tmp_path("none.bin"), "--block", self.block,
                           "--size", "1"], r"cannot open \S*none\.bin")
        self.assert_error(["verify", example("qwen-fp16"), self.header, "--block", "xyz", "--size", "1"],
                          r"--block: hex digest must be 64 hex characters, got 3")
        self.assert_error(["verify", example("qwen-fp16"), self.header, "--block", self.block],
                          r"verify: give --payload FILE \(or --size N\)")
        self.assert_error(["verify", os.path.join(DATA, "bad-geometry.json"), self.header, "--block", self.block,
                           "--size", "1"], r"bad-geometry\.json: shard\.tp_size: ")


class DiffTest(ToolTest):
    def diff(self, a, b):
        rc, out, err = run("diff", a, b)
        self.assertEqual(err, "")
        return rc, out, re.findall(r"^  ([a-z_.]+) +A: ", out, re.M)

    def test_examples(self):
        cases = [("qwen-fp16", "qwen-fp8", 1, ["kv.dtype"], "no sharing"),
                 ("qwen-fp16", "qwen-int4", 1,
                  ["kv.dtype", "kv.quant.scheme", "kv.quant.scale_dtype", "kv.quant.zero_point"], "no sharing"),
                 ("qwen-fp16", "qwen-epoch1", 1, ["model.weights_epoch"], "no sharing"),
                 ("qwen-fp16", "tenant-b", 1, ["tenant"], "no sharing"),
                 ("qwen-fp16", "lora", 1, ["adapter", "adapter.name", "adapter.weights_fingerprint"], "no sharing"),
                 ("lora", "qwen-fp16", 1, ["adapter", "adapter.name", "adapter.weights_fingerprint"], "no sharing"),
                 ("qwen-fp16", "qwen-fp16", 0, [], "share"),
                 ("tp2-rank0", "tp4-rank1", 0, [], "share"),
                 ("qwen-fp16", "tp2-rank1", 1, [], "same block hashes, different objects")]
        for a, b, status, fields, verdict in cases:
            rc, out, differing = self.diff(example(a), example(b))
            self.assertEqual((rc, differing), (status, fields), (a, b))
            self.assertIn("differing salient fields: %d\n" % len(fields), out)
            self.assertRegex(out, r"\nverdict: %s[:,]" % verdict)
        _, out, _ = self.diff(example("qwen-fp16"), example("tp2-rank1"))
        self.assertIn("slice: different\n  A: heads [0, 2) layers [0, 24)\n  B: heads [1, 2) layers [0, 24)\n", out)
        _, out, _ = self.diff(example("qwen-fp16"), example("lora"))
        self.assertIn("  adapter.name                 A: (absent)\n" + " " * 31 + "B: \"base\"\n", out)
        _, out, _ = self.diff(example("qwen-fp16"), example("qwen-epoch1"))
        self.assertIn("key prefix: different\n  A: kvk4/team-a/p/Qwen2.5-0.5B-Instruct/e0/\n", out)

    def test_each_salient_field_is_named(self):
        # Base with quantization so that every quant field may change.
        base = load(example("qwen-int4"))
        base["adapter"] = {"name": "sql", "weights_fingerprint": "11" * 32}
        base_path = self.write_config("base.json", base)
        changes = {
            "tenant": lambda c: c.update(tenant="team-z"),
            "model.name": lambda c: c["model"].update(name="Qwen/Qwen2.5-0.5B-Instruct"),
            "model.revision": lambda c: c["model"].update(revision="main"),
            "model.weights_epoch": lambda c: c["model"].update(weights_epoch=7),
            "model.weights_fingerprint": lambda c: c["model"].update(weights_fingerprint="22" * 32),
            "model.positional_fingerprint": lambda c: c["model"].update(positional_fingerprint="55" * 32),
            "kv.dtype": lambda c: c["kv"].update(dtype="uint4"),
            "kv.quant.scheme": lambda c: c["kv"]["quant"].update(scheme="per_group"),
            "kv.quant.group_size": lambda c: c["kv"]["quant"].update(group_size=32),
            "kv.quant.scale_dtype": lambda c: c["kv"]["quant"].update(scale_dtype="bf16"),
            "kv.quant.zero_point": lambda c: c["kv"]["quant"].update(zero_point=False),
            "kv.quant.scales_fingerprint": lambda c: c["kv"]["quant"].update(scales_fingerprint="33" * 32),
            "kv.block_size": lambda c: c["kv"].update(block_size=32),
            "kv.num_layers": lambda c: c["kv"].update(num_layers=48),
            "kv.num_kv_heads": lambda c: c["kv"].update(num_kv_heads=4),
            "kv.head_dim": lambda c: c["kv"].update(head_dim=128),
            "kv.layout": lambda c: c["kv"].update(layout="lmdeploy.mooncake.v2"),
            "kv.mla": lambda c: c["kv"].update(mla=True),
            "adapter.name": lambda c: c["adapter"].update(name="sql2"),
            "adapter.weights_fingerprint": lambda c: c["adapter"].update(weights_fingerprint="44" * 32),
        }
        self.assertEqual(sorted(changes), sorted(f for f in spec.FIELDS if f != "adapter"))
        for field, change in changes.items():
            cfg = json.loads(json.dumps(base))
            change(cfg)
            rc, out, differing = self.diff(base_path, self.write_config("changed.json", cfg))
            self.assertEqual((rc, differing), (1, [field]), field)
        # Shard changes alone are not identity changes.
        cfg = json.loads(json.dumps(base))
        cfg["shard"] = {"pp_size": 2, "pp_rank": 1}
        rc, out, differing = self.diff(base_path, self.write_config("pp.json", cfg))
        self.assertEqual((rc, differing), (1, []))
        self.assertIn("B: heads [0, 2) layers [12, 24)", out)

    def test_errors_name_the_file(self):
        self.assert_error(["diff", example("qwen-fp16"), os.path.join(DATA, "unknown-key.json")],
                          r"unknown-key\.json: kv\.blocksize: unknown key")
        self.assert_error(["diff", example("qwen-fp16")], r"diff: CONFIG_B is required")


class LegacyTest(ToolTest):
    """`kvkey legacy`: lmdeploy's Mooncake store keys (docs/integration/lmdeploy.md)."""

    MODEL = "Qwen2.5-0.5B-Instruct"
    ISSUE_4930 = os.path.join(EXAMPLES, "prompts", "issue4930.txt")

    @staticmethod
    def legacy_hashes(tokens, block_size, extra):
        out, parent = [], b""
        for b in range(len(tokens) // block_size):
            msg = b"lmdeploy-mooncake-prefix-block-v1\x00" + parent + struct.pack(">I", block_size)
            msg += b"".join(struct.pack(">Q", t) for t in tokens[b * block_size:(b + 1) * block_size])
            msg += struct.pack(">I", len(extra.encode())) + extra.encode()
            parent = hashlib.sha256(msg).digest()
            out.append(parent.hex())
        return out

    def legacy_json(self, *args):
        return json.loads(self.ok("legacy", "keys", "--model-name", self.MODEL, "--json", *args))

    def test_reproduces_the_published_key(self):
        # Source: lmdeploy issue #4930, expected output of its probe (block 2, adapter "base", block size 64),
        # produced by lmdeploy's own build_prefix_block_hashes / build_store_key.
        j = self.legacy_json("--block-size", "64", "--tokens", self.ISSUE_4930, "--adapter", "base")
        self.assertEqual(j["blocks"][2]["block_hash"],
                         "e94120f79296e8af266366a8ac6dcc18b8d8171f87e6f405f6a6f4e22324fe8e")
        self.assertEqual(j["blocks"][2]["keys"], [
            "Qwen2.5-0.5B-Instruct@tp_rank:0@group:0@e94120f79296e8af266366a8ac6dcc18b8d8171f87e6f405f6a6f4e22324fe8e"])

    def test_keys_follow_the_legacy_scheme(self):
        tokens = probe_tokens()
        for adapter in ["", "base"]:
            j = self.legacy_json("--block-size", "64", "--tokens", PROBE_TOKENS, "--adapter", adapter,
                                 "--cache-prefix", "team-a", "--tp-size", "4", "--num-kv-heads", "2")
            self.assertEqual((j["keys_per_block"], j["extra_identity"]), (2, adapter))
            hashes = self.legacy_hashes(tokens, 64, adapter)
            self.assertEqual([b["block_hash"] for b in j["blocks"]], hashes)
            for b, h in zip(j["blocks"], hashes):
                self.assertEqual(b["keys"], ["team-a@%s@tp_rank:%d@group:0@%s" % (self.MODEL, k, h) for k in (0, 1)])
        # TP 2 over 2 heads: one head each, 2 keys; TP 1: one key.
        self.assertEqual(self.legacy_json("--block-size", "64", "--tokens", PROBE_TOKENS, "--tp-size", "2",
                                          "--num-kv-heads", "2")["keys_per_block"], 2)
        self.assertEqual(len(self.legacy_json("--block-size", "32", "--tokens", PROBE_TOKENS)["blocks"]), 12)

    def test_the_legacy_key_ignores_what_kvkey_keys_carry(self):
        # The same legacy keys whatever the dtype, epoch or tenant: kvkey's keys differ for each.
        legacy = self.legacy_json("--block-size", "64", "--tokens", PROBE_TOKENS)
        kvkey_keys = {name: [b["store_key"] for b in keys_json(example(name))["blocks"]]
                      for name in ("qwen-fp16", "qwen-fp8", "qwen-epoch1", "tenant-b")}
        self.assertEqual(len({tuple(v) for v in kvkey_keys.values()}), 4)
        regex = json.loads(self.ok("legacy", "pattern", "--model-name", self.MODEL, "--json"))["regex"]
        for keys in kvkey_keys.values():
            self.assertFalse(any(re.search(regex, k) for k in keys))
        self.assertTrue(all(re.search(regex, k) for b in legacy["blocks"] for k in b["keys"]))

    def test_text_output_matches_json(self):
        args = ["--block-size", "64", "--tokens", self.ISSUE_4930, "--adapter", "base", "--cache-prefix", "p"]
        j = self.legacy_json(*args)
        out = self.ok("legacy", "keys", "--model-name", self.MODEL, *args)
        self.assertEqual(re.findall(r"^  block hash +(\S+)$", out, re.M), [b["block_hash"] for b in j["blocks"]])
        self.assertEqual(re.findall(r"^  key +(\S+)$", out, re.M), [k for b in j["blocks"] for k in b["keys"]])
        self.assertEqual(row(out, "extra identity"), '"base"')

    def test_pattern(self):
        j = json.loads(self.ok("legacy", "pattern", "--model-name", self.MODEL, "--cache-prefix", "team.a", "--json"))
        self.assertEqual(j["regex"], r"^team\.a@Qwen2\.5-0\.5B-Instruct@tp_rank:(0|[1-9][0-9]{0,9})@group:0@[0-9a-f]{64}$")
        self.assertEqual(j["glob"], "team.a@Qwen2.5-0.5B-Instruct@tp_rank:*@group:0@" + "[0-9a-f]" * 64)
        keys = self.legacy_json("--block-size", "64", "--tokens", PROBE_TOKENS, "--cache-prefix", "team.a",
                                "--tp-size", "4", "--num-kv-heads", "2")
        for b in keys["blocks"]:
            for k in b["keys"]:
                self.assertRegex(k, j["regex"])
                self.assertIsNone(re.search(j["regex"], k.replace("team.a", "teamXa")))  # '.' is literal
                self.assertIsNone(re.search(j["regex"], "x" + k))
        out = self.ok("legacy", "pattern", "--model-name", self.MODEL)
        self.assertEqual(row(out, "regex"), json.loads(self.ok("legacy", "pattern", "--model-name", self.MODEL,
                                                               "--json"))["regex"])
        # '@' is not escaped by lmdeploy: prefix "tenantA" + model "M" is prefix "" + model "tenantA@M".
        a = json.loads(self.ok("legacy", "pattern", "--model-name", "M", "--cache-prefix", "tenantA", "--json"))
        b = json.loads(self.ok("legacy", "pattern", "--model-name", "tenantA@M", "--json"))
        self.assertEqual(a["regex"], b["regex"])

    def test_parse(self):
        h = "e94120f79296e8af266366a8ac6dcc18b8d8171f87e6f405f6a6f4e22324fe8e"
        j = json.loads(self.ok("legacy", "parse", "--json", "%s@tp_rank:0@group:0@%s" % (self.MODEL, h),
                               "tenantA@M@tp_rank:3@group:0@" + h))
        self.assertEqual(j[0], {"key": "%s@tp_rank:0@group:0@%s" % (self.MODEL, h), "cache_prefix": "",
                                "model_name": self.MODEL, "kv_head_rank": 0, "block_hash": h, "ambiguous": False})
        self.assertEqual((j[1]["cache_prefix"], j[1]["model_name"], j[1]["kv_head_rank"], j[1]["ambiguous"]),
                         ("tenantA", "M", 3, True))
        out = self.ok("legacy", "parse", "tenantA@M@tp_rank:3@group:0@" + h)
        self.assertEqual(row(out, "model name"), '"M"')
        self.assertRegex(row(out, "ambiguous"), r"^yes: ")
        store_key = keys_json(example("qwen-fp16"))["blocks"][0]["store_key"]
        self.assert_error(["legacy", "parse", "%s@tp_rank:0@group:0@%s" % (self.MODEL, h), store_key],
                          r'"kvk4/team-a/\S+": not an lmdeploy legacy key')

    def test_errors(self):
        base = ["legacy", "keys", "--tokens", PROBE_TOKENS]
        self.assert_error(base + ["--block-size", "64"], r"legacy keys: --model-name is required")
        self.assert_error(base + ["--model-name", "", "--block-size", "64"], r"--model-name: must not be empty")
        self.assert_error(base + ["--model-name", "m", "--block-size", "0"], r"--block-size: must be greater than 0")
        self.assert_error(base + ["--model-name", "m", "--block-size", "-64"],
                          r"--block-size: expected an integer in \[0, 2\^32\), got \"-64\"")
        self.assert_error(base + ["--model-name", "m", "--block-size", "64", "--tp-size", "2"],
                          r"--num-kv-heads: required when --tp-size is above 1")
        self.assert_error(base + ["--model-name", "m", "--block-size", "64", "--tp-size", "0"],
                          r"--tp-size: must be greater than 0")
        self.assert_error(["legacy", "keys", "--model-name", "m", "--block-size", "64", "--tokens",
                           os.path.join(DATA, "bad-tokens.txt")], r"bad-tokens\.txt:2:3: token 4")
        self.assert_error(["legacy", "pattern", "--model-name", ""], r"--model-name: must not be empty")
        self.assert_error(["legacy"], r"legacy: A subcommand is required \(see kvkey legacy --help\)")
        self.assert_error(["legacy", "purge"], r"unknown subcommand 'legacy purge' \(known: keys, pattern, parse\)")


# ---- hostile input -----------------------------------------------------------------------

class HostileInputTest(ToolTest):
    """Input a careless or hostile user gives: never a crash, a hang, unbounded work or a
    truncated read; a one-line error that quotes the input truncated and escaped."""

    FP16 = example("qwen-fp16")

    def write(self, name, data):
        path = self.tmp_path(name)
        with open(path, "wb") as f:
            f.write(data if isinstance(data, bytes) else data.encode())
        return path

    def config_text(self, change=None):
        cfg = load(self.FP16)
        if change:
            change(cfg)
        return json.dumps(cfg)

    def assert_clean(self, line, limit=400):
        """A bounded line without raw control, C1 or bidi characters."""
        self.assertLess(len(line), limit, line[:200])
        self.assertIsNone(re.search("[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]", line), repr(line))

    def test_deep_nesting_is_an_error_not_a_crash(self):
        deep = self.write("d.json", "[" * 100001 + "]" * 100001)
        for args in (["keys", self.FP16, "--tokens", deep],
                     ["legacy", "keys", "--model-name", "m", "--block-size", "4", "--tokens", deep]):
            self.assert_clean(self.assert_error(args, r"d\.json: token 0: expected an integer in \[0, 2\^32\), "
                                                      r"got an array$"))
        config = self.write("deep.json", '{"tenant": ' + "[" * 100001 + "]" * 100001 + "}")
        self.assert_error(["identity", config], r"deep\.json: invalid JSON: nested deeper than 32 levels$")
        config = self.write("deep.toml", "tenant = " + "[" * 100001 + "]" * 100001 + "\n")
        self.assert_clean(self.assert_error(["identity", config], r"deep\.toml:1:\d+: "))
        # 32 levels (the file's object and 31 arrays) are parsed, and the wrong type is reported by name.
        for arrays, pattern in ((31, r"tenant: expected a string, got array$"),
                                (32, r"invalid JSON: nested deeper than 32 levels$")):
            value = [1] * 1000
            for _ in range(arrays - 1):
                value = [value]
            nested = self.write("nested.json", self.config_text(lambda c: c.update(tenant=value)))
            self.assert_error(["identity", nested], r"nested\.json: " + pattern)

    def test_huge_values_are_quoted_truncated(self):
        tokens = self.write("s.json", '[1, "' + "a" * 1000000 + '"]')
        self.assert_clean(self.assert_error(["keys", self.FP16, "--tokens", tokens],
                                            r's\.json: token 1: .*got the string "a{64}"\.\.\. \(1000000 bytes\)$'))
        key = "k" * 100000
        config = self.write("key.json", self.config_text(lambda c: c["kv"].update({key: 1})))
        self.assert_clean(self.assert_error(["identity", config], r"key\.json: kv\.k{64}\.\.\. \(100000 bytes\): "
                                                                  r"unknown key \(kv takes: dtype, "))
        number = self.write("n.json", self.config_text().replace('"block_size": 64', '"block_size": 1e400'))
        self.assert_clean(self.assert_error(["identity", number], r"n\.json: invalid JSON: .*number overflow"))

    def test_nul_bytes_are_errors_not_the_end_of_the_input(self):
        cases = {"t.json": (b"[1,2,3]\0,4,5,6]", r"t\.json:1:8: NUL byte \(byte 7\): not a text file$"),
                 "t.txt": (b"1 2\n3\0 4", r"t\.txt:2:2: NUL byte \(byte 5\)")}
        for name, (data, pattern) in cases.items():
            self.assert_error(["keys", self.FP16, "--tokens", self.write(name, data)], pattern)
        config = self.config_text().encode()
        for name in ("c.json", "c.toml"):
            text = config if name == "c.json" else open(example("qwen-fp16")[:-5] + ".toml", "rb").read()
            self.assert_error(["identity", self.write(name, text + b'\0{"tenant":"evil"}')],
                              re.escape(name) + r":\d+:\d+: NUL byte \(byte %d\)" % len(text))
        shutil.copy(os.path.join(EXAMPLES, "adapter-weights.txt"), self.tmp)
        lora = self.write("lora.json", self.config_text(lambda c: c.update(
            adapter={"name": "base", "weights_file": "adapter-weights.txt\0.evil"})))
        self.assert_error(["identity", lora], r'lora\.json: adapter\.weights_file: byte 19 is NUL, which cannot be '
                                              r'in a path \("adapter-weights\.txt\\u0000\.evil"\)$')
        # Messages show the whole value, NUL escaped, not the part before it.
        dtype = self.write("d.json", self.config_text(lambda c: c["kv"].update(dtype="fp16\0evil")))
        self.assert_error(["identity", dtype], r'd\.json: kv\.dtype: unknown dtype "fp16\\u0000evil"')

    def test_stdin_is_read_only_as_far_as_needed(self):
        path = self.write("big.bin", bytes(4096))
        header = self.seal(self.FP16, "00" * 32)
        for args in (["inspect", "-"], ["verify", self.FP16, "-", "--block", "00" * 32, "--size", "1"]):
            with open(path, "rb") as f:
                p = subprocess.run([TOOL, *args], stdin=f, capture_output=True, timeout=600)
                consumed = os.lseek(f.fileno(), 0, os.SEEK_CUR)  # the tool shared this file offset
            self.assertLessEqual(consumed, 1025, args)
            self.assertIn(b"it is more than 1024 bytes, an envelope is exactly 1024", p.stdout + p.stderr)
        with open(header, "rb") as f:
            self.assertTrue(self.ok("inspect", "-", stdin=f.read()).startswith("header: stdin (1024-byte"))

    def test_inputs_must_be_regular_files(self):
        self.assert_error(["identity", "/dev/zero"], r"^kvkey: error: /dev/zero: not a regular file \(a character "
                                                     r"device\)$")
        self.assert_error(["keys", self.FP16, "--tokens", "/dev/zero"], r"/dev/zero: not a regular file")
        self.assert_error(["inspect", "/dev/zero"], r"/dev/zero: not a regular file")
        fifo = self.tmp_path("fifo")
        os.mkfifo(fifo)
        for target in ("/dev/zero", fifo):
            config = self.write("w.json", self.config_text(lambda c: c["model"].update(weights_file=target)))
            rc, out, err = run("identity", config, timeout=600)  # a blocking read would hang here
            self.assertEqual((rc, out), (2, ""))
            self.assertRegex(err, r"w\.json: model\.weights_file: \S+: not a regular file \(a (character device|FIFO)\)")
        self.assert_error(["keys", self.FP16, "--tokens", fifo], r"fifo: not a regular file \(a FIFO\)")

    def test_sizes_are_capped(self):
        self.assert_error(["identity", self.write("big.json", b" " * (2**20 + 1))],
                          r"big\.json: larger than the 1048576-byte limit for identity files$")
        self.assert_error(["keys", self.FP16, "--tokens", "-"],
                          r"^kvkey: error: stdin: larger than the 33554432-byte limit for token files$",
                          stdin=b"1 " * (2**24) + b"1")
        self.assert_error(["legacy", "keys", "--model-name", "m", "--block-size", "4", "--tokens", PROBE_TOKENS,
                           "--tp-size", "4294967295", "--num-kv-heads", "4294967295"],
                          r"--tp-size: 4294967295 with 4294967295 KV heads gives 4294967295 keys per block, above "
                          r"the tool's limit of 1024$")
        j = json.loads(self.ok("legacy", "keys", "--model-name", "m", "--block-size", "4", "--tokens", PROBE_TOKENS,
                               "--tp-size", "1024", "--num-kv-heads", "1024", "--json"))
        self.assertEqual(j["keys_per_block"], 1024)

    def test_values_are_reported_as_written(self):
        minus_zero = self.write("z.json", self.config_text().replace('"block_size": 64', '"block_size": -0'))
        self.assert_error(["identity", minus_zero], r"z\.json: kv\.block_size: expected an integer in "
                                                    r"\[0, 4294967295\], got -0$")
        with open(example("qwen-fp16")[:-5] + ".toml") as f:
            toml = f.read()
        for value in ("inf", "-inf", "nan"):
            path = self.write("v.toml", toml.replace("block_size = 64", "block_size = " + value))
            self.assert_error(["identity", path], r"v\.toml: kv\.block_size: expected an integer in "
                                                  r"\[0, 4294967295\], got %s$" % re.escape(value))

    def test_control_characters_are_escaped(self):
        esc = self.write("e.txt", b"1 2 \x1b[31mred\x1b[0m")
        line = self.assert_error(["keys", self.FP16, "--tokens", esc], r'got "\\u001b\[31mred\\u001b\[0m"$')
        self.assert_clean(line)
        bidi = "\u202egnp.exe\u0085"
        key = self.write("k.json", self.config_text(lambda c: c["kv"].update({bidi: 1})))
        self.assert_clean(self.assert_error(["identity", key], r"kv\.\\u202egnp\.exe\\u0085: unknown key"))
        self.assert_clean(self.assert_error(["identity", self.tmp_path("x\x1by.json")],
                                            r"cannot open \S*x\\u001by\.json: No such file"))
        # Output too: legacy keys echo the command line's names.
        out = self.ok("legacy", "pattern", "--model-name", "m\x1b]0;x\x07\u202e", "--cache-prefix", "p\x85")
        self.assert_clean(out.replace("\n", " "), limit=2000)
        self.assertIn('model name "m\\u001b]0;x\\u0007\\u202e"', out)
        j = self.ok("legacy", "pattern", "--model-name", "m\x1b\u202e", "--json")
        self.assertTrue(j.isascii())
        self.assertEqual(json.loads(j)["model_name"], "m\x1b\u202e")

    def test_names_with_bidi_or_c1_characters_are_refused(self):
        for name, offset, cp in (("Qwen\u202e61pf", 4, "U+202E"), ("Qwen\u0085", 4, "U+0085"),
                                 ("\u2066Qwen", 0, "U+2066")):
            config = self.write("n.json", self.config_text(lambda c: c["model"].update(name=name)))
            self.assert_error(["identity", config], r"n\.json: model\.name: byte %d starts a .* \(%s\)$" % (offset, re.escape(cp)))
            config = self.write("a.json", self.config_text(lambda c: c.update(
                adapter={"name": name, "weights_fingerprint": "00" * 32})))
            self.assert_error(["identity", config], r"a\.json: adapter\.name: byte %d starts" % offset)

    def test_utf8_bom_is_ignored_in_every_text_input(self):
        bom = b"\xef\xbb\xbf"
        plain = keys_json(self.FP16)["blocks"]
        with open(os.path.join(EXAMPLES, "prompts", "short.json"), "rb") as f:
            tokens = f.read()
        with open(example("qwen-fp16")[:-5] + ".toml", "rb") as f:
            toml = f.read()
        for name, data in (("t.json", tokens), ("t.txt", b" ".join(tokens.strip(b"[]\n").split(b",")))):
            j = json.loads(self.ok("keys", self.FP16, "--tokens", self.write(name, bom + data), "--json"))
            self.assertEqual(j["token_count"], 130, name)
            self.assertEqual(j["blocks"], plain[:2], name)
        for name, data in (("c.json", self.config_text().encode()), ("c.toml", toml)):
            self.assertEqual(row(self.ok("identity", self.write(name, bom + data)), "root"),
                             row(self.ok("identity", self.FP16), "root"), name)

    def test_suggestions_only_for_likely_typos(self):
        for key in ("zz", "kx", "mv"):  # two letters, one or two away from "kv"
            config = self.write("s.json", self.config_text(lambda c: c.update({key: 1})))
            line = self.assert_error(["identity", config], r"s\.json: %s: unknown key \(the top level takes: " % key)
            self.assertNotIn("did you mean", line)
        config = self.write("s.json", self.config_text(lambda c: c["kv"].update(layuot="x")))
        self.assert_error(["identity", config], r"kv\.layuot: unknown key \(did you mean kv\.layout\?\)$")

    def test_seal_to_stdout(self):
        p = subprocess.run([TOOL, "seal", self.FP16, "--block", "00" * 32, "--size", "7", "-o", "-"],
                           capture_output=True, cwd=self.tmp)
        self.assertEqual((p.returncode, p.stderr), (0, b""))
        self.assertFalse(os.path.exists(self.tmp_path("-")))
        with open(self.seal(self.FP16, "00" * 32, size=7), "rb") as f:
            self.assertEqual(p.stdout, f.read())
        out = self.ok("inspect", "-", stdin=p.stdout)
        self.assertEqual(row(out, "payload size"), "7 bytes")


# ---- docs/cli.md ------------------------------------------------------------------------

class PurgeTest(ToolTest):
    """kvkey purge and kvkey secret-id: the patterns select exactly what they name."""

    def secret_file(self, name, secret):
        path = self.tmp_path(name)
        with open(path, "w") as f:
            f.write(secret.hex() + "\n")
        os.chmod(path, 0o600)
        return path

    def test_secret_id_is_hmac_of_I(self):
        secret = bytes(range(40))
        path = self.secret_file("s.hex", secret)
        want = hmac.new(secret, b"I", hashlib.sha256).digest()[:8].hex()
        out = self.ok("secret-id", "--secret-file", path, "--tenant", "team-a")
        self.assertEqual(row(out, "secret id"), want)
        self.assertEqual(row(out, "key prefix"), "kvk4/team-a/k%s/" % want)
        self.assertEqual(self.ok("purge", "--tenant", "team-a", "--secret-file", path), "kvk4/team-a/k%s/*\n" % want)
        self.assertEqual(self.ok("purge", "--tenant", "team-a", "--secret-id", want.upper(), "--as", "prefix"),
                         "kvk4/team-a/k%s/\n" % want)
        os.chmod(path, 0o644)  # a secret others can read is refused, as by the library
        rc, _, err = run("secret-id", "--secret-file", path)
        self.assertEqual(rc, 2)
        self.assertIn(path, err)

    def test_patterns(self):
        self.assertEqual(self.ok("purge", "--tenant", "team-a"), "kvk4/team-a/*\n")
        self.assertEqual(self.ok("purge", "--tenant", "team-a", "--plain"), "kvk4/team-a/p/*\n")
        self.assertEqual(self.ok("purge", "--tenant", "team-a", "--plain", "--as", "regex"), "^kvk4/team-a/p/\n")
        self.assertEqual(self.ok("purge", "--tenant", "t.x", "--as", "regex"), "^kvk4/t\\.x/\n")
        self.assertEqual(self.ok("purge", "--format-v2"), "kvk1/*\n")
        self.assertEqual(self.ok("purge", "--format-v2", "--tenant", "team-b"), "kvk1/team-b/*\n")
        self.assertEqual(self.ok("purge", "--format-v3"), "kvk3/*\n")
        self.assertEqual(self.ok("purge", "--format-v3", "--tenant", "team-b"), "kvk3/team-b/*\n")
        sid = "0123456789abcdef"
        self.assertEqual(self.ok("purge", "--tenant", "team-a", "--secret-id", sid), "kvk4/team-a/k%s/*\n" % sid)
        self.assertEqual(self.ok("purge", "--tenant", "team-a", "--secret-id", sid, "--confidential"),
                         "kvk4/team-a/c%s/*\n" % sid)
        # The keys an identity file produces fall under its tenant's plain pattern.
        prefix = keys_json(example("qwen-fp16"))["key_prefix"]
        self.assertTrue(prefix.startswith(self.ok("purge", "--tenant", "team-a", "--plain", "--as", "prefix").strip()))

    def test_errors(self):
        self.assert_error(["purge"], r"--tenant is required")
        self.assert_error(["purge", "--tenant", "bad/tenant"], r"tenant")
        self.assert_error(["purge", "--tenant", "t", "--secret-id", "xyz"], r"--secret-id \"xyz\": expected 16 hex digits")
        self.assert_error(["purge", "--tenant", "t", "--plain", "--secret-id", "00" * 8], r"at most one of")
        self.assert_error(["purge", "--format-v2", "--plain"], r"format v2 keys carry no secret id")
        self.assert_error(["purge", "--format-v3", "--plain"], r"--format-v3 selects every v3 key")
        self.assert_error(["purge", "--tenant", "t", "--confidential"], r"--confidential selects one secret")


class DocsTest(ToolTest):
    """Every ```console block of docs/cli.md is real output: run it again and compare."""

    def test_examples_in_docs_are_current(self):
        with open(os.path.join(SOURCE, "docs", "cli.md")) as f:
            blocks = re.findall(r"^```console\n\$ (.*)\n((?:(?!```).*\n)*)```$", f.read(), re.M)
        self.assertGreaterEqual(len(blocks), 20)
        # The commands use paths relative to the repository root; files they write land in tmp.
        for d in ("examples", "tools"):
            os.symlink(os.path.join(SOURCE, d), self.tmp_path(d))
        env = dict(os.environ, PATH=os.path.dirname(os.path.abspath(TOOL)) + os.pathsep + os.environ["PATH"])
        for command, expected in blocks:
            self.assertTrue(command.startswith("kvkey"), command)
            p = subprocess.run(["/bin/bash", "-c", "exec 2>&1; " + command], capture_output=True, text=True,
                               cwd=self.tmp, env=env)
            self.assertEqual(p.stdout, expected, "docs/cli.md: $ " + command)


# ---- error classes -------------------------------------------------------------------

class ErrorsTest(ToolTest):
    def data(self, name):
        return os.path.join(DATA, name)

    def test_config_errors(self):
        cases = {
            "bad-syntax.json": r"bad-syntax\.json:7:3: invalid JSON: syntax error while parsing object key - "
                               r"unexpected '}'; expected string literal$",
            "unknown-key.json": r"unknown-key\.json: kv\.blocksize: unknown key \(did you mean kv\.block_size\?\)$",
            "unknown-top-key.json": r"unknown-top-key\.json: colour: unknown key \(the top level takes: tenant, "
                                    r"policy, confidential, model, kv, shard, adapter\)$",
            "unknown-dtype.json": r"unknown-dtype\.json: kv\.dtype: unknown dtype \"fp17\" \(known: fp32, fp16, "
                                  r"bf16, .*fp4_e2m1, fp8_e4m3fnuz, fp8_e5m2fnuz\)$",
            "bad-geometry.json": r"bad-geometry\.json: shard\.tp_size: 3 is not a multiple of kv\.num_kv_heads 2",
            "bad-hex.json": r"bad-hex\.json: model\.weights_fingerprint: hex digest must be 64 hex characters, "
                            r"got 63 characters$",
            "wrong-type.json": r"wrong-type\.json: kv\.block_size: expected an integer in \[0, 4294967295\], "
                               r"got \"64\"$",
            "missing-key.json": r"missing-key\.json: model\.revision: required key is missing$",
            "missing-weights-file.json": r"missing-weights-file\.json: adapter\.weights_file: cannot open "
                                         r"\S*no-such-adapter\.safetensors: No such file or directory$",
            "bad-tenant.json": r"bad-tenant\.json: tenant: byte 4 is not allowed",
            "duplicate-key.json": r"duplicate-key\.json: kv\.dtype: duplicate key$",
        }
        for name, pattern in cases.items():
            for command in (["identity"], ["keys", "--tokens", PROBE_TOKENS], ["diff", example("qwen-fp16")]):
                self.assert_error(command + [self.data(name)], r"^kvkey: error: \S*" + pattern)

    def test_toml_errors(self):
        cases = {"syntax.toml": ('tenant = "a"\n[model\nname = "x"\n',
                                 r"syntax\.toml:2:7: invalid TOML: .*expected ']'"),
                 "date.toml": ('tenant = "a"\n[model]\nname = "x"\nrevision = 2024-01-01\n',
                               r"date\.toml:4:12: model\.revision: TOML dates and times are not identity values"),
                 "duplicate.toml": ('tenant = "a"\ntenant = "b"\n', r"duplicate\.toml:2:\d+: invalid TOML: "),
                 # of several unknown keys the first in byte order, whatever the file's order
                 "order.toml": ('tenant = "a"\nzeta = 1\nalpha = 2\n', r"order\.toml: alpha: unknown key"),
                 "typo.toml": ('tenant = "a"\n[model]\nname = "x"\nrevision = "r"\n[kv]\nd_type = "fp16"\n',
                               r"typo\.toml: kv\.d_type: unknown key \(did you mean kv\.dtype\?\)"),
                 "negative.toml": ('tenant = "a"\n[model]\nname = "x"\nrevision = "r"\nweights_epoch = -1\n',
                                   r"negative\.toml: model\.weights_epoch: expected an integer in "
                                   r"\[0, 18446744073709551615\], got -1")}
        for name, (text, pattern) in cases.items():
            with open(self.tmp_path(name), "w") as f:
                f.write(text)
            self.assert_error(["identity", self.tmp_path(name)], pattern)

    def test_missing_and_unreadable_files(self):
        self.assert_error(["identity", self.data("no-such.json")],
                          r"cannot open \S*no-such\.json: No such file or directory$")
        self.assert_error(["identity", DATA], r"\S*data: not a regular file \(a directory\)$")
        self.assert_error(["keys", example("qwen-fp16"), "--tokens", self.data("none.txt")],
                          r"cannot open \S*none\.txt: No such file or directory$")

    def test_value_errors(self):
        def config(change):
            cfg = load(example("qwen-fp16"))
            change(cfg)
            return self.write_config("c.json", cfg)
        cases = [
            (lambda c: c["kv"].update(block_size=-64), r"kv\.block_size: expected an integer in \[0, 4294967295\], got -64"),
            (lambda c: c["kv"].update(block_size=6.5), r"kv\.block_size: expected an integer .*got 6\.5"),
            (lambda c: c["kv"].update(block_size=2**32), r"kv\.block_size: 4294967296 is above the maximum 4294967295"),
            (lambda c: c["kv"].update(block_size=0), r"kv\.block_size: must be greater than 0"),
            (lambda c: c["kv"].update(mla="yes"), r"kv\.mla: expected true or false, got \"yes\""),
            (lambda c: c["kv"].update(quant=[]), r"kv\.quant: expected an object, got array"),
            (lambda c: c["kv"].update(quant={"group_size": 4}), r"kv\.quant\.group_size: must be 0 when"),
            (lambda c: c["kv"].update(quant={"scheme": "x", "scale_dtype": "fp99"}),
             r"kv\.quant\.scale_dtype: unknown dtype \"fp99\""),
            (lambda c: c["kv"].update(quant={"scheme": "x", "scales_fingerprint": "g" * 64}),
             r"kv\.quant\.scales_fingerprint: hex digest has a non-hex character at position 0"),
            (lambda c: c["kv"].update(quant={"sceme": "x"}), r"kv\.quant\.sceme: unknown key \(did you mean kv\.quant\.scheme\?\)"),
            (lambda c: c["model"].update(weights_file="w.bin", weights_fingerprint="00" * 32),
             r"model\.weights_file: give model\.weights_fingerprint or model\.weights_file, not both"),
            (lambda c: c.update(adapter={"name": "x"}), r"adapter\.weights_fingerprint: required key is missing"),
            (lambda c: c.update(policy="shared"), r"policy: unknown policy \"shared\" \(known: required, single_tenant\)"),
            (lambda c: c.update(policy="single_tenant"), r"tenant: must be empty under the single_tenant policy"),
            (lambda c: c.pop("tenant"), r"tenant: must not be empty"),
            (lambda c: c.pop("kv"), r"kv: required key is missing"),
            (lambda c: c["shard"].update(tp_rank=2) if "shard" in c else c.update(shard={"tp_size": 2, "tp_rank": 2}),
             r"shard\.tp_rank: 2 is not below shard\.tp_size 2"),
            (lambda c: c["kv"].update(num_layers=25) or c.update(shard={"pp_size": 2}),
             r"shard\.pp_size: 2 does not divide kv\.num_layers 25"),
        ]
        for change, pattern in cases:
            self.assert_error(["identity", config(change)], r"c\.json: " + pattern)
        with open(self.tmp_path("array.json"), "w") as f:
            f.write("[1, 2]")
        self.assert_error(["identity", self.tmp_path("array.json")], r"array\.json: expected an object, got array")

    def test_token_errors(self):
        self.assert_error(["keys", example("qwen-fp16"), "--tokens", self.data("bad-tokens.txt")],
                          r"bad-tokens\.txt:2:3: token 4: expected an integer in \[0, 2\^32\), got \"x5\"$")
        cases = {"neg.txt": ("1 -2", r"neg\.txt:1:3: token 1: .*got \"-2\""),
                 "big.txt": ("4294967296", r"big\.txt:1:1: token 0: .*got \"4294967296\""),
                 "commas.txt": ("1,,2", r"commas\.txt:1:3: unexpected ','"),
                 "neg.json": ("[1, -2]", r"neg\.json: token 1: expected an integer in \[0, 2\^32\), got -2$"),
                 "big.json": ("[4294967296]", r"big\.json: token 0: .*got 4294967296$"),
                 "float.json": ("[1.5]", r"float\.json: token 0: .*got 1\.5$"),
                 "bad.json": ("[1, 2", r"bad\.json:1:6: invalid JSON: "),
                 "object.json": ('[1]  {"a": 1}', r"object\.json:1:6: invalid JSON: ")}
        for name, (text, pattern) in cases.items():
            with open(self.tmp_path(name), "w") as f:
                f.write(text)
            self.assert_error(["keys", example("qwen-fp16"), "--tokens", self.tmp_path(name)], pattern)
        self.assert_error(["keys", example("qwen-fp16"), "--tokens", "-"], r"stdin:1:1: token 0", stdin=b"abc")
        self.assert_error(["keys", example("qwen-fp16"), "--tokens", PROBE_TOKENS, "--extra", "5:5:x"],
                          r"--extra \"5:5:x\": BEGIN must be below END")
        self.assert_error(["keys", "-", "--tokens", "-"], r"CONFIG and --tokens cannot both be stdin", stdin=b"[]")
        self.assert_error(["diff", "-", "-"], r"CONFIG_A and CONFIG_B cannot both be stdin", stdin=b"{}")
        self.assert_error(["keys", example("qwen-fp16"), "--tokens", PROBE_TOKENS, "--extra", "5:x"],
                          r"--extra \"5:x\": expected BEGIN:END:KEY")

    def test_usage_errors(self):
        self.assert_error([], r"A subcommand is required \(see kvkey --help\)")
        self.assert_error(["idenity", example("qwen-fp16")],
                          r"unknown subcommand 'idenity' \(known: identity, keys, seal, inspect, verify, diff, legacy, init, "
                          r"purge, secret-id, conformance, conformance-testee, schema\)$")
        self.assert_error(["keys", example("qwen-fp16")], r"keys: --tokens is required \(see kvkey keys --help\)")
        self.assert_error(["identity"], r"identity: CONFIG is required")
        self.assert_error(["identity", example("qwen-fp16"), "--frobnicate"], r"identity: .*--frobnicate")

    def test_help_and_version(self):
        out = self.ok("--help")
        for sub in ["identity", "keys", "seal", "inspect", "verify", "diff", "legacy"]:
            self.assertRegex(out, r"\n  %s +\S" % sub)
        self.assertRegex(self.ok("--version"), r"^kvkey \d+\.\d+\.\d+ \(byte format version 4\)\n$")


if __name__ == "__main__":
    if not TOOL:
        sys.exit("set KVKEY_TOOL to the kvkey executable")
    unittest.main(verbosity=2)
