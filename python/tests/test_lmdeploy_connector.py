"""kvkey inside lmdeploy's own Mooncake store connector (lmdeploy from PyPI, a real master).

Every test drives lmdeploy's real scheduler-side and worker-side connector classes,
built by lmdeploy's ``build_kv_connector`` from lmdeploy's ``CacheConfig``, over a KV pool
laid out by lmdeploy's cache engine; the fakes stand in for engine objects only
(examples/lmdeploy/tiny_engine.py: ``FakeDeviceRow`` for device KV rows, ``FakeEvent``
for ``torch.cuda.Event``, ``fake_local_hostname`` for the host's routing table,
``FakeSequence`` for ``SchedulerSequence``, ``FakeAgent``/``FakeEngine`` for what the
weight-update methods touch). Stage 46-lmdeploy runs them (marker ``mooncake``, by file name).
"""

from __future__ import annotations

import os
import sys
import types

import pytest

# python/tests/lmdeploy/ holds the helpers; it has no __init__.py, so it never shadows lmdeploy itself.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lmdeploy"))
from lmdeploy_support import mooncake_env, prompt, require_lmdeploy  # noqa: E402

# `mooncake`: a live master is needed; stage 30-python deselects these, stage 46-lmdeploy runs them.
pytestmark = pytest.mark.mooncake


@pytest.fixture(scope="module")
def te():
    return require_lmdeploy()


@pytest.fixture(scope="module")
def world(te, tmp_path_factory):
    master, metadata = mooncake_env()
    d = tmp_path_factory.mktemp("lmdeploy")
    w = {
        "mc": te.mooncake_config(str(d / "mooncake.json"), master, metadata),
        "model": te.write_model(str(d / "a" / "tiny"), seed=1),
        "other": te.write_model(str(d / "b" / "tiny"), seed=2),  # another deployment's model, same basename
        "adapter_v1": te.write_adapter(str(d / "adapters" / "v1" / "x"), seed=11),
        "adapter_v2": te.write_adapter(str(d / "adapters" / "v2" / "x"), seed=12),
        "dir": d,
    }
    return w


def engine(te, world, role, model=None, **kw):
    return te.TinyEngine(model or world["model"], role=role, mooncake_json=world["mc"], **kw)


def integration():
    from kvkey.integrations import lmdeploy as m

    return m


def kvkey_opts(tenant="team-a", **kw):
    return {"tenant": tenant, "revision": "r1", **kw}


def rejections():
    """Rejected blocks by field, over every reason (metrics: {reason: {field: n}})."""
    out = {}
    for fields in integration().metrics().as_dict()["rejected_blocks"].values():
        for field, n in fields.items():
            out[field] = out.get(field, 0) + n
    return out


def test_install_rebinds_lmdeploys_components(te):
    m = integration()
    m.install()
    from lmdeploy.pytorch.engine.engine import Engine
    from lmdeploy.pytorch.engine.model_agent.agent import BaseModelAgent
    from lmdeploy.pytorch.kv_connector.mooncake.store import connector

    assert connector.MooncakeStoreScheduler is m.KvkeyStoreScheduler
    assert connector.MooncakeStoreWorker is m.KvkeyStoreWorker
    for f in (BaseModelAgent.update_params, BaseModelAgent.update_weights_from_distributed,
              BaseModelAgent.update_weights_from_ipc, Engine.update_params, Engine.update_weights_from_distributed,
              Engine.update_weights_from_ipc):
        assert getattr(f, "_kvkey", False), f
    import inspect

    assert inspect.iscoroutinefunction(Engine.update_weights_from_ipc)  # still awaitable for lmdeploy's server
    assert m._completed(types.SimpleNamespace(finished=True), None)
    assert not m._completed(types.SimpleNamespace(finished=False), None)
    assert m._completed(types.SimpleNamespace(zmq_handles={}), (True, "ok"))  # one IPC call is a whole update
    assert not m._completed(types.SimpleNamespace(zmq_handles={}), (False, "failed"))
    assert not m._completed(types.SimpleNamespace(finished=True), (False, "failed"))
    m.install()  # idempotent: no second wrapper
    assert not getattr(BaseModelAgent.update_params.__wrapped__, "_kvkey", False)


