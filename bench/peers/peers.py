#!/usr/bin/python3
"""Block-hash chains of the Python inference engines, timed on kvkey's prompts.

Each peer hashes the same prompts as bench/kvkey_bench.cpp (token i is
(i * 40503 + 17) % 151936) at the same block sizes, and the tokens/s it reaches
is written as JSON for bench/report.py. The implementations are written here
from the engines' public code, hashing the same bytes:

  lmdeploy     lmdeploy's Mooncake store chain (docs: LEGACY-LMDEPLOY.md): per
               block SHA-256 over schema, parent, u32be block size, the tokens
               as u64be (struct, each id checked and converted as lmdeploy does
               for a Python list) and the framed adapter name.
  lmdeploy_np  the same chain when the tokens arrive as a numpy array: lmdeploy
               then packs the whole suffix with numpy once.
  vllm         vLLM v1's default block hash: sha256(pickle.dumps((parent,
               tuple(block), extra_keys), HIGHEST_PROTOCOL)), parent of block 0
               NONE_HASH (vllm/v1/core/kv_cache_utils.py hash_block_tokens,
               vllm/utils/hashing.py sha256).
  sglang       SGLang HiCache's page hash: sha256(bytes.fromhex(prior) ‖ each
               token as u32le, one update per token), hex digests
               (mem_cache/hicache_storage.py get_hash_str).

Usage: peers.py [--quick] [--out FILE] [--check]
Timing is CPU time of this process (time.process_time), the median of
several runs, so other load on the machine changes it little.
"""

import argparse
import hashlib
import json
import pickle
import platform
import statistics
import struct
import sys
import time

try:
    import numpy as np
except ImportError:  # the numpy variant is skipped, and says so
    np = None

VOCAB = 151936
LENGTHS = [1 << 10, 1 << 14, 1 << 17, 1 << 20]
BLOCK_SIZES = [16, 64, 256]


def prompt(n):
    return [(i * 40503 + 17) % VOCAB for i in range(n)]


# ---- lmdeploy -----------------------------------------------------------------------

LMDEPLOY_SCHEMA = b"lmdeploy-mooncake-prefix-block-v1\x00"


def lmdeploy_chain(tokens, block_size, adapter=""):
    ident = adapter.encode("utf-8")
    framed_ident = struct.pack(">I", len(ident)) + ident
    size_be = struct.pack(">I", block_size)
    packer = struct.Struct(">%dQ" % block_size)
    out = []
    parent = None
    for b in range(len(tokens) // block_size):
        block = tokens[b * block_size:(b + 1) * block_size]
        values = []
        for t in block:  # lmdeploy checks and converts every id of a list
            t = int(t)
            if t < 0 or t >= 2**64:
                raise ValueError("token id out of range")
            values.append(t)
        h = hashlib.sha256()
        h.update(LMDEPLOY_SCHEMA)
        if parent is not None:
            h.update(parent)
        h.update(size_be)
        h.update(packer.pack(*values))
        h.update(framed_ident)
        parent = h.digest()
        out.append(parent)
    return out


def lmdeploy_chain_numpy(tokens, block_size, adapter=""):
    ident = adapter.encode("utf-8")
    framed_ident = struct.pack(">I", len(ident)) + ident
    size_be = struct.pack(">I", block_size)
    full = len(tokens) // block_size
    suffix = tokens[:full * block_size]
    if suffix.size and bool(np.any(suffix < 0)):
        raise ValueError("token id out of range")
    packed = memoryview(np.asarray(suffix, dtype=">u8", order="C").tobytes())
    step = 8 * block_size
    out = []
    parent = None
    for b in range(full):
        h = hashlib.sha256()
        h.update(LMDEPLOY_SCHEMA)
        if parent is not None:
            h.update(parent)
        h.update(size_be)
        h.update(packed[b * step:(b + 1) * step])
        h.update(framed_ident)
        parent = h.digest()
        out.append(parent)
    return out


# ---- vLLM ---------------------------------------------------------------------------


def vllm_sha256(obj):
    return hashlib.sha256(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)).digest()


VLLM_NONE_HASH = vllm_sha256("0")  # vLLM derives it from PYTHONHASHSEED when set


