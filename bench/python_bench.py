#!/usr/bin/python3
"""The Python binding against the Python peers (bench/peers/peers.py), on their prompts.

Measures, block size 64, one thread, CPU time (time.process_time), the median of
several runs, so other load on the machine changes it little:
  - tokens/s of ns.block_hashes from a list, a tuple and a numpy int32 array, and
    of the vLLM-style and lmdeploy peers, at 512, 4k, 32k and 128k tokens;
  - the per-call time of a 512-token list;
  - the cost of extending a request by one 64-token block at 4k and 128k tokens of
    context: kvkey.Chain.append, ns.extend_block_hashes, and the vLLM-style
    peer's one-block hash.
Usage: python_bench.py [--quick] [--out FILE]  (PYTHONPATH must find kvkey).
Ratios only are meaningful across machines; docs/performance.md has a run.
"""

import argparse
import json
import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "peers"))
import peers  # noqa: E402

import kvkey  # noqa: E402

BLOCK = 64
LENGTHS = [512, 4096, 32768, 131072]


def namespace():
    return kvkey.KeyNamespace(kvkey.Identity(
        tenant="bench", model=kvkey.Model(name="M", revision="r"),
        kv=kvkey.Kv(dtype="fp16", block_size=BLOCK, num_layers=24, num_kv_heads=2, head_dim=64, layout="L")))


def cpu_median(fn, min_seconds, min_runs=5, max_runs=2000):
    """Median CPU seconds of one fn() call."""
    runs = []
    start = time.process_time()
    while len(runs) < min_runs or (time.process_time() - start < min_seconds and len(runs) < max_runs):
        t0 = time.process_time()
        fn()
        runs.append(time.process_time() - t0)
    return statistics.median(runs)


def per_call(fn, calls, min_seconds):
    """Median CPU seconds per call, timing `calls` calls at a time (small calls)."""
    def batch():
        for _ in range(calls):
            fn()
    return cpu_median(batch, min_seconds) / calls


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--out")
    args = ap.parse_args()
    t = 0.05 if args.quick else 0.5
    ns = namespace()
    rows = []
    for n in LENGTHS:
        toks = peers.prompt(n)
        arr = np.asarray(toks, dtype=np.int32)
        tup = tuple(toks)
        reps = max(1, 20000 // n)
        row = {"tokens": n}
        for name, fn in [
            ("list", lambda: ns.block_hashes(toks)),
            ("tuple", lambda: ns.block_hashes(tup)),
            ("numpy", lambda: ns.block_hashes(arr)),
            ("vllm", lambda: peers.vllm_chain(toks, BLOCK)),
            ("lmdeploy", lambda: peers.lmdeploy_chain(toks, BLOCK)),
            ("lmdeploy_np", lambda: peers.lmdeploy_chain_numpy(arr, BLOCK)),
        ]:
            slow = name.startswith(("vllm", "lmdeploy"))
            sec = per_call(fn, 1 if slow else reps, t)
            row[name] = n / sec
        rows.append(row)
    small = peers.prompt(512)
    call_us = per_call(lambda: ns.block_hashes(small), 200, t) * 1e6
    ext = []
    for n in (4096, 131072):
        toks = peers.prompt(n + BLOCK)
        head, block = toks[:n], toks[n:]
        prev = ns.block_hashes(head)

        chain = ns.chain()
        chain.append(head)
        append_s = per_call(lambda: chain.append(block), 500, t)  # the chain grows by one block per call
        extend_s = per_call(lambda: ns.extend_block_hashes(prev, toks), 20, t)
        parent = peers.vllm_chain(head[-BLOCK:], BLOCK)[-1] if n >= BLOCK else None
        vllm_s = per_call(lambda: peers.vllm_sha256((parent, tuple(block), None)), 500, t)
        ext.append({"context": n, "chain_append_us": append_s * 1e6, "extend_block_hashes_us": extend_s * 1e6,
                    "vllm_one_block_us": vllm_s * 1e6})
    result = {"python": sys.version.split()[0], "block_size": BLOCK, "rows": rows, "call_512_us": call_us,
              "extension": ext}
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)
    print(f"block size {BLOCK}, Mtok/s (CPU time, median)")
    print("| prompt | list | tuple | numpy | vllm (list) | lmdeploy (list) | lmdeploy (numpy) | list/numpy | list/vllm |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['tokens']} | {r['list'] / 1e6:.0f} | {r['tuple'] / 1e6:.0f} | {r['numpy'] / 1e6:.0f} | "
              f"{r['vllm'] / 1e6:.1f} | {r['lmdeploy'] / 1e6:.1f} | {r['lmdeploy_np'] / 1e6:.1f} | "
              f"{r['list'] / r['numpy']:.2f} | {r['list'] / r['vllm']:.1f} |")
    print(f"\n512-token list call: {call_us:.1f} us")
    print("\n| context | Chain.append (1 block) | extend_block_hashes (1 block) | vLLM-style one block |")
    print("|---:|---:|---:|---:|")
    for e in ext:
        print(f"| {e['context']} | {e['chain_append_us']:.2f} us | {e['extend_block_hashes_us']:.1f} us | "
              f"{e['vllm_one_block_us']:.2f} us |")


if __name__ == "__main__":
    main()
