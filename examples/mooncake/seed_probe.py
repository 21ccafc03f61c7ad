#!/usr/bin/env python3
"""The seed's scenario on a real Mooncake Store: lmdeploy's legacy keys against kvkey's.

Two engines in two processes share one Mooncake Store: the producer (a child process)
lends the store its memory and writes KV blocks; the consumer (this process) lends none,
so every byte it reads crosses TCP. For each case of the bug report the producer writes
a prompt's six blocks, once under lmdeploy's legacy keys (raw KV, kvkey.compat.lmdeploy)
and once through kvkey.Connector; then the consumer, whose deployment differs from the
producer's in one respect, looks the prompt up and loads it:

- legacy: the lookup (batch_is_exist) hits, and the loads serve the producer's KV, which
  is not what the consumer would have computed (counted by comparing bytes);
- kvkey: the consumer's keys are its own, so every block is a miss; and when the
  producer's value is planted under the consumer's key (what the legacy collision does),
  the lookup still counts nothing and the load rejects it, naming the field;
- legitimate reuse (the same deployment) still hits with both.

    scripts/mooncake.sh install; eval "$(scripts/mooncake.sh env)"; eval "$(scripts/mooncake.sh start)"
    "$MOONCAKE_PYTHON" examples/mooncake/seed_probe.py --check

The master comes from --master / --metadata or MOONCAKE_MASTER_ADDR / MOONCAKE_METADATA_URL.
``--check`` exits 1 unless the table shows what the report predicts: legacy wrong loads in
every foreign case, kvkey 0 hits and 0 wrong loads there, each planted block rejected
naming its field, and full reuse with both schemes for the same deployment.
"""

import argparse
import ctypes
import dataclasses
import hashlib
import json
import os
import secrets
import sys
from typing import Dict, List, Optional

import kvkey
from kvkey.compat import lmdeploy as legacy
from kvkey.stores import MooncakeStore

BLOCK = 64
FRAGMENT = [35, 468, 136, 812, 14112, 44, 1730, 850, 4751, 1234, 47, 8024, 47, 360, 1738,
            715, 420, 12912, 2230, 823, 776, 596, 3442, 3363, 4950, 613, 15462, 46, 22, 10, 44, 711]
PROMPT = FRAGMENT * 12  # lmdeploy issue #4930's probe: 384 tokens, six 64-token blocks
MODEL = "Qwen2.5-0.5B-Instruct"  # lmdeploy's default model_name: the model directory's basename
REVISION = "7ae557604adf67be50417f59c2c2f167def9a775"


def identity(tenant: str = "team-a", dtype: str = "fp16", epoch: int = 0, revision: str = REVISION,
             adapter: Optional[bytes] = None) -> kvkey.Identity:
    i = kvkey.Identity()
    i.tenant = tenant
    i.model.name = MODEL
    i.model.revision = revision
    i.model.weights_epoch = epoch
    i.kv.dtype = getattr(kvkey.KvDtype, dtype)
    i.kv.block_size = BLOCK
    i.kv.num_layers = 24
    i.kv.num_kv_heads = 2
    i.kv.head_dim = 64
    i.kv.layout = "lmdeploy.mooncake.v1"
    if adapter is not None:
        i.adapter = kvkey.Adapter("support-bot", kvkey.fingerprint(adapter))
    return i


@dataclasses.dataclass
class Case:
    name: str
    producer: kvkey.Identity
    consumer: kvkey.Identity
    field: str  # what the consumer's kvkey verdict names ("" for reuse)
    adapter_name: str = ""  # lmdeploy's extra identity: the adapter's name, nothing more


