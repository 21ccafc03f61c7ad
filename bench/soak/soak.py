#!/usr/bin/env python3
"""An engine-shaped soak: the same traffic keyed the legacy lmdeploy way and with kvkey.

Runs the traffic of traffic.py (two tenants, one model at TP=2, a LoRA adapter
replaced under the same name, shared system prompts and multi-turn growth, a
weight update, a bf16 to fp8 KV switch, injected store faults) twice against a
redis-server (--store redis) or a Mooncake Store (--store mooncake: the objects live in
a second process that lends the store its memory, this one lends none): once with
legacy keys (LegacyEngine, raw values through the same kvkey.stores store), once
through kvkey.Connector with a kvkey.Metrics (KvkeyEngine). Prints per phase the hit rate, wrong loads,
false hits and rejections by reason and field.

Then the shared-scope scenario (traffic.scope_events, engines.ScopeEngine): six tenants
whose requests start with a common system prompt, declared as the kvkey.SharedScope
traffic.SCOPE, and go on with private suffixes (some the same canned turn in several
tenants), three times on an empty store: with legacy keys, with kvkey and every tenant
isolated (the prompt recomputed and stored per tenant), and with kvkey and the scope.
Prints per run the shared prefix hit rate (the prompt's blocks loaded and used over
those requested), the private hit rate, wrong loads and cross-tenant private loads (used
blocks whose bytes are another tenant's private block for the same tokens, by the
oracle's bytes, not by kvkey's verdicts). Last:

    soak: legacy wrong loads N, kvkey wrong loads 0, kvkey rejections R, kvkey false hits M, scoped prefix
    hits S/P, isolated prefix hits I/P, cross-tenant private loads legacy C kvkey 0

(one line). R and M are the kvkey run's Metrics: the sum of kvkey_rejected_blocks_total
and kvkey_false_hits_total of the exposition --metrics-out writes (the scenario's runs
count into their own). kvkey wrong loads adds the scenario's kvkey runs to the kvkey
run's. Exits 1 when a kvkey run used a single wrong block. Run it with scripts/soak.sh
[--store mooncake], which starts the redis-server or the Mooncake master.
"""

import argparse
import dataclasses
import json
import os
import sys
import time
from typing import Dict, List, Optional

import kvkey
import kvkey.stores

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import engines  # noqa: E402
import traffic as tr  # noqa: E402


@dataclasses.dataclass
class PhaseStats:
    blocks: int = 0
    used: int = 0
    wrong: int = 0
    false_hits: int = 0
    faults: int = 0
    causes: Dict[str, int] = dataclasses.field(default_factory=dict)
    rejections: Dict[str, Dict[str, int]] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class Run:
    name: str
    phases: List[PhaseStats]
    series: List[List[int]]  # per request: [used, blocks, cumulative wrong]
    seconds: float = 0.0

    @property
    def wrong(self) -> int:
        return sum(p.wrong for p in self.phases)


def _delta(after: Dict[str, Dict[str, int]], before: Dict[str, Dict[str, int]]) -> Dict[str, Dict[str, int]]:
    out: Dict[str, Dict[str, int]] = {}
    for reason, fields in after.items():
        for field, n in fields.items():
            d = n - before.get(reason, {}).get(field, 0)
            if d:
                out.setdefault(reason, {})[field] = d
    return out


def run(engine, args: argparse.Namespace, metrics: Optional["kvkey.Metrics"]) -> Run:
    result = Run(engine.name, [PhaseStats() for _ in tr.PHASES], [])
    wrong = 0
    start = time.monotonic()
    before = metrics.as_dict() if metrics is not None else None
    phase = 0

    def close_phase(p: int) -> None:
        nonlocal before
        if metrics is None:
            return
        now = metrics.as_dict()
        result.phases[p].false_hits = now["false_hits"] - before["false_hits"]
        result.phases[p].rejections = _delta(now["rejected_blocks"], before["rejected_blocks"])
        before = now

    for ev in tr.events(args.seed, args.requests_per_phase, args.fault_rate, args.conversations):
        if isinstance(ev, tr.Fault):
            if engine.inject(ev):
                result.phases[phase].faults += 1
            continue
        if ev.phase != phase:
            close_phase(phase)
            phase = ev.phase
        served = engine.serve(ev)
        st = result.phases[phase]
        st.blocks += served.blocks
        st.used += served.used
        st.wrong += served.wrong
        if metrics is None:
            st.false_hits += served.counted - served.used
        for cause, n in served.causes.items():
            st.causes[cause] = st.causes.get(cause, 0) + n
        wrong += served.wrong
        result.series.append([served.used, served.blocks, wrong])
    close_phase(phase)
    result.seconds = time.monotonic() - start
    return result


