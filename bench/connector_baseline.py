"""The pure-Python kvkey.Connector before the connector core moved to C++, kept verbatim
(but for its imports) as the baseline of bench/python_connector_bench.py."""

from __future__ import annotations

import collections
import dataclasses
import operator
import threading
from typing import Any, Iterable, List, Optional, Sequence, Tuple, TypeVar, Union

from kvkey import InputError, KeyNamespace, Verdict, envelope_size
from kvkey.stores import Store, StoreError

__all__ = ["BlockResult", "Connector"]

_T = TypeVar("_T")
_HEADER = envelope_size
_COUNTED_LIMIT = 1 << 16  # block hashes remembered from lookups, for false-hit counts


@dataclasses.dataclass(frozen=True)
class BlockResult:
    """What ``load_into`` did for one block.

    ``status`` is ``"loaded"`` (the verified payload is in the buffer), ``"missing"`` (no
    value under the key, or the store failed: the buffer is untouched) or
    ``"rejected"`` (a value is there but did not verify: the buffer is untouched;
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
    return operator.index(value)


def _checked(replies: Iterable[_T], keys: Sequence[str], call: str) -> List[_T]:
    """A store's replies as a list, one per key (StoreError "protocol" otherwise)."""
    out = list(replies)
    if len(out) != len(keys):
        raise StoreError("protocol", f"{call} returned {len(out)} replies for {len(keys)} keys")
    return out


def _check_header(ns: KeyNamespace, header: Any, block_hash: bytes) -> Verdict:
    """The header's verdict, and, where the store told the value's total size (a
    ``stores.Prefix``, or a whole value), whether the header's payload size agrees."""
    total = getattr(header, "total_size", None)
    if len(header) > _HEADER:
        if total is None:
            total = len(header)
        header = memoryview(header)[:_HEADER]
    verdict = ns.verify_header(header, block_hash)
    # The payload size field (format.md section 6: u64le at offset 48) of a header that verified.
    if verdict.ok and total is not None and int.from_bytes(header[48:56], "little") != total - _HEADER:
        return ns.verify(header, block_hash, max(0, total - _HEADER))  # size_mismatch, named
    return verdict


_Namespaces = Union[KeyNamespace, Sequence[KeyNamespace]]
_Opened = Tuple[List[Optional[memoryview]], List[Optional[Verdict]], List[Optional[bytes]]]


