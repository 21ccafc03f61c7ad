"""Regression tests for hostile and careless arguments (issue 16, the binding's part).

Each test names the defect it covers. The rules they pin down (docs/python.md,
"Arguments"): every byte-string parameter reads the logical bytes of any buffer
(strides included) and refuses str where only bytes are meant; every parameter
is checked, with its name, before a C++ conversion; references into an
Identity keep their owner alive; reprs quote and escape strings.
"""

import copy
import hashlib
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

import kvkey
from kvkey.compat import lmdeploy as lm
from conftest import PROBE_PROMPT, in_fresh_interpreter, make_identity

STRIDED = np.frombuffer(b"user-42!user-43!", np.uint8)[::2]  # logical bytes b"ue-2ue-3"
REVERSED = np.frombuffer(b"abcdefgh", np.uint8)[::-1]  # logical bytes b"hgfedcba"


# ---- defect 2: references into an Identity --------------------------------------------------

def test_adapter_reference_outlives_its_reset_in_a_fresh_interpreter():
    # The repro aborted with "double free detected"; run it where a crash cannot take pytest down.
    code = (
        "import kvkey\n"
        "i = kvkey.Identity()\n"
        "i.adapter = kvkey.Adapter('A' * 200, b'\\x11' * 32)\n"
        "a = i.adapter\n"
        "i.adapter = None\n"
        "assert a.name == 'A' * 200, a.name[:20]\n"
        "a.name = 'X' * 300\n"
        "i.adapter = kvkey.Adapter('B' * 200, b'\\x22' * 32)\n"
        "b = i.adapter\n"
        "i.adapter = kvkey.Adapter('C' * 5, b'\\x33' * 32)\n"
        "assert b.name == 'C' * 5 or b.name == 'B' * 200\n"
        "print(a.name == 'X' * 300, i.adapter.name)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env=dict(os.environ))
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["True", "CCCCC"]


def test_adapter_reference_is_live_while_attached_and_detached_after_reset():
    i = kvkey.Identity()
    i.adapter = kvkey.Adapter("A" * 200, b"\x11" * 32)
    a = i.adapter
    a.name = "renamed"
    assert i.adapter.name == "renamed"  # live while attached
    i.adapter = None
    assert a.name == "renamed"  # still readable, now on its own
    a.name = "X" * 300
    assert i.adapter is None
    fp = a.weights_fingerprint
    assert fp == b"\x11" * 32


def test_assigning_an_adapter_copies_it():
    a = kvkey.Adapter("first", b"\x01" * 32)
    i = kvkey.Identity()
    i.adapter = a
    a.name = "changed later"
    assert i.adapter.name == "first"


@pytest.mark.parametrize("part", ["model", "kv", "shard", "adapter"])
def test_a_part_keeps_its_identity_alive(part):
    i = make_identity()
    i.adapter = kvkey.Adapter("lora", b"\x05" * 32)
    ref = getattr(i, part)
    del i
    import gc

    gc.collect()
    assert "Identity" not in repr(ref) and repr(ref).startswith(type(ref).__name__ + "(")
    if part == "model":
        assert ref.name == "Qwen2.5-0.5B-Instruct"
    quant = kvkey.Identity().kv.quant  # a part of a part of a temporary
    gc.collect()
    assert quant.scheme == "none"


def test_copies_of_identities_do_not_share_the_adapter():
    a = make_identity()
    a.adapter = kvkey.Adapter("lora", b"\x05" * 32)
    for b in (a.copy(), copy.copy(a), copy.deepcopy(a), kvkey.KeyNamespace(a).identity):
        b.adapter.name = "other"
        assert a.adapter.name == "lora"


# ---- defect 3: byte strings -----------------------------------------------------------------

def test_fingerprint_reads_the_logical_bytes_of_strided_buffers():
    assert kvkey.fingerprint(STRIDED) == hashlib.sha256(b"ue-2ue-3").digest()
    assert kvkey.fingerprint(REVERSED) == hashlib.sha256(b"hgfedcba").digest()
    assert kvkey.fingerprint(memoryview(b"abcdef")[::-2]) == hashlib.sha256(b"fdb").digest()
    two_d = np.arange(12, dtype=np.uint8).reshape(3, 4).T  # Fortran-ordered view
    assert kvkey.fingerprint(two_d) == hashlib.sha256(two_d.tobytes()).digest()


def test_salt_extras_and_extra_identity_read_the_logical_bytes(ns):
    assert ns.block_hashes(PROBE_PROMPT, salt=STRIDED) == ns.block_hashes(PROBE_PROMPT, salt=b"ue-2ue-3")
    assert ns.block_hashes(PROBE_PROMPT, salt=REVERSED) == ns.block_hashes(PROBE_PROMPT, salt=b"hgfedcba")
    assert ns.first_parent(REVERSED) == ns.first_parent(b"hgfedcba")
    assert (ns.block_hashes(PROBE_PROMPT, extras=[(0, 5, STRIDED)])
            == ns.block_hashes(PROBE_PROMPT, extras=[(0, 5, b"ue-2ue-3")]))
    assert (lm.build_prefix_block_hashes(PROBE_PROMPT, 64, REVERSED)
            == lm.build_prefix_block_hashes(PROBE_PROMPT, 64, b"hgfedcba"))


def test_digest_parameters_read_the_logical_bytes(ns):
    h = ns.block_hashes(PROBE_PROMPT)[0]
    doubled = np.frombuffer(bytes(b for x in h for b in (x, 0)), np.uint8)[::2]
    assert ns.store_key(doubled) == ns.store_key(h)
    assert ns.store_key(np.frombuffer(h[::-1], np.uint8)[::-1]) == ns.store_key(h)
    i = kvkey.Identity()
    i.model.weights_fingerprint = doubled
    assert i.model.weights_fingerprint == h


def test_verify_and_store_key_take_strided_memoryviews(ns):
    h = ns.block_hashes(PROBE_PROMPT)[0]
    kv = bytes(range(100))
    header = ns.seal(h, kv)
    spread = bytes(b for x in header for b in (x, 0))
    assert ns.verify(memoryview(spread)[::2], h, kv).ok
    assert ns.verify(header, h, memoryview(bytes(b for x in kv for b in (x, 0)))[::2]).ok  # a strided payload
    assert ns.store_key(memoryview(bytes(b for x in h for b in (x, 0)))[::2]) == ns.store_key(h)
    v = ns.verify(memoryview(spread)[1::2], h, kv)  # all zeros: a bad header is a verdict
    assert (v.ok, v.reason) == (False, "malformed")


def test_str_is_refused_where_bytes_are_meant(ns):
    h = ns.block_hashes(PROBE_PROMPT)[0]
    with pytest.raises(TypeError, match="block_hash must be 32 bytes"):
        ns.store_key(h.hex())
    with pytest.raises(TypeError, match="header must be bytes-like, not str"):
        ns.verify("x" * 1024, h, 1)
    with pytest.raises(TypeError, match="weights_fingerprint"):
        kvkey.Adapter("a", "0" * 32)


# ---- defect 4: reusable_prefix fails closed ---------------------------------------------------

@pytest.mark.parametrize("bad", [["malformed", "malformed"], [b"\0" * 1024], [1, 2], [-1], [2**70], [None],
                                 [True, 1.0], [np.float64(1.0)], [np.int64(3)]])
def test_reusable_prefix_refuses_anything_but_bools_01_and_verdicts(ns, bad):
    with pytest.raises(TypeError, match=r"results\[\d+\] must be a bool, 0 or 1, or a Verdict"):
        ns.reusable_prefix(bad, 1)
    with pytest.raises(TypeError, match=r"results\[\d+\] must be a bool, 0 or 1, or a Verdict"):
        kvkey.reusable_prefix(bad, 1, 64)


def test_reusable_prefix_names_the_refused_int(ns):
    with pytest.raises(TypeError, match=r"results\[1\] must be .*, not the int 2$"):
        ns.reusable_prefix([1, 2], 1)


def test_reusable_prefix_takes_bools_numpy_bools_and_verdicts(ns):
    h = ns.block_hashes(PROBE_PROMPT)[0]
    ok = ns.verify(ns.seal(h, b"x"), h, b"x")
    assert ns.reusable_prefix([True, ok, np.bool_(True), False], 1).blocks == 3
    assert ns.reusable_prefix(np.array([True, True, False]), 1).blocks == 2


def test_reusable_prefix_takes_the_ints_stores_return(ns):
    # redis-py's exists() per key, a pipeline's results, numpy integer arrays
    assert ns.reusable_prefix([1, 1, 0, 1], 1).blocks == 2
    assert ns.reusable_prefix([1, np.int64(1), np.uint8(1), 0], 1).blocks == 3
    assert ns.reusable_prefix(np.array([1, 1, 1, 0]), 1).blocks == 3
    assert kvkey.reusable_prefix([1, 1, 1, 1], 2, 64).tokens == 128
    assert ns.reusable_prefix([0, 1], 1).blocks == 0


# ---- defects 5 and 8: paths -------------------------------------------------------------------

def test_fingerprint_file_refuses_nul(tmp_path):
    f = tmp_path / "w"
    f.write_bytes(b"data")
    with pytest.raises(ValueError, match="path.*NUL"):
        kvkey.fingerprint_file(str(f) + "\0zzz")
    with pytest.raises(ValueError, match="path.*NUL"):
        kvkey.fingerprint_file(os.fsencode(str(f)) + b"\0zzz")


def test_fingerprint_file_takes_bytes_and_pathlike(tmp_path):
    name = tmp_path / "w\udcff.bin"  # not UTF-8 on disk: os.fsencode gives the byte 0xff
    name.write_bytes(b"data")
    want = hashlib.sha256(b"data").digest()
    assert kvkey.fingerprint_file(os.fsencode(str(name))) == want
    assert kvkey.fingerprint_file(str(name)) == want
    assert kvkey.fingerprint_file(pathlib.Path(name)) == want

    class P:
        def __fspath__(self):
            return os.fsencode(str(name))

    assert kvkey.fingerprint_file(P()) == want
    with pytest.raises(TypeError, match="path"):
        kvkey.fingerprint_file(12)


# ---- defect 7: no pybind11 cast errors --------------------------------------------------------

@pytest.mark.parametrize("begin,end,exc,field", [
    (-1, 5, kvkey.InputError, "extras[0].token_begin"),
    (0, 2**64, kvkey.InputError, "extras[0].token_end"),
    (1.5, 5, TypeError, "extras[0].token_begin"),
    (0, "5", TypeError, "extras[0].token_end"),
])
def test_extras_positions_are_checked_with_their_name(ns, begin, end, exc, field):
    with pytest.raises(exc) as e:
        ns.block_hashes(PROBE_PROMPT, extras=[(begin, end, b"k")])
    assert field in str(e.value)


@pytest.mark.parametrize("value,exc", [(-1, kvkey.InputError), (2**70, kvkey.InputError), (1.0, TypeError),
                                       ("3", TypeError)])
def test_max_tokens_is_checked_with_its_name(ns, value, exc):
    with pytest.raises(exc, match="max_tokens"):
        ns.reusable_prefix([True], 1, max_tokens=value)
    with pytest.raises(exc, match="max_tokens"):
        kvkey.reusable_prefix([True], 1, 64, value)


@pytest.mark.parametrize("call,field", [
    (lambda ns: ns.seal(b"\0" * 32, -1), "payload"),
    (lambda ns: ns.verify(b"", b"\0" * 32, 2**64), "payload"),
    (lambda ns: ns.reusable_prefix([True], -2), "shards_per_block"),
    (lambda ns: kvkey.reusable_prefix([True], 1, 2**32), "block_size"),
    (lambda ns: kvkey.Shard(tp_size=-1), "shard.tp_size"),
    (lambda ns: kvkey.Kv(block_size=2**32), "kv.block_size"),
    (lambda ns: kvkey.Model(weights_epoch=-1), "model.weights_epoch"),
    (lambda ns: kvkey.Quant(group_size=0.5), "kv.quant.group_size"),
    (lambda ns: lm.build_prefix_block_hashes([1], -1), "block_size"),
    (lambda ns: lm.build_store_key("", "M", 2**32, b"\0" * 32), "kv_head_rank"),
    (lambda ns: lm.kv_head_rank(-1, 2, 2), "tp_rank"),
    (lambda ns: lm.lookup_keys("", "M", -1, []), "shard_keys"),
    (lambda ns: kvkey.KeyNamespace(ns.identity, single_tenant=None), "single_tenant"),
    (lambda ns: kvkey.KeyNamespace("identity"), "identity"),
    (lambda ns: ns.block_hashes(PROBE_PROMPT, previous=5), "previous"),
    (lambda ns: ns.block_hashes(PROBE_PROMPT, extras=7), "extras"),
    (lambda ns: ns.reusable_prefix(3, 1), "results"),
])
def test_every_parameter_is_checked_with_its_name(ns, call, field):
    with pytest.raises((TypeError, ValueError)) as e:
        call(ns)
    assert field in str(e.value)


@pytest.mark.parametrize("path,value", [
    ("kv.block_size", -1), ("kv.block_size", 2**32), ("kv.num_layers", 1.5), ("shard.tp_rank", None),
    ("model.weights_epoch", 2**64), ("kv.quant.group_size", "4"), ("kv.mla", 1), ("kv.quant.zero_point", None),
])
def test_setters_check_their_field(path, value):
    i = kvkey.Identity()
    *parents, name = path.split(".")
    target = i
    for p in parents:
        target = getattr(target, p)
    with pytest.raises((TypeError, ValueError)) as e:
        setattr(target, name, value)
    assert path in str(e.value)


# ---- defect 9: bytes assigned to string fields ------------------------------------------------

@pytest.mark.parametrize("path", ["tenant", "model.name", "model.revision", "kv.layout", "kv.quant.scheme",
                                  "adapter.name"])
def test_string_fields_refuse_bytes(path):
    i = kvkey.Identity()
    i.adapter = kvkey.Adapter("a", b"\0" * 32)
    *parents, name = path.split(".")
    target = i
    for p in parents:
        target = getattr(target, p)
    with pytest.raises(TypeError, match=path.replace(".", r"\.") + " must be str, not bytes"):
        setattr(target, name, b"\xff\xfe")
    repr(i)  # still readable
    getattr(target, name)


def test_string_parameters_refuse_bytes_and_lone_surrogates():
    with pytest.raises(TypeError, match="model.name must be str"):
        kvkey.Model(name=b"x")
    with pytest.raises(TypeError, match="name must be str"):
        kvkey.Adapter(b"x", b"\0" * 32)
    with pytest.raises(TypeError, match="model_name must be str"):
        lm.build_store_key("", b"M", 0, b"\0" * 32)
    with pytest.raises(TypeError, match="key must be str"):
        lm.parse_key(b"M@tp_rank:0@group:0@" + b"0" * 64)
    with pytest.raises(ValueError, match="model.name"):
        kvkey.Identity().model.name = "bad \udcff"


# ---- defect 11: dtype names, reprs, copies, equality -------------------------------------------

def test_kv_dtype_from_string_rejects_unset_like_the_cli():
    with pytest.raises(kvkey.InputError, match="unknown dtype 'unset'"):
        kvkey.kv_dtype_from_string("unset")
    with pytest.raises(TypeError, match="name must be str"):
        kvkey.kv_dtype_from_string(b"fp16")
    assert kvkey.kv_dtype_from_string("fp16") == kvkey.KvDtype.fp16


@pytest.mark.parametrize("make", [kvkey.Model, kvkey.Kv, kvkey.Quant, kvkey.Shard,
                                  lambda: kvkey.Adapter("a", b"\1" * 32), kvkey.Identity])
def test_parts_have_reprs_copies_and_value_equality(make):
    a = make()
    assert repr(a).startswith(type(a).__name__ + "(")
    assert eval(repr(a), vars(kvkey)) == a  # the repr is the constructor call
    for b in (copy.copy(a), copy.deepcopy(a)):
        assert b == a and not (b != a) and b is not a
    assert a != "something else"
    with pytest.raises(TypeError):
        hash(a)  # mutable: not hashable


def test_identity_equality_is_field_by_field():
    assert kvkey.Identity() == kvkey.Identity()
    a, b = make_identity(), make_identity()
    assert a == b
    b.kv.quant.zero_point = True
    assert a != b
    b = make_identity()
    b.adapter = kvkey.Adapter("x", b"\0" * 32)
    assert a != b
    a.adapter = kvkey.Adapter("x", b"\0" * 32)
    assert a == b
    assert kvkey.KeyNamespace(a).identity == a
    c = make_identity(shard__tp_rank=0, shard__tp_size=2)
    assert c != make_identity()  # the shard is part of the value


def test_reprs_quote_and_escape_strings():
    i = make_identity(model__name="Qwen kv.dtype=fp32")
    assert "name='Qwen kv.dtype=fp32'" in repr(i)
    i.model.name = "evil\u202eedoc\x85\x1b[31m"
    r = repr(i)
    assert "\u202e" not in r and "\x85" not in r and "\x1b" not in r
    assert r"'evil\u202eedoc\x85\x1b[31m'" in r
    assert eval(repr(i), vars(kvkey)) == i
    ns = kvkey.KeyNamespace(make_identity(tenant="t-1"))
    assert "tenant='t-1'" in repr(ns)


# ---- issue 19, defect 10: FIFOs where a file is expected ------------------------------------

REFUSE = (
    "import sys, kvkey\n"
    "try:\n"
    "    {call}\n"
    "except kvkey.IoError as e:\n"
    "    print('IoError:', e)\n"
)


@pytest.mark.parametrize("call", ["kvkey.fingerprint_file(sys.argv[1])",
                                  "kvkey.fingerprint_file(sys.argv[1].encode())",
                                  "kvkey.TenantSecret.from_file(sys.argv[1])"])
def test_a_fifo_is_refused_at_once_not_waited_on(tmp_path, call):
    fifo = tmp_path / "input.fifo"
    os.mkfifo(fifo, 0o600)
    out = in_fresh_interpreter(REFUSE.format(call=call), fifo)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.startswith("IoError: [kvkey.io_error] "), out.stdout
    assert str(fifo) in out.stdout
    assert "not a regular file (a FIFO)" in out.stdout


def test_a_device_is_refused_before_it_is_read(tmp_path):
    link = tmp_path / "weights.safetensors"
    os.symlink("/dev/zero", link)
    with pytest.raises(kvkey.IoError, match=r"not a regular file \(a character device\)"):
        kvkey.fingerprint_file(link)
    with pytest.raises(kvkey.IoError, match=r"not a regular file \(a character device\)"):
        kvkey.TenantSecret.from_file("/dev/zero")