def test_kvkey_load_equals_recompute(te, world):
    p = prompt(1)
    prod = engine(te, world, "kv_producer", kvkey=kvkey_opts())
    cons = engine(te, world, "kv_consumer", kvkey=kvkey_opts())
    try:
        before = integration().metrics().as_dict()
        assert prod.produce(p) == 4
        got = cons.generate(p, 8)
        ref = cons.generate(p, 8, use_store=False)
        assert got["found"] == 64 and got["loaded"] == 64  # 69 of 70 tokens may come from the store: 4 blocks
        assert got["tokens"] == ref["tokens"]
        assert all(a.dtype == b.dtype and bool((a == b).all()) for a, b in zip(got["logits"], ref["logits"]))
        import torch

        assert all(torch.equal(a, b) for a, b in zip(got["logits"], ref["logits"]))
        after = integration().metrics().as_dict()
        assert after["save_blocks"]["saved"] - before["save_blocks"]["saved"] == 4
        assert after["lookup_blocks"]["hit"] - before["lookup_blocks"]["hit"] == 4
        assert after["load_blocks"]["loaded"] - before["load_blocks"]["loaded"] == 4
        keys = cons.keys(p)
        assert all(k.startswith("kvk") and "/team-a/" in k for k in keys), keys
    finally:
        cons.close()
        prod.close()


def test_values_move_in_fragments_and_read_back_whatever_fragments_wrote_them(te, world):
    """The staging slot goes to Mooncake in fragments of about 256 KiB (_fragments); a
    value written in other fragments (lmdeploy's row slices, as earlier releases wrote
    them) reads back and verifies all the same: the fragments are transfer, not format."""
    m = integration()
    for size in (1, 4096, 300 << 10, (1 << 20) + 1024, (4 << 20) + 1024, 20 << 20):
        parts = m._fragments(size)
        assert sum(parts) == size and all(p > 0 for p in parts)
        assert len(parts) == max(1, round(size / (256 << 10)))
        assert max(parts) - min(parts) <= len(parts)
    p = prompt(11)
    prod = engine(te, world, "kv_producer", kvkey=kvkey_opts())
    cons = engine(te, world, "kv_consumer", kvkey=kvkey_opts())
    try:
        k = prod.worker.connector_worker.kvkey
        assert k.store.fragments == m._fragments(kvkey_envelope() + k.payload_size)
        k.store.fragments = (kvkey_envelope(), *k.row_sizes)  # one fragment per row slice
        assert prod.produce(p) == 4
        got = cons.generate(p, 8)
        ref = cons.generate(p, 8, use_store=False)
        assert got["loaded"] == 64 and got["tokens"] == ref["tokens"]
    finally:
        cons.close()
        prod.close()


def kvkey_envelope():
    import kvkey

    return kvkey.envelope_size


def test_without_the_setting_lmdeploy_is_unchanged(te, world):
    integration().install()
    p = prompt(2)
    prod = engine(te, world, "kv_producer")
    cons = engine(te, world, "kv_consumer")
    try:
        assert type(cons.worker.connector_worker) is integration().KvkeyStoreWorker
        assert cons.worker.connector_worker.kvkey is None
        prod.produce(p)
        got = cons.generate(p, 4)
        assert got["loaded"] == 64
        from kvkey.compat import lmdeploy as legacy

        assert cons.keys(p)[0] == legacy.build_store_key("", "tiny", 0, legacy.build_prefix_block_hashes(
            p, 16, extra_identity="")[0])
    finally:
        cons.close()
        prod.close()


