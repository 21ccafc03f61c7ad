"""kvkey.stores.RedisStore: the Store protocol on one Redis node (redis-py), and what the
Redis stores share (the sync RedisClusterStore, kvkey.stores.redis_cluster; the async
RedisStore, kvkey.stores.aio): pipelines ended by an ``ECHO <nonce>`` sentinel, a deadline per
call, redis-py's errors as ``StoreError`` kinds, per-key error replies as ``Replies.errors``.

Importing this module does not import redis-py; a store's first use does.
"""

from __future__ import annotations

import importlib
import inspect
import secrets
import socket
import threading
import time
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple, TypeVar

from .protocol import Prefix, Replies, StoreError, _KeyErrors, glob_escape

__all__ = ["RedisStore"]

_T = TypeVar("_T")


def _redis_error_kind(e: BaseException) -> Optional[str]:
    """The StoreError kind of a redis-py exception (None: not a store error)."""
    rex: Any = importlib.import_module("redis.exceptions")  # only when a Redis store is used

    if isinstance(e, rex.TimeoutError):
        return "timeout"
    if isinstance(e, rex.ConnectionError):  # BusyLoadingError and AuthenticationError included
        return "server" if isinstance(e, rex.AuthenticationError) else "connection"
    if isinstance(e, rex.RedisClusterException):
        text = str(e)  # raised when no startup node answers and when no node is known for a slot
        return "connection" if "cannot be connected" in text or "No targets" in text else "other"
    if isinstance(e, (rex.InvalidResponse, rex.DataError)):
        return "protocol"
    if isinstance(e, ValueError):  # redis-py 4.3's parser on a damaged length: int(b"204\xb8")
        return "protocol"
    if isinstance(e, (rex.ResponseError, rex.ClusterError)):
        return "server"
    if isinstance(e, rex.RedisError):
        return "other"
    if isinstance(e, OSError):
        return "connection"
    return None


def _wire(key: str) -> Any:
    """A key as Redis holds it: scan_prefix lists a key that is not UTF-8 as a str with
    surrogate escapes, and it goes back to the server as the same bytes."""
    return key.encode("utf-8", "surrogateescape") if isinstance(key, str) else key


def _key_error(reply: Any, during: str, i: int, expected: str) -> StoreError:
    """The per-key failure of a reply that is not what its command answers: an error reply
    (redis-py returns a pipeline's error replies as exceptions when it does not raise them) or
    a reply of another type. The stream is in step (the sentinel checks that), so it is this
    key's alone."""
    if isinstance(reply, StoreError):  # a failure the store put in the key's place (a redirect not followed)
        return StoreError(reply.kind, f"{during} of key {i}: {str(reply).split('] ', 1)[-1]}")
    if isinstance(reply, BaseException):
        return StoreError(_redis_error_kind(reply) or "server", f"{during} of key {i}: {type(reply).__name__}: {reply}")
    return StoreError("protocol", f"{during} of key {i}: expected {expected}, got {type(reply).__name__}")


def _values(replies: List[Any], during: str) -> Tuple[List[Optional[bytes]], Dict[int, StoreError]]:
    """GET replies: bytes or None per key, and the keys that failed."""
    out: List[Optional[bytes]] = []
    errors: Dict[int, StoreError] = {}
    for i, r in enumerate(replies):
        if r is not None and not isinstance(r, bytes):
            errors[i] = _key_error(r, during, i, "bytes or nil")
            r = None
        out.append(r)
    return out, errors


def _prefixes(replies: List[Any]) -> Tuple[List[Optional[bytes]], Dict[int, StoreError]]:
    """GETRANGE and STRLEN replies, alternating, as a Prefix or None per key, and the keys
    that failed (a key of another type answers WRONGTYPE to both)."""
    out: List[Optional[bytes]] = []
    errors: Dict[int, StoreError] = {}
    for i, (data, size) in enumerate(zip(replies[0::2], replies[1::2])):
        if data is not None and not isinstance(data, bytes):
            errors[i] = _key_error(data, "get_prefix (GETRANGE)", i, "bytes")
        elif isinstance(size, BaseException) or not isinstance(size, int) or isinstance(size, bool):
            errors[i] = _key_error(size, "get_prefix (STRLEN)", i, "an integer")
        # GETRANGE answers "" and STRLEN 0 for a missing key: an empty value reads as missing too.
        out.append(Prefix(data, size) if i not in errors and data else None)
    return out, errors


