"""kvkey.Connector: save, look up and load KV blocks in any kvkey.stores.Store, verified.

The connector is the compiled ``kvkey::Connector`` (include/kvkey/connector.hpp) with
the Python store plugged in through the store protocol (docs/connectors.md): one
stored value per (block, rank), ``ns.seal_value(h, payload)`` under ``ns.store_key(h)``.
``lookup`` reads only the headers (the first 1024 bytes of each value) and counts a
block when its header verifies on every rank; ``load`` and ``load_into`` read whole
values and serve a payload only when header and bytes verify. Sealing and verifying run
with the GIL released. See docs/python.md, "Connector and stores".
"""

from __future__ import annotations

import ctypes
import dataclasses
import importlib
import inspect
import logging
import mmap
import operator
import weakref
from typing import Any, List, Optional, Sequence, Union, cast

from . import InputError, KeyNamespace, Verdict, envelope_size
from .stores.protocol import Store, StoreError

# kvkey::Connector in the binding (python/src/bind_connector.hpp); private, so not in the stubs.
_Connector: Any = getattr(importlib.import_module("kvkey._kvkey"), "_Connector")

__all__ = ["BlockResult", "Connector", "Slots", "logger"]

#: Where a connector whose store keeps failing logs (WARNING, rate-limited): the error
#: kind, the failures since the previous line and in all, and the latest message.
logger = logging.getLogger("kvkey.connector")


@dataclasses.dataclass(frozen=True)
class BlockResult:
    """What ``load_into`` did for one block.

    ``status`` is ``"loaded"`` (the verified payload is in the buffers), ``"missing"`` (no
    value under the key, or the store failed: the buffers are untouched) or
    ``"rejected"`` (a value is there but did not verify: the buffers are untouched;
    ``verdict`` says why). ``nbytes`` is the number of bytes copied."""

    status: str
    verdict: Optional[Verdict] = None
    nbytes: int = 0

    @property
    def loaded(self) -> bool:
        return self.status == "loaded"

    def __bool__(self) -> bool:
        return self.loaded


def _integer(value: Any, what: str) -> int:
    """An integer argument: an int or anything with __index__ (numpy integers), as the
    same int; a bool, float or other type is TypeError (docs/python.md, "Integers")."""
    if isinstance(value, bool) or not hasattr(type(value), "__index__"):
        raise TypeError(f"{what} must be an int, not {type(value).__name__}")
    return int(operator.index(value))


def _input_error(field: str, detail: str) -> InputError:
    """An InputError as the compiled core raises them: "[kvkey.input_error] field: detail",
    with ``.id`` and ``.field``."""
    e = InputError(f"[kvkey.input_error] {field}: {detail}")
    e.id, e.field = "kvkey.input_error", field
    return e


def _non_negative(value: Any, what: str, must: str = "must be a non-negative int") -> int:
    n = _integer(value, what)
    if n < 0:
        raise _input_error(what, f"{what} is {n!r}, {must}")
    return n


def _log_store_failure(kind: str, count: int, total: int, message: str) -> None:
    logger.warning("store failing: %d %s error(s) since the last report (%d in all); latest: %s",
                   count, kind, total, message)


_Namespaces = Union[KeyNamespace, Sequence[KeyNamespace]]


# The store methods a connector calls (and Slots): an asyncio store has them as coroutines.
_STORE_METHODS = ("get", "get_prefix", "get_into", "put", "exists", "delete", "put_from", "get_into_registered",
                  "register_memory")


def _is_async(method: Any) -> bool:
    """A coroutine (or async generator) function, or a callable object whose __call__ is one."""
    if method is None:
        return False
    if inspect.iscoroutinefunction(method) or inspect.isasyncgenfunction(method):
        return True
    call = None if inspect.isroutine(method) else getattr(type(method), "__call__", None)
    return call is not None and (inspect.iscoroutinefunction(call) or inspect.isasyncgenfunction(call))


def _refuse_async_store(store: Any) -> None:
    """TypeError for a store whose methods are coroutines (an asyncio store, such as
    kvkey.stores.aio.RedisStore): this connector would get coroutine objects, never values."""
    methods = [m for m in _STORE_METHODS if _is_async(getattr(store, m, None))]
    if methods:
        kind = type(store)
        raise TypeError(f"kvkey.Connector: the store {kind.__module__}.{kind.__qualname__} is an asyncio store "
                        f"({', '.join(methods)} {'is a coroutine' if len(methods) == 1 else 'are coroutines'}): "
                        "use kvkey.aio.Connector with it")


def _close(handle: Any) -> None:
    if handle is not None:
        handle.close()


