#!/usr/bin/env bash
# The engine-shaped soak (bench/soak/): the same traffic keyed the legacy
# lmdeploy way and with kvkey, against a redis-server (or, with --store mooncake,
# a Mooncake master: scripts/mooncake.sh) this script starts on free loopback
# ports and stops on exit.
#   scripts/soak.sh [--store redis|mooncake] [--quick] [--seed N] [--metrics-out FILE] [--plot FILE]
# Runs in the project venv (scripts/venv.sh). The kvkey Python module is taken
# from build/dev/python when present (a developer's CMake build), else the one
# installed in the venv (stage 30-python, or `pip install ./python`). Exits
# non-zero when a kvkey run used one wrong block (the shared-scope scenario's
# cross-tenant private loads among them).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
store=redis
args=()
while [ "$#" -gt 0 ]; do
  case "$1" in
    -h|--help) sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    --store) store="${2:?--store needs redis or mooncake}"; shift 2 ;;
    --store=*) store="${1#--store=}"; shift ;;
    *) args+=("$1"); shift ;;
  esac
done
case "$store" in redis | mooncake) ;; *) echo "soak: --store is redis or mooncake, not $store" >&2; exit 2 ;; esac
if [ -z "${PYTHONPATH:-}" ]; then
  for d in "$root/build/dev/python"; do
    if [ -f "$d/kvkey/__init__.py" ]; then export PYTHONPATH="$d"; break; fi
  done
fi

py="$("$root/scripts/venv.sh" | tail -n 1)"
work="$(mktemp -d /tmp/kvkey-soak-XXXXXX)"
# shellcheck source=scripts/lib/services.sh
. "$root/scripts/lib/services.sh"
if [ "$store" = mooncake ]; then
  export MOONCAKE_STATE_DIR="$work/mooncake"
  eval "$("$root/scripts/mooncake.sh" env)"  # fails, saying how, without a Mooncake build
  trap '"$root/scripts/mooncake.sh" stop >/dev/null; rm -rf "$work"' EXIT
  trap 'exit 130' INT TERM
  eval "$("$root/scripts/mooncake.sh" start)"
  echo "soak: Mooncake master $MOONCAKE_MASTER on $MOONCAKE_MASTER_ADDR"
  [ -z "$MOONCAKE_PYTHONPATH" ] || export PYTHONPATH="$MOONCAKE_PYTHONPATH${PYTHONPATH:+:$PYTHONPATH}"
  "$MOONCAKE_PYTHON" "$root/bench/soak/soak.py" --store mooncake --master "$MOONCAKE_MASTER_ADDR" \
    --metadata "$MOONCAKE_METADATA_URL" "${args[@]}"
  exit
fi
trap 'stop_services; rm -rf "$work"' EXIT
trap 'exit 130' INT TERM
start_redis || { echo "soak: could not start redis-server" >&2; exit 1; }
echo "soak: $(redis-server --version | cut -d' ' -f1-3) on 127.0.0.1:$redis_port"
"$py" "$root/bench/soak/soak.py" --redis-port "$redis_port" "${args[@]}"