def _stored(replies: List[Any]) -> Tuple[List[bool], Dict[int, StoreError]]:
    """SET replies: stored or not per key, and the keys that failed."""
    errors = {i: _key_error(r, "put", i, "OK") for i, r in enumerate(replies) if r is not True}
    return [r is True for r in replies], errors


def _flags(replies: List[Any], during: str) -> Tuple[List[bool], Dict[int, StoreError]]:
    """EXISTS / UNLINK replies (0 or 1): a bool per key, and the keys that failed."""
    ok = [isinstance(r, int) and not isinstance(r, bool) and r in (0, 1) for r in replies]
    errors = {i: _key_error(r, during, i, "0 or 1") for i, r in enumerate(replies) if not ok[i]}
    return [good and r == 1 for r, good in zip(replies, ok)], errors


# One command for a batch of headers: GETRANGE and STRLEN of every key, alternating. pcall:
# a key that fails (WRONGTYPE) answers its error in its place, and the other keys are read.
_PREFIX_SCRIPT = """
local out, last = {}, tonumber(ARGV[1]) - 1
for i, key in ipairs(KEYS) do
  out[2 * i - 1] = redis.pcall('GETRANGE', key, 0, last)
  out[2 * i] = redis.pcall('STRLEN', key)
end
return out
"""


class _HeldPool:
    """A connection pool as a pipeline sees it while the store holds its connection: the
    pipeline's release at the end of execute() leaves the connection to the store."""

    def __init__(self, pool: Any) -> None:
        self._pool = pool

    def release(self, connection: Any) -> None:
        pass

    def __getattr__(self, name: str) -> Any:
        return getattr(self._pool, name)


def _check_client(store: str, client: Any, cluster: bool) -> None:
    """Refuses a client the store cannot work with, saying why (ValueError, TypeError)."""
    rcluster: Any = importlib.import_module("redis.cluster")
    execute = getattr(client, "execute_command", None)
    if execute is None or not hasattr(client, "pipeline"):
        raise TypeError(f"{store}: the client is a {type(client).__name__}, expected a "
                        f"{'redis.cluster.RedisCluster' if cluster else 'redis.Redis'}")
    if inspect.iscoroutinefunction(execute):
        raise TypeError(f"{store}: the client is an asyncio client ({type(client).__module__}."
                        f"{type(client).__name__}); {store} needs a synchronous one")
    if cluster != isinstance(client, rcluster.RedisCluster):
        raise TypeError(f"{store}: the client is a {type(client).__name__}: use "
                        f"{'RedisClusterStore' if not cluster else 'RedisStore'} for it")
    encoder = client.get_encoder() if hasattr(client, "get_encoder") else None
    if getattr(encoder, "decode_responses", False):
        raise ValueError(f"{store}: the client decodes responses (decode_responses=True), but stored values "
                         "are bytes: create it with decode_responses=False (the default)")


class _Asking:
    """A pipeline as a command sees it after an ASK redirection: each command preceded by
    ``ASKING`` (which admits the next command only, on the importing node)."""

    def __init__(self, pipe: Any) -> None:
        self._pipe = pipe

    def execute_command(self, *args: Any) -> None:
        self._pipe.execute_command("ASKING")
        self._pipe.execute_command(*args)


