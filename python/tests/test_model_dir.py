"""kvkey.Identity.from_model_dir: the identity of a model directory as an engine loads it."""

import hashlib
import json
import os
import re

import pytest

import kvkey

COMMIT = "89abcdef0123456789abcdef0123456789abcdef"
LLAMA = {
    "architectures": ["LlamaForCausalLM"], "hidden_size": 2048, "num_attention_heads": 32,
    "num_hidden_layers": 16, "num_key_value_heads": 8, "max_position_embeddings": 131072,
    "rope_theta": 500000.0,
    "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                     "original_max_position_embeddings": 8192, "rope_type": "llama3"},
}
ARGS = dict(tenant="team-a", kv_dtype="bf16", block_size=16, layout="vllm.v1.flash")


def manifest(directory, names):
    """SHA-256 of "<sha256 hex>  <name>\\n" over the sorted names, with hashlib."""
    lines = ""
    for n in sorted(names, key=lambda s: s.encode()):
        with open(os.path.join(directory, n), "rb") as f:
            lines += hashlib.sha256(f.read()).hexdigest() + "  " + n + "\n"
    return hashlib.sha256(lines.encode()).digest()


@pytest.fixture
def plain(tmp_path):
    d = tmp_path / "Llama-3.2-1B"
    d.mkdir()
    (d / "config.json").write_text(json.dumps(LLAMA))
    (d / "model.safetensors").write_bytes(os.urandom(4096))
    return d


@pytest.fixture
def hf_snapshot(tmp_path):
    root = tmp_path / "hub" / "models--meta-llama--Llama-3.2-1B"
    snap = root / "snapshots" / COMMIT
    (root / "blobs").mkdir(parents=True)
    (root / "refs").mkdir()
    (root / "refs" / "main").write_text(COMMIT)
    snap.mkdir(parents=True)
    for name, data, blob in [("config.json", json.dumps(LLAMA).encode(), "ab" * 20),
                             ("model.safetensors", os.urandom(4096), None)]:
        blob = blob or hashlib.sha256(data).hexdigest()
        (root / "blobs" / blob).write_bytes(data)
        os.symlink(os.path.join("..", "..", "blobs", blob), snap / name)
    return root, snap


def test_plain_directory(plain):
    i = kvkey.Identity.from_model_dir(plain, revision="r1", **ARGS)
    assert i.model.name == "Llama-3.2-1B"
    assert i.model.revision == "r1"
    assert (i.kv.num_layers, i.kv.num_kv_heads, i.kv.head_dim, i.kv.mla) == (16, 8, 64, False)
    assert i.kv.dtype == kvkey.KvDtype.bf16
    assert (i.kv.block_size, i.kv.layout) == (16, "vllm.v1.flash")
    assert i.model.weights_fingerprint == manifest(plain, ["model.safetensors"])
    assert i.adapter is None
    kvkey.KeyNamespace(i)  # valid


def test_hf_cache_snapshot_and_repo_root(hf_snapshot):
    root, snap = hf_snapshot
    a = kvkey.Identity.from_model_dir(snap, **ARGS)
    b = kvkey.Identity.from_model_dir(str(root), tp_size=2, tp_rank=1, **ARGS)
    assert a.model.name == b.model.name == "meta-llama/Llama-3.2-1B"
    assert a.model.revision == b.model.revision == COMMIT
    assert a.model.weights_fingerprint == manifest(snap, ["model.safetensors"])
    assert (b.shard.tp_size, b.shard.tp_rank) == (2, 1)


