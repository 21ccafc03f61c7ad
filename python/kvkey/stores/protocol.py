"""The store protocol of kvkey.Connector: ``Store``, ``StoreError``, ``Prefix``, ``Replies``.

A store holds opaque values under ``str`` keys; every method is batched; a store checks
nothing (the connector verifies every value it reads). See ``kvkey.stores`` and
docs/connectors.md.
"""

from __future__ import annotations

import collections
import threading
from typing import Any, Dict, Iterable, Iterator, List, Optional, Protocol, Sequence, runtime_checkable

__all__ = ["Prefix", "Replies", "Store", "StoreError", "glob_escape"]


class StoreError(Exception):
    """A store call that could not complete. ``kind`` says why:

    connection  the store could not be reached, or the connection broke
    timeout     no reply in time
    protocol    a reply of an unexpected type or shape
    server      the store answered with an error
    other       anything else the store's client raised
    """

    KINDS = ("connection", "timeout", "protocol", "server", "other")

    def __init__(self, kind: str, message: str) -> None:
        if kind not in self.KINDS:
            raise ValueError(f"StoreError: unknown kind {kind!r}, expected one of {self.KINDS}")
        super().__init__(f"[store.{kind}] {message}")
        self.kind = kind


@runtime_checkable
class Store(Protocol):
    """What kvkey.Connector uses of a store. Keys are ``str``; values are bytes-like
    (``bytes``, ``bytearray``, ``memoryview``) and are returned as ``bytes`` (or any
    object supporting the buffer protocol). Only ``get`` and ``put`` are required: the
    connector reads whole values without ``get_prefix`` and uses ``get`` without
    ``exists``."""

    def get(self, keys: Sequence[str]) -> Sequence[Optional[bytes]]:
        """The value of each key, or None where there is none."""
        ...

    def get_prefix(self, keys: Sequence[str], length: int) -> Sequence[Optional[bytes]]:
        """The first ``length`` bytes of each value (all of it when shorter), or None
        where there is none. A store that cannot read a range returns whole values; one
        that knows the value's size returns ``Prefix(data, total_size)``, and the lookup
        then also rejects a value whose length disagrees with its header."""
        ...

    def put(self, keys: Sequence[str], values: Sequence[Any]) -> Optional[Sequence[bool]]:
        """Stores each value under its key, replacing what was there. Returns None when
        all were stored, or one bool per key (True: stored)."""
        ...

    def delete(self, keys: Sequence[str]) -> int:
        """Removes the keys; returns how many existed."""
        ...

    def exists(self, keys: Sequence[str]) -> Sequence[bool]:
        """Whether each key has a value."""
        ...

    def scan_prefix(self, prefix: str) -> Iterator[str]:
        """Every key that starts with ``prefix`` (at least once; order unspecified), each one
        that the store's other methods accept (the Redis stores list a key that is not UTF-8
        with surrogate escapes, ``errors="surrogateescape"``). A store that cannot list its
        keys raises NotImplementedError."""
        ...


class Prefix(bytes):
    """The first bytes of a stored value, with the value's total size (``total_size``)."""

    total_size: int

    def __new__(cls, data: bytes, total_size: int) -> "Prefix":
        obj = super().__new__(cls, data)
        obj.total_size = total_size
        return obj


class Replies(list):  # type: ignore[type-arg]
    """What a store method returns, one entry per key, with the keys that failed on their own.

    ``errors`` maps a key's position to its ``StoreError`` (kind ``server`` for an error reply
    such as Redis' ``WRONGTYPE``, ``protocol`` for a reply of the wrong type); that entry is the
    method's miss (None from ``get`` and ``get_prefix``, False from ``exists`` and ``put``). A
    consumer that ignores ``errors`` sees a plain list of misses; the connector counts each entry
    of ``errors`` as one store error of its kind."""

    errors: Dict[int, StoreError]

    def __init__(self, items: Iterable[Any] = (), errors: Optional[Dict[int, StoreError]] = None) -> None:
        super().__init__(items)
        self.errors = dict(errors or {})


class _KeyErrors:
    """Per-key failures of a store, counted: ``key_errors`` (kind -> count since the store was
    made) and ``last_key_error`` (the latest ``StoreError``, or None)."""

    def __init__(self) -> None:
        self.key_errors: "collections.Counter[str]" = collections.Counter()
        self.last_key_error: Optional[StoreError] = None
        self._key_errors_lock = threading.Lock()

    def _replies(self, items: List[Any], errors: Dict[int, StoreError]) -> Replies:
        if errors:
            with self._key_errors_lock:
                for e in errors.values():
                    self.key_errors[e.kind] += 1
                self.last_key_error = errors[max(errors)]
        return Replies(items, errors)


def glob_escape(prefix: str) -> str:
    """``prefix`` with the Redis glob specials (``* ? [ ] \\``) escaped, for SCAN MATCH."""
    return "".join("\\" + c if c in "*?[]\\" else c for c in prefix)
