#!/usr/bin/env bash
# The engine-shaped soak (bench/soak/): the same traffic keyed the legacy
# lmdeploy way and with kvkey, against a redis-server this script starts on a
# free loopback port and stops on exit.
#   scripts/soak.sh [--quick] [--seed N] [--metrics-out FILE] [--plot FILE]
# The kvkey Python module is taken from build/python/python (the CI's CMake
# build) or build/dev/python when present, else the installed one. Exits
# non-zero when the kvkey run used one wrong block.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
for arg in "$@"; do
  case "$arg" in
    -h|--help) sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
  esac
done
if [ -z "${PYTHONPATH:-}" ]; then
  for d in "$root/build/python/python" "$root/build/dev/python"; do
    if [ -f "$d/kvkey/__init__.py" ]; then export PYTHONPATH="$d"; break; fi
  done
fi

work="$(mktemp -d /tmp/kvkey-soak-XXXXXX)"
# shellcheck source=scripts/lib/services.sh
. "$root/scripts/lib/services.sh"
trap 'stop_services; rm -rf "$work"' EXIT
trap 'exit 130' INT TERM
start_redis || { echo "soak: could not start redis-server" >&2; exit 1; }
echo "soak: $(redis-server --version | cut -d' ' -f1-3) on 127.0.0.1:$redis_port"
/usr/bin/python3 "$root/bench/soak/soak.py" --redis-port "$redis_port" "$@"
