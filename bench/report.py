#!/usr/bin/python3
"""Turns one benchmark run (scripts/bench.sh) into the tables of docs/performance.md.

    report.py RUN_DIR... [--plot FILE.svg]
    report.py --medians RUN_DIR      # writes RUN_DIR/medians.csv from its raw output

A RUN_DIR holds kvkey_bench.json (Google Benchmark, median aggregates when the
run had repetitions), peers.json (bench/peers/peers.py), openssl_speed.txt
(`openssl speed -bytes 16384 sha256`) and machine.txt. With several runs, every
figure is the median over the runs. Prints Markdown.

A recorded run (bench/results/) keeps only machine.txt and medians.csv: the
per-case medians of that run, every figure the tables are built from, one row
per benchmark case, peer case and `openssl speed` result. Where a RUN_DIR has no kvkey_bench.json,
the tables are built from its medians.csv.

The limit and the ceiling:
  * evp_baseline: one EVP_Digest per block over parent ‖ 4-byte tokens, the
    cheapest way to hash a chain through OpenSSL's one-shot API;
  * ceiling: the SHA-256 compression rate (16 KiB messages) divided by the
    64-byte compressions one block message needs: ceil((len + 9) / 64) with
    len = 1 + 32 + 4 * block_size + 4 for kvkey (32 + 4 * block_size for the
    baseline, which needs as many). No chained hash of those bytes can beat it
    on one core.
"""

import csv
import json
import math
import os
import re
import statistics
import subprocess
import sys


def load_benchmarks(path):
    with open(path) as f:
        doc = json.load(f)
    out = {}
    for b in doc["benchmarks"]:
        if b.get("error_occurred"):
            continue
        if b.get("run_type") == "aggregate" and b.get("aggregate_name") != "median":
            continue
        name = b.get("run_name", b["name"])
        # A median aggregate wins over a single iteration entry of the same name.
        if name in out and b.get("run_type") != "aggregate":
            continue
        out[name] = b
    return doc.get("context", {}), out


def median_merge(entries):
    """One entry whose numeric fields are the medians over entries."""
    out = dict(entries[0])
    for k, v in entries[0].items():
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            vals = sorted(e[k] for e in entries if k in e)
            mid = len(vals) // 2
            out[k] = vals[mid] if len(vals) % 2 else (vals[mid - 1] + vals[mid]) / 2
    return out


# Google Benchmark's own fields of an entry; every other numeric field is a counter.
BENCHMARK_FIELDS = {"family_index", "per_family_instance_index", "repetitions", "repetition_index", "threads",
                    "iterations"}
MEDIANS = "medians.csv"


def load_raw_run(r):
    """(benchmarks by name, peer results, python version, openssl kbytes/s) from a run's raw output."""
    bm = load_benchmarks(os.path.join(r, "kvkey_bench.json"))[1]
    results, python = [], None
    path = os.path.join(r, "peers.json")
    if os.path.exists(path):
        doc = json.load(open(path))
        python = doc.get("python")
        results = doc["results"]
    return bm, results, python, openssl_kbytes(os.path.join(r, "openssl_speed.txt"))


def write_medians(r):
    """Writes RUN_DIR/medians.csv: every figure load_raw_run reads, one row per case
    (7 significant digits; blank where a case has no such figure)."""
    bm, results, python, kbytes = load_raw_run(r)
    rows = []
    for name, b in bm.items():
        row = {"source": "kvkey_bench", "case": name, "time_unit": b.get("time_unit", "ns")}
        row.update({k: v for k, v in b.items()
                    if isinstance(v, (int, float)) and not isinstance(v, bool) and k not in BENCHMARK_FIELDS})
        rows.append(row)
    for x in results:
        row = {"source": "peers", "case": "%s/tokens:%d/bs:%d" % (x["peer"], x["tokens"], x["block_size"])}
        row.update({k: x[k] for k in ("tokens_per_s", "blocks_per_s", "seconds", "runs") if k in x})
        rows.append(row)
    if python:
        rows.append({"source": "peers", "case": "python", "version": python})
    if kbytes is not None:
        rows.append({"source": "openssl_speed", "case": "sha256/bytes:16384", "kbytes_per_s": kbytes})
    columns = list(dict.fromkeys(k for row in rows for k in row))
    with open(os.path.join(r, MEDIANS), "w", newline="") as f:
        w = csv.DictWriter(f, columns, lineterminator="\n")
        w.writeheader()
        for row in rows:
            w.writerow({k: "%.7g" % v if isinstance(v, float) else v for k, v in row.items()})