def test_positional_fingerprint_follows_overrides(plain):
    base = kvkey.Identity.from_model_dir(plain, revision="r1", **ARGS)
    canonical = json.dumps({"max_position_embeddings": 131072, "rope_scaling": {
        "factor": 32, "high_freq_factor": 4, "low_freq_factor": 1, "original_max_position_embeddings": 8192,
        "rope_type": "llama3"}, "rope_theta": 500000}, sort_keys=True, separators=(",", ":"))
    assert base.model.positional_fingerprint == hashlib.sha256(canonical.encode()).digest()
    changed = kvkey.Identity.from_model_dir(plain, revision="r1", overrides={"rope_theta": 10000.0}, **ARGS)
    assert changed.model.positional_fingerprint != base.model.positional_fingerprint
    assert changed.model.weights_fingerprint == base.model.weights_fingerprint
    with pytest.raises(kvkey.InputError, match="overrides: expected a JSON object"):
        kvkey.Identity.from_model_dir(plain, revision="r1", overrides=[1], **ARGS)


def test_positional_fingerprint_is_settable(plain):
    i = kvkey.Identity.from_model_dir(plain, revision="r1", **ARGS)
    i.model.positional_fingerprint = None
    assert i.model.positional_fingerprint is None
    i.model.positional_fingerprint = b"\x01" * 32
    assert i.model.positional_fingerprint == b"\x01" * 32
    with pytest.raises(kvkey.InputError, match="model.positional_fingerprint"):
        i.model.positional_fingerprint = b"short"


def test_adapter_dir(plain, tmp_path):
    a = tmp_path / "sql-lora"
    a.mkdir()
    (a / "adapter_config.json").write_text(json.dumps({"r": 8, "lora_alpha": 16}))
    (a / "adapter_model.safetensors").write_bytes(os.urandom(1000))
    i = kvkey.Identity.from_model_dir(plain, revision="r1", adapter_dir=a, **ARGS)
    assert i.adapter.name == "sql-lora"
    assert i.adapter.weights_fingerprint == manifest(a, ["adapter_config.json", "adapter_model.safetensors"])


def test_mla_geometry(tmp_path):
    d = tmp_path / "DeepSeek-V3"
    d.mkdir()
    (d / "config.json").write_text(json.dumps({
        "hidden_size": 7168, "num_attention_heads": 128, "num_hidden_layers": 61, "num_key_value_heads": 128,
        "kv_lora_rank": 512, "qk_rope_head_dim": 64, "qk_nope_head_dim": 128, "v_head_dim": 128}))
    (d / "model-00001-of-00001.safetensors").write_bytes(b"w")
    i = kvkey.Identity.from_model_dir(d, revision="r1", **ARGS)
    assert (i.kv.num_kv_heads, i.kv.head_dim, i.kv.mla) == (1, 576, True)


def test_errors(plain, hf_snapshot):
    with pytest.raises(kvkey.InputError, match="revision must be given"):
        kvkey.Identity.from_model_dir(plain, **ARGS)
    root, _ = hf_snapshot
    with pytest.raises(kvkey.InputError, match="revision 'v2' is neither a ref"):
        kvkey.Identity.from_model_dir(root, revision="v2", **ARGS)
    with pytest.raises(kvkey.IdentityError) as e:
        kvkey.Identity.from_model_dir(plain, revision="r1", **dict(ARGS, tenant=""))
    assert e.value.field == "tenant"
    # An unknown dtype name is an argument that cannot be taken as given: InputError, as in Kv(dtype=...).
    with pytest.raises(kvkey.InputError) as e:
        kvkey.Identity.from_model_dir(plain, revision="r1", **dict(ARGS, kv_dtype="fp9"))
    assert e.value.field == "kv_dtype"
    (plain / "config.json").write_text('{"num_hidden_layers": 16,\n "hidden_size": }')
    with pytest.raises(kvkey.InputError, match=r"config\.json:2:17: invalid JSON"):
        kvkey.Identity.from_model_dir(plain, revision="r1", **ARGS)
    os.remove(plain / "config.json")
    with pytest.raises(kvkey.IoError, match="config.json: missing"):
        kvkey.Identity.from_model_dir(plain, revision="r1", **ARGS)


