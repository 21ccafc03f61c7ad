"""Stored values (seal_value / open_value / open_values) and block geometry
(payload_size, dtype_itemsize, dtype_bits, kv_dtype_from_engine)."""

import sys

import numpy as np
import pytest

import kvkey
from conftest import PROBE_PROMPT, make_identity

E = kvkey.envelope_size


@pytest.fixture(params=["plain", "keyed"])
def any_ns(request, identity):
    if request.param == "plain":
        return kvkey.KeyNamespace(identity)
    return kvkey.KeyNamespace(identity, secret=kvkey.TenantSecret(b"k" * 32))


@pytest.fixture
def blocks(any_ns):
    return any_ns.block_hashes(PROBE_PROMPT)


# ---- seal_value / open_value -----------------------------------------------------------------

def test_value_is_the_envelope_then_the_payload(any_ns, blocks):
    payload = bytes(range(256)) * 20
    value = any_ns.seal_value(blocks[0], payload)
    assert isinstance(value, bytes)
    assert len(value) == E + len(payload)
    assert value[E:] == payload
    assert any_ns.verify(value[:E], blocks[0], payload).ok


def test_open_value_returns_a_zero_copy_view_of_the_verified_payload(any_ns, blocks):
    payload = b"kv bytes " * 100
    value = bytearray(any_ns.seal_value(blocks[0], payload))
    opened = any_ns.open_value(value, blocks[0])
    assert opened.verdict.ok and opened.ok and bool(opened)
    assert isinstance(opened.payload, memoryview)
    assert opened.payload.readonly
    assert bytes(opened.payload) == payload
    value[E] ^= 0xFF  # the view is of the caller's object, not a copy
    assert opened.payload[0] == value[E]
    assert "OpenedValue(verdict=Verdict(ok=True" in repr(opened)


def test_open_value_keeps_the_value_alive(any_ns, blocks):
    opened = any_ns.open_value(any_ns.seal_value(blocks[0], b"abc" * 500), blocks[0])
    assert bytes(opened.payload) == b"abc" * 500
    before = sys.getrefcount(opened.payload.obj)
    assert before >= 2


def test_open_value_of_numpy_values(any_ns, blocks):
    kv = np.arange(4096, dtype=np.float16)
    value = np.frombuffer(any_ns.seal_value(blocks[1], kv), dtype=np.uint8)
    opened = any_ns.open_value(value, blocks[1])
    assert opened.ok
    assert np.array_equal(np.frombuffer(opened.payload, dtype=np.float16), kv)
    strided = np.repeat(value, 2)[::2]  # not contiguous: read through a copy
    assert bytes(any_ns.open_value(strided, blocks[1]).payload) == kv.tobytes()


@pytest.mark.parametrize("size,reason,field", [
    (0, "malformed", "envelope.size"),
    (E - 1, "malformed", "envelope.size"),
    (E, "size_mismatch", "payload_size"),
    (E + 99, "size_mismatch", "payload_size"),
])
def test_open_value_of_truncated_and_empty_values(any_ns, blocks, size, reason, field):
    value = any_ns.seal_value(blocks[0], b"x" * 100)
    opened = any_ns.open_value(value[:size], blocks[0])
    assert (opened.verdict.reason, opened.verdict.field) == (reason, field)
    assert opened.payload is None
    assert not opened


def test_open_value_of_oversized_values(any_ns, blocks):
    value = any_ns.seal_value(blocks[0], b"x" * 100)
    opened = any_ns.open_value(value + b"\0", blocks[0])
    assert opened.verdict.reason == "size_mismatch"
    assert opened.payload is None


def test_open_value_rejects_bit_flips_other_blocks_and_non_kvkey_values(any_ns, blocks):
    value = any_ns.seal_value(blocks[0], b"y" * 300)
    for at in (0, 9, 20, 60, 100, 500, E, len(value) - 1):
        bad = bytearray(value)
        bad[at] ^= 1
        opened = any_ns.open_value(bytes(bad), blocks[0])
        assert not opened.verdict.ok and opened.payload is None, at
    assert any_ns.open_value(value, blocks[1]).verdict.reason == "block_mismatch"
    assert any_ns.open_value(b"\0" * 2000, blocks[0]).verdict.reason == "malformed"
    assert any_ns.open_value(b"", blocks[0]).verdict.reason == "malformed"


