from typing import Any, Mapping, Optional, Sequence, Tuple

import kvkey

from ._engine import EngineConfigError

SETTING: str
LAYOUT: str
NO_ADAPTER: bytes

class ConfigError(EngineConfigError): ...

class Settings:
    model_path: str
    tenant: str
    kv_dtype: str
    model_dtype: str
    quant_policy: int
    quant_scheme: str
    quant_group_size: int
    quant_zero_point: bool
    mla: bool
    revision: Optional[str]
    model_name: Optional[str]
    adapters: Tuple[Tuple[str, str], ...]
    weights_epoch: int
    single_tenant: bool
    staging_blocks: int
    overrides: Optional[Tuple[Tuple[str, Any], ...]]
    digest_threads: int
    def __init__(self, model_path: str, tenant: str, kv_dtype: str, model_dtype: str, quant_policy: int,
                 quant_scheme: str = ..., quant_group_size: int = ..., quant_zero_point: bool = ...,
                 mla: bool = ..., revision: Optional[str] = ..., model_name: Optional[str] = ...,
                 adapters: Tuple[Tuple[str, str], ...] = ..., weights_epoch: int = ..., single_tenant: bool = ...,
                 staging_blocks: int = ..., overrides: Optional[Tuple[Tuple[str, Any], ...]] = ...,
                 digest_threads: int = ...) -> None: ...

def kv_format(quant_policy: Any, kv_torch_dtype: Any, model_dtype: Any, head_dim: int,
              mla_kv_cache_dtype: Optional[str] = ...) -> Tuple[str, str, int, bool]: ...
def make_settings(*, model_path: Any, tenant: Optional[str] = ..., quant_policy: Any = ..., dtype: str = ...,
                  adapters: Optional[Mapping[str, Any]] = ..., revision: Optional[str] = ...,
                  model_name: Optional[str] = ..., weights_epoch: int = ..., single_tenant: bool = ...,
                  staging_blocks: int = ..., overrides: Optional[Mapping[str, Any]] = ...,
                  trust_remote_code: bool = ..., model_config: Any = ..., digest_threads: int = ...) -> Settings: ...
def enable(engine_config: Any, *, model_path: Any, tenant: Optional[str] = ..., **options: Any) -> Settings: ...
def settings_from(cache_config: Any) -> Optional[Settings]: ...
def metrics() -> kvkey.Metrics: ...
def adapter_tag(name: Optional[str]) -> bytes: ...
def install() -> None: ...
def installed() -> bool: ...

class KvkeyStoreScheduler:
    kvkey_identities: Any
    def __init__(self, cache_config: Any) -> None: ...
    def rotate_epoch(self, epoch: Optional[int] = ...) -> int: ...
    def __getattr__(self, name: str) -> Any: ...

class KvkeyStoreWorker:
    kvkey: Any
    def __init__(self, cache_config: Any, *, global_rank: int = ..., tp_rank: int = ..., tp_size: int = ...,
                 kv_head_replica_num: int = ..., store_factory: Any = ..., replicate_config: Any = ...) -> None: ...
    def register_kv_caches(self, kv_caches: Mapping[str, Any]) -> None: ...
    def lookup(self, token_len: int, block_hashes: Sequence[bytes]) -> int: ...
    def rotate_epoch(self, epoch: Optional[int] = ...) -> int: ...
    def shutdown(self) -> None: ...
    def __getattr__(self, name: str) -> Any: ...

__all__: list[str]
