"""kvkey.Connector over kvkey.stores.MemoryStore: save, verified lookup, load, load_into,
several ranks, epoch rotation, store errors and the metrics it reports."""

import collections
import ctypes

import numpy as np
import pytest

import kvkey
from kvkey.stores import MemoryStore, StoreError

# Payloads of any size (conftest.UNSIZED); test_payload_size_is_enforced_when_given and
# tests/test_connector_core.py cover the size checks.
from conftest import make_unsized_identity as make_identity

H = kvkey.envelope_size


class Recorder:
    """Records every metrics call; any method outside the documented set fails."""

    ALLOWED = {"record_lookup", "record_load", "record_rejection", "record_false_hits", "record_payload_bytes",
               "record_store_error", "record_save"}

    def __init__(self):
        self.calls = collections.defaultdict(list)

    def __getattr__(self, name):
        if name not in self.ALLOWED:
            raise AttributeError(name)
        return lambda *args: self.calls[name].append(args)

    def total(self, name, index=0):
        return sum(args[index] for args in self.calls[name])


def ranks(tp=1, **changes):
    out = []
    for r in range(tp):
        i = make_identity(**changes)
        i.shard.tp_size, i.shard.tp_rank = tp, r
        out.append(kvkey.KeyNamespace(i))
    return out


def payloads(hashes, rank=0, size=512, salt=0):
    return [np.frombuffer(bytes((b * 31 + rank * 7 + salt + j) % 251 for j in range(size)), dtype=np.uint8)
            for b, _ in enumerate(hashes)]


@pytest.fixture
def setup():
    ns = ranks()[0]
    store = MemoryStore()
    hashes = ns.block_hashes(list(range(4 * 64)))
    return ns, store, kvkey.Connector(store, ns), hashes


def test_roundtrip(setup):
    ns, store, conn, hashes = setup
    assert conn.lookup(hashes) == 0
    assert conn.save(hashes, payloads(hashes)) == 4
    assert len(store) == 4
    value = store.values[ns.store_key(hashes[0])]
    assert value[:H] == ns.seal(hashes[0], payloads(hashes)[0]) or len(value) == H + 512
    assert conn.lookup(hashes) == 4
    assert conn.lookup(hashes, max_tokens=4 * 64 - 1) == 3
    loaded = conn.load(hashes)
    assert [bytes(p) for p in loaded] == [p.tobytes() for p in payloads(hashes)]
    assert isinstance(loaded[0], memoryview) and loaded[0].readonly


def test_load_into_numpy(setup):
    ns, store, conn, hashes = setup
    conn.save(hashes[:2], payloads(hashes[:2]))
    bufs = [np.full(512, 7, dtype=np.uint8) for _ in hashes[:3]]
    res = conn.load_into(hashes[:3], bufs)
    assert [r.status for r in res] == ["loaded", "loaded", "missing"]
    assert [r.nbytes for r in res] == [512, 512, 0]
    assert np.array_equal(bufs[0], payloads(hashes)[0]) and np.array_equal(bufs[1], payloads(hashes)[1])
    assert (bufs[2] == 7).all()
    wide = [np.zeros(256, dtype=np.uint16)]  # any dtype: the bytes count
    assert conn.load_into(hashes[:1], wide)[0].loaded
    assert wide[0].tobytes() == payloads(hashes)[0].tobytes()


def test_a_rejected_block_leaves_its_buffer_untouched(setup):
    ns, store, conn, hashes = setup
    conn.save(hashes, payloads(hashes))
    key = ns.store_key(hashes[1])
    damaged = bytearray(store.values[key])
    damaged[-1] ^= 1
    store.values[key] = bytes(damaged)
    bufs = [np.full(512, 7, dtype=np.uint8) for _ in hashes]
    res = conn.load_into(hashes, bufs)
    assert [r.status for r in res] == ["loaded", "rejected", "loaded", "loaded"]
    assert (res[1].verdict.reason, res[1].verdict.field) == ("payload_mismatch", "payload")
    assert (bufs[1] == 7).all()
    small = [np.full(100, 7, dtype=np.uint8)]  # a buffer of another size than the payload
    r = conn.load_into(hashes[:1], small)[0]
    assert (r.status, r.verdict.reason) == ("rejected", "size_mismatch") and (small[0] == 7).all()


