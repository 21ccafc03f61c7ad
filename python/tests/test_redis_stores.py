"""kvkey.stores.RedisStore and RedisClusterStore against live servers, and check_store on them.

The servers come from the CI stages: 40-redis exports KVKEY_REDIS_PORT (one redis-server),
42-redis-cluster exports KVKEY_CLUSTER_NODES ("port:pid ..."). The tests that need them are
marked redis / redis_cluster (deselected elsewhere with -m "not redis and not redis_cluster");
selected without their server they fail.
"""

import collections
import pathlib
import secrets
import socket
import sys
import threading

import numpy as np
import pytest
import redis
import redis.cluster

import kvkey
from kvkey.stores import RedisClusterStore, RedisStore, StoreError
from kvkey.testing import check_store

from conftest import make_unsized_identity as make_identity, server_env  # payloads of any size

HOST = "127.0.0.1"


@pytest.fixture
def client():
    port = int(server_env("KVKEY_REDIS_PORT", "40-redis", "redis"))
    c = redis.Redis(host=HOST, port=port, socket_timeout=10, socket_connect_timeout=5)
    yield c
    c.close()


@pytest.fixture
def cluster():
    spec = server_env("KVKEY_CLUSTER_NODES", "42-redis-cluster", "redis_cluster")
    nodes = [redis.cluster.ClusterNode(HOST, int(item.split(":")[0])) for item in spec.split()]
    c = redis.cluster.RedisCluster(startup_nodes=nodes, socket_timeout=10, socket_connect_timeout=5)
    yield c
    c.close()


def namespace():
    return kvkey.KeyNamespace(make_identity(tenant=f"redis-{secrets.token_hex(3)}"))


def protocol_roundtrip(store):
    p = f"kvk-test-{secrets.token_hex(4)}/"
    keys = [p + f"k{i}" for i in range(700)]  # more than one pipeline batch
    store.put(keys, [b"v%d" % i + bytes(2000) for i in range(700)])
    assert store.get([keys[3], p + "nope"]) == [b"v3" + bytes(2000), None]
    heads = store.get_prefix(keys + [p + "nope"], 1024)
    assert heads[5] == (b"v5" + bytes(2000))[:1024] and heads[-1] is None and len(heads) == 701
    assert heads[5].total_size == 2002  # the lookup compares it with the header's payload size
    assert store.exists([keys[0], p + "nope"]) == [True, False]
    assert sorted(store.scan_prefix(p)) == sorted(keys)
    assert store.delete(keys + [p + "nope"]) == 700
    assert list(store.scan_prefix(p)) == []


def connector_roundtrip(store):
    ns = namespace()
    conn = kvkey.Connector(store, ns)
    hashes = ns.block_hashes(list(range(8 * 64)))
    payloads = [np.full(4096, b, dtype=np.uint8) for b in range(8)]
    assert conn.save(hashes, payloads) == 8
    assert conn.lookup(hashes) == 8
    bufs = [np.zeros(4096, dtype=np.uint8) for _ in hashes]
    assert all(r.loaded for r in conn.load_into(hashes, bufs))
    assert all(np.array_equal(a, b) for a, b in zip(bufs, payloads))
    assert [bytes(p) for p in conn.load(hashes)] == [p.tobytes() for p in payloads]
    keys = list(store.scan_prefix(ns.tenant_prefix))
    assert len(keys) == 8 and store.delete(keys) == 8


def keys_not_utf8_roundtrip(store, raw):
    """Keys planted under a prefix that are not UTF-8 (or not ASCII): scan_prefix lists
    them, and every method takes what it listed, so a purge removes them all."""
    p = f"kvk-test-{secrets.token_hex(4)}/"
    planted = [p.encode() + k for k in (b"\xff\xfe", "\u00e9".encode(), b"\x80abc", b"\xed\xa0\x80")]
    for k in planted:
        raw(k, b"v")
    keys = list(store.scan_prefix(p))
    assert len(keys) == 4
    assert store.exists(keys) == [True] * 4 and store.get(keys) == [b"v"] * 4
    assert [h is not None for h in store.get_prefix(keys, 1024)] == [True] * 4
    assert store.put(keys, [b"w"] * 4) in (None, [True] * 4)
    assert store.delete(keys) == 4
    assert list(store.scan_prefix(p)) == []


@pytest.mark.redis
def test_redis_protocol(client):
    protocol_roundtrip(RedisStore(client, batch=256))


@pytest.mark.redis
def test_redis_keys_that_are_not_utf8(client):
    keys_not_utf8_roundtrip(RedisStore(client), client.set)


@pytest.mark.redis
def test_redis_connector(client):
    connector_roundtrip(RedisStore(client))


