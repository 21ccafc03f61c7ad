#!/usr/bin/env python3
"""A connector's save, lookup and load path with kvkey.Connector, on an in-memory store.

Save: hash the prompt's full blocks once (scheduler side), then each TP rank
stores its KV bytes for each block as one value, ns.seal_value(h, kv): the
sealed header followed by the bytes.
Lookup: read every rank's header of every block (the first 1024 bytes of each
value) and count the leading blocks whose headers all verify.
Load: read the values, verify header and bytes, and copy the verified bytes
into the engine's buffers (numpy arrays standing in for GPU blocks).
A foreign header (written under another identity into our key), a truncated
value and a flipped payload bit are rejected and end the reusable prefix.
kvkey.stores.MemoryStore stands in for the store: kvkey.stores.RedisStore or
your own store (see docs/python.md) take its place unchanged.
Exits 1 if an expectation fails.
"""

import sys
from typing import Any, List, Sequence

import numpy as np

import kvkey
from kvkey.stores import MemoryStore

TP_SIZE = 2
LAYERS, HEADS, HEAD_DIM, BLOCK = 4, 2, 64, 16
failures = 0


def expect(ok: bool, what: str) -> None:
    global failures
    print(f"  [{'ok' if ok else 'FAIL'}] {what}")
    if not ok:
        failures += 1


def identity(rank: int, **changes: Any) -> kvkey.Identity:
    i = kvkey.Identity(
        tenant="team-a",
        model=kvkey.Model(name="demo-model", revision="0123456789abcdef"),
        kv=kvkey.Kv(dtype=kvkey.KvDtype.fp16, block_size=BLOCK, num_layers=LAYERS, num_kv_heads=HEADS,
                    head_dim=HEAD_DIM, layout="demo.layer_major"),
        shard=kvkey.Shard(tp_size=TP_SIZE, tp_rank=rank),
    )
    for name, value in changes.items():
        setattr(i.model, name, value)
    return i


def payload_size(ns: kvkey.KeyNamespace) -> int:
    """K and V of this rank's KV heads for one block: kvkey derives it from the identity."""
    size = ns.payload_size
    assert size is not None  # None only where quantization scales make the size engine-specific
    return size


def save(conn: kvkey.Connector, hashes: Sequence[bytes]) -> None:
    """Worker side: every rank stores one value per block."""
    for rank, ns in enumerate(conn.ranks):
        size = payload_size(ns)
        kv = [np.full(size, (b * 7 + rank) % 251, dtype=np.uint8) for b in range(len(hashes))]  # stand-in KV
        conn.save(hashes, kv, rank=rank)


def load(conn: kvkey.Connector, hashes: Sequence[bytes], prompt_len: int) -> int:
    """Scheduler: how many blocks every rank can serve; workers: load them into their
    buffers. Returns the number of blocks loaded on every rank."""
    # Engines leave the last prompt token to compute: at most prompt_len - 1 tokens.
    found = conn.lookup(hashes, max_tokens=prompt_len - 1)
    loaded = found
    for rank, ns in enumerate(conn.ranks):
        buffers = [np.zeros(payload_size(ns), dtype=np.uint8) for _ in range(found)]
        results = conn.load_into(hashes[:found], buffers, rank=rank)
        for b, r in enumerate(results):
            if not r.loaded:
                print(f"    block {b} rank {rank}: {r.status} {r.verdict}")
        ok = [r.loaded for r in results] + [False]
        loaded = min(loaded, ok.index(False))
    return loaded


def damage(store: MemoryStore, key: str, change: Any) -> None:
    store.values[key] = bytes(change(bytearray(store.values[key])))


def flip(value: bytearray, at: int) -> bytearray:
    value[at] ^= 0x10
    return value


