"""kvkey.Connector is the compiled kvkey::Connector: the same metrics as the C++ tests
(tests/unit/connector_test.cpp) for the same scenarios, per-layer buffers, buffer
ownership, replies checked at the seam, and store failures logged."""

import logging
import re

import pytest

import kvkey
from kvkey.stores import MemoryStore, Prefix, StoreError

PAYLOAD = 2 * 2 * 2 * 8 * 4 * 2  # bf16, 2 layers, 2 KV heads, head_dim 8, 4 tokens


class snapshot:
    """A kvkey.Metrics' counters by the names of the C++ MetricsSnapshot."""

    def __init__(self, m):
        d = m.as_dict()
        self.d = d
        self.lookup_hit, self.lookup_miss, self.lookup_rejected = (d["lookup_blocks"][k] for k in
                                                                   ("hit", "miss", "rejected"))
        self.load_loaded, self.load_missing, self.load_rejected = (d["load_blocks"][k] for k in
                                                                   ("loaded", "missing", "rejected"))
        self.save_saved, self.save_failed = d["save_blocks"]["saved"], d["save_blocks"]["failed"]
        self.false_hits, self.payload_verified_bytes = d["false_hits"], d["payload_verified_bytes"]

    def rejected(self, reason, field):
        return self.d["rejected_blocks"].get(reason, {}).get(field, 0)

    def store_error(self, kind):
        return self.d["store_errors"][kind]

    def __eq__(self, other):
        return self.d == other.d


def identity(tenant="team-a", tp_size=1, tp_rank=0):
    return kvkey.Identity(
        tenant=tenant,
        model=kvkey.Model(name="Qwen/Qwen2.5-7B-Instruct", revision="a09a35458c702b33eeacc393d103063234e8bc28"),
        kv=kvkey.Kv(dtype=kvkey.KvDtype.bf16, block_size=4, num_layers=2, num_kv_heads=2, head_dim=8,
                    layout="kvkey.test.v1"),
        shard=kvkey.Shard(tp_size=tp_size, tp_rank=tp_rank))


def pattern(n, seed):
    return bytes((seed + i * 7) % 256 for i in range(n))


def tokens(n):
    return [(i * 7919 + 1) % 151643 for i in range(n)]


def test_same_metrics_as_the_cpp_connector():
    """[ok, foreign, foreign, foreign]: hit 1, miss 0, rejected 3, then 3 false hits."""
    store, ns, other = MemoryStore(), kvkey.KeyNamespace(identity()), kvkey.KeyNamespace(identity("team-b"))
    m = kvkey.Metrics()
    c = kvkey.Connector(store, ns, metrics=m)
    hashes = ns.block_hashes(tokens(16))
    ps = [pattern(PAYLOAD, i) for i in range(4)]
    assert c.save(hashes, ps) == 4
    assert c.lookup(hashes) == 4
    for h, p in zip(hashes[1:], ps[1:]):
        store.values[ns.store_key(h)] = other.seal_value(h, p)
    assert c.lookup(hashes) == 1
    s = snapshot(m)
    assert (s.lookup_hit, s.lookup_miss, s.lookup_rejected) == (4 + 1, 0, 3)
    assert s.rejected("identity_mismatch", "tenant") == 3
    loaded = c.load(hashes)
    assert bytes(loaded[0]) == ps[0] and loaded[1:] == [None] * 3
    s = snapshot(m)
    assert (s.load_loaded, s.load_rejected, s.load_missing, s.false_hits) == (1, 3, 0, 3)
    assert s.payload_verified_bytes == PAYLOAD
    c.load(hashes)
    assert snapshot(m).false_hits == 3


