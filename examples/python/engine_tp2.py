"""An engine-shaped connector: TP=2, bf16 K and V per layer as numpy arrays, Redis.

Each rank holds a paged KV cache per layer, K and V of shape
[num_blocks, kv_heads_per_rank, block_size, head_dim] (bf16, kept as uint16 as numpy has
no bfloat16). A block's stored value is the concatenation, in layer order, of K and V of
that block: the connector takes the per-layer views as they are (no gather) and writes
verified bytes straight into the per-layer slots of another cache (no scatter, no
staging copy in the engine). Run with a redis-server:

    python3 examples/python/engine_tp2.py --port 6379
"""

import argparse
from typing import Any, List, Optional

import numpy as np
import numpy.typing as npt
import redis  # type: ignore[import]  # redis-py ships no type information

import kvkey
from kvkey.stores import RedisStore

TP, LAYERS, KV_HEADS, HEAD_DIM, BLOCK, CACHE_BLOCKS = 2, 4, 8, 64, 16, 32


class RankCache:
    """One rank's paged KV cache: K and V per layer."""

    def __init__(self, rng: Optional[np.random.Generator] = None) -> None:
        shape = (CACHE_BLOCKS, KV_HEADS // TP, BLOCK, HEAD_DIM)
        def make() -> "npt.NDArray[np.uint16]":
            if rng is None:
                return np.zeros(shape, np.uint16)
            return rng.integers(0, 2**16, size=shape, dtype=np.uint16)

        self.k = [make() for _ in range(LAYERS)]
        self.v = [make() for _ in range(LAYERS)]

    def block(self, slot: int) -> "List[npt.NDArray[np.uint16]]":
        """The views of one block, in the value's order: K0, V0, K1, V1, ..."""
        return [t[slot] for layer in range(LAYERS) for t in (self.k[layer], self.v[layer])]


def main(port: int, tenant: str = "team-a") -> int:
    identity = kvkey.Identity(
        tenant=tenant,
        model=kvkey.Model(name="Qwen/Qwen2.5-7B-Instruct", revision="a09a35458c702b33eeacc393d103063234e8bc28"),
        kv=kvkey.Kv(dtype="bf16", block_size=BLOCK, num_layers=LAYERS, num_kv_heads=KV_HEADS, head_dim=HEAD_DIM,
                    layout="example.layer_major.kv_per_layer"),
        shard=kvkey.Shard(tp_size=TP, tp_rank=0))
    ns = kvkey.KeyNamespace(identity)
    ranks = [ns.for_rank(r) for r in range(TP)]
    client: Any = redis.Redis(host="127.0.0.1", port=port)
    conn = kvkey.Connector(RedisStore(client), ranks)  # payload size from the identity

    prompt = list(range(1000, 1000 + 5 * BLOCK + 3))
    hashes = ns.block_hashes(prompt)  # the same on every rank
    rng = np.random.default_rng(7)
    writer = [RankCache(rng) for _ in range(TP)]
    slots = [3, 9, 4, 17, 0]  # where the prompt's blocks sit in the writer's cache
    for r in range(TP):
        assert conn.save(hashes, [writer[r].block(s) for s in slots], rank=r) == len(hashes)

    # Another instance serves the same prompt: how much is reusable on every rank, then load it.
    reusable = conn.lookup(hashes, max_tokens=len(prompt) - 1)
    reader = [RankCache() for _ in range(TP)]
    free = [30, 31, 1, 2, 5][:reusable]
    for r in range(TP):
        results = conn.load_into(hashes[:reusable], [reader[r].block(s) for s in free], rank=r)
        assert all(res.loaded for res in results), results
    for r in range(TP):
        for a, b in zip(slots, free):
            for w, d in zip(writer[r].block(a), reader[r].block(b)):
                assert np.array_equal(w, d)
    client.delete(*[ns_r.store_key(h) for ns_r in ranks for h in hashes])
    print(f"engine_tp2: {len(hashes)} blocks x {TP} ranks saved, {reusable} reusable, loaded and equal")
    return reusable


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=6379)
    main(parser.parse_args().port)
