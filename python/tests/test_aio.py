"""kvkey.aio.Connector: the same connector driven from asyncio, over async stores;
kvkey.stores.aio.RedisStore against a live server (marked redis, stage 40-redis). It keeps
the sync connector's promises: a cancelled call ends before CancelledError reaches the caller
and leaves its buffers untouched; the async RedisStore fails one key, not the batch, on a
per-key error reply, and one task's failure never closes another task's connection; a sync
kvkey.Connector refuses an async store."""

import asyncio
import concurrent.futures
import secrets
import threading

import pytest

import kvkey
import kvkey.aio
from kvkey.stores import MemoryStore, StoreError

from conftest import make_identity, server_env
from test_connector_core import snapshot


class AsyncMemoryStore:
    """MemoryStore's methods as coroutines; records the threads they ran on."""

    def __init__(self):
        self.inner = MemoryStore()
        self.threads = set()

    async def get(self, keys):
        self.threads.add(threading.get_ident())
        await asyncio.sleep(0)
        return self.inner.get(keys)

    async def get_prefix(self, keys, length):
        self.threads.add(threading.get_ident())
        return self.inner.get_prefix(keys, length)

    async def put(self, keys, values):
        self.threads.add(threading.get_ident())
        return self.inner.put(keys, values)

    async def exists(self, keys):
        return self.inner.exists(keys)


def test_aio_connector_has_the_sync_semantics_and_metrics():
    ns = kvkey.KeyNamespace(make_identity())
    hashes = ns.block_hashes(range(256))
    payloads = [bytes([i]) * ns.payload_size for i in range(len(hashes))]

    async def run():
        store = AsyncMemoryStore()
        m = kvkey.Metrics()
        conn = kvkey.aio.Connector(store, ns, metrics=m)
        loop_thread = threading.get_ident()
        assert await conn.save(hashes, payloads) == 4
        assert await conn.lookup(hashes, max_tokens=255) == 3
        assert await conn.lookup_existing(hashes) == 4
        got = await conn.load(hashes)
        assert [bytes(p) for p in got] == payloads
        bufs = [bytearray(ns.payload_size) for _ in hashes]
        res = await conn.load_into(hashes, bufs)
        assert all(r.loaded for r in res) and bufs[2] == payloads[2]
        assert store.threads == {loop_thread}  # the store's coroutines ran on the loop
        # many calls at once, on one loop
        counts = await asyncio.gather(*[conn.lookup(hashes) for _ in range(8)])
        assert counts == [4] * 8
        return snapshot(m)

    s = asyncio.run(run())
    sync_m = kvkey.Metrics()
    sync = kvkey.Connector(MemoryStore(), ns, metrics=sync_m)
    sync.save(hashes, payloads)
    sync.lookup(hashes, max_tokens=255)
    sync.lookup_existing(hashes)
    sync.load(hashes)
    sync.load_into(hashes, [bytearray(ns.payload_size) for _ in hashes])
    for _ in range(8):
        sync.lookup(hashes)
    assert s == snapshot(sync_m)


def test_aio_verification_runs_off_the_event_loop():
    ns = kvkey.KeyNamespace(make_identity())
    hashes = ns.block_hashes(range(64 * 64))
    payloads = [secrets.token_bytes(ns.payload_size) for _ in hashes]

    async def run():
        conn = kvkey.aio.Connector(AsyncMemoryStore(), ns)
        await conn.save(hashes, payloads)
        ticks = 0
        done = False

        async def ticker():
            nonlocal ticks
            while not done:
                ticks += 1
                await asyncio.sleep(0)

        t = asyncio.ensure_future(ticker())
        loaded = await conn.load(hashes)
        done = True
        await t
        assert all(p is not None for p in loaded)
        return ticks

    assert asyncio.run(run()) > 1  # the loop kept running while the batch was verified