def test_kv_dtype_takes_every_engine_spelling(plain):
    """kv_dtype: every name (and object) kv_dtype_from_engine accepts, with its refusals."""
    for name in ["fp8", "bfloat16", "torch.bfloat16", "half", "float16", "torch.float8_e5m2", "float8_e4m3fn",
                 "bf16", "float8_e4m3fnuz", kvkey.KvDtype.fp16]:
        i = kvkey.Identity.from_model_dir(plain, revision="r1", **dict(ARGS, kv_dtype=name))
        assert i.kv.dtype == kvkey.kv_dtype_from_engine(name if not isinstance(name, kvkey.KvDtype) else "fp16"), name
    assert kvkey.Identity.from_model_dir(plain, revision="r1", **dict(ARGS, kv_dtype="fp8")).kv.dtype == \
        kvkey.KvDtype.fp8_e4m3
    np = pytest.importorskip("numpy")
    assert kvkey.Identity.from_model_dir(plain, revision="r1", **dict(ARGS, kv_dtype=np.dtype("float16"))).kv.dtype \
        == kvkey.KvDtype.fp16
    for name, pattern in [("auto", "resolve it first"), ("float8_e4m3fnuz_x", "unknown kv dtype"),
                          ("fp8_inc", "scales inside the cache"), ("FP8", 'unknown kv dtype "FP8"'),
                          (0, "quant_policy 0")]:
        with pytest.raises(kvkey.InputError, match=pattern) as e:
            kvkey.Identity.from_model_dir(plain, revision="r1", **dict(ARGS, kv_dtype=name))
        assert e.value.field == "kv_dtype"
        with pytest.raises(kvkey.InputError, match=pattern):
            kvkey.kv_dtype_from_engine(name)
    with pytest.raises(TypeError, match="kv_dtype"):
        kvkey.Identity.from_model_dir(plain, revision="r1", **dict(ARGS, kv_dtype=1.5))


def test_single_tenant(plain):
    args = dict(ARGS)
    del args["tenant"]
    i = kvkey.Identity.from_model_dir(plain, revision="r1", single_tenant=True, **args)
    assert i.tenant == ""
    ns = kvkey.KeyNamespace(i, single_tenant=True)
    assert ns.single_tenant and ns.store_key(ns.block_hashes(range(16))[0]).startswith(ns.tenant_prefix)
    with pytest.raises(kvkey.InputError, match="tenant is required") as e:
        kvkey.Identity.from_model_dir(plain, revision="r1", **args)
    assert e.value.field == "tenant"
    with pytest.raises(kvkey.IdentityError, match="single_tenant") as e:
        kvkey.Identity.from_model_dir(plain, revision="r1", single_tenant=True, **ARGS)
    assert e.value.field == "tenant"


def test_arguments_go_through_the_checked_conversions(plain):
    # Paths as os.fsencode(os.fspath(p)) gives them; every other argument checked and named.
    by_str = kvkey.Identity.from_model_dir(str(plain), revision="r1", **ARGS)
    assert kvkey.Identity.from_model_dir(os.fsencode(str(plain)), revision="r1", **ARGS) == by_str
    with pytest.raises(ValueError, match="path contains a NUL byte"):
        kvkey.Identity.from_model_dir(str(plain) + "\0x", revision="r1", **ARGS)
    with pytest.raises(TypeError, match="block_size must be an int"):
        kvkey.Identity.from_model_dir(plain, revision="r1", **dict(ARGS, block_size="16"))
    with pytest.raises(kvkey.InputError, match=r"tp_size is -1, must lie in \[0, 2\^32\)"):
        kvkey.Identity.from_model_dir(plain, revision="r1", tp_size=-1, **ARGS)
    with pytest.raises(TypeError, match="revision must be str"):
        kvkey.Identity.from_model_dir(plain, revision=b"r1", **ARGS)


# ---- issue 19: hostile model directories ------------------------------------------------------

from conftest import in_fresh_interpreter  # noqa: E402