class _RedisBase(_KeyErrors):
    """What RedisStore and RedisClusterStore share: the commands as pipelines of
    single-key commands, each pipeline ending with an ``ECHO <nonce>`` sentinel, a
    deadline per call, and the error handling."""

    _cluster = False  # True for RedisClusterStore (its client is a RedisCluster)

    def __init__(self, client: Any, batch: int, deadline: Optional[float] = None) -> None:
        super().__init__()
        if batch < 1:
            raise ValueError(f"batch is {batch}, must be at least 1")
        if deadline is not None and not deadline > 0:
            raise ValueError(f"deadline is {deadline!r}, must be positive seconds or None")
        _check_client(type(self).__name__, client, self._cluster)
        self.client = client
        self._batch = batch
        self.deadline = deadline
        self._local = threading.local()  # the deadline of this thread's call under way

    # Implemented by the subclasses.
    def _drop_connections(self) -> None:
        raise NotImplementedError

    def _pipeline(self) -> Any:
        return self.client.pipeline(transaction=False)

    def _call(self, during: str, run: Callable[[], _T]) -> _T:
        """Runs one store call; a redis-py error becomes a StoreError, and the
        connections that may be out of step are dropped (never reused)."""
        self._local.until = None if self.deadline is None else time.monotonic() + self.deadline
        try:
            return run()
        except StoreError:
            self._drop_connections()
            raise
        except Exception as e:
            kind = _redis_error_kind(e)
            if kind is None:
                raise
            self._drop_connections()
            raise StoreError(kind, f"{during}: {type(e).__name__}: {e}") from e

    def _each(self, during: str, items: Sequence[_T], command: Callable[[Any, _T], Any],
              per_item: int = 1) -> List[Any]:
        """``per_item`` commands per item, pipelined in batches; the replies in order."""

        def run() -> List[Any]:
            out: List[Any] = []
            for start in range(0, len(items), self._batch):
                out.extend(self._chunk(during, items[start:start + self._batch], command, per_item))
            return out

        return self._call(during, run) if items else []

    def _chunk(self, during: str, chunk: Sequence[_T], command: Callable[[Any, _T], Any],
               per_item: int) -> List[Any]:
        """One batch of ``_each``: one pipeline."""
        return self._pipelined(self._pipeline(), during, chunk, command, per_item)

    def _pipelined(self, pipe: Any, during: str, chunk: Sequence[_T], command: Callable[[Any, _T], Any],
                   per_item: int, asking: bool = False) -> List[Any]:
        """The commands of ``chunk`` in one pipeline; with ``asking``, each preceded by
        ``ASKING`` (a Redis Cluster's ASK redirection), whose replies are dropped."""
        for item in chunk:
            command(_Asking(pipe) if asking else pipe, item)
        replies = self._execute(pipe, during)
        sent = len(chunk) * per_item * (2 if asking else 1)
        if len(replies) != sent:
            raise StoreError("protocol", f"{during}: {len(replies)} replies to {sent} commands")
        if asking:
            if any(r is not True and r != b"OK" for r in replies[0::2]):
                bad = next(r for r in replies[0::2] if r is not True and r != b"OK")
                raise StoreError("protocol" if not isinstance(bad, BaseException) else "server",
                                 f"{during}: ASKING answered {bad!r}")
            replies = replies[1::2]
        return replies

    def _execute(self, pipe: Any, during: str) -> List[Any]:
        """Runs a pipeline of one node's connection, ended by ``ECHO <nonce>``, and checks
        that the last reply is the nonce (the stream is in step); with a deadline, shuts
        the connection's socket when the call's time is up, so a server that trickles its
        replies cannot hold the call (redis-py's socket_timeout bounds each read only)."""
        nonce = secrets.token_hex(16).encode()
        pipe.execute_command("ECHO", nonce)
        until = getattr(self._local, "until", None)
        expired = threading.Event()
        timer = None
        pool, in_step = pipe.connection_pool, False
        if until is not None and until - time.monotonic() <= 0:
            raise StoreError("timeout", f"{during}: the call passed its deadline of {self.deadline} s")
        # The store holds the connection, not the pipeline: it goes back to the pool only
        # once the call is known to be in step, else it is closed first, so no other
        # thread can take a connection out of step between the pipeline's release and
        # the store's check.
        conn = pool.get_connection("MULTI")
        pipe.connection = conn
        pipe.connection_pool = _HeldPool(pool)
        restore = self._reading(conn)
        if until is not None:
            left = max(0.0, until - time.monotonic())

            def expire() -> None:
                expired.set()
                sock = getattr(conn, "_sock", None)
                if sock is not None:
                    try:
                        sock.shutdown(socket.SHUT_RDWR)
                    except OSError:
                        pass

            timer = threading.Timer(left, expire)
            timer.daemon = True
            timer.start()
        try:
            try:
                # Error replies come back in place (one key's WRONGTYPE fails that key alone);
                # an error that breaks the stream (a ConnectionError) still raises.
                replies = list(pipe.execute(raise_on_error=False))
            except Exception as e:
                if expired.is_set():
                    raise StoreError("timeout", f"{during}: the call passed its deadline of {self.deadline} s") from e
                if _redis_error_kind(e) is None:
                    # redis-py's reply callbacks on a damaged reply, e.g. SCRIPT EXISTS answered
                    # ":1" instead of "*1": list(map(bool, 1)) is a TypeError. Nothing but reply
                    # parsing runs inside execute(), so it is the stream that is wrong.
                    raise StoreError("protocol", f"{during}: unreadable reply: {type(e).__name__}: {e}") from e
                raise
            finally:
                if timer is not None:
                    timer.cancel()
            if expired.is_set():  # done as it expired: the socket is shut, the call counts as late
                raise StoreError("timeout", f"{during}: the call passed its deadline of {self.deadline} s")
            if not replies or replies[-1] != nonce:
                raise StoreError("protocol", f"{during}: the reply stream is out of step (the last reply "
                                 "is not the sentinel's nonce)")
            replies.pop()
            in_step = True
            return replies
        finally:
            restore()
            if not in_step:
                conn.disconnect()  # never back to the pool open: it may be out of step
            pool.release(conn)

    def _reading(self, conn: Any) -> Callable[[], None]:
        """Prepares conn, held by this call alone, to read its replies; returns what
        puts it back as it was before it goes back to the pool (here: nothing to do)."""
        return lambda: None

    def get(self, keys: Sequence[str]) -> Replies:
        replies = self._each("get", keys, lambda p, k: p.execute_command("GET", _wire(k)))
        return self._replies(*_values(replies, "get"))

    def get_prefix(self, keys: Sequence[str], length: int) -> Replies:
        if length < 1:
            raise ValueError(f"get_prefix: length is {length}, must be at least 1")

        def both(p: Any, k: str) -> None:
            p.execute_command("GETRANGE", _wire(k), 0, length - 1)
            p.execute_command("STRLEN", _wire(k))

        return self._replies(*_prefixes(self._each("get_prefix", keys, both, per_item=2)))

    def put(self, keys: Sequence[str], values: Sequence[Any]) -> Replies:
        if len(keys) != len(values):
            raise ValueError(f"put: {len(keys)} keys but {len(values)} values")
        replies = self._each("put", list(zip(keys, values)),
                             lambda p, kv: p.execute_command("SET", _wire(kv[0]), bytes(kv[1])))
        return self._replies(*_stored(replies))

    def delete(self, keys: Sequence[str]) -> int:
        replies = self._each("delete", list(dict.fromkeys(keys)), lambda p, k: p.execute_command("UNLINK", _wire(k)))
        found, errors = _flags(replies, "delete")
        self._replies([], errors)
        return sum(found)

    def exists(self, keys: Sequence[str]) -> Replies:
        replies = self._each("exists", keys, lambda p, k: p.execute_command("EXISTS", _wire(k)))
        return self._replies(*_flags(replies, "exists"))

    def _scan_node(self, node_client: Any, prefix: str) -> Iterator[str]:
        pattern = glob_escape(prefix) + "*"
        cursor: Any = 0
        while True:  # ends when the server returns cursor 0: SCAN visits every key once or more
            def scan_once(at: Any = cursor) -> Any:
                pipe = node_client.pipeline(transaction=False)
                pipe.execute_command("SCAN", at, "MATCH", pattern, "COUNT", 1000)
                replies = self._execute(pipe, "scan_prefix")
                page = replies[0] if len(replies) == 1 else None
                if isinstance(page, BaseException):
                    raise page  # an error reply: StoreError("server")
                if not (isinstance(page, (list, tuple)) and len(page) == 2 and isinstance(page[1], list)):
                    raise StoreError("protocol", f"scan_prefix: SCAN answered {type(page).__name__}")
                return page

            cursor, batch = self._call("scan_prefix", scan_once)
            for k in batch:
                yield k.decode("utf-8", "surrogateescape") if isinstance(k, bytes) else str(k)
            if int(cursor) == 0:
                return