def plant(cons, src_keys, dst_keys):
    """Copies the values under src_keys to dst_keys (a writer that got the key right and the bytes wrong)."""
    from kvkey.stores.mooncake import MooncakeStore

    store = MooncakeStore(cons.client)
    values = store.get(src_keys)
    assert all(v for v in values), "the producer's values are not in the store"
    assert all(store.put(dst_keys, values))
    store.close()


def test_foreign_header_is_not_counted_by_lookup(te, world):
    """A bf16 deployment's values planted under an fp16 deployment's keys: the lookup
    reads the headers, counts nothing and names kv.dtype; the output is the recompute's."""
    p = prompt(3)
    # dtype='bfloat16' (lmdeploy's --dtype): a config.json saying bfloat16 would make lmdeploy ask the GPU.
    prod = engine(te, world, "kv_producer", dtype="bfloat16", kvkey=kvkey_opts())
    cons = engine(te, world, "kv_consumer", kvkey=kvkey_opts())
    try:
        prod.produce(p)
        assert cons.generate(p, 4)["found"] == 0  # other keys: a plain miss
        plant(cons, prod.keys(p), cons.keys(p))
        before = rejections()
        got = cons.generate(p, 4)
        assert got["found"] == 0 and got["loaded"] == 0
        assert rejections().get("kv.dtype", 0) > before.get("kv.dtype", 0)
        assert got["tokens"] == cons.generate(p, 4, use_store=False)["tokens"]
    finally:
        cons.close()
        prod.close()


def test_damaged_value_goes_back_through_lmdeploys_invalid_block_path(te, world):
    p = prompt(4)
    prod = engine(te, world, "kv_producer", kvkey=kvkey_opts())
    cons = engine(te, world, "kv_consumer", kvkey=kvkey_opts())
    try:
        prod.produce(p)
        from kvkey.stores.mooncake import MooncakeStore

        key = cons.keys(p)[1]
        store = MooncakeStore(cons.client)
        (value,) = store.get([key])
        damaged = bytearray(value)
        damaged[1024 + 100] ^= 0x40  # one bit of the KV bytes; the header is intact
        assert store.put([key], [bytes(damaged)]) == [True]
        store.close()
        before = rejections()
        sched = cons.scheduler.connector_scheduler
        got = cons.generate(p, 8)
        assert got["found"] == 64  # headers verify: the lookup counts the blocks
        assert got["loaded"] == 0  # the load failed: lmdeploy recomputed the prompt
        assert rejections().get("payload", 0) == before.get("payload", 0) + 1
        assert got["tokens"] == cons.generate(p, 8, use_store=False)["tokens"]
        assert not sched._inflight_loads and not sched._invalid_block_ids
    finally:
        cons.close()
        prod.close()


def test_rows_on_a_device_go_through_torch_and_only_verified_blocks_reach_them(te, world):
    """Rows lmdeploy keeps on a GPU cannot be copied by the connector's C++: the
    integration gathers and scatters them with torch around save_from / load_into with
    slots. Forced here on host rows (the same code, device copies aside): the load equals
    the recompute, and a damaged block's rows are never written."""
    p = prompt(12)
    prod = engine(te, world, "kv_producer", kvkey=kvkey_opts())
    cons = engine(te, world, "kv_consumer", kvkey=kvkey_opts())
    try:
        for e in (prod, cons):
            k = e.worker.connector_worker.kvkey
            assert k.destinations([0]) is not None  # host rows: the C++ path, unless forced
            k._row_views = None
            assert k.destinations([0]) is None
        assert prod.produce(p) == 4
        got = cons.generate(p, 8)
        ref = cons.generate(p, 8, use_store=False)
        assert got["loaded"] == 64 and got["tokens"] == ref["tokens"]
        import torch

        assert all(torch.equal(a, b) for a, b in zip(got["logits"], ref["logits"]))
        from kvkey.stores.mooncake import MooncakeStore

        key = cons.keys(p)[2]
        store = MooncakeStore(cons.client)
        (value,) = store.get([key])
        damaged = bytearray(value)
        damaged[-1] ^= 0x01
        assert store.put([key], [bytes(damaged)]) == [True]
        store.close()
        k = cons.worker.connector_worker.kvkey
        scattered = []
        scatter = k.scatter
        k.scatter = lambda block_id, slots, n: (scattered.append(block_id), scatter(block_id, slots, n))
        got = cons.generate(p, 8)
        assert got["loaded"] == 0 and got["tokens"] == ref["tokens"]
        assert len(scattered) == 3  # the three blocks that verified, not the damaged one
    finally:
        cons.close()
        prod.close()


