"""kvkey.aio.Connector: the connector for asyncio engines, over async stores.

The same compiled connector as ``kvkey.Connector`` (the same semantics, metrics and
kit), driven from a worker thread (``loop.run_in_executor``): hashing, sealing and
verification never run on the event loop, and the store's coroutines run on the loop,
awaited by the worker. A store is any object with the methods of
``kvkey.stores.Store`` as coroutines (``kvkey.stores.aio.RedisStore`` over
``redis.asyncio``); a sync store works too (its methods then run in the worker).
See docs/python.md, "asyncio".
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import inspect
import threading
from typing import Any, Callable, List, Optional, Sequence, TypeVar, Union

from . import KeyNamespace
from .connector import BlockResult, Connector as _SyncConnector, Slots, _Namespaces
from .stores.protocol import StoreError

__all__ = ["Connector"]

_T = TypeVar("_T")
_METHODS = ("get", "get_prefix", "get_into", "put", "exists", "delete")


class _Bridge:
    """A sync view of an async store for the worker thread: each method runs the
    store's coroutine on the caller's event loop and waits for it."""

    def __init__(self, store: Any) -> None:
        self._store = store
        self._local = threading.local()
        self.owned_values = bool(getattr(store, "owned_values", False))
        for name in _METHODS:
            method = getattr(store, name, None)
            if method is not None:
                setattr(self, name, self._wrap(method))

    def _wrap(self, method: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any) -> Any:
            result = method(*args)
            if not inspect.isawaitable(result):
                return result
            loop = getattr(self._local, "loop", None)
            if loop is None:
                raise RuntimeError("kvkey.aio: a store coroutine outside a connector call")
            return asyncio.run_coroutine_threadsafe(_awaited(result), loop).result()

        return call

    def run(self, loop: asyncio.AbstractEventLoop, f: Callable[[], _T]) -> _T:
        self._local.loop = loop
        try:
            return f()
        finally:
            self._local.loop = None


async def _awaited(awaitable: Any) -> Any:
    return await awaitable


class Connector:
    """``kvkey.Connector`` with coroutine methods, for an asyncio engine. Arguments as
    for ``kvkey.Connector``; ``executor``: the ``concurrent.futures.Executor`` the
    connector's work runs in (default: the loop's default executor)."""

    def __init__(self, store: Any, ns: _Namespaces, *, executor: Optional[concurrent.futures.Executor] = None,
                 **options: Any) -> None:
        self.store = store
        self.executor = executor
        self._options = options
        self._bridge = _Bridge(store)
        self._sync = _SyncConnector(self._bridge, ns, **options)  # type: ignore[arg-type]

    @property
    def ranks(self) -> List[KeyNamespace]:
        return self._sync.ranks

    @property
    def ns(self) -> KeyNamespace:
        return self._sync.ns

    @property
    def payload_size(self) -> Optional[int]:
        return self._sync.payload_size

    @property
    def last_error(self) -> Optional[StoreError]:
        return self._sync.last_error

    @property
    def metrics(self) -> Any:
        return self._sync.metrics

    def with_epoch(self, epoch: int) -> "Connector":
        return Connector(self.store, [r.with_epoch(epoch) for r in self.ranks], executor=self.executor,
                         **self._options)

    async def _run(self, f: Callable[..., _T], *args: Any, **kwargs: Any) -> _T:
        loop = asyncio.get_running_loop()
        bridge = self._bridge

        def work() -> _T:
            return bridge.run(loop, lambda: f(*args, **kwargs))

        return await loop.run_in_executor(self.executor, work)

    async def save(self, block_hashes: Sequence[bytes], payloads: Sequence[Any], *, rank: int = 0) -> int:
        """``kvkey.Connector.save``: payloads are buffers or lists of buffers (per layer)."""
        return await self._run(self._sync.save, block_hashes, payloads, rank=rank)

    async def lookup(self, block_hashes: Sequence[bytes], *, max_tokens: Optional[int] = None) -> int:
        """``kvkey.Connector.lookup``: leading blocks whose header verifies on every rank."""
        return await self._run(self._sync.lookup, block_hashes, max_tokens=max_tokens)

    async def lookup_existing(self, block_hashes: Sequence[bytes], *, max_tokens: Optional[int] = None) -> int:
        return await self._run(self._sync.lookup_existing, block_hashes, max_tokens=max_tokens)

    async def load(self, block_hashes: Sequence[bytes], *, rank: int = 0) -> List[Optional[memoryview]]:
        """``kvkey.Connector.load``: verified payloads, or None."""
        return await self._run(self._sync.load, block_hashes, rank=rank)

    async def load_into(self, block_hashes: Sequence[bytes], buffers: Union[Sequence[Any], Slots], *,
                        rank: int = 0, indices: Optional[Sequence[int]] = None) -> List[BlockResult]:
        """``kvkey.Connector.load_into``: verified, then written into the destinations
        (or, with ``kvkey.Slots``, read into the slots and verified there)."""
        return await self._run(self._sync.load_into, block_hashes, buffers, rank=rank, indices=indices)

    async def save_from(self, block_hashes: Sequence[bytes], slots: Slots, indices: Optional[Sequence[int]] = None,
                        *, rank: int = 0) -> int:
        """``kvkey.Connector.save_from``: the zero-copy save from ``kvkey.Slots``."""
        return await self._run(self._sync.save_from, block_hashes, slots, indices, rank=rank)

    def __repr__(self) -> str:
        return (f"kvkey.aio.Connector({type(self.store).__name__}, ranks={len(self.ranks)}, "
                f"key_prefix={self.ranks[0].key_prefix!r})")
