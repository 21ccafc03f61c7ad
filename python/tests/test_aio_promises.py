"""kvkey.aio keeps the sync connector's promises: a cancelled call ends before CancelledError
reaches the caller and leaves its buffers untouched; the async RedisStore fails one key, not
the batch, on a per-key error reply, and one task's failure never closes another task's
connection; a sync kvkey.Connector refuses an async store. Fakes here, a live redis-server in
the tests marked redis (stage 40-redis)."""

import asyncio
import secrets
import threading

import pytest

import kvkey
import kvkey.aio
from kvkey.stores import MemoryStore, StoreError

from conftest import make_identity, server_env
from test_connector_core import snapshot


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
    kvkey.Connector(MemoryStore(), ns)  # the sync connector takes a sync store
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
