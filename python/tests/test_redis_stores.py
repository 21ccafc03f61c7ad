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
import time

import numpy as np
import pytest
import redis
import redis.cluster
from redis.crc import key_slot

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
        store = RedisStore(redis.Redis(host=HOST, port=port, socket_connect_timeout=1), check=False)
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
        store = RedisStore(c, check=False)  # its first connection is the garbage one
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
        conn = kvkey.Connector(RedisStore(faulty, check=False), ns, metrics=Errors())
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
        through = RedisStore(faulty, check=False)
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


# ---- per-key failures: one key of another type misses alone ---------------------------------


def a_key_of_another_type_misses_alone(store, raw):
    """Block 90 of 100 is a list (WRONGTYPE to GET, GETRANGE and STRLEN): the lookup counts the
    90 blocks before it, loads serve the other 99, the failure is counted per key, and the
    connection stays in step (the next calls read the right values)."""
    ns = namespace()
    conn = kvkey.Connector(store, ns)
    hashes = ns.block_hashes(range(100 * 64))
    payloads = [bytes([b]) * 2048 for b in range(100)]
    assert conn.save(hashes, payloads) == 100
    keys = [ns.store_key(h) for h in hashes]
    raw.delete(keys[90])
    raw.rpush(keys[90], b"not a value")
    before = store.key_errors["server"]
    for _ in range(2):  # the second round on the connections the first one used
        assert conn.lookup(hashes) == 90
        got = conn.load(hashes)
        assert [g is not None for g in got] == [i != 90 for i in range(100)]
        assert all(bytes(g) == p for g, p in zip(got, payloads) if g is not None)
        bufs = [bytearray(2048) for _ in hashes]
        results = conn.load_into(hashes, bufs)
        assert [r.status for r in results] == ["missing" if i == 90 else "loaded" for i in range(100)]
        assert bufs[90] == bytearray(2048) and all(bytes(b) == p for b, p in zip(bufs[:90], payloads))
    assert conn.last_error is None  # no call failed: one key did
    heads = store.get_prefix(keys, 1024)
    assert sorted(heads.errors) == [90] and heads[90] is None and heads[89] is not None
    assert heads.errors[90].kind == "server" and "WRONGTYPE" in str(heads.errors[90])
    values = store.get(keys[88:92])
    assert sorted(values.errors) == [2] and values[:2] == [raw.get(keys[88]), raw.get(keys[89])]
    assert store.key_errors["server"] - before == 2 * 3 + 2 and store.last_key_error.kind == "server"
    assert store.exists(keys[89:91]) == [True, True]  # EXISTS answers for a key of any type
    assert conn.save(hashes[90:91], payloads[90:91]) == 1  # SET replaces the list
    assert conn.lookup(hashes) == 100
    assert store.delete(keys) == 100


@pytest.mark.redis
def test_redis_a_key_of_another_type_misses_alone(client):
    a_key_of_another_type_misses_alone(RedisStore(client), client)


@pytest.mark.redis
def test_redis_a_key_of_another_type_misses_alone_without_scripts(client):
    store = RedisStore(client)
    store._script = False  # headers through the pipeline of GETRANGE and STRLEN
    a_key_of_another_type_misses_alone(store, client)


@pytest.mark.redis_cluster
def test_cluster_a_key_of_another_type_misses_alone(cluster):
    a_key_of_another_type_misses_alone(RedisClusterStore(cluster), cluster)


# ---- clients that cannot work are refused; a wrong port is an error at once -----------------


def test_redis_stores_refuse_a_client_that_decodes_responses():
    client = redis.Redis(host=HOST, port=1, decode_responses=True)
    with pytest.raises(ValueError, match="decode_responses=True"):
        RedisStore(client)
    with pytest.raises(TypeError, match="use RedisStore"):
        RedisClusterStore(client)


def test_redis_stores_refuse_an_asyncio_client():
    import redis.asyncio

    with pytest.raises(TypeError, match="asyncio client"):
        RedisStore(redis.asyncio.Redis(host=HOST, port=1))


@pytest.mark.redis_cluster
def test_cluster_store_refuses_a_client_that_decodes_responses():
    spec = server_env("KVKEY_CLUSTER_NODES", "42-redis-cluster", "redis_cluster")
    port = int(spec.split()[0].split(":")[0])
    c = redis.cluster.RedisCluster(host=HOST, port=port, decode_responses=True)
    try:
        with pytest.raises(ValueError, match="decode_responses=True"):
            RedisClusterStore(c)
        with pytest.raises(TypeError, match="use RedisClusterStore"):
            RedisStore(c)
    finally:
        c.close()


def test_redis_a_wrong_port_fails_at_construction():
    with socket.socket() as s:  # bound, never listening: connections are refused
        s.bind((HOST, 0))
        port = s.getsockname()[1]
        with pytest.raises(StoreError) as e:
            RedisStore(redis.Redis(host=HOST, port=port, socket_connect_timeout=1))
        assert e.value.kind == "connection" and f"{HOST}:{port}" in str(e.value)


# ---- redirections: a slot migrated under load ------------------------------------------------


