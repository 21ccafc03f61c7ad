#!/usr/bin/env bash
# The Redis integration tests (tests/integration, examples/redis_connector):
# builds them in build/integration, starts a redis-server on 127.0.0.1 (a free
# port, no persistence), runs `ctest -L integration` with KVKEY_REDIS_PORT set,
# then the Python stores' tests against the same server, and stops the server
# on every exit path. The wire-fault tests run the connector through
# tests/integration/fault_proxy.py (python3, standard library only), which they
# start and stop themselves.
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
grep -E '^(isolation|epoch|purge|faults|restart|load|load_into|lookup|store_conformance): |^wire faults: |^  mode ' \
  "$dir/tests/integration/Testing/Temporary/LastTest.log" || true

# The verified lookup against lookup_existing on this server (docs/performance.md),
# briefly: it keeps compiling and running; the ratio is printed, not judged.
bench="$root/build/integration-bench"
cmake -S "$root" -B "$bench" -DCMAKE_BUILD_TYPE=Release -DKVKEY_WARNINGS_AS_ERRORS=ON -DKVKEY_BUILD_BENCH=ON \
  -DKVKEY_BUILD_TESTS=OFF -DKVKEY_BUILD_EXAMPLES=OFF -DKVKEY_BUILD_TOOLS=OFF >/dev/null
cmake --build "$bench" -j"$jobs" --target kvkey_redis_lookup_bench
"$bench/bench/kvkey_redis_lookup_bench" 5 || status=$?

# The Python stores on the same server: kvkey.stores.RedisStore, the connector and
# kvkey.testing.check_store (python/tests/test_redis_stores.py), RedisStore through
# the fault proxy (python/tests/test_redis_wire_faults.py), kvkey.aio.Connector over
# kvkey.stores.aio.RedisStore (test_aio.py) and the engine-shaped example of
# docs/python.md (examples/python/engine_tp2.py, test_engine_example.py). They use the
# installed module (stage 30-python) or, failing that, one built here.
# shellcheck source=scripts/ci/lib/python.sh
. "$root/scripts/ci/lib/python.sh"
extra="$("$root/scripts/ci/python-module.sh" "$root/build/redis-python")"
if [ -n "$extra" ]; then export PYTHONPATH="$extra${PYTHONPATH:+:$PYTHONPATH}"; fi
(cd "$root/python/tests" && "$py" -m pytest -q -s -p no:cacheprovider -k "not cluster" \
  test_redis_stores.py test_redis_wire_faults.py test_rotation_redis.py test_aio.py \
  test_engine_example.py) || status=$?
exit "$status"