@pytest.mark.redis
def test_redis_check_store(client):
    report = check_store(lambda: RedisStore(client))
    print("\n" + str(report).splitlines()[0])
    assert report.ok, str(report)


@pytest.mark.redis
def test_redis_empty_value_reads_as_missing_at_lookup(client):
    ns = namespace()
    store = RedisStore(client)
    h = ns.block_hashes(range(64))[0]
    client.set(ns.store_key(h), b"")
    assert store.get_prefix([ns.store_key(h)], 1024) == [None]
    assert kvkey.Connector(store, ns).lookup([h]) == 0
    store.delete([ns.store_key(h)])


@pytest.mark.redis
def test_redis_lookup_stops_at_a_value_shorter_than_its_header_says(client):
    ns = namespace()
    store = RedisStore(client)
    conn = kvkey.Connector(store, ns)
    hashes = ns.block_hashes(range(3 * 64))
    conn.save(hashes, [bytes(3000)] * 3)
    key = ns.store_key(hashes[1])
    client.set(key, client.get(key)[:-1])  # torn tail: the header alone still verifies
    assert conn.lookup(hashes) == 1 and conn.lookup_existing(hashes) == 3
    assert store.delete(list(store.scan_prefix(ns.tenant_prefix))) == 3


@pytest.mark.redis
def test_redis_headers_without_scripts(client):
    """A server that refuses scripts (disabled, ACL): the store reads headers with a pipeline."""
    calls = []

    class NoScripts(redis.Redis):
        def register_script(self, script):
            def refuse(keys, args, client=None):
                calls.append(len(keys))
                raise redis.exceptions.ResponseError("NOPERM this user has no permissions to run 'evalsha'")
            return refuse

    c = NoScripts(host=HOST, port=client.connection_pool.connection_kwargs["port"])
    ns = namespace()
    conn = kvkey.Connector(RedisStore(c), ns)
    hashes = ns.block_hashes(range(2 * 64))
    conn.save(hashes, [b"kv"] * 2)
    assert conn.lookup(hashes) == 2 and conn.lookup(hashes) == 2
    assert calls == [2]  # tried once, then the pipeline
    RedisStore(client).delete([ns.store_key(h) for h in hashes])


def test_redis_unreachable_is_a_connection_error():
    with socket.socket() as s:  # bound, never listening: connections are refused
        s.bind((HOST, 0))
        port = s.getsockname()[1]
        store = RedisStore(redis.Redis(host=HOST, port=port, socket_connect_timeout=1))
        with pytest.raises(StoreError) as e:
            store.get(["k"])
        assert e.value.kind == "connection"
        metrics = []

        class M:
            def record_store_error(self, kind):
                metrics.append(kind)

            def record_lookup(self, *a):
                pass

        ns = namespace()
        assert kvkey.Connector(store, ns, metrics=M()).lookup(ns.block_hashes(range(64))) == 0
        assert metrics == ["connection"]


class GarbageServer:
    """Answers every command of its first connection with a reply that is not RESP, then
    closes it; later connections are forwarded to the real server."""

    def __init__(self, port):
        self.target = port
        self.sock = socket.socket()
        self.sock.bind((HOST, 0))
        self.sock.listen(8)
        self.port = self.sock.getsockname()[1]
        self.connections = 0
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            if self.connections == 1:
                c.recv(65536)
                c.sendall(b"?this is not a reply\r\n")
                continue  # left open: the client must not reuse it
            up = socket.create_connection((HOST, self.target))
            for a, b in ((c, up), (up, c)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(a, b):
        try:
            while True:
                data = a.recv(65536)
                if not data:
                    break
                b.sendall(data)
        except OSError:
            pass
        finally:
            for s in (a, b):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self):
        self.sock.close()


@pytest.mark.redis
def test_redis_a_broken_reply_drops_the_connection(client):
    proxy = GarbageServer(client.connection_pool.connection_kwargs["port"])
    try:
        c = redis.Redis(host=HOST, port=proxy.port, socket_timeout=5)
        store = RedisStore(c)
        ns = namespace()
        h = ns.block_hashes(range(64))[0]
        with pytest.raises(StoreError) as e:
            store.put([ns.store_key(h)], [ns.seal_value(h, b"kv")])
        assert e.value.kind == "protocol"
        pool = c.connection_pool
        assert all(conn._sock is None for conn in pool._available_connections)  # none kept open
        conn = kvkey.Connector(store, ns)
        assert conn.save([h], [b"kv"]) == 1  # a new connection, in step
        assert [bytes(p) for p in conn.load([h])] == [b"kv"]
        assert proxy.connections == 2
        store.delete([ns.store_key(h)])
    finally:
        proxy.close()


