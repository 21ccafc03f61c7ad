from typing import Iterable, List, Optional, Sequence, SupportsIndex, Tuple, Union, Any

import numpy as np
import numpy.typing as npt

from . import Identity, KeyNamespace, TenantSecret, Verdict
from .connector import BlockResult, Connector

_Tokens = Union[Sequence[SupportsIndex], npt.NDArray[np.integer[Any]]]
_TextOrBytes = Union[str, bytes, bytearray, memoryview]

class SharedScope:
    name: str
    namespace: KeyNamespace
    readers: Tuple[str, ...]
    publishers: Tuple[str, ...]
    def __init__(self, name: str, identity: Identity, *, readers: Iterable[str] = ..., publishers: Iterable[str] = ...,
                 secret: Optional[TenantSecret] = None, confidential: bool = False,
                 payload_check: str = "required") -> None: ...
    def may_publish(self, tenant: str) -> bool: ...
    def may_read(self, tenant: str) -> bool: ...
    def check_read(self, tenant: str) -> Optional[Verdict]: ...
    def check_publish(self, tenant: str) -> None: ...

def scoped_block_hashes(scope_namespace: Union[KeyNamespace, SharedScope], tenant: KeyNamespace, tokens: _Tokens,
                        scope_tokens: int, *, salt: Optional[_TextOrBytes] = None,
                        extras: Optional[Iterable[Tuple[SupportsIndex, SupportsIndex, _TextOrBytes]]] = None
                        ) -> List[bytes]: ...

class ScopedConnector:
    scope: SharedScope
    tenant: str
    scope_connector: Connector
    tenant_connector: Connector
    def __init__(self, store: Any, scope: Union[SharedScope, Sequence[SharedScope]],
                 tenant: Union[KeyNamespace, Sequence[KeyNamespace]], **options: Any) -> None: ...
    @property
    def may_read(self) -> bool: ...
    @property
    def may_publish(self) -> bool: ...
    def block_hashes(self, tokens: _Tokens, scope_tokens: int, *, salt: Optional[_TextOrBytes] = None,
                     extras: Optional[Iterable[Tuple[SupportsIndex, SupportsIndex, _TextOrBytes]]] = None
                     ) -> List[bytes]: ...
    def save(self, block_hashes: Sequence[bytes], scope_blocks: int, payloads: Sequence[Any], *,
             rank: int = 0) -> int: ...
    def save_private(self, block_hashes: Sequence[bytes], scope_blocks: int, private_payloads: Sequence[Any], *,
                     rank: int = 0) -> int: ...
    def lookup(self, block_hashes: Sequence[bytes], scope_blocks: int) -> int: ...
    def load(self, block_hashes: Sequence[bytes], scope_blocks: int, *, rank: int = 0) -> List[Optional[memoryview]]: ...
    def load_into(self, block_hashes: Sequence[bytes], scope_blocks: int, buffers: Sequence[Any], *,
                  rank: int = 0) -> List[BlockResult]: ...
