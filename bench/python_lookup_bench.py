#!/usr/bin/env python3
"""The Python connector's verified lookup against its existence-only lookup, on one redis-server.

Stores `--blocks` blocks (per rank) through kvkey.Connector over kvkey.stores.RedisStore,
then times, interleaved in one process, `lookup` (pipelined GETRANGE key 0 1023 + STRLEN,
every header verified) and `lookup_existing` (pipelined EXISTS) of all of them, and
prints the fastest rounds and the medians, and their ratios. Needs a running redis-server (no persistence):

    redis-server --port 6399 --save '' --appendonly no &
    /usr/bin/python3 bench/python_lookup_bench.py --port 6399

The figures go to docs/performance.md ("The Python connector's lookup").
"""

import argparse
import json
import secrets
import statistics
import time

import redis

import kvkey
from kvkey.stores import RedisStore


def namespaces(tenant: str, ranks: int) -> list:
    out = []
    for r in range(ranks):
        out.append(kvkey.KeyNamespace(kvkey.Identity(
            tenant=tenant, model=kvkey.Model(name="bench", revision="0123456789abcdef"),
            kv=kvkey.Kv(dtype=kvkey.KvDtype.bf16, block_size=16, num_layers=28, num_kv_heads=4, head_dim=128,
                        layout="bench.v1"),
            shard=kvkey.Shard(tp_size=ranks, tp_rank=r))))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--blocks", type=int, default=2048)
    ap.add_argument("--ranks", type=int, default=1)
    ap.add_argument("--payload", type=int, default=16384, help="bytes per block and rank")
    ap.add_argument("--repeat", type=int, default=21)
    args = ap.parse_args()

    client = redis.Redis(host=args.host, port=args.port)
    store = RedisStore(client)
    ranks = namespaces(f"bench-{secrets.token_hex(3)}", args.ranks)
    conn = kvkey.Connector(store, ranks, payload_size=args.payload)  # stand-in bytes, not the identity's size
    hashes = ranks[0].block_hashes(range(args.blocks * 16))
    payload = bytes(args.payload)
    for r in range(args.ranks):
        for start in range(0, len(hashes), 256):
            conn.save(hashes[start:start + 256], [payload] * len(hashes[start:start + 256]), rank=r)
    assert conn.lookup(hashes) == conn.lookup_existing(hashes) == args.blocks

    times = {"verified": [], "existence": []}
    for _ in range(args.repeat):
        for name, f in (("verified", conn.lookup), ("existence", conn.lookup_existing)):
            t0 = time.perf_counter()
            f(hashes)
            times[name].append(time.perf_counter() - t0)
    med = {k: statistics.median(v) for k, v in times.items()}
    best = {k: min(v) for k, v in times.items()}  # contention only ever adds time
    store.delete(list(store.scan_prefix(ranks[0].tenant_prefix)))
    print(json.dumps({
        "blocks": args.blocks, "ranks": args.ranks, "repeat": args.repeat,
        "fastest_verified_ms": round(best["verified"] * 1e3, 2),
        "fastest_existence_ms": round(best["existence"] * 1e3, 2),
        "fastest_ratio": round(best["verified"] / best["existence"], 2),
        "median_verified_ms": round(med["verified"] * 1e3, 2), "median_existence_ms": round(med["existence"] * 1e3, 2),
        "median_ratio": round(med["verified"] / med["existence"], 2),
        "redis": client.info("server")["redis_version"], "kvkey": kvkey.__version__}))


if __name__ == "__main__":
    main()
