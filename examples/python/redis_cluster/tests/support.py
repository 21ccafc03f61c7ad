# SPDX-License-Identifier: Apache-2.0
"""Shared pieces of the Redis Cluster tests: the cluster under test, deployments
with deterministic KV payloads, client threads that count what they were served,
and bounded waits.

The cluster comes from scripts/ci/stages/42-redis-cluster.sh, which exports
KVKEY_CLUSTER_NODES="port:pid port:pid ..." (six nodes on 127.0.0.1).
"""

from __future__ import annotations

import collections
import hashlib
import os
import random
import secrets
import threading
import time

import redis

import kvkey
from kvkey_cluster import ClusterConnector, ClusterError, LoadStatus

HOST = "127.0.0.1"
LAYERS, HEADS, HEAD_DIM, BLOCK = 2, 8, 4, 8
RUN = secrets.token_hex(3)  # tenants of this run: no clash with earlier runs on the same cluster


# ---- the cluster ----------------------------------------------------------------------------


def cluster_nodes() -> dict:
    """{port: pid} of the nodes the CI stage started. Fails (never skips) when unset."""
    spec = os.environ.get("KVKEY_CLUSTER_NODES", "")
    if not spec:
        raise AssertionError("KVKEY_CLUSTER_NODES is not set: run scripts/ci/stages/42-redis-cluster.sh")
    return {int(port): int(pid) for port, pid in (item.split(":") for item in spec.split())}


def connector(**options) -> ClusterConnector:
    return ClusterConnector([(HOST, port) for port in cluster_nodes()], **options)


def node(port: int) -> redis.Redis:
    """A plain (non-cluster) client of one node."""
    return redis.Redis(host=HOST, port=port, socket_timeout=10, socket_connect_timeout=5)


def alive(port: int) -> bool:
    try:
        return node(port).ping()
    except redis.exceptions.RedisError:
        return False


def cluster_view(port: int) -> list:
    """CLUSTER NODES as seen by one node: dicts with id, port, flags, master, slots."""
    r = node(port)
    r.set_response_callback("CLUSTER NODES", lambda response, **options: response)  # the raw text
    out = []
    for line in r.execute_command("CLUSTER NODES").decode().splitlines():
        f = line.split()
        slots = []
        for s in f[8:]:
            if s.startswith("["):
                continue  # a slot being migrated or imported
            lo, _, hi = s.partition("-")
            slots.append((int(lo), int(hi or lo)))
        out.append(dict(id=f[0], port=int(f[1].split(":")[1].split("@")[0]), flags=set(f[2].split(",")),
                        master=f[3], slots=slots))
    return out


def primaries(port: int) -> list:
    """The primaries holding slots, by one node's view, without failed ones."""
    return [n for n in cluster_view(port)
            if "master" in n["flags"] and n["slots"] and not n["flags"] & {"fail", "fail?"}]


def cluster_state(port: int) -> str:
    try:
        info = node(port).execute_command("CLUSTER INFO")
    except redis.exceptions.RedisError as e:
        return f"unreachable ({e})"
    return info.get("cluster_state", "?") if isinstance(info, dict) else "?"


def cluster_ok(ports) -> bool:
    return all(cluster_state(p) == "ok" for p in ports)


def wait_until(predicate, limit_s: float, what: str, step_s: float = 0.1):
    """Polls predicate until it returns a true value, for at most limit_s seconds.
    The limits are generous: a loaded machine is slow, never wrong."""
    deadline = time.monotonic() + limit_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {limit_s:.0f} s waiting for {what}")
        time.sleep(step_s)


def owner_port(client, key: str) -> int:
    """The port of the primary that holds key's slot (by the client's slot map)."""
    return client.get_node_from_key(key).port


# ---- deployments ----------------------------------------------------------------------------


def tenant(tag: str) -> str:
    return f"{tag}-{RUN}"


def identity(tenant_name: str, *, dtype="fp16", epoch=0, tp=1, adapter=None) -> kvkey.Identity:
    return kvkey.Identity(
        tenant=tenant_name,
        model=kvkey.Model(name="Qwen/cluster-test", revision="7ae557604adf67be", weights_epoch=epoch),
        kv=kvkey.Kv(dtype=dtype, block_size=BLOCK, num_layers=LAYERS, num_kv_heads=HEADS, head_dim=HEAD_DIM,
                    layout="test.layer_major"),
        shard=kvkey.Shard(tp_size=tp),
        adapter=None if adapter is None else kvkey.Adapter(adapter, kvkey.fingerprint(adapter + " weights")),
    )


def prompt(family: int, blocks: int) -> list:
    """`blocks` full blocks of tokens; prompts of different families differ from the first token."""
    return [(family * 1000003 + t * 7919) % 50000 for t in range(blocks * BLOCK)]


