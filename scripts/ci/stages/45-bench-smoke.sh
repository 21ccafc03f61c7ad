#!/usr/bin/env bash
# The benchmarks keep compiling (warning-free, Release) and running: every case
# once with a tiny time budget, then the peers' self-check and the report
# script on the result. No timing is judged here (docs/performance.md).
set -euo pipefail
dir="$KVKEY_ROOT/build/bench-smoke"
cmake -S "$KVKEY_ROOT" -B "$dir" -DCMAKE_BUILD_TYPE=Release -DKVKEY_BUILD_BENCH=ON -DKVKEY_BUILD_TESTS=OFF \
  -DKVKEY_BUILD_EXAMPLES=OFF -DKVKEY_BUILD_TOOLS=OFF -DKVKEY_WARNINGS_AS_ERRORS=ON >/dev/null
cmake --build "$dir" -j"$KVKEY_JOBS" --target kvkey_bench
out="$dir/run"
mkdir -p "$out"
# The million-token prompts and the large file are left out to stay well under a minute.
KVKEY_BENCH_FILE_MB=4 "$dir/bench/kvkey_bench" --benchmark_min_time=0.001 \
  --benchmark_filter='-/tokens:1048576/' --benchmark_out="$out/kvkey_bench.json" --benchmark_out_format=json >/dev/null
/usr/bin/python3 - "$out/kvkey_bench.json" <<'PY'
import json, sys
doc = json.load(open(sys.argv[1]))
bad = [b["name"] + ": " + b.get("error_message", "") for b in doc["benchmarks"] if b.get("error_occurred")]
if bad:
    sys.exit("bench smoke: failed cases:\n  " + "\n  ".join(bad))
print("bench smoke: %d cases ran" % len(doc["benchmarks"]))
PY
/usr/bin/python3 "$KVKEY_ROOT/bench/peers/peers.py" --check
# The binding's benchmark, briefly, on the module 30-python installed in the venv
# (or one built here when it is missing).
root="$KVKEY_ROOT"
# shellcheck source=scripts/ci/lib/python.sh
. "$root/scripts/ci/lib/python.sh"
extra="$("$root/scripts/ci/python-module.sh" "$root/build/bench-python")"
if [ -n "$extra" ]; then export PYTHONPATH="$extra${PYTHONPATH:+:$PYTHONPATH}"; fi
"$py" "$KVKEY_ROOT/bench/python_bench.py" --quick --out "$out/python_bench.json" >/dev/null
# The compiled connector against the pure-Python baseline, briefly (it keeps running).
"$py" "$KVKEY_ROOT/bench/python_connector_bench.py" --blocks 50 --rounds 1 >/dev/null
"$py" "$KVKEY_ROOT/bench/report.py" "$out" >/dev/null
echo "bench smoke: report generated"
