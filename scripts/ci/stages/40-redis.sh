#!/usr/bin/env bash
# The Redis integration tests (tests/integration, examples/redis_connector):
# builds them in build/integration, starts a redis-server on 127.0.0.1 (a free
# port, no persistence), runs `ctest -L integration` with KVKEY_REDIS_PORT set,
# and stops the server on every exit path. The wire-fault tests run the
# connector through tests/integration/fault_proxy.py (python3, standard
# library only), which they start and stop themselves.
set -euo pipefail
root="${KVKEY_ROOT:-$(cd "$(dirname "$0")/../../.." && pwd)}"
jobs="${KVKEY_JOBS:-$(nproc)}"
dir="$root/build/integration"

cmake -S "$root" -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKVKEY_WARNINGS_AS_ERRORS=ON \
  -DKVKEY_BUILD_INTEGRATION=ON -DKVKEY_BUILD_TESTS=OFF -DKVKEY_BUILD_EXAMPLES=OFF -DKVKEY_BUILD_TOOLS=OFF >/dev/null
cmake --build "$dir" -j"$jobs"

# shellcheck source=scripts/ci/lib/redis.sh
. "$root/scripts/ci/lib/redis.sh"
work="$(mktemp -d /tmp/kvkey-it-XXXXXX)"
stop_server() {
  redis_stop_all
  rm -rf "$work"
}
trap stop_server EXIT
trap 'exit 130' INT TERM

redis_start 40-redis "$work"
port="$REDIS_PORT"
pid="$REDIS_PID"
echo "40-redis: $(redis-server --version | cut -d' ' -f1-3) on 127.0.0.1:$port (pid $pid, no persistence)"

export KVKEY_REDIS_PORT="$port"
status=0
ctest --test-dir "$dir/tests/integration" -L integration --output-on-failure -j"$jobs" --timeout 1800 || status=$?
# What the tests measured: ctest keeps a passing test's output only in its log.
echo "=== integration results ==="
grep -E '^(isolation|epoch|purge|faults|restart|load|load_into|lookup): |^wire faults: |^  mode ' \
  "$dir/tests/integration/Testing/Temporary/LastTest.log" || true
exit "$status"
