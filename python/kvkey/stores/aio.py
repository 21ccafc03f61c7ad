"""kvkey.stores.aio: async stores for kvkey.aio.Connector.

``RedisStore(redis.asyncio.Redis)``: the methods of ``kvkey.stores.RedisStore`` as
coroutines, each call one pipeline (``batch`` commands per round trip) ended by an
``ECHO <nonce>`` sentinel, checked as in the sync store: a reply stream out of step is
``StoreError("protocol")``. A key that fails on its own (a key of another type answers
``WRONGTYPE``) is a miss for that key alone (``Replies.errors``), as in the sync store.
Each pipeline holds its connection until its replies are checked: a connection that may be
out of step (an error, the deadline, a cancelled call) is closed, never reused, and no other
task's connection is touched. ``deadline`` bounds each call (``StoreError("timeout")``). See
docs/python.md, "asyncio".
"""

from __future__ import annotations

import asyncio
import secrets
from typing import Any, AsyncIterator, List, Optional, Sequence

from .protocol import Replies, StoreError, _KeyErrors, glob_escape
from .redis import _flags, _prefixes, _redis_error_kind, _stored, _values, _wire

__all__ = ["RedisStore"]


class _HeldPool:
    """A connection pool as a pipeline sees it while the store holds its connection: the
    pipeline's release at the end of execute() leaves the connection to the store."""

    def __init__(self, pool: Any) -> None:
        self._pool = pool

    async def release(self, connection: Any) -> None:
        pass

    def __getattr__(self, name: str) -> Any:
        return getattr(self._pool, name)


def _refuse_decoding(client: Any) -> None:
    pool = getattr(client, "connection_pool", None)
    kwargs = getattr(pool, "connection_kwargs", {}) or {}
    if kwargs.get("decode_responses"):
        raise ValueError("RedisStore: the client decodes responses (decode_responses=True), so stored values "
                         "would come back as str: make the client with decode_responses=False")


class RedisStore(_KeyErrors):
    """A store on one Redis node through a ``redis.asyncio.Redis`` client (redis-py 4.3+).
    The client must not decode responses. Safe to share between tasks; per-key failures are
    counted in ``key_errors`` and ``last_key_error`` as in the sync store."""

    def __init__(self, client: Any, *, batch: int = 512, deadline: Optional[float] = 10.0) -> None:
        super().__init__()
        if batch < 1:
            raise ValueError(f"batch is {batch}, must be at least 1")
        if deadline is not None and not deadline > 0:
            raise ValueError(f"deadline is {deadline!r}, must be positive seconds or None")
        _refuse_decoding(client)
        self.client = client
        self._batch = batch
        self.deadline = deadline

    async def _pipeline(self, during: str, commands: Sequence[Sequence[Any]]) -> List[Any]:
        """The replies of ``commands``, pipelined ``batch`` at a time, each pipeline
        ended by the sentinel; an error reply comes back in its command's place (the
        caller fails that key alone), every other redis-py error is a StoreError."""

        async def run() -> List[Any]:
            out: List[Any] = []
            for start in range(0, len(commands), self._batch):
                out.extend(await self._chunk(during, commands[start:start + self._batch]))
            return out

        if not commands:
            return []
        try:
            return await asyncio.wait_for(run(), self.deadline)
        except asyncio.TimeoutError as e:
            raise StoreError("timeout", f"{during}: the call passed its deadline of {self.deadline} s") from e

    async def _chunk(self, during: str, chunk: Sequence[Sequence[Any]]) -> List[Any]:
        """One pipeline on a connection of its own, held until its replies are checked: in
        step, it goes back to the pool; else (an error, the deadline, a cancelled task) it is
        closed first. Other tasks' connections are never touched."""
        pool = self.client.connection_pool
        try:
            conn = await pool.get_connection("MULTI")
        except Exception as e:
            raise StoreError(_redis_error_kind(e) or "connection", f"{during}: {type(e).__name__}: {e}") from e
        in_step = False
        try:
            nonce = secrets.token_hex(16).encode()
            pipe = self.client.pipeline(transaction=False)
            pipe.connection = conn
            pipe.connection_pool = _HeldPool(pool)
            for c in chunk:
                pipe.execute_command(*c)
            pipe.execute_command("ECHO", nonce)
            try:
                replies = list(await pipe.execute(raise_on_error=False))
            except Exception as e:
                kind = _redis_error_kind(e)
                if kind is None:
                    kind = "protocol"  # a reply callback on a damaged reply
                raise StoreError(kind, f"{during}: {type(e).__name__}: {e}") from e
            if not replies or replies[-1] != nonce or len(replies) != len(chunk) + 1:
                raise StoreError("protocol", f"{during}: the reply stream is out of step (the last reply "
                                 "is not the sentinel's nonce)")
            in_step = True
            return replies[:-1]
        finally:
            if not in_step:
                await _closed(conn)
            await pool.release(conn)

    async def get(self, keys: Sequence[str]) -> Replies:
        replies = await self._pipeline("get", [("GET", _wire(k)) for k in keys])
        return self._replies(*_values(replies, "get"))

    async def get_prefix(self, keys: Sequence[str], length: int) -> Replies:
        if length < 1:
            raise ValueError(f"get_prefix: length is {length}, must be at least 1")
        commands: List[Sequence[Any]] = []
        for k in keys:
            commands.append(("GETRANGE", _wire(k), 0, length - 1))
            commands.append(("STRLEN", _wire(k)))
        return self._replies(*_prefixes(await self._pipeline("get_prefix", commands)))

    async def put(self, keys: Sequence[str], values: Sequence[Any]) -> Replies:
        if len(keys) != len(values):
            raise ValueError(f"put: {len(keys)} keys but {len(values)} values")
        replies = await self._pipeline("put", [("SET", _wire(k), bytes(v)) for k, v in zip(keys, values)])
        return self._replies(*_stored(replies))

    async def exists(self, keys: Sequence[str]) -> Replies:
        replies = await self._pipeline("exists", [("EXISTS", _wire(k)) for k in keys])
        return self._replies(*_flags(replies, "exists"))

    async def delete(self, keys: Sequence[str]) -> int:
        replies = await self._pipeline("delete", [("UNLINK", _wire(k)) for k in dict.fromkeys(keys)])
        found, errors = _flags(replies, "delete")
        self._replies([], errors)
        return sum(found)

    async def scan_prefix(self, prefix: str) -> AsyncIterator[str]:
        """Every key that starts with ``prefix`` (SCAN MATCH, at least once each)."""
        pattern = glob_escape(prefix) + "*"
        cursor: Any = 0
        while True:
            page = (await self._pipeline("scan_prefix", [("SCAN", cursor, "MATCH", pattern, "COUNT", 1000)]))[0]
            if isinstance(page, BaseException):
                raise StoreError(_redis_error_kind(page) or "server", f"scan_prefix: {type(page).__name__}: {page}")
            if not (isinstance(page, (list, tuple)) and len(page) == 2 and isinstance(page[1], list)):
                raise StoreError("protocol", f"scan_prefix: SCAN answered {type(page).__name__}")
            cursor, batch = page
            for k in batch:
                yield k.decode("utf-8", "surrogateescape") if isinstance(k, bytes) else str(k)
            if int(cursor) == 0:
                return


async def _closed(conn: Any) -> None:
    """Closes a connection that may be out of step (best effort: the pool reconnects it)."""
    try:
        await conn.disconnect()
    except Exception:  # noqa: BLE001 - a connection that cannot close cleanly is dropped anyway
        pass
