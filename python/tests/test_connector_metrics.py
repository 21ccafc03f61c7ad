"""kvkey.Connector over kvkey.stores.MemoryStore records, for the shared scenario
(tests/data/connector_metrics_scenario.json), the metrics kvkey::Connector records over
kvkey::MemoryStore (tests/unit/connector_metrics_test.cpp): both compare against its
committed ``expect``, false hits included."""

import json
import pathlib

import kvkey
from kvkey.stores import MemoryStore

SCENARIO = pathlib.Path(__file__).resolve().parents[2] / "tests" / "data" / "connector_metrics_scenario.json"


def _identity(tenant: str) -> kvkey.Identity:
    return kvkey.Identity(
        tenant=tenant,
        model=kvkey.Model(name="kvkey/metrics", revision="0123456789abcdef0123456789abcdef01234567"),
        kv=kvkey.Kv(dtype=kvkey.KvDtype.bf16, block_size=4, num_layers=2, num_kv_heads=2, head_dim=8,
                    layout="kvkey.metrics.v1"),
        shard=kvkey.Shard(tp_size=2))


def _payload(size: int, rank: int, block: int, version: int) -> bytes:
    return bytes((j + 31 * block + 7 * rank + 101 * version) % 256 for j in range(size))


def run_scenario(scenario: dict) -> dict:
    store = MemoryStore()
    metrics = kvkey.Metrics()
    ns = kvkey.KeyNamespace(_identity("metrics-scenario"))
    other = kvkey.KeyNamespace(_identity("metrics-scenario-other"))
    ranks = [ns.for_rank(0), ns.for_rank(1)]
    conn = kvkey.Connector(store, ranks, metrics=metrics)
    hashes = ns.block_hashes(list(range(4 * scenario["blocks"])))
    size = ranks[0].payload_size
    for step in scenario["steps"]:
        op, rank = step["op"], step.get("rank", 0)
        blocks = [hashes[i] for i in step.get("blocks", [])]
        if op == "save":
            conn.save(blocks, [_payload(size, rank, i, step.get("version", 0)) for i in step["blocks"]], rank=rank)
        elif op == "lookup":
            conn.lookup(blocks, max_tokens=step.get("max_tokens"))
        elif op == "load":
            conn.load(blocks, rank=rank)
        elif op == "load_into":
            conn.load_into(blocks, [bytearray(size) for _ in blocks], rank=rank)
        else:
            h = hashes[step["block"]]
            key = ranks[rank].store_key(h)
            if op == "foreign":
                store.put([key], [other.for_rank(rank).seal_value(h, _payload(size, rank, step["block"], 0))])
            elif op == "flip":
                v = bytearray(store.get([key])[0])
                v[step["at"]] ^= 4
                store.put([key], [bytes(v)])
            elif op == "delete":
                store.delete([key])
            else:
                raise AssertionError(f"unknown step {op}")
    return metrics.as_dict()


def test_the_python_connector_records_the_cpp_connectors_metrics() -> None:
    scenario = json.loads(SCENARIO.read_text())
    got = run_scenario(scenario)
    assert got == scenario["expect"]
    assert got["false_hits"] > 0
