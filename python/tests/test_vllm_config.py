"""kvkey's vLLM connector refuses what it cannot key, naming the setting (vLLM's real
``KVTransferConfig`` and ``KVConnectorFactory``; the model, cache and parallel configs are
the few attributes the connector reads). Stage 47-vllm runs these (marker ``vllm``)."""

from __future__ import annotations

import os
import subprocess
import sys
import types

import pytest

pytestmark = pytest.mark.vllm

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(scope="module")
def kv():
    from kvkey.integrations import vllm as kv

    return kv


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    d = tmp_path_factory.mktemp("m") / "tiny"
    subprocess.run([sys.executable, os.path.join(ROOT, "examples", "vllm", "engine.py"), "write-model", str(d)],
                   check=True)
    return str(d)


def config(model, extra, cache_dtype="auto", dtype="bfloat16", tp=1):
    import torch
    from vllm.config import KVTransferConfig

    transfer = KVTransferConfig(kv_connector="KvkeyConnector", kv_connector_module_path="kvkey.integrations.vllm",
                                kv_role="kv_both", kv_connector_extra_config=extra)
    return types.SimpleNamespace(
        kv_transfer_config=transfer,
        model_config=types.SimpleNamespace(model=model, dtype=getattr(torch, dtype), revision=None,
                                           served_model_name=model),
        cache_config=types.SimpleNamespace(cache_dtype=cache_dtype, block_size=32),
        parallel_config=types.SimpleNamespace(tensor_parallel_size=tp, pipeline_parallel_size=1),
        attention_config=types.SimpleNamespace(backend=None))


def refused(kv, cfg):
    with pytest.raises(kv.ConfigError) as e:
        kv.settings_from(cfg)
    return e.value


def test_no_tenant_is_refused_naming_tenant(kv, model):
    e = refused(kv, config(model, {"store": "memory"}))
    assert e.setting == "tenant" and "kvkey.integrations.vllm: tenant: a tenant is required" in str(e)


def test_an_unknown_store_is_refused_naming_store_and_the_known_ones(kv, model):
    e = refused(kv, config(model, {"store": "memcached", "tenant": "a"}))
    assert e.setting == "store" and "'memcached'" in str(e) and "redis-cluster" in str(e)
    assert refused(kv, config(model, {"tenant": "a"})).setting == "store"


def test_an_unknown_key_and_another_stores_option_are_refused_naming_them(kv, model):
    assert refused(kv, config(model, {"store": "memory", "tenant": "a", "tennant": "b"})).setting == "tennant"
    assert refused(kv, config(model, {"store": "memory", "tenant": "a", "redis_url": "redis://x"})).setting == \
        "redis_url"
    assert refused(kv, config(model, {"store": "redis-cluster", "tenant": "a"})).setting == "redis_nodes"


def test_a_kv_cache_dtype_kvkey_cannot_key_is_refused_naming_cache_dtype(kv, model):
    for dtype in ("fp8_inc", "fp8_ds_mla", "int8_per_token_head", "bogus"):
        e = refused(kv, config(model, {"store": "memory", "tenant": "a"}, cache_dtype=dtype))
        assert e.setting == "cache_dtype" and repr(dtype) in str(e)


def test_the_kv_dtype_is_resolved_as_vllm_resolves_it(kv, model):
    import torch

    assert kv.kv_dtype_of("auto", torch.bfloat16) == "bf16"
    assert kv.kv_dtype_of("auto", torch.float16) == "fp16"
    assert kv.kv_dtype_of("fp8", torch.bfloat16, fp8_dtype=torch.float8_e4m3fn) == "fp8_e4m3"
    assert kv.kv_dtype_of("fp8", torch.bfloat16, fp8_dtype=torch.float8_e4m3fnuz) == "fp8_e4m3fnuz"
    assert kv.kv_dtype_of("fp8_e5m2", torch.bfloat16) == "fp8_e5m2"
    s = kv.settings_from(config(model, {"store": "memory", "tenant": "a"}, cache_dtype="fp8"))
    from vllm.platforms import current_platform

    assert s.kv_dtype == kv.kv_dtype_of("fp8", None, fp8_dtype=current_platform.fp8_dtype())


def test_e4m3fn_and_e4m3fnuz_namespaces_never_share_keys(kv, model):
    import kvkey

    keys = []
    for name in ("fp8_e4m3", "fp8_e4m3fnuz"):
        i = kvkey.Identity.from_model_dir(model, tenant="a", kv_dtype=name, block_size=32, layout=kv.LAYOUT,
                                          revision="unversioned")
        ns = kvkey.KeyNamespace(i)
        keys.append(ns.store_key(ns.block_hashes(list(range(32)))[0]))
    assert keys[0] != keys[1]


def test_weight_versions_map_to_distinct_epochs(kv):
    assert kv.weights_epoch_of("default") == 0 and kv.weights_epoch_of("7") == 7
    e = {kv.weights_epoch_of(v) for v in ("step-100", "step-101", "rl-a", "rl-b")}
    assert len(e) == 4 and 0 not in e