def vllm_chain(tokens, block_size, extra_keys=None):
    out = []
    parent = None
    for b in range(len(tokens) // block_size):
        block = tokens[b * block_size:(b + 1) * block_size]
        if not parent:
            parent = VLLM_NONE_HASH
        parent = vllm_sha256((parent, tuple(block), extra_keys))
        out.append(parent)
    return out


# ---- SGLang -------------------------------------------------------------------------


def sglang_page_hash(token_ids, prior_hash=None):
    h = hashlib.sha256()
    if prior_hash:
        h.update(bytes.fromhex(prior_hash))
    for t in token_ids:
        if isinstance(t, tuple):  # EAGLE bigram pages
            for e in t:
                h.update(e.to_bytes(4, byteorder="little", signed=False))
        else:
            h.update(t.to_bytes(4, byteorder="little", signed=False))
    return h.hexdigest()


def sglang_chain(tokens, page_size):
    out = []
    prior = None
    for p in range(len(tokens) // page_size):
        prior = sglang_page_hash(tokens[p * page_size:(p + 1) * page_size], prior)
        out.append(prior)
    return out


# ---- timing -------------------------------------------------------------------------

PEERS = {
    "lmdeploy": lmdeploy_chain,
    "lmdeploy_np": lmdeploy_chain_numpy,
    "vllm": vllm_chain,
    "sglang": sglang_chain,
}


def time_peer(fn, tokens, block_size, min_seconds, min_runs):
    runs = []
    start = time.process_time()
    while len(runs) < min_runs or time.process_time() - start < min_seconds:
        t0 = time.process_time()
        fn(tokens, block_size)
        runs.append(time.process_time() - t0)
        if len(runs) >= 50:
            break
    return statistics.median(runs), len(runs)


def self_check():
    """The variants that must agree do, and the bytes are what the docs say."""
    tokens = prompt(1000)
    if np is not None:
        assert lmdeploy_chain(tokens, 64) == lmdeploy_chain_numpy(np.array(tokens, dtype=np.int64), 64)
    # lmdeploy block 0 by hand: no parent.
    msg = LMDEPLOY_SCHEMA + struct.pack(">I", 16) + b"".join(struct.pack(">Q", t) for t in tokens[:16]) + b"\0\0\0\0"
    assert lmdeploy_chain(tokens, 16)[0] == hashlib.sha256(msg).digest()
    # SGLang page 1 = sha256(digest of page 0 ‖ u32le tokens).
    pages = sglang_chain(tokens, 64)
    msg = bytes.fromhex(pages[0]) + struct.pack("<64I", *tokens[64:128])
    assert pages[1] == hashlib.sha256(msg).hexdigest()
    # vLLM block 1 = sha256(pickle((block 0, tuple, None))).
    blocks = vllm_chain(tokens, 16)
    assert blocks[1] == hashlib.sha256(pickle.dumps((blocks[0], tuple(tokens[16:32]), None), protocol=5)).digest()
    print("peers: self-check passed", file=sys.stderr)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="short runs, prompts up to 16k tokens")
    ap.add_argument("--out", help="write the results as JSON here")
    ap.add_argument("--check", action="store_true", help="only run the self-check")
    ap.add_argument("--peers", default=",".join(PEERS), help="comma-separated subset of " + ",".join(PEERS))
    args = ap.parse_args()
    if np is None:
        PEERS.pop("lmdeploy_np")
        print("peers: numpy is missing, lmdeploy's numpy path is not timed", file=sys.stderr)
    self_check()
    if args.check:
        return
    lengths = LENGTHS[:2] if args.quick else LENGTHS
    min_seconds = 0.05 if args.quick else 0.5
    min_runs = 1 if args.quick else 3
    results = []
    for n in lengths:
        tokens = prompt(n)
        arr = np.array(tokens, dtype=np.int64) if np is not None else None
        for bs in BLOCK_SIZES:
            for name in args.peers.split(","):
                if name not in PEERS:
                    continue
                fn = PEERS[name]
                seconds, runs = time_peer(fn, arr if name == "lmdeploy_np" else tokens, bs, min_seconds, min_runs)
                rate = n / seconds
                results.append({"peer": name, "tokens": n, "block_size": bs, "seconds": seconds, "runs": runs,
                                "tokens_per_s": rate, "blocks_per_s": (n // bs) / seconds})
                print("%-12s tokens=%-8d bs=%-4d %8.2f M tokens/s  (%d runs)" % (name, n, bs, rate / 1e6, runs),
                      file=sys.stderr)
    doc = {"python": sys.version.split()[0], "implementation": platform.python_implementation(),
           "numpy": np.__version__ if np is not None else None, "results": results}
    if args.out:
        with open(args.out, "w") as f:
            json.dump(doc, f, indent=1)
    else:
        json.dump(doc, sys.stdout, indent=1)


if __name__ == "__main__":
    main()