def test_aio_store_errors_are_misses():
    class Down(AsyncMemoryStore):
        async def get_prefix(self, keys, length):
            raise StoreError("timeout", "no reply")

    ns = kvkey.KeyNamespace(make_identity())

    async def run():
        conn = kvkey.aio.Connector(Down(), ns, log=False)
        assert await conn.lookup(ns.block_hashes(range(128))) == 0
        assert conn.last_error.kind == "timeout"
        with pytest.raises(StoreError, match="store.timeout"):
            await kvkey.aio.Connector(Down(), ns, raise_errors=True, log=False).lookup(ns.block_hashes(range(128)))

    asyncio.run(run())


@pytest.mark.redis
def test_aio_redis_store_with_redis_asyncio():
    import redis.asyncio

    from kvkey.stores.aio import RedisStore

    port = int(server_env("KVKEY_REDIS_PORT", "40-redis", "redis"))
    ns = kvkey.KeyNamespace(make_identity(tenant=f"aio-{secrets.token_hex(3)}"))
    ranks = [ns]
    hashes = ns.block_hashes(range(64 * 40))
    payloads = [secrets.token_bytes(ns.payload_size) for _ in hashes]

    async def run():
        client = redis.asyncio.Redis(host="127.0.0.1", port=port)
        store = RedisStore(client, batch=16)
        m = kvkey.Metrics()
        conn = kvkey.aio.Connector(store, ranks, metrics=m)
        assert await conn.save(hashes, payloads) == 40
        assert await conn.lookup(hashes) == 40
        got = await conn.load(hashes)
        assert [bytes(p) for p in got] == payloads
        bufs = [bytearray(ns.payload_size) for _ in hashes]
        assert all(r.loaded for r in await conn.load_into(hashes, bufs))
        await client.set(ns.store_key(hashes[5]), b"not a kvkey value")
        assert await conn.lookup(hashes) == 5
        assert snapshot(m).rejected("malformed", "envelope.size") == 1
        keys = [k async for k in store.scan_prefix(ns.key_prefix)]
        assert len(keys) == 40
        assert await store.delete(keys) == 40
        with pytest.raises(ValueError, match="decode_responses"):
            RedisStore(redis.asyncio.Redis(host="127.0.0.1", port=port, decode_responses=True))
        bad = kvkey.aio.Connector(RedisStore(redis.asyncio.Redis(host="127.0.0.1", port=1)), ranks, log=False)
        assert await bad.lookup(hashes) == 0
        assert bad.last_error.kind == "connection"
        await client.close()

    asyncio.run(run())


class AsyncMemoryStoreFull(AsyncMemoryStore):
    async def delete(self, keys):
        return self.inner.delete(keys)

    async def scan_prefix(self, prefix):
        for k in self.inner.scan_prefix(prefix):
            yield k


def test_check_store_runs_the_aio_connector_over_an_async_store():
    from kvkey.testing import check_store

    report = check_store(AsyncMemoryStoreFull)
    assert report.ok, str(report)
    assert len(report.cases) >= 60


@pytest.mark.redis
def test_check_store_on_the_async_redis_store():
    import redis.asyncio

    from kvkey.stores.aio import RedisStore
    from kvkey.testing import check_store

    port = int(server_env("KVKEY_REDIS_PORT", "40-redis", "redis"))
    report = check_store(lambda: RedisStore(redis.asyncio.Redis(host="127.0.0.1", port=port)))
    assert report.ok, str(report)


# ---- the sync connector's promises, kept: cancel, per-key errors, connections, refusal -----------