@dataclasses.dataclass
class ScopeRun:
    """The shared-scope scenario in one mode (engines.SCOPE_MODES), summed over its requests."""

    name: str
    served: engines.ScopeServed
    requests: int = 0
    splices: int = 0  # splices written (legacy: none, the two tenants' keys are one)
    rejections: Dict[str, Dict[str, int]] = dataclasses.field(default_factory=dict)
    seconds: float = 0.0

    @property
    def prefix_hit_rate(self) -> float:
        return self.served.prefix_used / self.served.prefix_blocks if self.served.prefix_blocks else 0.0


def run_scope(engine: "engines.ScopeEngine", args: argparse.Namespace) -> ScopeRun:
    result = ScopeRun(engine.name, engines.ScopeServed())
    start = time.monotonic()
    total = result.served
    for ev in tr.scope_events(args.seed, args.scope_requests, args.fault_rate):
        if isinstance(ev, tr.Splice):
            result.splices += engine.inject(ev)
            continue
        served = engine.serve(ev)
        result.requests += 1
        for f in dataclasses.fields(served):
            setattr(total, f.name, getattr(total, f.name) + getattr(served, f.name))
    result.seconds = time.monotonic() - start
    if engine.metrics is not None:
        result.rejections = engine.metrics.as_dict()["rejected_blocks"]
    return result


def report_scopes(runs: List[ScopeRun]) -> None:
    print("shared scope %r: %d blocks of system prompt (a revision every %d requests, %d conversations), "
          "publishers %s, readers %s, not granted %s; %d requests"
          % (tr.SCOPE, tr.SCOPE_BLOCKS, tr.SCOPE_REVISION_REQUESTS, tr.SCOPE_CONVERSATIONS,
             ", ".join(tr.SCOPE_PUBLISHERS), ", ".join(tr.SCOPE_READERS), ", ".join(tr.SCOPE_UNGRANTED),
             runs[0].requests))
    for r in runs:
        s = r.served
        print("  %-8s (%4.1f s) shared prefix hit rate %5.1f%% (%d/%d, %d computed)  private hit rate %5.1f%%"
              "  wrong loads %4d  cross-tenant private loads %4d  splices %3d"
              % (r.name, r.seconds, 100 * r.prefix_hit_rate, s.prefix_used, s.prefix_blocks,
                 s.prefix_blocks - s.prefix_used,
                 100 * s.private_used / s.private_blocks if s.private_blocks else 0.0, s.wrong, s.cross_tenant,
                 r.splices))
        if r.name != "legacy":
            cells = ["%s/%s %d" % (reason, field, n)
                     for reason, fields in sorted(r.rejections.items()) for field, n in sorted(fields.items())]
            extra = ("  scope reads not granted %d, scope publishes refused %d" % (s.not_granted, s.publish_refused)
                     if r.name == "scoped" else "")
            print("  %-8s rejections: %s%s" % ("", ", ".join(cells) or "none", extra))