def cases() -> List[Case]:
    return [
        Case("fp16 producer, fp8 consumer", identity(), identity(dtype="fp8_e4m3"), "kv.dtype"),
        Case("fp16 producer, bf16 consumer", identity(), identity(dtype="bf16"), "kv.dtype"),
        Case("weight update, same dtype", identity(), identity(epoch=1), "model.weights_epoch"),
        Case("two default-configured tenants", identity(tenant="team-a"),
             identity(tenant="team-b", revision="0f1e2d3c4b5a69788796a5b4c3d2e1f00f1e2d3c"), "tenant"),
        Case("adapter changed under its name", identity(adapter=b"support-bot weights v1"),
             identity(adapter=b"support-bot weights v2"), "adapter.weights_fingerprint", "support-bot"),
        Case("same deployment (reuse)", identity(), identity(), ""),
    ]


def kv_bytes(i: kvkey.Identity, block: int, size: int) -> bytes:
    """The KV an engine of this deployment computes for block ``block`` of the prompt: it
    depends on the weights (revision, epoch, adapter), the KV format and the tokens, not
    on the tenant."""
    adapter = i.adapter.weights_fingerprint if i.adapter is not None else b""
    seed = b"|".join([i.model.revision.encode(), b"%d" % i.model.weights_epoch, i.kv.dtype.name.encode(),
                      bytes(adapter), b"%d" % block])
    return hashlib.shake_256(seed).digest(size)


def payload_size(i: kvkey.Identity) -> int:
    ns = kvkey.KeyNamespace(i)
    assert ns.payload_size is not None
    return ns.payload_size


class Engine:
    """One deployment's view of the prompt: its kvkey namespace and connector, and the
    legacy keys lmdeploy would use."""

    def __init__(self, store: MooncakeStore, i: kvkey.Identity, adapter_name: str, run: str) -> None:
        self.identity = i
        self.ns = kvkey.KeyNamespace(i)
        self.size = payload_size(i)
        self.conn = kvkey.Connector(store, self.ns, payload_size=self.size)
        self.hashes = self.ns.block_hashes(PROMPT)
        legacy_hashes = legacy.build_prefix_block_hashes(PROMPT, BLOCK, extra_identity=adapter_name)
        # cache_prefix: lmdeploy's default '' in production; a per-run one here, so that
        # repeated runs against one store do not meet each other's blocks.
        self.legacy_keys = [legacy.build_store_key(run, MODEL, 0, h) for h in legacy_hashes]
        self.kv = [kv_bytes(i, n, self.size) for n in range(len(self.hashes))]


def produce(args: argparse.Namespace) -> int:
    """The producer: lends the store memory, then writes the blocks each command names."""
    store = MooncakeStore.connect(args.master, args.metadata, global_segment_size=args.segment,
                                  local_buffer_size=64 << 20)
    print("ready", flush=True)
    table = {c.name: c for c in cases()}
    for line in sys.stdin:
        cmd = json.loads(line)
        case = table[cmd["case"]]
        e = Engine(store, case.producer, case.adapter_name, cmd["run"])
        legacy_stored = sum(store.put(e.legacy_keys, e.kv))  # lmdeploy: raw KV, no header
        kvkey_stored = e.conn.save(e.hashes, e.kv)
        print(json.dumps({"legacy": legacy_stored, "kvkey": kvkey_stored,
                          "kvkey_keys": [e.ns.store_key(h) for h in e.hashes]}), flush=True)
    store.close()
    return 0


@dataclasses.dataclass
class Row:
    case: str
    field: str
    blocks: int
    legacy_hits: int = 0
    legacy_wrong: int = 0  # loads that served bytes other than the consumer's own KV
    legacy_refused: int = 0  # hits whose load failed (a size that does not fit)
    kvkey_hits: int = 0
    kvkey_loaded: int = 0
    kvkey_wrong: int = 0
    planted_counted: int = 0  # blocks a lookup counted with the producer's values under our keys
    planted_rejected: Dict[str, int] = dataclasses.field(default_factory=dict)
    planted_wrong: int = 0


