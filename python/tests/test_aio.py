"""kvkey.aio.Connector: the same connector driven from asyncio, over async stores;
kvkey.stores.aio.RedisStore against a live server (marked redis, stage 40-redis)."""

import asyncio
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