def report(r: Run) -> None:
    print("%s run (%.1f s):" % (r.name, r.seconds))
    for phase, st in zip(tr.PHASES, r.phases):
        hit = st.used / st.blocks if st.blocks else 0.0
        causes = ", ".join("%s %d" % kv for kv in sorted(st.causes.items())) or "-"
        print("  %-14s hit rate %5.1f%%  wrong loads %5d (%s)  false hits %4d  faults injected %3d"
              % (phase.name, 100 * hit, st.wrong, causes, st.false_hits, st.faults))
        if r.name == "kvkey":
            cells = ["%s/%s %d" % (reason, field, n)
                     for reason, fields in sorted(st.rejections.items()) for field, n in sorted(fields.items())]
            print("  %-14s rejections: %s" % ("", ", ".join(cells) or "none"))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--store", choices=["redis", "mooncake"], default="redis")
    ap.add_argument("--redis-port", type=int, help="the redis-server's port (--store redis)")
    ap.add_argument("--master", default=os.environ.get("MOONCAKE_MASTER_ADDR"),
                    help="the Mooncake master's HOST:PORT (--store mooncake)")
    ap.add_argument("--metadata", default=os.environ.get("MOONCAKE_METADATA_URL", "P2PHANDSHAKE"))
    ap.add_argument("--quick", action="store_true", help="a short run (CI)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--metrics-out", help="write the kvkey run's final Prometheus exposition here")
    ap.add_argument("--plot", help="write the PNG here")
    ap.add_argument("--json-out", help="write the run's numbers here")
    ap.add_argument("--requests-per-phase", type=int, help="override the run's length")
    ap.add_argument("--fault-rate", type=float, help="faults per request (default 0.04 quick, else 0.01)")
    ap.add_argument("--conversations", type=int, help="concurrent conversations (default 16 quick, else 128)")
    ap.add_argument("--scope-requests", type=int,
                    help="the shared-scope scenario's requests (default: --requests-per-phase)")
    args = ap.parse_args()
    if args.requests_per_phase is None:
        args.requests_per_phase = 400 if args.quick else 10000
    if args.scope_requests is None:
        args.scope_requests = args.requests_per_phase
    if args.scope_requests < 1:
        ap.error("--scope-requests must be at least 1, not %d" % args.scope_requests)
    if args.fault_rate is None:
        args.fault_rate = 0.04 if args.quick else 0.01
    if args.conversations is None:
        args.conversations = 16 if args.quick else 128

    holder = None
    if args.store == "redis":
        if args.redis_port is None:
            ap.error("--store redis needs --redis-port")
        import redis

        client = redis.Redis(host="127.0.0.1", port=args.redis_port)
        store = kvkey.stores.RedisStore(client)
        reset = client.flushdb
    else:
        if not args.master:
            ap.error("--store mooncake needs --master (or MOONCAKE_MASTER_ADDR)")
        from kvkey.stores import mooncake

        holder = mooncake.spawn_holder(args.master, args.metadata, segment=1 << 30)
        store = kvkey.stores.MooncakeStore.connect(args.master, args.metadata, global_segment_size=0,
                                                   local_buffer_size=128 << 20)

        def reset() -> None:
            store.purge(tr.MODEL + "@")  # the legacy keys
            store.purge(kvkey.store_key_tag)

    try:
        reset()
        legacy = run(engines.LegacyEngine(store), args, None)
        reset()
        metrics = kvkey.Metrics()
        ours = run(engines.KvkeyEngine(store, metrics), args, metrics)
        scopes = []
        for mode in engines.SCOPE_MODES:  # the shared-scope scenario, each mode on an empty store
            reset()
            scopes.append(run_scope(engines.ScopeEngine(store, mode, None if mode == "legacy" else kvkey.Metrics()),
                                    args))
        reset()
    finally:
        if holder is not None:
            store.close()
            holder.stdin.close()
            holder.wait(timeout=60)

    final = metrics.as_dict()
    exposition = metrics.render()
    if args.metrics_out:
        with open(args.metrics_out, "w") as f:
            f.write(exposition)
    print("soak: %s store, seed %d, %d requests per phase, %d conversations, fault rate %.3f"
          % (args.store, args.seed, args.requests_per_phase, args.conversations, args.fault_rate))
    report(legacy)
    report(ours)
    report_scopes(scopes)
    for reason, fields in sorted(final["rejected_blocks"].items()):
        for field, n in sorted(fields.items()):
            print("soak: kvkey rejections reason=%s field=%s count=%d" % (reason, field, n))
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump({"seed": args.seed, "legacy": dataclasses.asdict(legacy), "kvkey": dataclasses.asdict(ours),
                       "metrics": final, "scopes": [dataclasses.asdict(r) for r in scopes]}, f)
    if args.plot:
        import plot
        plot.draw(args.plot, legacy, ours, final, args)
        print("soak: plot written to %s" % args.plot)
    by = {r.name: r for r in scopes}
    kvkey_scope_wrong = by["isolated"].served.wrong + by["scoped"].served.wrong
    print("soak: legacy wrong loads %d, kvkey wrong loads %d, kvkey rejections %d, kvkey false hits %d, "
          "scoped prefix hits %d/%d, isolated prefix hits %d/%d, cross-tenant private loads legacy %d kvkey %d"
          % (legacy.wrong, ours.wrong + kvkey_scope_wrong, final["rejections"], final["false_hits"],
             by["scoped"].served.prefix_used, by["scoped"].served.prefix_blocks,
             by["isolated"].served.prefix_used, by["isolated"].served.prefix_blocks,
             by["legacy"].served.cross_tenant, by["isolated"].served.cross_tenant + by["scoped"].served.cross_tenant))
    return 1 if ours.wrong or kvkey_scope_wrong else 0


if __name__ == "__main__":
    sys.exit(main())
