#!/usr/bin/env bash
# libFuzzer (docs/security.md, "Fuzzing and sanitizers"): builds tests/fuzz
# with clang++-14 -fsanitize=fuzzer,address,undefined, replays the committed
# corpora and regression inputs (CTest), then fuzzes the targets two at a
# time, in two lanes that share KVKEY_FUZZ_BUDGET seconds of wall time (default
# 150: with five targets, 50 s and 75 s per target). Any crash, leak,
# timeout, out-of-memory or sanitizer report fails the stage; the input that
# caused it is kept under build/fuzz/artifacts/<target>/ and belongs, once the
# bug is fixed, in tests/fuzz/regressions/<target>/.
set -euo pipefail
root="${KVKEY_ROOT:?run through scripts/test.sh}"
jobs="${KVKEY_JOBS:-2}"
if [ "$jobs" -gt 2 ]; then jobs=2; fi
budget="${KVKEY_FUZZ_BUDGET:-150}"
build="$root/build/fuzz"

cmake -S "$root" -B "$build" -G "Unix Makefiles" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_COMPILER=clang++-14 -DKVKEY_WARNINGS_AS_ERRORS=ON \
  -DKVKEY_BUILD_FUZZERS=ON -DKVKEY_BUILD_TESTS=OFF -DKVKEY_BUILD_EXAMPLES=OFF -DKVKEY_BUILD_TOOLS=OFF \
  -DKVKEY_INSTALL=OFF >/dev/null
cmake --build "$build" -j"$jobs"
ctest --test-dir "$build/tests/fuzz" --output-on-failure -j"$jobs"

targets=()
for exe in "$build"/tests/fuzz/kvkey_fuzz_*; do
  name="$(basename "$exe")"
  [ "$name" = kvkey_fuzz_make_corpus ] && continue
  targets+=("${name#kvkey_fuzz_}")
done

# fuzz TARGET: new inputs go to a scratch corpus (the committed one is only read).
fuzz() {
  local t="$1" seconds="$2" work="$build/work/$1" art="$build/artifacts/$1/"
  rm -rf "$work" "$art"
  mkdir -p "$work" "$art"
  "$build/tests/fuzz/kvkey_fuzz_$t" "$work" "$root/tests/fuzz/corpus/$t" \
    -max_total_time="$seconds" -rss_limit_mb=2048 -timeout=10 -max_len=4096 \
    -print_final_stats=1 -artifact_prefix="$art" >"$build/fuzz-$t.log" 2>&1
}

# Two lanes on the two cores; each lane runs its targets one after another.
lane() {
  local status=0 t seconds=$((budget / ($# > 0 ? $# : 1)))
  for t in "$@"; do
    if fuzz "$t" "$seconds"; then
      echo "fuzz $t (${seconds}s): $(grep -E '^stat::number_of_executed_units' "$build/fuzz-$t.log" | awk '{print $2}') runs, no findings"
    else
      echo "fuzz $t: FAILED (log: build/fuzz/fuzz-$t.log, inputs: build/fuzz/artifacts/$t/)"
      grep -E 'ERROR|SUMMARY|invariant|Test unit written' "$build/fuzz-$t.log" | head -20 || true
      status=1
    fi
  done
  return "$status"
}
lane_a=() lane_b=()
for i in "${!targets[@]}"; do
  if (( i % 2 == 0 )); then lane_a+=("${targets[$i]}"); else lane_b+=("${targets[$i]}"); fi
done
echo "fuzzing ${targets[*]}: two lanes of ${budget}s"
lane "${lane_a[@]}" & pid_a=$!
status=0
lane "${lane_b[@]}" || status=1
wait "$pid_a" || status=1
exit "$status"
