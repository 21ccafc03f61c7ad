"""kvkey.stores.RedisClusterStore: the Store protocol on a Redis Cluster (redis-py's
``RedisCluster``), one pipeline per primary, redirections followed per key."""

from __future__ import annotations

import collections
import importlib
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple, TypeVar, Union

from .protocol import StoreError
from .redis import _RedisBase, _redis_error_kind, _wire

__all__ = ["RedisClusterStore"]

_T = TypeVar("_T")


class RedisClusterStore(_RedisBase):
    """A Store on a Redis Cluster through a ``redis.cluster.RedisCluster`` client.

    Keys carry no hash tag, so one prompt's blocks spread over every primary; all
    commands are single-key. Each batch is split by the slot map into one pipeline
    per primary, sent on that node's connection pool, and each of these pipelines
    ends with ``ECHO <nonce>``, checked as in RedisStore; ``deadline`` bounds each
    call as in RedisStore. ``scan_prefix`` scans every primary (its pages end with
    the sentinel too).

    Redirections are followed inside the same call, for at most ``max_redirects`` hops per
    key: a key answered ``MOVED`` is sent again to the node named there, and the slot map is
    refreshed from the cluster before the next call; a key answered ``ASK`` (its slot is being
    migrated and the key has left) is sent again to the importing node, each command
    preceded by ``ASKING``. Every pipeline of every hop ends with its own sentinel. A
    redirect is followed only when its slot is the key's own (CRC16 hash slot) and its
    address is a node of the slot map the client has: else it fails that key alone
    (``Replies.errors``, kind ``protocol``). The client is never changed by a redirect (no
    address becomes a primary of it). A redirected pipeline that fails (its node cannot be
    reached, a reply out of step) fails its keys alone, of the error's kind; the call's
    deadline still ends the call. A key still redirected after ``max_redirects`` hops, and
    any other error reply, is a miss for that key alone (``Replies.errors``, kind ``server``).
    After a call that failed the slot map is refreshed before the next call (it follows a
    failover) and the idle connections of every node are closed, so none out of step is
    reused. Use one store per thread: redis-py's cluster client updates its slot map
    without a lock. The constructor refuses a client that cannot work, as RedisStore's
    does; a wrong address already fails in ``RedisCluster()``.
    """

    _cluster = True

    def __init__(self, client: Any, *, batch: int = 512, deadline: Optional[float] = 10.0,
                 max_redirects: int = 5) -> None:
        super().__init__(client, batch, deadline)
        if max_redirects < 0:
            raise ValueError(f"max_redirects is {max_redirects}, must be at least 0")
        self.max_redirects = max_redirects
        self.redirects: "collections.Counter[str]" = collections.Counter()  # "moved", "ask": keys sent again
        self._stale = False

    def _drop_connections(self) -> None:
        self._stale = True
        try:
            for node in self.client.get_nodes():
                if node.redis_connection is not None:
                    node.redis_connection.connection_pool.disconnect(inuse_connections=False)
        except Exception:  # noqa: BLE001 - best effort, as above
            pass

    def _chunk(self, during: str, chunk: Sequence[_T], command: Callable[[Any, _T], Any],
               per_item: int) -> List[Any]:
        """One pipeline per node that owns keys of the batch, each with its sentinel; then,
        for the keys redirected, one more round per hop (MOVED, ASK). A redirect the store
        will not follow, and a redirected pipeline that fails, fail their keys alone: their
        replies are the StoreError."""
        if self._stale:
            self.client.nodes_manager.initialize()  # a promoted replica, moved slots
            self._stale = False
        rex: Any = importlib.import_module("redis.exceptions")
        out: List[Any] = [None] * (len(chunk) * per_item)
        keys = [item if isinstance(item, str) else item[0] for item in chunk]  # type: ignore[index]
        # (item, node, asking) still to send
        pending: List[Tuple[int, Any, bool]] = []
        for i, key in enumerate(keys):
            pending.append((i, self.client.get_node_from_key(_wire(key)), False))
        for hop in range(self.max_redirects + 1):
            groups: Dict[Tuple[str, bool], Tuple[Any, List[int]]] = {}
            for i, node, asking in pending:
                groups.setdefault((node.name, asking), (node, []))[1].append(i)
            redirected: List[Tuple[int, Any]] = []
            for (_, asking), (node, at) in groups.items():
                try:
                    pipe = self.client.get_redis_connection(node).pipeline(transaction=False)
                    replies = self._pipelined(pipe, during, [chunk[i] for i in at], command, per_item, asking)
                except Exception as e:
                    failed = self._redirected_failure(e, hop, during, node)
                    replies = [failed] * (len(at) * per_item)
                for n, i in enumerate(at):
                    got = replies[n * per_item:(n + 1) * per_item]
                    # MovedError is an AskError: either, for any of the item's commands, sends it again.
                    moved = next((r for r in got if isinstance(r, rex.AskError)), None)
                    if moved is not None and hop < self.max_redirects:
                        redirected.append((i, moved))
                    else:
                        out[i * per_item:(i + 1) * per_item] = got
            if not redirected:
                break
            pending = []
            for i, r in redirected:
                target = self._redirect(r, keys[i], during)
                if isinstance(target, StoreError):
                    out[i * per_item:(i + 1) * per_item] = [target] * per_item
                else:
                    pending.append((i, *target))
            if not pending:
                break
        return out

    def _redirected_failure(self, e: Exception, hop: int, during: str, node: Any) -> StoreError:
        """The error of a redirected pipeline (hop > 0) as its keys' failure; a first pipeline's
        error, and the call's deadline, fail the call (raised)."""
        if hop == 0 or (isinstance(e, StoreError) and e.kind == "timeout"):
            raise e
        if not isinstance(e, StoreError):
            kind = _redis_error_kind(e)
            if kind is None:
                raise e
            e = StoreError(kind, f"{during}: {type(e).__name__}: {e}")
        self._stale = True
        _close_idle(node)
        return StoreError(e.kind, f"{during}: redirected to {node.name}: {e}")

    def _reading(self, conn: Any) -> Callable[[], None]:
        """A redirect whose text redis-py cannot parse ("MOVED x", an address without a
        port) raises inside its reply parser, which fails the whole pipeline: while this
        call holds conn, its parser makes such a redirect that key's reply instead (a
        redirect the store does not follow), and is put back as it was after."""
        parser: Any = getattr(conn, "_parser", None)
        classes = getattr(parser, "EXCEPTION_CLASSES", None)
        if not isinstance(classes, dict) or "MOVED" not in classes or not hasattr(parser, "__dict__"):
            return lambda: None
        own = "EXCEPTION_CLASSES" in vars(parser)
        parser.EXCEPTION_CLASSES = {**classes, **_loose_redirects()}

        def restore() -> None:
            if own:
                parser.EXCEPTION_CLASSES = classes
            else:
                del parser.EXCEPTION_CLASSES

        return restore

    def _redirect(self, e: Any, key: str, during: str) -> Union[Tuple[Any, bool], StoreError]:
        """Where a redirected key goes next: (node, with ASKING); or, for a redirect the store
        does not follow, the key's failure: a slot that is not the key's, or an address that is
        not a node of the slot map the client has (the cluster it was configured with). The
        client is never changed: a MOVED makes the store refresh the slot map from the cluster
        before its next call (redis-py's own update would take the address as a primary)."""
        rex: Any = importlib.import_module("redis.exceptions")
        rcrc: Any = importlib.import_module("redis.crc")
        what = "MOVED" if isinstance(e, rex.MovedError) else "ASK"
        if getattr(e, "slot_id", None) is None:
            return StoreError("protocol", f"{during}: {what} {getattr(e, 'message', '')!r}, a redirect that names no "
                              "slot and address: not followed")
        slot = rcrc.key_slot(_wire(key))
        if e.slot_id != slot:
            return StoreError("protocol", f"{during}: {what} {e.slot_id} {e.host}:{e.port}, but the key's slot is {slot}:"
                              " not followed")
        node = self.client.nodes_manager.nodes_cache.get(f"{e.host}:{e.port}")
        if node is None:
            return StoreError("protocol", f"{during}: {what} {e.slot_id} {e.host}:{e.port}, an address that is not a "
                              "node of the cluster's slot map: not followed")
        if what == "MOVED":
            self.redirects["moved"] += 1
            self._stale = True
            return node, False
        self.redirects["ask"] += 1
        return node, True

    def primaries(self) -> List[Any]:
        """The primaries of the cluster, by a fresh slot map."""

        def run() -> List[Any]:
            self.client.nodes_manager.initialize()
            self._stale = False
            return list(self.client.get_primaries())

        return self._call("primaries", run)

    def scan_prefix(self, prefix: str) -> Iterator[str]:
        for node in self.primaries():
            yield from self._scan_node(self.client.get_redis_connection(node), prefix)


_LOOSE: Dict[str, Any] = {}


def _loose_redirects() -> Dict[str, Any]:
    """MOVED and ASK as redis-py's classes, except that a text they cannot parse makes an
    error whose slot_id is None instead of raising inside the reply parser."""
    if not _LOOSE:
        rex: Any = importlib.import_module("redis.exceptions")

        def loose(base: Any) -> Any:
            def __init__(self: Any, resp: str) -> None:
                try:
                    base.__init__(self, resp)
                except (ValueError, TypeError, AttributeError):
                    self.args, self.message = (resp,), resp
                    self.slot_id, self.host, self.port = None, None, None
                    self.node_addr = (None, None)

            return type(base.__name__, (base,), {"__init__": __init__, "__module__": __name__})

        _LOOSE.update({"MOVED": loose(rex.MovedError), "ASK": loose(rex.AskError)})
    return dict(_LOOSE)


def _close_idle(node: Any) -> None:
    """Closes a node's idle connections (best effort): none out of step is reused."""
    try:
        if node.redis_connection is not None:
            node.redis_connection.connection_pool.disconnect(inuse_connections=False)
    except Exception:  # noqa: BLE001 - the next call reconnects
        pass
