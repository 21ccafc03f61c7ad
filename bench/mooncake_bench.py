#!/usr/bin/env python3
"""kvkey on a real Mooncake Store against the raw Mooncake calls, two processes, one run.

A second process lends the store its memory (kvkey.stores.mooncake.spawn_holder); this one
lends none, so every byte crosses TCP. With `--blocks` blocks of `--payload` bytes
(default 2,048 of 64 KiB), interleaved round by round (each call of a pair first every
other round), it times:

- lookup:    kvkey.Connector.lookup (every header read and verified: batch_get_session_start
             + ranged reads of 1024 bytes in read_streams concurrent calls) / raw batch_is_exist;
- save:      Connector.save_from with kvkey.Slots (headers sealed in place by the core,
             batch_upsert_from from registered memory) / raw batch_put_from of the same
             bytes (fresh keys each round);
- load_into: Connector.load_into with kvkey.Slots (batch_get_into into registered memory,
             every block verified in place by the core) / raw batch_get_into into the same
             memory, in the same batches;
- also, for reference: Connector.save (upsert_batch from bytes), Connector.load_into
  into ordinary buffers (staged in registered memory, verified copies), and the lookup with read_streams=1
  (every header range in one call).

Prints each median, the fastest round and the ratios of the medians, and the JSON of all
of it with --json. Needs a master (scripts/mooncake.sh start):

    scripts/mooncake.sh install; eval "$(scripts/mooncake.sh env)"; eval "$(scripts/mooncake.sh start)"
    "$MOONCAKE_PYTHON" bench/mooncake_bench.py

The figures go to docs/performance.md ("kvkey on Mooncake").
"""

import argparse
import collections
import json
import os
import secrets
import statistics
import time
from typing import Callable, Dict, List

import kvkey
from kvkey.stores import MooncakeStore
from kvkey.stores import mooncake as mc