def test_the_factory_builds_the_connector_by_name_and_it_refuses_a_bad_config(kv, model):
    """vLLM's own KVConnectorFactory loads the class from kv_connector_module_path."""
    from vllm.distributed.kv_transfer.kv_connector.factory import KVConnectorFactory
    from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorRole

    cfg = config(model, {"store": "memory", "tenant": "a"})
    cls = KVConnectorFactory.get_connector_class(cfg.kv_transfer_config)
    assert cls is kv.KvkeyConnector
    conn = cls(cfg, KVConnectorRole.SCHEDULER, None)
    assert conn.settings.tenant == "a" and cfg.kv_transfer_config.kv_load_failure_policy == "recompute"
    with pytest.raises(kv.ConfigError, match="tenant"):
        cls(config(model, {"store": "memory"}), KVConnectorRole.SCHEDULER, None)


def test_a_model_that_is_no_directory_nor_cached_is_refused_naming_model(kv, tmp_path):
    e = refused(kv, config(str(tmp_path / "absent"), {"store": "memory", "tenant": "a"}))
    assert e.setting == "model"


def test_the_stub_declares_the_public_names(kv):
    from test_stubs import STUBS, declared

    names = declared(STUBS / "integrations" / "vllm.pyi")
    assert set(kv.__all__) <= set(names), set(kv.__all__) - set(names)
    assert all(hasattr(kv, n) for n in names)
    assert names["Settings"] == set(kv.Settings.__dataclass_fields__)
    instance_attributes = {"settings", "epoch", "weight_version"}  # set by __init__
    assert all(hasattr(kv.KvkeyConnector, m) for m in names["KvkeyConnector"] - instance_attributes)


def _scheduler(kv, model, **extra):
    from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorRole

    cfg = config(model, dict({"store": "memory", "tenant": "a", "memory_name": "test_vllm_config"}, **extra))
    return kv.KvkeyConnector(cfg, KVConnectorRole.SCHEDULER, None)


def _request(req_id, tokens, lora=None, salt=None):
    return types.SimpleNamespace(request_id=req_id, prompt_token_ids=tokens, lora_request=lora, cache_salt=salt)


def test_a_request_kvkey_cannot_key_goes_without_the_tier_and_the_scheduler_runs_on(kv, model, caplog):
    conn = _scheduler(kv, model)
    lora = types.SimpleNamespace(lora_name="x", lora_int_id=1, lora_path="/nonexistent/adapter")
    with caplog.at_level("WARNING", logger="kvkey.integrations.vllm"):
        assert conn.get_num_new_matched_tokens(_request("r1", list(range(100)), lora=lora), 0) == (0, False)
    assert "r1 goes without the KV tier" in caplog.text and "lora_request" in caplog.text
    assert conn._requests["r1"].hashes == []                     # nothing of it is ever saved


def test_an_adapter_salt_and_weight_version_each_give_other_block_hashes(kv, model, tmp_path):
    """The scheduler's hashes (and so the keys) of one prompt differ per LoRA adapter
    weights, per cache_salt and per weights epoch."""
    import json

    adapter = tmp_path / "lora"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text(json.dumps({"r": 8, "lora_alpha": 16, "target_modules": ["q_proj"]}))
    (adapter / "adapter_model.safetensors").write_bytes(b"\x08\0\0\0\0\0\0\0{}      ")
    conn = _scheduler(kv, model)
    tokens = list(range(100))
    lora = types.SimpleNamespace(lora_name="x", lora_int_id=1, lora_path=str(adapter))
    seen = []
    for i, (l, salt) in enumerate([(None, None), (lora, None), (None, "s1"), (None, "s2")]):
        conn.get_num_new_matched_tokens(_request(f"r{i}", tokens, lora=l, salt=salt), 0)
        seen.append(conn._requests[f"r{i}"].hashes[0])
    assert conn.set_weight_version("step-7") == kv.weights_epoch_of("step-7")
    conn.get_num_new_matched_tokens(_request("r9", tokens), 0)
    assert conn._requests["r9"].epoch == conn.epoch != 0
    seen.append(conn._requests["r9"].hashes[0])
    assert len(set(seen)) == 5


def test_vllms_engine_core_moves_the_connector_on_a_weight_update(kv, model):
    """vLLM's own EngineCore.set_weight_version and collective_rpc, on an engine core whose
    scheduler holds the connector (the executor is the only fake)."""
    from vllm.v1.engine.core import EngineCore

    conn = _scheduler(kv, model)
    calls = []
    core = types.SimpleNamespace(
        scheduler=types.SimpleNamespace(get_kv_connector=lambda: conn),
        model_executor=types.SimpleNamespace(collective_rpc=lambda *a, **k: calls.append(a[0]) or []))
    EngineCore.set_weight_version(core, "41")
    assert conn.epoch == 41 and core._weight_version == "41"
    EngineCore.collective_rpc(core, "compute_weight_checksums")        # reads the weights: no change
    assert conn.epoch == 41
    EngineCore.collective_rpc(core, "finish_weight_update")            # in place, no version yet
    fresh = conn.epoch
    assert fresh not in (0, 41) and calls == ["compute_weight_checksums", "finish_weight_update"]
    EngineCore.collective_rpc(core, "reload_weights")
    assert conn.epoch not in (0, 41, fresh)
    EngineCore.set_weight_version(core, "42")
    assert conn.epoch == 42
