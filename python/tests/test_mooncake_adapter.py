"""kvkey.stores.MooncakeStore over a fake Mooncake client (no master needed): the adapter's
option checks, per-key failures, the registered-memory capability the connector's zero-copy
path uses, and the memory a dropped store leaves registered. The fake keeps Mooncake's rules
that matter here: transfers only from and into registered memory, overlapping registrations
refused, a value larger than its buffer refused (-600), a missing key -704.
test_mooncake.py runs the same paths against a real master (stage 44-mooncake)."""

import ctypes
import gc
import re
import threading
import time

import pytest

import kvkey
from kvkey.stores import MooncakeStore, StoreError
from kvkey.testing import check_store

from conftest import make_identity

OK, INVALID, NOT_FOUND, TRANSFER_FAIL = 0, -600, -704, -800


class FakeMooncake:
    """The MooncakeDistributedStore calls the adapter makes, over a dict."""

    def __init__(self):
        self.values = {}
        self.regions = {}  # address -> size
        self.lock = threading.Lock()
        self.fail = {}  # key -> code the next transfer of that key returns (once)
        self.ranges_hook = None

    # registered memory
    def register_buffer(self, ptr, size):
        with self.lock:
            if any(ptr < a + n and a < ptr + size for a, n in self.regions.items()):
                return INVALID  # Mooncake refuses a region that overlaps a registered one
            self.regions[ptr] = size
            return OK

    def unregister_buffer(self, ptr):
        with self.lock:
            return OK if self.regions.pop(ptr, None) is not None else INVALID

    def _registered(self, ptr, size):
        return any(a <= ptr and ptr + size <= a + n for a, n in self.regions.items())

    def _fault(self, key):
        return self.fail.pop(key, None)

    # writes
    def upsert_batch(self, keys, values):
        for k, v in zip(keys, values):
            self.values[k] = bytes(v)
        return OK

    def upsert(self, key, value):
        code = self._fault(key)
        if code is not None:
            return code
        self.values[key] = bytes(value)
        return OK

    def batch_upsert_from(self, keys, ptrs, sizes):
        out = []
        for k, p, n in zip(keys, ptrs, sizes):
            code = self._fault(k)
            if code is None and not self._registered(p, n):
                code = INVALID
            if code is None:
                self.values[k] = ctypes.string_at(p, n)
            out.append(OK if code is None else code)
        return out

    # reads
    def get_batch(self, keys):
        return [self.values.get(k, b"") for k in keys]

    def batch_is_exist(self, keys):
        return [self._fault(k) or (1 if k in self.values else 0) for k in keys]

    def batch_get_into(self, keys, ptrs, sizes):
        out = []
        for k, p, n in zip(keys, ptrs, sizes):
            code = self._fault(k)
            if code is not None:
                out.append(code)
            elif not self._registered(p, n):
                out.append(INVALID)
            elif k not in self.values:
                out.append(NOT_FOUND)
            elif len(self.values[k]) > n:
                out.append(INVALID)
            else:
                ctypes.memmove(p, self.values[k], len(self.values[k]))
                out.append(len(self.values[k]))
        return out

    def batch_get_session_start(self, keys):
        return [OK if k in self.values else NOT_FOUND for k in keys]

    def batch_get_session_end(self, keys):
        return OK

    def batch_get_into_multi_buffer_ranges(self, keys, all_ptrs, all_sizes, all_offsets):
        if self.ranges_hook is not None:
            self.ranges_hook(keys)
        out = []
        for k, ptrs, sizes, offsets in zip(keys, all_ptrs, all_sizes, all_offsets):
            v = self.values.get(k)
            if v is None:
                out.append(NOT_FOUND)
                continue
            if not self._registered(ptrs[0], sizes[0]):
                out.append(INVALID)
                continue
            part = v[offsets[0]:offsets[0] + sizes[0]]
            ctypes.memmove(ptrs[0], part, len(part))
            out.append(len(part))
        return out

    # removes
    def batch_remove(self, keys, force=False):
        return [self._fault(k) or (OK if self.values.pop(k, None) is not None else NOT_FOUND) for k in keys]

    def remove_by_regex(self, pattern, force=False):
        rx = re.compile(pattern)
        gone = [k for k in self.values if rx.search(k)]
        for k in gone:
            del self.values[k]
        return len(gone)


def namespace():
    return kvkey.KeyNamespace(make_identity(tenant="fake-mc"))


