"""Key-value stores for kvkey.Connector: the protocol they implement, and three of them.

A store holds opaque values under ``str`` keys (kvkey store keys, ``ns.store_key(h)``,
are ASCII). Every method is batched: the connector sends one call per lookup, load or
save, and a store turns it into one pipeline, multi-get or multi-put. A store checks
nothing: the connector verifies every value it reads, so a store that loses, damages,
truncates or swaps values causes misses, never wrong loads.

- ``MemoryStore()``: a dict behind a lock (tests, docs, single-process caches).
- ``RedisStore(redis.Redis)``: one Redis node, pipelined ``GETRANGE key 0 1023`` (with
  ``STRLEN``) for headers, pipelined ``GET`` / ``SET`` / ``EXISTS`` / ``UNLINK``.
- ``RedisClusterStore(redis.RedisCluster)``: the same through redis-py's cluster
  pipeline, which groups the single-key commands per node; ``scan_prefix`` visits
  every primary.

A store raises ``StoreError`` (with ``kind`` one of ``StoreError.KINDS``) when a call
cannot complete; any other exception is a bug and passes through the connector. A key that
fails on its own (a Redis key of another type, answered ``WRONGTYPE``) is a miss for that key
alone: the store returns a ``Replies`` whose ``errors`` name it, and the rest of the batch is
served.

One module per store: ``kvkey.stores.protocol`` (the protocol, ``StoreError``, ``Prefix``,
``Replies``), ``.memory``, ``.redis``, ``.redis_cluster``, ``.mooncake`` and ``.aio`` (the
async RedisStore); every name is also here. See docs/python.md, "Connector and stores", and docs/connectors.md.
"""

from __future__ import annotations

from typing import Any

from .memory import MemoryStore
from .protocol import Prefix, Replies, Store, StoreError, glob_escape
from .redis import RedisStore
from .redis_cluster import RedisClusterStore

__all__ = ["MemoryStore", "MooncakeStore", "Prefix", "RedisClusterStore", "RedisStore", "Replies", "Store",
           "StoreError", "glob_escape"]


def __getattr__(name: str) -> Any:
    """``MooncakeStore`` from kvkey.stores.mooncake, imported on first use (it never
    imports Mooncake's client itself; ``MooncakeStore.connect`` does)."""
    if name == "MooncakeStore":
        from .mooncake import MooncakeStore

        return MooncakeStore
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