def migrate_slots(slots, src, dst, others, pause=0.0, moved=None):
    """Moves slots from primary src to dst as redis-cli --cluster reshard does: IMPORTING on
    dst, MIGRATING on src, MIGRATE of every key one at a time (pause seconds after each), then
    SETSLOT NODE on dst, src and the other primaries. src, dst, others: redis.Redis of nodes."""
    src_id, dst_id = src.execute_command("CLUSTER", "MYID"), dst.execute_command("CLUSTER", "MYID")
    dst_port = dst.connection_pool.connection_kwargs["port"]
    for s in slots:
        dst.execute_command("CLUSTER", "SETSLOT", s, "IMPORTING", src_id)
        src.execute_command("CLUSTER", "SETSLOT", s, "MIGRATING", dst_id)
    for s in slots:
        while True:
            keys = src.execute_command("CLUSTER", "GETKEYSINSLOT", s, 100)
            if not keys:
                break
            for k in keys:
                src.execute_command("MIGRATE", HOST, dst_port, "", 0, 5000, "KEYS", k)
                if moved is not None:
                    moved.append(k)
                time.sleep(pause)
    for s in slots:
        for node in (dst, src, *others):
            node.execute_command("CLUSTER", "SETSLOT", s, "NODE", dst_id)


@pytest.mark.redis_cluster
def test_cluster_lookups_and_loads_follow_a_slot_migration(cluster):
    """The slots of a third of 200 blocks move from one primary to another, key by key, while
    one client looks up and loads the 200 blocks on a slot map that does not know: keys that
    have left answer ASK (followed with ASKING), then the slots answer MOVED (followed, the
    slot map updated). Every lookup counts all 200 blocks, every load serves them, 0 wrong."""
    ns = namespace()
    store = RedisClusterStore(cluster)
    conn = kvkey.Connector(store, ns)
    hashes = ns.block_hashes(range(200 * 64))
    payloads = [secrets.token_bytes(4096) for _ in hashes]
    assert conn.save(hashes, payloads) == 200
    keys = [ns.store_key(h) for h in hashes]
    owner = {k: cluster.get_node_from_key(k.encode()) for k in keys}
    primaries = sorted({n.port for n in cluster.get_primaries()})
    src_port = owner[keys[0]].port
    dst_port = next(p for p in primaries if p != src_port)
    slots = sorted({cluster.keyslot(k) for k in keys if owner[k].port == src_port})
    nodes = {p: redis.Redis(host=HOST, port=p, socket_timeout=10) for p in primaries}
    others = [nodes[p] for p in primaries if p not in (src_port, dst_port)]
    moved, failure = [], []

    def migrate():
        try:
            migrate_slots(slots, nodes[src_port], nodes[dst_port], others, pause=0.01, moved=moved)
        except Exception as e:  # noqa: BLE001 - reported by the test
            failure.append(e)

    mover = threading.Thread(target=migrate)
    counts, served, wrong, rounds = [], 0, 0, 0
    mover.start()
    while mover.is_alive() or rounds < 3:
        if not mover.is_alive():
            rounds += 1
        counts.append(conn.lookup(hashes))
        for got, p in zip(conn.load(hashes), payloads):
            if got is not None:
                served += 1
                wrong += bytes(got) != p
    mover.join()
    try:
        assert not failure, failure
        during = f"{len(counts)} lookups and loads of 200 blocks"
        print(f"\ncluster migration: {len(slots)} slots ({len(moved)} keys, moved one at a time) from "
              f":{src_port} to :{dst_port} during {during}: lookups counted {min(counts)} to {max(counts)} "
              f"of 200, loads served {served} of {200 * len(counts)}, redirections followed "
              f"{dict(store.redirects)}, per-key errors {dict(store.key_errors)}, store errors "
              f"{conn.last_error}, wrong loads {wrong}")
        assert wrong == 0 and conn.last_error is None
        assert counts == [200] * len(counts) and served == 200 * len(counts)
        assert store.redirects["ask"] > 0 and store.redirects["moved"] > 0
        assert len(moved) >= len(slots)
    finally:
        migrate_slots(slots, nodes[dst_port], nodes[src_port], others)  # back where they were
        for n in nodes.values():
            n.close()
        store.delete(keys)


@pytest.mark.redis_cluster
def test_cluster_a_stale_slot_map_is_followed_and_the_client_kept():
    spec = server_env("KVKEY_CLUSTER_NODES", "42-redis-cluster", "redis_cluster")
    port = int(spec.split()[0].split(":")[0])
    client = redis.cluster.RedisCluster(host=HOST, port=port)
    try:
        store = RedisClusterStore(client)
        keys = [f"kvkey-redir-{secrets.token_hex(4)}-{i}" for i in range(32)]
        values = [secrets.token_bytes(64) for _ in keys]
        assert all(store.put(keys, values))
        m = client.nodes_manager
        primaries = client.get_primaries()
        # make one key's slot point at a primary that does not own it: it answers MOVED
        slot = key_slot(keys[0].encode())
        owner = m.slots_cache[slot][0]
        wrong = next(n for n in primaries if n.name != owner.name)
        m.slots_cache[slot] = [wrong]
        before = sorted((n.name, n.server_type) for n in m.nodes_cache.values())
        got = store.get(keys)
        assert list(got) == values and not got.errors
        assert store.redirects["moved"] >= 1
        assert sorted((n.name, n.server_type) for n in m.nodes_cache.values()) == before
        # a slot mapped to an address outside the cluster fails at the first hop: the call
        # (the store was given that map); a MOVED to one is refused for its key
        store.get(keys)  # refreshes the map (stale after a MOVED)
        assert m.slots_cache[slot][0].name == owner.name
        assert store.delete(keys) == len(keys)
    finally:
        client.close()