def consume(store: MooncakeStore, case: Case, run: str, reply: Dict[str, List[str]]) -> Row:
    e = Engine(store, case.consumer, case.adapter_name, run)
    row = Row(case.name, case.field or "-", len(e.hashes))
    # Legacy: lmdeploy's lookup is batch_is_exist, its load a batch_get_into of the
    # consumer's block size into registered memory.
    found = store.exists(e.legacy_keys)
    row.legacy_hits = next((n for n, f in enumerate(found) if not f), len(found))
    memory = bytearray(e.size * row.blocks)
    anchor = (ctypes.c_char * len(memory)).from_buffer(memory)  # pins the memory while it is registered
    address = ctypes.addressof(anchor)
    region = store.register_memory(address, len(memory))
    sizes = store.client.batch_get_into(e.legacy_keys[:row.legacy_hits],  # lmdeploy's own call
                                        [address + n * e.size for n in range(row.legacy_hits)],
                                        [e.size] * row.legacy_hits)
    region.close()
    for n, got in enumerate(sizes):
        if got < 0:
            row.legacy_refused += 1
        elif bytes(memory[n * e.size:n * e.size + got]) != e.kv[n]:
            row.legacy_wrong += 1
    # kvkey: the consumer's own keys.
    row.kvkey_hits = e.conn.lookup(e.hashes)
    buffers = [bytearray(e.size) for _ in e.hashes]
    for n, (res, buf) in enumerate(zip(e.conn.load_into(e.hashes, buffers), buffers)):
        if res.loaded:
            row.kvkey_loaded += 1
            row.kvkey_wrong += bytes(buf) != e.kv[n]
    # The collision forced: the producer's kvkey values copied under the consumer's keys.
    if case.field:
        produced = store.get(reply["kvkey_keys"])
        mine = [e.ns.store_key(h) for h in e.hashes]
        store.put(mine, [v for v in produced if v is not None])
        row.planted_counted = e.conn.lookup(e.hashes)
        buffers = [bytearray(e.size) for _ in e.hashes]
        for n, (res, buf) in enumerate(zip(e.conn.load_into(e.hashes, buffers), buffers)):
            if res.loaded:
                row.planted_wrong += bytes(buf) != e.kv[n]
            elif res.status == "rejected" and res.verdict is not None:
                why = f"{res.verdict.reason} {res.verdict.field}".strip()
                row.planted_rejected[why] = row.planted_rejected.get(why, 0) + 1
    return row


def print_table(rows: List[Row]) -> None:
    head = (f"{'case':<32} {'differs in':<28} {'legacy hits':>11} {'wrong':>6} {'refused':>8} "
            f"{'kvkey hits':>10} {'loaded':>7} {'wrong':>6}   planted under kvkey keys")
    print(head)
    print("-" * len(head))
    for r in rows:
        planted = ", ".join(f"{n} rejected ({why})" for why, n in sorted(r.planted_rejected.items())) or "-"
        if r.planted_counted or r.planted_wrong:
            planted += f"; counted {r.planted_counted}, wrong {r.planted_wrong}"
        print(f"{r.case:<32} {r.field:<28} {r.legacy_hits:>5} of {r.blocks:<3} {r.legacy_wrong:>6} "
              f"{r.legacy_refused:>8} {r.kvkey_hits:>4} of {r.blocks:<3} {r.kvkey_loaded:>7} {r.kvkey_wrong:>6}   "
              f"{planted}")
    legacy_wrong = sum(r.legacy_wrong for r in rows)
    kvkey_wrong = sum(r.kvkey_wrong + r.planted_wrong for r in rows)
    print(f"\nseed probe on Mooncake: legacy wrong loads {legacy_wrong}, kvkey wrong loads {kvkey_wrong}")


