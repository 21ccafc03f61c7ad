"""kvkey.stores.MooncakeStore: the Store protocol over a Mooncake Store client.

Mooncake (``mooncake.store.MooncakeDistributedStore``) differs from Redis in ways an
adapter must absorb; each is handled here and documented in docs/integration/mooncake.md:

- ``put`` keeps an existing value (it returns 0 and the old bytes stay): writes use
  ``upsert_batch`` / ``batch_upsert_from``, which replace.
- A missing key reads as ``b""``, and so does a read that failed: an empty read is
  asked again through ``batch_is_exist``, and a negative code is never a hit.
- Empty values are refused (-600): ``put`` reports them as not stored.
- Reads take a lease on the object (the master's ``--default_kv_lease_ttl``), and a
  remove under a lease is refused (-706): removes are forced. Forcing is safe for kvkey:
  a reader whose object is freed under it reads bytes that do not verify, a miss.
- Keys cannot be listed: ``scan_prefix`` raises NotImplementedError, and ``purge(prefix)``
  removes by ``remove_by_regex`` with the prefix escaped.
- Headers are read with one ``batch_get_session_start`` (one master round trip, like
  ``batch_is_exist``) and ranged reads of the first 1024 bytes into registered memory,
  in several concurrent calls (the TCP transport serializes the ranges of one call).
- The zero-copy path (``MooncakeConnector.save_from`` / ``load_into`` with ``Slots``):
  values are written from, and read into, registered memory with ``batch_upsert_from`` /
  ``batch_get_into``, and verified in place.

Importing this module does not import ``mooncake``; ``MooncakeStore.connect`` does.
"""

from __future__ import annotations

import contextlib
import ctypes
import mmap
import threading
import time
from typing import Any, Dict, Generator, Iterator, List, Optional, Sequence, Tuple

from .. import InputError, KeyNamespace, Verdict, envelope_size
from ..connector import BlockResult, Connector
from . import StoreError

__all__ = ["CODES", "MooncakeConnector", "MooncakeStore", "Slots", "code_kind", "regex_escape", "spawn_holder"]

_HEADER = envelope_size
_MIN_STREAM = 64  # keys per concurrent ranged-read call, at least (MooncakeStore.read_streams)

# Mooncake's ErrorCode values (mooncake-store/include/types.h) that the adapter names.
CODES: Dict[int, str] = {
    -1: "INTERNAL_ERROR",
    -10: "BUFFER_OVERFLOW",
    -100: "SHARD_INDEX_OUT_OF_RANGE",
    -101: "SEGMENT_NOT_FOUND",
    -103: "CLIENT_NOT_FOUND",
    -200: "NO_AVAILABLE_HANDLE",
    -400: "INVALID_KEY",
    -500: "WRITE_FAIL",
    -600: "INVALID_PARAMS",
    -601: "ILLEGAL_CLIENT",
    -700: "INVALID_WRITE",
    -701: "INVALID_READ",
    -702: "INVALID_REPLICA",
    -703: "REPLICA_IS_NOT_READY",
    -704: "OBJECT_NOT_FOUND",
    -705: "OBJECT_ALREADY_EXISTS",
    -706: "OBJECT_HAS_LEASE",
    -707: "LEASE_EXPIRED",
    -708: "OBJECT_HAS_REPLICATION_TASK",
    -710: "REPLICA_NOT_FOUND",
    -712: "REPLICA_IS_GONE",
    -714: "OBJECT_REPLICA_BUSY",
    -800: "TRANSFER_FAIL",
    -801: "CHECKSUM_MISMATCH",
    -900: "RPC_FAIL",
    -901: "RPC_TIMEOUT",
}
OK = 0
NOT_FOUND = -704
NOT_READY = -703  # being written: nothing readable yet
INVALID_PARAMS = -600
# A miss, not an error: no object, or one whose write has not completed.
_MISS = {NOT_FOUND, NOT_READY}
# A write refused for now: readers hold the object (refcount, lease) or a task moves it.
_BUSY = {-706, -708, -714}
_CONNECTION = {-101, -103, -800, -900, -712, -710}
_TIMEOUT = {-901, -707}


def code_kind(code: int) -> str:
    """The ``StoreError`` kind of a negative Mooncake return code: ``connection`` (RPC and
    transfer failures, a segment or client gone), ``timeout`` (an RPC deadline, an expired
    lease), ``server`` (every other refusal)."""
    if code in _CONNECTION:
        return "connection"
    if code in _TIMEOUT:
        return "timeout"
    return "server"


def _name(code: int) -> str:
    return f"{code} ({CODES.get(code, 'unknown')})"


def regex_escape(prefix: str) -> str:
    """``prefix`` with every ECMAScript regex special escaped (Mooncake's master matches
    ``remove_by_regex`` patterns with ``std::regex_search``): ``regex_escape(p)`` matches
    ``p`` literally. Python's ``re.escape`` also escapes characters ECMAScript refuses
    escaped (``/`` passes, ``-`` does not), so this escapes only ``^$\\.*+?()[]{}|``."""
    return "".join("\\" + c if c in "^$\\.*+?()[]{}|" else c for c in prefix)


