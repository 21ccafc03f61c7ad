"""RedisClusterStore and the redirects it is answered: fake cluster nodes at the socket level
(RESP over TCP, standard library only) answer MOVED and ASK as a test sets them. A redirect to
an address outside the cluster's slot map, to a node that cannot be reached, or naming a slot
that is not the key's own fails that key alone, never the call; the user's client is never
changed by a redirect (no address becomes a primary of it); a redirect inside the cluster is
followed. On a real cluster: test_redis_stores.py, test_cluster_a_stale_slot_map_is_followed_and_the_client_kept."""

import secrets
import socket
import socketserver
import threading
import time

import pytest
import redis
import redis.cluster
from redis.crc import key_slot

import kvkey
from kvkey.stores import RedisClusterStore

from conftest import make_unsized_identity as make_identity, server_env

HOST = "127.0.0.1"


def free_port():
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def encode(reply):
    if reply is None:
        return b"$-1\r\n"
    if isinstance(reply, Err):
        return b"-" + reply.text.encode() + b"\r\n"
    if isinstance(reply, Simple):
        return b"+" + reply.text.encode() + b"\r\n"
    if isinstance(reply, bool):
        raise TypeError("no bools in RESP")
    if isinstance(reply, int):
        return b":%d\r\n" % reply
    if isinstance(reply, str):
        reply = reply.encode()
    if isinstance(reply, bytes):
        return b"$%d\r\n%s\r\n" % (len(reply), reply)
    return b"*%d\r\n" % len(reply) + b"".join(encode(r) for r in reply)


class Err:
    def __init__(self, text):
        self.text = text


class Simple:
    def __init__(self, text):
        self.text = text


class Cluster:
    """The fake cluster's state: one keyspace, the slot map CLUSTER SLOTS answers, and per
    node and key the redirect it answers instead of serving the key."""

    def __init__(self):
        self.data = {}
        self.slots = []  # [start, end, (host, port), replicas...]
        self.redirects = {}  # (node port, key) -> "MOVED 123 host:port" / "ASK ..."
        self.log = []  # (node port, command name, key)
        self.stall = {}  # key -> seconds the node waits before it answers a command on it
        self.lock = threading.Lock()


class Node(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, cluster, port=0):
        self.cluster = cluster
        super().__init__((HOST, port), Handler)
        self.port = self.server_address[1]
        threading.Thread(target=self.serve_forever, daemon=True).start()

    def stop(self):
        self.shutdown()
        self.server_close()


class Handler(socketserver.StreamRequestHandler):
    def read_command(self):
        line = self.rfile.readline()
        if not line:
            return None
        assert line[:1] == b"*", line
        args = []
        for _ in range(int(line[1:])):
            n = int(self.rfile.readline()[1:])
            args.append(self.rfile.read(n + 2)[:-2])
        return args

    def handle(self):
        node = self.server
        c = node.cluster
        asking = False
        while True:
            cmd = self.read_command()
            if cmd is None:
                return
            name = cmd[0].upper().decode()
            key = cmd[1] if len(cmd) > 1 else None
            with c.lock:
                c.log.append((node.port, name, key))
            if name == "CLUSTER" and cmd[1].upper() == b"SLOTS":
                reply = [[s[0], s[1]] + [[h, p, f"id{p}"] for h, p in s[2:]] for s in c.slots]
            elif name == "COMMAND":
                reply = []
            elif name == "INFO":
                reply = b"# Cluster\r\ncluster_enabled:1\r\n"
            elif name == "PING":
                reply = Simple("PONG")
            elif name == "ECHO":
                reply = cmd[1]
            elif name in ("ASKING", "READONLY"):
                reply = Simple("OK")
            elif (node.port, key) in c.redirects and not asking:
                reply = Err(c.redirects[(node.port, key)])
            elif name == "GET":
                reply = c.data.get(key)
            elif name == "GETRANGE":
                reply = c.data.get(key, b"")[int(cmd[2]):int(cmd[3]) + 1]
            elif name == "STRLEN":
                reply = len(c.data.get(key, b""))
            elif name == "SET":
                c.data[key] = cmd[2]
                reply = Simple("OK")
            elif name == "EXISTS":
                reply = int(key in c.data)
            elif name == "UNLINK":
                reply = int(c.data.pop(key, None) is not None)
            else:
                reply = Err(f"ERR unknown command {name}")
            asking = name == "ASKING"
            if key in c.stall:
                time.sleep(c.stall[key])
            self.wfile.write(encode(reply))
            self.wfile.flush()