FROM_MODEL_DIR = (
    "import json, sys, kvkey\n"
    "args = json.loads(sys.argv[2])\n"
    "try:\n"
    "    kvkey.Identity.from_model_dir(sys.argv[1], **args)\n"
    "    print('returned')\n"
    "except (kvkey.InputError, kvkey.IoError) as e:\n"
    "    print(type(e).__name__ + ':', e)\n"
)


def from_model_dir_isolated(path, **args):
    """from_model_dir in a fresh interpreter (a hang or a crash cannot take the suite down): what it printed."""
    out = in_fresh_interpreter(FROM_MODEL_DIR, path, json.dumps(dict(ARGS, **args)))
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout.strip()


def test_fifo_config_and_adapter_config_are_refused_at_once(plain, tmp_path):
    os.remove(plain / "config.json")
    os.mkfifo(plain / "config.json")
    assert from_model_dir_isolated(plain, revision="r1") == \
        f"IoError: [kvkey.io_error] {plain / 'config.json'}: not a regular file (a FIFO)"
    os.remove(plain / "config.json")
    (plain / "config.json").write_text(json.dumps(LLAMA))
    a = tmp_path / "lora"
    a.mkdir()
    (a / "adapter_model.safetensors").write_bytes(b"lora")
    os.mkfifo(a / "adapter_config.json")
    assert from_model_dir_isolated(plain, revision="r1", adapter_dir=str(a)) == \
        f"IoError: [kvkey.io_error] {a / 'adapter_config.json'}: not a regular file (a FIFO)"


def test_deep_config_is_an_input_error_not_a_crash(plain):
    deep = "[" * 50000 + "]" * 50000
    (plain / "config.json").write_text(json.dumps(dict(LLAMA, rope_scaling=None))[:-1] + ', "rope_scaling": ' + deep + "}")
    printed = from_model_dir_isolated(plain, revision="r1")
    assert printed.startswith("InputError: "), printed
    assert "config.json: rope_scaling[0][0]" in printed and "nested deeper than 64 levels" in printed
    (plain / "config.json").write_text(json.dumps(dict(LLAMA, head_dim=json.loads("[" * 64 + "]" * 64))))
    with pytest.raises(kvkey.InputError, match=r"config\.json: head_dim(\[0\])+: nested deeper than 64 levels"):
        kvkey.Identity.from_model_dir(plain, revision="r1", **ARGS)


def test_overrides_deeper_than_the_limit_are_an_input_error(plain):
    deep = {}
    for _ in range(70):
        deep = {"x": deep}
    with pytest.raises(kvkey.InputError, match=r"overrides: rope_scaling(\.x)+: nested deeper than 64 levels"):
        kvkey.Identity.from_model_dir(plain, revision="r1", overrides={"rope_scaling": deep}, **ARGS)
    for _ in range(5000):  # beyond the interpreter's recursion limit too
        deep = [deep]
    with pytest.raises(kvkey.InputError, match=r"overrides: rope_scaling(\[0\])+: nested deeper than 64 levels"):
        kvkey.Identity.from_model_dir(plain, revision="r1", overrides={"rope_scaling": deep}, **ARGS)


def test_config_larger_than_the_limit_is_refused_before_reading(plain):
    with open(plain / "config.json", "r+b") as f:
        f.truncate(16 * 1024 * 1024 + 1)  # sparse
    with pytest.raises(kvkey.InputError, match=r"config\.json: larger than the 16777216-byte limit"):
        kvkey.Identity.from_model_dir(plain, revision="r1", **ARGS)


@pytest.mark.parametrize("text, key", [
    ('"rope_theta": 1e400', "rope_theta"),
    ('"rope_scaling": {"factor": -7E+1000, "rope_type": "linear"}', "rope_scaling.factor"),
    ('"rope_scaling": {"mrope_section": [1, 2, 3, 9e999]}', "rope_scaling.mrope_section[3]"),
    ('"vocab_size": 2e308', "vocab_size"),
])
def test_number_out_of_range_in_config_is_an_input_error(plain, text, key):
    (plain / "config.json").write_text(json.dumps(LLAMA)[:-1] + ", " + text + "}")
    with pytest.raises(kvkey.InputError) as e:
        kvkey.Identity.from_model_dir(plain, revision="r1", **ARGS)
    assert str(e.value).endswith(f"config.json: {key}: number out of range"), str(e.value)