@pytest.mark.parametrize("option, value, error", [
    ("busy_retries", -1, ValueError), ("batch", 0, ValueError), ("key_batch", -5, ValueError),
    ("read_streams", 0, ValueError), ("max_batch_bytes", 0, ValueError), ("batch", True, TypeError),
    ("busy_retries", 2.5, TypeError), ("busy_wait", -0.1, ValueError), ("busy_wait", float("nan"), ValueError),
    ("busy_wait", float("inf"), ValueError), ("force_remove", 1, TypeError)])
def test_options_that_disable_a_behaviour_are_refused(option, value, error):
    with pytest.raises(error, match=option):
        MooncakeStore(FakeMooncake(), **{option: value})
    MooncakeStore(FakeMooncake(), busy_retries=0, busy_wait=0)  # the least values that still mean something


@pytest.mark.parametrize("option", ["global_segment_size", "local_buffer_size"])
def test_connect_refuses_a_negative_size_before_connecting(option):
    with pytest.raises(ValueError, match=f"{option} is -1, must be at least 0"):
        MooncakeStore.connect("127.0.0.1:1", **{option: -1})
    with pytest.raises(TypeError, match=option):
        MooncakeStore.connect("127.0.0.1:1", **{option: 1.5})


def test_registered_memory_round_trip_through_the_connector():
    fake = FakeMooncake()
    store = MooncakeStore(fake)
    ns = namespace()
    metrics = kvkey.Metrics()
    conn = kvkey.Connector(store, ns, metrics=metrics)
    hashes = ns.block_hashes(range(64 * 4))
    with kvkey.Slots(store, 4, ns.payload_size) as out, kvkey.Slots(store, 4, ns.payload_size) as into:
        assert len(fake.regions) == 2  # both slots registered
        for i in range(4):
            out.payload(i)[:] = bytes([i + 1]) * ns.payload_size
        assert conn.save_from(hashes, out) == 4
        assert bytes(out.header(0)) == fake.values[ns.store_key(hashes[0])][:kvkey.envelope_size]  # sealed in place
        assert conn.lookup(hashes) == 4
        fake.values[ns.store_key(hashes[2])] += b"x"  # longer than its slot: -600, read whole, size_mismatch
        del fake.values[ns.store_key(hashes[3])]
        res = conn.load_into(hashes, into)
        assert [r.status for r in res] == ["loaded", "loaded", "rejected", "missing"]
        assert res[2].verdict.reason == "size_mismatch"
        assert bytes(into.payload(1)) == bytes([2]) * ns.payload_size
        d = metrics.as_dict()
        assert d["load_blocks"] == {"loaded": 2, "missing": 1, "rejected": 1}
        assert d["false_hits"] == 2  # the lookup counted both
    assert len(fake.regions) == 1  # closed slots unregister their memory; the store's header scratch stays
    store.close()
    assert fake.regions == {}


def test_the_aio_connector_takes_the_zero_copy_path_of_a_sync_store():
    """kvkey.aio.Connector over MooncakeStore: save_from and load_into with Slots move the
    values from and into the registered slots (batch_upsert_from, batch_get_into), as the
    sync connector does, not through copies (upsert_batch, get_batch)."""
    import asyncio

    import kvkey.aio

    fake = FakeMooncake()
    calls = []
    for name in ("batch_upsert_from", "batch_get_into", "upsert_batch", "get_batch"):
        def counted(*args, _f=getattr(fake, name), _n=name):
            calls.append(_n)
            return _f(*args)
        setattr(fake, name, counted)
    store = MooncakeStore(fake)
    ns = namespace()
    hashes = ns.block_hashes(range(64 * 3))

    async def run():
        conn = kvkey.aio.Connector(store, ns, log=False)
        with kvkey.Slots(store, 3, ns.payload_size) as out, kvkey.Slots(store, 3, ns.payload_size) as into:
            for i in range(3):
                out.payload(i)[:] = bytes([i + 7]) * ns.payload_size
            assert await conn.save_from(hashes, out) == 3
            res = await conn.load_into(hashes, into)
            assert all(r.loaded for r in res)
            assert bytes(into.payload(2)) == bytes([9]) * ns.payload_size

    asyncio.run(run())
    assert calls == ["batch_upsert_from", "batch_get_into"]
    store.close()