def test_load_into_refuses_unusable_buffers(setup):
    ns, store, conn, hashes = setup
    with pytest.raises(TypeError, match="buffers\\[0\\]"):
        conn.load_into(hashes[:1], [b"read-only bytes"])
    with pytest.raises(TypeError, match="C-contiguous"):
        conn.load_into(hashes[:1], [np.zeros((16, 64), dtype=np.uint8)[:, ::2]])
    with pytest.raises(kvkey.InputError, match="2 block hashes but 1 buffers"):
        conn.load_into(hashes[:2], [bytearray(512)])


def test_lookup_verifies_headers_and_existence_only_does_not(setup):
    ns, store, conn, hashes = setup
    conn.save(hashes, payloads(hashes))
    foreign = kvkey.KeyNamespace(make_identity(kv__dtype="uint8"))
    store.values[ns.store_key(hashes[2])] = foreign.seal_value(hashes[2], payloads(hashes)[2])
    assert conn.lookup(hashes) == 2
    assert conn.lookup_existing(hashes) == 4  # counts what a load will reject
    loaded = conn.load(hashes)
    assert loaded[2] is None and all(p is not None for i, p in enumerate(loaded) if i != 2)


def test_a_payload_flip_passes_the_header_check_and_fails_the_load(setup):
    ns, store, conn, hashes = setup
    conn.save(hashes, payloads(hashes))
    key = ns.store_key(hashes[0])
    v = bytearray(store.values[key])
    v[H + 5] ^= 0x10
    store.values[key] = bytes(v)
    assert conn.lookup(hashes) == 4  # the header alone verifies; the load checks the bytes
    assert conn.load(hashes[:1]) == [None]


class PrefixOnly(MemoryStore):
    """Returns bare prefixes: the lookup cannot see a value's size."""

    def get_prefix(self, keys, length):
        return [None if v is None else bytes(v) for v in super().get_prefix(keys, length)]


class CountingStore(MemoryStore):
    def __init__(self):
        super().__init__()
        self.prefix_reads = []

    def get_prefix(self, keys, length):
        self.prefix_reads.append(len(keys))
        return super().get_prefix(keys, length)


def test_lookup_reads_in_batches_and_stops_after_the_count_ends():
    ns = ranks()[0]
    store = CountingStore()
    hashes = ns.block_hashes(list(range(10 * 64)))
    conn = kvkey.Connector(store, ns, lookup_batch=3)
    conn.save(hashes[:4], payloads(hashes[:4]))
    assert conn.lookup(hashes) == 4
    assert store.prefix_reads == [3, 3]  # blocks 0-2, then 3-5, where the count ends
    conn.save(hashes, payloads(hashes))
    store.prefix_reads.clear()
    assert conn.lookup(hashes, max_tokens=10 * 64 - 1) == 9 and store.prefix_reads == [3, 3, 3]


def test_lookup_checks_the_value_size_when_the_store_knows_it(setup):
    ns, store, conn, hashes = setup
    conn.save(hashes, payloads(hashes))
    key = ns.store_key(hashes[1])
    store.values[key] = store.values[key][:-1]  # truncated payload, intact header
    assert isinstance(store.get_prefix([key], H)[0], kvkey.stores.Prefix)
    assert conn.lookup(hashes) == 1
    bare = PrefixOnly()
    bare.values = store.values
    assert kvkey.Connector(bare, ns).lookup(hashes) == 4  # the header alone verifies
    assert kvkey.Connector(bare, ns).load(hashes)[1] is None