@pytest.fixture
def fake():
    """Nodes a (slots 0-8191, replica c) and b (8192-15999) are up; d (16000-16383) is in the
    slot map but down; e is up but no node of the cluster."""
    cluster = Cluster()
    a, b, c, e = (Node(cluster) for _ in range(4))
    d = free_port()
    cluster.slots = [[0, 8191, (HOST, a.port), (HOST, c.port)], [8192, 15999, (HOST, b.port)],
                     [16000, 16383, (HOST, d)]]
    client = redis.cluster.RedisCluster(host=HOST, port=a.port)
    state = {"cluster": cluster, "a": a.port, "b": b.port, "c": c.port, "d": d, "e": e.port, "client": client}
    yield state
    client.close()
    for n in (a, b, c, e):
        n.stop()


def keys_on(port_range, n, prefix="k"):
    """n keys whose slots lie in port_range (a (start, end) slot range)."""
    out, i = [], 0
    while len(out) < n:
        k = f"{prefix}{i}"
        if port_range[0] <= key_slot(k.encode()) <= port_range[1]:
            out.append(k)
        i += 1
    return out


def client_view(client):
    m = client.nodes_manager
    return (sorted(m.nodes_cache), sorted(n.name for n in client.get_primaries()),
            {s: [n.name for n in m.slots_cache[s]] for s in (0, 8191, 8192, 15999, 16000)})


def test_a_redirect_outside_the_cluster_fails_that_key_alone(fake):
    c, client = fake["cluster"], fake["client"]
    keys = keys_on((0, 8191), 3) + keys_on((8192, 15999), 3, "m")
    for k in keys:
        c.data[k.encode()] = b"value of " + k.encode()
    before = client_view(client)
    store = RedisClusterStore(client)
    bad = keys[1]
    for kind in ("MOVED", "ASK"):
        c.redirects[(fake["a"], bad.encode())] = f"{kind} {key_slot(bad.encode())} {HOST}:{fake['e']}"
        got = store.get(keys)
        assert [g is None for g in got] == [False, True, False, False, False, False], kind
        assert got.errors[1].kind == "protocol" and "not a node of the cluster" in str(got.errors[1]), kind
        assert not [e for e in c.log if e[0] == fake["e"]], "the address outside the cluster was contacted"
        assert client_view(client) == before, kind  # no address added, no primary changed
    assert store.exists(keys) == [True, False, True, True, True, True]
    pre = store.get_prefix(keys, 4)
    assert pre[1] is None and pre.errors[1].kind == "protocol" and bytes(pre[0]) == b"valu"


def test_a_redirect_naming_another_slot_is_not_followed(fake):
    c, client = fake["cluster"], fake["client"]
    keys = keys_on((0, 8191), 2)
    for k in keys:
        c.data[k.encode()] = b"v"
    slot = key_slot(keys[0].encode())
    c.redirects[(fake["a"], keys[0].encode())] = f"MOVED {slot + 1} {HOST}:{fake['b']}"
    before = client_view(client)
    store = RedisClusterStore(client)
    got = store.get(keys)
    assert got[0] is None and got[1] == b"v"
    assert got.errors[0].kind == "protocol" and "the key's slot is" in str(got.errors[0])
    assert not [e for e in c.log if e[0] == fake["b"] and e[1] == "GET"]
    assert client_view(client) == before and store.redirects["moved"] == 0


def test_a_redirect_to_a_node_that_cannot_be_reached_fails_that_key_alone(fake):
    c, client = fake["cluster"], fake["client"]
    keys = keys_on((0, 8191), 2) + keys_on((8192, 15999), 2, "m")
    for k in keys:
        c.data[k.encode()] = b"v"
    bad = keys[2]
    c.redirects[(fake["b"], bad.encode())] = f"MOVED {key_slot(bad.encode())} {HOST}:{fake['d']}"  # in the map, down
    store = RedisClusterStore(client)
    got = store.get(keys)
    assert [g for g in got] == [b"v", b"v", None, b"v"]
    assert got.errors[2].kind == "connection" and str(fake["d"]) in str(got.errors[2])
    assert store.key_errors["connection"] == 1
    # the call after: the slot map is refreshed from the cluster (CLUSTER SLOTS), the rest served again
    c.redirects.clear()
    assert list(store.get(keys)) == [b"v"] * 4