class GatedStore:
    """An async MemoryStore whose get / get_into wait on `gate` (an asyncio.Event) once
    `hold` is set; it records whether a waiting call was cancelled."""

    def __init__(self, into=False):
        self.inner = MemoryStore()
        self.hold = False
        self.gate = None
        self.entered = None
        self.cancelled = 0
        if into:
            self.get_into = self._get_into

    async def _wait(self):
        if not self.hold:
            return
        self.entered.set()
        try:
            await self.gate.wait()
        except asyncio.CancelledError:
            self.cancelled += 1
            raise

    async def get(self, keys):
        await self._wait()
        return self.inner.get(keys)

    async def _get_into(self, keys, buffers):
        await self._wait()
        out = []
        for k, buf in zip(keys, buffers):
            v = self.inner.values.get(k)
            if v is None:
                out.append(None)
                continue
            n = min(len(v), len(buf))
            buf[:n] = v[:n]
            out.append(len(v))
        return out

    async def get_prefix(self, keys, length):
        return self.inner.get_prefix(keys, length)

    async def put(self, keys, values):
        return self.inner.put(keys, values)


def saved(store, n=4):
    ns = kvkey.KeyNamespace(make_identity())
    hashes = ns.block_hashes(range(64 * n))
    payloads = [secrets.token_bytes(ns.payload_size) for _ in hashes]
    for h, p in zip(hashes, payloads):
        store.inner.put([ns.store_key(h)], [ns.seal_value(h, p)])
    return ns, hashes, payloads


@pytest.mark.parametrize("into", [False, True], ids=["get", "get_into"])
def test_a_cancelled_load_into_leaves_the_buffers_untouched(into):
    store = GatedStore(into=into)
    ns, hashes, payloads = saved(store)

    async def run():
        m = kvkey.Metrics()
        conn = kvkey.aio.Connector(store, ns, metrics=m, log=False)
        store.hold, store.gate, store.entered = True, asyncio.Event(), asyncio.Event()
        bufs = [bytearray(b"\xee" * ns.payload_size) for _ in hashes]
        task = asyncio.ensure_future(conn.load_into(hashes, bufs))
        await store.entered.wait()  # the store's read is under way
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert store.cancelled == 1  # the read the call started was cancelled, not left running
        store.gate.set()
        for _ in range(20):  # whatever the loop and the executor still run
            await asyncio.sleep(0.005)
        assert all(b == b"\xee" * ns.payload_size for b in bufs)
        s = snapshot(m)
        assert s.load_loaded == 0 and sum(m.as_dict()["store_errors"].values()) == 0  # no store error counted
        assert conn.last_error is None
        # the connector serves the next call
        store.hold = False
        res = await conn.load_into(hashes, bufs)
        assert all(r.loaded for r in res) and [bytes(b) for b in bufs] == payloads

    asyncio.run(run())


def test_a_cancelled_call_on_a_sync_store_ends_before_cancelled_error():
    """A sync store's method runs in the worker and cannot be interrupted: the cancelled
    call waits for it, and its reply is never used (the buffers stay untouched)."""
    release = threading.Event()
    entered = threading.Event()

    class Blocking(MemoryStore):
        def get(self, keys):
            entered.set()
            release.wait(30)
            return super().get(keys)

    store = Blocking()
    ns = kvkey.KeyNamespace(make_identity())
    hashes = ns.block_hashes(range(64 * 3))
    kvkey.Connector(store, ns).save(hashes, [secrets.token_bytes(ns.payload_size) for _ in hashes])

    async def run():
        conn = kvkey.aio.Connector(store, ns, log=False)
        bufs = [bytearray(ns.payload_size) for _ in hashes]
        task = asyncio.ensure_future(conn.load_into(hashes, bufs))
        while not entered.is_set():
            await asyncio.sleep(0.001)
        task.cancel()
        await asyncio.sleep(0.05)
        assert not task.done()  # still waiting for the store's get, which holds the call
        release.set()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert all(b == bytearray(ns.payload_size) for b in bufs)

    asyncio.run(run())


def test_a_cancelled_save_waits_for_the_payloads_to_be_read():
    store = GatedStore()
    ns = kvkey.KeyNamespace(make_identity())
    hashes = ns.block_hashes(range(64 * 2))

    class GatedPut(GatedStore):
        async def put(self, keys, values):
            await self._wait()
            return self.inner.put(keys, values)

    store = GatedPut()

    async def run():
        conn = kvkey.aio.Connector(store, ns, log=False)
        store.hold, store.gate, store.entered = True, asyncio.Event(), asyncio.Event()
        task = asyncio.ensure_future(conn.save(hashes, [bytes(ns.payload_size)] * 2))
        await store.entered.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert store.cancelled == 1 and len(store.inner) == 0

    asyncio.run(run())


