# SPDX-License-Identifier: Apache-2.0
"""A KV-block connector for Redis Cluster, keyed and verified with kvkey.

Built on kvkey's connector kit: kvkey.stores.RedisClusterStore moves the bytes
(pipelines of single-key commands, grouped per node by redis-py) and
kvkey.Connector seals, looks up and verifies. Each stored object is one Redis
string under ns.store_key(block):

    value = ns.seal_value(block, payload)  =  header (kvkey.envelope_size bytes) || payload

written by ONE SET, so a header never exists without its payload. Keys carry no
hash tag: objects spread over all 16384 slots and so over every primary, which
is why purge and key counts scan every primary. A lookup reads each block's
header (GETRANGE key 0 1023) and counts the leading blocks whose header
verifies on every rank; a load fetches the value and serves the payload only
when header and bytes verify, so foreign, stale or damaged objects are never
served.

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
from typing import Iterable, Iterator, Optional, Sequence, Union

import redis.exceptions as rex
from redis.cluster import ClusterNode, RedisCluster

import kvkey
from kvkey.stores import RedisClusterStore, StoreError

__all__ = [
    "ClusterConnector",
    "ClusterError",
    "LoadStatus",
    "LoadedBlock",
    "Lookup",
    "display_key",
    "error_kind",
    "glob_escape",
    "key_bytes",
    "rotate_epoch",
]


# ---- the envelope ---------------------------------------------------------------------------
# kvkey.Connector seals with ns.seal_value and verifies with ns.open_value /
# ns.verify_header; these two are for raw values (tests, tools).


def seal_value(ns: kvkey.KeyNamespace, block: bytes, payload: bytes) -> bytes:
    """The stored value: the sealed header followed by the payload."""
    return ns.seal_value(block, payload)


def verify_value(ns: kvkey.KeyNamespace, value: bytes, block: bytes) -> kvkey.Verdict:
    """Checks a stored value's header and payload bytes against this rank's namespace."""
    return ns.open_value(value, block).verdict


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


def glob_escape(prefix: Union[str, bytes]) -> Union[str, bytes]:
    """prefix with the Redis glob specials (* ? [ ] \\) escaped, for SCAN MATCH
    (bytes in, bytes out)."""
    if isinstance(prefix, (bytes, bytearray, memoryview)):
        return b"".join(b"\\" + bytes([c]) if c in b"*?[]\\" else bytes([c]) for c in bytes(prefix))
    return "".join("\\" + c if c in "*?[]\\" else c for c in prefix)


def key_bytes(key: Union[str, bytes]) -> bytes:
    """A key or prefix as the bytes Redis stores: str is encoded as UTF-8."""
    if isinstance(key, str):
        return key.encode("utf-8")
    if isinstance(key, (bytes, bytearray, memoryview)):
        return bytes(key)
    raise TypeError(f"a key is str or bytes, not {type(key).__name__}")


def display_key(key: Union[str, bytes]) -> str:
    """A key for messages and logs: printable ASCII as it is, every other byte
    (and the backslash) as \\xNN, so any key prints on one line and unambiguously."""
    return "".join(chr(b) if 0x20 <= b < 0x7F and b != 0x5C else f"\\x{b:02x}" for b in key_bytes(key))


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
        self._store: Optional[RedisClusterStore] = None
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

    # -- the cache operations (kvkey.Connector over kvkey.stores.RedisClusterStore)

    def _connector(self, ranks) -> kvkey.Connector:
        """A kvkey connector for these namespaces on this cluster: store errors raise
        (StoreError, from the redis-py exception), so _ErrorScope gives them a kind."""
        client = self.client
        if self._store is None or self._store.client is not client:
            self._store = RedisClusterStore(client, batch=self._batch)
        return kvkey.Connector(self._store, ranks, raise_errors=True)

    def save(self, ns: kvkey.KeyNamespace, blocks: Sequence[tuple]) -> int:
        """Stores each (block_hash, payload) as one value, ns.seal_value(h, payload),
        with one SET per object (pipelined). Returns the number of objects
        acknowledged (all of them); raises ClusterError otherwise."""
        blocks = list(blocks)
        if not blocks:
            return 0
        conn = self._connector(ns)
        with self._errors("save"):
            saved = conn.save([h for h, _ in blocks], [p for _, p in blocks])
        if saved != len(blocks):
            raise ClusterError("protocol", f"save: {len(blocks) - saved} of {len(blocks)} SETs not acknowledged")
        return saved

    def lookup(self, ranks: Sequence[kvkey.KeyNamespace], blocks: Sequence[bytes],
               max_tokens: Optional[int] = None) -> Lookup:
        """Counts the leading blocks that every rank can serve: reads each (block,
        rank) header with GETRANGE key 0 1023 (pipelined) and counts a block only
        when every rank's header verifies. The payload is checked at load."""
        if not ranks:
            raise ValueError("lookup: no ranks given")
        if any(ns.root != ranks[0].root or ns.key_prefix != ranks[0].key_prefix for ns in ranks):
            raise ValueError("lookup: the ranks belong to different deployments")
        blocks = list(blocks)
        conn = self._connector(ranks)
        with self._errors("lookup"):
            found = conn.lookup(blocks, max_tokens=max_tokens)
        return Lookup(ranks[0].reusable_prefix([True] * found, 1, max_tokens), blocks)

    def load(self, ns: kvkey.KeyNamespace, blocks: Sequence[bytes], payload_size: int) -> list:
        """Fetches every block (pipelined GET) and verifies each against ns and
        payload_size, the size this rank's block has (never the size the stored
        value claims). A block that does not verify is never LOADED."""
        blocks = list(blocks)
        if not blocks:
            return []
        conn = self._connector(ns)
        buffers = [bytearray(payload_size) for _ in blocks]
        with self._errors("load"):
            results = conn.load_into(blocks, buffers)
        out = []
        for r, buf in zip(results, buffers):
            if r.loaded:
                out.append(LoadedBlock(LoadStatus.LOADED, "ok", "", bytes(buf)))
            elif r.verdict is None:
                out.append(LoadedBlock(LoadStatus.MISSING))
            else:
                out.append(LoadedBlock(LoadStatus.REJECTED, r.verdict.reason, r.verdict.field))
        return out

    # -- enumerating and purging (every primary)

    def primaries(self) -> list:
        """The current primaries (the slot map is refreshed first)."""
        client = self.client
        with self._errors("refreshing the slot map"):
            client.nodes_manager.initialize()
            return client.get_primaries()

    def _scan(self, node, prefix: bytes) -> Iterator[list]:
        """Batches of the keys (bytes, as stored: never decoded) starting with
        prefix on one node (SCAN MATCH)."""
        pattern = glob_escape(prefix) + b"*"
        r = self.client.get_redis_connection(node)
        cursor = 0
        with self._errors(f"scanning {node.name}"):
            while True:  # ends when the server returns cursor 0: SCAN visits every key once or more
                cursor, keys = r.scan(cursor=cursor, match=pattern, count=self._scan_count)
                if keys:
                    yield [key_bytes(k) for k in keys]
                if int(cursor) == 0:
                    return

    def keys(self, prefix: Union[str, bytes]) -> dict:
        """Every key starting with prefix (str is taken as UTF-8), per primary:
        {node name: sorted keys}, each key the bytes Redis holds, whatever they
        are (display_key prints one). For tests and small stores."""
        prefix = key_bytes(prefix)
        return {node.name: sorted({k for batch in self._scan(node, prefix) for k in batch})
                for node in self.primaries()}

    def purge(self, prefix: Union[str, bytes]) -> int:
        """Removes every key starting with prefix on every primary (SCAN + UNLINK
        in batches); returns how many were removed. Pass ns.key_prefix to drop
        one epoch of a model, ns.tenant_prefix to drop a tenant. Keys are
        handled as bytes throughout: a key that is not ASCII or not UTF-8 is
        removed like any other.

        Keys of one batch lie in different slots, so each gets its own UNLINK
        (pipelined, routed by slot: a key that moved since the scan is still
        found). Keys written, or moved between primaries, while a purge runs
        may survive it; run it again once writers have stopped."""
        prefix = key_bytes(prefix)
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
        for k, r in zip(keys, replies):
            if not isinstance(r, int):
                raise ClusterError("protocol", f"purge: UNLINK {display_key(k)} answered a {type(r).__name__}")
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
        if isinstance(exc, StoreError):  # from the kvkey store: the redis-py exception is its cause
            cause = exc.__cause__
            self._connector._stale = True
            kind = error_kind(cause) if cause is not None else None
            raise ClusterError(kind or "protocol", f"{self._during}: {exc}") from exc
        kind = error_kind(exc)
        if kind is None:
            return False  # not a store error (a bug, or bad input): let it through
        self._connector._stale = True
        raise ClusterError(kind, f"{self._during}: {type(exc).__name__}: {exc}") from exc