@pytest.mark.parametrize("text", ["MOVED abc {host}:1", "MOVED {slot}", "ASK", "MOVED {slot} {host}",
                                  "ASK {slot} {host}:port", "MOVED {slot} [::1]:x"])
def test_a_redirect_redis_py_cannot_parse_fails_that_key_alone(fake, text):
    """redis-py raises inside its reply parser for these, which broke the whole pipeline
    (every key of the call failed): the key alone fails, the parser is left as it was."""
    c, client = fake["cluster"], fake["client"]
    keys = keys_on((0, 8191), 3) + keys_on((8192, 15999), 2, "m")
    for k in keys:
        c.data[k.encode()] = b"v"
    c.redirects[(fake["a"], keys[1].encode())] = text.format(slot=key_slot(keys[1].encode()), host=HOST)
    before = client_view(client)
    store = RedisClusterStore(client)
    got = store.get(keys)
    assert [g for g in got] == [b"v", None, b"v", b"v", b"v"]
    assert got.errors[1].kind == "protocol" and "not followed" in str(got.errors[1])
    assert client_view(client) == before
    parsers = [conn._parser for n in client.get_nodes() if n.redis_connection is not None
               for conn in n.redis_connection.connection_pool._available_connections]
    assert parsers and all("EXCEPTION_CLASSES" not in vars(p) for p in parsers)  # put back as it was
    c.redirects.clear()
    assert list(store.get(keys)) == [b"v"] * 5


def test_a_redirect_inside_the_cluster_is_followed_without_changing_the_client(fake):
    c, client = fake["cluster"], fake["client"]
    keys = keys_on((0, 8191), 3)
    for k in keys:
        c.data[k.encode()] = b"v-" + k.encode()
    moved, asked = keys[0], keys[1]
    c.redirects[(fake["a"], moved.encode())] = f"MOVED {key_slot(moved.encode())} {HOST}:{fake['b']}"
    c.redirects[(fake["a"], asked.encode())] = f"ASK {key_slot(asked.encode())} {HOST}:{fake['c']}"
    before = client_view(client)
    store = RedisClusterStore(client)
    got = store.get(keys)
    assert list(got) == [b"v-" + k.encode() for k in keys] and not got.errors
    assert store.redirects == {"moved": 1, "ask": 1}
    assert (fake["b"], "GET", moved.encode()) in c.log
    i = c.log.index((fake["c"], "GET", asked.encode()))
    assert c.log[i - 1] == (fake["c"], "ASKING", None)
    assert client_view(client) == before  # redis-py's own MOVED handling would make b the slot's primary
    slots_asked = sum(1 for e in c.log if e[1] == "CLUSTER")
    store.get(keys[2:])
    assert sum(1 for e in c.log if e[1] == "CLUSTER") == slots_asked + 1  # the map refreshed after a MOVED


def test_the_connector_over_redirects_that_are_not_followed(fake):
    c, client = fake["cluster"], fake["client"]
    ns = kvkey.KeyNamespace(make_identity(tenant=f"redir-{secrets.token_hex(3)}"))
    hashes = [h for h in ns.block_hashes(range(64 * 40)) if key_slot(ns.store_key(h).encode()) < 16000][:8]
    payloads = [secrets.token_bytes(256) for _ in hashes]
    store = RedisClusterStore(client)
    m = kvkey.Metrics()
    conn = kvkey.Connector(store, ns, metrics=m, raise_errors=True, log=False)
    assert conn.save(hashes, payloads) == 8
    outside, down = (ns.store_key(hashes[i]).encode() for i in (2, 5))
    for key, port in ((outside, fake["e"]), (down, fake["d"])):
        owner = fake["a"] if key_slot(key) <= 8191 else fake["b"]
        c.redirects[(owner, key)] = f"MOVED {key_slot(key)} {HOST}:{port}"
    got = conn.load(hashes)  # raise_errors: the call's errors raise, a key's do not
    assert [p is None for p in got] == [i in (2, 5) for i in range(8)]
    assert [bytes(p) for i, p in enumerate(got) if p is not None] == [p for i, p in enumerate(payloads)
                                                                     if i not in (2, 5)]
    errors = m.as_dict()["store_errors"]
    assert errors["protocol"] == 1 and errors["connection"] == 1
    bufs = [bytearray(256) for _ in hashes]
    res = conn.load_into(hashes, bufs)
    assert [r.status for r in res] == ["missing" if i in (2, 5) else "loaded" for i in range(8)]
