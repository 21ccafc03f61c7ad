"""Random Python objects for every parameter of the binding (Hypothesis).

For each parameter, a small oracle written here in plain Python says what the
binding must do with an object: accept it as a given value, or refuse it with a
TypeError or a ValueError (kvkey.Error and UnicodeError are ValueErrors) that
names the parameter. The binding is then called with the object and, when the
oracle accepts, with the oracle's plain value; the two outcomes must agree. Any
other exception (RuntimeError from a pybind11 cast, BufferError, SystemError),
a crash, or a result that differs from the plain value's is a failure.
"""

import hashlib
import operator
import os

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import kvkey
from kvkey.compat import lmdeploy as lm
from conftest import PROBE_PROMPT, make_identity

pytestmark = pytest.mark.filterwarnings("ignore:In future, it will be an error for 'np.bool_':DeprecationWarning")
SETTINGS = settings(max_examples=40, deadline=None, derandomize=True, database=None,
                    suppress_health_check=list(HealthCheck))
U32, U64 = 2**32, 2**64
NS = kvkey.KeyNamespace(make_identity())
SIZE_NS = kvkey.KeyNamespace(make_identity(), payload_check="size_only")  # seal/verify by payload size
H = NS.block_hashes(PROBE_PROMPT)
TOKENS = PROBE_PROMPT[:130]  # two full blocks and a tail
DTYPES = {d.name for d in kvkey.KvDtype.__members__.values()} - {"unset"}


class MayRefuse(Exception):
    """The binding may raise `kind` or give the result of the plain value."""

    def __init__(self, kind, plain):
        super().__init__(kind.__name__)
        self.kind, self.plain = kind, plain


class Refused(Exception):
    """The oracle's verdict: the binding must raise `kind` (TypeError or ValueError)."""

    def __init__(self, kind):
        super().__init__(kind.__name__)
        self.kind = kind


# ---- the oracles: what each kind of parameter accepts, as a plain value ------------------------

def logical_bytes(x):
    if isinstance(x, str) or not _has_buffer(x):
        raise Refused(TypeError)
    try:
        return bytes(memoryview(x))
    except (TypeError, ValueError, NotImplementedError):  # e.g. numpy object arrays
        raise Refused(TypeError)


def _has_buffer(x):
    try:
        memoryview(x).release()
        return True
    except TypeError:
        return False
    except (ValueError, NotImplementedError):
        return True


def payload_bytes(x):
    # An int is a payload size: refused (InputError) by a namespace that requires payload digests.
    if isinstance(x, int):
        raise Refused(ValueError)
    return logical_bytes(x)


def text_or_bytes(x):
    if isinstance(x, str):
        return utf8(x)
    return logical_bytes(x)


def utf8(x):
    try:
        return x.encode("utf-8")
    except UnicodeEncodeError:
        raise Refused(ValueError)


def text(x):
    if not isinstance(x, str):
        raise Refused(TypeError)
    utf8(x)
    return x


def digest(x):
    b = logical_bytes(x)
    if len(b) != 32:
        raise Refused(ValueError)
    return b


def optional_digest(x):
    return None if x is None else digest(x)


def uint(bits):
    def check(x):
        if isinstance(x, float) or not hasattr(type(x), "__index__"):
            raise Refused(TypeError)
        try:
            v = operator.index(x)
        except TypeError:
            raise Refused(TypeError)
        if not 0 <= v < 2**bits:
            raise Refused(ValueError)
        return v
    return check


def flag(x):
    if not isinstance(x, (bool, np.bool_)):
        raise Refused(TypeError)
    return bool(x)


def dtype(x):
    if isinstance(x, kvkey.KvDtype):
        return x
    if not isinstance(x, str):
        raise Refused(TypeError)
    utf8(x)
    if x not in DTYPES:
        raise Refused(ValueError)
    return getattr(kvkey.KvDtype, x)


def optional_dtype(x):
    return None if x is None else dtype(x)


def iterable(item):
    def check(x):
        if isinstance(x, (str, bytes)):
            raise Refused(TypeError)
        try:
            items = list(iter(x))
        except TypeError:
            raise Refused(TypeError)
        return [item(i) for i in items]
    return check


def optional(inner):
    return lambda x: None if x is None else inner(x)