def main() -> int:
    ranks = [kvkey.KeyNamespace(identity(r)) for r in range(TP_SIZE)]
    prompt = np.arange(1000, 1000 + 6 * BLOCK + 5, dtype=np.int64)  # 6 full blocks + a partial tail
    hashes = ranks[0].block_hashes(prompt)  # the chain does not depend on the rank
    expect(all(ns.block_hashes(prompt) == hashes for ns in ranks), "every rank computes the same block hashes")
    expect(payload_size(ranks[1]) == 2 * LAYERS * (HEADS // TP_SIZE) * HEAD_DIM * BLOCK * kvkey.dtype_itemsize("fp16"),
           "ns.payload_size: K and V of one KV head (of 2, TP 2), 4 layers, 16 tokens, 2 bytes each")
    store = MemoryStore()
    conn = kvkey.Connector(store, ranks)

    print("save: 6 blocks x 2 ranks, one value (header + KV bytes) per block and rank")
    save(conn, hashes)
    expect(len(store) == 12, "12 objects stored")
    print(f"  e.g. {ranks[1].store_key(hashes[0])}")

    print("load: same deployment")
    n = load(conn, hashes, len(prompt))
    print(f"  reusable: {n} blocks")
    expect(n == 6, "all 6 blocks (96 tokens) reusable")

    print("load: a longer prompt reuses the stored prefix (incremental hashing)")
    longer = np.concatenate([prompt, np.arange(50, dtype=np.int64)])
    longer_hashes = ranks[0].extend_block_hashes(hashes, longer)
    expect(longer_hashes == ranks[0].block_hashes(longer), "extend_block_hashes equals a full recompute")
    n = load(conn, longer_hashes, len(longer))
    print(f"  reusable: {n} blocks")
    expect(n == 6, "the 6 stored blocks, then the first missing one stops the count")

    print("load: after a weight update (epoch 1) nothing old is reachable")
    updated = conn.with_epoch(1)
    n = load(updated, updated.ns.block_hashes(prompt), len(prompt))
    print(f"  reusable: {n} blocks")
    expect(n == 0, "no block reused across the weight update")

    print("load: a foreign header in our key (a misconfigured writer) is rejected")
    foreign = kvkey.KeyNamespace(identity(1, weights_epoch=7))
    key = ranks[1].store_key(hashes[3])
    kv = store.values[key][kvkey.envelope_size:]
    store.values[key] = foreign.seal_value(hashes[3], kv)
    n = load(conn, hashes, len(prompt))
    print(f"  reusable: {n} blocks")
    expect(n == 3, "blocks 0-2 reused; block 3's header fails on rank 1, so the lookup stops there")
    expect(conn.lookup_existing(hashes) == 6, "an existence-only lookup would have counted it")

    print("load: a truncated value is rejected")
    damage(store, ranks[0].store_key(hashes[1]), lambda v: v[:-1])
    n = load(conn, hashes, len(prompt))
    print(f"  reusable: {n} blocks")
    expect(n == 1, "only block 0 left: block 1's payload size does not verify")

    print("load: a bit flipped in a stored payload is rejected at load")
    damage(store, ranks[1].store_key(hashes[0]), lambda v: flip(v, kvkey.envelope_size + 5))
    expect(conn.lookup(hashes) == 1, "block 0's header still verifies (the load checks the bytes); "
           "block 1's value is shorter than its header says")
    n = load(conn, hashes, len(prompt))
    print(f"  reusable: {n} blocks")
    expect(n == 0, "block 0's payload does not match its digest on rank 1: nothing is reused")
    buffer: List[Any] = [np.full(payload_size(ranks[1]), 0xEE, dtype=np.uint8)]
    conn.load_into(hashes[:1], buffer, rank=1)
    expect(bool((buffer[0] == 0xEE).all()), "the rejected block's buffer is untouched")

    if failures:
        print(f"\nconnector_roundtrip.py: {failures} expectation(s) FAILED")
        return 1
    print("\nconnector_roundtrip.py: all expectations met")
    return 0


if __name__ == "__main__":
    sys.exit(main())