class Slots:
    """Registered memory for the zero-copy path (``Connector.save_from``,
    ``Connector.load_into`` with slots): ``count`` slots of ``1024 + payload_size`` bytes,
    each the stored value of one block (header, then payload).

    The engine writes a block's KV into ``payload(i)`` before ``save_from`` and reads it
    from ``payload(i)`` after a ``load_into`` whose result for the block is ``loaded``. A
    slot whose result is not ``loaded`` may hold bytes that were rejected, in its header
    and in its payload: its contents must not be used.

    ``buffer``: the engine's own memory (writable, C-contiguous, at least ``count *
    stride`` bytes), else new page-aligned memory. The memory is registered with the
    store (``store.register_memory(address, size)``, where the store has registered
    memory, as ``MooncakeStore`` does) until ``close()`` or until the slots are
    collected; ``registered=True``: the engine registered it already. Any store takes
    slots: one without registered memory reads and writes copies of them."""

    def __init__(self, store: Any, count: int, payload_size: int, buffer: Any = None, *,
                 registered: bool = False) -> None:
        count = _integer(count, "count")
        payload_size = _integer(payload_size, "payload_size")
        if count < 1 or payload_size < 1:
            raise _input_error("slots", f"Slots: count {count} and payload_size {payload_size} must be at least 1")
        self.store = store
        self.count = count
        self.payload_size = payload_size
        self.stride = envelope_size + payload_size
        need = count * self.stride
        self._mm: Optional[mmap.mmap] = None
        if buffer is None:
            self._mm = mmap.mmap(-1, need)
            buffer = self._mm
        view = memoryview(buffer)
        if view.readonly or not view.c_contiguous:
            raise TypeError("Slots: the buffer must be writable and C-contiguous")
        flat = view.cast("B") if view.format != "B" or view.ndim != 1 else view
        if flat.nbytes < need:
            raise _input_error("buffer", f"Slots: the buffer has {flat.nbytes} bytes, {count} slots of "
                                         f"{self.stride} need {need}")
        self._anchor = (ctypes.c_char * need).from_buffer(flat)
        #: The address of slot 0 (the memory the store registered).
        self.memory_address: int = ctypes.addressof(self._anchor)
        self.view = flat[:need]
        register = getattr(store, "register_memory", None)
        handle = register(self.memory_address, need) if register is not None and not registered else None
        self._finalizer = weakref.finalize(self, _close, handle)

    def close(self) -> None:
        """Unregisters the memory (the slots must not be used with the store afterwards)."""
        self._finalizer()

    def __enter__(self) -> "Slots":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _at(self, i: int) -> int:
        i = _integer(i, "slot")
        if not 0 <= i < self.count:
            raise _input_error("indices", f"slot {i} is out of range [0, {self.count})")
        return i * self.stride

    def address(self, i: int) -> int:
        """The address of slot ``i``'s value."""
        return self.memory_address + self._at(i)

    def header(self, i: int) -> memoryview:
        at = self._at(i)
        return self.view[at:at + envelope_size]

    def payload(self, i: int) -> memoryview:
        at = self._at(i) + envelope_size
        return self.view[at:at + self.payload_size]

    def value(self, i: int) -> memoryview:
        at = self._at(i)
        return self.view[at:at + self.stride]

    def __repr__(self) -> str:
        return f"Slots(count={self.count}, payload_size={self.payload_size})"


