"""KeyNamespace through the binding: chain, keys, envelopes, accounting, errors."""

import array
import bisect
import sys
import threading
import time

import numpy as np
import pytest

import kvkey
from conftest import PROBE_PROMPT, make_identity


def test_block_hashes_are_32_byte_bytes(ns):
    hashes = ns.block_hashes(PROBE_PROMPT)
    assert len(hashes) == 6
    assert all(isinstance(h, bytes) and len(h) == 32 for h in hashes)
    assert len(set(hashes)) == 6
    # A partial tail is ignored.
    assert ns.block_hashes(PROBE_PROMPT + [1, 2, 3]) == hashes
    assert ns.block_hashes(PROBE_PROMPT[:63]) == []


@pytest.mark.parametrize("make", [
    tuple,
    lambda t: np.asarray(t, dtype=np.int32),
    lambda t: np.asarray(t, dtype=np.int64),
    lambda t: np.asarray(t, dtype=np.uint32),
    lambda t: np.asarray(t, dtype=np.uint64),  # not borrowed: per-token path
    lambda t: np.asarray(t, dtype=np.int16),  # not borrowed: per-token path
    lambda t: np.repeat(np.asarray(t, dtype=np.int64), 2)[::2],  # strided: per-token path
    lambda t: array.array("i", t),
    lambda t: array.array("q", t),
    lambda t: [np.int64(x) for x in t],
])
def test_every_token_container_gives_the_list_result(ns, make):
    assert ns.block_hashes(make(PROBE_PROMPT)) == ns.block_hashes(PROBE_PROMPT)


def test_range_and_generator_like_sequences(ns):
    assert ns.block_hashes(range(200)) == ns.block_hashes(list(range(200)))
    assert ns.block_hashes(np.arange(200)) == ns.block_hashes(list(range(200)))


def test_token_range_and_type_errors(ns):
    with pytest.raises(kvkey.InputError, match=r"token 64 is -1, outside \[0, 2\^32\)"):
        ns.block_hashes([0] * 64 + [-1] + [0] * 63)
    with pytest.raises(kvkey.InputError, match="token 1 is 4294967296"):
        ns.block_hashes([0, 2**32] + [0] * 62)
    with pytest.raises(kvkey.InputError, match="token 0 is"):
        ns.block_hashes([2**70] + [0] * 63)
    with pytest.raises(kvkey.InputError, match="token 3 is -7"):
        ns.block_hashes(np.array([0, 0, 0, -7] + [0] * 60, dtype=np.int32))
    with pytest.raises(TypeError, match="token 2 is not an int"):
        ns.block_hashes([1, 2, 3.0] + [0] * 61)
    with pytest.raises(TypeError):
        ns.block_hashes(12)
    with pytest.raises(ValueError, match="one-dimensional"):
        ns.block_hashes(np.zeros((2, 64), dtype=np.int32))


def test_incremental_hashing_equals_full(ns):
    full = ns.block_hashes(PROBE_PROMPT)
    for k in range(len(full) + 1):
        assert ns.block_hashes(PROBE_PROMPT, previous=full[:k]) == full
        assert ns.extend_block_hashes(full[:k], PROBE_PROMPT) == full
        assert ns.extend_block_hashes(full[:k], np.asarray(PROBE_PROMPT, dtype=np.int32)) == full
    grown = []
    for n in range(0, len(PROBE_PROMPT) + 1, 50):
        grown = ns.extend_block_hashes(grown, PROBE_PROMPT[:n])
    assert ns.extend_block_hashes(grown, PROBE_PROMPT) == full
    with pytest.raises(kvkey.InputError, match="3 previous hashes but only 2 full blocks"):
        ns.extend_block_hashes(full[:3], PROBE_PROMPT[:128])
    with pytest.raises(kvkey.InputError, match="must be 32 bytes"):
        ns.extend_block_hashes([b"short"], PROBE_PROMPT)


def test_salt_and_extras(ns):
    plain = ns.block_hashes(PROBE_PROMPT)
    salted = ns.block_hashes(PROBE_PROMPT, salt="tenant-secret-salt")
    assert all(a != b for a, b in zip(plain, salted))
    assert ns.block_hashes(PROBE_PROMPT, salt=b"tenant-secret-salt") == salted
    assert ns.block_hashes(PROBE_PROMPT, salt="") == plain
    assert ns.first_parent() == ns.root
    assert ns.first_parent("x") != ns.root
    # An extra key on tokens [70, 80) changes block 1 and everything after it.
    extra = ns.block_hashes(PROBE_PROMPT, extras=[(70, 80, "image-sha")])
    assert extra[0] == plain[0]
    assert all(a != b for a, b in zip(plain[1:], extra[1:]))
    assert ns.block_hashes(PROBE_PROMPT, extras=[(70, 80, b"image-sha")]) == extra
    with pytest.raises(kvkey.InputError, match="token_begin must be below token_end"):
        ns.block_hashes(PROBE_PROMPT, extras=[(80, 70, "x")])
    with pytest.raises(TypeError, match=r"extras\[0\] must be a \(token_begin, token_end, key\) tuple, got 2 items"):
        ns.block_hashes(PROBE_PROMPT, extras=[(1, 2)])