def test_weight_update_moves_the_epoch_through_lmdeploys_update_params(te, world):
    p = prompt(5)
    prod = engine(te, world, "kv_producer", kvkey=kvkey_opts())
    cons = engine(te, world, "kv_consumer", kvkey=kvkey_opts())
    try:
        prod.produce(p)
        old_keys = cons.keys(p)
        cons.update_weights(te.random_weights(3))
        w = cons.worker.connector_worker
        assert w.kvkey.ids.epoch == 1 and cons.scheduler.connector_scheduler.kvkey_identities.epoch == 1
        new_keys = cons.keys(p)
        assert not set(old_keys) & set(new_keys) and all("/e1/" in k for k in new_keys), new_keys[:1]
        got = cons.generate(p, 6)
        assert got["found"] == 0
        plant(cons, old_keys, new_keys)  # stale KV put under the new keys
        before = rejections()
        got = cons.generate(p, 6)
        assert got["found"] == 0
        assert rejections().get("model.weights_epoch", 0) > before.get("model.weights_epoch", 0)
        assert got["tokens"] == cons.generate(p, 6, use_store=False)["tokens"]
    finally:
        cons.close()
        prod.close()


def test_tenants_and_adapters_are_kept_apart(te, world):
    p = prompt(6)
    adapters_v1 = {"x": world["adapter_v1"]}
    adapters_v2 = {"x": world["adapter_v2"]}
    a = engine(te, world, "kv_producer", kvkey=kvkey_opts("team-a"), adapters=adapters_v1)
    b = engine(te, world, "kv_consumer", kvkey=kvkey_opts("team-b"), adapters=adapters_v1)
    c = engine(te, world, "kv_consumer", kvkey=kvkey_opts("team-a"), adapters=adapters_v2)
    try:
        a.produce(p, adapter="x")
        a.produce(p)
        assert b.generate(p, 4)["found"] == 0
        plant(b, a.keys(p), b.keys(p))
        before = rejections()
        assert b.generate(p, 4)["found"] == 0
        assert rejections().get("tenant", 0) > before.get("tenant", 0)
        assert c.generate(p, 4)["found"] == 64  # the base model's KV is shared within the tenant
        assert c.generate(p, 4, adapter="x")["found"] == 0  # adapter x has other weights now
        plant(c, a.keys(p, "x"), c.keys(p, "x"))
        before = rejections()
        got = c.generate(p, 4, adapter="x")
        assert got["found"] == 0
        assert rejections().get("adapter.weights_fingerprint", 0) > before.get("adapter.weights_fingerprint", 0)
        assert got["tokens"] == c.generate(p, 4, adapter="x", use_store=False)["tokens"]
    finally:
        for e in (c, b, a):
            e.close()


