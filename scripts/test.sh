#!/usr/bin/env bash
# Installs what is missing, builds and runs every test: the stages in
# scripts/ci/stages/, in name order. `scripts/test.sh NAME...` runs only the
# stages whose file name contains one of the NAMEs.
set -euo pipefail
cd "$(dirname "$0")/.."
export KVKEY_ROOT="$PWD"
export KVKEY_JOBS="${KVKEY_JOBS:-$(nproc)}"

scripts/install-deps.sh test

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

# Every selected stage runs, even after one fails, so one red stage does not
# hide the state of the others; the run fails if any stage failed.
summary=()
failed=0
start_all=$SECONDS
for stage in "${selected[@]}"; do
  name="$(basename "$stage" .sh)"
  echo "=== stage $name ==="
  t0=$SECONDS
  if bash "$stage"; then
    summary+=("PASS $name ($((SECONDS - t0)) s)")
  else
    summary+=("FAIL $name ($((SECONDS - t0)) s)")
    echo "=== FAILED: stage $name ==="
    failed=$((failed + 1))
  fi
done
echo "=== summary ($((SECONDS - start_all)) s) ==="
printf '%s\n' "${summary[@]}"
echo "stages: $(( ${#selected[@]} - failed )) passed, $failed failed"
[ "$failed" -eq 0 ]
