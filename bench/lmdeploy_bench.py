#!/usr/bin/env python3
"""Save, lookup and load through lmdeploy's own Mooncake store connector: kvkey vs legacy.

Both runs use lmdeploy 0.18.0's connector classes (scheduler side and worker side, its
threads, its lookup RPC) on the same real Mooncake master, in one process, request by
request in turn (legacy, kvkey, legacy, ...; the first of each round alternating) so that
both see the same machine. The KV pool is laid out by lmdeploy's cache engine for a
Llama-shaped model (default: 8 layers, 4 KV heads of 128, block size 64, fp16: 1 MiB per
block); prompts are filled with random bytes, no model runs. The segments hold every value
of the run (the master never evicts), and the engine polls the connector every 0.2 ms.

Reported: save and load throughput (GB/s of KV, the median request) and their
kvkey/legacy ratios (targets: >= 0.85), and the lookup's median time per request with
where it goes (legacy: one ``batch_is_exist``; kvkey: one ``batch_get_session_start`` plus
ranged header reads, and verifying each header).

  eval "$(scripts/mooncake.sh start)"
  PYTHONPATH=build/py/python "$(scripts/venv.sh python)" bench/lmdeploy_bench.py [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from typing import Any, Dict, List

HERE = os.path.dirname(os.path.abspath(__file__))
POLL = 0.0002  # seconds between the engine's polls of the connector (lmdeploy polls once per engine step)
sys.path.insert(0, os.path.join(HERE, "..", "examples", "lmdeploy"))


def bench(args: argparse.Namespace) -> Dict[str, Any]:
    import torch

    import tiny_engine as te
    from kvkey.integrations import lmdeploy as integration

    master, metadata = os.environ.get("MOONCAKE_MASTER_ADDR"), os.environ.get("MOONCAKE_METADATA_URL")
    if not master or not metadata:
        sys.exit("lmdeploy_bench.py: MOONCAKE_MASTER_ADDR and MOONCAKE_METADATA_URL must name a running master")
    geometry = dict(te.GEOMETRY, hidden_size=args.kv_heads * args.head_dim * 2, num_attention_heads=args.kv_heads * 2,
                    num_key_value_heads=args.kv_heads, head_dim=args.head_dim, num_hidden_layers=args.layers)
    bs = args.block_size
    blocks_per_req = args.blocks
    num_blocks = blocks_per_req * args.requests + 8
    with tempfile.TemporaryDirectory(prefix="kvkey-lmdeploy-bench-") as d:
        # Room in the four segments for every value of the run and half as much again: the
        # master never evicts (it would evict values a later lookup counts on).
        every = 2 * args.rounds * args.requests * blocks_per_req * args.layers * 2 * bs * args.kv_heads * args.head_dim * 2
        seg = max(256 << 20, every * 3 // 2 // 4)
        mc = te.mooncake_config(os.path.join(d, "mc.json"), master, metadata, segment=seg)
        model = te.write_model(os.path.join(d, "m", "bench"), seed=1, geometry=geometry)
        engines = {}
        for mode in ("legacy", "kvkey"):
            kv = {"tenant": "bench", "revision": "r1", "staging_blocks": blocks_per_req} if mode == "kvkey" else None
            prod = te.TinyEngine(model, role="kv_producer", mooncake_json=mc, block_size=bs, num_blocks=num_blocks,
                                 kvkey=kv, with_decoder=False)
            cons = te.TinyEngine(model, role="kv_consumer", mooncake_json=mc, block_size=bs, num_blocks=num_blocks,
                                 kvkey=kv, with_decoder=False)
            for pool in prod.allocation.pools:
                pool.tensor.copy_(torch.randint(0, 256, pool.tensor.shape, dtype=torch.uint8))
            engines[mode] = (prod, cons)
        block_bytes = sum(p.tensor[0, 0].numel() for p in engines["legacy"][0].allocation.pools) * args.layers
        results: Dict[str, Dict[str, List[float]]] = {m: {"save": [], "load": [], "lookup": []} for m in engines}
        reads = time_reads(integration, engines["kvkey"][1]) if args.read_breakdown else None
        req_bytes = blocks_per_req * block_bytes
        seq = 0
        for r in range(args.rounds):
            # Request by request, legacy and kvkey in turn (the first alternating by round):
            # both see the same machine, minute by minute.
            order = ("legacy", "kvkey") if r % 2 == 0 else ("kvkey", "legacy")
            prompts: Dict[str, List[List[int]]] = {m: [] for m in engines}
            for i in range(args.requests):
                for mode in order:
                    seq += 1
                    p = [(seq * 1009 + j * 7) % 50000 for j in range(blocks_per_req * bs + 1)]
                    prompts[mode].append(p)
                    prod = engines[mode][0]
                    t = time.perf_counter()
                    save_blocks(te, prod, p, list(range(i * blocks_per_req, (i + 1) * blocks_per_req)), seq * 100 + i)
                    results[mode]["save"].append(req_bytes / (time.perf_counter() - t))
            for i in range(args.requests):
                for mode in order:
                    cons = engines[mode][1]
                    s = te.FakeSequence(10**7 + r * 1000 + i * 2 + (mode == "kvkey"), prompts[mode][i])
                    cons.scheduler.on_new_request(s)
                    t = time.perf_counter()
                    n = poll_lookup(cons, s)
                    results[mode]["lookup"].append(time.perf_counter() - t)
                    assert n == blocks_per_req * bs, f"{mode}: the lookup found {n} tokens"
                    again = reads["kvkey", "reread"] if reads else 0.0
                    t = time.perf_counter()
                    cons.scheduler.update_state_after_alloc(s, list(range(i * blocks_per_req, (i + 1) * blocks_per_req)),
                                                            n)
                    cons._step()
                    (res,) = cons._drain("load", {s.seq_id}, poll=POLL)
                    spent = time.perf_counter() - t - ((reads["kvkey", "reread"] - again) if reads else 0.0)
                    results[mode]["load"].append(req_bytes / spent)
                    assert res.success, f"{mode}: a load failed"
                    cons.scheduler.request_finished(s)
        med = {m: {k: statistics.median(v) for k, v in x.items()} for m, x in results.items()}
        out = {"block_bytes": block_bytes, "blocks_per_request": blocks_per_req, "requests": args.requests,
               "rounds": args.rounds,
               "legacy": {"save_GBps": med["legacy"]["save"] / 1e9, "load_GBps": med["legacy"]["load"] / 1e9,
                          "lookup_ms": med["legacy"]["lookup"] * 1e3},
               "kvkey": {"save_GBps": med["kvkey"]["save"] / 1e9, "load_GBps": med["kvkey"]["load"] / 1e9,
                         "lookup_ms": med["kvkey"]["lookup"] * 1e3},
               "ratio": {"save": med["kvkey"]["save"] / med["legacy"]["save"],
                         "load": med["kvkey"]["load"] / med["legacy"]["load"],
                         "lookup_time": med["kvkey"]["lookup"] / med["legacy"]["lookup"]},
               "metrics": integration.metrics().as_dict()}
        out["lookup_breakdown"] = lookup_breakdown(engines, args, bs, blocks_per_req)
        if reads:
            out["load_breakdown"] = {f"{m}_{k}_ms": v * 1e3 / args.rounds for (m, k), v in reads.items()}
        for prod, cons in engines.values():
            cons.close()
            prod.close()
        return out


def time_reads(integration: Any, kvkey_consumer: Any) -> Dict[Any, float]:
    """Seconds, summed over the rounds, that each load spends in Mooncake's read call
    (``batch_get_into_multi_buffers``, the same call for both), and kvkey's same call again
    at once on the same values and memory: where the load's time goes."""
    spent: Dict[Any, float] = {("legacy", "read"): 0.0, ("kvkey", "read"): 0.0, ("kvkey", "reread"): 0.0}

    class Timed:  # lmdeploy's client, as its receiving thread sees it
        def __init__(self, client: Any) -> None:
            self.client = client

        def batch_get_into_multi_buffers(self, *a: Any) -> Any:
            t = time.perf_counter()
            r = self.client.batch_get_into_multi_buffers(*a)
            spent["legacy", "read"] += time.perf_counter() - t
            return r

        def __getattr__(self, name: str) -> Any:
            return getattr(self.client, name)

    legacy_load = integration._LegacyReceiver._load

    def load(self: Any, request: Any) -> Any:
        if not isinstance(self.store, Timed):
            self.store = Timed(self.store)
        return legacy_load(self, request)

    integration._LegacyReceiver._load = load  # the kvkey receiver has its own _load
    store = kvkey_consumer.worker.connector_worker.kvkey.store
    call = store._call

    def timed_call(what: str, f: Any, *a: Any) -> Any:
        if what != "batch_get_into_multi_buffers":
            return call(what, f, *a)
        t = time.perf_counter()
        r = call(what, f, *a)
        spent["kvkey", "read"] += time.perf_counter() - t
        t = time.perf_counter()
        f(*a)
        spent["kvkey", "reread"] += time.perf_counter() - t
        return r

    store._call = timed_call
    return spent