def test_several_ranks_count_a_block_only_when_every_rank_verifies():
    rs = ranks(tp=2)
    store = MemoryStore()
    conn = kvkey.Connector(store, rs)
    hashes = rs[0].block_hashes(list(range(3 * 64)))
    size = 256
    for r in range(2):
        conn.save(hashes, payloads(hashes, r, size), rank=r)
    assert conn.lookup(hashes) == 3
    del store.values[rs[1].store_key(hashes[1])]
    assert conn.lookup(hashes) == 1
    store.values[rs[1].store_key(hashes[1])] = store.values[rs[0].store_key(hashes[1])]  # rank 0's value
    assert conn.lookup(hashes) == 1
    assert conn.load(hashes, rank=1)[1] is None
    assert bytes(conn.load(hashes, rank=0)[1]) == payloads(hashes, 0, size)[1].tobytes()
    with pytest.raises(kvkey.InputError, match="rank is 2"):
        conn.load(hashes, rank=2)
    other = kvkey.KeyNamespace(make_identity(tenant="team-b"))
    with pytest.raises(kvkey.InputError, match="another deployment"):
        kvkey.Connector(store, [rs[0], other])


def test_payload_size_is_enforced_when_given(setup):
    ns, store, _, hashes = setup
    conn = kvkey.Connector(store, ns, payload_size=512)
    with pytest.raises(kvkey.InputError, match="payloads\\[0\\] has 100 bytes"):
        conn.save(hashes[:1], [bytes(100)])
    kvkey.Connector(store, ns).save(hashes[:1], [bytes(100)])  # a writer without the check
    assert conn.load(hashes[:1]) == [None]


def test_with_epoch_reaches_nothing_of_the_old_epoch(setup):
    ns, store, conn, hashes = setup
    conn.save(hashes, payloads(hashes))
    rotated = conn.with_epoch(1)
    assert rotated.ns.identity.model.weights_epoch == 1 and rotated.store is store
    new_hashes = rotated.ns.block_hashes(list(range(4 * 64)))
    assert rotated.lookup(new_hashes) == 0
    for old, new in zip(hashes, new_hashes):
        store.values[rotated.ns.store_key(new)] = store.values[ns.store_key(old)]
    assert rotated.lookup(new_hashes) == 0
    assert rotated.load(new_hashes) == [None] * 4


def test_with_epoch_keeps_the_secret():
    secret = kvkey.TenantSecret(bytes(range(32)))
    ns = kvkey.KeyNamespace(make_identity(), secret=secret)
    conn = kvkey.Connector(MemoryStore(), ns).with_epoch(3)
    assert conn.ns.keyed
    assert conn.ns.root == kvkey.KeyNamespace(make_identity(model__weights_epoch=3), secret=secret).root


class FailingStore(MemoryStore):
    def __init__(self, kind):
        super().__init__()
        self.kind = kind
        self.fail = False

    def _maybe(self):
        if self.fail:
            raise StoreError(self.kind, "injected")

    def get(self, keys):
        self._maybe()
        return super().get(keys)

    def get_prefix(self, keys, length):
        self._maybe()
        return super().get_prefix(keys, length)

    def put(self, keys, values):
        self._maybe()
        return super().put(keys, values)


def test_store_errors_are_misses_and_are_recorded(setup):
    ns, _, _, hashes = setup
    store = FailingStore("timeout")
    metrics = Recorder()
    conn = kvkey.Connector(store, ns, metrics=metrics)
    conn.save(hashes, payloads(hashes))
    store.fail = True
    assert conn.lookup(hashes) == 0
    assert conn.load(hashes) == [None] * 4
    assert [r.status for r in conn.load_into(hashes, [bytearray(512) for _ in hashes])] == ["missing"] * 4
    assert conn.save(hashes, payloads(hashes)) == 0
    assert metrics.calls["record_store_error"] == [("timeout",)] * 4
    assert metrics.calls["record_save"][-1] == (0, 4)
    assert conn.last_error is not None and conn.last_error.kind == "timeout"
    with pytest.raises(StoreError, match="store.timeout"):
        kvkey.Connector(store, ns, raise_errors=True).lookup(hashes)