def test_values_of_another_namespace_are_rejected(blocks):
    other = kvkey.KeyNamespace(make_identity(kv__dtype="bf16"))
    value = other.seal_value(blocks[0], b"z" * 64)
    mine = kvkey.KeyNamespace(make_identity())
    opened = mine.open_value(value, blocks[0])
    assert (opened.verdict.reason, opened.verdict.field) == ("identity_mismatch", "kv.dtype")


def test_seal_value_arguments_are_checked(any_ns, blocks):
    with pytest.raises(TypeError, match="payload must be bytes-like"):
        any_ns.seal_value(blocks[0], "text")
    with pytest.raises(TypeError, match="payload must be bytes-like"):
        any_ns.seal_value(blocks[0], 100)
    with pytest.raises(kvkey.InputError, match="block_hash must be 32 bytes"):
        any_ns.seal_value(b"short", b"x")
    with pytest.raises(TypeError, match="value must be bytes-like"):
        any_ns.open_value("text", blocks[0])


def test_seal_value_reads_numpy_arrays_in_place(any_ns, blocks):
    kv = np.arange(1000, dtype=np.float32).reshape(10, 100)
    assert any_ns.seal_value(blocks[0], kv)[E:] == kv.tobytes()
    assert any_ns.seal_value(blocks[0], kv.T)[E:] == kv.T.tobytes()  # logical (C) order


# ---- open_values -------------------------------------------------------------------------------

def test_open_values_is_open_value_for_each(any_ns, blocks):
    payloads = [bytes([i]) * (100 + i) for i in range(6)]
    values = [any_ns.seal_value(h, p) for h, p in zip(blocks, payloads)]
    values[2] = values[2][:-1]            # truncated
    values[4] = values[3]                 # another block's value
    opened = any_ns.open_values(values, blocks[:6])
    assert [o.verdict.reason for o in opened] == ["ok", "ok", "size_mismatch", "ok", "block_mismatch", "ok"]
    assert [None if o.payload is None else bytes(o.payload) for o in opened] == [
        payloads[0], payloads[1], None, payloads[3], None, payloads[5]]
    assert opened[0].payload.obj is values[0]


def test_open_values_arguments_are_checked(any_ns, blocks):
    with pytest.raises(kvkey.InputError, match="values has 1 items and block_hashes 2"):
        any_ns.open_values([b""], blocks[:2])
    with pytest.raises(TypeError, match=r"values\[1\] must be bytes-like"):
        any_ns.open_values([b"", 5], blocks[:2])
    with pytest.raises(TypeError, match=r"block_hashes\[0\]"):
        any_ns.open_values([b""], ["x"])
    assert any_ns.open_values([], []) == []


# ---- payload_size ------------------------------------------------------------------------------

def test_payload_size_dense():
    # make_identity: fp16, block 64, 24 layers, 2 KV heads, head_dim 64
    assert kvkey.KeyNamespace(make_identity()).payload_size == 2 * 24 * 2 * 64 * 64 * 2
    assert kvkey.KeyNamespace(make_identity(kv__dtype="fp32")).payload_size == 2 * 24 * 2 * 64 * 64 * 4
    assert kvkey.KeyNamespace(make_identity(kv__dtype="fp8_e4m3")).payload_size == 2 * 24 * 2 * 64 * 64


def test_payload_size_sharded():
    tp2 = make_identity(shard__tp_size=2, shard__tp_rank=1)
    assert kvkey.KeyNamespace(tp2).payload_size == 2 * 24 * 1 * 64 * 64 * 2
    pp4 = make_identity(shard__pp_size=4, shard__pp_rank=3)
    assert kvkey.KeyNamespace(pp4).payload_size == 2 * 6 * 2 * 64 * 64 * 2
    tp8 = make_identity(shard__tp_size=8, shard__tp_rank=7)  # replicas of one head each
    assert kvkey.KeyNamespace(tp8).payload_size == 2 * 24 * 1 * 64 * 64 * 2


def test_payload_size_mla():
    mla = make_identity(kv__mla=True, kv__num_kv_heads=1, kv__head_dim=576, kv__num_layers=61, kv__dtype="bf16",
                        shard__tp_size=8, shard__tp_rank=2)
    assert kvkey.KeyNamespace(mla).payload_size == 61 * 576 * 64 * 2