def fault_proxy():
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "tests" / "integration"))
    try:
        from fault_proxy import FaultProxy
    finally:
        sys.path.pop(0)
    return FaultProxy


@pytest.mark.parametrize("faults", [dict(flip_rate=6e-6), dict(cut_rate=2e-6), dict(fragment=True, flip_rate=2e-6)],
                         ids=["flips", "cuts", "fragments+flips"])
@pytest.mark.redis
def test_redis_through_a_faulty_wire(client, faults):
    """Replies with flipped bits, cut connections: lookups and loads miss, never serve
    wrong bytes, and a lookup never counts past a block whose stored header is foreign."""
    ns = namespace()
    hashes = ns.block_hashes(range(48 * 64))
    payloads = [bytes([b]) * 8192 for b in range(48)]
    clean = kvkey.Connector(RedisStore(client), ns)
    assert clean.save(hashes, payloads) == 48
    foreign = kvkey.KeyNamespace(make_identity(tenant=ns.identity.tenant, kv__dtype="uint8"))
    client.set(ns.store_key(hashes[40]), foreign.seal_value(hashes[40], payloads[40]))
    errors = collections.Counter()

    class Errors:
        def record_store_error(self, kind):
            errors[kind] += 1

        def __getattr__(self, name):
            return lambda *a: None

    with fault_proxy()(client.connection_pool.connection_kwargs["port"], seed=11, **faults) as proxy:
        faulty = redis.Redis(host=HOST, port=proxy.port, socket_timeout=5, socket_connect_timeout=5)
        conn = kvkey.Connector(RedisStore(faulty), ns, metrics=Errors())
        counted = loaded = wrong = 0
        for _ in range(12):
            n = conn.lookup(hashes)
            assert n <= 40, "a lookup counted the foreign header of block 40"
            counted += n
            for h, p, got in zip(hashes, payloads, conn.load(hashes)):
                if got is not None:
                    loaded += 1
                    wrong += bytes(got) != p
            bufs = [bytearray(8192) for _ in hashes]
            for p, buf, r in zip(payloads, bufs, conn.load_into(hashes, bufs)):
                if r.loaded:
                    loaded += 1
                    wrong += bytes(buf) != p
                else:
                    wrong += buf != bytearray(8192)  # untouched
        injected = proxy.flips + proxy.cuts
        faulty.close()
    print(f"\nredis faulty wire {sorted(faults)}: {injected} faults injected, store errors {dict(errors)}, "
          f"blocks counted {counted}, loaded {loaded}, wrong loads {wrong}")
    assert wrong == 0
    assert injected > 0 and loaded > 0
    assert clean.store.delete(list(clean.store.scan_prefix(ns.tenant_prefix))) == 48


@pytest.mark.redis
def test_redis_a_connection_out_of_step_is_closed_before_the_pool_has_it(client):
    """"$2048" read as "$2040": the value's last bytes read as a reply of their own and the
    sentinel's reply stays in the socket. The store closes that connection before it goes
    back to the pool, not after (another thread could take it in between: here, closing
    the idle connections afterwards is switched off)."""
    ns = namespace()
    first, second = ns.block_hashes(range(2 * 64))
    keys = [ns.store_key(first), ns.store_key(second)]
    store = RedisStore(client)
    values = [ns.seal_value(first, bytes(1018) + b"$2\r\nZZ"), ns.seal_value(second, bytes(1024))]
    store.put(keys, values)
    with fault_proxy()(client.connection_pool.connection_kwargs["port"], flip_at=[(0, 4, 0x08)]) as proxy:
        faulty = redis.Redis(host=HOST, port=proxy.port, socket_timeout=5)
        through = RedisStore(faulty)
        through._drop_connections = lambda: None
        with pytest.raises(StoreError) as e:
            through.get(keys)
        assert e.value.kind == "protocol"
        assert all(c._sock is None for c in faulty.connection_pool._available_connections)
        assert through.get(keys) == values and proxy.connections == 2
        faulty.close()
    store.delete(keys)


@pytest.mark.redis_cluster
def test_cluster_protocol(cluster):
    protocol_roundtrip(RedisClusterStore(cluster))


@pytest.mark.redis_cluster
def test_cluster_keys_that_are_not_utf8(cluster):
    keys_not_utf8_roundtrip(RedisClusterStore(cluster), cluster.set)


@pytest.mark.redis_cluster
def test_cluster_connector(cluster):
    connector_roundtrip(RedisClusterStore(cluster))


@pytest.mark.redis_cluster
def test_cluster_check_store(cluster):
    report = check_store(lambda: RedisClusterStore(cluster))
    print("\n" + str(report).splitlines()[0])
    assert report.ok, str(report)