def test_every_rank_max_tokens_and_payload_size_from_the_namespace():
    store = MemoryStore()
    ranks = [kvkey.KeyNamespace(identity(tp_size=2, tp_rank=r)) for r in range(2)]
    m = kvkey.Metrics()
    c = kvkey.Connector(store, ranks, metrics=m, lookup_batch=2)
    assert c.payload_size == PAYLOAD // 2 == ranks[0].payload_size
    hashes = ranks[0].block_hashes(tokens(24))
    p = pattern(PAYLOAD // 2, 1)
    assert c.save(hashes, [p] * 6, rank=0) == 6
    assert c.lookup(hashes) == 0
    assert c.save(hashes[:3], [p] * 3, rank=1) == 3
    assert c.lookup(hashes) == 3
    assert c.lookup(hashes, max_tokens=11) == 2
    store.values[ranks[1].store_key(hashes[1])] = ranks[0].seal_value(hashes[1], p)
    before = snapshot(m)
    assert c.lookup(hashes) == 1
    s = snapshot(m)
    assert (s.lookup_hit - before.lookup_hit, s.lookup_rejected - before.lookup_rejected,
            s.lookup_miss - before.lookup_miss) == (1, 1, 4)
    assert s.rejected("identity_mismatch", "shard") == 1
    with pytest.raises(kvkey.InputError, match="has 3 bytes"):
        c.save(hashes[:1], [b"abc"])
    with pytest.raises(kvkey.InputError) as e:
        kvkey.Connector(store, ranks + [kvkey.KeyNamespace(identity("team-b", 2, 1))])
    assert e.value.field == "ns"


def test_per_layer_numpy_buffers_without_gather_or_scatter():
    np = pytest.importorskip("numpy")
    store, ns = MemoryStore(), kvkey.KeyNamespace(identity())
    c = kvkey.Connector(store, ns)
    hashes = ns.block_hashes(tokens(8))
    rng = np.random.default_rng(1)
    layers = [[rng.integers(0, 2**16, size=(2, 4, 8), dtype=np.uint16) for _ in range(4)] for _ in hashes]
    assert c.save(hashes, layers) == 2
    assert bytes(c.load(hashes)[0]) == b"".join(a.tobytes() for a in layers[0])
    assert ns.seal_value(hashes[0], layers[0]) [kvkey.envelope_size:] == bytes(c.load(hashes)[0])
    dest = [[np.zeros((2, 4, 8), np.uint16) for _ in range(4)] for _ in hashes]
    key1 = ns.store_key(hashes[1])
    store.values[key1] = store.values[key1][:-1] + bytes([store.values[key1][-1] ^ 1])
    res = c.load_into(hashes, dest)
    assert [r.status for r in res] == ["loaded", "rejected"]
    assert res[1].verdict.reason == "payload_mismatch"
    for got, want in zip(dest[0], layers[0]):
        assert (got == want).all()
    assert all((d == 0).all() for d in dest[1])  # untouched


class ArenaStore(MemoryStore):
    """Returns every value in one bytearray that the next call overwrites."""

    def __init__(self, owned=False):
        super().__init__()
        self.arena = bytearray()
        self.owned_values = owned

    def get(self, keys):
        found = super().get(keys)
        self.arena[:] = b"\xee" * len(self.arena)
        self.arena = bytearray(b"".join(v for v in found if v is not None))
        out, off, view = [], 0, memoryview(self.arena)
        for v in found:
            out.append(None if v is None else view[off:off + len(v)])
            off += 0 if v is None else len(v)
        return out

    def scribble(self):
        self.arena[:] = b"\xee" * len(self.arena)


def test_served_bytes_are_the_verified_bytes_whatever_the_store_does():
    store, ns = ArenaStore(), kvkey.KeyNamespace(identity())
    c = kvkey.Connector(store, ns)
    hashes = ns.block_hashes(tokens(8))
    p = pattern(PAYLOAD, 5)
    c.save(hashes, [p, p])
    got = c.load(hashes)
    store.scribble()
    assert bytes(got[0]) == p  # copied: the store did not hand its buffers over
    liar = ArenaStore(owned=True)  # claims ownership, then reuses its buffers
    c = kvkey.Connector(liar, ns)
    c.save(hashes, [p, p])
    got = c.load(hashes)
    liar.scribble()
    assert bytes(got[0]) != p


class Hostile(MemoryStore):
    def __init__(self):
        super().__init__()
        self.put_reply = None
        self.exists_reply = None
        self.prefix_total = None

    def put(self, keys, values):
        super().put(keys, values)
        return self.put_reply(keys) if self.put_reply else None

    def exists(self, keys):
        return self.exists_reply(keys) if self.exists_reply else super().exists(keys)

    def get_prefix(self, keys, length):
        out = super().get_prefix(keys, length)
        if self.prefix_total is not None:
            out = [Prefix(v, self.prefix_total) for v in out]
        return out


@pytest.mark.parametrize("reply, saved, kind", [
    (lambda k: [True] * (len(k) + 2), 0, "protocol"),   # too many entries
    (lambda k: [True], 0, "protocol"),                  # one entry for four keys
    (lambda k: ["ok"] * len(k), 0, "protocol"),         # not bools
    (lambda k: [1, 1, -2, True], 3, "server"),          # an error code for one key
    (lambda k: [True, StoreError("server", "WRONGTYPE"), 1, 0], 2, "server"),
])
def test_put_replies_are_checked(reply, saved, kind):
    store, ns = Hostile(), kvkey.KeyNamespace(identity())
    m = kvkey.Metrics()
    c = kvkey.Connector(store, ns, metrics=m, log=False)
    hashes = ns.block_hashes(tokens(16))
    store.put_reply = reply
    assert c.save(hashes, [pattern(PAYLOAD, 1)] * 4) == saved
    assert snapshot(m).store_error(kind) >= 1
    assert snapshot(m).save_saved == saved


@pytest.mark.parametrize("reply", [lambda k: ["no"] * len(k), lambda k: [-1] * len(k), lambda k: [2] * len(k)])
def test_exists_replies_are_checked(reply):
    store, ns = Hostile(), kvkey.KeyNamespace(identity())
    c = kvkey.Connector(store, ns, log=False)
    m = kvkey.Metrics()
    c = kvkey.Connector(store, ns, metrics=m, log=False)
    store.exists_reply = reply
    assert c.lookup_existing(ns.block_hashes(tokens(16))) == 0  # an empty store
    assert sum(snapshot(m).d["store_errors"].values()) == 4  # one per key
    assert c.last_error is None  # no call failed: keys did


def test_prefix_sizes_are_checked():
    store, ns = Hostile(), kvkey.KeyNamespace(identity())
    m = kvkey.Metrics()
    c = kvkey.Connector(store, ns, metrics=m, log=False)
    hashes = ns.block_hashes(tokens(16))
    c.save(hashes, [pattern(PAYLOAD, 1)] * 4)
    store.prefix_total = 2**64
    assert c.lookup(hashes) == 0  # a miss, not an error
    store.prefix_total = -1
    assert c.lookup(hashes) == 0
    assert snapshot(m).store_error("protocol") == 4
    store.prefix_total = kvkey.envelope_size + 1
    assert c.lookup(hashes) == 0
    assert snapshot(m).rejected("size_mismatch", "payload_size") == 4
    store.prefix_total = kvkey.envelope_size + PAYLOAD
    assert c.lookup(hashes) == 4


class Down(MemoryStore):
    def get_prefix(self, keys, length):
        raise StoreError("connection", "connection refused")

    get = get_prefix


def test_a_failing_store_is_logged_rate_limited(caplog):
    ns = kvkey.KeyNamespace(identity())
    c = kvkey.Connector(Down(), ns, log_interval=3600)
    hashes = ns.block_hashes(tokens(16))
    with caplog.at_level(logging.WARNING, logger="kvkey.connector"):
        for _ in range(5):
            assert c.lookup(hashes) == 0
    lines = [r for r in caplog.records if r.name == "kvkey.connector"]
    assert len(lines) == 1
    assert "connection" in lines[0].getMessage() and "connection refused" in lines[0].getMessage()
    assert c.last_error.kind == "connection"
    caplog.clear()
    quiet = kvkey.Connector(Down(), ns, log=False)
    with caplog.at_level(logging.WARNING, logger="kvkey.connector"):
        quiet.lookup(hashes)
    assert not caplog.records


class IntoStore(MemoryStore):
    """Reads values straight into the connector's staging memory (as Mooncake's
    batch_get_into does into registered buffers)."""

    def __init__(self):
        super().__init__()
        self.staged = []

    def get_into(self, keys, buffers):
        out = []
        for k, buf in zip(keys, buffers):
            v = self.values.get(k)
            self.staged.append(len(buf))
            if v is None:
                out.append(None)
                continue
            n = min(len(v), len(buf))
            buf[:n] = v[:n]
            out.append(len(v))
        return out


def test_a_store_that_reads_into_staging_never_reaches_the_destinations_unverified():
    np = pytest.importorskip("numpy")
    store, ns = IntoStore(), kvkey.KeyNamespace(identity())
    c = kvkey.Connector(store, ns, log=False)
    hashes = ns.block_hashes(tokens(16))
    layers = [[np.full(PAYLOAD // 4, b * 4 + i, np.uint8) for i in range(4)] for b in range(4)]
    assert c.save(hashes, layers) == 4
    k1, k2 = ns.store_key(hashes[1]), ns.store_key(hashes[2])
    store.values[k1] = store.values[k1][:-1] + bytes([store.values[k1][-1] ^ 1])  # a flipped payload bit
    store.values[k2] = store.values[k2] + b"\0" * 16                              # longer than staging
    del store.values[ns.store_key(hashes[3])]
    dest = [[np.full(PAYLOAD // 4, 0xEE, np.uint8) for _ in range(4)] for _ in hashes]
    res = c.load_into(hashes, dest)
    assert store.staged == [kvkey.envelope_size + PAYLOAD] * 4  # one staging buffer per block
    assert [r.status for r in res] == ["loaded", "rejected", "rejected", "missing"]
    assert res[1].verdict.reason == "payload_mismatch" and res[2].verdict.reason == "size_mismatch"
    assert all((d == want).all() for d, want in zip(dest[0], layers[0]))
    assert all((d == 0xEE).all() for block in dest[1:] for d in block)


class Replies(list):
    """A reply list with the keys that failed on their own (as kvkey.stores' Replies)."""

    def __init__(self, items, errors):
        super().__init__(items)
        self.errors = errors


class OneBadKey(MemoryStore):
    """Key 1 of every read fails alone (a WRONGTYPE reply): a miss, the rest served."""

    def get(self, keys):
        return Replies([None if i == 1 else v for i, v in enumerate(super().get(keys))],
                       {1: StoreError("server", "WRONGTYPE")})

    def get_prefix(self, keys, length):
        return Replies([None if i == 1 else v for i, v in enumerate(super().get_prefix(keys, length))],
                       {1: StoreError("server", "WRONGTYPE")})


def test_a_key_that_fails_alone_is_a_miss_for_its_block_only():
    store, ns = OneBadKey(), kvkey.KeyNamespace(identity())
    m = kvkey.Metrics()
    c = kvkey.Connector(store, ns, metrics=m, log=False)
    hashes = ns.block_hashes(tokens(16))
    ps = [pattern(PAYLOAD, i) for i in range(4)]
    assert c.save(hashes, ps) == 4
    assert c.lookup(hashes) == 1
    got = c.load(hashes)
    assert [g is not None for g in got] == [True, False, True, True]
    assert snapshot(m).store_error("server") == 2 and snapshot(m).load_missing == 1
    assert c.last_error is None


def test_argument_errors_carry_id_and_field():
    c = kvkey.Connector(MemoryStore(), kvkey.KeyNamespace(identity()))
    hashes = kvkey.KeyNamespace(identity()).block_hashes(tokens(8))
    for call, field in [(lambda: c.lookup(hashes, max_tokens=-1), "max_tokens"),
                        (lambda: c.load(hashes, rank=1), "rank"),
                        (lambda: c.load(hashes, rank=-1), "rank"),
                        (lambda: c.save(hashes, [b"x"]), "payloads"),
                        (lambda: kvkey.Connector(MemoryStore(), c.ns, lookup_batch=0), "lookup_batch")]:
        with pytest.raises(kvkey.InputError) as e:
            call()
        assert (e.value.id, e.value.field) == ("kvkey.input_error", field)
        assert str(e.value).startswith(f"[kvkey.input_error] {field}: ")


def test_load_into_refuses_destinations_that_share_memory():
    """Two blocks (or two parts of one) written into the same bytes are the caller's
    bug: InputError naming the buffers, before anything is read, nothing counted."""
    np = pytest.importorskip("numpy")
    store, ns = MemoryStore(), kvkey.KeyNamespace(identity())
    m = kvkey.Metrics()
    c = kvkey.Connector(store, ns, metrics=m)
    hashes = ns.block_hashes(tokens(8))
    assert c.save(hashes, [pattern(PAYLOAD, 1), pattern(PAYLOAD, 2)]) == 2
    before = snapshot(m)
    mem = np.full(2 * PAYLOAD, 0xEE, np.uint8)
    half = PAYLOAD // 2
    cases = [
        ("buffers[1] overlaps buffers[0]", [mem[:PAYLOAD], mem[:PAYLOAD]]),  # one buffer twice
        ("buffers[1] overlaps buffers[0]", [mem[half:half + PAYLOAD], mem[:PAYLOAD]]),  # a half
        ("buffers[0][1] overlaps buffers[0][0]", [[mem[:half], mem[half - 1:PAYLOAD - 1]], mem[PAYLOAD:]]),
        ("buffers[1][1] overlaps buffers[0]", [mem[:PAYLOAD], [mem[PAYLOAD:PAYLOAD + half], mem[half:PAYLOAD]]]),
    ]
    for named, dest in cases:
        with pytest.raises(kvkey.InputError, match=re.escape(named)) as e:
            c.load_into(hashes, dest)
        assert e.value.field == "buffers"
    assert (mem == 0xEE).all() and snapshot(m) == before
    res = c.load_into(hashes, [mem[:PAYLOAD], mem[PAYLOAD:]])  # adjacent: fine
    assert [r.status for r in res] == ["loaded", "loaded"]
    assert mem[:PAYLOAD].tobytes() == pattern(PAYLOAD, 1) and mem[PAYLOAD:].tobytes() == pattern(PAYLOAD, 2)
