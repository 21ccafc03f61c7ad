#!/usr/bin/env python3
"""kvkey.Connector (the compiled core) against the pure-Python connector it replaced.

Save, lookup, load and load_into of 1,000 blocks of 64 KiB over MemoryStore, in one
process: the baseline is bench/connector_baseline.py (the former kvkey.Connector,
verbatim), run on a store of its own with the same payloads. Prints per operation the
median time of each, and the throughput ratio new / baseline (>= 0.9 is the target;
docs/performance.md records a run). Usage:

    PYTHONPATH=build/dev/python python3 bench/python_connector_bench.py [--blocks 1000] [--rounds 7]
"""

import argparse
import os
import statistics
import sys
import time

import numpy as np

import kvkey
from kvkey.stores import MemoryStore

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import connector_baseline  # noqa: E402


def identity():
    # bf16: K and V x 4 layers x 2 KV heads x head_dim 128 x 16 tokens x 2 bytes = 64 KiB per block.
    return kvkey.Identity(tenant="bench", model=kvkey.Model(name="M", revision="r1"),
                          kv=kvkey.Kv(dtype="bf16", block_size=16, num_layers=4, num_kv_heads=2, head_dim=128,
                                      layout="bench.v1"))


def median_time(f, rounds):
    times = []
    for _ in range(rounds):
        t = time.perf_counter()
        f()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--blocks", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args()
    ns = kvkey.KeyNamespace(identity())
    size = ns.payload_size
    assert size == 64 * 1024
    hashes = ns.block_hashes(range(args.blocks * 16))
    rng = np.random.default_rng(1)
    payloads = [rng.integers(0, 256, size, dtype=np.uint8) for _ in hashes]
    buffers = [np.empty(size, np.uint8) for _ in hashes]
    new = kvkey.Connector(MemoryStore(), ns)
    old = connector_baseline.Connector(MemoryStore(), ns, payload_size=size)
    ops = {
        "save": lambda c: c.save(hashes, payloads),
        "lookup": lambda c: c.lookup(hashes),
        "load": lambda c: c.load(hashes),
        "load_into": lambda c: c.load_into(hashes, buffers),
    }
    mib = args.blocks * size / 2**20
    print(f"python_connector_bench: {args.blocks} blocks of {size // 1024} KiB over MemoryStore, "
          f"median of {args.rounds} rounds (interleaved)")
    for name, op in ops.items():
        op(new), op(old)  # warm: values present, caches warm
        t_old, t_new = [], []
        for _ in range(args.rounds):  # interleaved, so drift in machine load hits both alike
            t_old.append(median_time(lambda: op(old), 1))
            t_new.append(median_time(lambda: op(new), 1))
        a, b = statistics.median(t_old), statistics.median(t_new)
        rate = f"{mib / b:8.0f} MiB/s" if name != "lookup" else f"{args.blocks / b / 1e3:8.1f} kblocks/s"
        print(f"  {name:10s} baseline {a * 1e3:8.2f} ms   core {b * 1e3:8.2f} ms   {rate}   ratio {a / b:5.2f}x")
    assert new.lookup(hashes) == old.lookup(hashes) == args.blocks
    assert all(bytes(x) == bytes(y) for x, y in zip(new.load(hashes[:8]), old.load(hashes[:8])))


if __name__ == "__main__":
    main()
