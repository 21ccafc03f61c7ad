"""kvkey.stores.aio: async stores for kvkey.aio.Connector.

``RedisStore(redis.asyncio.Redis)``: the methods of ``kvkey.stores.RedisStore`` as
coroutines, each call one pipeline (``batch`` commands per round trip) ended by an
``ECHO <nonce>`` sentinel, checked as in the sync store: a reply stream out of step is
``StoreError("protocol")`` and the connection is dropped, never reused. ``deadline``
bounds each call (``StoreError("timeout")``). See docs/python.md, "asyncio".
"""

from __future__ import annotations

import asyncio
import secrets
from typing import Any, AsyncIterator, List, Optional, Sequence

from .protocol import Prefix, StoreError, glob_escape
from .redis import _redis_error_kind, _wire

__all__ = ["RedisStore"]


def _refuse_decoding(client: Any) -> None:
    pool = getattr(client, "connection_pool", None)
    kwargs = getattr(pool, "connection_kwargs", {}) or {}
    if kwargs.get("decode_responses"):
        raise ValueError("RedisStore: the client decodes responses (decode_responses=True), so stored values "
                         "would come back as str: make the client with decode_responses=False")


class RedisStore:
    """A store on one Redis node through a ``redis.asyncio.Redis`` client (redis-py 4.3+).
    The client must not decode responses. Safe to share between tasks."""

    def __init__(self, client: Any, *, batch: int = 512, deadline: Optional[float] = 10.0) -> None:
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
        ended by the sentinel; every redis-py error becomes a StoreError."""

        async def run() -> List[Any]:
            out: List[Any] = []
            for start in range(0, len(commands), self._batch):
                chunk = commands[start:start + self._batch]
                nonce = secrets.token_hex(16).encode()
                pipe = self.client.pipeline(transaction=False)
                for c in chunk:
                    pipe.execute_command(*c)
                pipe.execute_command("ECHO", nonce)
                try:
                    replies = list(await pipe.execute(raise_on_error=True))
                except StoreError:
                    raise
                except Exception as e:
                    kind = _redis_error_kind(e)
                    if kind is None:
                        kind = "protocol"  # a reply callback on a damaged reply
                    await self._drop()
                    raise StoreError(kind, f"{during}: {type(e).__name__}: {e}") from e
                if not replies or replies[-1] != nonce or len(replies) != len(chunk) + 1:
                    await self._drop()
                    raise StoreError("protocol", f"{during}: the reply stream is out of step (the last reply "
                                     "is not the sentinel's nonce)")
                out.extend(replies[:-1])
            return out

        if not commands:
            return []
        try:
            return await asyncio.wait_for(run(), self.deadline)
        except asyncio.TimeoutError as e:
            await self._drop()
            raise StoreError("timeout", f"{during}: the call passed its deadline of {self.deadline} s") from e

    async def _drop(self) -> None:
        try:
            await self.client.connection_pool.disconnect(inuse_connections=True)
        except Exception:  # noqa: BLE001 - best effort; the next call reconnects
            pass

    async def get(self, keys: Sequence[str]) -> List[Any]:
        replies = await self._pipeline("get", [("GET", _wire(k)) for k in keys])
        return [r if r is None or isinstance(r, bytes) else StoreError("protocol", "GET answered "
                                                                        + type(r).__name__) for r in replies]

    async def get_prefix(self, keys: Sequence[str], length: int) -> List[Any]:
        if length < 1:
            raise ValueError(f"get_prefix: length is {length}, must be at least 1")
        commands: List[Sequence[Any]] = []
        for k in keys:
            commands.append(("GETRANGE", _wire(k), 0, length - 1))
            commands.append(("STRLEN", _wire(k)))
        replies = await self._pipeline("get_prefix", commands)
        out: List[Any] = []
        for data, size in zip(replies[0::2], replies[1::2]):
            if not isinstance(data, bytes) or isinstance(size, bool) or not isinstance(size, int):
                out.append(StoreError("protocol", "GETRANGE/STRLEN answered "
                                      f"{type(data).__name__}/{type(size).__name__}"))
            else:
                out.append(Prefix(data, size) if data else None)  # "" and 0: missing (or empty)
        return out

    async def put(self, keys: Sequence[str], values: Sequence[Any]) -> List[bool]:
        if len(keys) != len(values):
            raise ValueError(f"put: {len(keys)} keys but {len(values)} values")
        replies = await self._pipeline("put", [("SET", _wire(k), bytes(v)) for k, v in zip(keys, values)])
        return [r is True for r in replies]

    async def exists(self, keys: Sequence[str]) -> List[Any]:
        replies = await self._pipeline("exists", [("EXISTS", _wire(k)) for k in keys])
        return [r if r in (0, 1) and not isinstance(r, bool) else StoreError("protocol", "EXISTS answered "
                                                                              f"{r!r}") for r in replies]

    async def delete(self, keys: Sequence[str]) -> int:
        replies = await self._pipeline("delete", [("UNLINK", _wire(k)) for k in dict.fromkeys(keys)])
        if any(not isinstance(r, int) for r in replies):
            raise StoreError("protocol", "delete: UNLINK answered a non-integer")
        return sum(replies)

    async def scan_prefix(self, prefix: str) -> AsyncIterator[str]:
        """Every key that starts with ``prefix`` (SCAN MATCH, at least once each)."""
        pattern = glob_escape(prefix) + "*"
        cursor: Any = 0
        while True:
            page = (await self._pipeline("scan_prefix", [("SCAN", cursor, "MATCH", pattern, "COUNT", 1000)]))[0]
            if not (isinstance(page, (list, tuple)) and len(page) == 2 and isinstance(page[1], list)):
                raise StoreError("protocol", f"scan_prefix: SCAN answered {type(page).__name__}")
            cursor, batch = page
            for k in batch:
                yield k.decode("utf-8", "surrogateescape") if isinstance(k, bytes) else str(k)
            if int(cursor) == 0:
                return
