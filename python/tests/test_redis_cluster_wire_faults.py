"""kvkey.stores.RedisClusterStore and kvkey.Connector on a real Redis Cluster whose reply
streams are damaged at the connection level: every socket redis-py opens is wrapped in
one that, once the test arms it, flips bits (one chosen bit, or at a seeded rate, framing
bytes included), hands the bytes over in 1-7-byte fragments, cuts the connection
mid-reply, or trickles. Whatever arrives: no block loads with bytes that are not its own,
every call reads its own replies (the call after a StoreError too), no lookup counts a
block that was never saved, and a slow link ends the call at the store's deadline.

The faults are drawn from a seeded generator in the order the bytes arrive (the test runs
single-threaded), so a run repeats. The slot-map refresh (CLUSTER SLOTS) runs unarmed: the
guarantees are about the command stream. Counts go to the log as
``wire faults: mode cluster-M: calls N, store errors E, wrong loads 0, out-of-step calls 0``.
Needs a cluster: KVKEY_CLUSTER_NODES (scripts/ci/stages/42-redis-cluster.sh starts one).
"""

import random
import secrets
import socket
import time

import pytest
import redis
import redis.cluster
import redis.connection

import kvkey
from kvkey.stores import RedisClusterStore

from conftest import make_unsized_identity as make_identity, server_env  # payloads of any size
from test_redis_wire_faults import HOST, MODES, drive
from test_redis_wire_faults import Oracle as NodeOracle

pytestmark = pytest.mark.redis_cluster


class Faults:
    """What the wrapped sockets do to the bytes they receive while ``armed``."""

    def __init__(self, seed=0, flip_rate=0.0, fragment=False, cut_rate=0.0, flip_first=None, trickle=None,
                 late_after=None):
        self.rng = random.Random(seed)
        self.flip_rate = flip_rate
        self.fragment = fragment
        self.cut_rate = cut_rate
        self.flip_first = flip_first  # (offset, mask): once, in the first armed bytes of any socket
        self.trickle = trickle  # (bytes, seconds): at most that many bytes per read, after a pause
        # Bytes past this offset arrive "late": a read never returns them with earlier bytes,
        # and a non-blocking read (redis-py's check for unread data before it reuses a
        # connection) finds nothing, as when they arrive just after that check.
        self.late_after = late_after
        self.armed = False
        self.sockets = 0


class FaultySocket:
    """A socket whose received bytes pass through Faults; everything else is the socket's."""

    def __init__(self, sock, faults):
        self._sock = sock
        self._faults = faults
        self._seen = 0  # bytes received while armed
        self._fragment_end = None  # where the current fragment ends
        self._cut_at = None  # where the connection is cut
        faults.sockets += 1

    def __getattr__(self, name):
        return getattr(self._sock, name)

    def recv(self, n, *flags):
        f = self._faults
        if not f.armed:
            return self._sock.recv(n, *flags)
        # Every draw is tied to a byte offset, so the faults do not depend on how the
        # kernel splits the stream into reads.
        if f.cut_rate and self._cut_at is None:
            self._cut_at = self._seen + 1 + int(f.rng.expovariate(f.cut_rate))
        if f.fragment:
            if self._fragment_end is None or self._fragment_end <= self._seen:
                self._fragment_end = self._seen + f.rng.randint(1, 7)
            n = min(n, self._fragment_end - self._seen)
        if f.trickle is not None:
            n = min(n, f.trickle[0])
            time.sleep(f.trickle[1])
        if f.late_after is not None:
            if self._seen < f.late_after:
                n = min(n, f.late_after - self._seen)
            elif self._sock.gettimeout() == 0:
                raise socket.timeout("no data yet")
        data = bytearray(self._sock.recv(n, *flags))
        if f.flip_first is not None and self._seen <= f.flip_first[0] < self._seen + len(data):
            data[f.flip_first[0] - self._seen] ^= f.flip_first[1]
            f.flip_first = None
        if f.flip_rate:
            for i in range(len(data)):
                if f.rng.random() < f.flip_rate:
                    data[i] ^= 1 << f.rng.randrange(8)
        if self._cut_at is not None and self._seen + len(data) >= self._cut_at:
            del data[max(0, self._cut_at - 1 - self._seen):]
            self._sock.shutdown(socket.SHUT_RDWR)  # the rest never arrives; the next read sees the end
        self._seen += len(data)
        return bytes(data)

    def recv_into(self, buffer, nbytes=0, *flags):
        data = self.recv(nbytes or len(buffer), *flags)
        buffer[:len(data)] = data
        return len(data)


@pytest.fixture
def nodes():
    spec = server_env("KVKEY_CLUSTER_NODES", "42-redis-cluster", "redis_cluster")
    return [redis.cluster.ClusterNode(HOST, int(item.split(":")[0])) for item in spec.split()]


@pytest.fixture
def faulty(monkeypatch):
    """Wraps every socket redis-py connects from now on; returns a function that sets the faults."""
    state = {"faults": Faults()}
    connect = redis.connection.Connection._connect

    def wrapped(self):
        return FaultySocket(connect(self), state["faults"])

    monkeypatch.setattr(redis.connection.Connection, "_connect", wrapped)

    def use(faults):
        state["faults"] = faults
        return faults

    return use


