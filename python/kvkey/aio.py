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
import ctypes
import inspect
import threading
from typing import Any, Callable, List, Optional, Sequence, Set, Tuple, TypeVar, Union

from . import KeyNamespace
from .connector import _STORE_METHODS, BlockResult, Connector as _SyncConnector, Slots, _Namespaces
from .stores.protocol import StoreError

__all__ = ["Connector"]

_T = TypeVar("_T")


class _Cancelled(BaseException):
    """Raised in the worker of a cancelled call, by each store call it still makes: the
    compiled connector passes it through (no store error is counted), and the call ends."""


class _Call:
    """One connector call under way: the loop its store coroutines run on, and the tasks
    that run them (cancelled with the call). Only the loop's thread touches ``tasks``."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.cancelled = False
        self.tasks: Set["asyncio.Task[Any]"] = set()

    def cancel(self) -> None:
        """On the loop: cancels the store coroutines under way; those not started never start."""
        self.cancelled = True
        for t in list(self.tasks):
            t.cancel()

    def check(self) -> None:
        if self.cancelled:
            raise _Cancelled()

    async def run(self, awaitable: Any) -> Any:
        """The store's awaitable, on the loop, as a task the call can cancel."""
        if self.cancelled:
            if inspect.iscoroutine(awaitable):
                awaitable.close()
            raise asyncio.CancelledError()
        task = asyncio.current_task()
        assert task is not None
        self.tasks.add(task)
        try:
            return await awaitable
        finally:
            self.tasks.discard(task)


class _Bridge:
    """A sync view of an async store for the worker thread: each method runs the
    store's coroutine on the caller's event loop and waits for it."""

    def __init__(self, store: Any) -> None:
        self._store = store
        self._local = threading.local()
        self.owned_values = bool(getattr(store, "owned_values", False))
        for name in _STORE_METHODS:  # registered memory (the zero-copy path) included
            method = getattr(store, name, None)
            if method is not None:
                setattr(self, name, self._wrap(method))

    def _wrap(self, method: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any) -> Any:
            current: Optional[_Call] = getattr(self._local, "call", None)
            if current is not None:
                current.check()
            result = method(*args)
            if not inspect.isawaitable(result):
                if current is not None:
                    current.check()  # a sync store's reply to a call cancelled meanwhile: not used
                return result
            if current is None:
                if inspect.iscoroutine(result):
                    result.close()
                raise RuntimeError("kvkey.aio: a store coroutine outside a connector call")
            # The future is done only once the task is: a cancelled coroutine has ended (its
            # finally blocks run) before the worker goes on.
            future = asyncio.run_coroutine_threadsafe(current.run(result), current.loop)
            try:
                value = future.result()
            except (concurrent.futures.CancelledError, asyncio.CancelledError):
                if current.cancelled:
                    raise _Cancelled() from None
                raise StoreError("other", "the store's coroutine was cancelled") from None
            current.check()
            return value

        return call

    def run(self, current: _Call, f: Callable[[], _T]) -> Optional[_T]:
        """f() in the worker, its store coroutines on current's loop; None when the call was
        cancelled (its result is never used)."""
        self._local.call = current
        try:
            current.check()
            return f()
        except _Cancelled:
            return None
        finally:
            self._local.call = None


_Saved = List[List[Tuple[Any, bytearray]]]


def _bytes_of(buffer: Any) -> Any:
    """A ctypes array over a writable, C-contiguous buffer (None when empty), holding its
    export: the memory cannot move while it lives. TypeError, ValueError or
    NotImplementedError for anything else."""
    mv = memoryview(buffer)
    flat = mv if mv.format == "B" and mv.ndim == 1 else mv.cast("B")
    return (ctypes.c_char * flat.nbytes).from_buffer(flat) if flat.nbytes else None


def _saved(buffers: Sequence[Any]) -> Optional[_Saved]:
    """Per block, (the part's memory, a copy of its bytes now) for each destination part,
    to put back when the call is cancelled after it wrote them; None when a destination is
    no writable C-contiguous buffer (the connector then refuses it, naming it, and writes
    nothing). The copies are ctypes.memmove calls, which release the GIL: the event loop
    runs on meanwhile."""
    try:
        out = []
        for block in buffers:
            parts = []
            for p in block if isinstance(block, (list, tuple)) else [block]:
                memory = _bytes_of(p)
                copy = bytearray(ctypes.sizeof(memory) if memory is not None else 0)
                if memory is not None:
                    ctypes.memmove((ctypes.c_char * len(copy)).from_buffer(copy), memory, len(copy))
                parts.append((memory, copy))
            out.append(parts)
        return out
    except (TypeError, ValueError, NotImplementedError):  # not a writable buffer, or one memoryview cannot cast
        return None


def _put_back(saved: Optional[_Saved], results: List[BlockResult]) -> None:
    """The destinations of the blocks a cancelled load_into wrote, as they were before it
    (then the copies go, and with them the destinations' exports)."""
    if saved is None:
        return
    for parts, r in zip(saved, results):
        if r.loaded:
            for memory, before in parts:
                if memory is not None:
                    ctypes.memmove(memory, (ctypes.c_char * len(before)).from_buffer(before), len(before))
    saved.clear()