def result_entry(x):
    if isinstance(x, (bool, np.bool_)):
        return bool(x)
    if isinstance(x, kvkey.Verdict):
        return x
    # the 0/1 a store returns (redis-py's exists(), numpy integers); no float, no other int
    if not isinstance(x, (float, np.floating)) and hasattr(type(x), "__index__") and operator.index(x) in (0, 1):
        return bool(operator.index(x))
    raise Refused(TypeError)


def extra(x):
    if isinstance(x, str) or not hasattr(type(x), "__getitem__") or isinstance(x, dict):
        raise Refused(TypeError)
    try:
        n = len(x)
    except TypeError:
        raise Refused(TypeError)
    if n != 3:
        raise Refused(TypeError)
    return (uint(64)(x[0]), uint(64)(x[1]), text_or_bytes(x[2]))


def tokens(limit, block=64):
    """Every item must be an int; ids in the hashed full blocks must lie in [0, limit).
    An id out of range in the ignored partial tail may be refused or ignored."""
    def check(x):
        if isinstance(x, np.ndarray):
            if x.ndim != 1:
                raise Refused(ValueError)
        elif isinstance(x, np.generic):  # a numpy scalar is a buffer of 0 dimensions
            raise Refused(ValueError)
        if isinstance(x, (str, dict, set)) or not hasattr(type(x), "__getitem__") and not isinstance(x, np.ndarray):
            raise Refused(TypeError)
        try:
            items = list(x)
        except TypeError:
            raise Refused(TypeError)
        values, bad_type, bad_range = [], False, False
        hashed = len(items) // block * block
        for k, t in enumerate(items):
            try:
                if isinstance(t, (float, np.floating)):
                    raise TypeError
                v = operator.index(t)
            except TypeError:
                bad_type = True
                continue
            if not 0 <= v < limit and (k < hashed or not -2**63 <= v < 2**63):
                bad_range = True
            values.append(v if 0 <= v < limit else 0)
        if bad_type or bad_range:
            raise Refused(TypeError if bad_type and not bad_range else ValueError if not bad_type else Exception)
        if any(not 0 <= v < limit for v in map(operator.index, items)):
            raise MayRefuse(ValueError, values)
        return values
    return check


def secret_bytes(x):
    b = logical_bytes(x)
    if not 32 <= len(b) <= 256:
        raise Refused(ValueError)
    return b


def path(x):
    try:
        p = os.fspath(x)
    except TypeError:
        raise Refused(TypeError)
    if "\0" in p if isinstance(p, str) else b"\0" in p:
        raise Refused(ValueError)
    return p


# ---- random objects ---------------------------------------------------------------------------

def _views(b):
    a = np.frombuffer(b, np.uint8)
    return [a[::2], a[::-1], memoryview(b)[::-1], bytearray(b), memoryview(b), a.astype(np.int32), a.view(np.int8)]


any_text = st.text(st.characters(blacklist_categories=()), max_size=20)  # surrogates and controls included
scalars = st.one_of(
    st.none(), st.booleans(), st.integers(), st.integers(-2**70, 2**70), st.floats(), any_text,
    st.binary(max_size=70), st.complex_numbers(), st.just(object()), st.just(...),
    st.binary(max_size=80).flatmap(lambda b: st.sampled_from(_views(b))),
    st.sampled_from([np.int64(5), np.uint32(7), np.float64(1.0), np.bool_(True), np.bool_(False), np.int8(-1),
                     np.zeros((2, 2), np.uint8), np.array(3), np.array(["a"], dtype=object), kvkey.KvDtype.fp16,
                     kvkey.Model(), kvkey.Kv(), kvkey.Quant(), kvkey.Shard(), kvkey.Identity(),
                     kvkey.Adapter("a", bytes(32)), NS.verify(b"", H[0], 1), NS.verify(NS.seal(H[0], b"x"), H[0], b"x"),
                     H[0], "fp16", "unset", "fp8_e4m3"]),
)
objects = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=5), st.tuples(inner, inner, inner), st.dictionaries(st.text(max_size=2), inner, max_size=2),
    st.lists(inner, max_size=4).map(tuple)), max_leaves=6)