def test_store_key_accepts_any_32_bytes(ns):
    h = ns.block_hashes(PROBE_PROMPT)[2]
    key = ns.store_key(h)
    assert key.startswith("kvk4/team-a/p/Qwen2.5-0.5B-Instruct/e0/")
    assert key.startswith(ns.key_prefix) and key.startswith(ns.tenant_prefix)
    assert len(key) == len(ns.key_prefix) + 64
    assert ns.store_key(bytearray(h)) == key
    assert ns.store_key(memoryview(h)) == key
    assert ns.store_key(np.frombuffer(h, dtype=np.uint8)) == key
    assert key.endswith(ns.object_hash(h).hex())
    with pytest.raises(TypeError, match="not str; use bytes.fromhex"):
        ns.store_key(h.hex())
    with pytest.raises(kvkey.InputError, match="got 33"):
        ns.store_key(h + b"\0")


PAYLOAD = bytes(range(256)) * 16  # 4096 bytes


def test_seal_and_verify(ns):
    h = ns.block_hashes(PROBE_PROMPT)
    header = ns.seal(h[2], PAYLOAD)
    assert isinstance(header, bytes) and len(header) == kvkey.envelope_size == 1024
    v = ns.verify(header, h[2], PAYLOAD)
    assert (v.ok, v.reason, v.field, bool(v)) == (True, "ok", "", True)
    flipped = bytearray(PAYLOAD)
    flipped[100] ^= 1
    cases = [
        (ns.verify(header, h[3], PAYLOAD), "block_mismatch", "block_hash"),
        (ns.verify(header, h[2], PAYLOAD + b"\0"), "size_mismatch", "payload_size"),
        (ns.verify(header[:-1], h[2], PAYLOAD), "malformed", "envelope.size"),
        (ns.verify(b"X" + header[1:], h[2], PAYLOAD), "malformed", "envelope.magic"),
        (ns.verify(b"", h[2], PAYLOAD), "malformed", "envelope.size"),
        (ns.verify(bytearray(header), h[2], PAYLOAD[:-1]), "size_mismatch", "payload_size"),
        (ns.verify(header, h[2], flipped), "payload_mismatch", "payload"),
        (ns.verify(header, h[2], 4096), "payload_mismatch", "payload"),  # size only: the bytes are required
    ]
    for verdict, reason, field in cases:
        assert (verdict.ok, verdict.reason, verdict.field) == (False, reason, field)
        assert not verdict


@pytest.mark.parametrize("path,value,field", [
    ("kv__dtype", "bf16", "kv.dtype"),
    ("model__weights_epoch", 1, "model.weights_epoch"),
    ("tenant", "team-b", "tenant"),
    ("model__revision", "other", "model.revision"),
    ("kv__quant__group_size", 64, "kv.quant.group_size"),
])
def test_foreign_headers_name_the_field(ns, path, value, field):
    changes = {path: value}
    if path == "kv__quant__group_size":
        changes["kv__quant__scheme"] = "per_token_asym"
    other = kvkey.KeyNamespace(make_identity(**changes))
    h_writer = other.block_hashes(PROBE_PROMPT)[1]
    h_reader = ns.block_hashes(PROBE_PROMPT)[1]
    v = ns.verify(other.seal(h_writer, b"0123456789"), h_reader, b"0123456789")
    if field == "kv.quant.group_size":
        assert v.reason == "identity_mismatch" and v.field == "kv.quant.scheme"  # first differing field
    else:
        assert (v.reason, v.field) == ("identity_mismatch", field)
    assert other.store_key(h_writer) != ns.store_key(h_reader)