def test_metrics(setup):
    ns, store, _, hashes = setup
    metrics = Recorder()
    conn = kvkey.Connector(store, ns, metrics=metrics)
    assert conn.save(hashes, payloads(hashes)) == 4
    assert metrics.calls["record_save"] == [(4, 0)]
    foreign = kvkey.KeyNamespace(make_identity(tenant="team-b"))
    store.values[ns.store_key(hashes[3])] = foreign.seal_value(hashes[3], payloads(hashes)[3])
    flipped = bytearray(store.values[ns.store_key(hashes[1])])
    flipped[-1] ^= 1
    store.values[ns.store_key(hashes[1])] = bytes(flipped)  # the header still verifies

    assert conn.lookup(hashes + [bytes(32)]) == 3
    assert metrics.calls["record_lookup"] == [(3, 1, 1)]  # hit, miss, rejected
    assert [v[0].field for v in metrics.calls["record_rejection"]] == ["tenant"]

    loaded = conn.load(hashes)
    assert [p is not None for p in loaded] == [True, False, True, False]
    assert metrics.calls["record_load"] == [(2, 0, 2)]
    assert [v[0].reason for v in metrics.calls["record_rejection"][1:]] == ["payload_mismatch", "identity_mismatch"]
    assert metrics.calls["record_false_hits"] == [(1,)]  # block 1: counted by the lookup, rejected at load
    assert metrics.total("record_payload_bytes") == 2 * 512

    conn.load(hashes)  # no lookup counted them since: no false hits
    assert metrics.calls["record_false_hits"] == [(1,)]
    assert conn.lookup_existing(hashes) == 4
    conn.load_into(hashes, [bytearray(512) for _ in hashes])
    assert metrics.calls["record_false_hits"][-1] == (2,)
    assert metrics.calls["record_load"][-1] == (2, 0, 2)
    assert metrics.calls["record_lookup"][-1] == (4, 0, 0)


def test_bad_arguments(setup):
    ns, store, conn, hashes = setup
    with pytest.raises(kvkey.InputError, match="2 block hashes but 1 payloads"):
        conn.save(hashes[:2], [b"x"])
    with pytest.raises(TypeError, match="ns\\[0\\]"):
        kvkey.Connector(store, ["not a namespace"])
    with pytest.raises(kvkey.InputError, match="no namespace"):
        kvkey.Connector(store, [])
    with pytest.raises(kvkey.InputError, match="max_tokens"):
        conn.lookup(hashes, max_tokens=-1)



def test_numpy_integers_are_ints(setup):
    """payload_size, lookup_batch, max_tokens and rank take anything with __index__, as
    the same int (docs/python.md, "Integers"); bools and floats are TypeError."""
    ns, store, conn, hashes = setup
    size = len(payloads(hashes)[0].tobytes())
    np_conn = kvkey.Connector(store, ns, payload_size=np.int64(size), lookup_batch=np.int32(2))
    assert np_conn.payload_size == size and type(np_conn.payload_size) is int
    assert np_conn.save(hashes, payloads(hashes), rank=np.uint8(0)) == 4
    assert np_conn.lookup(hashes, max_tokens=np.int64(4 * 64 - 1)) == 3
    assert conn.lookup(hashes, max_tokens=np.uint16(64)) == 1
    assert all(p is not None for p in conn.load(hashes, rank=np.int64(0)))
    with pytest.raises(kvkey.InputError, match="rank is 1"):
        conn.load(hashes, rank=np.int64(1))
    for bad in (1.0, True, "0"):
        with pytest.raises(TypeError, match="rank"):
            conn.load(hashes, rank=bad)
        with pytest.raises(TypeError, match="max_tokens"):
            conn.lookup(hashes, max_tokens=bad)
    with pytest.raises(TypeError, match="payload_size"):
        kvkey.Connector(store, ns, payload_size=float(size))
    with pytest.raises(kvkey.InputError, match="lookup_batch"):
        kvkey.Connector(store, ns, lookup_batch=np.int64(0))


