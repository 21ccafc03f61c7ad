"""The identity model: attributes mirror the C++ members and assign in place."""

import copy
import hashlib
import json
import os
import pathlib

import pytest

import kvkey
from conftest import make_identity


def test_defaults_mirror_the_cpp_members():
    i = kvkey.Identity()
    assert i.tenant == ""
    assert (i.model.name, i.model.revision, i.model.weights_epoch, i.model.weights_fingerprint) == ("", "", 0, None)
    assert i.kv.dtype == kvkey.KvDtype.unset
    q = i.kv.quant
    assert (q.scheme, q.group_size, q.scale_dtype, q.zero_point, q.scales_fingerprint) == ("none", 0, None, False, None)
    assert (i.kv.block_size, i.kv.num_layers, i.kv.num_kv_heads, i.kv.head_dim, i.kv.layout, i.kv.mla) == (
        0, 0, 0, 0, "", False)
    assert (i.shard.tp_size, i.shard.tp_rank, i.shard.pp_size, i.shard.pp_rank) == (1, 0, 1, 0)
    assert i.adapter is None


def test_nested_assignment_modifies_the_identity_in_place():
    i = kvkey.Identity()
    i.tenant = "a"
    i.model.revision = "rev1"
    i.model.weights_epoch = 3
    i.kv.dtype = "fp8_e4m3"
    i.kv.quant.group_size = 64
    i.kv.quant.scheme = "per_token_asym"
    i.shard.tp_size = 8
    fp = kvkey.fingerprint(b"adapter weights")
    i.adapter = kvkey.Adapter("name", fp)
    i.adapter.name = "renamed"
    assert i.tenant == "a"
    assert i.model.revision == "rev1"
    assert i.model.weights_epoch == 3
    assert i.kv.dtype == kvkey.KvDtype.fp8_e4m3
    assert i.kv.quant.group_size == 64
    assert i.kv.quant.scheme == "per_token_asym"
    assert i.shard.tp_size == 8
    assert i.adapter.name == "renamed"
    assert i.adapter.weights_fingerprint == fp
    # A reference to a nested part stays live.
    kv = i.kv
    kv.block_size = 32
    assert i.kv.block_size == 32
    i.adapter = None
    assert i.adapter is None


def test_nested_assignment_reaches_the_namespace():
    a = make_identity()
    b = make_identity()
    b.kv.quant.scheme = "per_tensor_static"
    b.kv.quant.scale_dtype = kvkey.KvDtype.fp32
    b.kv.quant.scales_fingerprint = kvkey.fingerprint(b"scales")
    ns_a, ns_b = kvkey.KeyNamespace(a), kvkey.KeyNamespace(b)
    assert ns_b.identity.kv.quant.scheme == "per_tensor_static"
    assert ns_a.root != ns_b.root


def test_dtype_accepts_enum_and_name():
    i = kvkey.Identity()
    i.kv.dtype = kvkey.KvDtype.bf16
    assert i.kv.dtype == kvkey.KvDtype.bf16
    for name in ("fp32", "fp16", "bf16", "fp8_e4m3", "fp8_e5m2", "int8", "int4", "uint8", "uint4", "fp4_e2m1",
                 "fp8_e4m3fnuz", "fp8_e5m2fnuz"):
        i.kv.dtype = name
        assert i.kv.dtype.name == name
        assert kvkey.kv_dtype_from_string(name) == i.kv.dtype
    i.kv.quant.scale_dtype = "fp16"
    assert i.kv.quant.scale_dtype == kvkey.KvDtype.fp16
    i.kv.quant.scale_dtype = None
    assert i.kv.quant.scale_dtype is None
    with pytest.raises(kvkey.InputError, match="unknown dtype 'fp9'"):
        i.kv.dtype = "fp9"
    with pytest.raises(TypeError):
        i.kv.dtype = 3.5