def test_number_out_of_range_in_overrides_is_an_input_error(plain):
    with pytest.raises(kvkey.InputError, match=r"overrides: rope_scaling\.factor: number out of range"):
        kvkey.Identity.from_model_dir(plain, revision="r1", overrides={"rope_scaling": {"factor": 10 ** 400}}, **ARGS)
    with pytest.raises(kvkey.InputError, match=r"overrides: rope_theta: number out of range"):
        kvkey.Identity.from_model_dir(plain, revision="r1", overrides={"rope_theta": 1e400}, **ARGS)
    with pytest.raises(kvkey.InputError, match=r"overrides: rope_scaling\.mrope_section\[1\]: number out of range"):
        kvkey.Identity.from_model_dir(plain, revision="r1",
                                      overrides={"rope_scaling": {"mrope_section": [16, -float("inf")]}}, **ARGS)
    with pytest.raises(kvkey.InputError, match=r"overrides: text_config\.rope_theta: not a number"):
        kvkey.Identity.from_model_dir(plain, revision="r1", overrides={"text_config": {"rope_theta": float("nan")}},
                                      **ARGS)
    cycle = {}
    cycle["self"] = [1, 2]
    cycle["self"].append(cycle["self"])
    with pytest.raises(kvkey.InputError, match=r"overrides: self(\[2\])+: nested deeper than 64 levels"):
        kvkey.Identity.from_model_dir(plain, revision="r1", overrides=cycle, **ARGS)
    with pytest.raises(TypeError):  # not JSON at all: a type error, as json.dumps says
        kvkey.Identity.from_model_dir(plain, revision="r1", overrides={"rope_theta": {1, 2}}, **ARGS)


def test_index_shards_in_subdirectories_are_in_the_fingerprint(plain):
    (plain / "shards").mkdir()
    (plain / "shards" / "part-1.safetensors").write_bytes(os.urandom(100))
    (plain / "model.safetensors.index.json").write_text(json.dumps(
        {"weight_map": {"a": "model.safetensors", "b": "shards/part-1.safetensors"}}))
    i = kvkey.Identity.from_model_dir(plain, revision="r1", **ARGS)
    assert i.model.weights_fingerprint == manifest(plain, ["model.safetensors", "shards/part-1.safetensors"])
    (plain / "shards" / "part-1.safetensors").write_bytes(os.urandom(100))
    assert kvkey.Identity.from_model_dir(plain, revision="r1", **ARGS).model.weights_fingerprint != \
        i.model.weights_fingerprint


@pytest.mark.parametrize("entry, why", [
    ("../elsewhere.safetensors", "'..' component"),
    ("/etc/hostname", "absolute path"),
    ("escape/elsewhere.safetensors", "outside the model directory"),
])
def test_index_entries_leaving_the_directory_are_refused(plain, tmp_path, entry, why):
    (tmp_path / "elsewhere.safetensors").write_bytes(b"x")
    os.symlink(tmp_path, plain / "escape")
    index = plain / "model.safetensors.index.json"
    index.write_text(json.dumps({"weight_map": {"lm_head.weight": entry}}))
    with pytest.raises(kvkey.InputError) as e:
        kvkey.Identity.from_model_dir(plain, revision="r1", **ARGS)
    assert f"{index}: weight_map.lm_head.weight: '{entry}'" in str(e.value)
    assert why in str(e.value)