class HeldExecutor(concurrent.futures.ThreadPoolExecutor):
    """Runs the first job it is given, then holds its result until `release` is set: a
    connector call whose work has verified and written the destinations, not yet ended."""

    def __init__(self):
        super().__init__(max_workers=2)
        self.finished, self.release, self.first = threading.Event(), threading.Event(), True

    def submit(self, fn, /, *args, **kwargs):
        if not self.first:
            return super().submit(fn, *args, **kwargs)
        self.first = False

        def held():
            try:
                return fn(*args, **kwargs)
            finally:
                self.finished.set()
                self.release.wait(30)

        return super().submit(held)


@pytest.mark.parametrize("into", [False, True], ids=["get", "get_into"])
def test_a_cancel_that_lands_after_the_destinations_were_written_puts_them_back(into):
    """The window where the worker has verified and copied into the destinations when the
    cancel lands: the copy is waited for and undone before CancelledError, per-layer parts
    included; the blocks that were not loaded were never written."""
    store = GatedStore(into=into)
    ns, hashes, payloads = saved(store)
    store.inner.values.pop(ns.store_key(hashes[2]))  # a missing block among loaded ones
    half = ns.payload_size // 2

    async def run():
        executor = HeldExecutor()
        conn = kvkey.aio.Connector(store, ns, log=False, executor=executor)
        bufs = [bytearray(b"\xee" * ns.payload_size) for _ in hashes]
        dest = [[memoryview(b)[:half], memoryview(b)[half:]] if i % 2 else b for i, b in enumerate(bufs)]
        task = asyncio.ensure_future(conn.load_into(hashes, dest))
        while not executor.finished.is_set():
            await asyncio.sleep(0.001)
        assert [bytes(b) for i, b in enumerate(bufs) if i != 2] == [p for i, p in enumerate(payloads) if i != 2]
        task.cancel()
        await asyncio.sleep(0.01)
        executor.release.set()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert all(b == b"\xee" * ns.payload_size for b in bufs)
        res = await conn.load_into(hashes, dest)  # the next call serves
        assert [r.status for r in res] == ["loaded", "loaded", "missing", "loaded"]
        assert bytes(bufs[3]) == payloads[3] and bufs[2] == b"\xee" * ns.payload_size
        executor.shutdown()

    asyncio.run(run())


def test_the_copy_kept_for_a_cancel_never_outlives_the_call():
    """The worker's copy of the destinations holds their memory while the call runs only:
    once it has returned, failed or been cancelled, a bytearray destination can be resized."""
    store = GatedStore()
    ns, hashes, payloads = saved(store)

    async def run():
        conn = kvkey.aio.Connector(store, ns, log=False)
        bufs = [bytearray(ns.payload_size) for _ in hashes]
        assert all(r.loaded for r in await conn.load_into(hashes, bufs))
        bufs[0].extend(b"x")
        with pytest.raises(kvkey.InputError, match=r"buffers\[1\]"):
            await conn.load_into(hashes[:2], [bufs[1], bytearray(5)])
        bufs[1].extend(b"x")
        store.hold, store.gate, store.entered = True, asyncio.Event(), asyncio.Event()
        task = asyncio.ensure_future(conn.load_into(hashes[2:], bufs[2:]))
        await store.entered.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        for b in bufs[2:]:
            b.extend(b"x")

    asyncio.run(run())


def test_wait_for_a_timeout_on_a_connector_call():
    store = GatedStore()
    ns, hashes, _ = saved(store)

    async def run():
        conn = kvkey.aio.Connector(store, ns, log=False)
        store.hold, store.gate, store.entered = True, asyncio.Event(), asyncio.Event()
        bufs = [bytearray(ns.payload_size) for _ in hashes]
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(conn.load_into(hashes, bufs), 0.05)
        assert store.cancelled == 1
        assert all(b == bytearray(ns.payload_size) for b in bufs)

    asyncio.run(run())