def test_one_negative_code_fails_that_key_alone_and_is_counted():
    fake = FakeMooncake()
    store = MooncakeStore(fake)
    ns = namespace()
    metrics = kvkey.Metrics()
    conn = kvkey.Connector(store, ns, metrics=metrics)
    hashes = ns.block_hashes(range(64 * 4))
    with kvkey.Slots(store, 4, ns.payload_size) as slots:
        fake.fail[ns.store_key(hashes[1])] = TRANSFER_FAIL  # one write fails
        assert conn.save_from(hashes, slots) == 3
        assert metrics.as_dict()["store_errors"]["connection"] == 1
        assert store.key_errors["connection"] == 1
        assert conn.save_from(hashes, slots) == 4
        fake.fail[ns.store_key(hashes[2])] = -1  # one read fails (INTERNAL_ERROR: server)
        res = conn.load_into(hashes, slots)
        assert [r.status for r in res] == ["loaded", "loaded", "missing", "loaded"]
        assert metrics.as_dict()["store_errors"]["server"] == 1
        assert conn.last_error is None  # a key's failure is not the call's
    # upsert: a refused batch is written key by key; the failing key is counted with its kind.
    fake.upsert_batch = lambda keys, values: -1
    fake.fail[ns.store_key(hashes[0])] = -901  # RPC_TIMEOUT
    assert conn.save(hashes, [bytes(ns.payload_size)] * 4) == 3
    assert metrics.as_dict()["store_errors"]["timeout"] == 1
    # exists: one negative code fails that key alone.
    fake.fail[ns.store_key(hashes[0])] = -1
    got = store.exists([ns.store_key(h) for h in hashes])
    assert list(got) == [False, True, True, True] and set(got.errors) == {0}
    # Every key failing for want of the store fails the call.
    for h in hashes:
        fake.fail[ns.store_key(h)] = TRANSFER_FAIL
    with pytest.raises(StoreError) as e:
        store.get_into_registered([ns.store_key(h) for h in hashes], [1] * 4, [1] * 4)
    assert e.value.kind == "connection"
    store.close()


def test_one_negative_code_in_a_remove_fails_that_key_alone():
    fake = FakeMooncake()
    store = MooncakeStore(fake, key_batch=2)
    keys = [f"k{i}" for i in range(4)]
    for k in keys:
        fake.values[k] = b"x"
    fake.fail["k1"] = TRANSFER_FAIL
    assert store.delete(keys) == 3  # the other keys, in both batches, are removed
    assert list(fake.values) == ["k1"]
    assert store.key_errors["connection"] == 1 and "-800" in str(store.last_key_error)
    fake.fail["k1"] = -706  # every key refused: the call fails, naming the code
    with pytest.raises(StoreError, match="-706") as e:
        store.delete(["k1"])
    assert e.value.kind == "server"


def test_a_failing_header_read_waits_for_the_reads_it_started():
    fake = FakeMooncake()
    store = MooncakeStore(fake, read_streams=4)
    ns = namespace()
    keys = [ns.store_key(h) for h in ns.block_hashes(range(64 * 256))]
    for k in keys:
        fake.values[k] = bytes(2048)
    finished = []

    def hook(chunk):
        if chunk[0] == keys[0]:
            raise RuntimeError("transfer failed")  # the first stream fails at once
        time.sleep(0.3)
        finished.append(chunk[0])

    fake.ranges_hook = hook
    with pytest.raises(StoreError):
        store.get_prefix(keys, kvkey.envelope_size)
    assert len(finished) == 3  # the other three streams had all finished before the call returned
    store.close()


def test_a_store_dropped_without_close_unregisters_its_memory():
    fake = FakeMooncake()
    ns = namespace()
    keys = [ns.store_key(h) for h in ns.block_hashes(range(64 * 4))]
    for k in keys:
        fake.values[k] = bytes(2048)
    store = MooncakeStore(fake)
    assert store.get_prefix(keys, kvkey.envelope_size)[0] == bytes(kvkey.envelope_size)
    assert len(fake.regions) == 1  # this thread's scratch memory
    del store
    gc.collect()
    assert fake.regions == {}
    again = MooncakeStore(fake)  # its scratch may land at the same address: not refused
    assert again.get_prefix(keys, kvkey.envelope_size)[0] == bytes(kvkey.envelope_size)


def test_check_store_over_the_fake_with_stores_dropped_without_close():
    fake = FakeMooncake()
    report = check_store(lambda: MooncakeStore(fake))
    assert report.ok, str(report)
    assert report.case("baseline").loaded > 0
    gc.collect()
    assert fake.regions == {}