def check(rows: List[Row], table: List[Case]) -> List[str]:
    problems = []
    for r, c in zip(rows, table):
        if c.field:
            if r.legacy_hits != r.blocks:
                problems.append(f"{r.case}: legacy lookup hit {r.legacy_hits} of {r.blocks}")
            if r.legacy_wrong + r.legacy_refused != r.legacy_hits:
                problems.append(f"{r.case}: legacy loads of another deployment's KV were not all wrong or refused")
            if r.kvkey_hits or r.kvkey_loaded or r.kvkey_wrong:
                problems.append(f"{r.case}: kvkey hit {r.kvkey_hits}, loaded {r.kvkey_loaded}")
            want = f"identity_mismatch {c.field}"
            if r.planted_counted or r.planted_wrong or r.planted_rejected != {want: r.blocks}:
                problems.append(f"{r.case}: planted values: counted {r.planted_counted}, wrong "
                                f"{r.planted_wrong}, rejected {r.planted_rejected} (expected {want})")
        else:
            if not (r.legacy_hits == r.kvkey_hits == r.kvkey_loaded == r.blocks) or r.legacy_wrong or r.kvkey_wrong:
                problems.append(f"{r.case}: reuse lost: legacy {r.legacy_hits}, kvkey {r.kvkey_hits} hits, "
                                f"{r.kvkey_loaded} loaded")
    if sum(r.legacy_wrong for r in rows) == 0:
        problems.append("no legacy wrong load: the probe proves nothing")
    return problems


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--master", default=os.environ.get("MOONCAKE_MASTER_ADDR"), help="the master's HOST:PORT")
    p.add_argument("--metadata", default=os.environ.get("MOONCAKE_METADATA_URL", "P2PHANDSHAKE"))
    p.add_argument("--segment", type=int, default=512 << 20, help="memory the producer lends the store")
    p.add_argument("--check", action="store_true", help="exit 1 unless the table shows what the report predicts")
    p.add_argument("--producer", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if not args.master:
        p.error("no master: pass --master HOST:PORT or set MOONCAKE_MASTER_ADDR (scripts/mooncake.sh start)")
    if args.producer:
        return produce(args)

    import subprocess
    producer = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--producer", "--master", args.master,
                                 "--metadata", args.metadata, "--segment", str(args.segment)],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert producer.stdin is not None and producer.stdout is not None
    try:
        if producer.stdout.readline().strip() != "ready":
            print("seed_probe: the producer did not start", file=sys.stderr)
            return 1
        store = MooncakeStore.connect(args.master, args.metadata, global_segment_size=0, local_buffer_size=64 << 20)
        run = f"probe-{secrets.token_hex(3)}"
        table, rows = cases(), []
        print(f"seed probe on Mooncake ({args.master}): producer pid {producer.pid} holds the store's memory, "
              f"consumer pid {os.getpid()} holds none; prompt of {len(PROMPT)} tokens, {len(PROMPT) // BLOCK} "
              f"blocks of {payload_size(identity())} bytes (fp16)\n")
        for c in table:
            for i in (c.producer, c.consumer):  # what an earlier run may have left
                store.purge(kvkey.KeyNamespace(i).key_prefix)
            producer.stdin.write(json.dumps({"case": c.name, "run": run}) + "\n")
            producer.stdin.flush()
            reply = json.loads(producer.stdout.readline())
            if reply["legacy"] != len(PROMPT) // BLOCK or reply["kvkey"] != len(PROMPT) // BLOCK:
                print(f"seed_probe: the producer stored {reply['legacy']} legacy and {reply['kvkey']} kvkey "
                      f"values for {c.name!r}", file=sys.stderr)
                return 1
            rows.append(consume(store, c, run, reply))
            store.purge(run + "@")  # the legacy keys of this case
            for i in (c.producer, c.consumer):
                store.purge(kvkey.KeyNamespace(i).key_prefix)
        print_table(rows)
        store.close()
    finally:
        producer.stdin.close()
        producer.wait(timeout=60)
    if args.check:
        problems = check(rows, table)
        for prob in problems:
            print(f"  FAIL {prob}")
        if problems:
            return 1
        print("seed_probe: every expectation met")
    return 0


if __name__ == "__main__":
    sys.exit(main())
