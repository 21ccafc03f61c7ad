from typing import Iterable, List, Optional, Sequence, SupportsIndex, Tuple, Union, Any

import numpy as np
import numpy.typing as npt

from . import Identity, KeyNamespace, TenantSecret, Verdict

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