async def _ended(work: "asyncio.Future[Any]") -> None:
    """Waits until work has ended (however often the waiting task is cancelled again)."""
    while not work.done():
        try:
            await asyncio.shield(work)
        except BaseException:  # noqa: BLE001 - its result or error, or one more cancel: wait on
            pass
    if not work.cancelled():
        work.exception()  # retrieved: the caller gets CancelledError, not this


class Connector:
    """``kvkey.Connector`` with coroutine methods, for an asyncio engine. Arguments as
    for ``kvkey.Connector``; ``executor``: the ``concurrent.futures.Executor`` the
    connector's work runs in (default: the loop's default executor).

    A cancelled call (``task.cancel()``, ``asyncio.wait_for``) cancels the store coroutines
    it started, makes no further store call, and waits until its work has ended before
    ``CancelledError`` reaches the caller: once it has, nothing reads the payloads or writes
    into the buffers of that call, and ``load_into``'s destinations are as they were. A
    store read cancelled this way serves nothing (its blocks are not loaded and no store
    error is counted); a sync store's method, which runs in the worker and cannot be
    interrupted, is waited for and its reply is not used."""

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

    async def _run(self, f: Callable[..., _T], *args: Any, undo: Optional[Callable[[_T], None]] = None,
                   **kwargs: Any) -> _T:
        """f(*args, **kwargs) in the executor. Cancelled, the call cancels the store
        coroutines it started and waits until its work has ended before CancelledError
        reaches the caller: nothing touches the caller's buffers after that. Where the work
        had already finished (the cancel came too late to stop it), undo(its result) runs
        in the executor, and is waited for, before CancelledError."""
        loop = asyncio.get_running_loop()
        current = _Call(loop)
        bridge = self._bridge

        def work() -> Optional[_T]:
            return bridge.run(current, lambda: f(*args, **kwargs))

        future = loop.run_in_executor(self.executor, work)
        try:
            result = await asyncio.shield(future)
        except asyncio.CancelledError:
            current.cancel()
            await _ended(future)
            done = None if future.cancelled() or future.exception() is not None else future.result()
            if undo is not None and done is not None:
                await _ended(loop.run_in_executor(self.executor, undo, done))
            raise
        return result  # type: ignore[return-value]  # None only for a cancelled call

    async def save(self, block_hashes: Sequence[bytes], payloads: Sequence[Any], *, rank: int = 0,
                   staging: Optional[Slots] = None, indices: Optional[Sequence[int]] = None) -> int:
        """``kvkey.Connector.save``: payloads are buffers or lists of buffers (per layer);
        with ``staging``, gathered into those ``kvkey.Slots`` and written from there."""
        return await self._run(self._sync.save, block_hashes, payloads, rank=rank, staging=staging, indices=indices)

    async def lookup(self, block_hashes: Sequence[bytes], *, max_tokens: Optional[int] = None) -> int:
        """``kvkey.Connector.lookup``: leading blocks whose header verifies on every rank."""
        return await self._run(self._sync.lookup, block_hashes, max_tokens=max_tokens)

    async def lookup_existing(self, block_hashes: Sequence[bytes], *, max_tokens: Optional[int] = None) -> int:
        return await self._run(self._sync.lookup_existing, block_hashes, max_tokens=max_tokens)

    async def load(self, block_hashes: Sequence[bytes], *, rank: int = 0) -> List[Optional[memoryview]]:
        """``kvkey.Connector.load``: verified payloads, or None."""
        return await self._run(self._sync.load, block_hashes, rank=rank)

    async def load_into(self, block_hashes: Sequence[bytes], buffers: Union[Sequence[Any], Slots], *,
                        rank: int = 0, indices: Optional[Sequence[int]] = None,
                        staging: Optional[Slots] = None) -> List[BlockResult]:
        """``kvkey.Connector.load_into``: verified, then written into the destinations
        (through the ``staging`` slots when given; or, with ``kvkey.Slots`` as buffers,
        read into the slots and verified there). Cancelled, the
        call leaves the destinations as they were: a cancel that lands while verified bytes
        are being written waits for the write and puts the bytes back before
        ``CancelledError`` (the worker keeps a copy of the destinations for this). Slots
        of a cancelled call are as slots whose block is not loaded: never use them."""
        if isinstance(buffers, Slots):
            return await self._run(self._sync.load_into, block_hashes, buffers, rank=rank, indices=indices,
                                   staging=staging)
        sync, dest = self._sync, buffers

        def load() -> Tuple[Optional[_Saved], List[BlockResult]]:
            saved = _saved(dest)
            try:
                return saved, sync.load_into(block_hashes, dest, rank=rank, indices=indices, staging=staging)
            except BaseException:
                if saved is not None:
                    saved.clear()  # the copies hold the destinations' exports: not past the call
                raise

        saved, results = await self._run(load, undo=lambda done: _put_back(*done))
        if saved is not None:
            saved.clear()
        return results

    async def save_from(self, block_hashes: Sequence[bytes], slots: Slots, indices: Optional[Sequence[int]] = None,
                        *, rank: int = 0) -> int:
        """``kvkey.Connector.save_from``: the zero-copy save from ``kvkey.Slots``."""
        return await self._run(self._sync.save_from, block_hashes, slots, indices, rank=rank)

    def __repr__(self) -> str:
        return (f"kvkey.aio.Connector({type(self.store).__name__}, ranks={len(self.ranks)}, "
                f"key_prefix={self.ranks[0].key_prefix!r})")
