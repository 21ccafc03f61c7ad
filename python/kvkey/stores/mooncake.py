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
- Registered memory (the zero-copy capability of the store protocol, which
  ``kvkey.Connector.save_from`` / ``load_into`` with ``kvkey.Slots`` use): memory is
  registered with ``register_memory`` (``register_buffer``), values are written from it
  with ``put_from`` (``batch_upsert_from``) and read into it with ``get_into_registered``
  (``batch_get_into``); the connector seals and verifies them in place.
- A negative code fails its key alone (a ``Replies.errors`` entry of the code's kind),
  unless every key of the call failed for want of the store (a ``StoreError``).

Importing this module does not import ``mooncake``; ``MooncakeStore.connect`` does.
"""

from __future__ import annotations

import ctypes
import math
import mmap
import threading
import time
import weakref
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

from .protocol import Replies, StoreError, _KeyErrors

__all__ = ["CODES", "MooncakeStore", "code_kind", "regex_escape", "spawn_holder"]

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


def _unregister(client: Any, address: int) -> None:
    try:
        client.unregister_buffer(address)
    except Exception:  # noqa: BLE001 - a closed client has dropped it already
        pass


class _Region:
    """Memory registered with the client: ``size`` new page-aligned bytes (an anonymous
    mmap), or ``size`` bytes at ``address`` (the caller's). Unregistered by ``close()``, or
    when the region is collected (a store dropped without ``close()``), before its memory
    is freed: a later region at the same address is never refused as overlapping."""

    def __init__(self, store: "MooncakeStore", size: int, address: Optional[int] = None) -> None:
        self._mm: Optional[mmap.mmap] = None
        self._anchor: Any = None
        if address is None:
            self._mm = mmap.mmap(-1, size)
            self._anchor = (ctypes.c_char * size).from_buffer(self._mm)
            address = ctypes.addressof(self._anchor)
            self.view: Optional[memoryview] = memoryview(self._mm)
        else:
            self.view = None
        self.address, self.size = address, size
        rc = store._call("register_buffer", store.client.register_buffer, address, size)
        if rc != OK:
            raise StoreError(code_kind(rc), f"register_buffer of {size} bytes at {address:#x} returned {_name(rc)}")
        self._finalizer = weakref.finalize(self, _unregister, store.client, address)

    @property
    def registered(self) -> bool:
        return self._finalizer.alive

    def close(self) -> None:
        """Unregisters the memory (once; later calls do nothing)."""
        self._finalizer()


def _option_int(name: str, value: Any, least: int) -> int:
    """An integer option of at least ``least``: a bool, a float or a smaller value (``-1``
    meaning "never" by accident) is refused, naming the option."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"MooncakeStore: {name} must be an int, not {type(value).__name__}")
    if value < least:
        raise ValueError(f"MooncakeStore: {name} is {value}, must be at least {least}")
    return value


def _shutdown(holder: List[Any]) -> None:
    if holder and holder[0] is not None:
        holder[0].shutdown(wait=False)


class MooncakeStore(_KeyErrors):
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

    Options that would disable a behaviour by accident are refused: every count is an
    ``int`` of at least 1 (``busy_retries``: at least 0), ``busy_wait`` a finite number
    of seconds >= 0.

    Thread-safe: the client is, and each thread has its own registered scratch memory
    for headers. Memory the store registered is unregistered by ``close()``, or when the
    store is dropped without it.
    """

    def __init__(self, client: Any, *, batch: int = 128, key_batch: int = 4096, force_remove: bool = True,
                 busy_retries: int = 20, busy_wait: float = 0.005,
                 max_batch_bytes: int = 64 << 20, read_streams: int = 8) -> None:
        batch = _option_int("batch", batch, 1)
        key_batch = _option_int("key_batch", key_batch, 1)
        read_streams = _option_int("read_streams", read_streams, 1)
        max_batch_bytes = _option_int("max_batch_bytes", max_batch_bytes, 1)
        busy_retries = _option_int("busy_retries", busy_retries, 0)
        if isinstance(busy_wait, bool) or not isinstance(busy_wait, (int, float)) or not math.isfinite(busy_wait) \
                or busy_wait < 0:
            raise ValueError(f"MooncakeStore: busy_wait is {busy_wait!r}, must be a finite number of seconds >= 0")
        if not isinstance(force_remove, bool):
            raise TypeError(f"MooncakeStore: force_remove must be a bool, not {type(force_remove).__name__}")
        _KeyErrors.__init__(self)
        self.client = client
        self.batch = batch
        self.key_batch = key_batch
        self.force_remove = force_remove
        self.busy_retries = busy_retries
        self.busy_wait = busy_wait
        self.max_batch_bytes = max_batch_bytes
        self.read_streams = read_streams
        self._executor: List[Any] = [None]  # a list, so the finalizer can reach it without the store
        self.last_code = OK  # the last negative code a call met (for diagnostics)
        self._local = threading.local()
        self._regions: List[_Region] = []
        self._lock = threading.Lock()
        weakref.finalize(self, _shutdown, self._executor)

    @classmethod
    def connect(cls, master_server_addr: str, metadata_server: str = "P2PHANDSHAKE", *,
                local_hostname: str = "127.0.0.1", global_segment_size: int = 256 << 20,
                local_buffer_size: int = 256 << 20, protocol: str = "tcp", rdma_devices: str = "",
                **options: Any) -> "MooncakeStore":
        """A store over a new client: ``MooncakeDistributedStore().setup(local_hostname,
        metadata_server, global_segment_size, local_buffer_size, protocol, rdma_devices,
        master_server_addr)``. ``global_segment_size`` is the memory this process lends
        the store (0: none; its objects then live in other processes); ``options`` go to
        the store's constructor. ``close()`` tears the client down. A negative size (``-1``
        meaning "unlimited" by accident) is refused before anything connects."""
        global_segment_size = _option_int("global_segment_size", global_segment_size, 0)
        local_buffer_size = _option_int("local_buffer_size", local_buffer_size, 0)
        try:
            from mooncake.store import MooncakeDistributedStore  # type: ignore
        except ImportError as e:
            raise ImportError("MooncakeStore.connect needs Mooncake's Python package (mooncake.store): "
                              "pip install mooncake-transfer-engine-non-cuda (kvkey's pinned version: "
                              f"scripts/mooncake.sh install, into ~/.cache/kvkey/venv) ({e})") from e
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
            executor, self._executor[0] = self._executor[0], None
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

    def register_memory(self, address: int, size: int) -> _Region:
        """Registers ``size`` bytes at ``address`` with the client (``register_buffer``) for
        zero-copy transfers (``put_from``, ``get_into_registered``): the store protocol's
        registered memory, which ``kvkey.Slots`` calls. The result's ``close()``
        unregisters it; ``close()`` of the store unregisters everything still registered."""
        region = _Region(self, _option_int("size", size, 1), _option_int("address", address, 1))
        with self._lock:
            self._regions = [r for r in self._regions if r.registered]
            self._regions.append(region)
        return region

    def _scratch(self, size: int) -> _Region:
        """This thread's registered scratch memory, at least ``size`` bytes."""
        r: Optional[_Region] = getattr(self._local, "scratch", None)
        if r is None or r.size < size or not r.registered:
            if r is not None:
                r.close()
            r = _Region(self, max(size, 1 << 20))
            with self._lock:
                self._regions = [x for x in self._regions if x.registered]
                self._regions.append(r)
            self._local.scratch = r
        return r

    # -- the Store protocol

    def get(self, keys: Sequence[str]) -> List[Optional[bytes]]:
        """``get_batch`` per ``batch`` keys; an empty read is checked with ``batch_is_exist``:
        absent is a miss, present is read once more (a write may have been completing)
        and stays a miss when still empty, and a negative code fails that key alone (a
        ``Replies.errors`` entry), or the call when every key of it failed for want of the
        store."""
        keys = list(keys)
        out: List[Optional[bytes]] = []
        errors: Dict[int, StoreError] = {}
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
                self._key_codes("batch_is_exist", a, empty, found, len(chunk), errors)
                again = [i for i, c in zip(empty, found) if c == 1]
                if again:
                    retry = list(self._call("get_batch", self.client.get_batch, [chunk[i] for i in again]))
                    if len(retry) == len(again):
                        for i, v in zip(again, retry):
                            values[i] = v
            out.extend(v if v else None for v in values)  # bytes already: no copy
        return self._replies(out, errors)

    def _key_codes(self, what: str, base: int, positions: Sequence[int], codes: Sequence[int], n: int,
                   errors: Dict[int, StoreError]) -> None:
        """Each error code of ``codes`` (for keys ``base + positions[j]`` of a call of ``n``
        keys) fails its key alone, in ``errors``; when every key of the call failed for want
        of the store (not a refusal, ``server``), the call fails: ``StoreError``."""
        bad = [(i, c) for i, c in zip(positions, codes) if c < 0 and c not in _MISS]
        if not bad:
            return
        hard = [c for _, c in bad if code_kind(c) != "server"]
        if len(hard) == n:
            raise self._fail(what, hard[0], len(hard))
        self.last_code = bad[0][1]
        for i, c in bad:
            errors[base + i] = StoreError(code_kind(c), f"mooncake {what}: {_name(c)}")

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
        errors: Dict[int, StoreError] = {}
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
                    assert scratch.view is not None  # the store's own memory
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
                values = self.get([chunk[i] for i in whole])
                for i, v in zip(whole, values):
                    out[a + i] = v
                for j, e in getattr(values, "errors", {}).items():
                    errors[a + whole[j]] = e
        return Replies(out, errors)  # get counted the per-key errors already

    def _ranges(self, keys: List[str], address: int, length: int) -> List[int]:
        """``[0, length)`` of each key (its session started) into ``address + n * length``:
        ``batch_get_into_multi_buffer_ranges``, split into up to ``read_streams`` calls
        of at least ``_MIN_STREAM`` keys that run at once. Mooncake's TCP transport moves
        the ranges of one call one after another (one request and reply each), so one call
        pays every round trip in turn; concurrent calls overlap them. Every call has
        finished when this returns or raises: nothing writes into the scratch memory after."""
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
        out: List[int] = []
        error: Optional[BaseException] = None
        try:
            out = read(0, min(n, step))  # the first part in this thread
        except BaseException as e:  # noqa: BLE001 - raised below, once every read has finished
            error = e
        for f in parts:  # wait for every read, failed or not, before the scratch is reused
            try:
                got = f.result()
            except BaseException as e:  # noqa: BLE001
                error = error or e
                continue
            out.extend(got)
        if error is not None:
            raise error
        return out

    def _pool(self) -> Any:
        with self._lock:
            if self._executor[0] is None:
                from concurrent.futures import ThreadPoolExecutor
                self._executor[0] = ThreadPoolExecutor(max(1, self.read_streams - 1),
                                                       thread_name_prefix="kvkey-mooncake-read")
            return self._executor[0]

    def _write(self, what: str, keys: List[str], write: Any) -> List[int]:
        """Runs ``write(indices) -> codes`` and retries the keys refused as busy
        (``busy_retries`` times); raises when every key failed for want of the store."""
        codes = [OK] * len(keys)
        todo = list(range(len(keys)))
        for attempt in range(self.busy_retries + 1):
            got = self._codes(what, write(todo), len(todo))
            for i, c in zip(todo, got):
                codes[i] = c
            todo = [i for i, c in zip(todo, got) if c in _BUSY]
            if not todo or attempt == self.busy_retries:
                break
            time.sleep(self.busy_wait * (attempt + 1))
        failed = [c for c in codes if c != OK]
        if failed:
            self.last_code = failed[0]
            hard = [c for c in failed if code_kind(c) != "server"]
            if len(hard) == len(keys):  # nothing stored, for want of the store: an error
                raise self._fail(what, hard[0], len(hard))
        return codes

    def _written(self, what: str, base: int, codes: Sequence[int], done: List[bool],
                 errors: Dict[int, StoreError]) -> None:
        """Per key of a write: stored, or failed with its code's kind (one store error each)."""
        for j, c in enumerate(codes):
            done[base + j] = c == OK
            if c != OK:
                errors[base + j] = StoreError(code_kind(c) if c < 0 else "protocol", f"mooncake {what}: {_name(c)}")

    def put(self, keys: Sequence[str], values: Sequence[Any]) -> List[bool]:
        """``upsert_batch`` (``put`` would keep an older value) per ``batch`` keys and at
        most ``max_batch_bytes``; when a batch is refused, each key of it with ``upsert``,
        so each reports its own code: a key that failed is a ``Replies.errors`` entry of its
        code's kind. An empty value is never stored (Mooncake refuses it), without an
        error. One bool per key."""
        keys = list(keys)
        views = [memoryview(v).cast("B") if memoryview(v).format != "B" else memoryview(v) for v in values]
        if len(keys) != len(views):
            raise ValueError(f"put: {len(keys)} keys but {len(views)} values")
        done = [False] * len(keys)
        errors: Dict[int, StoreError] = {}
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
                self._written("upsert", i, [c], done, errors)
        return self._replies(done, errors)

    def put_from(self, keys: Sequence[str], addresses: Sequence[int], sizes: Sequence[int]) -> List[bool]:
        """Zero-copy writes (registered memory): ``batch_upsert_from`` of ``sizes[i]`` bytes
        at ``addresses[i]`` (inside memory from ``register_memory``) under ``keys[i]``, per
        ``batch`` keys; busy keys retried. One bool per key; a key that failed is a
        ``Replies.errors`` entry of its code's kind."""
        keys, addresses, sizes = list(keys), list(addresses), list(sizes)
        if not len(keys) == len(addresses) == len(sizes):
            raise ValueError(f"put_from: {len(keys)} keys, {len(addresses)} addresses, {len(sizes)} sizes")
        done = [False] * len(keys)
        errors: Dict[int, StoreError] = {}
        for a, b in self._chunks(len(keys)):
            k, p, n = keys[a:b], addresses[a:b], sizes[a:b]
            codes = self._write("batch_upsert_from", k, lambda idx, k=k, p=p, n=n: self._call(
                "batch_upsert_from", self.client.batch_upsert_from, [k[i] for i in idx], [p[i] for i in idx],
                [n[i] for i in idx]))
            self._written("batch_upsert_from", a, codes, done, errors)
        return self._replies(done, errors)

    def get_into_registered(self, keys: Sequence[str], addresses: Sequence[int],
                            sizes: Sequence[int]) -> List[Optional[int]]:
        """Zero-copy reads (registered memory): ``batch_get_into`` of each value into
        ``sizes[i]`` bytes at ``addresses[i]``, per ``batch`` keys (each must finish within
        the read lease). Per key the value's size, or None (missing). A value larger than
        its memory (Mooncake refuses it, -600) is read whole and its first ``sizes[i]``
        bytes copied there: the answer is then its whole size, so the connector rejects it
        (``size_mismatch``). Any other negative code fails that key alone (a
        ``Replies.errors`` entry), or the call when every key failed for want of the store.
        Bytes may have been written into the memory of a key that is not served."""
        keys, addresses, sizes = list(keys), list(addresses), list(sizes)
        if not len(keys) == len(addresses) == len(sizes):
            raise ValueError(f"get_into: {len(keys)} keys, {len(addresses)} addresses, {len(sizes)} sizes")
        out: List[Optional[int]] = [None] * len(keys)
        errors: Dict[int, StoreError] = {}
        for a, b in self._chunks(len(keys)):
            got = self._codes("batch_get_into", self._call(
                "batch_get_into", self.client.batch_get_into, keys[a:b], addresses[a:b], sizes[a:b]), b - a)
            large: List[int] = []
            for j, c in enumerate(got):
                if c >= 0:
                    out[a + j] = c
                elif c == INVALID_PARAMS:
                    large.append(j)
            self._key_codes("batch_get_into", a, [j for j, c in enumerate(got) if c != INVALID_PARAMS],
                            [c for c in got if c != INVALID_PARAMS], b - a, errors)
            if large:
                whole = self.get([keys[a + j] for j in large])
                for j, v in zip(large, whole):
                    if j in getattr(whole, "errors", {}) or v is None:
                        continue
                    n = min(len(v), sizes[a + j])
                    ctypes.memmove(addresses[a + j], v, n)
                    out[a + j] = len(v)
                for k, e in getattr(whole, "errors", {}).items():
                    errors[a + large[k]] = e
        return self._replies(out, errors)

    def delete(self, keys: Sequence[str]) -> int:
        """``batch_remove`` (forced unless ``force_remove`` is False); how many existed. A
        negative code fails that key alone (counted in ``key_errors`` and
        ``last_key_error``); the call fails when every key failed."""
        keys = list(dict.fromkeys(keys))
        removed = 0
        failed: Dict[int, int] = {}  # key index -> its code
        for a, b in self._chunks(len(keys), self.key_batch):
            codes = self._codes("batch_remove", self._call("batch_remove", self.client.batch_remove, keys[a:b],
                                                           self.force_remove), b - a)
            failed.update((a + j, c) for j, c in enumerate(codes) if c < 0 and c not in _MISS)
            removed += sum(1 for c in codes if c == OK)
        if failed and len(failed) == len(keys):
            raise self._fail("batch_remove", failed[min(failed)], len(failed))
        if failed:
            self.last_code = failed[min(failed)]
        self._replies([], {i: StoreError(code_kind(c), f"mooncake batch_remove: {_name(c)}")
                           for i, c in failed.items()})
        return removed

    def exists(self, keys: Sequence[str]) -> List[bool]:
        """``batch_is_exist``: 1 is True, 0 is False; a negative code fails that key alone (a
        ``Replies.errors`` entry), or the call when every key failed for want of the store."""
        keys = list(keys)
        out: List[bool] = []
        errors: Dict[int, StoreError] = {}
        for a, b in self._chunks(len(keys), self.key_batch):
            codes = self._codes("batch_is_exist", self._call("batch_is_exist", self.client.batch_is_exist,
                                                             keys[a:b]), b - a)
            bad = [c for c in codes if c < 0 and c not in _MISS]
            if bad and len(bad) == b - a and all(code_kind(c) != "server" for c in bad):
                raise self._fail("batch_is_exist", bad[0], len(bad))
            for j, c in enumerate(codes):
                if c < 0 and c not in _MISS:
                    errors[a + j] = StoreError(code_kind(c), f"mooncake batch_is_exist: {_name(c)}")
            out.extend(c == 1 for c in codes)
        return self._replies(out, errors)

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