def test_kv_format_follows_lmdeploys_resolution(te, world):
    m = integration()
    s = m.make_settings(model_path=world["model"], tenant="t", revision="r1")
    assert (s.kv_dtype, s.quant_scheme, s.model_dtype) == ("fp16", "none", "float16")
    s = m.make_settings(model_path=world["model"], tenant="t", revision="r1", dtype="bfloat16")
    assert s.kv_dtype == "bf16"
    s8 = m.make_settings(model_path=world["model"], tenant="t", revision="r1", quant_policy=8)
    assert (s8.kv_dtype, s8.quant_scheme, s8.quant_group_size, s8.quant_zero_point) == (
        "int8", "lmdeploy.int8.asym.token_head", 16, True)
    s4 = m.make_settings(model_path=world["model"], tenant="t", revision="r1", quant_policy=4)
    assert (s4.kv_dtype, s4.quant_scheme) == ("int4", "lmdeploy.int4.asym.token_head")
    s16 = m.make_settings(model_path=world["model"], tenant="t", revision="r1", quant_policy=16)
    assert (s16.kv_dtype, s16.quant_scheme) == ("fp8_e4m3", "lmdeploy.fp8.per_tensor")
    s17 = m.make_settings(model_path=world["model"], tenant="t", revision="r1", quant_policy=17)
    assert s17.kv_dtype == "fp8_e5m2"
    import torch

    # MLA (lmdeploy's ModelConfig.mla_kv_cache_dtype): 'fp8_ds_mla' and 'bfloat16' as schema.py resolves them.
    from lmdeploy.pytorch.config import ModelConfig

    mc = ModelConfig.from_pretrained(world["model"])
    mc.mla_kv_cache_dtype = "fp8_ds_mla"
    s = m.make_settings(model_path=world["model"], tenant="t", revision="r1", model_config=mc)
    assert (s.kv_dtype, s.quant_scheme, s.mla) == ("fp8_e4m3", "lmdeploy.fp8_ds_mla", True)
    mc.mla_kv_cache_dtype = "bfloat16"
    s = m.make_settings(model_path=world["model"], tenant="t", revision="r1", model_config=mc)
    assert (s.kv_dtype, s.mla) == ("bf16", True)
    assert mc.dtype == torch.float16
    # Every format is its own key space (the identity is the root of the block-hash chain).
    keys = set()
    for x in (s8, s4, s16, s17, m.make_settings(model_path=world["model"], tenant="t", revision="r1")):
        ns = m._Identities(x, block_size=16, tp_size=1).namespace(None, 0)
        keys.add(ns.store_key(ns.block_hashes(list(range(16)))[0]))
    assert len(keys) == 5


def test_tp_ranks_and_kv_head_replicas(te, world):
    """tp 4 over 2 KV heads: lmdeploy's kv_head_replica_num is 2; the two ranks of each
    KV-head slice share its objects, the slices never do."""
    m = integration()
    s = m.make_settings(model_path=world["model"], tenant="t", revision="r1")
    ids = m._Identities(s, block_size=16, tp_size=4)
    h = ids.namespace(None, 0).block_hashes(list(range(16)))[0]
    assert all(ids.namespace(None, r).block_hashes(list(range(16)))[0] == h for r in range(4))  # rank-free chain
    keys = [ids.namespace(None, r).store_key(h) for r in range(4)]
    assert keys[0] == keys[1] and keys[2] == keys[3] and keys[0] != keys[2]
    assert [ids.namespace(None, r).slice.kv_head_begin for r in range(4)] == [0, 0, 1, 1]
    ids2 = m._Identities(s, block_size=16, tp_size=2)
    assert ids2.namespace(None, 1).slice.kv_head_begin == 1
    assert ids2.namespace(None, 1).store_key(h) == keys[2]  # the same KV-head slice under another TP size


