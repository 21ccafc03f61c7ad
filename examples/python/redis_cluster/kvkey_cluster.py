# SPDX-License-Identifier: Apache-2.0
"""A KV-block connector for Redis Cluster, keyed and verified with kvkey.

Each stored object is one Redis string under ns.store_key(block):

    value = ns.seal(block, payload)  (kvkey.envelope_size bytes)  ||  payload (the KV bytes)

written by ONE SET, so a header never exists without its payload. Keys carry no
hash tag: objects spread over all 16384 slots and so over every primary, which
is why purge and key counts scan every primary. A reader fetches the value,
verifies the header against its own namespace and treats anything but ok as a
miss, so foreign, stale or damaged objects are never served.

Errors. Per-block outcomes are values (LoadedBlock, Lookup). A call that
cannot complete raises ClusterError, whose `kind` says why:

    connect   a node could not be reached or the connection broke
    timeout   no reply within the socket timeout
    down      the cluster reports CLUSTERDOWN, or a slot has no primary
    failover  a primary changed role while the call ran (READONLY, MASTERDOWN)
    moved     slots kept moving (MOVED/ASK/TRYAGAIN beyond the client's retries)
    protocol  a reply of an unexpected type or shape
    server    any other error reply

After a ClusterError nothing of that call may be trusted: a load or lookup that
raises is a miss; a save that raises is not acknowledged (some of its objects
may be written, each of which verifies on its own). The connector refreshes
its slot map before its next call, so it follows a failover or a resharding.

Threads. Use one ClusterConnector per thread (redis-py's cluster client
updates its slot map without a lock). kvkey.KeyNamespace objects are
immutable and may be shared by all threads.
"""

from __future__ import annotations

import dataclasses
import enum
from typing import Iterable, Iterator, Optional, Sequence

import redis.exceptions as rex
from redis.cluster import ClusterNode, RedisCluster

import kvkey

__all__ = [
    "ClusterConnector",
    "ClusterError",
    "LoadStatus",
    "LoadedBlock",
    "Lookup",
    "error_kind",
    "glob_escape",
    "rotate_epoch",
]


# ---- the envelope ---------------------------------------------------------------------------
# The only two places that build and check a header. The header records the
# payload's size and digest (a Poly1305 tag in a keyed namespace), so a value
# whose bytes were flipped, torn or swapped never verifies.


def seal_value(ns: kvkey.KeyNamespace, block: bytes, payload: bytes) -> bytes:
    """The stored value: the sealed header followed by the payload."""
    return ns.seal(block, payload) + payload


def verify_value(ns: kvkey.KeyNamespace, value: bytes, block: bytes) -> kvkey.Verdict:
    """Checks a stored value's header and payload bytes against this rank's namespace
    (zero-copy: both are views into the reply)."""
    view = memoryview(value)
    return ns.verify(view[: kvkey.envelope_size], block, view[kvkey.envelope_size:])


# ---- errors ---------------------------------------------------------------------------------


class ClusterError(Exception):
    """A call that could not complete. `kind` says why; the message says where."""

    KINDS = ("connect", "timeout", "down", "failover", "moved", "protocol", "server")

    def __init__(self, kind: str, message: str):
        if kind not in self.KINDS:
            raise ValueError(f"unknown ClusterError kind {kind!r}")
        super().__init__(f"[redis_cluster.{kind}] {message}")
        self.kind = kind


# redis-py exception classes and their kinds, searched in order: subclasses
# first (MasterDownError is a ClusterDownError, MovedError an AskError,
# AuthenticationError a ConnectionError, ...).
_KINDS = (
    ((rex.ReadOnlyError, rex.MasterDownError), "failover"),
    ((rex.ClusterDownError, rex.SlotNotCoveredError), "down"),
    ((rex.AskError, rex.TryAgainError), "moved"),
    ((rex.TimeoutError,), "timeout"),
    ((rex.AuthenticationError, rex.AuthorizationError), "server"),
    ((rex.ConnectionError,), "connect"),
    ((rex.RedisClusterException,), "protocol"),  # but see error_kind
    ((rex.ClusterError,), "moved"),  # "TTL exhausted": redirected too often
    ((rex.InvalidResponse, rex.DataError), "protocol"),
    ((rex.ResponseError,), "server"),
    ((rex.RedisError,), "protocol"),
)


def error_kind(e: BaseException) -> Optional[str]:
    """The ClusterError kind of a redis-py exception, or None for other exceptions."""
    if isinstance(e, rex.RedisClusterException):
        # Raised when no startup node answers and when no node is known for a slot.
        text = str(e)
        if "cannot be connected" in text or "No targets" in text:
            return "connect"
    return next((kind for classes, kind in _KINDS if isinstance(e, classes)), None)