def test_cache_link_through_a_symlinked_directory_is_hashed_not_trusted(hf_snapshot, tmp_path):
    root, snap = hf_snapshot
    genuine = os.readlink(snap / "model.safetensors").split("/")[-1]
    (tmp_path / "x" / "y" / "z").mkdir(parents=True)
    os.symlink(tmp_path / "x" / "y" / "z", snap / "detour")
    (tmp_path / "x" / "blobs").mkdir()
    (tmp_path / "x" / "blobs" / genuine).write_bytes(b"planted")
    os.remove(snap / "model.safetensors")
    os.symlink(f"detour/../../blobs/{genuine}", snap / "model.safetensors")
    i = kvkey.Identity.from_model_dir(snap, **ARGS)
    assert i.model.weights_fingerprint == manifest(snap, ["model.safetensors"])  # the planted bytes, hashed
    line = hashlib.sha256(b"planted").hexdigest() + "  model.safetensors\n"
    assert i.model.weights_fingerprint == hashlib.sha256(line.encode()).digest()


@pytest.mark.parametrize("revision, why", [
    ("main\x00evil", "revision: byte 4 is a control character"),
    ("main\t", "revision: byte 4 is a control character"),
    ("../../../../etc", "has a '..' component"),
    ("/tmp", "absolute path"),
])
def test_revisions_that_escape_refs_are_refused(hf_snapshot, revision, why):
    root, snap = hf_snapshot
    for where in (root, snap):
        with pytest.raises(kvkey.InputError, match=re.escape(why)):
            kvkey.Identity.from_model_dir(where, revision=revision, **ARGS)


def test_fp8_is_resolved_for_the_platform_as_vllm_resolves_it(plain):
    cuda = kvkey.Identity.from_model_dir(plain, revision="r1", **dict(ARGS, kv_dtype="fp8"))
    mi300 = kvkey.Identity.from_model_dir(plain, revision="r1", gpu_arch="gfx942:sramecc+:xnack-",
                                          **dict(ARGS, kv_dtype="fp8"))
    assert cuda.kv.dtype == kvkey.KvDtype.fp8_e4m3
    assert mi300.kv.dtype == kvkey.KvDtype.fp8_e4m3fnuz
    assert kvkey.KeyNamespace(cuda).root != kvkey.KeyNamespace(mi300).root
    assert kvkey.kv_dtype_from_engine("fp8", gpu_arch="gfx942") == kvkey.KvDtype.fp8_e4m3fnuz
    assert kvkey.kv_dtype_from_engine("fp8", gpu_arch="gfx950") == kvkey.KvDtype.fp8_e4m3
    assert kvkey.kv_dtype_from_engine("float8_e5m2fnuz") == kvkey.KvDtype.fp8_e5m2fnuz


def test_quantized_kv_needs_its_layout(plain):
    for name in ("int8", "int4", kvkey.KvDtype.int8, "uint8"):
        with pytest.raises(kvkey.InputError, match="quant layout") as e:
            kvkey.Identity.from_model_dir(plain, revision="r1", **dict(ARGS, kv_dtype=name))
        assert e.value.field == "kv.quant"
    with pytest.raises(kvkey.InputError, match="model's dtype") as e:
        kvkey.Identity.from_model_dir(plain, revision="r1", **dict(ARGS, kv_dtype=8))
    assert e.value.field == "quant_scale_dtype"
    for policy, dtype in ((8, kvkey.KvDtype.int8), (4, kvkey.KvDtype.int4)):
        i = kvkey.Identity.from_model_dir(plain, revision="r1", quant_scale_dtype="bfloat16",
                                          **dict(ARGS, kv_dtype=policy))
        assert i.kv.dtype == dtype
        q = i.kv.quant
        assert (q.scheme, q.group_size, q.scale_dtype, q.zero_point) == \
            ("per_token_head_asym", i.kv.head_dim, kvkey.KvDtype.bf16, True)
    quant = kvkey.Quant(scheme="per_token", group_size=32, scale_dtype="fp16")
    i = kvkey.Identity.from_model_dir(plain, revision="r1", quant=quant, **dict(ARGS, kv_dtype="int8"))
    assert i.kv.quant == quant
    assert kvkey.Identity.from_model_dir(plain, revision="r1", **ARGS).kv.quant.scheme == "none"