near = {
    "uint": st.one_of(st.integers(-3, 3), st.sampled_from([U32 - 1, U32, U64 - 1, U64, -U64]),
                      st.integers(0, 2**70)),
    "digest": st.binary(min_size=30, max_size=34).flatmap(lambda b: st.sampled_from(_views(b) + [b, b.hex()])),
    "bytes": st.one_of(any_text, st.binary(max_size=40).flatmap(lambda b: st.sampled_from(_views(b) + [b]))),
    "text": any_text,
    "tokens": st.one_of(st.lists(st.integers(-2, U32 + 2), max_size=140), st.lists(st.integers(0, 9), min_size=64,
                                                                                  max_size=140).map(np.array)),
    "list": st.lists(st.sampled_from([True, False, np.bool_(True), H[0], bytearray(H[1]), 1, "x", None,
                                      NS.verify(b"", H[0], 1)]), max_size=4),
    "extras": st.lists(st.tuples(st.integers(-1, 200), st.integers(-1, 200), st.sampled_from(["k", b"k", 1, None])),
                       max_size=3),
    "path": st.one_of(any_text, st.binary(max_size=20), st.just("/etc/hostname"), st.just(b"/etc/hostname")),
    "dtype": st.sampled_from(sorted(DTYPES) + ["unset", "FP16", "", "fp16\0", kvkey.KvDtype.unset, 2]),
}


# ---- the parameters ---------------------------------------------------------------------------

def setter(obj_factory, attr):
    """Assigns x to obj.attr and reads it back."""
    def apply(x):
        obj = obj_factory()
        target = obj
        *parents, name = attr.split(".")
        for p in parents:
            target = getattr(target, p)
        setattr(target, name, x)
        return getattr(target, name)
    return apply


def ident_with_adapter():
    i = make_identity()
    i.adapter = kvkey.Adapter("lora", bytes(32))
    return i


def _lm_tokens(x):
    return lm.build_prefix_block_hashes(x, 64)