def test_keyword_constructors():
    fp = kvkey.fingerprint(b"w")
    i = kvkey.Identity(
        tenant="t",
        model=kvkey.Model(name="M", revision="r", weights_epoch=2, weights_fingerprint=fp),
        kv=kvkey.Kv(dtype="int4", quant=kvkey.Quant(scheme="per_token_asym", group_size=32, scale_dtype="fp16",
                                                    zero_point=True),
                    block_size=16, num_layers=4, num_kv_heads=8, head_dim=128, layout="L", mla=False),
        shard=kvkey.Shard(tp_size=4, tp_rank=1),
        adapter=kvkey.Adapter("lora", fp),
    )
    assert i.model.weights_fingerprint == fp
    assert i.kv.quant.scale_dtype == kvkey.KvDtype.fp16
    assert i.shard.tp_rank == 1
    ns = kvkey.KeyNamespace(i)
    assert (ns.slice.kv_head_begin, ns.slice.kv_head_end) == (2, 4)
    assert "adapter=Adapter('lora', bytes.fromhex(" in repr(i)


def test_copies_are_independent():
    a = make_identity()
    b = a.copy()
    c = copy.deepcopy(a)
    b.kv.dtype = "int8"
    c.model.weights_epoch = 9
    assert a.kv.dtype == kvkey.KvDtype.fp16
    assert a.model.weights_epoch == 0


def test_digest_fields_take_32_bytes():
    i = kvkey.Identity()
    i.model.weights_fingerprint = bytearray(32)
    assert i.model.weights_fingerprint == bytes(32)
    i.model.weights_fingerprint = memoryview(b"\x01" * 32)
    assert i.model.weights_fingerprint == b"\x01" * 32
    with pytest.raises(kvkey.InputError, match="must be 32 bytes, got 31"):
        i.model.weights_fingerprint = bytes(31)
    with pytest.raises(TypeError, match="not str; use bytes.fromhex"):
        kvkey.Adapter("a", "00" * 32)
    with pytest.raises(TypeError):
        kvkey.Adapter("a", 12)


def test_validated_names_the_field():
    with pytest.raises(kvkey.IdentityError) as e:
        make_identity(kv__num_kv_heads=0).validated()
    assert e.value.field == "kv.num_kv_heads"
    assert isinstance(e.value, ValueError)
    assert str(e.value).startswith("[kvkey.identity_error] kv.num_kv_heads: ")
    assert make_identity(tenant="").validated(single_tenant=True).tenant == kvkey.single_tenant_name


def test_fingerprints(tmp_path):
    import hashlib

    data = b"adapter weights, version 1"
    assert kvkey.fingerprint(data) == hashlib.sha256(data).digest()
    assert kvkey.fingerprint("text") == hashlib.sha256(b"text").digest()
    f = tmp_path / "weights.bin"
    blob = bytes(range(256)) * 9000  # > 1 MiB: more than one read chunk
    f.write_bytes(blob)
    assert kvkey.fingerprint_file(f) == hashlib.sha256(blob).digest()
    assert kvkey.fingerprint_file(str(f)) == hashlib.sha256(blob).digest()
    with pytest.raises(OSError) as e:
        kvkey.fingerprint_file(tmp_path / "missing")
    assert isinstance(e.value, kvkey.IoError) and isinstance(e.value, ValueError)
    assert "cannot open" in str(e.value)


def _changed(value, leaf):
    """A value of the same kind as `value` (the field `leaf`) that differs from it."""
    if leaf.endswith("dtype") and value is None:
        return kvkey.KvDtype.fp16
    if isinstance(value, bool):
        return not value
    if isinstance(value, kvkey.KvDtype):
        return kvkey.KvDtype.bf16 if value != kvkey.KvDtype.bf16 else kvkey.KvDtype.fp16
    if isinstance(value, int):
        return value + 1
    if isinstance(value, str):
        return value + "-x"
    if value is None or isinstance(value, bytes):
        return bytes([0x5A]) * 32 if value != bytes([0x5A]) * 32 else bytes(32)
    raise AssertionError(f"no changed value for {value!r}")


def test_repr_shows_every_salient_field():
    # tests/data/identity_fields.txt is the library's field list (kvkey::identity_field_names(),
    # checked by the C++ tests): a field the visitor gains must show in repr. Changing any one
    # field changes the repr, and the repr evaluates back to an equal identity.
    path = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "data", "identity_fields.txt")
    with open(path) as f:
        fields = [line.strip() for line in f if line.strip() and not line.startswith("#")]
    ns = {name: getattr(kvkey, name) for name in ("Identity", "Model", "Kv", "Quant", "Shard", "Adapter", "KvDtype")}
    for field in fields:
        base = make_identity()
        base.adapter = kvkey.Adapter("lora", kvkey.fingerprint(b"w")) if field.startswith("adapter.") else None
        changed = base.copy()
        if field == "adapter":
            changed.adapter = kvkey.Adapter("lora", kvkey.fingerprint(b"w"))
        else:
            *parents, leaf = field.split(".")
            owner = changed
            for p in parents:
                owner = getattr(owner, p)
            setattr(owner, leaf, _changed(getattr(owner, leaf), leaf))
        assert changed != base, field
        assert repr(changed) != repr(base), f"repr(Identity) does not show {field}"
        assert eval(repr(changed), {"bytes": bytes}, ns) == changed, field

