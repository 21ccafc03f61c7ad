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

summary=()
start_all=$SECONDS
for stage in "${selected[@]}"; do
  name="$(basename "$stage" .sh)"
  echo "=== stage $name ==="
  t0=$SECONDS
  if bash "$stage"; then
    summary+=("PASS $name ($((SECONDS - t0))s)")
  else
    summary+=("FAIL $name ($((SECONDS - t0))s)")
    printf '%s\n' "${summary[@]}"
    echo "=== FAILED in stage $name ==="
    exit 1
  fi
done
echo "=== summary ==="
printf '%s\n' "${summary[@]}"
echo "=== all ${#selected[@]} stages passed in $((SECONDS - start_all))s ==="