class Deployment:
    """A namespace per TP rank and the KV bytes each rank writes. A payload is a
    function of what the object is (identity without the rank, KV slice, block
    hash), computed without kvkey's key derivation: another deployment's or
    another block's bytes never match, while replicas of a slice agree."""

    def __init__(self, name: str, ident: kvkey.Identity, **options):
        """options: KeyNamespace's keywords (secret=..., payload_check=...)."""
        self.name = name
        self.ranks = []
        for r in range(ident.shard.tp_size):
            i = ident.copy()
            i.shard.tp_rank = r
            self.ranks.append(kvkey.KeyNamespace(i, **options))
        whole = self.ranks[0].identity
        whole.shard = kvkey.Shard()
        self._seed = repr(whole).encode()

    def payload_size(self, r: int) -> int:
        """K and V of the rank's KV heads for one block (kvkey derives it from the identity)."""
        return self.ranks[r].payload_size

    def payload(self, r: int, block: bytes) -> bytes:
        s = self.ranks[r].slice
        seed = self._seed + repr(s).encode() + bytes(block)
        return hashlib.shake_256(seed).digest(self.payload_size(r))

    def hashes(self, family: int, blocks: int = 4) -> list:
        return self.ranks[0].block_hashes(prompt(family, blocks))

    def save(self, conn: ClusterConnector, blocks) -> int:
        return sum(conn.save(ns, [(h, self.payload(r, h)) for h in blocks]) for r, ns in enumerate(self.ranks))

    def load(self, conn: ClusterConnector, blocks) -> collections.Counter:
        """Loads blocks on every rank: counts exact, wrong (loaded but not these
        bytes), missing and rejected blocks."""
        c = collections.Counter()
        for r, ns in enumerate(self.ranks):
            for h, b in zip(blocks, conn.load(ns, blocks, self.payload_size(r))):
                if b.status is LoadStatus.LOADED:
                    c["exact" if b.payload == self.payload(r, h) else "wrong"] += 1
                else:
                    c[b.status.value] += 1
        return c

    def keys(self, blocks) -> list:
        return [ns.store_key(h) for h in blocks for ns in self.ranks]


# ---- client threads -------------------------------------------------------------------------


class Workload:
    """Client threads, each with its own connector, that save and load prompts of
    one deployment and record every operation: when it ended, whether it raised
    (and the error's kind), wrong loads, and the keys whose save was acknowledged.

    A save stores a prompt never stored before (so a write lost to a failover
    shows as a missing key); a load picks any prompt stored so far."""

    def __init__(self, deployment: Deployment, families, threads: int, max_ops_per_thread: int = 100000):
        self.d = deployment
        self.families = list(families)  # grows with every save
        self.hashes = {f: deployment.hashes(f) for f in self.families}
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.ops = []  # (end time, thread, error kind or None)
        self.wrong = 0
        self.loaded = 0
        self.acknowledged = {}  # key -> (family, rank, block index)
        self.unexpected = []  # exceptions that are not ClusterError: a bug
        self._max = max_ops_per_thread
        self._threads = [threading.Thread(target=self._run, args=(t,), daemon=True) for t in range(threads)]

    def start(self):
        for t in self._threads:
            t.start()
        return self

    def join(self, limit_s: float = 120):
        self.stop.set()
        deadline = time.monotonic() + limit_s
        for t in self._threads:
            t.join(max(0.0, deadline - time.monotonic()))
        assert not any(t.is_alive() for t in self._threads), "client threads did not stop"
        assert not self.unexpected, f"client threads raised: {self.unexpected[:3]}"

    def count(self, since: float = 0.0, ok_only: bool = False) -> int:
        with self.lock:
            return sum(1 for end, _, kind in self.ops if end >= since and (kind is None or not ok_only))

    def last_error(self, default: float = 0.0) -> float:
        """When the last operation that raised ended."""
        with self.lock:
            return max((end for end, _, kind in self.ops if kind), default=default)

    def _run(self, t: int):
        rng = random.Random(1000 + t)
        with ClusterConnector([(HOST, p) for p in cluster_nodes()]) as conn:
            for n in range(self._max):
                if self.stop.is_set():
                    return
                kind = None
                try:
                    if rng.random() < 0.3:
                        family = 1_000_000 * (t + 1) + n  # a new prompt
                        hashes = self.d.hashes(family)
                        with self.lock:
                            self.hashes[family] = hashes
                        for r, ns in enumerate(self.d.ranks):
                            conn.save(ns, [(h, self.d.payload(r, h)) for h in hashes])
                            with self.lock:
                                for i, h in enumerate(hashes):
                                    self.acknowledged[ns.store_key(h)] = (family, r, i)
                                if r == len(self.d.ranks) - 1:
                                    self.families.append(family)  # loadable once every rank has it
                    else:
                        with self.lock:
                            hashes = self.hashes[rng.choice(self.families)]
                        found = conn.lookup(self.d.ranks, hashes)
                        c = self.d.load(conn, hashes[: found.prefix.blocks])
                        with self.lock:
                            self.wrong += c["wrong"]
                            self.loaded += c["exact"] + c["wrong"]
                except ClusterError as e:
                    kind = e.kind  # a miss: the block is recomputed
                except Exception as e:  # noqa: BLE001 - recorded, the test fails on it
                    with self.lock:
                        self.unexpected.append(repr(e))
                    return
                with self.lock:
                    self.ops.append((time.monotonic(), t, kind))