def _address(buf: Any) -> Tuple[int, int, Any]:
    """(address, size, keep-alive) of a writable C-contiguous buffer."""
    view = memoryview(buf)
    if view.readonly or not view.c_contiguous:
        raise TypeError("a registered buffer must be writable and C-contiguous")
    flat = view.cast("B") if view.format != "B" or view.ndim != 1 else view
    if flat.nbytes == 0:
        raise InputError("[kvkey.input_error] a registered buffer must not be empty")
    anchor = (ctypes.c_char * flat.nbytes).from_buffer(flat)
    return ctypes.addressof(anchor), flat.nbytes, (anchor, flat)


class _Region:
    """Anonymous page-aligned memory registered with the client (unregistered by close)."""

    def __init__(self, store: "MooncakeStore", size: int, buffer: Any = None, register: bool = True) -> None:
        self._mm: Optional[mmap.mmap] = None
        if buffer is None:
            self._mm = mmap.mmap(-1, size)
            buffer = self._mm
        self.address, self.size, self._keep = _address(buffer)
        if self.size < size:
            raise InputError(f"[kvkey.input_error] the buffer has {self.size} bytes, {size} are needed")
        self.view = memoryview(self._keep[1])
        self._store = store
        self.registered = False
        if register:
            rc = store._call("register_buffer", store.client.register_buffer, self.address, self.size)
            if rc != OK:
                raise StoreError(code_kind(rc), f"register_buffer of {self.size} bytes returned {_name(rc)}")
            self.registered = True

    def close(self) -> None:
        if self.registered:
            self.registered = False
            try:
                self._store.client.unregister_buffer(self.address)
            except Exception:  # noqa: BLE001 - a closed client has dropped it already
                pass


