"""kvkey.stores.RedisClusterStore: the Store protocol on a Redis Cluster (redis-py's
``RedisCluster``), one pipeline per primary, redirections followed per key."""

from __future__ import annotations

import collections
import importlib
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple, TypeVar

from .redis import _RedisBase, _wire

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
    key: a key answered ``MOVED`` is sent again to the node named there, whose slot
    the store's slot map then gives (redis-py's slot-map update for a moved slot); a key
    answered ``ASK`` (its slot is being migrated and the key has left) is sent again to the
    importing node, each command preceded by ``ASKING``. Every pipeline of every hop ends
    with its own sentinel. A key still redirected after ``max_redirects`` hops, and any
    other error reply, is a miss for that key alone (``Replies.errors``, kind ``server``).
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
        for the keys redirected, one more round per hop (MOVED, ASK)."""
        if self._stale:
            self.client.nodes_manager.initialize()  # a promoted replica, moved slots
            self._stale = False
        rex: Any = importlib.import_module("redis.exceptions")
        out: List[Any] = [None] * (len(chunk) * per_item)
        # (item, node, asking) still to send
        pending: List[Tuple[int, Any, bool]] = []
        for i, item in enumerate(chunk):
            key = item if isinstance(item, str) else item[0]  # type: ignore[index]
            pending.append((i, self.client.get_node_from_key(_wire(key)), False))
        for hop in range(self.max_redirects + 1):
            groups: Dict[Tuple[str, bool], Tuple[Any, List[int]]] = {}
            for i, node, asking in pending:
                groups.setdefault((node.name, asking), (node, []))[1].append(i)
            redirected: List[Tuple[int, Any]] = []
            for (_, asking), (node, at) in groups.items():
                pipe = self.client.get_redis_connection(node).pipeline(transaction=False)
                replies = self._pipelined(pipe, during, [chunk[i] for i in at], command, per_item, asking)
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
            pending = [(i, *self._redirect(e)) for i, e in redirected]
        return out

    def _redirect(self, e: Any) -> Tuple[Any, bool]:
        """Where a redirected key goes next: (node, with ASKING)."""
        rex: Any = importlib.import_module("redis.exceptions")
        manager = self.client.nodes_manager
        if isinstance(e, rex.MovedError):
            self.redirects["moved"] += 1
            manager.update_moved_exception(e)  # applied by the next slot look-up, under its lock
            return manager.get_node_from_slot(e.slot_id), False
        self.redirects["ask"] += 1
        node = self.client.get_node(host=e.host, port=e.port)
        if node is None:  # a node this client has not met yet
            rcluster: Any = importlib.import_module("redis.cluster")
            node = rcluster.ClusterNode(e.host, e.port, rcluster.PRIMARY)
            manager.nodes_cache.setdefault(node.name, node)
            node = manager.nodes_cache[node.name]
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