def load_medians(r):
    """The same as load_raw_run, from a recorded run's medians.csv."""
    bm, peers, python, kbytes = {}, [], None, None
    with open(os.path.join(r, MEDIANS), newline="") as f:
        for row in csv.DictReader(f):
            source, case = row.pop("source"), row.pop("case")
            text = {k: v for k, v in row.items() if k in ("time_unit", "version")}
            values = {k: float(v) for k, v in row.items() if v and k not in text}
            if source == "kvkey_bench":
                bm[case] = dict(values, name=case, time_unit=text["time_unit"])
            elif source == "peers" and case == "python":
                python = text["version"]
            elif source == "peers":
                peer, tokens, bs = re.fullmatch(r"(\w+)/tokens:(\d+)/bs:(\d+)", case).groups()
                peers.append(dict(values, peer=peer, tokens=int(tokens), block_size=int(bs)))
            elif source == "openssl_speed":
                kbytes = values["kbytes_per_s"]
    return bm, peers, python, kbytes


def load_run(r):
    if os.path.exists(os.path.join(r, "kvkey_bench.json")):
        return load_raw_run(r)
    return load_medians(r)


def load_runs(runs):
    loaded = [load_run(r) for r in runs]
    bm_runs = [x[0] for x in loaded]
    names = dict.fromkeys(name for b in bm_runs for name in b)
    bm = {name: median_merge([b[name] for b in bm_runs if name in b]) for name in names}
    peer_results = {}
    python = None
    for _, results, py, _ in loaded:
        python = py or python
        for x in results:
            peer_results.setdefault((x["peer"], x["tokens"], x["block_size"]), []).append(x)
    peers = {"python": python, "results": [median_merge(v) for v in peer_results.values()]}
    rates = [openssl_rate(x[3]) for x in loaded if x[3] is not None]
    ossl = statistics.median(rates) if rates else None
    machine = []
    for r in runs:
        path = os.path.join(r, "machine.txt")
        if os.path.exists(path):
            machine.append(open(path).read().rstrip())
    return bm, peers, ossl, machine


def ns_per_op(b):
    scale = {"ns": 1.0, "us": 1e3, "ms": 1e6, "s": 1e9}[b.get("time_unit", "ns")]
    return b["cpu_time"] * scale


def compressions(block_size):
    return math.ceil((1 + 32 + 4 * block_size + 4 + 9) / 64)


def openssl_kbytes(path):
    """1000s of bytes/s from `openssl speed -bytes 16384 sha256`'s output, or None."""
    try:
        text = open(path).read()
    except OSError:
        return None
    m = re.search(r"^sha256\s+([\d.]+)k\s*$", text, re.M)
    return float(m.group(1)) if m else None


def openssl_rate(kbytes):
    """Compressions/s from `openssl speed`'s 1000s of bytes/s over 16 KiB messages (a 16 KiB
    message takes 257 compressions, padding included)."""
    return kbytes * 1000 / 16384 * 257


def fmt_tokens(n):
    return "%dM" % (n >> 20) if n >= 1 << 20 else "%dk" % (n >> 10)