def save_blocks(te: Any, eng: Any, prompt: List[int], blocks: List[int], seq_id: int) -> None:
    from lmdeploy.pytorch.kv_connector.base import KVConnectorStepInput

    s = te.FakeSequence(seq_id, prompt)
    eng.scheduler.on_new_request(s)
    n = len(blocks) * eng.block_size
    meta = eng._step(KVConnectorStepInput(running=[s], connector_token_lens=(n,), connector_block_ids=(tuple(blocks),),
                                          connector_logical_block_ids=(tuple(blocks),)))
    eng._drain("save", {r.save_id for r in meta.save_requests}, poll=POLL)
    eng.scheduler.request_finished(s)


def poll_lookup(eng: Any, s: Any) -> int:
    while True:
        n, _ = eng.scheduler.get_num_new_matched_tokens(s, 0)
        if n is not None:
            return int(n)
        time.sleep(POLL)


def lookup_breakdown(engines: Dict[str, Any], args: argparse.Namespace, bs: int, nblocks: int) -> Dict[str, float]:
    """Where one kvkey lookup's time goes, measured on the worker side (no RPC): the
    existence check lmdeploy does, the header reads alone, and the verified lookup."""
    import tiny_engine as te

    _, cons = engines["kvkey"]
    w = cons.worker.connector_worker
    k = w.kvkey
    p = [(7 + i * 3) % 50000 for i in range(nblocks * bs + 1)]
    s = te.FakeSequence(10**8, p)
    entries = cons.scheduler.connector_scheduler._get_request_block_hashes(s, s.seq_id, nblocks * bs, bs)
    conn = k.connector(None, "lookup")
    hashes = [bytes(e[:32]) for e in entries]
    keys = [conn.ranks[0].store_key(h) for h in hashes]
    # the prompt's blocks are in the store: the last kvkey round saved other prompts, so save these
    from kvkey import Connector

    Connector(k.store, conn.ranks, payload_size=k.payload_size).save(hashes, [bytes(k.payload_size)] * len(hashes))

    def timed(f: Any, n: int = 30) -> float:
        ts = []
        for _ in range(n):
            t = time.perf_counter()
            f()
            ts.append(time.perf_counter() - t)
        return statistics.median(ts) * 1e3

    return {"exists_ms": timed(lambda: w.store.batch_is_exist(keys)),
            "header_reads_ms": timed(lambda: k.store.get_prefix(keys, 1024)),
            "verified_lookup_ms": timed(lambda: conn.lookup(hashes)),
            "worker_lookup_ms": timed(lambda: w.lookup(nblocks * bs, entries))}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--kv-heads", type=int, default=4)
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--block-size", type=int, default=64)
    ap.add_argument("--blocks", type=int, default=16, help="blocks per request")
    ap.add_argument("--requests", type=int, default=4, help="requests per round")
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--read-breakdown", action="store_true",
                    help="also time Mooncake's read call in each load, and kvkey's again at once (the repeat is "
                         "taken out of the load's time; exact for one lane, not when kvkey's two lanes overlap it)")
    a = ap.parse_args()
    out = bench(a)
    mb = out["block_bytes"] / (1 << 20)
    print(f"lmdeploy connector on Mooncake, {mb:.2f} MiB per block, {a.blocks} blocks x {a.requests} requests, "
          f"{a.rounds} rounds (median request)")
    for mode in ("legacy", "kvkey"):
        r = out[mode]
        print(f"  {mode:6s} save {r['save_GBps']:.3f} GB/s  load {r['load_GBps']:.3f} GB/s  "
              f"lookup {r['lookup_ms']:.2f} ms/request")
    q = out["ratio"]
    print(f"  kvkey/legacy: save {q['save']:.2f}x  load {q['load']:.2f}x  lookup time {q['lookup_time']:.2f}x")
    b = out["lookup_breakdown"]
    print(f"  lookup of {a.blocks} blocks on the worker: exists {b['exists_ms']:.2f} ms, header reads "
          f"{b['header_reads_ms']:.2f} ms, verified lookup {b['verified_lookup_ms']:.2f} ms, worker.lookup "
          f"{b['worker_lookup_ms']:.2f} ms")
    d = out.get("load_breakdown")
    if d:
        print(f"  load of a round on the worker: Mooncake's read call: legacy {d['legacy_read_ms']:.1f} ms, kvkey "
              f"{d['kvkey_read_ms']:.1f} ms (the same values read again at once: {d['kvkey_reread_ms']:.1f} ms, not "
              f"in the load's time)")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