def test_a_sync_connector_refuses_an_async_store():
    ns = kvkey.KeyNamespace(make_identity())
    with pytest.raises(TypeError, match=r"GatedStore is an asyncio store \(get, get_prefix, put are coroutines\).*"
                                        r"kvkey\.aio\.Connector"):
        kvkey.Connector(GatedStore(), ns)

    class OneAsync(MemoryStore):
        async def exists(self, keys):
            return [False] * len(keys)

    with pytest.raises(TypeError, match=r"OneAsync is an asyncio store \(exists is a coroutine\)"):
        kvkey.Connector(OneAsync(), ns)

    class Coroutines:
        async def __call__(self, keys):
            return [None] * len(keys)

    class CallableAsync(MemoryStore):  # a method that is an object with an async __call__
        get = Coroutines()

    with pytest.raises(TypeError, match=r"CallableAsync is an asyncio store \(get is a coroutine\)"):
        kvkey.Connector(CallableAsync(), ns)


def test_a_store_method_that_returns_a_coroutine_is_named_and_closed():
    """Unseen at construction (a plain def that returns a coroutine): each call is a
    protocol error naming it, a miss, and the coroutine is closed, never left unawaited."""
    ns = kvkey.KeyNamespace(make_identity())
    made = []

    class Hidden(MemoryStore):
        async def _get(self, keys):
            return [None] * len(keys)

        def get(self, keys):
            made.append(self._get(keys))
            return made[-1]

    conn = kvkey.Connector(Hidden(), ns, log=False)
    assert conn.load(ns.block_hashes(range(64))) == [None]
    assert conn.last_error.kind == "protocol" and "kvkey.aio.Connector" in str(conn.last_error)
    assert made and made[0].cr_frame is None  # closed


def test_a_sync_connector_refuses_the_async_redis_store():
    import redis.asyncio

    from kvkey.stores.aio import RedisStore

    store = RedisStore(redis.asyncio.Redis(host="127.0.0.1", port=1))  # never connects
    with pytest.raises(TypeError, match=r"kvkey\.stores\.aio\.RedisStore is an asyncio store"):
        kvkey.Connector(store, kvkey.KeyNamespace(make_identity()))


# ---- kvkey.stores.aio.RedisStore on a live server ------------------------------------------


def redis_port():
    return int(server_env("KVKEY_REDIS_PORT", "40-redis", "redis"))


@pytest.mark.redis
def test_aio_redis_store_fails_one_key_on_an_error_reply():
    import redis.asyncio

    from kvkey.stores.aio import RedisStore

    ns = kvkey.KeyNamespace(make_identity(tenant=f"aio-{secrets.token_hex(3)}"))
    hashes = ns.block_hashes(range(64 * 6))
    payloads = [secrets.token_bytes(ns.payload_size) for _ in hashes]

    async def run():
        client = redis.asyncio.Redis(host="127.0.0.1", port=redis_port())
        store = RedisStore(client, batch=4)
        m = kvkey.Metrics()
        conn = kvkey.aio.Connector(store, ns, metrics=m, log=False)
        assert await conn.save(hashes, payloads) == 6
        bad = ns.store_key(hashes[3])
        await client.delete(bad)
        await client.rpush(bad, b"a list")  # GET, GETRANGE and STRLEN answer WRONGTYPE
        got = await conn.load(hashes)
        assert [p is None for p in got] == [False, False, False, True, False, False]
        assert [bytes(p) for i, p in enumerate(got) if i != 3] == payloads[:3] + payloads[4:]
        assert await conn.lookup(hashes) == 3  # counted up to the failed key, not 0
        bufs = [bytearray(ns.payload_size) for _ in hashes]
        res = await conn.load_into(hashes, bufs)
        assert [r.status for r in res] == ["loaded"] * 3 + ["missing"] + ["loaded"] * 2
        assert snapshot(m).store_error("server") == 3  # one per call, for the one key
        assert store.key_errors["server"] == 3 and "WRONGTYPE" in str(store.last_key_error)
        assert (await store.exists([bad, ns.store_key(hashes[0])])) == [True, True]
        await client.delete(*[ns.store_key(h) for h in hashes])
        await client.close()

    asyncio.run(run())


