"""kvkey as a vLLM KV connector, loaded by name with vLLM's own option::

    vllm serve MODEL --kv-transfer-config '{"kv_connector": "KvkeyConnector",
        "kv_connector_module_path": "kvkey.integrations.vllm", "kv_role": "kv_both",
        "kv_connector_extra_config": {"store": "redis", "redis_url": "redis://127.0.0.1:6379/0",
                                      "tenant": "team-a"}}'

``KvkeyConnector`` is a ``KVConnectorBase_V1`` (vLLM 0.32,
``vllm/distributed/kv_transfer/kv_connector/v1/base.py``). vLLM builds it twice: in the
engine core with ``KVConnectorRole.SCHEDULER`` and in every worker with
``KVConnectorRole.WORKER``.

Scheduler side (engine core process):

- ``get_num_new_matched_tokens``: hashes the prompt with the request's namespace (its
  LoRA adapter's, its weights epoch; the request's ``cache_salt`` goes into the chain) and
  counts the leading blocks whose header verifies on every rank's shard
  (``kvkey.Connector.lookup`` over ``ns.all_ranks()``); the last prompt token is always
  computed. Loads are synchronous (``False``).
- ``update_state_after_alloc`` notes a load; ``build_connector_meta`` hands the workers,
  per request, the block hashes and block ids to load and the newly full prompt blocks
  to save, with the adapter and the weights epoch the request was admitted under.

Worker side:

- ``register_kv_caches``: the per-layer caches (``[num_blocks, ...]``, one block
  contiguous at ``[block_id]``); a block's value is the bytes of ``cache[block_id]`` of
  every attention layer in layer order. Their size must be the identity's payload size.
- ``start_load_kv``: reads, verifies (header and payload digest) and only then copies
  each block into its allocated block (``Connector.load_into``); all layers at once, so
  ``wait_for_layer_load`` has nothing to wait for.
- ``wait_for_save``: seals and stores the saved blocks (``Connector.save``) after the
  forward pass wrote them; ``save_kv_layer`` does nothing.
- ``get_block_ids_with_load_errors``: the blocks that were not loaded (missing, rejected,
  store error), which vLLM recomputes (the connector sets ``kv_load_failure_policy`` to
  ``"recompute"`` unless the extra config says ``"load_failure_policy": "fail"``).

Weight updates: ``EngineCore.set_weight_version(v)`` (what ``AsyncLLM.finish_weight_update``
and ``LLMEngine.set_weight_version`` call) also moves the scheduler connector to the
weights epoch of ``v`` (``weights_epoch_of``), and a weight-changing ``collective_rpc``
(``WEIGHT_RPCS``) to an epoch of this engine's own until a version is set: requests
admitted after it neither read nor write blocks of the old epoch. Every lookup, load, save and rejection is counted in
``metrics()``. docs/integration/vllm.md has the extra-config keys and where each identity
field comes from.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import threading
from typing import Any, Dict, List, Mapping, Optional, Sequence, Set, Tuple

import kvkey

from . import _engine

try:
    import torch
    from vllm.distributed.kv_transfer.kv_connector.v1.base import (  # type: ignore
        KVConnectorBase_V1, KVConnectorMetadata, KVConnectorRole)
except ImportError as _e:  # pragma: no cover - exercised where vLLM is absent
    raise ImportError("kvkey.integrations.vllm needs vLLM >= 0.32 (vllm.distributed.kv_transfer.kv_connector.v1): "
                      f"scripts/venv.sh vllm ({_e})") from _e

__all__ = [
    "EXTRA_KEYS",
    "LAYOUT",
    "STORES",
    "WEIGHT_RPCS",
    "ConfigError",
    "KvkeyConnector",
    "KvkeyConnectorMetadata",
    "Settings",
    "kv_dtype_of",
    "metrics",
    "settings_from",
    "weights_epoch_of",
]

#: ``kv.layout`` of a value: ``kv_caches[layer][block_id]`` of every attention layer, in
#: layer order, as the attention backend lays a block out; the backend's name and
#: layout follow (``LAYOUT + ".CPU_ATTN.LBHNC"``), so backends never share values.
LAYOUT = "vllm.v1.block_per_layer"
#: The stores the extra config's ``"store"`` names.
STORES = ("memory", "redis", "redis-cluster", "mooncake")
#: Every key ``kv_connector_extra_config`` may hold, with what it is.
EXTRA_KEYS = {
    "store": "one of " + ", ".join(STORES) + " (required)",
    "tenant": "the tenant the keys and values belong to (required unless single_tenant)",
    "single_tenant": "true: a store no other deployment shares; the tenant stays empty",
    "secret_env": "the name of an environment variable holding the tenant secret (keyed namespace)",
    "secret_file": "a file holding the tenant secret (keyed namespace)",
    "model_name": "the model's name in the identity (default: served_model_name when set, else the directory's)",
    "revision": "the model's revision (default: vLLM's --revision, else 'unversioned' for a plain directory)",
    "redis_url": "redis: the server, redis://host:port/db (default redis://127.0.0.1:6379/0)",
    "redis_nodes": "redis-cluster: startup nodes, 'host:port,host:port'",
    "mooncake_master": "mooncake: the master's host:port",
    "mooncake_metadata_server": "mooncake: the metadata server (default P2PHANDSHAKE)",
    "mooncake_protocol": "mooncake: tcp or rdma (default tcp)",
    "mooncake_local_hostname": "mooncake: this host's address (default 127.0.0.1)",
    "mooncake_global_segment_size": "mooncake: bytes this process lends the store (default 256 MiB)",
    "mooncake_local_buffer_size": "mooncake: the client's local buffer (default 256 MiB)",
    "memory_name": "memory: the name of the process-wide MemoryStore (default 'default'; one process only)",
    "load_failure_policy": "recompute (default: the connector sets vLLM's kv_load_failure_policy to it) or fail",
}

logger = logging.getLogger("kvkey.integrations.vllm")


class ConfigError(_engine.EngineConfigError):
    """A configuration kvkey cannot make a connector from. ``setting`` names it (an
    extra-config key such as ``tenant`` or ``store``, or vLLM's ``cache_dtype``, ``model``)."""

    integration = "kvkey.integrations.vllm"


_metrics = kvkey.Metrics()


def metrics() -> kvkey.Metrics:
    """This process's kvkey metrics (lookups, loads, saves, rejections by reason and
    field); ``kvkey.prometheus`` exports them."""
    return _metrics


# ---------------------------------------------------------------- settings


@dataclasses.dataclass(frozen=True)
class Settings:
    """What the connector resolved from vLLM's configuration and the extra config."""

    model_path: str
    tenant: str
    kv_dtype: str
    block_size: int
    tp_size: int
    pp_size: int
    layout: str
    store: str
    store_options: Tuple[Tuple[str, Any], ...]
    single_tenant: bool = False
    revision: Optional[str] = None
    model_name: Optional[str] = None
    secret_env: Optional[str] = None
    secret_file: Optional[str] = None
    load_failure_policy: str = "recompute"


def kv_dtype_of(cache_dtype: Any, model_dtype: Any, fp8_dtype: Any = None) -> str:
    """kvkey's name of the KV dtype vLLM stores for ``--kv-cache-dtype cache_dtype``, as
    vLLM resolves it: ``"auto"`` is the model's dtype; ``"fp8"`` / ``"fp8_e4m3"`` the
    platform's fp8 (``current_platform.fp8_dtype()``: ``float8_e4m3fn``, or
    ``float8_e4m3fnuz`` on ROCm gfx94x: other bytes, other keys); ``"fp8_e5m2"``. A cache
    dtype that keeps scales inside the cache or is unknown is ``ConfigError`` naming
    ``cache_dtype``."""
    name = str(cache_dtype)
    if name == "auto":
        torch_name = _engine.dtype_name(model_dtype)
    elif name in ("fp8", "fp8_e4m3"):
        if fp8_dtype is None:
            from vllm.platforms import current_platform  # type: ignore

            fp8_dtype = current_platform.fp8_dtype()
        torch_name = _engine.dtype_name(fp8_dtype)
    elif name == "fp8_e5m2":
        torch_name = "float8_e5m2"
    elif name in ("bfloat16", "float16", "half", "float32", "float"):
        torch_name = name
    else:
        raise ConfigError("cache_dtype", f"vLLM's kv_cache_dtype {name!r} is not one kvkey can key (auto, "
                                         "fp8, fp8_e4m3, fp8_e5m2, bfloat16, float16, float32)")
    try:
        return kvkey.kv_dtype_from_engine(torch_name).name
    except kvkey.InputError as e:
        raise ConfigError("cache_dtype", f"kv_cache_dtype {name!r} resolves to {torch_name}, which kvkey does not "
                                         f"know ({e})") from None


def weights_epoch_of(version: Any) -> int:
    """kvkey's weights epoch of a vLLM weight version (``get_weight_version()``): vLLM's
    initial ``"default"`` is 0, a decimal version is its number, any other string the
    first 6 bytes of its fingerprint (never 0)."""
    v = str(version)
    if v == "default":
        return 0
    if v.isdigit() and len(v) < 16:
        return int(v)
    return int.from_bytes(kvkey.fingerprint("vllm.weight_version\0" + v)[:6], "big") | 1


def _model_dir(model_config: Any) -> str:
    model = getattr(model_config, "model", None)
    path = _engine.readable_dir(model)
    if path is not None:
        return path
    try:
        from huggingface_hub import snapshot_download  # type: ignore

        path = snapshot_download(str(model), revision=getattr(model_config, "revision", None), local_files_only=True)
    except Exception as e:  # noqa: BLE001 - huggingface_hub raises many kinds
        raise ConfigError("model", f"{model!r} is neither a model directory nor a model in the local Hugging Face "
                                   f"cache ({type(e).__name__}: {e})") from None
    return path


def _option(extra: Mapping[str, Any], key: str, kind: type, default: Any = None) -> Any:
    value = extra.get(key, default)
    if value is None:
        return None
    if kind is bool:
        if not isinstance(value, bool):
            raise ConfigError(key, f"{value!r} must be true or false")
        return value
    if kind is int:
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ConfigError(key, f"{value!r} must be a non-negative integer")
        return value
    if not isinstance(value, str) or not value:
        raise ConfigError(key, f"{value!r} must be a non-empty string")
    return value


def settings_from(vllm_config: Any) -> Settings:
    """The connector's settings from a ``VllmConfig``: its ``kv_transfer_config``'s
    ``kv_connector_extra_config`` (keys: ``EXTRA_KEYS``) and vLLM's own model, cache and
    parallel configuration. Every refusal is a ``ConfigError`` naming the key."""
    transfer = vllm_config.kv_transfer_config
    extra = dict(getattr(transfer, "kv_connector_extra_config", None) or {})
    unknown = sorted(k for k in extra if k not in EXTRA_KEYS)
    if unknown:
        raise ConfigError(unknown[0], f"not a key kvkey's connector knows (known: {', '.join(sorted(EXTRA_KEYS))})")
    store = extra.get("store")
    if store is None:
        raise ConfigError("store", f"the extra config must name the store: one of {', '.join(STORES)}")
    if store not in STORES:
        raise ConfigError("store", f"{store!r} is not a store kvkey knows ({', '.join(STORES)})")
    single = bool(_option(extra, "single_tenant", bool, False))
    tenant = _engine.resolve_tenant(
        ConfigError, extra.get("tenant"), single, both="single_tenant keeps the tenant empty; give one or the other",
        missing="a tenant is required in kv_connector_extra_config (\"tenant\": \"team-a\"), or "
                "\"single_tenant\": true for a store no other deployment shares")
    policy = _option(extra, "load_failure_policy", str, "recompute")
    if policy not in ("recompute", "fail"):
        raise ConfigError("load_failure_policy", f"{policy!r} is neither recompute nor fail")
    store_keys = {"memory": ("memory_name",), "redis": ("redis_url",), "redis-cluster": ("redis_nodes",),
                  "mooncake": ("mooncake_master", "mooncake_metadata_server", "mooncake_protocol",
                               "mooncake_local_hostname", "mooncake_global_segment_size",
                               "mooncake_local_buffer_size")}
    options = []
    for key in sorted(k for k in extra if k.startswith(("memory_", "redis_", "mooncake_"))):
        if key not in store_keys[store]:
            raise ConfigError(key, f"is not an option of the {store!r} store")
        options.append((key, _option(extra, key, int if key.endswith("_size") else str)))
    if store == "redis-cluster" and "redis_nodes" not in extra:
        raise ConfigError("redis_nodes", "the redis-cluster store needs its startup nodes ('host:port,...')")
    if store == "mooncake" and "mooncake_master" not in extra:
        raise ConfigError("mooncake_master", "the mooncake store needs its master's host:port")
    model_config, cache_config = vllm_config.model_config, vllm_config.cache_config
    parallel = vllm_config.parallel_config
    kv_dtype = kv_dtype_of(getattr(cache_config, "cache_dtype", "auto"), model_config.dtype)
    served = getattr(model_config, "served_model_name", None)
    if isinstance(served, (list, tuple)):
        served = served[0] if served else None
    name = _option(extra, "model_name", str) or (served if served and served != model_config.model else None)
    backend = getattr(getattr(vllm_config, "attention_config", None), "backend", None)
    from vllm.platforms import current_platform  # type: ignore

    layout = f"{LAYOUT}.{current_platform.device_type}.{getattr(backend, 'name', backend) or 'auto'}"
    s = Settings(model_path=_model_dir(model_config), tenant=tenant, kv_dtype=kv_dtype,
                 block_size=int(cache_config.block_size), tp_size=int(parallel.tensor_parallel_size),
                 pp_size=int(parallel.pipeline_parallel_size), layout=layout, store=store,
                 store_options=tuple(options), single_tenant=single,
                 revision=_option(extra, "revision", str) or getattr(model_config, "revision", None),
                 model_name=name, secret_env=_option(extra, "secret_env", str),
                 secret_file=_option(extra, "secret_file", str), load_failure_policy=policy)
    if s.secret_env and s.secret_file:
        raise ConfigError("secret_env", "give secret_env or secret_file, not both")
    return s


# ---------------------------------------------------------------- identities

Adapter = Optional[Tuple[str, str]]  # (name, directory) of a request's LoRA adapter


class _Identities:
    """The namespaces of one process, per (adapter, weights epoch, tp rank, pp rank)."""

    def __init__(self, s: Settings) -> None:
        self.s = s
        self.secret = None
        try:
            if s.secret_env:
                self.secret = kvkey.TenantSecret.from_env(s.secret_env)
            elif s.secret_file:
                self.secret = kvkey.TenantSecret.from_file(s.secret_file)
        except kvkey.Error as e:
            raise ConfigError("secret_env" if s.secret_env else "secret_file", str(e)) from None
        self._cache = _engine.NamespaceCache(self._make)
        self.namespace(None, 0, 0, 0)  # an unreadable model directory or a bad field stops the engine now

    def _make(self, key: Tuple[Adapter, int, int, int]) -> kvkey.KeyNamespace:
        adapter, epoch, tp_rank, pp_rank = key
        s = self.s
        revision = s.revision
        if revision is None and not os.path.isdir(os.path.join(s.model_path, "snapshots")) \
                and os.path.basename(os.path.dirname(s.model_path)) != "snapshots":
            revision = "unversioned"  # a plain directory: its weights fingerprint names it
        i = _engine.model_identity(
            ConfigError, s.model_path, adapter_dir=adapter[1] if adapter else None,
            adapter_name=adapter[0] if adapter else None, tenant=s.tenant if not s.single_tenant else None,
            kv_dtype=s.kv_dtype, block_size=s.block_size, layout=s.layout, tp_size=s.tp_size, tp_rank=tp_rank,
            pp_size=s.pp_size, pp_rank=pp_rank, revision=revision, name=s.model_name, weights_epoch=epoch,
            single_tenant=s.single_tenant)
        options: Dict[str, Any] = {"single_tenant": s.single_tenant}
        if self.secret is not None:
            options["secret"] = self.secret
        return _engine.namespace_of(ConfigError, i, **options)

    def namespace(self, adapter: Adapter, epoch: int, tp_rank: int, pp_rank: int) -> kvkey.KeyNamespace:
        return self._cache.get((adapter, epoch, tp_rank, pp_rank))


def _adapter_of(lora_request: Any) -> Adapter:
    if lora_request is None:
        return None
    path = getattr(lora_request, "lora_path", None) or getattr(lora_request, "path", None)
    if not path or not os.path.isdir(path):
        raise ConfigError("lora_request", f"the LoRA adapter {getattr(lora_request, 'lora_name', '?')!r} has no "
                                          f"local directory kvkey can fingerprint ({path!r})")
    return (str(lora_request.lora_name), str(path))


# ---------------------------------------------------------------- stores

_memory_stores: Dict[str, Any] = {}
_memory_lock = threading.Lock()


_ADDRESS_KEY = {"memory": "memory_name", "redis": "redis_url", "redis-cluster": "redis_nodes",
                "mooncake": "mooncake_master"}


def _make_store(s: Settings) -> Any:
    """The store the settings name; one that cannot be reached at start is ``ConfigError``
    naming its address key (once running, a failing store is misses: kvkey.Connector)."""
    from kvkey.stores import StoreError

    try:
        return _open_store(s)
    except (StoreError, OSError) as e:
        raise ConfigError(_ADDRESS_KEY[s.store], f"cannot reach the {s.store} store: {e}") from None


def _open_store(s: Settings) -> Any:
    o = dict(s.store_options)
    if s.store == "memory":
        from kvkey.stores import MemoryStore

        with _memory_lock:
            return _memory_stores.setdefault(o.get("memory_name", "default"), MemoryStore())
    if s.store == "redis":
        import redis  # type: ignore

        from kvkey.stores import RedisStore

        return RedisStore(redis.Redis.from_url(o.get("redis_url", "redis://127.0.0.1:6379/0")))
    if s.store == "redis-cluster":
        from redis.cluster import ClusterNode, RedisCluster  # type: ignore

        from kvkey.stores import RedisClusterStore

        nodes = []
        for part in o["redis_nodes"].split(","):
            host, _, port = part.strip().rpartition(":")
            if not host or not port.isdigit():
                raise ConfigError("redis_nodes", f"{part!r} is not host:port")
            nodes.append(ClusterNode(host, int(port)))
        return RedisClusterStore(RedisCluster(startup_nodes=nodes))
    from kvkey.stores import MooncakeStore

    kwargs = {k[len("mooncake_"):]: v for k, v in o.items() if k not in ("mooncake_master", "mooncake_metadata_server")}
    return MooncakeStore.connect(o["mooncake_master"], o.get("mooncake_metadata_server", "P2PHANDSHAKE"), **kwargs)


# ---------------------------------------------------------------- metadata


@dataclasses.dataclass
class _Transfer:
    req_id: str
    adapter: Adapter
    epoch: int
    hashes: List[bytes]
    block_ids: List[int]


@dataclasses.dataclass
class KvkeyConnectorMetadata(KVConnectorMetadata):
    """What the scheduler hands the workers for one step: the blocks to load and save."""

    loads: List[_Transfer] = dataclasses.field(default_factory=list)
    saves: List[_Transfer] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class _Request:
    adapter: Adapter
    epoch: int
    hashes: List[bytes]
    prompt_len: int
    hit_blocks: int = 0
    load: Optional[Tuple[int, int]] = None  # blocks [first, end) to load at the next step
    saved: int = 0  # blocks below this are in the store (saved, or verified at lookup)
    block_ids: List[int] = dataclasses.field(default_factory=list)


# ---------------------------------------------------------------- the connector


class KvkeyConnector(KVConnectorBase_V1):  # type: ignore[misc,valid-type]
    """kvkey's vLLM connector (module docstring). Refuses a configuration it cannot key
    with ``ConfigError`` naming the setting, so the engine stops at start."""

    def __init__(self, vllm_config: Any, role: Any, kv_cache_config: Any = None) -> None:
        super().__init__(vllm_config=vllm_config, role=role, kv_cache_config=kv_cache_config)
        self.settings = settings_from(vllm_config)
        self._ids = _Identities(self.settings)
        self._store = _make_store(self.settings)
        kv_role = getattr(vllm_config.kv_transfer_config, "kv_role", "kv_both") or "kv_both"
        self._loads_enabled = kv_role in ("kv_both", "kv_consumer")
        self._saves_enabled = kv_role in ("kv_both", "kv_producer")
        self._block_size = self.settings.block_size
        self._lock = threading.Lock()
        self._connectors: Dict[Tuple[Any, ...], kvkey.Connector] = {}
        self.epoch = 0
        self.weight_version = "default"
        self._updates = 0
        # scheduler state
        self._requests: Dict[str, _Request] = {}
        # worker state
        self._layers: List[Any] = []
        self._load_errors: Set[int] = set()
        self._tp_rank = self._pp_rank = 0
        if role == KVConnectorRole.SCHEDULER:
            if self.settings.load_failure_policy == "recompute":
                vllm_config.kv_transfer_config.kv_load_failure_policy = "recompute"
        else:
            try:
                from vllm.distributed.parallel_state import get_pp_group, get_tp_group  # type: ignore

                self._tp_rank, self._pp_rank = get_tp_group().rank_in_group, get_pp_group().rank_in_group
            except (AssertionError, ImportError, AttributeError):
                self._tp_rank = self._pp_rank = 0
        logger.info("kvkey connector (%s): store %s, tenant %r, kv dtype %s, layout %s", role, self.settings.store,
                    self.settings.tenant, self.settings.kv_dtype, self.settings.layout)

    # ------------------------------------------------------------ shared

    def _connector(self, adapter: Adapter, epoch: int, ranks: str) -> kvkey.Connector:
        key = (adapter, epoch, ranks)
        with self._lock:
            conn = self._connectors.get(key)
        if conn is None:
            ns = self._ids.namespace(adapter, epoch, self._tp_rank, self._pp_rank)
            conn = kvkey.Connector(self._store, ns.all_ranks() if ranks == "all" else [ns], metrics=_metrics)
            with self._lock:
                conn = self._connectors.setdefault(key, conn)
        return conn

    def set_weight_version(self, version: Any) -> int:
        """Moves to the weights epoch of vLLM weight version ``version``
        (``weights_epoch_of``); requests admitted from now on use it. Returns the epoch."""
        epoch = weights_epoch_of(version)
        with self._lock:
            self.weight_version, self.epoch = str(version), epoch
            self._connectors = {k: v for k, v in self._connectors.items() if k[1] == epoch}
        self._ids._cache.retain(lambda k: k[1] == epoch)
        logger.info("kvkey connector: weight version %r, weights epoch %d", str(version), epoch)
        return epoch

    def weights_changed(self, how: str) -> int:
        """The weights changed in place (``how``: the worker method) without a version yet:
        moves to an epoch no other engine uses (``weights_epoch_of`` of this connector's
        engine id and update count). Returns the epoch."""
        with self._lock:
            self._updates += 1
            n = self._updates
        engine = getattr(self._vllm_config.kv_transfer_config, "engine_id", None) or id(self)
        logger.info("kvkey connector: weights changed (%s) without a version yet", how)
        return self.set_weight_version(f"kvkey.unversioned:{engine}:{n}")

    # ------------------------------------------------------------ scheduler side

    def get_num_new_matched_tokens(self, request: Any, num_computed_tokens: int) -> Tuple[Optional[int], bool]:
        st = self._requests.get(request.request_id)
        if st is None:
            prompt = list(request.prompt_token_ids or [])
            try:
                adapter = _adapter_of(getattr(request, "lora_request", None))
                ns = self._ids.namespace(adapter, self.epoch, 0, 0)
                hashes = ns.block_hashes(prompt, salt=getattr(request, "cache_salt", None))
            except (ConfigError, kvkey.Error) as e:
                # A request kvkey cannot key (an adapter without a local directory, ...) goes
                # without the KV tier: never loaded, never saved; the engine runs on.
                logger.warning("kvkey connector: request %s goes without the KV tier: %s", request.request_id, e)
                adapter, hashes = None, []
            st = _Request(adapter=adapter, epoch=self.epoch, hashes=hashes, prompt_len=len(prompt))
            self._requests[request.request_id] = st
        st.load = None
        st.saved = max(st.saved, num_computed_tokens // self._block_size)
        if not self._loads_enabled or st.epoch != self.epoch or not st.hashes:
            return 0, False
        n = self._connector(st.adapter, st.epoch, "all").lookup(st.hashes, max_tokens=st.prompt_len - 1)
        st.hit_blocks = n
        first = num_computed_tokens // self._block_size
        # Saved are the blocks this request computes: not those the store has (n), nor vLLM's
        # local hits (first, above), which the request that computed them saved under its
        # own epoch (after a weight update they may predate it).
        st.saved = max(st.saved, n)
        if n <= first:
            return 0, False
        st.load = (first, n)
        return n * self._block_size - num_computed_tokens, False

    def update_state_after_alloc(self, request: Any, blocks: Any, num_external_tokens: int) -> None:
        st = self._requests.get(request.request_id)
        if st is None:
            return
        if num_external_tokens <= 0:
            st.load = None
            return
        st.block_ids = list(blocks.get_block_ids()[0])

    def build_connector_meta(self, scheduler_output: Any) -> KVConnectorMetadata:
        meta = KvkeyConnectorMetadata()
        so = scheduler_output
        steps: List[Tuple[str, int]] = []
        for new in so.scheduled_new_reqs:
            st = self._requests.get(new.req_id)
            if st is None:
                continue
            st.block_ids = list(new.block_ids[0])
            steps.append((new.req_id, new.num_computed_tokens + so.num_scheduled_tokens.get(new.req_id, 0)))
        cached = so.scheduled_cached_reqs
        for i, req_id in enumerate(cached.req_ids):
            st = self._requests.get(req_id)
            if st is None:
                continue
            ids = cached.new_block_ids[i]
            if req_id in cached.resumed_req_ids and ids is not None:
                st.block_ids = list(ids[0])
            elif ids is not None:
                st.block_ids.extend(ids[0])
            steps.append((req_id, cached.num_computed_tokens[i] + so.num_scheduled_tokens.get(req_id, 0)))
        for req_id, computed_after in steps:
            st = self._requests[req_id]
            if st.load is not None:
                first, end = st.load
                meta.loads.append(_Transfer(req_id, st.adapter, st.epoch, st.hashes[first:end],
                                            st.block_ids[first:end]))
                st.load = None
            full = min(computed_after, st.prompt_len, len(st.hashes) * self._block_size) // self._block_size
            full = min(full, len(st.block_ids))
            if self._saves_enabled and st.epoch == self.epoch and full > st.saved:
                meta.saves.append(_Transfer(req_id, st.adapter, st.epoch, st.hashes[st.saved:full],
                                            st.block_ids[st.saved:full]))
                st.saved = full
        return meta

    def request_finished(self, request: Any, block_ids: Any) -> Tuple[bool, Optional[Dict[str, Any]]]:
        self._requests.pop(request.request_id, None)
        return False, None

    # ------------------------------------------------------------ worker side

    def register_kv_caches(self, kv_caches: Mapping[str, Any]) -> None:
        from vllm.model_executor.models.utils import extract_layer_index  # type: ignore

        layers = sorted(kv_caches.items(), key=lambda kv: (extract_layer_index(kv[0]), kv[0]))
        views = []
        for name, t in layers:
            if t.device.type != "cpu":
                raise ConfigError("kv_caches", f"layer {name} is on {t.device}: kvkey's connector reads and writes "
                                               "host memory (vLLM's CPU engine)")
            b = t.view(torch.uint8) if t.dtype != torch.uint8 else t
            if not b[0].is_contiguous() or b.stride(0) != b[0].numel():
                raise ConfigError("kv_caches", f"layer {name}: a block is not contiguous at [block_id] "
                                               f"(shape {tuple(t.shape)}, strides {t.stride()})")
            views.append(b.numpy())
        size = sum(v[0].nbytes for v in views)
        ns = self._ids.namespace(None, 0, self._tp_rank, self._pp_rank)
        if ns.payload_size not in (None, size):
            raise ConfigError("kv_caches", f"a block of this worker's caches is {size} bytes over {len(views)} "
                                           f"layers, the identity's payload is {ns.payload_size} bytes")
        self._layers = views

    def _block(self, block_id: int) -> List[Any]:
        return [v[block_id] for v in self._layers]

    def start_load_kv(self, forward_context: Any, **kwargs: Any) -> None:
        meta = self._get_connector_metadata()
        if not isinstance(meta, KvkeyConnectorMetadata):
            return
        for t in meta.loads:
            try:
                conn = self._connector(t.adapter, t.epoch, "own")
                results = conn.load_into(t.hashes, [self._block(b) for b in t.block_ids])
            except Exception:  # noqa: BLE001 - never a wrong load, never a crashed engine
                logger.exception("kvkey connector: loading %d blocks of %s failed; vLLM recomputes them",
                                 len(t.block_ids), t.req_id)
                self._load_errors.update(t.block_ids)
                continue
            failed = [b for b, r in zip(t.block_ids, results) if not r.loaded]
            if failed:
                logger.warning("kvkey connector: %d of %d blocks of %s not loaded (%s); vLLM recomputes them",
                               len(failed), len(t.block_ids), t.req_id,
                               ", ".join(sorted({r.status for r in results if not r.loaded})))
                self._load_errors.update(failed)

    def wait_for_layer_load(self, layer_name: str) -> None:
        return None

    def save_kv_layer(self, layer_name: str, kv_layer: Any, attn_metadata: Any, **kwargs: Any) -> None:
        return None

    def wait_for_save(self) -> None:
        meta = self._get_connector_metadata()
        if not isinstance(meta, KvkeyConnectorMetadata):
            return
        for t in meta.saves:
            try:
                self._connector(t.adapter, t.epoch, "own").save(t.hashes, [self._block(b) for b in t.block_ids])
            except Exception:  # noqa: BLE001 - a failed save is a later miss, never a crash
                logger.exception("kvkey connector: saving %d blocks of %s failed", len(t.block_ids), t.req_id)

    def get_block_ids_with_load_errors(self) -> Set[int]:
        errors, self._load_errors = self._load_errors, set()
        return errors

    def shutdown(self) -> None:
        close = getattr(self._store, "close", None)
        if callable(close) and self.settings.store != "memory":
            close()


# ---------------------------------------------------------------- weight versions


#: The worker methods that change the weights in place (``collective_rpc`` names, vLLM 0.32's
#: ``gpu_worker.py``, which the CPU worker inherits).
WEIGHT_RPCS = frozenset({"update_weights", "finish_weight_update", "reload_weights", "reset_weights"})


def _kvkey_connector_of(engine_core: Any) -> Optional["KvkeyConnector"]:
    scheduler = getattr(engine_core, "scheduler", None)
    conn = scheduler.get_kv_connector() if scheduler is not None and hasattr(scheduler, "get_kv_connector") else None
    return conn if isinstance(conn, KvkeyConnector) else None


def _install_weight_version_hook() -> None:
    """``EngineCore.set_weight_version(v)`` also moves the scheduler's kvkey connector to
    the epoch of ``v``; ``EngineCore.collective_rpc`` of a method in ``WEIGHT_RPCS`` moves
    it to an epoch of its own (this engine's n-th update: shared with no other engine
    until a weight version names the weights)."""
    try:
        from vllm.v1.engine.core import EngineCore  # type: ignore
    except ImportError:  # pragma: no cover
        return
    if getattr(EngineCore.set_weight_version, "_kvkey", False):
        return
    set_version, rpc = EngineCore.set_weight_version, EngineCore.collective_rpc

    def set_weight_version(self: Any, weight_version: str) -> None:
        set_version(self, weight_version)
        conn = _kvkey_connector_of(self)
        if conn is not None:
            conn.set_weight_version(weight_version)

    def collective_rpc(self: Any, method: Any, *args: Any, **kwargs: Any) -> Any:
        result = rpc(self, method, *args, **kwargs)
        conn = _kvkey_connector_of(self) if isinstance(method, str) and method in WEIGHT_RPCS else None
        if conn is not None:
            conn.weights_changed(method)
        return result

    set_weight_version._kvkey = True  # type: ignore[attr-defined]
    EngineCore.set_weight_version = set_weight_version
    EngineCore.collective_rpc = collective_rpc


_install_weight_version_hook()
