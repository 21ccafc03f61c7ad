#!/usr/bin/env python3
"""A connector's save and load path with kvkey, against a dict standing in for the store.

Save: hash the prompt's full blocks once (scheduler side), then each TP rank
stores its KV bytes for each block under ns.store_key(h) with the sealed header
as an extra buffer (as in a multi-buffer put).
Load: ask which keys exist, read them, verify every header before the block
counts as loaded, and count the reusable tokens with ns.reusable_prefix.
A foreign header (written under another identity into our key) and a truncated
value are rejected and end the reusable prefix. Exits 1 if an expectation fails.
"""

import sys
from typing import Any, Dict, List, Optional, Sequence

import numpy as np

import kvkey

TP_SIZE = 2
LAYERS, HEADS, HEAD_DIM, BLOCK = 4, 2, 64, 16
BYTES_PER_ELEM = 2  # fp16
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
        kv=kvkey.Kv(dtype="fp16", block_size=BLOCK, num_layers=LAYERS, num_kv_heads=HEADS, head_dim=HEAD_DIM,
                    layout="demo.layer_major"),
        shard=kvkey.Shard(tp_size=TP_SIZE, tp_rank=rank),
    )
    for name, value in changes.items():
        setattr(i.model, name, value)
    return i


def payload_size(ns: kvkey.KeyNamespace) -> int:
    heads = ns.slice.kv_head_end - ns.slice.kv_head_begin
    return LAYERS * 2 * heads * HEAD_DIM * BLOCK * BYTES_PER_ELEM  # K and V of this rank's heads


class DictStore:
    """key -> [header, kv] buffers, as a multi-buffer put would lay them out."""

    def __init__(self) -> None:
        self.objects: Dict[str, List[bytes]] = {}

    def batch_put_from_multi_buffers(self, keys: Sequence[str], buffers: Sequence[Sequence[Any]]) -> None:
        for key, bufs in zip(keys, buffers):
            self.objects[key] = [bytes(b) for b in bufs]

    def batch_is_exist(self, keys: Sequence[str]) -> List[int]:
        return [1 if k in self.objects else 0 for k in keys]

    def get(self, key: str) -> Optional[List[bytes]]:
        return self.objects.get(key)


def save(store: DictStore, ranks: Sequence[kvkey.KeyNamespace], hashes: Sequence[bytes]) -> None:
    """Worker side: every rank puts [header, kv] for every block it holds."""
    for ns in ranks:
        size = payload_size(ns)
        keys: List[str] = []
        bufs: List[List[Any]] = []
        for b, h in enumerate(hashes):
            kv = np.full(size, (b * 7 + ns.identity.shard.tp_rank) % 251, dtype=np.uint8)  # stand-in for GPU KV
            keys.append(ns.store_key(h))
            bufs.append([ns.seal(h, kv), kv])  # the header records the bytes' digest
        store.batch_put_from_multi_buffers(keys, bufs)


def load(store: DictStore, ranks: Sequence[kvkey.KeyNamespace], hashes: Sequence[bytes],
         prompt_len: int) -> kvkey.ReusablePrefix:
    """Lookup + load: a block counts only if every rank's header verifies."""
    results: List[bool] = []  # block-major: one bool per (block, rank)
    keys = [ns.store_key(h) for h in hashes for ns in ranks]
    exists = store.batch_is_exist(keys)
    for b, h in enumerate(hashes):
        for r, ns in enumerate(ranks):
            if not exists[b * len(ranks) + r]:
                results.append(False)
                continue
            stored = store.get(ns.store_key(h))
            assert stored is not None
            header, kv = stored
            # The header must describe exactly the bytes received (size and
            # digest), and they must be as many as this rank's blocks hold.
            verdict = ns.verify(header, h, kv)
            results.append(verdict.ok and len(kv) == payload_size(ns))
            if not verdict.ok:
                print(f"    block {b} rank {r}: {verdict}")
    # Engines leave the last prompt token to compute: at most prompt_len - 1 tokens.
    return ranks[0].reusable_prefix(results, len(ranks), max_tokens=prompt_len - 1)


def main() -> int:
    ranks = [kvkey.KeyNamespace(identity(r)) for r in range(TP_SIZE)]
    prompt = np.arange(1000, 1000 + 6 * BLOCK + 5, dtype=np.int64)  # 6 full blocks + a partial tail
    hashes = ranks[0].block_hashes(prompt)  # the chain does not depend on the rank
    expect(all(ns.block_hashes(prompt) == hashes for ns in ranks), "every rank computes the same block hashes")
    store = DictStore()

    print("save: 6 blocks x 2 ranks, header beside the KV bytes")
    save(store, ranks, hashes)
    expect(len(store.objects) == 12, "12 objects stored")
    print(f"  e.g. {ranks[1].store_key(hashes[0])}")

    print("load: same deployment")
    p = load(store, ranks, hashes, len(prompt))
    print(f"  reusable: {p}")
    expect(p.blocks == 6 and p.tokens == 96, "all 6 blocks (96 tokens) reusable")

    print("load: a longer prompt reuses the stored prefix (incremental hashing)")
    longer = np.concatenate([prompt, np.arange(50, dtype=np.int64)])
    longer_hashes = ranks[0].extend_block_hashes(hashes, longer)
    expect(longer_hashes == ranks[0].block_hashes(longer), "extend_block_hashes equals a full recompute")
    p = load(store, ranks, longer_hashes, len(longer))
    print(f"  reusable: {p}")
    expect(p.blocks == 6, "the 6 stored blocks, then the first missing one stops the count")

    print("load: after a weight update (epoch 1) nothing old is reachable")
    updated = [kvkey.KeyNamespace(identity(r, weights_epoch=1)) for r in range(TP_SIZE)]
    p = load(store, updated, updated[0].block_hashes(prompt), len(prompt))
    print(f"  reusable: {p}")
    expect(p.blocks == 0, "no block reused across the weight update")

    print("load: a foreign header in our key (a misconfigured writer) is rejected")
    foreign = kvkey.KeyNamespace(identity(1, weights_epoch=7))
    key = ranks[1].store_key(hashes[3])
    stored = store.get(key)
    assert stored is not None
    kv = stored[1]
    store.objects[key] = [foreign.seal(hashes[3], kv), kv]
    p = load(store, ranks, hashes, len(prompt))
    print(f"  reusable: {p}")
    expect(p.blocks == 3, "blocks 0-2 reused; block 3 fails verification on rank 1, so it is a miss")

    print("load: a truncated value is rejected")
    key = ranks[0].store_key(hashes[1])
    stored = store.get(key)
    assert stored is not None
    header, kv = stored
    store.objects[key] = [header, kv[:-1]]
    p = load(store, ranks, hashes, len(prompt))
    print(f"  reusable: {p}")
    expect(p.blocks == 1, "only block 0 left: block 1's payload size does not verify")

    print("load: a bit flipped in a stored payload is rejected")
    key = ranks[1].store_key(hashes[0])
    stored = store.get(key)
    assert stored is not None
    header, kv = stored
    damaged = bytearray(kv)
    damaged[5] ^= 0x10
    store.objects[key] = [header, damaged]
    p = load(store, ranks, hashes, len(prompt))
    print(f"  reusable: {p}")
    expect(p.blocks == 0, "block 0's payload does not match its digest on rank 1: nothing is reused")

    if failures:
        print(f"\nconnector_roundtrip.py: {failures} expectation(s) FAILED")
        return 1
    print("\nconnector_roundtrip.py: all expectations met")
    return 0


if __name__ == "__main__":
    sys.exit(main())