# (name in errors, oracle, near kind, call)
PARAMS = [
    ("data", text_or_bytes, "bytes", kvkey.fingerprint),
    ("salt", optional(text_or_bytes), "bytes", lambda x: NS.block_hashes(TOKENS, salt=x)),
    ("salt", optional(text_or_bytes), "bytes", NS.first_parent),
    ("extras", optional(iterable(extra)), "extras", lambda x: NS.block_hashes(TOKENS, extras=x)),
    ("previous", optional(iterable(digest)), "list", lambda x: NS.block_hashes(TOKENS, previous=x)),
    ("previous", optional(iterable(digest)), "list", lambda x: NS.extend_block_hashes(x, TOKENS)),
    ("token", tokens(U32), "tokens", NS.block_hashes),
    ("token", tokens(U64), "tokens", _lm_tokens),
    ("block_hash", digest, "digest", NS.store_key),
    ("block_hash", digest, "digest", NS.object_hash),
    ("block_hash", digest, "digest", lambda x: NS.seal(x, b"kv")),
    ("payload", payload_bytes, "bytes", lambda x: NS.verify(NS.seal(H[0], x), H[0], x).reason),
    ("payload", uint(64), "uint", lambda x: SIZE_NS.seal(H[0], x)),
    ("block_hash", digest, "digest", lambda x: NS.verify(NS.seal(H[0], b"kv"), x, b"kv").reason),
    ("payload", uint(64), "uint", lambda x: SIZE_NS.verify(SIZE_NS.seal(H[0], 10), H[0], x).reason),
    ("header", logical_bytes, "bytes", lambda x: (lambda v: (v.ok, v.reason, v.field))(NS.verify(x, H[0], b"kv"))),
    ("results", iterable(result_entry), "list", lambda x: NS.reusable_prefix(x, 1)),
    ("results", iterable(result_entry), "list", lambda x: kvkey.reusable_prefix(x, 1, 16)),
    ("shards_per_block", uint(64), "uint", lambda x: NS.reusable_prefix([True] * 6, x)),
    ("block_size", uint(32), "uint", lambda x: kvkey.reusable_prefix([True] * 3, 1, x)),
    ("max_tokens", optional(uint(64)), "uint", lambda x: NS.reusable_prefix([True] * 3, 1, x)),
    ("identity", lambda x: x if isinstance(x, kvkey.Identity) else (_ for _ in ()).throw(Refused(TypeError)),
     "text", lambda x: kvkey.KeyNamespace(x).root),
    ("single_tenant", flag, "uint", lambda x: kvkey.KeyNamespace(make_identity(tenant=""), single_tenant=x).root),
    ("name", lambda x: (dtype(text(x)), x)[1], "dtype", kvkey.kv_dtype_from_string),
    ("path", path, "path", kvkey.fingerprint_file),
    ("token", tokens(U32), "tokens", lambda x: NS.chain().append(x)),
    ("salt", optional(text_or_bytes), "bytes", lambda x: NS.chain(salt=x).append(TOKENS)),
    ("threads", uint(32), "uint", lambda x: NS.block_hashes_batch([TOKENS], threads=x)),
    ("sequences", lambda x: [tokens(U32)(t) for t in iterable(lambda t: t)(x)], "list",
     lambda x: NS.block_hashes_batch(x, threads=1)),
    ("secret", secret_bytes, "bytes", lambda x: kvkey.KeyNamespace(make_identity(), secret=kvkey.TenantSecret(x)).root),
    ("secret", lambda x: None if x is None else x if isinstance(x, kvkey.TenantSecret)
     else (_ for _ in ()).throw(Refused(TypeError)), "list",
     lambda x: kvkey.KeyNamespace(make_identity(), secret=x).root),
    # identity fields, by assignment and by constructor
    ("tenant", text, "text", setter(kvkey.Identity, "tenant")),
    ("model.name", text, "text", setter(kvkey.Identity, "model.name")),
    ("model.revision", text, "text", setter(kvkey.Identity, "model.revision")),
    ("model.weights_epoch", uint(64), "uint", setter(kvkey.Identity, "model.weights_epoch")),
    ("model.weights_fingerprint", optional_digest, "digest", setter(kvkey.Identity, "model.weights_fingerprint")),
    ("kv.dtype", dtype, "dtype", setter(kvkey.Identity, "kv.dtype")),
    ("kv.quant.scheme", text, "text", setter(kvkey.Identity, "kv.quant.scheme")),
    ("kv.quant.group_size", uint(32), "uint", setter(kvkey.Identity, "kv.quant.group_size")),
    ("kv.quant.scale_dtype", optional_dtype, "dtype", setter(kvkey.Identity, "kv.quant.scale_dtype")),
    ("kv.quant.zero_point", flag, "uint", setter(kvkey.Identity, "kv.quant.zero_point")),
    ("kv.quant.scales_fingerprint", optional_digest, "digest", setter(kvkey.Identity, "kv.quant.scales_fingerprint")),
    ("kv.block_size", uint(32), "uint", setter(kvkey.Identity, "kv.block_size")),
    ("kv.num_layers", uint(32), "uint", setter(kvkey.Identity, "kv.num_layers")),
    ("kv.num_kv_heads", uint(32), "uint", setter(kvkey.Identity, "kv.num_kv_heads")),
    ("kv.head_dim", uint(32), "uint", setter(kvkey.Identity, "kv.head_dim")),
    ("kv.layout", text, "text", setter(kvkey.Identity, "kv.layout")),
    ("kv.mla", flag, "uint", setter(kvkey.Identity, "kv.mla")),
    ("shard.tp_size", uint(32), "uint", setter(kvkey.Identity, "shard.tp_size")),
    ("shard.pp_rank", uint(32), "uint", setter(kvkey.Identity, "shard.pp_rank")),
    ("adapter.name", text, "text", setter(ident_with_adapter, "adapter.name")),
    ("adapter.weights_fingerprint", digest, "digest", setter(ident_with_adapter, "adapter.weights_fingerprint")),
    ("model.name", text, "text", lambda x: kvkey.Model(name=x).name),
    ("model.weights_epoch", uint(64), "uint", lambda x: kvkey.Model(weights_epoch=x).weights_epoch),
    ("kv.head_dim", uint(32), "uint", lambda x: kvkey.Kv(head_dim=x).head_dim),
    ("kv.dtype", dtype, "dtype", lambda x: kvkey.Kv(dtype=x).dtype),
    ("kv.mla", flag, "uint", lambda x: kvkey.Kv(mla=x).mla),
    ("kv.quant.scale_dtype", optional_dtype, "dtype", lambda x: kvkey.Quant(scale_dtype=x).scale_dtype),
    ("shard.tp_rank", uint(32), "uint", lambda x: kvkey.Shard(tp_rank=x).tp_rank),
    ("adapter.name", text, "text", lambda x: kvkey.Adapter(x, bytes(32)).name),
    ("adapter.weights_fingerprint", digest, "digest", lambda x: kvkey.Adapter("a", x).weights_fingerprint),
    # compat.lmdeploy
    ("extra_identity", text_or_bytes, "bytes", lambda x: lm.build_prefix_block_hashes(TOKENS, 64, x)),
    ("block_size", uint(32), "uint", lambda x: lm.build_prefix_block_hashes(TOKENS, x)),
    ("previous_hashes", optional(iterable(digest)), "list",
     lambda x: lm.build_prefix_block_hashes(TOKENS, 64, "", x)),
    ("cache_prefix", text, "text", lambda x: lm.build_store_key(x, "M", 0, H[0])),
    ("model_name", text, "text", lambda x: lm.build_store_key("", x, 0, H[0])),
    ("kv_head_rank", uint(32), "uint", lambda x: lm.build_store_key("", "M", x, H[0])),
    ("block_hash", digest, "digest", lambda x: lm.build_store_key("", "M", 0, x)),
    ("tp_rank", uint(32), "uint", lambda x: lm.kv_head_rank(x, 8, 2)),
    ("num_kv_heads", uint(32), "uint", lambda x: lm.shard_key_count(8, x)),
    ("shard_keys", lambda x: uint(32)(x) if uint(32)(x) <= 4096 else (_ for _ in ()).throw(Refused(ValueError)),
     "uint", lambda x: lm.lookup_keys("p", "M", x, H[:2])),
    ("block_hashes", optional(iterable(digest)), "list", lambda x: lm.lookup_keys("p", "M", 2, x)),
    ("key", text, "text", lambda x: repr(lm.parse_key(x))),
    ("key", text, "text", lm.is_legacy_key),
    ("model_name", text, "text", lambda x: lm.purge_pattern("p", x)),
    ("cache_prefix", text, "text", lambda x: lm.purge_glob(x, "M")),
]


