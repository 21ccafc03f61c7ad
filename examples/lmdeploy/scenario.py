#!/usr/bin/env python3
"""The bug report's scenario on lmdeploy's own Mooncake store connector, in two processes.

A producer process prefills prompts and saves their KV through lmdeploy's connector; a
consumer process looks them up, loads them through lmdeploy's connector and decodes
greedily (examples/lmdeploy/tiny_engine.py: lmdeploy's real connector, config and KV
layout, a small torch decoder). Both talk to one Mooncake master
(``MOONCAKE_MASTER_ADDR``, ``MOONCAKE_METADATA_URL``; ``eval "$(scripts/mooncake.sh start)"``).

Each case of the report runs twice: keyed the legacy way (lmdeploy as released) and
through kvkey (``kvkey.integrations.lmdeploy``):

- ``same``: control, producer and consumer agree; both load and equal the recompute;
- ``fp16_vs_bf16``: a bf16 producer, an fp16 consumer (same byte size);
- ``int8_writer`` / ``fp8_writer``: a ``quant_policy`` 8 / 16 producer (smaller values);
- ``weight_update``: the consumer updated its weights (lmdeploy's ``update_params``);
- ``two_deployments``: another deployment, default ``cache_prefix``, same model basename;
- ``adapter``: adapter ``x`` with other weights under the same name;
- ``damaged``: one bit of one stored value flipped.

Legacy: what was loaded and how many generated tokens differ from the consumer's own
recompute. kvkey: a miss, and, with the producer's values planted under the consumer's
keys, the field the rejection names; the output equals the recompute (``torch.equal``
logits). ``--check`` fails unless kvkey equals the recompute in every case and names the
expected field. ``--json`` and ``--picture`` write the results.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from typing import Any, Dict, List, Optional

HERE = os.path.dirname(os.path.abspath(__file__))
CASES = ["same", "fp16_vs_bf16", "int8_writer", "fp8_writer", "weight_update", "two_deployments", "adapter",
         "damaged"]
EXPECTED_FIELD = {"fp16_vs_bf16": "kv.dtype", "int8_writer": "kv.dtype", "fp8_writer": "kv.dtype",
                  "weight_update": "model.weights_epoch", "two_deployments": "tenant",
                  "adapter": "adapter.weights_fingerprint", "damaged": "payload"}
TITLES = {"same": "control: producer and consumer agree", "fp16_vs_bf16": "bf16 producer, fp16 consumer",
          "int8_writer": "quant_policy=8 producer, fp16 consumer", "fp8_writer": "quant_policy=16 (fp8) producer",
          "weight_update": "consumer after update_params", "two_deployments":
          "two deployments, default cache_prefix, same model basename", "adapter":
          "adapter 'x' with new weights under the same name", "damaged": "one stored value damaged"}
MAX_NEW = 16
PROMPT_LEN = 70


def prompt(case: str, mode: str) -> List[int]:
    seed = CASES.index(case) * 2 + (mode == "kvkey") + 1
    return [(seed * 37 + i * 11 + (i * i * seed) % 17) % 96 for i in range(PROMPT_LEN)]


def _configs(case: str, world: Dict[str, str]) -> Dict[str, Dict[str, Any]]:
    """Producer's and consumer's engine settings for a case."""
    prod: Dict[str, Any] = {"model": world["model"], "tenant": "team-a"}
    cons: Dict[str, Any] = {"model": world["model"], "tenant": "team-a"}
    if case == "fp16_vs_bf16":
        prod["dtype"] = "bfloat16"
    elif case == "int8_writer":
        prod["quant_policy"] = 8
    elif case == "fp8_writer":
        prod["quant_policy"] = 16
    elif case == "two_deployments":
        prod.update(model=world["other"], tenant="team-b")
    elif case == "adapter":
        prod["adapters"] = {"x": world["adapter_v1"]}
        cons["adapters"] = {"x": world["adapter_v2"]}
    return {"producer": prod, "consumer": cons}


def _engine(te: Any, cfg: Dict[str, Any], role: str, mode: str, mc: str) -> Any:
    kv = {"tenant": cfg["tenant"], "revision": "r1"} if mode == "kvkey" else None
    return te.TinyEngine(cfg["model"], role=role, mooncake_json=mc, dtype=cfg.get("dtype", "float16"),
                         quant_policy=cfg.get("quant_policy", 0), kvkey=kv, adapters=cfg.get("adapters"))


def _rejections() -> Dict[str, int]:
    from kvkey.integrations import lmdeploy as integration

    out: Dict[str, int] = {}
    for fields in integration.metrics().as_dict()["rejected_blocks"].values():
        for f, n in fields.items():
            out[f] = out.get(f, 0) + n
    return out


def serve(role: str, world: Dict[str, str]) -> None:
    """One process: reads a JSON command per line, answers one JSON line."""
    sys.path.insert(0, HERE)
    import torch

    import tiny_engine as te
    from kvkey.stores.mooncake import MooncakeStore

    keep: List[Any] = []
    out = sys.stdout
    sys.stdout = sys.stderr  # libraries' prints must not mix with the answers
    for line in sys.stdin:
        cmd = json.loads(line)
        if cmd.get("quit"):
            break
        case, mode, p = cmd["case"], cmd["mode"], cmd["prompt"]
        cfg = _configs(case, world)[role]
        adapter = "x" if case == "adapter" else None
        e = _engine(te, cfg, "kv_producer" if role == "producer" else "kv_consumer", mode, world["mc"])
        keep.append(e)
        if role == "producer":
            e.produce(p, adapter=adapter)
            keys = e.keys(p, adapter)
            if case == "damaged":
                store = MooncakeStore(e.client)
                (v,) = store.get([keys[1]])
                v = bytearray(v)
                v[(1024 if mode == "kvkey" else 0) + 101] ^= 0x78  # the exponent of one fp16 K value
                assert store.put([keys[1]], [bytes(v)]) == [True]
                store.close()
            reply: Dict[str, Any] = {"keys": keys}
        else:
            if case == "weight_update":
                e.update_weights(te.random_weights(3))
            ref = e.generate(p, MAX_NEW, adapter=adapter, use_store=False)
            before = _rejections() if mode == "kvkey" else {}
            got = e.generate(p, MAX_NEW, adapter=adapter)
            fields: Dict[str, int] = {}
            planted: Optional[Dict[str, Any]] = None
            if mode == "kvkey":
                fields = {f: n - before.get(f, 0) for f, n in _rejections().items() if n > before.get(f, 0)}
                if got["found"] == 0 and case != "same":
                    store = MooncakeStore(e.client)
                    values = store.get(cmd["producer_keys"])
                    mine = e.keys(p, adapter)
                    ok = all(values) and all(store.put(mine, values))
                    store.close()
                    before = _rejections()
                    again = e.generate(p, MAX_NEW, adapter=adapter)
                    planted = {"stored": ok, "found": again["found"], "loaded": again["loaded"],
                               "fields": {f: n - before.get(f, 0) for f, n in _rejections().items()
                                          if n > before.get(f, 0)},
                               "equal": again["tokens"] == ref["tokens"] and all(
                                   torch.equal(a, b) for a, b in zip(again["logits"], ref["logits"]))}
            reply = {"found": got["found"], "loaded": got["loaded"], "tokens": got["tokens"],
                     "recompute": ref["tokens"],
                     "differing": sum(a != b for a, b in zip(got["tokens"], ref["tokens"])),
                     "logits_equal": all(torch.equal(a, b) for a, b in zip(got["logits"], ref["logits"])),
                     "fields": fields, "planted": planted}
        out.write(json.dumps(reply) + "\n")
        out.flush()
    for e in reversed(keep):
        e.close()


class Peer:
    def __init__(self, role: str, world_file: str, env: Dict[str, str]) -> None:
        self.p = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--serve", role, "--world", world_file],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)

    def ask(self, cmd: Dict[str, Any]) -> Dict[str, Any]:
        assert self.p.stdin is not None and self.p.stdout is not None
        self.p.stdin.write(json.dumps(cmd) + "\n")
        self.p.stdin.flush()
        line = self.p.stdout.readline()
        if not line:
            raise RuntimeError(f"the {cmd} process ended (exit {self.p.wait()})")
        return json.loads(line)

    def close(self) -> None:
        try:
            self.ask_quit()
        finally:
            self.p.wait(timeout=60)

    def ask_quit(self) -> None:
        assert self.p.stdin is not None
        self.p.stdin.write(json.dumps({"quit": True}) + "\n")
        self.p.stdin.close()


def make_world(d: str) -> Dict[str, str]:
    sys.path.insert(0, HERE)
    import tiny_engine as te

    master, metadata = os.environ.get("MOONCAKE_MASTER_ADDR"), os.environ.get("MOONCAKE_METADATA_URL")
    if not master or not metadata:
        sys.exit("scenario.py: MOONCAKE_MASTER_ADDR and MOONCAKE_METADATA_URL must name a running master "
                 "(eval \"$(scripts/mooncake.sh start)\")")
    return {"mc": te.mooncake_config(os.path.join(d, "mooncake.json"), master, metadata, segment=32 << 20),
            "model": te.write_model(os.path.join(d, "a", "tiny"), seed=1),
            "other": te.write_model(os.path.join(d, "b", "tiny"), seed=2),
            "adapter_v1": te.write_adapter(os.path.join(d, "adapters", "v1", "x"), seed=11),
            "adapter_v2": te.write_adapter(os.path.join(d, "adapters", "v2", "x"), seed=12)}


def run(cases: List[str]) -> Dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="kvkey-lmdeploy-") as d:
        world = make_world(d)
        wf = os.path.join(d, "world.json")
        with open(wf, "w") as f:
            json.dump(world, f)
        env = dict(os.environ, GLOG_minloglevel=os.environ.get("GLOG_minloglevel", "2"))
        prod, cons = Peer("producer", wf, env), Peer("consumer", wf, env)
        results: Dict[str, Any] = {}
        try:
            for case in cases:
                for mode in ("legacy", "kvkey"):
                    p = prompt(case, mode)
                    t0 = time.monotonic()
                    keys = prod.ask({"case": case, "mode": mode, "prompt": p})["keys"]
                    r = cons.ask({"case": case, "mode": mode, "prompt": p, "producer_keys": keys})
                    r["seconds"] = round(time.monotonic() - t0, 2)
                    results.setdefault(case, {})[mode] = r
                    print(f"{case:16s} {mode:6s} found {r['found']:3d} loaded {r['loaded']:3d} "
                          f"differing {r['differing']:2d}/{MAX_NEW} logits_equal {r['logits_equal']} "
                          f"fields {r['fields']} planted {r['planted'] and r['planted']['fields']}", flush=True)
        finally:
            prod.close()
            cons.close()
        return results


def check(results: Dict[str, Any]) -> List[str]:
    bad = []
    for case, r in results.items():
        k, leg = r["kvkey"], r["legacy"]
        if not (k["logits_equal"] and k["differing"] == 0):
            bad.append(f"{case}: kvkey's output differs from the recompute")
        if case == "same":
            if not (k["loaded"] and leg["loaded"] and leg["differing"] == 0):
                bad.append(f"{case}: the control did not load on both")
            continue
        want = EXPECTED_FIELD[case]
        named = set(k["fields"]) | set((k["planted"] or {}).get("fields", {}))
        if want not in named:
            bad.append(f"{case}: kvkey did not name {want} (named {sorted(named)})")
        if k["planted"] is not None and not k["planted"]["equal"]:
            bad.append(f"{case}: kvkey with planted values differs from the recompute")
        if k["planted"] is not None and k["planted"]["loaded"]:
            bad.append(f"{case}: kvkey loaded planted values")
        if not leg["found"]:
            bad.append(f"{case}: legacy did not even find the producer's KV (the scenario is broken)")
    return bad


def picture(results: Dict[str, Any], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cases = list(results)
    fig, axes = plt.subplots(len(cases), 1, figsize=(11, 0.95 * len(cases) + 1.2), squeeze=False)
    for ax, case in zip(axes[:, 0], cases):
        rows = []
        labels = []
        for mode in ("legacy", "kvkey"):
            r = results[case][mode]
            rows.append([0 if a == b else 1 for a, b in zip(r["tokens"], r["recompute"])])
            if mode == "legacy":
                what = f"loaded {r['loaded']} tok" if r["loaded"] else ("found, load failed" if r["found"] else "miss")
                logits = "" if r["logits_equal"] else ", logits differ"
                labels.append(f"legacy: {what}{logits}, {r['differing']}/{MAX_NEW} tokens differ")
            else:
                if r["loaded"]:
                    what = "loaded, verified"
                elif r["fields"]:
                    what = "load rejected: " + ", ".join(sorted(r["fields"]))
                else:
                    what = "miss; planted: rejected " + ", ".join(sorted((r["planted"] or {}).get("fields", {})))
                labels.append(f"kvkey: {what}, {r['differing']}/{MAX_NEW} tokens differ")
        ax.imshow(rows, cmap=matplotlib.colors.ListedColormap(["#4caf50", "#e53935"]), vmin=0, vmax=1,
                  aspect="auto")
        ax.set_yticks([0, 1])
        ax.set_yticklabels(labels, fontsize=8)
        ax.set_xticks([])
        ax.set_title(TITLES.get(case, case), fontsize=9, loc="left")
    axes[-1, 0].set_xlabel(f"the consumer's {MAX_NEW} generated tokens (green: equal to recompute, red: differs)",
                           fontsize=8)
    fig.suptitle("lmdeploy 0.18.0 Mooncake store connector: legacy keys vs kvkey, two processes, real Mooncake",
                 fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--serve", choices=["producer", "consumer"], help=argparse.SUPPRESS)
    ap.add_argument("--world", help=argparse.SUPPRESS)
    ap.add_argument("--cases", default=",".join(CASES), help="comma-separated subset of: " + ", ".join(CASES))
    ap.add_argument("--check", action="store_true", help="exit 1 unless kvkey holds in every case")
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--picture", help="write the picture (PNG) here")
    a = ap.parse_args(argv)
    if a.serve:
        with open(a.world) as f:
            serve(a.serve, json.load(f))
        return 0
    cases = [c for c in a.cases.split(",") if c]
    unknown = [c for c in cases if c not in CASES]
    if unknown:
        ap.error(f"unknown cases {unknown}")
    results = run(cases)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)
    if a.picture:
        picture(results, a.picture)
    if a.check:
        bad = check(results)
        for b in bad:
            print("FAIL", b)
        print("scenario: " + ("all cases hold" if not bad else f"{len(bad)} failures"))
        return 1 if bad else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