def test_shard_slices_and_tp_ranks():
    keys = set()
    for rank in range(8):
        ns = kvkey.KeyNamespace(make_identity(shard__tp_size=8, shard__tp_rank=rank))
        keys.add(ns.store_key(ns.block_hashes(PROBE_PROMPT)[0]))
        assert (ns.slice.kv_head_begin, ns.slice.kv_head_end) == (rank // 4, rank // 4 + 1)
    assert len(keys) == 2  # two KV heads, four replicas each: two objects per block
    with pytest.raises(kvkey.IdentityError) as e:
        kvkey.KeyNamespace(make_identity(shard__tp_size=3))
    assert e.value.field == "shard.tp_size"


def test_single_tenant_policy():
    i = make_identity(tenant="")
    with pytest.raises(kvkey.IdentityError) as e:
        kvkey.KeyNamespace(i)
    assert e.value.field == "tenant"
    assert "single_tenant" in str(e.value)
    ns = kvkey.KeyNamespace(i, single_tenant=True)
    assert ns.single_tenant
    assert ns.key_prefix.startswith("kvk4/_single/p/")
    with pytest.raises(kvkey.IdentityError, match="must be empty with single_tenant=True"):
        kvkey.KeyNamespace(make_identity(), single_tenant=True)


def test_namespace_identity_is_a_copy(ns):
    ident = ns.identity
    ident.tenant = "changed"
    assert ns.identity.tenant == "team-a"


def test_reusable_prefix(ns):
    h = ns.block_hashes(PROBE_PROMPT)
    ok = ns.verify(ns.seal(h[0], b"x"), h[0], b"x")
    bad = ns.verify(ns.seal(h[0], b"x"), h[1], b"x")
    # 2 shards per block, block-major; block 2's second shard fails.
    results = [True, ok, True, True, True, bad, True, True]
    p = ns.reusable_prefix(results, 2)
    assert (p.blocks, p.tokens) == (2, 128)
    assert ns.reusable_prefix(results, 2, max_tokens=100) == kvkey.reusable_prefix(results, 2, 64, 100)
    assert ns.reusable_prefix(results, 2, max_tokens=100).blocks == 1
    assert kvkey.reusable_prefix([True, True, False], 1, 16).tokens == 32
    with pytest.raises(kvkey.InputError, match="not a multiple of 2 shards per block"):
        ns.reusable_prefix([True] * 3, 2)


def test_hashing_in_threads_matches_serial(ns):
    prompts = [np.arange(i, i + 64 * 500, dtype=np.int64) % 150000 for i in range(8)]
    expected = [ns.block_hashes(p) for p in prompts]
    results = [None] * len(prompts)

    def work(i):
        results[i] = ns.block_hashes(prompts[i])

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(prompts))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == expected


def other_thread_runs_during(call, base, scale, interval=0.001, max_scale=256):
    """True when another Python thread runs in the middle of call(scale(base, n)).

    If the GIL were held for the whole C++ call, the other thread could only run
    at the edges of a call (a thread switch just before or after it, at most a
    few switch intervals long), never in the middle half of a call that lasts
    many switch intervals.

    Nothing here depends on how fast the machine is: the switch interval is
    lowered, the input is scaled from a measured call (scale(base, n): n times
    the work of base) so that each call lasts at least 50 switch intervals, and
    calls repeat (a bounded number of times) until the other thread is seen in
    the middle of one. On one loaded core the spinner may miss a given call,
    never all of them. `interval` is the switch interval used: a shorter one
    for calls that cannot be made long (a 1 GiB payload is checked in tens of ms).
    """
    old_interval = sys.getswitchinterval()
    sys.setswitchinterval(interval)
    try:
        interval = sys.getswitchinterval()
        min_call = 50 * interval
        # Grow the work until one call lasts 2 * min_call (or max_scale is reached):
        # a rate measured on the small base input alone can be off by its fixed costs.
        n, work = 1, base
        while True:
            start = time.perf_counter()
            call(work)
            took = time.perf_counter() - start
            if took >= 2 * min_call or n >= max_scale:
                break
            n = min(max_scale, max(2 * n, int(n * 2 * min_call / max(took, 1e-6)) + 1))
            work = scale(base, n)

        ticks = []
        stop = threading.Event()

        def spin():  # one tick per 100 us at most: the list stays small
            last = 0.0
            while not stop.is_set():
                now = time.perf_counter()
                if now - last >= 1e-4:
                    ticks.append(now)
                    last = now

        t = threading.Thread(target=spin)
        t.start()
        judged = []
        in_middle = 0
        try:
            for _ in range(50):
                a = time.perf_counter()
                call(work)
                b = time.perf_counter()
                if b - a < min_call:
                    continue  # too short to tell the middle from the edges
                judged.append(b - a)
                quarter = (b - a) / 4
                in_middle = bisect.bisect_left(ticks, b - quarter) - bisect.bisect_right(ticks, a + quarter)
                if in_middle > 0:
                    break
        finally:
            stop.set()
            t.join()
    finally:
        sys.setswitchinterval(old_interval)
    assert judged, f"no call lasted {min_call:.3f} s"
    return in_middle > 0


def test_gil_is_released_while_hashing(ns):
    base = np.arange(1 << 18, dtype=np.int32) % 150000  # 4096 blocks of 64; at most 64 Mtokens
    assert other_thread_runs_during(ns.block_hashes, base, np.tile)


