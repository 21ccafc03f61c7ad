"""kvkey.stores.MemoryStore: a Store in process memory (tests, docs, single-process caches)."""

from __future__ import annotations

import threading
from typing import Any, Dict, Iterator, List, Sequence, Tuple

from .protocol import Prefix, Replies, StoreError, _KeyErrors

__all__ = ["MemoryStore"]


class MemoryStore(_KeyErrors):
    """A Store in process memory: a dict behind a lock. ``values`` is the dict itself
    (key -> bytes), for tests that damage values in place. A value that is not bytes-like
    (planted in ``values`` by a test) is a per-key failure, ``StoreError("protocol")`` in the
    ``errors`` of the ``Replies``: a miss for that key alone."""

    def __init__(self) -> None:
        super().__init__()
        self.values: Dict[str, bytes] = {}
        self._lock = threading.Lock()

    def _found(self, keys: Sequence[str], during: str) -> Tuple[List[Any], Dict[int, StoreError]]:
        with self._lock:
            found: List[Any] = [self.values.get(k) for k in keys]
        errors: Dict[int, StoreError] = {}
        for i, v in enumerate(found):
            if v is not None and not isinstance(v, (bytes, bytearray, memoryview)):
                errors[i] = StoreError("protocol", f"{during}: the value of key {i} is a {type(v).__name__}, "
                                       "not bytes")
                found[i] = None
        return found, errors

    def get(self, keys: Sequence[str]) -> Replies:
        found, errors = self._found(keys, "get")
        return self._replies(found, errors)

    def get_prefix(self, keys: Sequence[str], length: int) -> Replies:
        found, errors = self._found(keys, "get_prefix")
        return self._replies([None if v is None else Prefix(bytes(v[:length]), len(v)) for v in found], errors)

    def put(self, keys: Sequence[str], values: Sequence[Any]) -> None:
        if len(keys) != len(values):
            raise ValueError(f"put: {len(keys)} keys but {len(values)} values")
        copies = [bytes(v) for v in values]
        with self._lock:
            self.values.update(zip(keys, copies))

    def delete(self, keys: Sequence[str]) -> int:
        with self._lock:
            return sum(self.values.pop(k, None) is not None for k in set(keys))

    def exists(self, keys: Sequence[str]) -> List[bool]:
        with self._lock:  # a value of any type exists, as a Redis key of any type does
            return [k in self.values for k in keys]

    def scan_prefix(self, prefix: str) -> Iterator[str]:
        with self._lock:
            keys = [k for k in self.values if k.startswith(prefix)]
        return iter(keys)

    def __len__(self) -> int:
        return len(self.values)
