#!/usr/bin/env python3
"""kvkey's counters on a Prometheus /metrics endpoint, fed by a workload with injected faults.

Serves /metrics with prometheus_client (`kvkey.prometheus.Collector`, one line on
the default registry), then runs a workload through kvkey.Connector against a
redis-server: saves a prompt's blocks, looks them up, puts faulty values under
some live keys (another deployment's objects, damaged and truncated values,
non-kvkey bytes) and deletes a few, then loads every block once. It knows which
(reason, field) each fault must be rejected with, prints one line per pair and
writes them with the time the workload finished to --report (JSON), then keeps
serving until --serve seconds have passed or it is stopped.

    metrics_exporter.py --redis-port 6379 --port 9464 [--seed 1] [--report FILE] [--serve 600]

scripts/ci/stages/80-prometheus.sh scrapes it with a real Prometheus and checks
that `sum by (reason, field) (kvkey_rejected_blocks_total)` equals the injected counts.
"""

import argparse
import json
import os
import random
import sys
import time
from typing import Callable, Dict, List, Tuple

import prometheus_client
import redis  # type: ignore[import]  # redis-py ships no type information

import kvkey
import kvkey.prometheus
import kvkey.stores

BLOCK = 16
PAYLOAD = 512  # bytes per block: a stand-in for the KV bytes


def namespace(tenant: str = "team-a", epoch: int = 3, dtype: str = "bf16",
              adapter_version: int = 1) -> kvkey.KeyNamespace:
    return kvkey.KeyNamespace(kvkey.Identity(
        tenant=tenant,
        model=kvkey.Model(name="Qwen/Qwen2.5-0.5B-Instruct", revision="7ae557604adf67be50417f59c2c2f167def9a775",
                          weights_epoch=epoch),
        kv=kvkey.Kv(dtype=dtype, block_size=BLOCK, num_layers=24, num_kv_heads=2, head_dim=64, layout="demo.v1"),
        adapter=kvkey.Adapter("support", kvkey.fingerprint("support adapter weights v%d" % adapter_version)),
    ))


def workload(metrics: kvkey.Metrics, client: "redis.Redis[bytes]", seed: int) -> Dict[Tuple[str, str], int]:
    """Runs the workload; returns the (reason, field) -> count it injected."""
    rng = random.Random(seed)
    ns = namespace()
    conn = kvkey.Connector(kvkey.stores.RedisStore(client), ns, metrics=metrics, payload_size=PAYLOAD)  # stand-in bytes
    tokens = [rng.randrange(1, 150000) for _ in range(96 * BLOCK)]
    hashes = ns.block_hashes(tokens)
    payloads = [rng.randbytes(PAYLOAD) for _ in hashes]
    conn.save(hashes, payloads)
    for n in (8, 32, len(hashes)):
        conn.lookup(hashes[:n])  # all verified hits: nothing rejected yet

    def foreign(other: kvkey.KeyNamespace) -> Callable[[int], bytes]:
        return lambda b: other.seal_value(hashes[b], payloads[b])

    def flipped(b: int) -> bytes:
        value = bytearray(ns.seal_value(hashes[b], payloads[b]))
        i = kvkey.envelope_size + rng.randrange(PAYLOAD)
        value[i] ^= 1 << rng.randrange(8)
        return bytes(value)

    faults: List[Tuple[str, str, Callable[[int], bytes]]] = [
        ("identity_mismatch", "kv.dtype", foreign(namespace(dtype="fp8_e4m3"))),
        ("identity_mismatch", "model.weights_epoch", foreign(namespace(epoch=2))),
        ("identity_mismatch", "tenant", foreign(namespace(tenant="team-b"))),
        ("identity_mismatch", "adapter.weights_fingerprint", foreign(namespace(adapter_version=2))),
        ("payload_mismatch", "payload", flipped),
        ("block_mismatch", "block_hash", lambda b: ns.seal_value(hashes[b - 1], payloads[b])),
        ("size_mismatch", "payload_size", lambda b: ns.seal_value(hashes[b], payloads[b])[:-rng.randint(1, 64)]),
        ("malformed", "envelope.size", lambda b: ns.seal_value(hashes[b], payloads[b])[:rng.randrange(1024)]),
        ("malformed", "envelope.magic", lambda b: b"legacy-bytes:" + 3 * payloads[b]),
    ]
    blocks = rng.sample(range(1, len(hashes)), 6 * len(faults) + 3)
    injected: Dict[Tuple[str, str], int] = {}
    for reason, field, make in faults:
        for _ in range(rng.randint(1, 6)):
            b = blocks.pop()
            client.set(ns.store_key(hashes[b]), make(b))
            injected[(reason, field)] = injected.get((reason, field), 0) + 1
    for _ in range(3):  # missing values: misses, not rejections
        client.delete(ns.store_key(hashes[blocks.pop()]))
    loaded = conn.load(hashes)
    rejected = sum(injected.values())
    if sum(p is None for p in loaded) != rejected + 3:
        raise SystemExit("metrics_exporter: %d blocks did not load, expected %d"
                         % (sum(p is None for p in loaded), rejected + 3))
    return injected


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--redis-port", type=int, required=True)
    ap.add_argument("--port", type=int, required=True, help="serve /metrics on 127.0.0.1:PORT")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--report", help="write the injected counts and the finish time here (JSON)")
    ap.add_argument("--serve", type=float, default=600.0, help="seconds to keep serving after the workload")
    args = ap.parse_args()

    metrics = kvkey.Metrics()
    prometheus_client.REGISTRY.register(kvkey.prometheus.Collector(metrics))  # the one line an engine adds
    prometheus_client.start_http_server(args.port, addr="127.0.0.1")

    client = redis.Redis(host="127.0.0.1", port=args.redis_port)
    injected = workload(metrics, client, args.seed)
    done = time.time()
    for (reason, field), n in sorted(injected.items()):
        print("exporter: injected reason=%s field=%s count=%d" % (reason, field, n))
    if args.report:
        with open(args.report + ".tmp", "w") as f:
            json.dump({"done": done, "injected": [{"reason": r, "field": fl, "count": n}
                                                  for (r, fl), n in sorted(injected.items())]}, f)
        os.replace(args.report + ".tmp", args.report)
    sys.stdout.flush()
    time.sleep(args.serve)
    return 0


if __name__ == "__main__":
    sys.exit(main())