# ---- results --------------------------------------------------------------------------------


class LoadStatus(enum.Enum):
    LOADED = "loaded"  # the header verified and the value has the expected size
    MISSING = "missing"  # no object under the key
    REJECTED = "rejected"  # an object is there but it is not ours: see verdict


@dataclasses.dataclass
class LoadedBlock:
    status: LoadStatus
    # Why a block was rejected: the header's verdict (reason, field), or the
    # connector's own check ("malformed", "value.size") when the header verifies
    # but the value is not envelope_size + payload_size bytes long.
    reason: str = ""
    field: str = ""
    payload: Optional[bytes] = None  # the KV bytes, only when loaded

    @property
    def loaded(self) -> bool:
        return self.status is LoadStatus.LOADED


@dataclasses.dataclass
class Lookup:
    prefix: kvkey.ReusablePrefix  # how much of the prompt every rank can serve
    blocks: list  # the hashes of the prompt's full blocks (the first prefix.blocks are hits)


# ---- the connector --------------------------------------------------------------------------


def glob_escape(prefix: str) -> str:
    """prefix with the Redis glob specials (* ? [ ] \\) escaped, for SCAN MATCH."""
    return "".join("\\" + c if c in "*?[]\\" else c for c in prefix)


def rotate_epoch(ranks: Sequence[kvkey.KeyNamespace], epoch: int) -> list:
    """The namespaces of the same ranks under weights epoch `epoch` (switch all ranks together).
    Each keeps everything but the epoch: its tenant secret (a keyed rank stays keyed) and its
    payload policy."""
    return [ns.with_epoch(epoch) for ns in ranks]