def outcome(call, x, extra=()):
    try:
        return ("ok", call(x))
    except (TypeError, ValueError, *extra) as e:  # kvkey.Error, InputError, IoError, UnicodeError are ValueErrors
        return ("error", e)


EXTRA = {}  # exceptions allowed beyond TypeError and ValueError, by parameter (none so far)


def expect_refused(name, x, got, kind):
    assert got[0] == "error", f"{name}={x!r} was accepted, giving {got[1]!r}"
    assert isinstance(got[1], kind), f"{name}={x!r}: expected {kind.__name__}, got {got[1]!r}"
    label = "token" if name == "token" else name.split(".")[-1]
    assert label in str(got[1]), f"{name}={x!r}: the error does not name the parameter: {got[1]}"


@pytest.mark.parametrize("name,oracle,kind,call", PARAMS, ids=[f"{i}-{p[0]}" for i, p in enumerate(PARAMS)])
@SETTINGS
@given(data=st.data())
def test_random_objects(name, oracle, kind, call, data):
    x = data.draw(st.one_of(objects, near[kind]), label=name)
    extra = EXTRA.get(name, ())
    got = outcome(call, x, extra)
    try:
        plain = oracle(x)
    except Refused as r:
        expect_refused(name, x, got, r.kind)
        return
    except MayRefuse as r:
        if got[0] == "error":
            expect_refused(name, x, got, r.kind)
            return
        plain = r.plain
    want = outcome(call, plain, extra)
    assert got[0] == want[0], f"{name}={x!r}: {got[1]!r}, but with the plain value {plain!r}: {want[1]!r}"
    if got[0] == "ok":
        assert got[1] == want[1], f"{name}={x!r}: {got[1]!r} != {want[1]!r} (plain {plain!r})"
    else:
        assert type(got[1]) is type(want[1]) and str(got[1]) == str(want[1])


@SETTINGS
@given(x=st.one_of(objects, near["bytes"]))
def test_fingerprint_is_sha256_of_the_logical_bytes(x):
    try:
        b = text_or_bytes(x)
    except Refused:
        return
    assert kvkey.fingerprint(x) == hashlib.sha256(b).digest()


@SETTINGS
@given(x=near["tokens"])
def test_token_lists_match_the_int64_buffer_path(x):
    try:
        values = tokens(U32)(x)
    except (Refused, MayRefuse):
        return
    assert NS.block_hashes(x) == NS.block_hashes(np.asarray(values, dtype=np.int64))