def test_gil_is_released_while_checking_a_payload(ns):
    h = ns.block_hashes(PROBE_PROMPT)[0]
    headers = {}

    def sealed(size):  # sealed before the timed calls, which only verify
        payload = np.zeros(size, dtype=np.uint8)  # zero pages: no memory used, whatever the size
        headers[size] = ns.seal(h, payload)
        return payload

    def verify(payload):
        assert ns.verify(headers[payload.size], h, payload).ok

    base = sealed(4 << 20)
    # Zero pages: up to 4 GiB of address space, no memory; verifying them runs at cache speed.
    assert other_thread_runs_during(verify, base, lambda b, n: sealed(b.size * n), interval=0.0001, max_scale=1024)


def test_payload_buffers_are_read_in_place(ns):
    h = ns.block_hashes(PROBE_PROMPT)[0]
    arr = np.frombuffer(PAYLOAD, dtype=np.uint8).reshape(64, 64)
    header = ns.seal(h, arr)
    assert header == ns.seal(h, PAYLOAD) == ns.seal(h, memoryview(PAYLOAD)) == ns.seal(h, bytearray(PAYLOAD))
    assert ns.verify(header, h, arr.view(np.float16)).ok  # any dtype: the bytes count
    strided = arr[:, ::2]  # not contiguous: read through one copy of its logical bytes
    assert ns.verify(ns.seal(h, np.ascontiguousarray(strided)), h, strided).ok
    assert not ns.verify(ns.seal(h, np.ascontiguousarray(arr[:, 1::2])), h, strided).ok
    with pytest.raises(TypeError, match="bytes-like"):
        ns.seal(h, "text")
    with pytest.raises(kvkey.InputError, match="requires one"):
        ns.seal(h, 4096)  # size only needs the explicit opt-out


def test_size_only_opt_out():
    loose = kvkey.KeyNamespace(make_identity(), payload_check="size_only")
    h = loose.block_hashes(PROBE_PROMPT)[0]
    header = loose.seal(h, 4096)
    assert loose.verify(header, h, 4096).ok
    assert loose.verify(header, h, PAYLOAD).ok
    strict = kvkey.KeyNamespace(make_identity())
    v = strict.verify(header, h, PAYLOAD)
    assert (v.reason, v.field) == ("payload_mismatch", "envelope.integrity_mode")
    with pytest.raises(kvkey.InputError, match="payload_check"):
        kvkey.KeyNamespace(make_identity(), payload_check="sometimes")


def test_numpy_integer_scalars_are_payload_sizes_like_ints():
    # numpy scalars export the buffer protocol; they are still integers, never 1 to 8 bytes of payload.
    loose = kvkey.KeyNamespace(make_identity(), payload_check="size_only")
    h = loose.block_hashes(PROBE_PROMPT)[0]
    for size in (np.int64(4096), np.uint32(4096), np.int32(4096), np.uint64(4096), np.int16(4096)):
        header = loose.seal(h, size)
        assert header == loose.seal(h, 4096)
        assert loose.verify(header, h, size).ok
        assert loose.verify(loose.seal(h, 4096), h, size).ok
    v = loose.verify(loose.seal(h, 8), h, np.int64(8))
    assert v.ok
    v = loose.verify(loose.seal(h, 4096), h, np.int64(8))
    assert (v.reason, v.field) == ("size_mismatch", "payload_size")
    strict = kvkey.KeyNamespace(make_identity())
    with pytest.raises(kvkey.InputError, match="size_only"):
        strict.seal(h, np.int64(8))  # a size, refused as the int 8 is: not sealed as 8 bytes
    with pytest.raises(kvkey.InputError):
        loose.seal(h, np.int64(-1))
    # Arrays, even of one element, are bytes.
    arr = np.arange(4, dtype=np.int64)
    assert strict.verify(strict.seal(h, arr), h, arr.tobytes()).ok
    one = np.array([5], dtype=np.int64)
    assert strict.verify(strict.seal(h, one), h, one.tobytes()).ok
    keyed = kvkey.KeyNamespace(make_identity(), secret=kvkey.TenantSecret(bytes(range(32))))
    kh = keyed.block_hashes(PROBE_PROMPT)[0]
    with pytest.raises(kvkey.InputError, match="keyed"):
        keyed.seal(kh, np.uint32(8))
    v = keyed.verify(keyed.seal(kh, b"12345678"), kh, np.int64(8))
    assert (v.reason, v.field) == ("payload_mismatch", "payload")


def test_glob_escape_makes_a_literal_prefix_for_scan_match():
    assert kvkey.glob_escape("kvk1/team-a/") == "kvk1/team-a/"
    assert kvkey.glob_escape("a*b?c[d]e\\") == "a\\*b\\?c\\[d\\]e\\\\"
    assert kvkey.glob_escape(b"kvk1/t\xff*/") == b"kvk1/t\xff\\*/"  # bytes in, bytes out
    assert kvkey.glob_escape(bytearray(b"[a]")) == b"\\[a\\]"