def test_settings_travel_to_worker_processes(te, world):
    """A worker process that unpickles the cache config (as Ray's do) has kvkey installed."""
    import pickle
    import subprocess

    m = integration()
    s = m.make_settings(model_path=world["model"], tenant="t", revision="r1")
    assert pickle.loads(pickle.dumps(s)) == s
    from lmdeploy.messages import KVTransferConfig
    from lmdeploy.pytorch.config import CacheConfig

    cc = CacheConfig(max_batches=1, block_size=16, num_cpu_blocks=0, num_gpu_blocks=8, kv_transfer_config=(
        KVTransferConfig(kv_connector="MooncakeStoreConnector", kv_role="kv_producer",
                         kv_connector_extra_config={"kvkey": s})))
    blob = world["dir"] / "cache_config.pickle"
    blob.write_bytes(pickle.dumps(cc))
    code = ("import pickle, sys\n"
            "from lmdeploy.pytorch.kv_connector.mooncake.store import connector\n"
            "before = connector.MooncakeStoreWorker.__name__\n"
            "cc = pickle.loads(open(sys.argv[1], 'rb').read())\n"
            "print(before, connector.MooncakeStoreWorker.__name__, connector.MooncakeStoreScheduler.__name__,\n"
            "      cc.kv_transfer_config.kv_connector_extra_config['kvkey'].tenant)\n")
    r = subprocess.run([sys.executable, "-c", code, str(blob)], capture_output=True, text=True, timeout=120,
                       env=dict(os.environ))
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.split() == ["MooncakeStoreWorker", "KvkeyStoreWorker", "KvkeyStoreScheduler", "t"]


@pytest.mark.parametrize("case", ["no_tenant", "empty_tenant", "dtype", "quant_policy", "model_dir", "adapter",
                                  "revision", "digest_threads"])
def test_bad_configuration_stops_at_start_naming_the_setting(te, world, case):
    m = integration()
    kw = dict(model_path=world["model"], tenant="t", revision="r1")
    want = case
    if case == "no_tenant":
        kw.pop("tenant")
        want = "tenant"
    elif case == "empty_tenant":
        kw["tenant"] = ""
        want = "tenant"
    elif case == "dtype":
        kw["dtype"] = "float64"
    elif case == "quant_policy":
        kw["quant_policy"] = 5
    elif case == "model_dir":
        kw["model_path"] = str(world["dir"] / "missing")
        want = "model_path"
    elif case == "adapter":
        kw["adapters"] = {"x": str(world["dir"] / "no-adapter")}
        want = "adapters"
    elif case == "revision":
        kw.pop("revision")  # a plain directory has no revision kvkey can read
        want = "revision"
    elif case == "digest_threads":
        kw["digest_threads"] = 0
    with pytest.raises(m.ConfigError) as e:
        m.make_settings(**kw)
    assert e.value.setting == want, str(e.value)
    assert want in str(e.value)


@pytest.mark.parametrize("entry,setting", [({"revision": "r1"}, "tenant"), ({"tenant": "t", "revision": "r1",
                                                                            "quant_policy": 3}, "quant_policy")])
def test_the_engine_refuses_a_bad_config_entry_at_connector_start(te, world, entry, setting):
    """The config-entry form, as a dict: lmdeploy's build_kv_connector raises, naming it,
    before any store is touched (nothing falls back to legacy keys)."""
    from lmdeploy.messages import KVTransferConfig
    from lmdeploy.pytorch.config import CacheConfig
    from lmdeploy.pytorch.kv_connector import KVConnectorRole, build_kv_connector

    m = integration()
    m.install()
    for role in (KVConnectorRole.SCHEDULER, KVConnectorRole.WORKER):
        cc = CacheConfig(max_batches=1, block_size=16, num_cpu_blocks=0, num_gpu_blocks=8, kv_transfer_config=(
            KVTransferConfig(kv_connector="MooncakeStoreConnector", kv_role="kv_producer", kv_connector_extra_config={
                "mooncake_config_path": world["mc"], "kvkey": dict(entry, model_path=world["model"])})))
        with pytest.raises(m.ConfigError) as e:
            build_kv_connector(role, cc)
        assert e.value.setting == setting