def test_memory_store_protocol():
    s = MemoryStore()
    assert isinstance(s, kvkey.stores.Store)
    s.put(["a/1", "a/2", "b/1"], [b"x" * 2000, bytearray(b"yy"), memoryview(b"z")])
    assert s.get(["a/1", "nope"]) == [b"x" * 2000, None]
    assert s.get_prefix(["a/1", "a/2", "nope"], 1024) == [b"x" * 1024, b"yy", None]
    assert s.exists(["a/2", "c"]) == [True, False]
    assert sorted(s.scan_prefix("a/")) == ["a/1", "a/2"]
    assert s.delete(["a/1", "a/1", "c"]) == 1
    assert sorted(s.scan_prefix("")) == ["a/2", "b/1"]


def test_kvkey_metrics_records_what_the_connector_saw(setup):
    ns, store, _, hashes = setup
    m = kvkey.Metrics()
    conn = kvkey.Connector(store, ns, metrics=m)
    conn.save(hashes, payloads(hashes))
    foreign = kvkey.KeyNamespace(make_identity(kv__dtype="uint8"))
    store.values[ns.store_key(hashes[2])] = foreign.seal_value(hashes[2], payloads(hashes)[2])
    assert conn.lookup_existing(hashes) == 4
    conn.load(hashes)
    d = m.as_dict()
    assert d["lookup_blocks"] == {"hit": 4, "miss": 0, "rejected": 0}
    assert d["rejected_blocks"] == {"identity_mismatch": {"kv.dtype": 1}}
    assert d["false_hits"] == 1


def test_memory_store_a_value_that_is_not_bytes_misses_alone(ns):
    """A value of another type planted in MemoryStore.values fails that key alone (Replies.errors,
    kind protocol): the lookup counts the blocks before it, the load serves every other block."""
    store = kvkey.stores.MemoryStore()
    conn = kvkey.Connector(store, ns, payload_size=512)
    hashes = ns.block_hashes(range(6 * 64))
    payloads = [bytes([b]) * 512 for b in range(6)]
    assert conn.save(hashes, payloads) == 6
    keys = [ns.store_key(h) for h in hashes]
    store.values[keys[4]] = ["not", "bytes"]
    assert conn.lookup(hashes) == 4
    assert [None if p is None else bytes(p) for p in conn.load(hashes)] == payloads[:4] + [None] + payloads[5:]
    heads = store.get_prefix(keys, 1024)
    assert isinstance(heads, kvkey.stores.Replies) and sorted(heads.errors) == [4] and heads[4] is None
    assert heads.errors[4].kind == "protocol" and "list" in str(heads.errors[4])
    assert store.key_errors["protocol"] == 3 and conn.last_error is None
    assert store.exists(keys[3:5]) == [True, True]
    assert kvkey.stores.Replies([1, None], {1: kvkey.stores.StoreError("server", "x")}) == [1, None]


def test_load_into_a_destination_of_another_size_is_the_callers_error(setup):
    ns, store, _, hashes = setup
    metrics = kvkey.Metrics()
    conn = kvkey.Connector(store, ns, payload_size=512, metrics=metrics)
    assert conn.save(hashes[:2], payloads(hashes[:2])) == 2
    assert conn.lookup(hashes[:2]) == 2
    before = metrics.as_dict()
    for wrong in (bytearray(511), bytearray(513), [bytearray(256), bytearray(255)]):
        good = bytearray(b"\x07" * 512)
        with pytest.raises(kvkey.InputError, match="buffers\\[1\\] holds") as e:
            conn.load_into(hashes[:2], [good, wrong])
        assert e.value.field == "buffers"
        assert good == bytearray(b"\x07" * 512)  # nothing read, nothing written
    after = metrics.as_dict()
    assert after["load_blocks"] == before["load_blocks"] and after["false_hits"] == before["false_hits"]
    assert after["rejections"] == before["rejections"]