def test_payload_size_is_none_with_quantization_scales():
    q = make_identity(kv__dtype="int8")
    q.kv.quant = kvkey.Quant(scheme="per_token_asym", group_size=64, scale_dtype="fp16", zero_point=True)
    assert kvkey.KeyNamespace(q).payload_size is None
    int4 = make_identity(kv__dtype="int4")  # no scales: packed two per byte
    assert kvkey.KeyNamespace(int4).payload_size == 2 * 24 * 2 * 64 * 64 // 2


# ---- dtypes ------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype,size", [
    ("fp32", 4), ("fp16", 2), ("bf16", 2), ("fp8_e4m3", 1), ("int8", 1), ("uint8", 1),
    (kvkey.KvDtype.bf16, 2), ("bfloat16", 2), ("torch.float16", 2), ("float8_e5m2", 1),
])
def test_dtype_itemsize(dtype, size):
    assert kvkey.dtype_itemsize(dtype) == size


@pytest.mark.parametrize("dtype", ["int4", "uint4", "fp4_e2m1", kvkey.KvDtype.int4])
def test_dtype_itemsize_refuses_4_bit_types(dtype):
    with pytest.raises(kvkey.InputError, match="4 bits: it has no whole-byte item size"):
        kvkey.dtype_itemsize(dtype)
    assert kvkey.dtype_bits(dtype) == 4


def test_dtype_itemsize_refuses_unknown_and_unset():
    with pytest.raises(kvkey.InputError, match="unset"):
        kvkey.dtype_itemsize(kvkey.KvDtype.unset)
    with pytest.raises(kvkey.InputError, match="unknown kv dtype"):
        kvkey.dtype_itemsize("float64")
    with pytest.raises(TypeError, match="dtype must be"):
        kvkey.dtype_itemsize(2)


@pytest.mark.parametrize("name,dtype", [
    ("bfloat16", "bf16"), ("torch.bfloat16", "bf16"), ("bf16", "bf16"),
    ("float16", "fp16"), ("half", "fp16"), ("torch.float16", "fp16"), ("torch.half", "fp16"),
    ("float32", "fp32"), ("float", "fp32"), ("torch.float32", "fp32"),
    ("fp8", "fp8_e4m3"), ("fp8_e4m3", "fp8_e4m3"), ("fp8_e5m2", "fp8_e5m2"),
    ("float8_e4m3fn", "fp8_e4m3"), ("float8_e5m2", "fp8_e5m2"), ("torch.float8_e4m3fn", "fp8_e4m3"),
    ("int8", "int8"), ("int4", "int4"), ("uint8", "uint8"), ("fp4_e2m1", "fp4_e2m1"),
    (8, "int8"), (4, "int4"), (np.int64(8), "int8"),
    (np.dtype("float16"), "fp16"), (np.dtype("float32"), "fp32"),
    (np.float16, "fp16"), (np.float32, "fp32"), (np.int8, "int8"), (np.uint8, "uint8"),
    (np.uint8(8), "int8"), (np.uint32(4), "int4"),
])
def test_kv_dtype_from_engine(name, dtype):
    got = kvkey.kv_dtype_from_engine(name)
    assert isinstance(got, kvkey.KvDtype)
    assert got == getattr(kvkey.KvDtype, dtype)


def test_kv_dtype_from_engine_refuses_auto_and_unknown_names():
    with pytest.raises(kvkey.InputError, match="auto.*resolve it first"):
        kvkey.kv_dtype_from_engine("auto")
    with pytest.raises(kvkey.InputError, match=r"unknown kv dtype \"float64\" \(accepted: .*bfloat16.*fp8"):
        kvkey.kv_dtype_from_engine("float64")
    assert kvkey.kv_dtype_from_engine("torch.float8_e4m3fnuz") == kvkey.KvDtype.fp8_e4m3fnuz
    with pytest.raises(kvkey.InputError, match="model's dtype"):
        kvkey.kv_dtype_from_engine(0)
    with pytest.raises(kvkey.InputError, match="quant_policy 3"):
        kvkey.kv_dtype_from_engine(3)
    with pytest.raises(TypeError, match="name must be a str"):
        kvkey.kv_dtype_from_engine(True)
    with pytest.raises(TypeError, match="name must be a str"):
        kvkey.kv_dtype_from_engine(b"bf16")


def test_engine_names_fill_an_identity():
    i = make_identity()
    i.kv.dtype = kvkey.kv_dtype_from_engine("torch.bfloat16")
    assert kvkey.KeyNamespace(i).payload_size == 2 * 24 * 2 * 64 * 64 * kvkey.dtype_itemsize("bfloat16")
