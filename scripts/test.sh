#!/usr/bin/env bash
# Installs what is missing, builds and runs every test: the stages in
# scripts/ci/stages/, in name order. `scripts/test.sh NAME...` runs only the
# stages whose file name contains one of the NAMEs.
set -euo pipefail
cd "$(dirname "$0")/.."
export KVKEY_ROOT="$PWD"
export KVKEY_JOBS="${KVKEY_JOBS:-$(nproc)}"

scripts/install-deps.sh test

# ccache for every CMake build of every stage (CMake reads CMAKE_CXX_COMPILER_LAUNCHER
# from the environment): a second run on the same machine recompiles only what
# changed. KVKEY_CCACHE=0 turns it off.
if [ "${KVKEY_CCACHE:-1}" != 0 ] && command -v ccache >/dev/null; then
  export CCACHE_DIR="${CCACHE_DIR:-$HOME/.cache/kvkey/ccache}"
  export CCACHE_BASEDIR="$KVKEY_ROOT" CCACHE_NOHASHDIR=1
  export CMAKE_C_COMPILER_LAUNCHER=ccache CMAKE_CXX_COMPILER_LAUNCHER=ccache KVKEY_CCACHE=1
fi

selected=()
for stage in scripts/ci/stages/*.sh; do
  if [ "$#" -eq 0 ]; then selected+=("$stage"); continue; fi
  for want in "$@"; do
    case "$(basename "$stage")" in *"$want"*) selected+=("$stage"); break ;; esac
  done
done

if [ "${#selected[@]}" -eq 0 ]; then
  echo "test.sh: no stage matches: $* (stages: $(cd scripts/ci/stages && ls *.sh | tr '\n' ' '))" >&2
  exit 2
fi

# A full run installs what only PyPI has (python/requirements/*.txt) into the project
# venv in the background while the first stages compile: scripts/venv.sh holds a
# lock, so a stage that needs the venv waits for it, and installs (or fails, naming
# the package) itself if the prefetch did not.
if [ "$#" -eq 0 ]; then
  mkdir -p build
  reqs=()
  for f in python/requirements/*.txt; do reqs+=("$(basename "$f" .txt)"); done
  ( t0=$SECONDS
    if scripts/venv.sh "${reqs[@]}" >build/venv-prefetch.log 2>&1; then
      echo "=== venv: ${reqs[*]} installed in the background ($((SECONDS - t0)) s) ==="
    else
      echo "=== venv: the background install failed (build/venv-prefetch.log); the stages that need it retry ==="
    fi ) &
fi

# Every selected stage runs, even after one fails, so one red stage does not
# hide the state of the others; the run fails if any stage failed. Each
# stage's output is also kept in build/ci-logs/NAME.log, and the last 40 lines
# of each failed one are printed again just above the summary.
#
# A stage whose file has the line `# ci: beside` spends its time waiting on
# servers (failovers, leases, scrapes), not computing: in a run of more than one
# stage it starts in the background at its place in the order, with its output
# in build/ci-logs/NAME.log, while the next stages run; its output is printed when
# it ends. KVKEY_CI_SERIAL=1 runs every stage in turn.
summary=()
failed=0 failed_names=()
start_all=$SECONDS
mkdir -p build/ci-logs
beside_pids=() beside_names=() beside_t0=()
run_stage() {  # NAME FILE: runs it, records PASS/FAIL with its seconds
  local name="$1" t0=$SECONDS
  if bash "$2"; then
    echo "PASS $name ($((SECONDS - t0)) s)" >"build/ci-logs/$name.result"
  else
    echo "FAIL $name ($((SECONDS - t0)) s)" >"build/ci-logs/$name.result"
    return 1
  fi
}
record() {  # NAME
  local line
  line="$(cat "build/ci-logs/$1.result" 2>/dev/null || echo "FAIL $1 (no result)")"
  summary+=("$line")
  case "$line" in FAIL*) echo "=== FAILED: stage $1 ==="; failed=$((failed + 1)); failed_names+=("$1") ;; esac
}
finish_beside() {  # waits for every background stage, printing its output
  local i
  for i in "${!beside_pids[@]}"; do
    wait "${beside_pids[$i]}" || true
    echo "=== stage ${beside_names[$i]} (ran beside the stages after it; started at $((beside_t0[$i] - start_all)) s) ==="
    cat "build/ci-logs/${beside_names[$i]}.log"
    record "${beside_names[$i]}"
  done
  beside_pids=() beside_names=() beside_t0=()
}
for stage in "${selected[@]}"; do
  name="$(basename "$stage" .sh)"
  rm -f "build/ci-logs/$name.result"
  if [ "${#selected[@]}" -gt 1 ] && [ "${KVKEY_CI_SERIAL:-0}" != 1 ] && grep -qx '# ci: beside' "$stage"; then
    echo "=== stage $name: started beside the next stages (build/ci-logs/$name.log) ==="
    run_stage "$name" "$stage" >"build/ci-logs/$name.log" 2>&1 &
    beside_pids+=("$!") beside_names+=("$name") beside_t0+=("$SECONDS")
    continue
  fi
  echo "=== stage $name ==="
  run_stage "$name" "$stage" 2>&1 | tee "build/ci-logs/$name.log" || true
  record "$name"
done
finish_beside
wait  # the background venv install, if it is still going
# A log shows its last lines first: each failed stage's end again, above the summary.
for name in "${failed_names[@]}"; do
  echo "=== the last lines of FAILED stage $name (all of it: build/ci-logs/$name.log) ==="
  tail -n 40 "build/ci-logs/$name.log"
done
echo "=== summary ($((SECONDS - start_all)) s) ==="
printf '%s\n' "${summary[@]}"
echo "stages: $(( ${#selected[@]} - failed )) passed, $failed failed"
[ "$failed" -eq 0 ]