class RedisStore(_RedisBase):
    """A Store on one Redis node through a ``redis.Redis`` client (redis-py 4.3+).

    Reads are pipelines of ``GET`` (``batch`` commands per round trip), headers one
    script call per ``batch`` keys (``GETRANGE`` + ``STRLEN``), writes pipelines of
    ``SET``. The client must not decode responses (``decode_responses=False``, the
    default).

    Errors: every pipeline ends with ``ECHO`` of a fresh nonce, and a call whose last
    reply is not that nonce is ``StoreError("protocol")``: redis-py 4.3 counts replies, so
    one damaged length byte can shift them, and it reuses a connection whose extra
    replies arrive after the call. On any error this store also closes the pool's idle
    connections (the one just used among them), so a connection left out of step with
    its replies is never reused. ``deadline`` (seconds, None: none) bounds each store
    call: redis-py's ``socket_timeout`` bounds each read only, so when the deadline
    passes the store shuts the socket of the pipeline under way (``StoreError("timeout")``).
    The client is thread-safe, and so is the store.

    A key that fails on its own (a key of another type answers ``WRONGTYPE``) is a miss for
    that key alone (``Replies.errors``). The constructor refuses a client that cannot work
    (``decode_responses=True``: ValueError; an asyncio or cluster client: TypeError) and, with
    ``check=True`` (the default), sends ``PING``: a server that cannot be reached (a wrong
    port) is ``StoreError("connection")`` there, not a silent miss at every call.
    """

    def __init__(self, client: Any, *, batch: int = 512, deadline: Optional[float] = 10.0,
                 check: bool = True) -> None:
        super().__init__(client, batch, deadline)
        self._script: Any = None  # the header script, registered on first use; False: not available
        if check:
            self.ping()

    def ping(self) -> None:
        """Sends ``PING`` (with the sentinel); raises StoreError when the server does not answer
        ``PONG``, naming the server's address."""
        kwargs = getattr(self.client.connection_pool, "connection_kwargs", {})
        where = kwargs.get("path") or f"{kwargs.get('host', '?')}:{kwargs.get('port', '?')}"

        def run() -> None:
            pipe = self._pipeline()
            pipe.execute_command("PING")
            reply = self._execute(pipe, "ping")[0]
            if isinstance(reply, BaseException):
                raise reply
            if reply is not True and reply not in (b"PONG", "PONG"):
                raise StoreError("protocol", f"ping: {where} answered {reply!r}, not PONG")

        self._call(f"ping {where}", run)

    def get_prefix(self, keys: Sequence[str], length: int) -> Replies:
        """One ``EVALSHA`` per ``batch`` keys of a script that runs ``GETRANGE key 0 length-1``
        and ``STRLEN key`` for each (packing two commands per key in Python costs more than
        verifying the headers); where scripts are not available (disabled, or refused by
        ACL), pipelined ``GETRANGE`` + ``STRLEN``."""
        if length < 1:
            raise ValueError(f"get_prefix: length is {length}, must be at least 1")
        if self._script is False or not keys:
            return super().get_prefix(keys, length)
        if self._script is None:
            self._script = self.client.register_script(_PREFIX_SCRIPT)
        rex: Any = importlib.import_module("redis.exceptions")

        def run() -> Replies:
            out: List[Optional[bytes]] = []
            errors: Dict[int, StoreError] = {}
            for start in range(0, len(keys), self._batch):
                chunk = [_wire(k) for k in keys[start:start + self._batch]]
                pipe = self._pipeline()
                self._script(keys=chunk, args=[length], client=pipe)
                replies = self._execute(pipe, "get_prefix")[0]
                if isinstance(replies, BaseException):
                    raise replies  # the server refused the script: the fallback below
                if not isinstance(replies, list) or len(replies) != 2 * len(chunk):
                    raise StoreError("protocol", f"get_prefix: the header script answered "
                                     f"{type(replies).__name__} for {len(chunk)} keys")
                found, failed = _prefixes(replies)
                errors.update((start + i, e) for i, e in failed.items())
                out.extend(found)
            return self._replies(out, errors)

        try:
            return self._call("get_prefix", run)
        except StoreError as e:
            if not isinstance(e.__cause__, rex.ResponseError):
                raise
            # The server refused the script (disabled, or refused by ACL): the pipeline
            # answers or raises on its own; if it answers, scripts are the problem.
            out = super().get_prefix(keys, length)
            self._script = False
            return out

    def _drop_connections(self) -> None:
        try:
            self.client.connection_pool.disconnect(inuse_connections=False)
        except Exception:  # noqa: BLE001 - closing is best effort; the next call reconnects
            pass

    def scan_prefix(self, prefix: str) -> Iterator[str]:
        return self._scan_node(self.client, prefix)