def test_the_zero_copy_path_over_any_store(setup):
    ns, store, _, hashes = setup
    metrics = kvkey.Metrics()
    conn = kvkey.Connector(store, ns, payload_size=512, metrics=metrics)
    ps = payloads(hashes)
    with kvkey.Slots(store, 4, 512) as out:
        for i, p in enumerate(ps):
            out.payload(3 - i)[:] = p.tobytes()
        assert conn.save_from(hashes, out, indices=[3, 2, 1, 0]) == 4
        assert bytes(out.header(3)) == store.values[ns.store_key(hashes[0])][:H]  # sealed in place
    assert [bytes(p) for p in conn.load(hashes)] == [p.tobytes() for p in ps]
    assert conn.lookup(hashes) == 4
    v = bytearray(store.values[ns.store_key(hashes[1])])
    v[-1] ^= 1
    store.values[ns.store_key(hashes[1])] = bytes(v)
    into = kvkey.Slots(store, 4, 512, bytearray(4 * (H + 512)))
    res = conn.load_into(hashes, into)
    assert [r.status for r in res] == ["loaded", "rejected", "loaded", "loaded"]
    assert bytes(into.payload(2)) == ps[2].tobytes()
    assert metrics.as_dict()["false_hits"] == 1  # the one metrics rule
    with pytest.raises(kvkey.InputError, match="given twice"):
        conn.load_into(hashes, into, indices=[0, 0, 1, 2])
    with pytest.raises(kvkey.InputError, match="out of range"):
        conn.save_from(hashes, into, indices=[0, 1, 2, 4])
    with pytest.raises(kvkey.InputError, match="500-byte payloads"):
        conn.save_from(hashes, kvkey.Slots(store, 4, 500))
    with pytest.raises(kvkey.InputError, match="indices are for Slots only"):
        conn.load_into(hashes, [bytearray(512)] * 4, indices=[0, 1, 2, 3])
    with pytest.raises(kvkey.InputError, match="needs|need"):
        kvkey.Slots(store, 4, 512, bytearray(100))
    with pytest.raises(TypeError, match="kvkey.Slots"):
        conn.save_from(hashes, [bytearray(512)] * 4)


class Registered(MemoryStore):
    """register_memory, put_from, get_into_registered (addresses) over a MemoryStore; a
    write from or read into memory it did not register fails the test."""

    def __init__(self):
        super().__init__()
        self.regions, self.calls = [], collections.Counter()

    def register_memory(self, address, size):
        region = (address, size)
        self.regions.append(region)
        store = self

        class Handle:
            def close(self):
                store.regions.remove(region)

        return Handle()

    def _inside(self, address, size):
        assert any(a <= address and address + size <= a + n for a, n in self.regions), "not registered"

    def put_from(self, keys, addresses, sizes):
        self.calls["put_from"] += 1
        for a, n in zip(addresses, sizes):
            self._inside(a, n)
        return self.put(keys, [ctypes.string_at(a, n) for a, n in zip(addresses, sizes)])

    def get_into_registered(self, keys, addresses, sizes):
        self.calls["get_into_registered"] += 1
        out = []
        for k, a, n in zip(keys, addresses, sizes):
            self._inside(a, n)
            v = self.values.get(k)
            if v is not None:
                ctypes.memmove(a, v, min(len(v), n))
            out.append(None if v is None else len(v))
        return out


def test_the_zero_copy_path_over_a_store_with_registered_memory(setup):
    """A Python store with the capability: register_memory, put_from, get_into_registered
    (addresses); the connector writes from and reads into the slots through them, one
    call per batch."""
    ns, _, _, hashes = setup

    store = Registered()
    conn = kvkey.Connector(store, ns, payload_size=512)
    with kvkey.Slots(store, 4, 512) as slots:
        for i, p in enumerate(payloads(hashes)):
            slots.payload(i)[:] = p.tobytes()
        assert conn.save_from(hashes, slots) == 4
        store.values[ns.store_key(hashes[3])] += b"!"  # longer than its slot: never served
        res = conn.load_into(hashes, slots)
        assert [r.status for r in res] == ["loaded", "loaded", "loaded", "rejected"]
        assert res[3].verdict.reason == "size_mismatch"
        assert store.calls == {"put_from": 1, "get_into_registered": 1}
        bufs = [bytearray(512) for _ in range(3)]  # ordinary buffers: staged in registered memory
        assert all(r.loaded for r in conn.load_into(hashes[:3], bufs))
        assert len(store.regions) == 1  # the staging was unregistered after the call
    assert store.regions == []