def test_identity_files_are_read_as_the_engine_reads_them(tmp_path):
    examples = pathlib.Path(__file__).resolve().parents[2] / "examples" / "identities"
    i = kvkey.Identity.from_file(examples / "lora.json")  # adapter.weights_file, relative to the file
    assert i.adapter.weights_fingerprint == hashlib.sha256((examples / "adapter-weights.txt").read_bytes()).digest()
    text = (examples / "qwen-fp16.json").read_text()
    assert kvkey.Identity.from_json(text) == kvkey.Identity.from_json(text.encode()) == kvkey.Identity.from_file(
        examples / "qwen-fp16.json")
    assert kvkey.KeyNamespace(kvkey.Identity.from_json(text)).root.hex() == kvkey.KeyNamespace(
        kvkey.Identity.from_file(examples / "qwen-fp16.json")).root.hex()


def test_identity_files_keep_their_policy(tmp_path):
    examples = pathlib.Path(__file__).resolve().parents[2] / "examples" / "identities"
    data = json.loads((examples / "qwen-fp16.json").read_text())
    data.pop("tenant", None)
    data["policy"] = "single_tenant"
    path = tmp_path / "single.json"
    path.write_text(json.dumps(data))
    for read in (kvkey.Identity.from_file(path), kvkey.Identity.from_json(path.read_text())):
        ns = kvkey.KeyNamespace(read)  # the file's policy, as every reader of identity files takes it
        assert ns.single_tenant
        assert ns.payload_check == "required"
        assert kvkey.KeyNamespace(read.copy()).single_tenant
        with pytest.raises(kvkey.IdentityError):
            kvkey.KeyNamespace(read, single_tenant=False)  # told otherwise: the tenant is then required
    plain = kvkey.KeyNamespace(kvkey.Identity.from_file(examples / "qwen-fp16.json"))
    assert not plain.single_tenant and plain.payload_check == "required"


def test_for_rank_covers_pipeline_stages():
    i = make_identity()
    i.kv.num_layers = 4
    i.kv.num_kv_heads = 4
    i.shard = kvkey.Shard(tp_size=2, tp_rank=0, pp_size=2, pp_rank=1)
    ns = kvkey.KeyNamespace(i)
    ranks = ns.all_ranks()
    assert [(r.identity.shard.tp_rank, r.identity.shard.pp_rank) for r in ranks] == [(0, 0), (1, 0), (0, 1), (1, 1)]
    assert [ns.for_rank(r).root for r in range(4)] == [r.root for r in ranks]
    assert ns.for_rank(1, pp_rank=1).root == ranks[3].root
    block = bytes(32)
    assert len({r.store_key(block) for r in ranks}) == 4
    with pytest.raises(kvkey.IdentityError):
        ns.for_rank(4)


@pytest.mark.parametrize("text, field", [
    ("{} {}", "identity_file"),
    ('{"a": NaN}', "identity_file"),
    ("[" * 40 + "]" * 40, "identity_file"),
    ('{"kv": {"dtype": "fp16", "dtype": "bf16"}}', "kv.dtype"),
    ('{"zeta": 1, "alpha": 2}', "alpha"),
    ('{"tenant": "t"}', "model"),
    ('{"tenant": "t", "model": {"name": "m", "revision": "r", "weights_epoch": -0}}', "model.weights_epoch"),
])
def test_identity_file_errors_name_the_field(text, field):
    with pytest.raises(kvkey.InputError) as e:
        kvkey.Identity.from_json(text)
    assert e.value.field == field
    assert e.value.id == "kvkey.input_error"


def test_an_unreadable_identity_file_is_an_io_error(tmp_path):
    with pytest.raises(kvkey.IoError):
        kvkey.Identity.from_file(tmp_path / "missing.json")