@pytest.mark.redis
def test_one_tasks_failure_never_closes_another_tasks_connection():
    """While the server is paused, task A's load waits on its connection; task B's call
    passes its deadline. B closes its own connection only: A's load completes."""
    import redis.asyncio

    from kvkey.stores.aio import RedisStore

    ns = kvkey.KeyNamespace(make_identity(tenant=f"aio-{secrets.token_hex(3)}"))
    hashes = ns.block_hashes(range(64 * 8))
    payloads = [secrets.token_bytes(ns.payload_size) for _ in hashes]

    async def run():
        client = redis.asyncio.Redis(host="127.0.0.1", port=redis_port())
        admin = redis.asyncio.Redis(host="127.0.0.1", port=redis_port())
        conn = kvkey.aio.Connector(RedisStore(client), ns, log=False)
        assert await conn.save(hashes, payloads) == 8
        impatient = RedisStore(client, deadline=0.2)
        pool = client.connection_pool
        await admin.execute_command("CLIENT", "PAUSE", 1500, "ALL")
        a = asyncio.ensure_future(conn.load(hashes))
        for _ in range(1000):  # until A holds a connection (bounded)
            if pool._in_use_connections:
                break
            await asyncio.sleep(0.002)
        held = set(pool._in_use_connections)
        assert held
        with pytest.raises(StoreError, match="store.timeout"):
            await impatient.get([ns.store_key(hashes[0])])
        assert all(c.is_connected for c in held)  # A's connection is still open
        got = await a
        assert [bytes(p) for p in got] == payloads
        assert conn.last_error is None
        await admin.execute_command("CLIENT", "UNPAUSE")
        await client.delete(*[ns.store_key(h) for h in hashes])
        await client.close()
        await admin.close()

    asyncio.run(run())


@pytest.mark.redis
def test_a_cancelled_call_on_the_async_redis_store():
    import redis.asyncio

    from kvkey.stores.aio import RedisStore

    ns = kvkey.KeyNamespace(make_identity(tenant=f"aio-{secrets.token_hex(3)}"))
    hashes = ns.block_hashes(range(64 * 4))
    payloads = [secrets.token_bytes(ns.payload_size) for _ in hashes]

    async def run():
        client = redis.asyncio.Redis(host="127.0.0.1", port=redis_port())
        admin = redis.asyncio.Redis(host="127.0.0.1", port=redis_port())
        conn = kvkey.aio.Connector(RedisStore(client), ns, log=False)
        assert await conn.save(hashes, payloads) == 4
        pool = client.connection_pool
        await admin.execute_command("CLIENT", "PAUSE", 1000, "ALL")
        bufs = [bytearray(ns.payload_size) for _ in hashes]
        task = asyncio.ensure_future(conn.load_into(hashes, bufs))
        for _ in range(1000):
            if pool._in_use_connections:
                break
            await asyncio.sleep(0.002)
        held = set(pool._in_use_connections)
        assert held
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert not any(c.is_connected for c in held)  # closed: its replies are still to come
        assert not pool._in_use_connections
        await admin.execute_command("CLIENT", "UNPAUSE")
        await asyncio.sleep(0.05)
        assert all(b == bytearray(ns.payload_size) for b in bufs)
        res = await conn.load_into(hashes, bufs)  # a fresh connection, in step
        assert all(r.loaded for r in res) and [bytes(b) for b in bufs] == payloads
        await client.delete(*[ns.store_key(h) for h in hashes])
        await client.close()
        await admin.close()

    asyncio.run(run())