def namespace(tenant: str, payload: int) -> kvkey.KeyNamespace:
    # 64 KiB per block: bf16, block 16, 16 layers, 8 KV heads, head_dim 16 (K and V).
    layers = payload // (2 * 16 * 8 * 16 * 2)
    return kvkey.KeyNamespace(kvkey.Identity(
        tenant=tenant, model=kvkey.Model(name="bench", revision="0123456789abcdef"),
        kv=kvkey.Kv(dtype=kvkey.KvDtype.bf16, block_size=16, num_layers=layers, num_kv_heads=8, head_dim=16,
                    layout="bench.v1")))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--master", default=os.environ.get("MOONCAKE_MASTER_ADDR"))
    ap.add_argument("--metadata", default=os.environ.get("MOONCAKE_METADATA_URL", "P2PHANDSHAKE"))
    ap.add_argument("--blocks", type=int, default=2048)
    ap.add_argument("--payload", type=int, default=64 << 10)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--one-shot-tcp", action="store_true",
                    help="leave Mooncake's TCP transport in its default mode (a new connection per transfer)")
    args = ap.parse_args()
    if not args.one_shot_tcp:
        # Persistent connections (lanes) for every transfer, read when the client is set up: with
        # one connection per transfer the calls' times depend on the sockets the previous
        # calls left in TIME_WAIT (docs/integration/mooncake.md). Raw and kvkey calls share
        # the client, so both run with it.
        os.environ.setdefault("MC_TCP_ENABLE_CONNECTION_POOL", "1")
    if not args.master:
        ap.error("no master: pass --master or set MOONCAKE_MASTER_ADDR (scripts/mooncake.sh start)")

    n, size = args.blocks, args.payload
    stride = kvkey.envelope_size + size
    # The holder keeps two rounds of both writers' values, plus the reference save.
    holder = mc.spawn_holder(args.master, args.metadata, segment=max(256 << 20, 8 * n * stride))
    store = MooncakeStore.connect(args.master, args.metadata, global_segment_size=0,
                                  local_buffer_size=max(64 << 20, 2 * 128 * stride))
    try:
        ns = namespace(f"bench-{secrets.token_hex(3)}", size)
        assert ns.payload_size == size, (ns.payload_size, size)
        conn = kvkey.Connector(store, ns, payload_size=size)
        hashes = ns.block_hashes(range(16 * n))
        keys = [ns.store_key(h) for h in hashes]
        out, into = kvkey.Slots(store, n, size), kvkey.Slots(store, n, size)
        for i in range(n):
            out.payload(i)[:] = os.urandom(64) * (size // 64)
        assert conn.save_from(hashes, out) == n
        assert conn.lookup(hashes) == n
        raw_sizes = [stride] * n
        out_addrs = [out.address(i) for i in range(n)]
        into_addrs = [into.address(i) for i in range(n)]
        payloads = [bytes(out.payload(i)) for i in range(n)]
        bufs = [bytearray(size) for _ in range(n)]

        def lookup() -> None:
            assert conn.lookup(hashes) == n

        def exists() -> None:
            assert all(r == 1 for r in store.client.batch_is_exist(keys))

        state = {"round": 0}

        def save() -> None:
            state["round"] += 1
            c = conn.with_epoch(state["round"])  # fresh keys, as for the raw put
            assert c.save_from(hashes, out) == n

        raw = f"bench-raw-{secrets.token_hex(3)}/"

        step = store.batch  # the raw calls in the batches MooncakeStore uses (a read must beat its lease)

        def put_from() -> None:
            fresh = [f"{raw}{state['round']}/{i}" for i in range(n)]
            for a in range(0, n, step):
                got = store.client.batch_put_from(fresh[a:a + step], out_addrs[a:a + step], raw_sizes[a:a + step])
                assert all(r == 0 for r in got), got

        def load_into() -> None:
            res = conn.load_into(hashes, into)
            bad = collections.Counter(f"{r.status} {r.verdict.reason if r.verdict else ''}" for r in res if not r.loaded)
            assert not bad, (bad, store.last_code)

        def get_into() -> None:
            for a in range(0, n, step):
                got = store.client.batch_get_into(keys[a:a + step], into_addrs[a:a + step], raw_sizes[a:a + step])
                assert all(r == stride for r in got), got

        one = MooncakeStore(store.client, read_streams=1)  # the headers in one ranged-read call
        conn_one = kvkey.Connector(one, ns, payload_size=size)

        def lookup_1() -> None:
            assert conn_one.lookup(hashes) == n

        def save_bytes() -> None:
            assert conn.save(hashes, payloads) == n

        def load_copies() -> None:
            assert all(r.loaded for r in conn.load_into(hashes, bufs))

        pairs: Dict[str, List[Callable[[], None]]] = {
            "lookup": [lookup, exists], "save": [save, put_from], "load_into": [load_into, get_into],
            "reference": [save_bytes, load_copies, lookup_1]}
        times: Dict[str, List[float]] = {f.__name__: [] for fs in pairs.values() for f in fs}
        for r in range(args.rounds):
            for fs in pairs.values():
                for f in (fs if r % 2 == 0 else fs[::-1]):  # each call goes first every other round
                    t = time.perf_counter()
                    f()
                    times[f.__name__].append(time.perf_counter() - t)
            # Drop this round's fresh keys so memory does not fill.
            store.purge(conn.with_epoch(state["round"]).ns.key_prefix)
            store.purge(f"{raw}{state['round']}/")
        med = {k: statistics.median(v) for k, v in times.items()}
        ratios = {"lookup / batch_is_exist": med["lookup"] / med["exists"],
                  "save_from / batch_put_from": med["put_from"] / med["save"],
                  "load_into / batch_get_into": med["get_into"] / med["load_into"]}
        mib = n * stride / (1 << 20)
        print(f"mooncake bench: {n} blocks of {size} bytes ({mib:.0f} MiB with headers), {args.rounds} rounds, "
              f"two processes over TCP (MC_TCP_ENABLE_CONNECTION_POOL={os.environ.get('MC_TCP_ENABLE_CONNECTION_POOL', '')}"
              f", load average {' '.join(f'{x:.1f}' for x in os.getloadavg())})")
        for k in times:
            print(f"  {k:<12} median {med[k] * 1e3:8.2f} ms   fastest {min(times[k]) * 1e3:8.2f} ms")
        print("  ratios (speed of kvkey's call against the raw call; lookup: time ratio, target <= 2):")
        print(f"    lookup / batch_is_exist      {ratios['lookup / batch_is_exist']:.2f}x the time")
        print(f"    save_from vs batch_put_from  {ratios['save_from / batch_put_from']:.2f}x the speed (target >= 0.85)")
        print(f"    load_into vs batch_get_into  {ratios['load_into / batch_get_into']:.2f}x the speed (target >= 0.85)")
        if args.json:
            print(json.dumps({"blocks": n, "payload": size, "rounds": args.rounds, "median_s": med,
                              "fastest_s": {k: min(v) for k, v in times.items()}, "ratios": ratios}))
        store.purge(ns.tenant_prefix)
        store.purge(raw)
        one.close()
    finally:
        store.close()
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(timeout=60)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
