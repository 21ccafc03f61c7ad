"""Type information for kvkey (the compiled core, kvkey._kvkey, re-exported). See docs/python.md."""

import array
import os
from typing import Any, Dict, Iterable, List, Optional, Sequence, SupportsIndex, Tuple, Union

import numpy as np
import numpy.typing as npt

from . import compat as compat

# Any bytes-like object: bytes, bytearray, memoryview, numpy arrays (read as bytes(memoryview(x))).
_BytesLike = Union[bytes, bytearray, memoryview, npt.NDArray[Any]]
# Text (UTF-8) or bytes: salts, extra keys, fingerprinted data.
_TextOrBytes = Union[str, _BytesLike]
# Token ids: a sequence of ints or a 1-D integer buffer.
_Tokens = Union[Sequence[SupportsIndex], npt.NDArray[np.integer[Any]], "array.array[int]"]
_ExtraKeys = Iterable[Tuple[SupportsIndex, SupportsIndex, _TextOrBytes]]
_StrPath = Union[str, bytes, "os.PathLike[str]", "os.PathLike[bytes]"]

__version__: str
envelope_size: int
format_version: int
store_key_tag: str
single_tenant_name: str

class Error(ValueError):
    id: str
    field: str

class IdentityError(Error): ...
class InputError(Error): ...
class IoError(Error, OSError): ...
class CryptoError(Error): ...

class KvDtype:
    unset: KvDtype
    fp32: KvDtype
    fp16: KvDtype
    bf16: KvDtype
    fp8_e4m3: KvDtype
    fp8_e5m2: KvDtype
    int8: KvDtype
    int4: KvDtype
    uint8: KvDtype
    uint4: KvDtype
    fp4_e2m1: KvDtype
    __members__: dict[str, KvDtype]
    def __init__(self, value: int) -> None: ...
    @property
    def name(self) -> str: ...
    @property
    def value(self) -> int: ...
    def __int__(self) -> int: ...
    def __index__(self) -> int: ...
    def __eq__(self, other: object) -> bool: ...
    def __hash__(self) -> int: ...

_DtypeLike = Union[KvDtype, str]

def kv_dtype_from_string(name: str) -> KvDtype: ...

# ---- generated from the field table (scripts/update-stub.py): do not edit ----
class Model:
    name: str
    revision: str
    weights_epoch: int
    weights_fingerprint: Optional[bytes]
    positional_fingerprint: Optional[bytes]
    def __init__(self, *,
                 name: str = "",
                 revision: str = "",
                 weights_epoch: SupportsIndex = 0,
                 weights_fingerprint: Optional[_BytesLike] = None,
                 positional_fingerprint: Optional[_BytesLike] = None) -> None: ...
    def __copy__(self) -> Model: ...
    def __deepcopy__(self, memo: Any) -> Model: ...

class Quant:
    scheme: str
    group_size: int
    scale_dtype: Optional[KvDtype]
    zero_point: bool
    scales_fingerprint: Optional[bytes]
    def __init__(self, *,
                 scheme: str = "none",
                 group_size: SupportsIndex = 0,
                 scale_dtype: Optional[_DtypeLike] = None,
                 zero_point: bool = False,
                 scales_fingerprint: Optional[_BytesLike] = None) -> None: ...
    def __copy__(self) -> Quant: ...
    def __deepcopy__(self, memo: Any) -> Quant: ...

class Kv:
    dtype: KvDtype
    quant: Quant
    block_size: int
    num_layers: int
    num_kv_heads: int
    head_dim: int
    layout: str
    mla: bool
    def __init__(self, *,
                 dtype: _DtypeLike = ...,
                 quant: Quant = ...,
                 block_size: SupportsIndex = 0,
                 num_layers: SupportsIndex = 0,
                 num_kv_heads: SupportsIndex = 0,
                 head_dim: SupportsIndex = 0,
                 layout: str = "",
                 mla: bool = False) -> None: ...
    def __copy__(self) -> Kv: ...
    def __deepcopy__(self, memo: Any) -> Kv: ...

class Shard:
    tp_size: int
    tp_rank: int
    pp_size: int
    pp_rank: int
    def __init__(self, *,
                 tp_size: SupportsIndex = 1,
                 tp_rank: SupportsIndex = 0,
                 pp_size: SupportsIndex = 1,
                 pp_rank: SupportsIndex = 0) -> None: ...
    def __copy__(self) -> Shard: ...
    def __deepcopy__(self, memo: Any) -> Shard: ...

class Adapter:
    name: str
    weights_fingerprint: bytes
    def __init__(self,
                 name: str,
                 weights_fingerprint: _BytesLike) -> None: ...
    def __copy__(self) -> Adapter: ...
    def __deepcopy__(self, memo: Any) -> Adapter: ...

class Identity:
    tenant: str
    model: Model
    kv: Kv
    shard: Shard
    adapter: Optional[Adapter]
    def __init__(self, *,
                 tenant: str = "",
                 model: Model = ...,
                 kv: Kv = ...,
                 shard: Shard = ...,
                 adapter: Optional[Adapter] = None) -> None: ...