# ---- the async RedisStore over a fake node (RESP over TCP, test_redis_cluster_redirects) ----


def test_aio_redis_store_fails_one_key_on_a_fake_nodes_error_reply():
    import redis.asyncio

    from kvkey.stores.aio import RedisStore
    from test_redis_cluster_redirects import HOST, Cluster, Node

    c = Cluster()
    node = Node(c)
    try:
        for k in (b"a", b"b", b"c"):
            c.data[k] = b"value " + k
        c.redirects[(node.port, b"b")] = "WRONGTYPE Operation against a key holding the wrong kind of value"

        async def run():
            client = redis.asyncio.Redis(host=HOST, port=node.port)
            store = RedisStore(client)
            got = await store.get(["a", "b", "c"])
            assert list(got) == [b"value a", None, b"value c"]
            assert got.errors[1].kind == "server" and "WRONGTYPE" in str(got.errors[1])
            pre = await store.get_prefix(["a", "b"], 3)
            assert bytes(pre[0]) == b"val" and pre[0].total_size == 7 and pre[1] is None and 1 in pre.errors
            assert list(await store.exists(["a", "b"])) == [True, False]
            assert list(await store.put(["a", "b"], [b"x", b"y"])) == [True, False]
            assert store.key_errors["server"] == 4
            await client.close()

        asyncio.run(run())
    finally:
        node.stop()


def test_aio_one_tasks_timeout_never_closes_another_tasks_connection_on_a_fake_node():
    import redis.asyncio

    from kvkey.stores.aio import RedisStore
    from test_redis_cluster_redirects import HOST, Cluster, Node

    c = Cluster()
    node = Node(c)
    try:
        c.data[b"slow"], c.data[b"slower"] = b"slow value", b"slower value"
        c.stall[b"slow"], c.stall[b"slower"] = 0.6, 3.0

        async def run():
            client = redis.asyncio.Redis(host=HOST, port=node.port)
            patient, impatient = RedisStore(client), RedisStore(client, deadline=0.2)
            a = asyncio.ensure_future(patient.get(["slow"]))
            await asyncio.sleep(0.05)
            with pytest.raises(StoreError, match="store.timeout"):
                await impatient.get(["slower"])
            assert list(await a) == [b"slow value"]  # its connection was left open
            await client.close()

        asyncio.run(run())
    finally:
        node.stop()


def test_aio_save_and_load_into_through_staging_slots():
    """staging= and digest_threads= reach the sync connector: the rows' slices are gathered
    into the slots and scattered back, verified, as kvkey.Connector does."""
    ns = kvkey.KeyNamespace(make_identity())
    hashes = ns.block_hashes(range(256))
    half = ns.payload_size // 2
    rows = [bytearray(secrets.token_bytes(half * len(hashes))) for _ in range(2)]

    def parts(rs):
        return [[memoryview(r)[b * half:(b + 1) * half] for r in rs] for b in range(len(hashes))]

    async def run():
        store = MemoryStore()
        conn = kvkey.aio.Connector(store, ns, digest_threads=2)
        slots = kvkey.Slots(store, len(hashes), ns.payload_size)
        assert await conn.save(hashes, parts(rows), staging=slots, indices=[3, 2, 1, 0]) == 4
        v = bytearray(store.values[ns.store_key(hashes[1])])
        v[-1] ^= 1
        store.values[ns.store_key(hashes[1])] = bytes(v)
        out = [bytearray(len(r)) for r in rows]
        res = await conn.load_into(hashes, parts(out), staging=slots)
        return [r.status for r in res], out

    statuses, out = asyncio.run(run())
    assert statuses == ["loaded", "rejected", "loaded", "loaded"]
    for r, o in zip(rows, out):
        assert o[:half] == r[:half] and o[2 * half:] == r[2 * half:]
        assert o[half:2 * half] == bytes(half)  # the rejected block's slices untouched
