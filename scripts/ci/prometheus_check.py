#!/usr/bin/env python3
"""Checks what a real Prometheus scraped from examples/python/metrics_exporter.py.

    prometheus_check.py --prometheus http://127.0.0.1:PORT --report FILE [--rules N]

Waits (a bounded number of polls) until Prometheus holds a scrape taken after the
exporter's workload finished, then asks it for
`sum by (reason, field) (kvkey_rejected_blocks_total)` and compares every pair
with the counts the workload injected, printing
`prometheus: reason=R field=F injected=N scraped=N` per pair. Also checks that
the kvkey alert rules are loaded and healthy. Exits 1 on any difference.
"""

import argparse
import json
import sys
import time
import urllib.parse
import urllib.request
from typing import Any, Dict, List, Tuple

POLLS = 240
POLL_SECONDS = 0.5


def api(base: str, path: str, **params: str) -> Any:
    url = base + path + ("?" + urllib.parse.urlencode(params) if params else "")
    with urllib.request.urlopen(url, timeout=10) as r:
        doc = json.load(r)
    if doc.get("status") != "success":
        raise RuntimeError("%s: %s" % (url, doc))
    return doc["data"]


def query(base: str, promql: str) -> List[Dict[str, Any]]:
    data = api(base, "/api/v1/query", query=promql)
    assert data["resultType"] == "vector", data
    return list(data["result"])


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--prometheus", required=True)
    ap.add_argument("--report", required=True)
    ap.add_argument("--rules", type=int, default=3, help="kvkey alert rules that must be loaded")
    args = ap.parse_args()
    with open(args.report) as f:
        report = json.load(f)
    injected: Dict[Tuple[str, str], int] = {(i["reason"], i["field"]): i["count"] for i in report["injected"]}

    last = None
    for _ in range(POLLS):
        try:
            got = query(args.prometheus, "max(timestamp(kvkey_lookups_total))")
            last = float(got[0]["value"][1]) if got else None
        except OSError:  # Prometheus still starting
            last = None
        if last is not None and last >= report["done"]:
            break
        time.sleep(POLL_SECONDS)
    else:
        print("prometheus: no scrape after the workload finished (last sample at %s, workload done at %.3f)"
              % (last, report["done"]), file=sys.stderr)
        return 1

    scraped: Dict[Tuple[str, str], int] = {}
    for s in query(args.prometheus, "sum by (reason, field) (kvkey_rejected_blocks_total)"):
        scraped[(s["metric"]["reason"], s["metric"]["field"])] = int(float(s["value"][1]))
    failed = 0
    for pair in sorted(set(injected) | set(scraped)):
        inj, got = injected.get(pair, 0), scraped.get(pair, 0)
        print("prometheus: reason=%s field=%s injected=%d scraped=%d%s"
              % (pair[0], pair[1], inj, got, "" if inj == got else "  MISMATCH"))
        failed += inj != got
    if not injected:
        print("prometheus: the workload injected nothing", file=sys.stderr)
        failed += 1

    rules = [r for g in api(args.prometheus, "/api/v1/rules")["groups"] for r in g["rules"]
             if r["type"] == "alerting" and r["name"].startswith("Kvkey")]
    unhealthy = [r["name"] for r in rules if r.get("health") not in ("ok", "unknown")]
    print("prometheus: %d kvkey alert rules loaded (%s)%s" % (len(rules), ", ".join(r["name"] for r in rules),
                                                            ", unhealthy: " + ", ".join(unhealthy) if unhealthy else ""))
    if len(rules) != args.rules or unhealthy:
        failed += 1
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