class MooncakeStore:
    """A Store over a ``mooncake.store.MooncakeDistributedStore`` that ``setup`` has
    connected (or ``MooncakeStore.connect(...)``, which makes one).

    ``batch``: keys per call that moves values (a ``get`` lands in the client's local
    buffer, so a batch must fit in ``local_buffer_size``; writes are also split so that no
    call carries more than ``max_batch_bytes``; a read must also finish within the
    master's lease, ``--default_kv_lease_ttl``, or it fails with -707 LEASE_EXPIRED), also
    for the zero-copy ``put_from`` and ``get_into``; ``key_batch``: keys per call that
    moves only headers or no values (``get_prefix``, ``exists``, ``delete``). ``force_remove``:
    removes (``delete``, ``purge``) skip the read lease (default True; see the module's doc). ``busy_retries``,
    ``busy_wait``: a write refused because readers hold the object (-714, -706, -708) is
    retried this many times, ``busy_wait`` seconds apart, then reported as not stored.
    ``read_streams``: ``get_prefix`` (the lookup) splits its ranged header reads into up
    to this many concurrent calls of at least 64 keys (the TCP transport moves one call's
    ranges one after another; see ``get_prefix``).

    Thread-safe: the client is, and each thread has its own registered scratch memory
    for headers.
    """

    def __init__(self, client: Any, *, batch: int = 128, key_batch: int = 4096, force_remove: bool = True,
                 busy_retries: int = 20, busy_wait: float = 0.005,
                 max_batch_bytes: int = 64 << 20, read_streams: int = 8) -> None:
        if batch < 1 or key_batch < 1:
            raise ValueError(f"batch is {batch} and key_batch {key_batch}, both must be at least 1")
        if read_streams < 1:
            raise ValueError(f"read_streams is {read_streams}, must be at least 1")
        if max_batch_bytes < 1:
            raise ValueError(f"max_batch_bytes is {max_batch_bytes}, must be at least 1")
        self.client = client
        self.batch = batch
        self.key_batch = key_batch
        self.force_remove = force_remove
        self.busy_retries = busy_retries
        self.busy_wait = busy_wait
        self.max_batch_bytes = max_batch_bytes
        self.read_streams = read_streams
        self._executor: Any = None
        self.last_code = OK  # the last negative code a call met (for diagnostics)
        self._local = threading.local()
        self._regions: List[_Region] = []
        self._lock = threading.Lock()

    @classmethod
    def connect(cls, master_server_addr: str, metadata_server: str = "P2PHANDSHAKE", *,
                local_hostname: str = "127.0.0.1", global_segment_size: int = 256 << 20,
                local_buffer_size: int = 256 << 20, protocol: str = "tcp", rdma_devices: str = "",
                **options: Any) -> "MooncakeStore":
        """A store over a new client: ``MooncakeDistributedStore().setup(local_hostname,
        metadata_server, global_segment_size, local_buffer_size, protocol, rdma_devices,
        master_server_addr)``. ``global_segment_size`` is the memory this process lends
        the store (0: none; its objects then live in other processes); ``options`` go to
        the store's constructor. ``close()`` tears the client down."""
        try:
            from mooncake.store import MooncakeDistributedStore  # type: ignore
        except ImportError as e:
            raise ImportError("MooncakeStore.connect needs Mooncake's Python package (mooncake.store): "
                              "build it with scripts/mooncake.sh build and put MOONCAKE_PYTHONPATH from "
                              f"'scripts/mooncake.sh env' on PYTHONPATH ({e})") from e
        client = MooncakeDistributedStore()
        rc = client.setup(local_hostname, metadata_server, global_segment_size, local_buffer_size, protocol,
                          rdma_devices, master_server_addr)
        if rc != OK:
            raise StoreError("connection", f"setup with master {master_server_addr} and metadata "
                             f"{metadata_server} returned {_name(rc)}")
        options.setdefault("max_batch_bytes", max(1, local_buffer_size // 2))
        store = cls(client, **options)
        store._owns_client = True
        return store

    _owns_client = False

    def close(self) -> None:
        """Unregisters the store's memory and, for a store made by ``connect``, closes the client."""
        with self._lock:
            regions, self._regions = self._regions, []
            executor, self._executor = self._executor, None
        if executor is not None:
            executor.shutdown(wait=True)
        for r in regions:
            r.close()
        if self._owns_client:
            self._owns_client = False
            self.client.close()

    def __enter__(self) -> "MooncakeStore":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- plumbing

    def _call(self, what: str, f: Any, *args: Any) -> Any:
        try:
            return f(*args)
        except StoreError:
            raise
        except (RuntimeError, OSError, TypeError, ValueError) as e:
            raise StoreError("other", f"mooncake {what}: {type(e).__name__}: {e}") from e

    def _codes(self, what: str, replies: Any, n: int) -> List[int]:
        if isinstance(replies, int):  # some calls answer one code for the whole batch
            replies = [replies] * n
        out = list(replies)
        if len(out) != n or not all(isinstance(c, int) for c in out):
            raise StoreError("protocol", f"mooncake {what}: {len(out)} replies for {n} keys")
        return out

    def _fail(self, what: str, code: int, n: int = 1) -> StoreError:
        self.last_code = code
        return StoreError(code_kind(code), f"mooncake {what}: {_name(code)}" + (f" for {n} keys" if n > 1 else ""))

    def _chunks(self, n: int, size: int = 0) -> Iterator[Tuple[int, int]]:
        size = size or self.batch
        for start in range(0, n, size):
            yield start, min(n, start + size)

    def register(self, buffer: Any = None, size: int = 0, *, already: bool = False) -> "_Region":
        """Registers memory with the client for zero-copy transfers: ``buffer`` (writable,
        C-contiguous: a numpy array, a bytearray, an mmap), or ``size`` new bytes. The
        store keeps it registered until ``close``. ``already``: the engine registered it
        (``register_buffer``) itself; the store only uses it."""
        region = _Region(self, size if buffer is None else memoryview(buffer).nbytes, buffer, not already)
        with self._lock:
            self._regions.append(region)
        return region

    def _scratch(self, size: int) -> _Region:
        """This thread's registered scratch memory, at least ``size`` bytes."""
        r: Optional[_Region] = getattr(self._local, "scratch", None)
        if r is None or r.size < size or not r.registered:
            if r is not None:
                r.close()
            r = self.register(size=max(size, 1 << 20))
            self._local.scratch = r
        return r

    # -- the Store protocol

    def get(self, keys: Sequence[str]) -> List[Optional[bytes]]:
        """``get_batch`` per ``batch`` keys; an empty read is checked with ``batch_is_exist``:
        absent is a miss, present is read once more (a write may have been completing)
        and stays a miss when still empty, and a negative code is a ``StoreError``."""
        keys = list(keys)
        out: List[Optional[bytes]] = []
        for a, b in self._chunks(len(keys)):
            chunk = keys[a:b]
            values = list(self._call("get_batch", self.client.get_batch, chunk))
            if len(values) != len(chunk):  # the client answers [b""] when the whole call failed
                raise StoreError("connection" if not any(values) else "protocol",
                                 f"mooncake get_batch: {len(values)} replies for {len(chunk)} keys")
            empty = [i for i, v in enumerate(values) if not v]
            if empty:
                found = self._codes("batch_is_exist", self._call("batch_is_exist", self.client.batch_is_exist,
                                                                 [chunk[i] for i in empty]), len(empty))
                bad = [c for c in found if c < 0 and c not in _MISS]
                if bad:
                    raise self._fail("batch_is_exist", bad[0], len(bad))
                again = [i for i, c in zip(empty, found) if c == 1]
                if again:
                    retry = list(self._call("get_batch", self.client.get_batch, [chunk[i] for i in again]))
                    if len(retry) == len(again):
                        for i, v in zip(again, retry):
                            values[i] = v
            out.extend(v if v else None for v in values)  # bytes already: no copy
        return out

    def get_prefix(self, keys: Sequence[str], length: int) -> List[Optional[bytes]]:
        """The first ``length`` bytes of each value: one ``batch_get_session_start`` per
        ``key_batch`` keys (the replicas, in one master round trip), then
        ``batch_get_into_multi_buffer_ranges`` reading ``[0, length)`` of each into this
        thread's registered scratch memory, split into ``read_streams`` concurrent calls
        (Mooncake's TCP transport moves the ranges of one call one after another), then
        ``batch_get_session_end``. A value shorter than ``length``, or a key whose session
        another thread ended, is read whole with ``get``."""
        if length < 1:
            raise ValueError(f"get_prefix: length is {length}, must be at least 1")
        keys = list(keys)
        out: List[Optional[bytes]] = [None] * len(keys)
        for a, b in self._chunks(len(keys), self.key_batch):
            chunk = keys[a:b]
            started = self._codes("batch_get_session_start", self._call(
                "batch_get_session_start", self.client.batch_get_session_start, chunk), len(chunk))
            try:
                bad = [c for c in started if c < 0 and c not in _MISS and c != -702]
                if bad and len(bad) == len(chunk):
                    raise self._fail("batch_get_session_start", bad[0], len(bad))
                live = [i for i, c in enumerate(started) if c == OK]
                whole = [i for i, c in enumerate(started) if c < 0 and c not in _MISS]
                if live:
                    scratch = self._scratch(length * len(live))
                    got = self._ranges([chunk[i] for i in live], scratch.address, length)
                    for n, (i, c) in enumerate(zip(live, got)):
                        if c == length:
                            out[a + i] = bytes(scratch.view[n * length:(n + 1) * length])
                        elif c in _MISS:
                            pass
                        else:  # shorter than length, a session ended by another thread, a failed transfer
                            whole.append(i)
            finally:
                self._call("batch_get_session_end", self.client.batch_get_session_end, chunk)
            if whole:
                whole.sort()
                for i, v in zip(whole, self.get([chunk[i] for i in whole])):
                    out[a + i] = v
        return out

    def _ranges(self, keys: List[str], address: int, length: int) -> List[int]:
        """``[0, length)`` of each key (its session started) into ``address + n * length``:
        ``batch_get_into_multi_buffer_ranges``, split into up to ``read_streams`` calls
        of at least ``_MIN_STREAM`` keys that run at once. Mooncake's TCP transport moves
        the ranges of one call one after another (one request and reply each), so one call
        pays every round trip in turn; concurrent calls overlap them."""
        n = len(keys)
        streams = max(1, min(self.read_streams, n // _MIN_STREAM))

        def read(a: int, b: int) -> List[int]:
            return self._codes("batch_get_into_multi_buffer_ranges", self._call(
                "batch_get_into_multi_buffer_ranges", self.client.batch_get_into_multi_buffer_ranges,
                keys[a:b], [[address + i * length] for i in range(a, b)], [[length]] * (b - a),
                [[0]] * (b - a)), b - a)

        if streams == 1:
            return read(0, n)
        step = -(-n // streams)
        parts = [self._pool().submit(read, a, min(n, a + step)) for a in range(step, n, step)]
        out = read(0, min(n, step))  # the first part in this thread
        for f in parts:
            out.extend(f.result())
        return out

    def _pool(self) -> Any:
        with self._lock:
            if self._executor is None:
                from concurrent.futures import ThreadPoolExecutor
                self._executor = ThreadPoolExecutor(max(1, self.read_streams - 1),
                                                    thread_name_prefix="kvkey-mooncake-read")
            return self._executor

    def _write(self, what: str, keys: List[str], write: Any) -> List[int]:
        """Runs ``write(indices) -> codes`` and retries the keys refused as busy."""
        codes = [OK] * len(keys)
        todo = list(range(len(keys)))
        for attempt in range(self.busy_retries + 1):
            got = self._codes(what, write(todo), len(todo))
            for i, c in zip(todo, got):
                codes[i] = c
            todo = [i for i, c in zip(todo, got) if c in _BUSY]
            if not todo:
                break
            time.sleep(self.busy_wait * (attempt + 1))
        failed = [c for c in codes if c != OK]
        if failed:
            self.last_code = failed[0]
            hard = [c for c in failed if code_kind(c) != "server"]
            if len(hard) == len(keys):  # nothing stored, for want of the store: an error
                raise self._fail(what, hard[0], len(hard))
        return codes

    def put(self, keys: Sequence[str], values: Sequence[Any]) -> List[bool]:
        """``upsert_batch`` (``put`` would keep an older value) per ``batch`` keys and at
        most ``max_batch_bytes``; when a batch is refused, each key of it with ``upsert``,
        so each reports its own code. An empty value is never stored (Mooncake refuses
        it). One bool per key."""
        keys = list(keys)
        views = [memoryview(v).cast("B") if memoryview(v).format != "B" else memoryview(v) for v in values]
        if len(keys) != len(views):
            raise ValueError(f"put: {len(keys)} keys but {len(views)} values")
        done = [False] * len(keys)
        todo = [i for i, v in enumerate(views) if v.nbytes > 0]
        start = 0
        while start < len(todo):
            end, size = start, 0
            while end < len(todo) and end - start < self.batch and \
                    (end == start or size + views[todo[end]].nbytes <= self.max_batch_bytes):
                size += views[todo[end]].nbytes
                end += 1
            part = todo[start:end]
            start = end
            rc = self._call("upsert_batch", self.client.upsert_batch, [keys[i] for i in part],
                            [views[i] for i in part])
            if rc == OK:
                for i in part:
                    done[i] = True
                continue
            codes = self._write("upsert", [keys[i] for i in part], lambda idx, p=part: [
                self._call("upsert", self.client.upsert, keys[p[j]], views[p[j]]) for j in idx])
            for i, c in zip(part, codes):
                done[i] = c == OK
        return done

    def put_from(self, keys: Sequence[str], addresses: Sequence[int], sizes: Sequence[int]) -> List[bool]:
        """Zero-copy writes: ``batch_upsert_from`` of ``sizes[i]`` bytes at ``addresses[i]``
        (inside memory registered with ``register``) under ``keys[i]``; busy keys retried."""
        keys, addresses, sizes = list(keys), list(addresses), list(sizes)
        if not len(keys) == len(addresses) == len(sizes):
            raise ValueError(f"put_from: {len(keys)} keys, {len(addresses)} addresses, {len(sizes)} sizes")
        done: List[bool] = []
        for a, b in self._chunks(len(keys)):
            k, p, s = keys[a:b], addresses[a:b], sizes[a:b]
            codes = self._write("batch_upsert_from", k, lambda idx, k=k, p=p, s=s: self._call(
                "batch_upsert_from", self.client.batch_upsert_from, [k[i] for i in idx], [p[i] for i in idx],
                [s[i] for i in idx]))
            done.extend(c == OK for c in codes)
        return done

    def get_into_registered(self, keys: Sequence[str], addresses: Sequence[int],
                            sizes: Sequence[int]) -> List[int]:
        """Zero-copy reads: ``batch_get_into`` of each value into ``sizes[i]`` bytes at
        ``addresses[i]`` (registered memory). Per key the value's size, or a negative
        Mooncake code (``NOT_FOUND``; ``INVALID_PARAMS`` when the value is larger than its
        buffer). Bytes may have been written into a buffer whose code is negative. Raises
        ``StoreError`` when every key of a batch failed for want of the store."""
        out: List[int] = []
        with contextlib.closing(self.get_into_batches(keys, addresses, sizes)) as batches:
            for _, _, got in batches:
                out.extend(got)
        return out

    def get_into_batches(self, keys: Sequence[str], addresses: Sequence[int],
                         sizes: Sequence[int]) -> Generator[Tuple[int, int, List[int]], None, None]:
        """``get_into_registered`` one ``batch`` at a time: yields ``(start, end, codes)``
        for ``keys[start:end]`` as each batch lands, while the next batch is already being
        read (in the store's read thread), so the caller's work on one batch (verifying
        it) overlaps the transfer of the next. Every read has finished when the generator
        is exhausted or closed (use ``contextlib.closing``): nothing is written into the
        buffers afterwards."""
        keys, addresses, sizes = list(keys), list(addresses), list(sizes)
        if not len(keys) == len(addresses) == len(sizes):
            raise ValueError(f"get_into: {len(keys)} keys, {len(addresses)} addresses, {len(sizes)} sizes")

        def read(a: int, b: int) -> List[int]:  # each batch must finish within the read lease (-707)
            got = self._codes("batch_get_into", self._call(
                "batch_get_into", self.client.batch_get_into, keys[a:b], addresses[a:b], sizes[a:b]), b - a)
            hard = [c for c in got if c < 0 and c not in _MISS and code_kind(c) != "server"]
            if hard and len(hard) == len(got):
                raise self._fail("batch_get_into", hard[0], len(hard))
            return got

        spans = list(self._chunks(len(keys)))
        ahead: Any = None
        try:
            for j, (a, b) in enumerate(spans):
                got = read(a, b) if ahead is None else ahead.result()
                ahead = None
                if j + 1 < len(spans):
                    ahead = self._pool().submit(read, *spans[j + 1])
                yield a, b, got
        finally:
            if ahead is not None:  # the caller stopped early: let the read in flight finish
                try:
                    ahead.result()
                except Exception:  # noqa: BLE001 - the caller is leaving already; only the wait matters
                    pass

    def delete(self, keys: Sequence[str]) -> int:
        """``batch_remove`` (forced unless ``force_remove`` is False); how many existed."""
        keys = list(dict.fromkeys(keys))
        removed = 0
        for a, b in self._chunks(len(keys), self.key_batch):
            codes = self._codes("batch_remove", self._call("batch_remove", self.client.batch_remove, keys[a:b],
                                                           self.force_remove), b - a)
            bad = [c for c in codes if c < 0 and c not in _MISS]
            if bad:
                raise self._fail("batch_remove", bad[0], len(bad))
            removed += sum(1 for c in codes if c == OK)
        return removed

    def exists(self, keys: Sequence[str]) -> List[bool]:
        """``batch_is_exist``: 1 is True, 0 is False, a negative code is a ``StoreError``."""
        keys = list(keys)
        out: List[bool] = []
        for a, b in self._chunks(len(keys), self.key_batch):
            codes = self._codes("batch_is_exist", self._call("batch_is_exist", self.client.batch_is_exist,
                                                             keys[a:b]), b - a)
            bad = [c for c in codes if c < 0]
            if bad:
                raise self._fail("batch_is_exist", bad[0], len(bad))
            out.extend(c == 1 for c in codes)
        return out

    def scan_prefix(self, prefix: str) -> Iterator[str]:
        raise NotImplementedError("a Mooncake client cannot list keys: purge a prefix with MooncakeStore.purge")

    def purge(self, prefix: str) -> int:
        """Removes every key that starts with ``prefix``: ``remove_by_regex("^" +
        regex_escape(prefix))``, forced unless ``force_remove`` is False. Returns the count."""
        if not prefix:
            raise ValueError("purge: the prefix is empty (it would remove every key in the store)")
        n = self._call("remove_by_regex", self.client.remove_by_regex, "^" + regex_escape(prefix), self.force_remove)
        if not isinstance(n, int):
            raise StoreError("protocol", f"mooncake remove_by_regex answered {type(n).__name__}")
        if n < 0:
            raise self._fail("remove_by_regex", n)
        return n

    def __repr__(self) -> str:
        return f"MooncakeStore(batch={self.batch}, key_batch={self.key_batch}, force_remove={self.force_remove})"


class Slots:
    """Registered memory for the zero-copy path: ``count`` slots of ``1024 +
    payload_size`` bytes, each the stored value of one block (header, then payload).

    The engine writes a block's KV into ``payload(i)`` before ``save_from`` and reads it
    from ``payload(i)`` after a ``load_into`` whose result for the block is ``loaded``. A
    slot whose result is not ``loaded`` may hold bytes that were rejected, in its header
    and in its payload: its contents must not be used. ``buffer``: the engine's own
    memory to use (writable, C-contiguous, at least ``count * stride`` bytes), else new
    page-aligned memory; ``registered``: the engine has registered ``buffer`` with the
    client already (``register_buffer``), so the slots do not register it again."""

    def __init__(self, store: MooncakeStore, count: int, payload_size: int, buffer: Any = None, *,
                 registered: bool = False) -> None:
        if count < 1 or payload_size < 1:
            raise InputError(f"[kvkey.input_error] Slots: count {count} and payload_size {payload_size} "
                             "must be at least 1")
        self.store = store
        self.count = count
        self.payload_size = payload_size
        self.stride = _HEADER + payload_size
        if buffer is not None:
            if memoryview(buffer).nbytes < count * self.stride:
                raise InputError(f"[kvkey.input_error] Slots: the buffer has {memoryview(buffer).nbytes} bytes, "
                                 f"{count} slots of {self.stride} need {count * self.stride}")
            self.region = store.register(buffer, already=registered)
        else:
            self.region = store.register(size=count * self.stride)
        self.view = self.region.view

    def _check(self, i: int) -> int:
        if not 0 <= i < self.count:
            raise InputError(f"[kvkey.input_error] slot {i} is out of range [0, {self.count})")
        return i * self.stride

    def address(self, i: int) -> int:
        return self.region.address + self._check(i)

    def header(self, i: int) -> memoryview:
        at = self._check(i)
        return self.view[at:at + _HEADER]

    def payload(self, i: int) -> memoryview:
        at = self._check(i) + _HEADER
        return self.view[at:at + self.payload_size]

    def value(self, i: int) -> memoryview:
        at = self._check(i)
        return self.view[at:at + self.stride]


class MooncakeConnector(Connector):
    """A ``kvkey.Connector`` over a ``MooncakeStore`` with the zero-copy path:
    ``save_from`` and ``load_into`` with ``Slots``. Everything else is the Connector's."""

    def __init__(self, store: MooncakeStore, ns: Any, **options: Any) -> None:
        if not isinstance(store, MooncakeStore):
            raise TypeError(f"MooncakeConnector: store is a {type(store).__name__}, expected MooncakeStore")
        super().__init__(store, ns, **options)
        self.store: MooncakeStore = store

    def with_epoch(self, epoch: int) -> "MooncakeConnector":
        return MooncakeConnector(self.store, [r.with_epoch(epoch) for r in self.ranks], metrics=self.metrics,
                                 payload_size=self._payload_size, raise_errors=self.raise_errors,
                                 lookup_batch=self.lookup_batch, log=self.log, log_interval=self.log_interval)

    # The zero-copy calls run in Python, beside the connector's core: they keep their own
    # last store error and record into the same metrics.
    zero_copy_error: Optional[StoreError] = None

    def _namespace(self, rank: int) -> KeyNamespace:
        r = self._rank(rank)
        if r >= len(self.ranks):
            raise InputError(f"[kvkey.input_error] rank is {r!r}, must lie in [0, {len(self.ranks)})")
        return self.ranks[r]

    def _store_error(self, e: StoreError) -> None:
        self.zero_copy_error = e
        if self.metrics is not None:
            self.metrics.record_store_error(e.kind)
        if self.raise_errors:
            raise e

    def _record_load(self, hashes: List[bytes], payloads: Sequence[Optional[Any]],
                     verdicts: Sequence[Optional[Verdict]]) -> None:
        if self.metrics is None:
            return
        rejected = [v for p, v in zip(payloads, verdicts) if p is None and v is not None]
        loaded = sum(1 for p in payloads if p is not None)
        self.metrics.record_load(loaded, len(hashes) - loaded - len(rejected), len(rejected))
        for v in rejected:
            self.metrics.record_rejection(v)
        nbytes = sum(len(p) for p in payloads if p is not None)
        if nbytes:
            self.metrics.record_payload_bytes(nbytes)

    def _slot_indices(self, hashes: List[bytes], slots: Slots, indices: Optional[Sequence[int]]) -> List[int]:
        idx = list(range(len(hashes))) if indices is None else [int(i) for i in indices]
        if len(idx) != len(hashes):
            raise InputError(f"[kvkey.input_error] {len(hashes)} block hashes but {len(idx)} slot indices")
        if len(set(idx)) != len(idx):
            raise InputError("[kvkey.input_error] a slot is given twice")
        for i in idx:
            slots._check(i)
        if self.payload_size is not None and self.payload_size != slots.payload_size:
            raise InputError(f"[kvkey.input_error] the slots hold {slots.payload_size}-byte payloads, this "
                             f"deployment's blocks have {self.payload_size}")
        return idx

    def save_from(self, block_hashes: Sequence[bytes], slots: Slots, indices: Optional[Sequence[int]] = None, *,
                  rank: int = 0) -> int:
        """Seals each block's header into its slot (``ns.seal(h, slots.payload(i))``) and
        writes the slots with one ``batch_upsert_from`` per batch: no copy of the payload.
        Block ``n`` is in slot ``indices[n]`` (default ``n``). Returns how many were stored."""
        ns = self._namespace(rank)
        hashes = list(block_hashes)
        idx = self._slot_indices(hashes, slots, indices)
        for h, i in zip(hashes, idx):
            slots.header(i)[:] = ns.seal(h, slots.payload(i))
        keys = [ns.store_key(h) for h in hashes]
        try:
            stored = self.store.put_from(keys, [slots.address(i) for i in idx], [slots.stride] * len(idx))
        except StoreError as e:
            if self.metrics is not None:
                self.metrics.record_save(0, len(keys))
            self._store_error(e)
            return 0
        saved = sum(1 for s in stored if s)
        if self.metrics is not None:
            self.metrics.record_save(saved, len(keys) - saved)
        return saved

    def load_into(self, block_hashes: Sequence[bytes], buffers: Any, *, rank: int = 0,
                  indices: Optional[Sequence[int]] = None) -> List[BlockResult]:
        """With ``Slots``: reads each block's value into its slot (one ``batch_get_into``
        per batch, no copy) and verifies it there; a block is ``loaded`` only when its
        header and payload verify, its payload is then ``slots.payload(i)``. A slot whose
        result is ``missing`` or ``rejected`` may hold the rejected bytes: never use it.
        With any other buffers: ``Connector.load_into`` (verified copies; a buffer is
        left untouched unless its block is loaded)."""
        if not isinstance(buffers, Slots):
            if indices is not None:
                raise InputError("[kvkey.input_error] load_into: indices are for Slots only")
            return super().load_into(block_hashes, buffers, rank=rank)
        slots = buffers
        ns = self._namespace(rank)
        hashes = list(block_hashes)
        idx = self._slot_indices(hashes, slots, indices)
        keys = [ns.store_key(h) for h in hashes]
        n = len(hashes)
        payloads: List[Optional[memoryview]] = [None] * n
        verdicts: List[Optional[Verdict]] = [None] * n
        whole: List[int] = []  # read whole, to name why the value did not fit or could not be read
        try:  # each batch is verified while the next one is read
            with contextlib.closing(self.store.get_into_batches(keys, [slots.address(i) for i in idx],
                                                                [slots.stride] * n)) as batches:
                for start, end, sizes in batches:
                    for b, got in zip(range(start, end), sizes):
                        if got in _MISS:
                            continue
                        if got < 0:
                            whole.append(b)
                            continue
                        verdicts[b], payloads[b] = self._verify_slot(ns, hashes[b], slots, idx[b], got)
        except StoreError as e:
            payloads, verdicts = [None] * n, [None] * n
            self._record_load(hashes, payloads, verdicts)
            self._store_error(e)
            return [BlockResult("missing")] * n
        if whole:
            try:
                values = self.store.get([keys[b] for b in whole])
            except StoreError as e:
                self._store_error(e)
                values = [None] * len(whole)
            for b, v in zip(whole, values):
                if v is not None:
                    verdicts[b] = _size_checked(ns, v, hashes[b], slots.payload_size)
        results = []
        for b in range(n):
            if payloads[b] is not None:
                results.append(BlockResult("loaded", verdicts[b], slots.payload_size))
            elif verdicts[b] is not None:
                results.append(BlockResult("rejected", verdicts[b]))
            else:
                results.append(BlockResult("missing"))
        self._record_load(hashes, payloads, verdicts)
        return results

    @staticmethod
    def _verify_slot(ns: KeyNamespace, h: bytes, slots: Slots, i: int,
                     got: int) -> Tuple[Verdict, Optional[memoryview]]:
        """The verdict on the ``got`` bytes just read into slot ``i``, and the payload view
        when it verifies with exactly the slot's payload size."""
        value = slots.value(i)[:got]
        if got < _HEADER:
            return ns.verify_header(value, h), None
        header = value[:_HEADER]
        if got != slots.stride:
            verdict = ns.verify(header, h, value[_HEADER:])
            if verdict.ok:  # a verified value of another size than this deployment's blocks
                verdict = ns.verify(header, h, slots.payload_size)
            return verdict, None
        verdict = ns.verify(header, h, slots.payload(i))
        return verdict, (slots.payload(i) if verdict.ok else None)


def _size_checked(ns: KeyNamespace, value: bytes, h: bytes, payload_size: int) -> Optional[Verdict]:
    """Why a value that could not be read into a slot of ``payload_size`` bytes is not
    this block's: its verdict, or ``size_mismatch`` when it verifies with another size;
    None (a miss) when it verifies with the slot's size (the read itself failed)."""
    verdict = ns.open_value(value, h).verdict
    if verdict.ok:
        if len(value) - _HEADER == payload_size:
            return None
        verdict = ns.verify(memoryview(value)[:_HEADER], h, payload_size)
    return verdict


def spawn_holder(master_server_addr: str, metadata_server: str = "P2PHANDSHAKE", *,
                 segment: int = 256 << 20, timeout: float = 60.0) -> Any:
    """Starts ``python3 -m kvkey.stores.mooncake hold`` (a process that lends ``segment``
    bytes to the store; its objects live there) and returns its ``subprocess.Popen`` once
    it is ready. Stop it with ``proc.stdin.close(); proc.wait()``, or kill it to play a
    crashed engine."""
    import subprocess
    import sys

    proc = subprocess.Popen([sys.executable, "-m", "kvkey.stores.mooncake", "hold", "--master", master_server_addr,
                             "--metadata", metadata_server, "--segment", str(segment)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    ready = threading.Event()
    line: List[str] = []

    def read() -> None:
        assert proc.stdout is not None
        line.append(proc.stdout.readline())
        ready.set()

    threading.Thread(target=read, daemon=True).start()
    if not ready.wait(timeout) or line[0].strip() != "ready":
        proc.kill()
        proc.wait()
        raise StoreError("connection", f"the memory-holding client did not start (exit {proc.returncode}, "
                         f"said {line[0].strip() if line else 'nothing'!r})")
    return proc


def _hold(argv: Optional[Sequence[str]] = None) -> int:
    """``python3 -m kvkey.stores.mooncake hold --master HOST:PORT [--metadata URL]
    [--segment BYTES]``: a client that lends ``--segment`` bytes of memory to the store and
    holds them until its standard input closes or it is terminated; it prints ``ready``
    once set up. Tests, examples and benchmarks use it as the memory-holding process."""
    import argparse
    import signal
    import sys

    p = argparse.ArgumentParser(prog="python3 -m kvkey.stores.mooncake")
    p.add_argument("command", choices=["hold"])
    p.add_argument("--master", required=True, help="the master's HOST:PORT")
    p.add_argument("--metadata", default="P2PHANDSHAKE", help="the metadata server's URL")
    p.add_argument("--segment", type=int, default=256 << 20, help="bytes of memory to lend the store")
    p.add_argument("--hostname", default="127.0.0.1")
    args = p.parse_args(argv)
    store = MooncakeStore.connect(args.master, args.metadata, local_hostname=args.hostname,
                                  global_segment_size=args.segment, local_buffer_size=16 << 20)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    print("ready", flush=True)
    try:
        sys.stdin.read()  # until the parent closes it (or dies)
    finally:
        store.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(_hold())
