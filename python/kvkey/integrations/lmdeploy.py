"""kvkey in lmdeploy's own Mooncake store KV connector, switched on at run time.

One call before the engine starts::

    from lmdeploy import PytorchEngineConfig, KVTransferConfig, pipeline
    from kvkey.integrations import lmdeploy as kvkey_lmdeploy

    config = PytorchEngineConfig(kv_transfer_config=KVTransferConfig(
        kv_connector="MooncakeStoreConnector", kv_role="kv_both",
        kv_connector_extra_config={"mooncake_config_path": "mooncake.json"}))
    kvkey_lmdeploy.enable(config, model_path="/models/Qwen2.5-0.5B-Instruct", tenant="team-a")
    pipe = pipeline("/models/Qwen2.5-0.5B-Instruct", backend_config=config)

``enable`` resolves the deployment's identity from lmdeploy's own configuration (the
model directory through ``kvkey.Identity.from_model_dir``, the KV format as lmdeploy's
cache engine resolves it, the adapters' weights), stores it in
``kv_connector_extra_config["kvkey"]`` (it travels with ``cache_config`` to every worker
process, and unpickling it there switches kvkey on in that process too) and puts kvkey's
components into lmdeploy's connector:

- ``lmdeploy/pytorch/kv_connector/mooncake/store/connector.py``, in
  ``MooncakeStoreConnector.__init__``: ``self.connector_scheduler =
  MooncakeStoreScheduler(cache_config)`` and ``self.connector_worker =
  MooncakeStoreWorker(cache_config, ...)`` look both classes up in that module when the
  connector is built (``build_kv_connector`` in ``kv_connector/factory.py`` imports the
  connector class at that point too). ``install()`` rebinds those two names to
  ``KvkeyStoreScheduler`` and ``KvkeyStoreWorker``, subclasses that behave exactly as
  lmdeploy's classes unless the configuration holds a ``"kvkey"`` entry.
- Weight updates (``BaseModelAgent.update_params`` / ``update_weights_from_distributed`` /
  ``update_weights_from_ipc`` in ``engine/model_agent/agent.py``, ``Engine.update_params``
  in ``engine/engine.py``): when a request with ``finished=True`` has been applied, the
  connector's weights epoch moves on, so KV from before the update is never read after
  it (its keys differ; a value read anyway is rejected naming ``model.weights_epoch``).

What changes inside the connector (everything else, threads, batching, leases, the
lookup RPC with ``lookup_async``, save leases, is lmdeploy's code):

- the scheduler hashes blocks with ``ns.block_hashes`` of the request's namespace (the
  adapter's, when the request has one) instead of ``build_prefix_block_hashes``; the
  "block hash" lmdeploy carries to the workers is that hash followed by a 32-byte tag of
  the adapter, so the workers (lookup, load, save) use the same namespace;
- keys are ``ns.store_key(h)`` (one object per distinct KV-head slice; replicas share it);
- the lookup counts a block only when its header verifies on every KV-head slice
  (``kvkey.Connector.lookup``);
- a save gathers the block's slice of every registered row into registered staging
  memory and stores ``header || bytes`` sealed with the payload's digest
  (``Connector.save`` with ``staging``);
- a load reads the value into staging memory, verifies header and bytes
  (``Connector.load_into`` with ``staging``) and only then copies the bytes into the
  block's rows (host rows in C++, on ``digest_threads`` threads; device rows with torch); a block
  that does not verify is reported as failed, through ``get_finished().invalid_block_ids``,
  which lmdeploy's scheduler turns into a failed load and recomputes;
- every lookup, load, save and rejection is counted in ``metrics()``.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import threading
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import kvkey

from . import _engine

__all__ = [
    "LAYOUT",
    "NO_ADAPTER",
    "SETTING",
    "ConfigError",
    "KvkeyStoreScheduler",
    "KvkeyStoreWorker",
    "Settings",
    "adapter_tag",
    "enable",
    "install",
    "installed",
    "kv_format",
    "make_settings",
    "metrics",
    "settings_from",
]

#: The key of ``kv_connector_extra_config`` that holds the settings.
SETTING = "kvkey"
#: The ``kv.layout`` of a value: lmdeploy's block slice of every registered KV row, in
#: registration order (``_scatter_block`` in worker_threads.py), for the rows lmdeploy 0.18 lays out.
LAYOUT = "lmdeploy.pytorch.mooncake_store.rows.v1"
#: The adapter tag of a request without adapter (32 zero bytes).
NO_ADAPTER = bytes(32)

logger = logging.getLogger("kvkey.integrations.lmdeploy")

_QUANT_POLICIES = {0: "none", 4: "int4", 8: "int8", 16: "fp8", 17: "fp8_e5m2", 42: "turbo_quant"}
_MODEL_DTYPES = ("auto", "float16", "bfloat16", "float32")


class ConfigError(_engine.EngineConfigError):
    """A configuration kvkey cannot make an identity from. ``setting`` names it."""

    integration = "kvkey.integrations.lmdeploy"


# ---------------------------------------------------------------- settings


def _restore(fields: Dict[str, Any]) -> "Settings":
    """Unpickling the settings (in a worker process) switches kvkey on there too."""
    install()
    return Settings(**fields)


@dataclasses.dataclass(frozen=True)
class Settings:
    """What ``enable`` resolved; the value of ``kv_connector_extra_config["kvkey"]``.

    ``kv_dtype`` and ``quant_*`` are the KV format as lmdeploy's cache engine stores it
    (``_resolve_kv_cache_dtype`` in ``engine/cache_engine/schema.py``), ``model_dtype`` the
    model's compute dtype (the dtype of lmdeploy's int4/int8 scales and zeros)."""

    model_path: str
    tenant: str
    kv_dtype: str
    model_dtype: str
    quant_policy: int
    quant_scheme: str = "none"
    quant_group_size: int = 0
    quant_zero_point: bool = False
    mla: bool = False
    revision: Optional[str] = None
    model_name: Optional[str] = None
    adapters: Tuple[Tuple[str, str], ...] = ()
    weights_epoch: int = 0
    single_tenant: bool = False
    staging_blocks: int = 32
    overrides: Optional[Tuple[Tuple[str, Any], ...]] = None
    digest_threads: int = 2

    def __reduce__(self) -> Any:
        return (_restore, (dataclasses.asdict(self),))


def kv_format(quant_policy: Any, kv_torch_dtype: Any, model_dtype: Any, head_dim: int,
              mla_kv_cache_dtype: Optional[str] = None) -> Tuple[str, str, int, bool]:
    """``(kv_dtype, quant_scheme, group_size, zero_point)`` of lmdeploy's KV cache.

    ``kv_torch_dtype`` is what lmdeploy stores the K/V rows in (``_resolve_kv_cache_dtype``);
    ``quant_policy`` one of lmdeploy's ``QuantPolicy`` values: 0 (none), 4 / 8 (int4 / int8,
    asymmetric per token and head: a scale and a zero point in the model's dtype per head
    vector, ``build_quant_cache_descs``), 16 / 17 (fp8 e4m3 / e5m2, per-tensor scale),
    42 (TurboQuant: 4-bit K, 2-bit V). Anything else is ``ConfigError`` naming
    ``quant_policy``."""
    try:
        qp = int(quant_policy)
    except (TypeError, ValueError):
        raise ConfigError("quant_policy", f"{quant_policy!r} is not an lmdeploy QuantPolicy") from None
    if isinstance(quant_policy, bool) or qp not in _QUANT_POLICIES:
        known = ", ".join(f"{k} ({v})" for k, v in _QUANT_POLICIES.items())
        raise ConfigError("quant_policy", f"{quant_policy!r} is not a quant_policy kvkey knows: {known}")
    if qp in (4, 8):
        return ("int4" if qp == 4 else "int8", f"lmdeploy.int{qp}.asym.token_head", head_dim, True)
    if qp == 42:
        return ("int4", "lmdeploy.turboquant.k4qjl.v2mse", head_dim, True)
    try:
        dtype = kvkey.kv_dtype_from_engine(str(kv_torch_dtype)).name
    except kvkey.InputError as e:
        raise ConfigError("kv_dtype", f"lmdeploy stores the KV cache as {kv_torch_dtype}, which kvkey does not know "
                                      f"({e})") from None
    if qp in (16, 17):
        return (dtype, "lmdeploy.fp8.per_tensor", 0, False)
    if mla_kv_cache_dtype == "fp8_ds_mla":
        return (dtype, "lmdeploy.fp8_ds_mla", 0, False)
    del model_dtype
    return (dtype, "none", 0, False)


def _model_config(model_path: str, dtype: str, overrides: Optional[Mapping[str, Any]], trust_remote_code: bool) -> Any:
    from lmdeploy.pytorch.config import ModelConfig  # type: ignore

    return ModelConfig.from_pretrained(model_path, trust_remote_code=trust_remote_code, dtype=dtype,
                                       hf_overrides=dict(overrides) if overrides else None)


def make_settings(*, model_path: Any, tenant: Optional[str] = None, quant_policy: Any = 0, dtype: str = "auto",
                  adapters: Optional[Mapping[str, Any]] = None, revision: Optional[str] = None,
                  model_name: Optional[str] = None, weights_epoch: int = 0, single_tenant: bool = False,
                  staging_blocks: int = 32, overrides: Optional[Mapping[str, Any]] = None,
                  trust_remote_code: bool = False, model_config: Any = None, digest_threads: int = 2) -> Settings:
    """Resolves the settings from lmdeploy's own configuration; every refusal is a
    ``ConfigError`` naming the setting (``tenant``, ``model_path``, ``dtype``,
    ``quant_policy``, ``kv_dtype``, ``adapters``, ``weights_epoch``, ``staging_blocks``,
    ``digest_threads``).

    ``digest_threads``: threads per worker that verify a load's blocks (and copy them
    into the KV cache) after its read, and gather and seal a save's before its write
    (``kvkey.Connector``'s option of that name).

    ``model_config``: lmdeploy's ``ModelConfig`` when the caller has it; else it is made
    with ``ModelConfig.from_pretrained(model_path, dtype=dtype, hf_overrides=overrides)``,
    as the engine makes it. The KV dtype is then lmdeploy's ``_resolve_kv_cache_dtype``."""
    tenant = _engine.resolve_tenant(
        ConfigError, tenant, single_tenant, both="single_tenant=True keeps the tenant empty; pass one or the other",
        missing="a tenant is required (enable(..., tenant='team-a'), or single_tenant=True for a Mooncake store no "
                "other deployment shares)")
    if model_path is None or not isinstance(model_path, (str, os.PathLike)):
        raise ConfigError("model_path", f"{model_path!r} is not a model directory")
    model_path = os.fspath(model_path)
    if not os.path.isdir(model_path) or not os.access(model_path, os.R_OK | os.X_OK):
        raise ConfigError("model_path", f"cannot read the model directory {model_path!r}")
    if dtype not in _MODEL_DTYPES:
        raise ConfigError("dtype", f"{dtype!r} is not an lmdeploy model dtype ({', '.join(_MODEL_DTYPES)})")
    if isinstance(weights_epoch, bool) or not isinstance(weights_epoch, int) or weights_epoch < 0:
        raise ConfigError("weights_epoch", f"{weights_epoch!r} must be a non-negative int")
    if isinstance(staging_blocks, bool) or not isinstance(staging_blocks, int) or staging_blocks < 1:
        raise ConfigError("staging_blocks", f"{staging_blocks!r} must be an int of at least 1")
    if isinstance(digest_threads, bool) or not isinstance(digest_threads, int) or not 1 <= digest_threads <= 256:
        raise ConfigError("digest_threads", f"{digest_threads!r} must be an int in [1, 256]")
    kv_format(quant_policy, "float16", "float16", 1)  # refuses an unknown quant_policy before reading anything
    if model_config is None:
        try:
            model_config = _model_config(model_path, dtype, overrides, trust_remote_code)
        except Exception as e:  # noqa: BLE001 - lmdeploy and transformers raise many kinds
            raise ConfigError("model_path", f"lmdeploy cannot read the model configuration in {model_path!r}: "
                                            f"{type(e).__name__}: {e}") from None
    from lmdeploy.messages import QuantPolicy  # type: ignore
    from lmdeploy.pytorch.engine.cache_engine.schema import _resolve_kv_cache_dtype  # type: ignore

    kv_torch_dtype = _resolve_kv_cache_dtype(model_config, QuantPolicy(int(quant_policy)))
    model_dtype = _engine.dtype_name(model_config.dtype)
    head_dim = int(model_config.head_dim or 0)
    mla_dtype = getattr(model_config, "mla_kv_cache_dtype", None)
    kv_dtype, scheme, group, zero = kv_format(quant_policy, kv_torch_dtype, model_dtype, head_dim, mla_dtype)
    try:
        kvkey.kv_dtype_from_engine(model_dtype)
    except kvkey.InputError as e:
        raise ConfigError("dtype", f"the model dtype {model_dtype} is not one kvkey knows ({e})") from None
    pairs: List[Tuple[str, str]] = []
    for name, path in sorted((adapters or {}).items()):
        if not isinstance(name, str) or not name:
            raise ConfigError("adapters", f"adapter name {name!r} must be a non-empty string")
        p = os.fspath(path)
        if not os.path.isdir(p):
            raise ConfigError("adapters", f"cannot read the directory {p!r} of adapter {name!r}")
        pairs.append((name, p))
    s = Settings(model_path=model_path, tenant=tenant, kv_dtype=kv_dtype, model_dtype=model_dtype,
                 quant_policy=int(quant_policy), quant_scheme=scheme, quant_group_size=group, quant_zero_point=zero,
                 mla=mla_dtype is not None, revision=revision, model_name=model_name, adapters=tuple(pairs),
                 weights_epoch=weights_epoch, single_tenant=single_tenant, staging_blocks=staging_blocks,
                 overrides=tuple(sorted(overrides.items())) if overrides else None, digest_threads=digest_threads)
    # Build the identity once here, so that an unreadable model directory or adapter, a
    # missing revision or an invalid field stops the caller now, naming it.
    _Identities(s, block_size=64, tp_size=1).namespace(None, 0, 0)
    for name, _ in pairs:
        _Identities(s, block_size=64, tp_size=1).namespace(name, 0, 0)
    return s


def enable(engine_config: Any, *, model_path: Any, tenant: Optional[str] = None, **options: Any) -> Settings:
    """Switches kvkey on for an lmdeploy ``PytorchEngineConfig`` whose
    ``kv_transfer_config`` uses ``MooncakeStoreConnector``: resolves the settings
    (``make_settings`` with the config's ``quant_policy``, ``dtype``, ``adapters`` and
    ``hf_overrides``), stores them in ``kv_connector_extra_config["kvkey"]`` and calls
    ``install()``. Call it before the engine starts. Returns the settings."""
    transfer = getattr(engine_config, "kv_transfer_config", None)
    if transfer is None or getattr(transfer, "kv_connector", None) != "MooncakeStoreConnector":
        raise ConfigError("kv_transfer_config", "enable() needs a PytorchEngineConfig whose kv_transfer_config has "
                                                "kv_connector='MooncakeStoreConnector'")
    for key in ("quant_policy", "dtype", "adapters"):
        if key in options:
            raise ConfigError(key, f"{key} comes from the engine config (PytorchEngineConfig.{key}); "
                                   "set it there")
    s = make_settings(model_path=model_path, tenant=tenant, quant_policy=getattr(engine_config, "quant_policy", 0),
                      dtype=getattr(engine_config, "dtype", "auto") or "auto",
                      adapters=getattr(engine_config, "adapters", None),
                      overrides=options.pop("overrides", getattr(engine_config, "hf_overrides", None)), **options)
    if transfer.kv_connector_extra_config is None:
        transfer.kv_connector_extra_config = {}
    transfer.kv_connector_extra_config[SETTING] = s
    install()
    return s


def settings_from(cache_config: Any) -> Optional[Settings]:
    """The settings of a connector's ``cache_config``, or None (kvkey is off: lmdeploy's
    own behaviour). A ``"kvkey"`` entry that is a dict is resolved with
    ``make_settings(**entry)``; anything else is ``ConfigError``."""
    transfer = getattr(cache_config, "kv_transfer_config", None)
    extra = getattr(transfer, "kv_connector_extra_config", None) or {}
    entry = extra.get(SETTING)
    if entry is None:
        return None
    if isinstance(entry, Settings):
        s = entry
    elif isinstance(entry, Mapping):
        s = make_settings(**dict(entry))
        extra[SETTING] = s
    else:
        raise ConfigError(SETTING, f"kv_connector_extra_config['kvkey'] is a {type(entry).__name__}; use "
                                   "kvkey.integrations.lmdeploy.enable()")
    if int(getattr(cache_config, "quant_policy", 0)) != s.quant_policy:
        raise ConfigError("quant_policy", f"the engine runs quant_policy={int(cache_config.quant_policy)} but kvkey "
                                          f"was enabled for quant_policy={s.quant_policy}")
    return s


# ---------------------------------------------------------------- identities


_metrics = kvkey.Metrics()


def metrics() -> kvkey.Metrics:
    """This process's kvkey metrics (lookups, loads, saves, rejections by reason and
    field); ``kvkey.prometheus`` exports them."""
    return _metrics


def adapter_tag(name: Optional[str]) -> bytes:
    """The 32 bytes that follow a block hash in lmdeploy's transport for a request of
    adapter ``name`` (``NO_ADAPTER`` for none)."""
    return NO_ADAPTER if not name else kvkey.fingerprint("lmdeploy.adapter\0" + name)


class _Identities:
    """The namespaces of one process: per (adapter, epoch, rank), built on demand."""

    def __init__(self, s: Settings, *, block_size: int, tp_size: int) -> None:
        self.s = s
        self.block_size = block_size
        self.tp_size = tp_size
        self.epoch = s.weights_epoch
        self._lock = threading.Lock()
        self._cache = _engine.NamespaceCache(
            lambda k: _engine.namespace_of(ConfigError, self._identity(*k), single_tenant=s.single_tenant))
        self._tags = {adapter_tag(name): name for name, _ in s.adapters}
        self._tags[NO_ADAPTER] = None
        self._dirs = dict(s.adapters)

    def adapter_of(self, tag: bytes) -> Optional[str]:
        try:
            return self._tags[bytes(tag)]
        except KeyError:
            raise KeyError("a block's adapter tag names no adapter of kvkey's settings") from None

    def _identity(self, adapter: Optional[str], epoch: int, tp_rank: int) -> kvkey.Identity:
        s = self.s
        if adapter is not None and adapter not in self._dirs:
            raise ConfigError("adapters", f"the request's adapter {adapter!r} is not in the engine's adapters "
                                          f"({sorted(self._dirs)})")
        try:
            kv_dtype: Any = kvkey.kv_dtype_from_string(s.kv_dtype)
            # The quant layout goes in with the dtype: an integer KV dtype without one is refused.
            quant = None
            if s.quant_scheme != "none":
                quant = kvkey.Quant(scheme=s.quant_scheme, group_size=s.quant_group_size,
                                    scale_dtype=kvkey.kv_dtype_from_engine(s.model_dtype) if s.quant_zero_point
                                    else None, zero_point=s.quant_zero_point)
        except kvkey.Error as e:
            raise ConfigError(_engine.setting_of(e), str(e)) from None
        i = _engine.model_identity(
            ConfigError, s.model_path, tenant=s.tenant if not s.single_tenant else None, kv_dtype=kv_dtype,
            block_size=self.block_size, layout=LAYOUT, tp_size=self.tp_size, tp_rank=tp_rank,
            adapter_dir=self._dirs.get(adapter) if adapter else None, adapter_name=adapter,
            revision=s.revision, name=s.model_name, weights_epoch=epoch,
            overrides=dict(s.overrides) if s.overrides else None, single_tenant=s.single_tenant, quant=quant)
        i.kv.mla = i.kv.mla or s.mla
        return i

    def namespace(self, adapter: Optional[str], tp_rank: int, epoch: Optional[int] = None) -> kvkey.KeyNamespace:
        return self._cache.get((adapter, self.epoch if epoch is None else epoch, tp_rank))

    def rotate(self, epoch: Optional[int] = None) -> int:
        with self._lock:
            self.epoch = e = self.epoch + 1 if epoch is None else int(epoch)
        self._cache.retain(lambda k: k[1] == e)
        return e


def _split(entry: Any) -> Tuple[bytes, bytes]:
    b = bytes(entry)
    if len(b) != 64:
        raise ValueError(f"a kvkey block entry is 64 bytes (block hash, adapter tag), got {len(b)}")
    return b[:32], b[32:]


# ---------------------------------------------------------------- scheduler


def _store_module() -> Any:
    try:
        from lmdeploy.pytorch.kv_connector.mooncake.store import (  # type: ignore
            connector, scheduler, worker, worker_threads)
    except ImportError as e:
        raise ImportError("kvkey.integrations.lmdeploy needs lmdeploy >= 0.18.0 with its Mooncake store connector "
                          f"(lmdeploy.pytorch.kv_connector.mooncake.store) and what it imports: "
                          f"scripts/venv.sh lmdeploy mooncake ({e})") from e
    return connector, scheduler, worker, worker_threads


_connector_mod, _scheduler_mod, _worker_mod, _threads_mod = _store_module()
_LegacyScheduler: Any = _scheduler_mod.MooncakeStoreScheduler
_LegacyWorker: Any = _worker_mod.MooncakeStoreWorker
_LegacySender: Any = _threads_mod.KVCacheStoreSendingThread
_LegacyReceiver: Any = _threads_mod.KVCacheStoreRecvingThread
_RequestHashTracker: Any = _scheduler_mod._RequestHashTracker


class KvkeyStoreScheduler(_LegacyScheduler):  # type: ignore[misc,valid-type]
    """lmdeploy's ``MooncakeStoreScheduler``; with kvkey's settings, the block hashes are
    kvkey's chain (``ns.block_hashes``) followed by the request's adapter tag."""

    def __init__(self, cache_config: Any) -> None:
        s = settings_from(cache_config)
        self.kvkey_identities: Optional[_Identities] = None
        if s is not None:
            ids = _Identities(s, block_size=int(cache_config.block_size), tp_size=1)
            ids.namespace(None, 0)  # a bad configuration stops the engine here, naming the setting
            self.kvkey_identities = ids
        super().__init__(cache_config)

    def _get_request_block_hashes(self, request: Any, req_id: int, token_len: int, block_size: int) -> Any:
        ids = self.kvkey_identities
        if ids is None:
            return super()._get_request_block_hashes(request, req_id, token_len, block_size)
        # As lmdeploy's (scheduler.py, _get_request_block_hashes): cached per request,
        # extended only by newly full blocks, reset when the adapter (or the epoch) changes.
        num_blocks = token_len // block_size
        adapter = request.adapter_name or None
        epoch = ids.epoch
        identity = f"{adapter or ''}\0e{epoch}"
        tracker = self._request_hash_trackers.get(req_id)
        if tracker is None or tracker.adapter_identity != identity:
            tracker = _RequestHashTracker(adapter_identity=identity)
            self._request_hash_trackers[req_id] = tracker
        if num_blocks <= len(tracker.block_hashes):
            return tracker.block_hashes[:num_blocks]
        ns = ids.namespace(adapter, 0, epoch)
        tag = adapter_tag(adapter)
        previous = [bytes(e[:32]) for e in tracker.block_hashes]
        tokens = request.all_ids[:token_len]
        new = ns.block_hashes(tokens, previous=previous)[len(previous):]
        tracker.block_hashes = tuple(tracker.block_hashes) + tuple(h + tag for h in new)
        return tracker.block_hashes

    def rotate_epoch(self, epoch: Optional[int] = None) -> int:
        """Moves to the next weights epoch (or ``epoch``); cached hashes are dropped."""
        ids = self.kvkey_identities
        if ids is None:
            raise RuntimeError("kvkey is not enabled for this connector")
        self._request_hash_trackers.clear()
        self._lookup_plans.clear()
        return ids.rotate(epoch)


# ---------------------------------------------------------------- worker


class _WorkerKvkey:
    """kvkey's state in one worker: namespaces, the store, the rows and staging memory."""

    def __init__(self, s: Settings, cache_config: Any, tp_rank: int, tp_size: int, replicas: int) -> None:
        self.s = s
        self.ids = _Identities(s, block_size=int(cache_config.block_size), tp_size=tp_size)
        self.tp_rank = tp_rank
        self.replicas = replicas
        self.shards = tp_size // replicas
        self.ids.namespace(None, tp_rank)  # a bad configuration stops the engine here, naming the setting
        self.store: Any = None
        self.rows: List[Any] = []
        self.row_sizes: Tuple[int, ...] = ()
        self._row_views: Optional[List[memoryview]] = None
        self.payload_size = 0
        self._conns: Dict[Tuple[Optional[str], int, str], kvkey.Connector] = {}
        self._slots: List[kvkey.Slots] = []
        self._lock = threading.Lock()

    def attach(self, client: Any) -> None:
        self.store = _fragmented_store(client)

    def set_rows(self, rows: List[Any], row_sizes: Tuple[int, ...]) -> None:
        import torch

        self.rows = [r.reshape(-1).view(torch.uint8) for r in rows]
        self.row_sizes = tuple(row_sizes)
        # Rows in host memory are gathered and scattered by the connector, in C++ (torch's
        # copy_ of many small slices costs more than the store's transfer of them); device
        # rows go through torch.
        host = all(r.device.type == "cpu" for r in self.rows)
        self._row_views = [memoryview(r.numpy()) for r in self.rows] if host else None
        self.payload_size = sum(row_sizes)
        self.store.fragments = _fragments(kvkey.envelope_size + self.payload_size)

    def connector(self, adapter: Optional[str], kind: str) -> kvkey.Connector:
        epoch = self.ids.epoch
        k = (adapter, epoch, kind)
        with self._lock:
            c = self._conns.get(k)
        if c is None:
            if kind == "lookup":
                ranks = [self.ids.namespace(adapter, r * self.replicas, epoch) for r in range(self.shards)]
            else:
                ranks = [self.ids.namespace(adapter, self.tp_rank, epoch)]
            c = kvkey.Connector(self.store, ranks, metrics=_metrics, payload_size=self.payload_size,
                                digest_threads=self.s.digest_threads if kind == "rank" else 1)
            with self._lock:
                self._conns[k] = c
        return c

    def rotate(self, epoch: Optional[int] = None) -> int:
        with self._lock:
            self._conns.clear()
        return self.ids.rotate(epoch)

    def slots(self) -> kvkey.Slots:
        s = kvkey.Slots(self.store, self.s.staging_blocks, self.payload_size)
        with self._lock:
            self._slots.append(s)
        return s

    def close(self) -> None:
        """Unregisters the staging memory; before lmdeploy closes the client."""
        with self._lock:
            slots, self._slots = self._slots, []
            self._conns.clear()
        for s in slots:
            s.close()
        if self.store is not None:
            self.store.close()  # its scratch memory; the client is lmdeploy's and stays open
            self.store = None

    def groups(self, entries: Sequence[Any]) -> Dict[Optional[str], List[int]]:
        out: Dict[Optional[str], List[int]] = {}
        for i, e in enumerate(entries):
            out.setdefault(self.ids.adapter_of(_split(e)[1]), []).append(i)
        return out

    def gather(self, block_id: int, slots: kvkey.Slots, n: int) -> None:
        """The block's slice of every row, in registration order, into slot ``n``'s payload."""
        self._copy(block_id, slots, n, into_rows=False)

    def scatter(self, block_id: int, slots: kvkey.Slots, n: int) -> None:
        """Slot ``n``'s payload into the block's slice of every row."""
        self._copy(block_id, slots, n, into_rows=True)

    def destinations(self, block_ids: Sequence[int]) -> Optional[List[List[memoryview]]]:
        """Each block's slice of every row, in registration order (a block's payload):
        for ``Connector.save`` and ``load_into`` with staging. None: device rows."""
        if self._row_views is None:
            return None
        for b in block_ids:
            self._check_block(b)
        return [[v[b * size:(b + 1) * size] for v, size in zip(self._row_views, self.row_sizes)] for b in block_ids]

    def _check_block(self, block_id: int) -> None:
        for row, size in zip(self.rows, self.row_sizes):
            if not 0 <= block_id < row.numel() // size:
                raise ValueError(f"block id {block_id} is outside the KV cache ({row.numel() // size} blocks)")

    def _copy(self, block_id: int, slots: kvkey.Slots, n: int, into_rows: bool) -> None:
        """Rows through torch (rows on a device): one transfer of the block's payload
        between the slot and the rows' device, the row slices cut there."""
        import torch

        self._check_block(block_id)
        payload = _payload(_slot_tensor(slots), slots, n)
        device = self.rows[0].device
        if any(r.device != device for r in self.rows):
            on_device = None  # rows on several devices: slice by slice
        elif into_rows:
            on_device = payload.to(device)  # the slot itself where the rows are in host memory
        else:
            on_device = payload if device.type == "cpu" else torch.empty_like(payload, device=device)
        at = 0
        for row, size in zip(self.rows, self.row_sizes):
            block = row[block_id * size:(block_id + 1) * size]
            part = (payload if on_device is None else on_device)[at:at + size]
            if into_rows:
                block.copy_(part)
            else:
                part.copy_(block)
            at += size
        if not into_rows and on_device is not None and on_device is not payload:
            payload.copy_(on_device)


_FRAGMENT = 256 << 10


def _fragments(value_size: int) -> Tuple[int, ...]:
    """A staging slot's value as Mooncake transfers it: about 256 KiB per fragment
    (bench/lmdeploy_bench.py moved 1 MiB and 4 MiB blocks fastest so; one contiguous
    fragment per value, and lmdeploy's 64 KiB row slices, were slower). The first
    fragment takes the remainder."""
    n = max(1, round(value_size / _FRAGMENT))
    return (value_size - (n - 1) * (value_size // n),) + (value_size // n,) * (n - 1)


def _fragmented_store(client: Any) -> Any:
    """A ``kvkey.stores.MooncakeStore`` over lmdeploy's client whose zero-copy writes and
    reads of whole values (``put_from``, ``get_into_registered``: a staging slot, header
    then payload) go as lmdeploy's own transfers go, ``batch_put_from_multi_buffers`` /
    ``batch_get_into_multi_buffers``, the slot in ``fragments`` (``_fragments``: Mooncake's
    TCP transport moves one contiguous megabyte slower than the same bytes in a few
    fragments). Anything else, and a read whose value is not this deployment's size, is
    ``MooncakeStore``'s."""
    from kvkey.stores.mooncake import OK, MooncakeStore

    class FragmentedMooncakeStore(MooncakeStore):
        fragments: Tuple[int, ...] = ()

        def _split(self, address: int, size: int) -> Optional[Tuple[List[int], List[int]]]:
            if sum(self.fragments) != size:
                return None
            addrs, at = [], address
            for f in self.fragments:
                addrs.append(at)
                at += f
            return addrs, list(self.fragments)

        def put_from(self, keys: Sequence[str], addresses: Sequence[int], sizes: Sequence[int]) -> Any:
            parts = [self._split(a, n) for a, n in zip(addresses, sizes)]
            if not keys or any(p is None for p in parts):
                return super().put_from(keys, addresses, sizes)
            from mooncake.store import ReplicateConfig  # type: ignore

            keys = list(keys)
            codes = self._codes("batch_put_from_multi_buffers", self._call(
                "batch_put_from_multi_buffers", self.client.batch_put_from_multi_buffers, keys,
                [p[0] for p in parts], [p[1] for p in parts], ReplicateConfig()), len(keys))  # type: ignore[index]
            if all(c == OK for c in codes):
                return [True] * len(keys)
            redo = [i for i, c in enumerate(codes) if c != OK]  # busy, or there already: MooncakeStore's upsert
            again = super().put_from([keys[i] for i in redo], [addresses[i] for i in redo], [sizes[i] for i in redo])
            done = [True] * len(keys)
            for i, ok in zip(redo, again):
                done[i] = bool(ok)
            errors = {redo[j]: e for j, e in getattr(again, "errors", {}).items()}
            return self._replies(done, errors)

        def get_into_registered(self, keys: Sequence[str], addresses: Sequence[int], sizes: Sequence[int]) -> Any:
            parts = [self._split(a, n) for a, n in zip(addresses, sizes)]
            if not keys or any(p is None for p in parts):
                return super().get_into_registered(keys, addresses, sizes)
            keys = list(keys)
            codes = self._codes("batch_get_into_multi_buffers", self._call(
                "batch_get_into_multi_buffers", self.client.batch_get_into_multi_buffers, keys,
                [p[0] for p in parts], [p[1] for p in parts]), len(keys))  # type: ignore[index]
            out: List[Optional[int]] = [c if c >= 0 else None for c in codes]
            redo = [i for i, c in enumerate(codes) if c < 0]  # missing, or not this size: MooncakeStore's read
            if not redo:
                return out
            again = super().get_into_registered([keys[i] for i in redo], [addresses[i] for i in redo],
                                                [sizes[i] for i in redo])
            for i, v in zip(redo, again):
                out[i] = v
            errors = {redo[j]: e for j, e in getattr(again, "errors", {}).items()}
            return self._replies(out, errors)

    return FragmentedMooncakeStore(client)


def _slot_tensor(slots: kvkey.Slots) -> Any:
    import torch

    return torch.frombuffer(slots.view, dtype=torch.uint8)


def _payload(t: Any, slots: kvkey.Slots, i: int) -> Any:
    at = i * slots.stride + kvkey.envelope_size
    return t[at:at + slots.payload_size]


class _KvkeySender(_LegacySender):  # type: ignore[misc,valid-type]
    """lmdeploy's sending thread: same queue, replica split, existence check and
    completion; the keys are kvkey's and each value is sealed (header + bytes)."""

    def __init__(self, *, kvkey_state: _WorkerKvkey, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.kvkey = kvkey_state
        self._slots: Optional[kvkey.Slots] = None

    def _owned_entries(self, request: Any) -> Tuple[List[str], List[int]]:
        self._owned_hashes: List[Any] = []
        if not (len(request.block_ids) == len(request.block_hashes) == len(request.logical_block_ids)):
            raise ValueError("Mooncake save request block fields must have equal lengths")
        k = self.kvkey
        keys, block_ids = [], []
        for suffix_index, (block_id, entry) in enumerate(zip(request.block_ids, request.block_hashes)):
            if (request.start_block + suffix_index) % k.replicas != self.replica_rank:
                continue  # as lmdeploy: one replica of each KV-head slice saves a block
            h, tag = _split(entry)
            keys.append(k.ids.namespace(k.ids.adapter_of(tag), k.tp_rank).store_key(h))
            block_ids.append(block_id)
            self._owned_hashes.append(entry)
        return keys, block_ids

    def _put_missing(self, request: Any, keys: List[str], block_ids: List[int], missing: List[int]) -> bool:
        k = self.kvkey
        if self._slots is None:
            self._slots = k.slots()
        slots = self._slots
        entries = [self._owned_hashes[i] for i in missing]
        ids = [block_ids[i] for i in missing]
        ok = True
        for adapter, idx in k.groups(entries).items():
            conn = k.connector(adapter, "rank")
            for at in range(0, len(idx), slots.count):
                part = idx[at:at + slots.count]
                hashes = [_split(entries[i])[0] for i in part]
                rows = k.destinations([ids[i] for i in part])
                if rows is not None:  # host rows: gathered into the slots and sealed in C++
                    stored = conn.save(hashes, rows, staging=slots, indices=list(range(len(part))))
                else:
                    for n, i in enumerate(part):
                        k.gather(ids[i], slots, n)
                    stored = conn.save_from(hashes, slots, list(range(len(part))))
                ok = ok and stored == len(part)
        return ok


class _KvkeyReceiver(_LegacyReceiver):  # type: ignore[misc,valid-type]
    """lmdeploy's receiving thread: same queue and completion; each value is read into
    staging memory and verified there, and only verified bytes are copied into the
    block's rows. The block IDs of the others are returned as failed (lmdeploy's
    invalid-block path)."""

    def __init__(self, *, kvkey_state: _WorkerKvkey, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.kvkey = kvkey_state
        self._slots: Optional[kvkey.Slots] = None

    def _load(self, request: Any) -> set:
        k = self.kvkey
        if self._slots is None:
            self._slots = k.slots()
        slots = self._slots
        entries = list(request.block_hashes)
        failed = set()
        for adapter, idx in k.groups(entries).items():
            conn = k.connector(adapter, "rank")
            for at in range(0, len(idx), slots.count):
                part = idx[at:at + slots.count]
                hashes = [_split(entries[i])[0] for i in part]
                ids = [request.block_ids[i] for i in part]
                dest = k.destinations(ids)
                if dest is not None:  # host rows: verified in the slots, copied into the rows in C++
                    results = conn.load_into(hashes, dest, staging=slots, indices=list(range(len(part))))
                else:
                    results = conn.load_into(hashes, slots, indices=list(range(len(part))))
                for n, (block_id, r) in enumerate(zip(ids, results)):
                    if r.loaded:
                        if dest is None:
                            k.scatter(block_id, slots, n)
                    else:
                        failed.add(block_id)
                        if r.verdict is not None:
                            logger.warning("kvkey rejected block %d of request %s: %s (%s)", block_id,
                                           request.request_id, r.verdict.reason, r.verdict.field)
        return failed


class KvkeyStoreWorker(_LegacyWorker):  # type: ignore[misc,valid-type]
    """lmdeploy's ``MooncakeStoreWorker``; with kvkey's settings its threads, keys,
    lookup and values are kvkey's (see the module's doc)."""

    def __init__(self, cache_config: Any, *, global_rank: int = 0, tp_rank: int = 0, tp_size: int = 1,
                 kv_head_replica_num: int = 1, store_factory: Any = None, replicate_config: Any = None) -> None:
        s = settings_from(cache_config)
        self.kvkey: Optional[_WorkerKvkey] = None
        if s is not None:
            if tp_size <= 0 or tp_size % kv_head_replica_num:
                raise ValueError(f"tp_size ({tp_size}) must be divisible by kv_head_replica_num "
                                 f"({kv_head_replica_num})")
            # Before lmdeploy connects to the store: a bad configuration stops here.
            self.kvkey = _WorkerKvkey(s, cache_config, tp_rank, tp_size, kv_head_replica_num)
        super().__init__(cache_config, global_rank=global_rank, tp_rank=tp_rank, tp_size=tp_size,
                         kv_head_replica_num=kv_head_replica_num, store_factory=store_factory,
                         replicate_config=replicate_config)
        if self.kvkey is not None:
            self.kvkey.attach(self.store)

    def register_kv_caches(self, kv_caches: Mapping[str, Any]) -> None:
        if self.kvkey is not None and kv_caches:
            registrations, _ = self._build_registrations(kv_caches)
            rows = [row for _, row in self._iter_cache_rows(kv_caches)]
            self.kvkey.set_rows(rows, self._prepare_transfer_layout(registrations))
        super().register_kv_caches(kv_caches)

    def _thread_args(self, callback: Any) -> Dict[str, Any]:
        return dict(store=self.store, registrations=self._registered_regions, row_block_sizes=self._row_block_sizes,
                    num_gpu_blocks=self._cache_config.num_gpu_blocks, key_metadata=self.key_metadata,
                    global_rank=self.global_rank, tp_rank=self.tp_rank, tp_size=self.tp_size,
                    completion_callback=callback)

    def _start_receiver(self) -> None:
        if self.kvkey is None:
            return super()._start_receiver()
        if self.kv_role not in ("kv_consumer", "kv_both") or self.kv_recv_thread is not None:
            return None
        if self._registered_regions is None or self.store is None:
            raise RuntimeError("Mooncake receiver cannot start before KV cache registration")
        receiver = _KvkeyReceiver(kvkey_state=self.kvkey, **self._thread_args(self._mark_load_finished))
        receiver.start()
        self.kv_recv_thread = receiver
        return None

    def _start_sender(self) -> None:
        if self.kvkey is None:
            return super()._start_sender()
        if self.kv_role not in ("kv_producer", "kv_both") or self.kv_send_thread is not None:
            return None
        if self._registered_regions is None or self.store is None:
            raise RuntimeError("Mooncake sender cannot start before KV cache registration")
        sender = _KvkeySender(kvkey_state=self.kvkey, replicate_config=self._replicate_config,
                              **self._thread_args(self._mark_save_finished))
        sender.start()
        self.kv_send_thread = sender
        return None

    def lookup(self, token_len: int, block_hashes: Sequence[bytes]) -> int:
        k = self.kvkey
        if k is None:
            return int(super().lookup(token_len, block_hashes))
        if self.store is None or k.store is None:
            return 0
        block_size = k.ids.block_size
        full = min(token_len // block_size, len(block_hashes))
        if full == 0:
            return 0
        entries = [block_hashes[i] for i in range(full)]
        tags = {_split(e)[1] for e in entries}
        if len(tags) != 1:
            return 0
        try:
            adapter = k.ids.adapter_of(next(iter(tags)))
        except KeyError:
            return 0
        conn = k.connector(adapter, "lookup")
        blocks = conn.lookup([_split(e)[0] for e in entries])
        return int(blocks) * block_size

    def rotate_epoch(self, epoch: Optional[int] = None) -> int:
        """Moves to the next weights epoch (or ``epoch``)."""
        if self.kvkey is None:
            raise RuntimeError("kvkey is not enabled for this connector")
        return self.kvkey.rotate(epoch)

    def shutdown(self) -> None:
        k = self.kvkey
        if k is None:
            return super().shutdown()
        # lmdeploy's order (worker.py:491): the lookup server, the receiver, the sender,
        # then the client; kvkey's registered memory goes after the threads, before the client.
        for name in ("lookup_server", "kv_recv_thread", "kv_send_thread"):
            part = getattr(self, name)
            setattr(self, name, None)
            if part is not None:
                part.close()
        k.close()
        return super().shutdown()


# ---------------------------------------------------------------- install


_installed = False
_install_lock = threading.Lock()


def _rotate_connector(conn: Any) -> None:
    for part in (getattr(conn, "connector_scheduler", None), getattr(conn, "connector_worker", None)):
        if isinstance(part, (KvkeyStoreScheduler, KvkeyStoreWorker)) and (
                getattr(part, "kvkey_identities", None) is not None or getattr(part, "kvkey", None) is not None):
            epoch = part.rotate_epoch()
            logger.info("kvkey: weights updated, epoch %d", epoch)


def _completed(request: Any, result: Any) -> bool:
    """Whether a weight-update call ended an update: a request with ``finished=True``
    (``update_params``, ``update_weights_from_distributed``), or, for a request without that
    flag (``update_weights_from_ipc``: one call is a whole update), a ``(True, message)``
    result. A ``(False, message)`` result never is."""
    if isinstance(result, tuple) and result and result[0] is False:
        return False
    if hasattr(request, "finished"):
        return bool(request.finished)
    return isinstance(result, tuple) and bool(result) and result[0] is True


def _connector_of(obj: Any, where: str) -> Any:
    if where == "agent":
        return getattr(obj, "kv_connector", None)
    return getattr(getattr(obj, "scheduler", None), "kv_connector", None)


def _after_update(method: Any, where: str) -> Any:
    import asyncio
    import functools

    if asyncio.iscoroutinefunction(method):
        @functools.wraps(method)
        async def wrapped_async(self: Any, request: Any, *args: Any, **kwargs: Any) -> Any:
            result = await method(self, request, *args, **kwargs)
            conn = _connector_of(self, where)
            if conn is not None and _completed(request, result):
                _rotate_connector(conn)
            return result

        wrapped_async._kvkey = True  # type: ignore[attr-defined]
        return wrapped_async

    @functools.wraps(method)
    def wrapped(self: Any, request: Any, *args: Any, **kwargs: Any) -> Any:
        result = method(self, request, *args, **kwargs)
        conn = _connector_of(self, where)
        if conn is not None and _completed(request, result):
            _rotate_connector(conn)
        return result

    wrapped._kvkey = True  # type: ignore[attr-defined]
    return wrapped


def install() -> None:
    """Puts kvkey's classes into lmdeploy's connector in this process (idempotent). A
    connector whose configuration has no ``"kvkey"`` entry behaves as lmdeploy's."""
    global _installed
    with _install_lock:
        if _installed:
            return
        _connector_mod.MooncakeStoreScheduler = KvkeyStoreScheduler
        _connector_mod.MooncakeStoreWorker = KvkeyStoreWorker
        try:
            from lmdeploy.pytorch.engine.model_agent import agent  # type: ignore

            for name in ("update_params", "update_weights_from_distributed", "update_weights_from_ipc"):
                m = getattr(agent.BaseModelAgent, name, None)
                if m is not None and not getattr(m, "_kvkey", False):
                    setattr(agent.BaseModelAgent, name, _after_update(m, "agent"))
        except ImportError as e:  # the engine modules need more than the connector's
            logger.debug("kvkey: lmdeploy's model agent is not importable (%s): no epoch hook there", e)
        try:
            from lmdeploy.pytorch.engine import engine  # type: ignore

            for name in ("update_params", "update_weights_from_distributed", "update_weights_from_ipc"):
                m = getattr(engine.Engine, name, None)
                if m is not None and not getattr(m, "_kvkey", False):
                    setattr(engine.Engine, name, _after_update(m, "engine"))
        except ImportError as e:
            logger.debug("kvkey: lmdeploy's engine is not importable (%s): no epoch hook there", e)
        _installed = True


def installed() -> bool:
    """Whether ``install()`` ran in this process."""
    return _installed