def test_staging_slots_gather_and_scatter_the_rows_in_one_call(setup):
    """save(..., staging=) and load_into(..., staging=): an engine's per-layer rows
    gathered into registered slots, sealed and written from there; read into them,
    verified there, and only verified blocks scattered back into the rows."""
    ns, _, _, hashes = setup
    store = Registered()
    metrics = kvkey.Metrics()
    conn = kvkey.Connector(store, ns, payload_size=512, metrics=metrics, digest_threads=2)
    rows = [np.random.default_rng(7 + r).integers(0, 256, 4 * 128, dtype=np.uint8) for r in range(4)]

    def blocks(rs):
        return [[row[b * 128:(b + 1) * 128] for row in rs] for b in range(4)]

    with kvkey.Slots(store, 6, 512) as slots:
        assert conn.save(hashes, blocks(rows), staging=slots, indices=[5, 0, 2, 1]) == 4
        assert store.calls == {"put_from": 1}
        for b, h in enumerate(hashes):  # the values save would have stored
            assert store.values[ns.store_key(h)] == ns.seal_value(h, b"".join(r[b * 128:(b + 1) * 128].tobytes()
                                                                              for r in rows))
        v = bytearray(store.values[ns.store_key(hashes[2])])
        v[H + 3] ^= 0x40
        store.values[ns.store_key(hashes[2])] = bytes(v)
        del store.values[ns.store_key(hashes[3])]
        out = [np.full(4 * 128, 0xEE, dtype=np.uint8) for _ in range(4)]
        res = conn.load_into(hashes, blocks(out), staging=slots)
        assert [r.status for r in res] == ["loaded", "loaded", "rejected", "missing"]
        assert res[2].verdict.reason == "payload_mismatch"
        assert store.calls == {"put_from": 1, "get_into_registered": 1}
        for r, o in zip(rows, out):
            assert (o[:256] == r[:256]).all()
            assert (o[256:] == 0xEE).all()  # nothing of the rejected or the missing block
        assert metrics.as_dict()["load_blocks"]["rejected"] == 1

        # The caller's errors, before the store is asked.
        calls = dict(store.calls)
        inside = blocks(out)
        inside[1][0] = slots.payload(4)[:128]
        with pytest.raises(kvkey.InputError, match=r"buffers\[1\]\[0\] lies in the staging slots"):
            conn.load_into(hashes, inside, staging=slots)
        with pytest.raises(kvkey.InputError, match=r"payloads\[1\]\[0\] lies in the staging slots"):
            conn.save(hashes, inside, staging=slots)
        with pytest.raises(kvkey.InputError, match="given twice"):
            conn.save(hashes, blocks(rows), staging=slots, indices=[0, 0, 1, 2])
        with pytest.raises(kvkey.InputError, match="staging slots hold 512"):
            conn.save(hashes, [[r[:100]] for r in rows], staging=slots)
        with pytest.raises(kvkey.InputError, match="staging is for destinations"):
            conn.load_into(hashes, slots, staging=slots)
        with pytest.raises(kvkey.InputError, match="indices are for staging Slots only"):
            conn.save(hashes, blocks(rows), indices=[0, 1, 2, 3])
        with pytest.raises(TypeError, match="expected kvkey.Slots"):
            conn.load_into(hashes, blocks(out), staging=bytearray(4096))
        assert store.calls == calls
    for bad in (0, 257, 1.5, True):
        with pytest.raises((kvkey.InputError, TypeError), match="digest_threads"):
            kvkey.Connector(store, ns, digest_threads=bad)