def cluster_client(nodes, faults, **options):
    settings = {"socket_timeout": 5, "socket_connect_timeout": 5}
    settings.update(options)
    client = redis.cluster.RedisCluster(startup_nodes=nodes, **settings)
    refresh = client.nodes_manager.initialize

    def unarmed_refresh(*args, **kwargs):
        armed, faults.armed = faults.armed, False
        try:
            return refresh(*args, **kwargs)
        finally:
            faults.armed = armed

    client.nodes_manager.initialize = unarmed_refresh
    return client


class Oracle(NodeOracle):
    """Blocks saved with known payloads (spread over the primaries), and blocks never saved."""

    def __init__(self, nodes, tag, salt=None):  # the base saves through one node
        salt = secrets.token_hex(3) if salt is None else salt
        self.ns = kvkey.KeyNamespace(make_identity(tenant=f"{tag}-{salt}".rstrip("-"), kv__block_size=8))
        hashes = self.ns.block_hashes(list(range(8 * 40)))
        self.saved, self.unsaved = hashes[:24], hashes[24:]
        self.payloads = {h: self.payload(h) for h in self.saved}
        self.save(nodes, self.saved, [self.payloads[h] for h in self.saved])

    def save(self, nodes, hashes, payloads):
        direct = redis.cluster.RedisCluster(startup_nodes=nodes, socket_timeout=10)
        kvkey.Connector(RedisClusterStore(direct), self.ns, raise_errors=True).save(hashes, payloads)
        direct.close()


@pytest.mark.parametrize("tail", [b"+OKAY!", b":12345", b"$2\r\nZZ", b"-ERR!!", b"?junk!"])
@pytest.mark.parametrize("late", [False, True], ids=["at-once", "rest-late"])
def test_cluster_flipped_bit_in_first_get_length(nodes, faulty, tail, late):
    """"$2048" read as "$2040" in the first GET reply: the value ends 8 bytes early and its
    last 6 bytes read as a reply of their own. The blocks read are on one node, so they
    share its pipeline. With rest-late, the replies after the first arrive after the call.
    The next calls must read their own replies."""
    o = Oracle(nodes, "wire-cluster")
    faults = faulty(Faults(flip_first=(4, 0x08), late_after=7 + 2048 + 2 if late else None))
    client = cluster_client(nodes, faults)
    node = client.get_node_from_key(o.ns.store_key(o.saved[0])).name
    first, second, third = [h for h in o.saved if client.get_node_from_key(o.ns.store_key(h)).name == node][:3]
    never = o.unsaved[0]
    damaged = Oracle.payload(first, tail)
    o.save(nodes, [first], [damaged])
    conn = kvkey.Connector(RedisClusterStore(client, deadline=30.0), o.ns)
    faults.armed = True
    got = conn.load([first, second])
    assert faults.flip_first is None  # the flip happened
    assert got[0] is None  # never loaded
    assert got[1] is None or bytes(got[1]) == o.payloads[second]
    got = conn.load([first, never, second, third])
    assert [None if p is None else bytes(p) for p in got] == [damaged, None, o.payloads[second], o.payloads[third]]
    assert conn.lookup([first, second, never, third]) == 2
    assert conn.lookup([never, first]) == 0
    assert sorted(conn.store.scan_prefix(o.ns.store_key(first))) == [o.ns.store_key(first)]
    client.close()


@pytest.mark.parametrize("name,options,calls,damages", MODES, ids=[m[0] for m in MODES])
def test_cluster_through_damaging_sockets(nodes, faulty, name, options, calls, damages):
    o = Oracle(nodes, "wire-cluster-" + name.replace("+", "-"), salt="")  # the same keys each run
    faults = faulty(Faults(seed=21, **options))
    client = cluster_client(nodes, faults, socket_timeout=1)
    conn = kvkey.Connector(RedisClusterStore(client, deadline=30.0), o.ns)
    faults.armed = True
    try:
        drive(conn, o, "cluster-" + name, calls, damages)
    finally:
        faults.armed = False
        client.close()


def test_cluster_trickling_replies_end_the_call(nodes, faulty):
    """32 bytes per read after 20 ms: each read is well within the 1 s socket timeout, and
    8 values of 2 KiB take about 10 s. With a deadline of 0.5 s the call must end with a
    timeout and the connection dropped, not run until the last byte."""
    o = Oracle(nodes, "wire-cluster-trickle")
    faults = faulty(Faults(trickle=(32, 0.02)))
    client = cluster_client(nodes, faults, socket_timeout=1)
    conn = kvkey.Connector(RedisClusterStore(client, deadline=0.5), o.ns)
    faults.armed = True
    got = conn.load(o.saved[:8])
    assert all(p is None for p in got)
    assert conn.last_error is not None and conn.last_error.kind == "timeout"
    # The next call, at full speed, runs on a fresh connection and reads its own replies.
    faults.armed = False
    opened = faults.sockets
    conn.store.deadline = 30.0
    got = conn.load(o.saved[:8])
    assert [bytes(p) for p in got] == [o.payloads[h] for h in o.saved[:8]]
    assert faults.sockets > opened
    client.close()