class Connector:
    """Saves, looks up and loads KV blocks of one deployment in a store.

    ``ns`` is this rank's ``KeyNamespace``, or, for a lookup that covers every rank of
    the deployment, the namespaces of all ranks (one per distinct KV slice is enough),
    in rank order (``ns.for_rank(r)`` makes them). ``save``, ``load`` and ``load_into``
    act on one rank, ``rank=0`` by default; ``lookup`` counts a block only when every
    rank's header verifies.

    ``payload_size``: every rank's payload size; by default each rank's
    ``ns.payload_size`` where the identity determines it (else unchecked). A save of
    another size raises ``InputError``; a value of another size is rejected
    (``size_mismatch``), at lookup as soon as its header shows it.

    ``metrics``: a ``kvkey.Metrics`` (recorded without the GIL), or any object with its
    ``record_*`` methods, or None.

    Store errors (``StoreError``) are misses: a lookup counts 0 blocks, a load returns
    None for every block, a save returns how many values were stored, and
    ``last_error`` holds the error. ``raise_errors=True`` raises them instead. A store
    that keeps failing is logged on the ``kvkey.connector`` logger (WARNING), at most
    once per ``log_interval`` seconds; ``log=False`` turns that off.

    ``digest_threads``: threads that digest a call's values, the calling thread
    included: a load's after its one read (verified, and copied into destinations), a
    save's from ``Slots`` before its one write (gathered into them, sealed). The default
    1 is the calling thread alone. Calls of at least 256 KiB use the others (started
    with the connector); a call that finds them busy with another works on its own.

    A connector is safe to share between threads when its store is. An asyncio store
    (coroutine methods, ``kvkey.stores.aio.RedisStore``) is a ``TypeError`` here: use
    ``kvkey.aio.Connector`` with it.
    """

    def __init__(self, store: Store, ns: _Namespaces, *, metrics: Any = None,
                 payload_size: Optional[int] = None, raise_errors: bool = False,
                 lookup_batch: int = 512, log: bool = True, log_interval: float = 10.0,
                 digest_threads: int = 1) -> None:
        ranks = [ns] if isinstance(ns, KeyNamespace) else list(ns)
        if payload_size is not None:
            payload_size = _non_negative(payload_size, "payload_size", "must be a non-negative int or None")
        lookup_batch = _integer(lookup_batch, "lookup_batch")
        if lookup_batch < 1:
            raise _input_error("lookup_batch", f"Connector: lookup_batch is {lookup_batch!r}, must be at least 1")
        digest_threads = _integer(digest_threads, "digest_threads")
        if not 1 <= digest_threads <= 256:
            raise _input_error("digest_threads",
                               f"Connector: digest_threads is {digest_threads!r}, must lie in [1, 256]")
        if not isinstance(raise_errors, bool):
            raise TypeError(f"raise_errors must be a bool, not {type(raise_errors).__name__}")
        _refuse_async_store(store)
        self.store = store
        self.metrics = metrics
        self.raise_errors = raise_errors
        self.lookup_batch = lookup_batch
        self.log = log
        self.log_interval = float(log_interval)
        self.digest_threads = digest_threads
        self._core: Any = _Connector(store, ranks, metrics, payload_size, raise_errors, lookup_batch,
                                _log_store_failure if log else None, self.log_interval, digest_threads)
        self.ranks: List[KeyNamespace] = ranks
        self._payload_size = payload_size

    @property
    def ns(self) -> KeyNamespace:
        """Rank 0's namespace."""
        return self.ranks[0]

    @property
    def payload_size(self) -> Optional[int]:
        """Rank 0's expected payload size (given, or the namespace's), or None: unchecked."""
        size = self._core.payload_size(0)
        return None if size is None else int(size)

    @property
    def last_error(self) -> Optional[StoreError]:
        """The latest store failure (a call's, or one key's), or None."""
        return cast(Optional[StoreError], self._core.last_error())

    @last_error.setter
    def last_error(self, value: None) -> None:
        if value is not None:
            raise TypeError("last_error can only be reset, to None")
        self._core.clear_last_error()

    def with_epoch(self, epoch: int) -> "Connector":
        """A connector on the same store for weights epoch ``epoch``: every rank's
        namespace rotated with ``ns.with_epoch`` (secret and policy kept)."""
        return Connector(self.store, [r.with_epoch(epoch) for r in self.ranks], metrics=self.metrics,
                         payload_size=self._payload_size, raise_errors=self.raise_errors,
                         lookup_batch=self.lookup_batch, log=self.log, log_interval=self.log_interval,
                         digest_threads=self.digest_threads)

    def _rank(self, rank: int) -> int:
        return _non_negative(rank, "rank", f"must lie in [0, {len(self.ranks)})")

    @staticmethod
    def _max_tokens(max_tokens: Optional[int]) -> Optional[int]:
        return None if max_tokens is None else _non_negative(max_tokens, "max_tokens")

    def save(self, block_hashes: Sequence[bytes], payloads: Sequence[Any], *, rank: int = 0,
             staging: Optional[Slots] = None, indices: Optional[Sequence[int]] = None) -> int:
        """Stores each payload as one value, ``ns.seal_value(h, payload)``, under
        ``ns.store_key(h)``, in one ``store.put``. A payload is any C-contiguous
        bytes-like object (a numpy array), or a list of them (per-layer K and V: the
        value holds their concatenation). Returns how many values the store took.

        With ``staging`` (a ``Slots``: an engine's path out of its own KV memory): block
        ``n``'s payload is copied into ``staging.payload(indices[n])`` (default: slot
        ``n``), sealed there and written from there with one ``store.put_from``, without
        the GIL and with nothing allocated or registered per call. A payload that does
        not hold the slots' payload size, or lies in the staging memory, is
        ``InputError``, before anything is written."""
        if staging is not None:
            if not isinstance(staging, Slots):
                raise TypeError(f"save: staging is a {type(staging).__name__}, expected kvkey.Slots")
            return int(self._core.save_staged(block_hashes, payloads, staging, indices, self._rank(rank)))
        if indices is not None:
            raise _input_error("indices", "save: indices are for staging Slots only")
        return int(self._core.save(block_hashes, payloads, self._rank(rank)))

    def lookup(self, block_hashes: Sequence[bytes], *, max_tokens: Optional[int] = None) -> int:
        """The number of leading blocks whose header verifies, for this deployment and
        that block, on every rank: reads the first 1024 bytes of each value (batched
        ``get_prefix``, ``lookup_batch`` blocks per call, stopping after the batch where
        the count ends). The payload is checked at load. ``max_tokens`` caps the count
        at ``max_tokens // block_size`` blocks (pass ``prompt_len - 1``)."""
        return int(self._core.lookup(block_hashes, self._max_tokens(max_tokens), False))

    def lookup_existing(self, block_hashes: Sequence[bytes], *, max_tokens: Optional[int] = None) -> int:
        """Like ``lookup``, but counts a block when its keys exist, without reading a
        header (``store.exists``): cheaper, and it counts foreign, stale and damaged
        values that a load will then reject."""
        return int(self._core.lookup(block_hashes, self._max_tokens(max_tokens), True))

    def load(self, block_hashes: Sequence[bytes], *, rank: int = 0) -> List[Optional[memoryview]]:
        """Per block, the verified payload (a read-only ``memoryview`` into the value the
        store returned, no copy; ``bytes(p)`` copies) or None: missing, rejected, or the
        store failed. Values a store may reuse (anything but ``bytes``, unless the store
        sets ``owned_values = True``) are copied before they are verified."""
        return cast(List[Optional[memoryview]], self._core.load(block_hashes, self._rank(rank)))

    def save_from(self, block_hashes: Sequence[bytes], slots: Slots, indices: Optional[Sequence[int]] = None, *,
                  rank: int = 0) -> int:
        """The zero-copy save: block ``n``'s payload is in ``slots.payload(indices[n])``
        (default: slot ``n``). Seals each header in place (the payload is digested where
        it lies) and writes the slots with one ``store.put_from`` (registered memory, no
        copy; a store without it gets copies). Returns how many values were stored.
        ``InputError`` when an index is out of range or given twice, or the slots'
        payload size is not this deployment's."""
        if not isinstance(slots, Slots):
            raise TypeError(f"save_from: slots is a {type(slots).__name__}, expected kvkey.Slots")
        return int(self._core.save_from(block_hashes, slots, indices, self._rank(rank)))

    def load_into(self, block_hashes: Sequence[bytes], buffers: Union[Sequence[Any], Slots], *,
                  rank: int = 0, indices: Optional[Sequence[int]] = None,
                  staging: Optional[Slots] = None) -> List[BlockResult]:
        """Writes each block's verified payload into its destination: a writable,
        C-contiguous buffer (a numpy array), or a list of them (per-layer K and V) whose
        sizes add up to the payload's. The whole value is verified before anything is
        written; a block that is missing or does not verify leaves every destination
        untouched. A destination that does not hold exactly this deployment's payload
        size (where it is known) is ``InputError``, before anything is read.

        With ``staging`` (a ``Slots``: an engine's path into its own KV memory): block
        ``n``'s value is read into ``staging.value(indices[n])`` (default: slot ``n``;
        registered memory, one ``store.get_into_registered``, nothing allocated or
        registered per call), verified there, and its payload copied into its
        destination as soon as it verifies, without the GIL. A destination that does not
        hold the slots' payload size, or lies in the staging memory, is ``InputError``.

        With ``Slots`` as ``buffers`` (the zero-copy load): reads block ``n``'s value into
        ``slots.value(indices[n])`` (default: slot ``n``) and verifies it there; a block
        is ``loaded`` only when header and payload verify, its payload is then
        ``slots.payload(i)``. A slot whose result is ``missing`` or ``rejected`` may hold
        the rejected bytes: never use it. Returns one ``BlockResult`` per block."""
        if isinstance(buffers, Slots):
            if staging is not None:
                raise _input_error("staging", "load_into: staging is for destinations; the Slots are the destination")
            res = self._core.load_into_slots(block_hashes, buffers, indices, self._rank(rank))
        elif staging is not None:
            if not isinstance(staging, Slots):
                raise TypeError(f"load_into: staging is a {type(staging).__name__}, expected kvkey.Slots")
            res = self._core.load_into_staged(block_hashes, buffers, staging, indices, self._rank(rank))
        else:
            if indices is not None:
                raise _input_error("indices", "load_into: indices are for Slots only")
            res = self._core.load_into(block_hashes, buffers, self._rank(rank))
        return [BlockResult(s, v, n) for s, v, n in res]

    def __repr__(self) -> str:
        return (f"Connector({type(self.store).__name__}, ranks={len(self.ranks)}, "
                f"key_prefix={self.ranks[0].key_prefix!r})")