class ClusterConnector:
    """Save, lookup, load, count and purge kvkey objects on a Redis Cluster."""

    def __init__(
        self,
        startup_nodes: Iterable[tuple],
        *,
        socket_timeout: float = 2.0,
        connect_timeout: float = 1.0,
        retry_attempts: int = 1,
        scan_count: int = 1000,
        batch: int = 500,
    ):
        """startup_nodes: (host, port) pairs, any subset of the cluster's nodes.

        retry_attempts is redis-py's cluster_error_retry_attempts: how often a
        command is re-sent after a connection error or CLUSTERDOWN before the
        error surfaces. The default 1 surfaces errors quickly: a cache would
        rather miss than wait.
        """
        self._nodes = [ClusterNode(host, int(port)) for host, port in startup_nodes]
        if not self._nodes:
            raise ValueError("ClusterConnector: no startup nodes given")
        self._options = dict(
            socket_timeout=socket_timeout,
            socket_connect_timeout=connect_timeout,
            cluster_error_retry_attempts=retry_attempts,
        )
        self._scan_count = scan_count
        self._batch = batch
        self._client: Optional[RedisCluster] = None
        self._stale = False

    # -- plumbing

    @property
    def client(self) -> RedisCluster:
        """The redis-py cluster client, connected on first use (for raw commands)."""
        with self._errors("connecting"):
            if self._client is None:
                self._client = RedisCluster(startup_nodes=list(self._nodes), **self._options)
                self._stale = False
            elif self._stale:
                # After an error the slot map may be out of date (a promoted
                # replica, moved slots): ask the cluster again.
                self._stale = False
                self._client.nodes_manager.initialize()
        return self._client

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _errors(self, during: str):
        return _ErrorScope(self, during)

    def _pipeline(self, during: str, commands: Sequence[tuple]) -> list:
        """Runs commands in one cluster pipeline (grouped per node by redis-py)."""
        if not commands:
            return []
        client = self.client
        with self._errors(during):
            pipe = client.pipeline(transaction=False)
            for command in commands:
                pipe.execute_command(*command)
            return pipe.execute(raise_on_error=True)

    # -- the cache operations

    def save(self, ns: kvkey.KeyNamespace, blocks: Sequence[tuple]) -> int:
        """Stores each (block_hash, payload) as one value, seal || payload, with one
        SET per object (pipelined). Returns the number of objects acknowledged
        (all of them); raises ClusterError otherwise."""
        commands = [("SET", ns.store_key(h), seal_value(ns, h, bytes(p))) for h, p in blocks]
        replies = self._pipeline("save", commands)
        for r in replies:
            if r is not True:
                raise ClusterError("protocol", f"save: SET answered {r!r}")
        return len(replies)

    def lookup(self, ranks: Sequence[kvkey.KeyNamespace], blocks: Sequence[bytes],
               max_tokens: Optional[int] = None) -> Lookup:
        """Counts the leading blocks that every rank can serve: one EXISTS per
        (block, rank) key, block-major. Existence only; a load verifies."""
        if not ranks:
            raise ValueError("lookup: no ranks given")
        if any(ns.root != ranks[0].root or ns.key_prefix != ranks[0].key_prefix for ns in ranks):
            raise ValueError("lookup: the ranks belong to different deployments")
        blocks = list(blocks)
        replies = self._pipeline("lookup", [("EXISTS", ns.store_key(h)) for h in blocks for ns in ranks])
        if any(r not in (0, 1) for r in replies):
            raise ClusterError("protocol", "lookup: EXISTS answered something other than 0 or 1")
        found = [r == 1 for r in replies]
        return Lookup(ranks[0].reusable_prefix(found, len(ranks), max_tokens), blocks)

    def load(self, ns: kvkey.KeyNamespace, blocks: Sequence[bytes], payload_size: int) -> list:
        """Fetches every block (pipelined GET) and verifies each against ns and
        payload_size, the size this rank's block has (never the size the stored
        value claims). A block that does not verify is never LOADED."""
        blocks = list(blocks)
        replies = self._pipeline("load", [("GET", ns.store_key(h)) for h in blocks])
        out = []
        for h, value in zip(blocks, replies):
            if value is None:
                out.append(LoadedBlock(LoadStatus.MISSING))
                continue
            if not isinstance(value, bytes):
                raise ClusterError("protocol", f"load: GET answered a {type(value).__name__}")
            verdict = verify_value(ns, value, h)
            if not verdict.ok:
                out.append(LoadedBlock(LoadStatus.REJECTED, verdict.reason, verdict.field))
            elif len(value) != kvkey.envelope_size + payload_size:
                out.append(LoadedBlock(LoadStatus.REJECTED, "malformed", "value.size"))
            else:
                out.append(LoadedBlock(LoadStatus.LOADED, "ok", "", value[kvkey.envelope_size:]))
        return out

    # -- enumerating and purging (every primary)

    def primaries(self) -> list:
        """The current primaries (the slot map is refreshed first)."""
        client = self.client
        with self._errors("refreshing the slot map"):
            client.nodes_manager.initialize()
            return client.get_primaries()

    def _scan(self, node, prefix: str) -> Iterator[list]:
        """Batches of the keys starting with prefix on one node (SCAN MATCH)."""
        pattern = glob_escape(prefix) + "*"
        r = self.client.get_redis_connection(node)
        cursor = 0
        with self._errors(f"scanning {node.name}"):
            while True:  # ends when the server returns cursor 0: SCAN visits every key once or more
                cursor, keys = r.scan(cursor=cursor, match=pattern, count=self._scan_count)
                if keys:
                    yield [k.decode("ascii") if isinstance(k, bytes) else k for k in keys]
                if int(cursor) == 0:
                    return

    def keys(self, prefix: str) -> dict:
        """Every key starting with prefix, per primary: {node name: sorted keys}.
        For tests and small stores."""
        return {node.name: sorted({k for batch in self._scan(node, prefix) for k in batch})
                for node in self.primaries()}

    def purge(self, prefix: str) -> int:
        """Removes every key starting with prefix on every primary (SCAN + UNLINK
        in batches); returns how many were removed. Pass ns.key_prefix to drop
        one epoch of a model, ns.tenant_prefix to drop a tenant.

        Keys of one batch lie in different slots, so each gets its own UNLINK
        (pipelined, routed by slot: a key that moved since the scan is still
        found). Keys written, or moved between primaries, while a purge runs
        may survive it; run it again once writers have stopped."""
        if not prefix:
            raise ValueError("purge: an empty prefix would remove every key")
        removed = 0
        for node in self.primaries():
            pending = []
            for batch in self._scan(node, prefix):
                pending.extend(batch)
                while len(pending) >= self._batch:
                    removed += self._unlink(pending[: self._batch])
                    del pending[: self._batch]
            removed += self._unlink(pending)
        return removed

    def _unlink(self, keys: list) -> int:
        replies = self._pipeline("purge", [("UNLINK", k) for k in keys])
        if any(not isinstance(r, int) for r in replies):
            raise ClusterError("protocol", "purge: UNLINK answered a non-integer")
        return sum(replies)  # a key the scan repeated counts once


class _ErrorScope:
    """Turns redis-py exceptions into ClusterError and marks the slot map stale."""

    def __init__(self, connector: ClusterConnector, during: str):
        self._connector = connector
        self._during = during

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc is None or isinstance(exc, ClusterError):
            if exc is not None:
                self._connector._stale = True
            return False
        kind = error_kind(exc)
        if kind is None:
            return False  # not a store error (a bug, or bad input): let it through
        self._connector._stale = True
        raise ClusterError(kind, f"{self._during}: {type(exc).__name__}: {exc}") from exc

