#!/usr/bin/env bash
# Builds the benchmarks in Release and runs them with the Python peers; writes
# the results and the tables of docs/performance.md.
#
#   scripts/bench.sh                # full run: build/bench-results/<UTC time>/
#   scripts/bench.sh --quick        # a short run (smaller prompts, one repetition)
#   scripts/bench.sh --plot docs/performance.svg   # also draw the plot
#
# The run directory gets the raw output (kvkey_bench.json, peers.json,
# openssl_speed.txt), machine.txt (CPU, OpenSSL, load before and after),
# medians.csv (the per-case medians, bench/report.py --medians) and report.md.
# A run worth recording is committed as its machine.txt and medians.csv only,
# under bench/results/<date>/<run>/; the raw output stays in build/.
# The machine should be quiet: the load average is recorded, and the batch
# cases (two threads, wall-clock time) are the most sensitive to it.
set -euo pipefail
cd "$(dirname "$0")/.."

quick=0
plot=""
while [ "$#" -gt 0 ]; do
  case "$1" in
    --quick) quick=1 ;;
    --plot) plot="$2"; shift ;;
    *) echo "bench.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
  shift
done

scripts/install-deps.sh bench

build=build/bench-release
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DKVKEY_BUILD_BENCH=ON -DKVKEY_BUILD_TESTS=OFF \
  -DKVKEY_BUILD_EXAMPLES=OFF -DKVKEY_BUILD_TOOLS=OFF -DKVKEY_WARNINGS_AS_ERRORS=ON >/dev/null
cmake --build "$build" -j"${KVKEY_JOBS:-2}" --target kvkey_bench

out="build/bench-results/$(date -u +%Y%m%dT%H%M%SZ)"
mkdir -p "$out"
{
  echo "date:    $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "cpu:     $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores"
  echo "sha:     $(grep -q -w sha_ni /proc/cpuinfo && echo 'SHA extensions (sha_ni)' || echo 'no SHA extensions')"
  echo "openssl: $(openssl version)"
  echo "python:  $(/usr/bin/python3 --version)"
  echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
} >"$out/machine.txt"

if [ "$quick" = 1 ]; then
  bench_args=(--benchmark_min_time=0.05 --benchmark_repetitions=1)
  peers_args=(--quick)
  speed_seconds=1
  export KVKEY_BENCH_FILE_MB="${KVKEY_BENCH_FILE_MB:-32}"
else
  bench_args=(--benchmark_min_time=0.5 --benchmark_repetitions="${KVKEY_BENCH_REPETITIONS:-5}"
    --benchmark_report_aggregates_only=true)
  peers_args=()
  speed_seconds=3
fi

"$build/bench/kvkey_bench" "${bench_args[@]}" --benchmark_counters_tabular=true \
  --benchmark_out="$out/kvkey_bench.json" --benchmark_out_format=json
openssl speed -seconds "$speed_seconds" -bytes 16384 sha256 >"$out/openssl_speed.txt" 2>/dev/null
/usr/bin/python3 bench/peers/peers.py "${peers_args[@]}" --out "$out/peers.json"
echo "load after:  $(cut -d' ' -f1-3 /proc/loadavg)" >>"$out/machine.txt"

/usr/bin/python3 bench/report.py --medians "$out"
report_args=("$out")
if [ -n "$plot" ]; then report_args+=(--plot "$plot"); fi
/usr/bin/python3 bench/report.py "${report_args[@]}" | tee "$out/report.md"
echo "bench.sh: results in $out"