def fmt_rate(v):
    if v is None:
        return "-"
    for unit, div in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if v >= div:
            return "%.1f%s" % (v / div, unit) if v / div < 100 else "%.0f%s" % (v / div, unit)
    return "%.0f" % v


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    args = sys.argv[1:]
    if args[0] == "--medians":
        for r in args[1:]:
            write_medians(r)
        return
    plot = None
    if "--plot" in args:
        i = args.index("--plot")
        plot = args[i + 1]
        del args[i:i + 2]
    bm, peers, ossl, machine = load_runs(args)
    stream = bm.get("sha256_stream")
    ceiling_comp = stream["compressions_per_s"] if stream else None
    lines = []
    p = lines.append

    if machine:
        p("%d run%s:" % (len(args), "s" if len(args) > 1 else ""))
        p("")
        p("```")
        p("\n\n".join(machine))
        p("```")
        p("")

    p("### The chain against the limit and the ceiling (one thread)")
    p("")
    p("Rates per CPU second (medians). ceiling: SHA-256 compression rate "
      "measured in the same runs (%s compressions/s%s) / compressions per block."
      % (fmt_rate(ceiling_comp), "; `openssl speed`: %s" % fmt_rate(ossl) if ossl else ""))
    p("")
    p("| prompt | block | kvkey tokens/s | kvkey blocks/s | EVP one-shot blocks/s | kvkey / EVP | "
      "ceiling blocks/s | kvkey / ceiling | allocs/block |")
    p("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    chain_rows = []
    for name, b in bm.items():
        m = re.fullmatch(r"chain/tokens:(\d+)/bs:(\d+)", name)
        if not m:
            continue
        n, bs = int(m.group(1)), int(m.group(2))
        base = bm.get("evp_baseline/tokens:%d/bs:%d" % (n, bs))
        ceil_blocks = ceiling_comp / compressions(bs) if ceiling_comp else None
        chain_rows.append((n, bs, b, base, ceil_blocks))
    chain_rows.sort(key=lambda r: (r[0], r[1]))
    for n, bs, b, base, ceil_blocks in chain_rows:
        k = b["blocks_per_s"]
        p("| %s | %d | %s | %s | %s | %s | %s | %s | %.2g |" % (
            fmt_tokens(n), bs, fmt_rate(b["tokens_per_s"]), fmt_rate(k),
            fmt_rate(base["blocks_per_s"]) if base else "-",
            "%.2f" % (k / base["blocks_per_s"]) if base else "-",
            fmt_rate(ceil_blocks), "%.2f" % (k / ceil_blocks) if ceil_blocks else "-",
            b["allocs_per_block"]))
    p("")

    # ---- peers --------------------------------------------------------------------------
    if peers["results"]:
        names = sorted({r["peer"] for r in peers["results"]}, key=["lmdeploy", "lmdeploy_np", "vllm", "sglang"].index)
        p("### kvkey against the Python peers (one thread, tokens/s)")
        p("")
        p("Python %s; each peer's median CPU time over several runs (bench/peers/peers.py)." % peers.get("python"))
        p("")
        p("| prompt | block | kvkey | " + " | ".join(names) + " | " +
          " | ".join("x " + n for n in names) + " | x fastest |")
        p("|---:|---:|---:|" + "---:|" * (2 * len(names) + 1))
        by = {(r["peer"], r["tokens"], r["block_size"]): r["tokens_per_s"] for r in peers["results"]}
        for n, bs, b, _, _ in chain_rows:
            rates = [by.get((x, n, bs)) for x in names]
            if all(r is None for r in rates):
                continue
            k = b["tokens_per_s"]
            fastest = max(r for r in rates if r is not None)
            p("| %s | %d | %s | %s | %s | %.1f |" % (
                fmt_tokens(n), bs, fmt_rate(k), " | ".join(fmt_rate(r) for r in rates),
                " | ".join("%.1f" % (k / r) if r else "-" for r in rates), k / fastest))
        p("")

    # ---- per-object operations ---------------------------------------------------------------
    p("### Keys, envelopes, extension, files (one thread)")
    p("")
    p("| operation | time | allocations |")
    p("|---|---:|---:|")
    ops = [("store_key", "store_key"), ("seal", "seal"), ("verify/mismatch:0", "verify, accepted"),
           ("verify/mismatch:1", "verify, another block's header"),
           ("verify/mismatch:2", "verify, another identity's header (names the field)"),
           ("object_roundtrip", "store_key + seal + verify of one object")]
    for key, label in ops:
        b = bm.get(key)
        if b:
            p("| %s | %.0f ns | %.2f / op |" % (label, ns_per_op(b), b["allocs_per_op"]))
    b = bm.get("extend_one_block")
    if b:
        p("| extend_block_hashes by one 64-token block (decode) | %.0f ns / block | %.3f / block |" % (
            1e9 / b["blocks_per_s"], b["allocs_per_block"]))
    for t in ("std::int64_t", "std::int32_t"):
        b = bm.get("chain_typed<%s>" % t)
        if b:
            p("| block_hashes, 128k %s tokens, block 64 | %s tokens/s | %.4f / block |" % (
                t.replace("std::", ""), fmt_rate(b["tokens_per_s"]), b["allocs_per_block"]))
    for bs in (16, 64, 256):
        b = bm.get("chain_keyed/bs:%d" % bs)
        if b:
            p("| block_hashes, keyed namespace (HMAC-SHA-256, EVP_MAC), 128k tokens, block %d | %s tokens/s | %.2f / block |"
              % (bs, fmt_rate(b["tokens_per_s"]), b["allocs_per_block"]))
    b = bm.get("fingerprint_file")
    if b:
        p("| fingerprint_file (page-cached) | %.0f MB/s | |" % b["MB_per_s"])
    for key, label in (("sha256_stream", "SHA-256, OpenSSL EVP, 16 KiB messages"),
                       ("sha256_native_stream", "SHA-256, kvkey's SHA-extension code, 16 KiB messages")):
        b = bm.get(key)
        if b:
            p("| %s | %.0f MB/s | |" % (label, b["bytes_per_second"] / 1e6))
    p("")

    # ---- weights fingerprint (kvkey/model_dir.hpp) ---------------------------------------------
    base = bm.get("file_evp_baseline/real_time")
    one = bm.get("weights_one_file/threads:1/real_time")
    two1 = bm.get("weights_two_files/threads:1/real_time")
    two2 = bm.get("weights_two_files/threads:2/real_time")
    if base and one:
        p("### Weights fingerprint: page-cached files (wall-clock)")
        p("")
        p("| case | MB/s | ratio |")
        p("|---|---:|---:|")
        p("| fread + EVP_DigestUpdate loop, one file (what sha256sum does) | %.0f | 1.00 |" % base["MB_per_s"])
        p("| read_model_dir, one file | %.0f | %.2f x the loop |" % (one["MB_per_s"], one["MB_per_s"] / base["MB_per_s"]))
        if two1 and two2:
            p("| read_model_dir, two files, 1 thread | %.0f | 1.00 |" % two1["MB_per_s"])
            p("| read_model_dir, two files, 2 threads | %.0f | %.2f x 1 thread |"
              % (two2["MB_per_s"], two2["MB_per_s"] / two1["MB_per_s"]))
        p("")

    # ---- batches ------------------------------------------------------------------------------
    seq = bm.get("batch_sequential/real_time")
    if seq:
        p("### Batches: 64 prompts of 16k tokens, block size 64 (wall-clock)")
        p("")
        p("| how | tokens/s | x sequential |")
        p("|---|---:|---:|")
        s = seq["tokens_per_s"]
        for key, label in (("batch_sequential/real_time", "loop of extend_block_hashes into reused vectors, 1 thread"),
                           ("batch_pool/threads:1/real_time", "BatchHasher(1)"),
                           ("batch_pool/threads:2/real_time", "BatchHasher(2)"),
                           ("batch_oneshot/threads:2/real_time", "block_hashes_batch(..., 2)")):
            b = bm.get(key)
            if b:
                p("| %s | %s | %.2f |" % (label, fmt_rate(b["tokens_per_s"]), b["tokens_per_s"] / s))
        p("")

    print("\n".join(lines))

    if plot:
        make_plot(plot, chain_rows, ceiling_comp, peers)


def make_plot(path, chain_rows, ceiling_comp, peers):
    bs = 64
    rows = [r for r in chain_rows if r[1] == bs]
    data = path + ".dat"
    peer_names = ["lmdeploy", "lmdeploy_np", "vllm", "sglang"]
    by = {(r["peer"], r["tokens"]): r["tokens_per_s"] for r in peers["results"] if r["block_size"] == bs}
    with open(data, "w") as f:
        f.write("# tokens kvkey evp_baseline ceiling " + " ".join(peer_names) + " (tokens/s, block size 64)\n")
        for n, _, b, base, ceil_blocks in rows:
            vals = [b["tokens_per_s"], base["blocks_per_s"] * bs if base else float("nan"),
                    ceil_blocks * bs if ceil_blocks else float("nan")]
            vals += [by.get((x, n), float("nan")) for x in peer_names]
            f.write("%d %s\n" % (n, " ".join("%.6g" % (v / 1e6) for v in vals)))
    labels = {"lmdeploy": "lmdeploy (Python list)", "lmdeploy_np": "lmdeploy (numpy)", "vllm": "vLLM (pickle)",
              "sglang": "SGLang HiCache"}
    series = [(2, "kvkey", "lines lw 3 lc rgb '#1f77b4'"),
              (3, "one-shot EVP per block (the limit)", "lines lw 2 dt 2 lc rgb '#555555'"),
              (4, "SHA-256 compression ceiling", "lines lw 2 dt 3 lc rgb '#000000'")]
    colors = ["#d62728", "#ff7f0e", "#2ca02c", "#9467bd"]
    for i, x in enumerate(peer_names):
        series.append((5 + i, labels[x], "linespoints lw 2 pt 7 ps 0.6 lc rgb '%s'" % colors[i]))
    script = "\n".join([
        "set terminal svg size 800,520 font 'sans,12' background rgb 'white'",
        "set output '%s'" % path,
        "set title 'Block-hash chain throughput, block size 64, one thread'",
        "set xlabel 'prompt length (tokens)'",
        "set ylabel 'million tokens / s'",
        "set logscale x 2",
        "set logscale y 10",
        "set yrange [4:800]",
        "set ytics ('5' 5, '10' 10, '20' 20, '50' 50, '100' 100, '200' 200, '500' 500)",
        "set xtics ('1k' 1024, '16k' 16384, '128k' 131072, '1M' 1048576)",
        "set grid",
        "set key bottom center horizontal maxcols 2 box opaque samplen 3 width 1",
        "set bmargin 10",
        "set key at screen 0.5, screen 0.02 center bottom",
        "plot " + ", ".join("'%s' using 1:%d with %s title '%s'" % (data, c, style, t)
                            for c, t, style in series),
    ])
    subprocess.run(["gnuplot"], input=script.encode(), check=True)
    os.remove(data)


if __name__ == "__main__":
    main()