def test_a_quant_policy_other_than_the_enabled_one_is_refused(te, world):
    from lmdeploy.messages import KVTransferConfig, QuantPolicy
    from lmdeploy.pytorch.config import CacheConfig
    from lmdeploy.pytorch.kv_connector import KVConnectorRole, build_kv_connector

    m = integration()
    s = m.make_settings(model_path=world["model"], tenant="t", revision="r1")
    cc = CacheConfig(max_batches=1, block_size=16, num_cpu_blocks=0, num_gpu_blocks=8, quant_policy=QuantPolicy.INT8,
                     kv_transfer_config=KVTransferConfig(kv_connector="MooncakeStoreConnector", kv_role="kv_producer",
                                                         kv_connector_extra_config={"kvkey": s}))
    with pytest.raises(m.ConfigError) as e:
        build_kv_connector(KVConnectorRole.SCHEDULER, cc)
    assert e.value.setting == "quant_policy"


def test_enable_on_an_engine_config(te, world):
    from lmdeploy import KVTransferConfig, PytorchEngineConfig

    m = integration()
    cfg = PytorchEngineConfig(quant_policy=8, kv_transfer_config=KVTransferConfig(
        kv_connector="MooncakeStoreConnector", kv_role="kv_both",
        kv_connector_extra_config={"mooncake_config_path": world["mc"]}))
    s = m.enable(cfg, model_path=world["model"], tenant="team-a", revision="r1")
    assert cfg.kv_transfer_config.kv_connector_extra_config["kvkey"] is s
    assert (s.quant_policy, s.kv_dtype) == (8, "int8")
    with pytest.raises(m.ConfigError) as e:
        m.enable(PytorchEngineConfig(), model_path=world["model"], tenant="team-a", revision="r1")
    assert e.value.setting == "kv_transfer_config"
    with pytest.raises(m.ConfigError) as e:
        m.enable(cfg, model_path=world["model"], revision="r1")
    assert e.value.setting == "tenant"


def test_probe_cases_give_four_keys_through_the_integration(te, world):
    """mc_probe_f2.py's cases A (dtype), B (weights update), C (tenant) and E (tokens):
    one key each through kvkey, where lmdeploy's builders give one key for A, B and C."""
    m = integration()
    from conftest import PROBE_PROMPT

    def key(tokens, epoch=0, tenant="team-a", quant_policy=0):
        s = m.make_settings(model_path=world["model"], tenant=tenant, revision="r1", quant_policy=quant_policy)
        ns = m._Identities(s, block_size=64, tp_size=8).namespace(None, 0, epoch)
        return ns.store_key(ns.block_hashes(tokens)[2])

    base = key(PROBE_PROMPT)
    cases = {"A": key(PROBE_PROMPT, quant_policy=16), "B": key(PROBE_PROMPT, epoch=1),
             "C": key(PROBE_PROMPT, tenant="team-b"), "E": key([1, 2, 3, 4] * 48)}
    assert len({base, *cases.values()}) == 5


def test_seed_probe_exits_0_against_the_installed_release(te):
    import subprocess
    import sys

    shared = os.environ.get("KVKEY_SHARED") or os.path.join(os.path.dirname(__file__), "..", "..", "..", "shared")
    probe = os.path.join(shared, "seed", "mc_probe_f2.py")
    assert os.path.exists(probe), f"the seed's probe is missing: {probe} (../shared/seed next to the checkout, " \
                                  "or KVKEY_SHARED)"
    r = subprocess.run([sys.executable, probe], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "RESULT: all assertions hold" in r.stdout


def test_the_stub_declares_the_public_names(te):
    import ast
    import pathlib

    m = integration()
    stub = pathlib.Path(__file__).resolve().parents[1] / "kvkey" / "integrations" / "lmdeploy.pyi"
    names = set()
    for node in ast.parse(stub.read_text()).body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef)):
            names.add(node.name)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    assert set(m.__all__) <= names, set(m.__all__) - names
    assert all(hasattr(m, n) for n in names - {"__all__"})