# ---- end of the generated part ----
    def copy(self) -> Identity: ...
    def validated(self, *, single_tenant: bool = False) -> Identity: ...
    @staticmethod
    def from_model_dir(path: Union[str, bytes, "os.PathLike[str]", "os.PathLike[bytes]"], *, tenant: str,
                       kv_dtype: _DtypeLike, block_size: SupportsIndex, layout: str,
                       tp_size: SupportsIndex = 1, tp_rank: SupportsIndex = 0,
                       pp_size: SupportsIndex = 1, pp_rank: SupportsIndex = 0,
                       adapter_dir: Union[None, str, bytes, "os.PathLike[str]", "os.PathLike[bytes]"] = None,
                       revision: Optional[str] = None, name: Optional[str] = None,
                       adapter_name: Optional[str] = None, weights_epoch: SupportsIndex = 0,
                       overrides: Optional[Dict[str, Any]] = None, verify: bool = False) -> Identity: ...
    def __copy__(self) -> Identity: ...
    def __deepcopy__(self, memo: Any) -> Identity: ...

class Slice:
    @property
    def kv_head_begin(self) -> int: ...
    @property
    def kv_head_end(self) -> int: ...
    @property
    def layer_begin(self) -> int: ...
    @property
    def layer_end(self) -> int: ...

class Verdict:
    @property
    def ok(self) -> bool: ...
    @property
    def reason(self) -> str: ...
    @property
    def field(self) -> str: ...
    def __bool__(self) -> bool: ...

class ReusablePrefix:
    @property
    def blocks(self) -> int: ...
    @property
    def tokens(self) -> int: ...

_Results = Iterable[Union[bool, np.bool_, Verdict]]

def reusable_prefix(results: _Results, shards_per_block: SupportsIndex, block_size: SupportsIndex,
                    max_tokens: Optional[SupportsIndex] = None) -> ReusablePrefix: ...

class Chain:
    def append(self, tokens: _Tokens) -> List[bytes]: ...
    @property
    def hashes(self) -> List[bytes]: ...
    def __len__(self) -> int: ...

class TenantSecret:
    def __init__(self, secret: _BytesLike) -> None: ...
    @staticmethod
    def from_file(path: _StrPath) -> TenantSecret: ...
    @staticmethod
    def from_env(name: str) -> TenantSecret: ...
    def __len__(self) -> int: ...

class KeyNamespace:
    def __init__(self, identity: Identity, *, single_tenant: bool = False,
                 secret: Optional[TenantSecret] = None, payload_check: str = "required") -> None: ...
    @property
    def keyed(self) -> bool: ...
    @property
    def identity(self) -> Identity: ...
    @property
    def single_tenant(self) -> bool: ...
    @property
    def slice(self) -> Slice: ...
    @property
    def encoding(self) -> bytes: ...
    @property
    def root(self) -> bytes: ...
    @property
    def block_size(self) -> int: ...
    @property
    def key_prefix(self) -> str: ...
    @property
    def tenant_prefix(self) -> str: ...
    def block_hashes(self, tokens: _Tokens, *, salt: Optional[_TextOrBytes] = None,
                     extras: Optional[_ExtraKeys] = None,
                     previous: Optional[Iterable[_BytesLike]] = None) -> List[bytes]: ...
    def extend_block_hashes(self, previous: Optional[Iterable[_BytesLike]], tokens: _Tokens, *,
                            salt: Optional[_TextOrBytes] = None, extras: Optional[_ExtraKeys] = None) -> List[bytes]: ...
    def block_hashes_batch(self, sequences: Iterable[_Tokens], *, threads: SupportsIndex = 0) -> List[List[bytes]]: ...
    def chain(self, *, salt: Optional[_TextOrBytes] = None, extras: Optional[_ExtraKeys] = None) -> Chain: ...
    def first_parent(self, salt: Optional[_TextOrBytes] = None) -> bytes: ...
    def object_hash(self, block_hash: _BytesLike) -> bytes: ...
    def store_key(self, block_hash: _BytesLike) -> str: ...
    def seal(self, block_hash: _BytesLike, payload: Union[_BytesLike, SupportsIndex]) -> bytes: ...
    def verify(self, header: _BytesLike, block_hash: _BytesLike,
               payload: Union[_BytesLike, SupportsIndex]) -> Verdict: ...
    def reusable_prefix(self, results: _Results, shards_per_block: SupportsIndex,
                        max_tokens: Optional[SupportsIndex] = None) -> ReusablePrefix: ...

def glob_escape(s: str) -> str: ...
def fingerprint(data: _TextOrBytes) -> bytes: ...
def fingerprint_file(path: _StrPath) -> bytes: ...

__all__ = [
    "Adapter", "Chain", "CryptoError", "Error", "Identity", "IdentityError", "InputError", "IoError",
    "KeyNamespace", "Kv", "KvDtype", "Model", "Quant", "ReusablePrefix", "Shard", "Slice", "TenantSecret", "Verdict", "compat",
    "envelope_size", "fingerprint", "fingerprint_file", "format_version", "glob_escape", "kv_dtype_from_string",
    "reusable_prefix", "single_tenant_name", "store_key_tag",
]