class Connector:
    """Saves, looks up and loads KV blocks of one deployment in a store.

    ``ns`` is this rank's ``KeyNamespace``, or, for a lookup that covers every rank of
    the deployment, the namespaces of all ranks (one per distinct KV slice is enough),
    in rank order. ``save``, ``load`` and ``load_into`` act on one rank, ``rank=0`` by
    default; ``lookup`` counts a block only when every rank's header verifies.

    ``payload_size``: when given, a save of another size raises ``InputError`` and a
    verified value of another size is rejected (``size_mismatch``); pass
    ``ns.payload_size`` where the identity determines it.

    ``metrics``: an object with the methods of ``kvkey.Metrics`` that this connector
    calls (``record_lookup``, ``record_load``, ``record_rejection``, ``record_false_hits``,
    ``record_payload_bytes``, ``record_store_error``, ``record_save``), or None.

    Store errors (``StoreError``) are misses: a lookup counts 0 blocks, a load returns
    None for every block, a save returns how many values were stored, and
    ``last_error`` holds the error. ``raise_errors=True`` raises them instead.

    A connector is safe to share between threads when its store is.
    """

    def __init__(self, store: Store, ns: _Namespaces, *, metrics: Any = None,
                 payload_size: Optional[int] = None, raise_errors: bool = False,
                 lookup_batch: int = 512) -> None:
        ranks = [ns] if isinstance(ns, KeyNamespace) else list(ns)
        if not ranks:
            raise InputError("[kvkey.input_error] Connector: no namespace given")
        for i, r in enumerate(ranks):
            if not isinstance(r, KeyNamespace):
                raise TypeError(f"Connector: ns[{i}] is a {type(r).__name__}, expected kvkey.KeyNamespace")
            if r.root != ranks[0].root or r.key_prefix != ranks[0].key_prefix or r.keyed != ranks[0].keyed:
                raise InputError(f"[kvkey.input_error] Connector: ns[{i}] belongs to another deployment "
                                 "than ns[0] (the ranks of one deployment differ only in their shard)")
        if payload_size is not None:
            payload_size = _integer(payload_size, "payload_size")
        if payload_size is not None and payload_size < 0:
            raise InputError(f"[kvkey.input_error] Connector: payload_size is {payload_size!r}, "
                             "must be a non-negative int or None")
        self.store = store
        self.ranks: List[KeyNamespace] = ranks
        self.metrics = metrics
        self.payload_size = payload_size
        self.raise_errors = raise_errors
        lookup_batch = _integer(lookup_batch, "lookup_batch")
        if lookup_batch < 1:
            raise InputError(f"[kvkey.input_error] Connector: lookup_batch is {lookup_batch!r}, must be at least 1")
        self.lookup_batch = lookup_batch
        self.last_error: Optional[StoreError] = None
        self._lock = threading.Lock()
        self._counted: "collections.OrderedDict[bytes, None]" = collections.OrderedDict()

    @property
    def ns(self) -> KeyNamespace:
        """Rank 0's namespace."""
        return self.ranks[0]

    def with_epoch(self, epoch: int) -> "Connector":
        """A connector on the same store for weights epoch ``epoch``: every rank's
        namespace rotated with ``ns.with_epoch`` (secret and policy kept)."""
        return Connector(self.store, [r.with_epoch(epoch) for r in self.ranks], metrics=self.metrics,
                         payload_size=self.payload_size, raise_errors=self.raise_errors,
                         lookup_batch=self.lookup_batch)

    # -- plumbing

    def _rank(self, rank: int) -> KeyNamespace:
        rank = _integer(rank, "rank")
        if not 0 <= rank < len(self.ranks):
            raise InputError(f"[kvkey.input_error] rank is {rank!r}, must lie in [0, {len(self.ranks)})")
        return self.ranks[rank]

    def _store_error(self, e: StoreError) -> None:
        self.last_error = e
        if self.metrics is not None:
            self.metrics.record_store_error(e.kind)
        if self.raise_errors:
            raise e

    def _remember(self, hashes: Iterable[bytes]) -> None:
        with self._lock:
            for h in hashes:
                self._counted[h] = None
                self._counted.move_to_end(h)
            while len(self._counted) > _COUNTED_LIMIT:
                self._counted.popitem(last=False)

    def _false_hits(self, hashes: Iterable[bytes]) -> int:
        """How many of these blocks (missing or rejected at load) a lookup counted."""
        n = 0
        with self._lock:
            for h in hashes:
                if self._counted.pop(h, 1) is None:
                    n += 1
        return n

    def _get_prefix(self, keys: List[str]) -> Sequence[Optional[bytes]]:
        """Headers: the store's get_prefix, or whole values from a store with only get."""
        get_prefix = getattr(self.store, "get_prefix", None)
        if get_prefix is None:
            return self.store.get(keys)
        headers: Sequence[Optional[bytes]] = get_prefix(keys, _HEADER)
        return headers

    def _exists(self, keys: List[str]) -> Sequence[bool]:
        """The store's exists, or get from a store without it."""
        exists = getattr(self.store, "exists", None)
        if exists is None:
            return [v is not None for v in self.store.get(keys)]
        found: Sequence[bool] = exists(keys)
        return found

    def _lookup_done(self, hashes: List[bytes], hits: int, rejected_blocks: int) -> None:
        self._remember(hashes[:hits])
        if self.metrics is not None:
            self.metrics.record_lookup(hits, len(hashes) - hits - rejected_blocks, rejected_blocks)

    def _max_blocks(self, n: int, max_tokens: Optional[int]) -> int:
        if max_tokens is None:
            return n
        max_tokens = _integer(max_tokens, "max_tokens")
        if max_tokens < 0:
            raise InputError(f"[kvkey.input_error] max_tokens is {max_tokens!r}, must be a non-negative int")
        return min(n, max_tokens // self.ranks[0].block_size)

    # -- save

    def save(self, block_hashes: Sequence[bytes], payloads: Sequence[Any], *, rank: int = 0) -> int:
        """Stores each payload (any C-contiguous bytes-like object, e.g. a numpy array)
        as one value, ``ns.seal_value(h, payload)``, under ``ns.store_key(h)``. Returns
        how many values the store took."""
        ns = self._rank(rank)
        hashes, payloads = list(block_hashes), list(payloads)
        if len(hashes) != len(payloads):
            raise InputError(f"[kvkey.input_error] save: {len(hashes)} block hashes but "
                             f"{len(payloads)} payloads")
        if self.payload_size is not None:
            for i, p in enumerate(payloads):
                if memoryview(p).nbytes != self.payload_size:
                    raise InputError(f"[kvkey.input_error] save: payloads[{i}] has {memoryview(p).nbytes} "
                                     f"bytes, this deployment's blocks have {self.payload_size}")
        values = [ns.seal_value(h, p) for h, p in zip(hashes, payloads)]
        keys = [ns.store_key(h) for h in hashes]
        try:
            stored = self.store.put(keys, values)
        except StoreError as e:
            if self.metrics is not None:
                self.metrics.record_save(0, len(keys))
            self._store_error(e)
            return 0
        saved = len(keys) if stored is None else sum(1 for s in stored if s)
        if self.metrics is not None:
            self.metrics.record_save(saved, len(keys) - saved)
        return saved

    # -- lookup

    def lookup(self, block_hashes: Sequence[bytes], *, max_tokens: Optional[int] = None) -> int:
        """The number of leading blocks whose header verifies, for this deployment and
        that block, on every rank: reads the first 1024 bytes of each value (batched
        ``get_prefix``, ``lookup_batch`` blocks per call, stopping after the batch where
        the count ends). The payload is checked at load. ``max_tokens`` caps the count
        at ``max_tokens // block_size`` blocks (pass ``prompt_len - 1``)."""
        hashes = list(block_hashes)
        n = self._max_blocks(len(hashes), max_tokens)
        hits, rejected_blocks = 0, 0
        for start in range(0, n, self.lookup_batch):
            chunk = hashes[start:min(n, start + self.lookup_batch)]
            keys = [ns.store_key(h) for h in chunk for ns in self.ranks]
            try:
                headers = _checked(self._get_prefix(keys), keys, "get_prefix")
            except StoreError as e:
                self._lookup_done(hashes, 0, rejected_blocks)
                self._store_error(e)
                return 0
            counted, rejected = self._count(chunk, headers, counting=hits == start)
            hits += counted
            rejected_blocks += rejected
            if hits < start + len(chunk):
                break  # the count ended in this batch
        self._lookup_done(hashes, hits, rejected_blocks)
        return hits

    def _count(self, hashes: List[bytes], headers: List[Optional[bytes]], counting: bool) -> Tuple[int, int]:
        """(leading blocks whose headers verify on every rank, blocks with a rejected
        header) of one batch; records each rejection."""
        shards = len(self.ranks)
        hits, rejected_blocks = 0, 0
        for b, h in enumerate(hashes):
            block_ok, block_rejected = True, None
            for r, ns in enumerate(self.ranks):
                header = headers[b * shards + r]
                if header is None:
                    block_ok = False
                    continue
                verdict = _check_header(ns, header, h)
                if not verdict.ok:
                    block_ok = False
                    if block_rejected is None:
                        block_rejected = verdict
            if block_rejected is not None:
                rejected_blocks += 1
                if self.metrics is not None:
                    self.metrics.record_rejection(block_rejected)
            if counting and block_ok:
                hits += 1
            else:
                counting = False
        return hits, rejected_blocks

    def lookup_existing(self, block_hashes: Sequence[bytes], *, max_tokens: Optional[int] = None) -> int:
        """Like ``lookup``, but counts a block when its keys exist, without reading a
        header (``store.exists``): cheaper, and it counts foreign, stale and damaged
        values that a load will then reject."""
        hashes = list(block_hashes)
        n = self._max_blocks(len(hashes), max_tokens)
        keys = [ns.store_key(h) for h in hashes[:n] for ns in self.ranks]
        try:
            found = _checked(self._exists(keys) if keys else [], keys, "exists")
        except StoreError as e:
            self._lookup_done(hashes, 0, 0)
            self._store_error(e)
            return 0
        shards, hits = len(self.ranks), 0
        while hits < n and all(found[hits * shards:(hits + 1) * shards]):
            hits += 1
        self._lookup_done(hashes, hits, 0)
        return hits

    # -- load

    def _open(self, ns: KeyNamespace, hashes: List[bytes]) -> _Opened:
        """Reads and verifies every block: (payload or None, verdict or None when missing,
        raw value) per block. On a store error, records the load as all missing."""
        keys = [ns.store_key(h) for h in hashes]
        try:
            values = _checked(self.store.get(keys) if keys else [], keys, "get")
        except StoreError as e:
            self._record_load(hashes, [None] * len(hashes), [None] * len(hashes))
            self._store_error(e)
            return [None] * len(hashes), [None] * len(hashes), [None] * len(hashes)
        present = [(i, v) for i, v in enumerate(values) if v is not None]
        opened = ns.open_values([v for _, v in present], [hashes[i] for i, _ in present]) if present else []
        payloads: List[Optional[memoryview]] = [None] * len(hashes)
        verdicts: List[Optional[Verdict]] = [None] * len(hashes)
        for (i, _), o in zip(present, opened):
            verdict, payload = o.verdict, o.payload
            if verdict.ok and payload is not None and self.payload_size is not None \
                    and len(payload) != self.payload_size:
                value = values[i]
                assert value is not None
                verdict, payload = ns.verify(memoryview(value)[:_HEADER], hashes[i], self.payload_size), None
            verdicts[i] = verdict
            payloads[i] = payload if verdict.ok else None
        return payloads, verdicts, values

    def _record_load(self, hashes: List[bytes], payloads: Sequence[Optional[Any]],
                     verdicts: Sequence[Optional[Any]]) -> None:
        failed = [h for h, p in zip(hashes, payloads) if p is None]
        false_hits = self._false_hits(failed)
        if self.metrics is None:
            return
        rejected = [v for p, v in zip(payloads, verdicts) if p is None and v is not None]
        loaded = len(hashes) - len(failed)
        self.metrics.record_load(loaded, len(failed) - len(rejected), len(rejected))
        for v in rejected:
            self.metrics.record_rejection(v)
        if false_hits:
            self.metrics.record_false_hits(false_hits)
        nbytes = sum(len(p) for p in payloads if p is not None)
        if nbytes:
            self.metrics.record_payload_bytes(nbytes)

    def load(self, block_hashes: Sequence[bytes], *, rank: int = 0) -> List[Optional[memoryview]]:
        """Per block, the verified payload (a read-only ``memoryview`` into the value the
        store returned, no copy; ``bytes(p)`` copies) or None: missing, rejected, or the
        store failed."""
        hashes = list(block_hashes)
        payloads, verdicts, _ = self._open(self._rank(rank), hashes)
        self._record_load(hashes, payloads, verdicts)
        return payloads

    def load_into(self, block_hashes: Sequence[bytes], buffers: Sequence[Any], *, rank: int = 0) -> List[BlockResult]:
        """Copies each block's verified payload into its buffer (a writable,
        C-contiguous buffer such as a numpy array, of exactly the payload's size).
        A block that is missing or does not verify (a payload of another size than its
        buffer included: ``size_mismatch``) leaves its buffer untouched. Returns one
        ``BlockResult`` per block."""
        ns = self._rank(rank)
        hashes = list(block_hashes)
        bufs = list(buffers)
        if len(bufs) != len(hashes):
            raise InputError(f"[kvkey.input_error] load_into: {len(hashes)} block hashes but "
                             f"{len(bufs)} buffers")
        views = []
        for i, b in enumerate(bufs):
            try:
                v = memoryview(b)
            except TypeError:
                raise TypeError(f"load_into: buffers[{i}] is a {type(b).__name__}, not a buffer") from None
            if v.readonly or not v.c_contiguous:
                raise TypeError(f"load_into: buffers[{i}] must be writable and C-contiguous")
            views.append(v.cast("B") if v.format != "B" or v.ndim != 1 else v)
        payloads, verdicts, values = self._open(ns, hashes)
        results: List[BlockResult] = []
        for i, (payload, view) in enumerate(zip(payloads, views)):
            if payload is not None and len(payload) != view.nbytes:
                value = values[i]
                assert value is not None
                verdicts[i] = ns.verify(memoryview(value)[:_HEADER], hashes[i], view.nbytes)
                payloads[i] = payload = None
            if payload is not None:
                view[:] = payload
                results.append(BlockResult("loaded", verdicts[i], len(payload)))
            elif verdicts[i] is not None:
                results.append(BlockResult("rejected", verdicts[i]))
            else:
                results.append(BlockResult("missing"))
        self._record_load(hashes, payloads, verdicts)
        return results

    def __repr__(self) -> str:
        return (f"Connector({type(self.store).__name__}, ranks={len(self.ranks)}, "
                f"key_prefix={self.ranks[0].key_prefix!r})")
