#!/usr/bin/env python3
"""seed_probe: the lmdeploy prefix-cache probe, with kvkey keys, through the Python binding.

The same five scenarios as examples/seed_probe.cpp. A 384-token prompt (a
32-token fragment repeated 12 times) is cut into six 64-token blocks. Five
scenarios that produce identical keys under the legacy scheme must produce
different keys here, and a reader must reject a header written under another
identity, naming the field. Exits 1 if any expectation fails.
"""

import sys
from typing import List

import kvkey
from kvkey.compat import lmdeploy as legacy

failures = 0


def expect(ok: bool, what: str) -> None:
    global failures
    print(f"  [{'ok' if ok else 'FAIL'}] {what}")
    if not ok:
        failures += 1


def probe_prompt(base: int) -> List[int]:
    return [base + i * 7 for i in range(32)] * 12


def base_identity() -> kvkey.Identity:
    i = kvkey.Identity()
    i.tenant = "team-a"
    i.model.name = "Qwen2.5-0.5B-Instruct"
    i.model.revision = "7ae557604adf67be50417f59c2c2f167def9a775"
    i.model.weights_epoch = 0
    i.kv.dtype = kvkey.KvDtype.fp16
    i.kv.block_size = 64
    i.kv.num_layers = 24
    i.kv.num_kv_heads = 2
    i.kv.head_dim = 64
    i.kv.layout = "lmdeploy.mooncake.v1"
    return i


class Probe:
    """Block 2's hash and key under an identity, for a prompt."""

    def __init__(self, identity: kvkey.Identity, prompt: List[int]) -> None:
        self.ns = kvkey.KeyNamespace(identity)
        self.block = self.ns.block_hashes(prompt)[2]
        self.key = self.ns.store_key(self.block)


def cross_verify(writer: "Probe", reader: "Probe", payload: int) -> kvkey.Verdict:
    """The reader's verdict on a header the writer sealed for the same prompt block."""
    kv = bytes(payload)  # stand-in KV bytes of the block's size
    return reader.ns.verify(writer.ns.seal(writer.block, kv), reader.block, kv)


def print_key(label: str, p: Probe) -> None:
    print(f"  {label:<22} {p.key}")


def legacy_key(prompt: List[int], adapter: str = "") -> str:
    hashes = legacy.build_prefix_block_hashes(prompt, 64, extra_identity=adapter)
    return legacy.build_store_key("", "Qwen2.5-0.5B-Instruct", 0, hashes[2])


def main() -> int:
    prompt = probe_prompt(1000)
    payload = 24 * 2 * 2 * 64 * 64 * 2  # layers * K,V * heads * head_dim * block * 2 bytes
    print(f"prompt: {len(prompt)} tokens, block size 64 -> {len(prompt) // 64} full blocks; showing block 2")
    print(f"legacy key (every scenario below): {legacy_key(prompt)}\n")

    print("(A) KV dtype: fp16 vs fp8_e4m3 vs int4")
    fp8_id = base_identity()
    fp8_id.kv.dtype = kvkey.KvDtype.fp8_e4m3  # or its name, "fp8_e4m3" (typed as KvDtype)
    int4_id = base_identity()
    int4_id.kv.dtype = kvkey.KvDtype.int4
    int4_id.kv.quant.scheme = "per_token_asym"
    int4_id.kv.quant.scale_dtype = kvkey.KvDtype.fp16
    int4_id.kv.quant.zero_point = True
    fp16, fp8, int4 = Probe(base_identity(), prompt), Probe(fp8_id, prompt), Probe(int4_id, prompt)
    print_key("fp16", fp16)
    print_key("fp8_e4m3", fp8)
    print_key("int4", int4)
    expect(len({fp16.key, fp8.key, int4.key}) == 3, "three formats, three keys")
    for reader in (fp8, int4):
        v = cross_verify(fp16, reader, payload)
        print(f"  {reader.ns.identity.kv.dtype.name} reader on fp16 header: {v}")
        expect(v.reason == "identity_mismatch" and v.field == "kv.dtype", "rejected, naming kv.dtype")
    v16 = cross_verify(fp16, fp16, payload)
    print(f"  fp16 reader on fp16 header: {v16}")
    expect(v16.ok, "own header accepted")

    print("\n(B) weights epoch: 0 vs 1 (after a weight update)")
    epoch1_id = base_identity()
    epoch1_id.model.weights_epoch = 1
    epoch1 = Probe(epoch1_id, prompt)
    print_key("epoch 0", fp16)
    print_key("epoch 1", epoch1)
    expect(fp16.key != epoch1.key, "epochs give different keys")
    vb = cross_verify(fp16, epoch1, payload)
    print(f"  epoch-1 reader on epoch-0 header: {vb}")
    expect(vb.reason == "identity_mismatch" and vb.field == "model.weights_epoch",
           "rejected, naming model.weights_epoch")

    print("\n(C) tenants: team-a vs team-b, and no tenant")
    team_b_id = base_identity()
    team_b_id.tenant = "team-b"
    team_b = Probe(team_b_id, prompt)
    print_key("team-a", fp16)
    print_key("team-b", team_b)
    expect(fp16.key != team_b.key, "tenants give different keys")
    vc = cross_verify(fp16, team_b, payload)
    print(f"  team-b reader on team-a header: {vc}")
    expect(vc.reason == "identity_mismatch" and vc.field == "tenant", "rejected, naming tenant")
    anonymous = base_identity()
    anonymous.tenant = ""
    try:
        kvkey.KeyNamespace(anonymous)
        expect(False, "empty tenant refused")
    except kvkey.IdentityError as e:
        print(f"  empty tenant: {e}")
        expect(e.field == "tenant", "empty tenant refused")

    print("\n(D) adapter 'base' with two different weight files")
    lora1_id = base_identity()
    lora1_id.adapter = kvkey.Adapter("base", kvkey.fingerprint(b"adapter weights, version 1"))
    lora2_id = base_identity()
    lora2_id.adapter = kvkey.Adapter("base", kvkey.fingerprint(b"adapter weights, version 2"))
    lora1, lora2 = Probe(lora1_id, prompt), Probe(lora2_id, prompt)
    print_key("base (weights v1)", lora1)
    print_key("base (weights v2)", lora2)
    print(f"  legacy key for adapter 'base' (both): {legacy_key(prompt, 'base')}")
    expect(lora1.key != lora2.key, "same adapter name, different weights: different keys")
    vd = cross_verify(lora1, lora2, payload)
    print(f"  v2 reader on v1 header: {vd}")
    expect(vd.reason == "identity_mismatch" and vd.field == "adapter.weights_fingerprint",
           "rejected, naming adapter.weights_fingerprint")

    print("\n(E) different tokens")
    other = Probe(base_identity(), probe_prompt(2000))
    print_key("prompt 1", fp16)
    print_key("prompt 2", other)
    expect(fp16.key != other.key, "different tokens give different keys")
    ve = fp16.ns.verify(fp16.ns.seal(other.block, bytes(payload)), fp16.block, bytes(payload))
    print(f"  reader of prompt 1 on prompt 2's header: {ve}")
    expect(ve.reason == "block_mismatch", "rejected as another block")

    if failures:
        print(f"\nseed_probe.py: {failures} expectation(s) FAILED")
        return 1
    print("\nseed_probe.py: all expectations met")
    return 0


if __name__ == "__main__":
    sys.exit(main())
