#!/usr/bin/env bash
# The Redis Cluster tests (examples/python/redis_cluster): starts six
# redis-server nodes on 127.0.0.1 (free ports, cluster mode, no persistence),
# creates a cluster of 3 primaries and 3 replicas with `redis-cli --cluster
# create`, waits until every node reports cluster_state:ok, runs the tests
# (kvkey.stores.RedisClusterStore with kvkey.testing.check_store and through
# sockets that damage its reply streams, then the
# example's scenarios, which kill one primary, reshard slots and damage values) and stops every
# node by pid on every exit path. Needs the kvkey Python module: the installed
# one (stage 30-python) or, failing that, one built here with CMake.
# ci: beside
set -euo pipefail
root="${KVKEY_ROOT:-$(cd "$(dirname "$0")/../../.." && pwd)}"
jobs="${KVKEY_JOBS:-$(nproc)}"
# shellcheck source=scripts/ci/lib/python.sh
. "$root/scripts/ci/lib/python.sh"
example="$root/examples/python/redis_cluster"

extra="$("$root/scripts/ci/python-module.sh" "$root/build/cluster")"
if [ -n "$extra" ]; then export PYTHONPATH="$extra${PYTHONPATH:+:$PYTHONPATH}"; fi

# shellcheck source=scripts/ci/lib/redis.sh
. "$root/scripts/ci/lib/redis.sh"
work="$(mktemp -d /tmp/kvkey-cluster-XXXXXX)"
stop_nodes() {
  redis_stop_all # also reaps a node the tests killed
  rm -rf "$work"
}
trap stop_nodes EXIT
trap 'exit 130' INT TERM

start_node() {
  redis_start "42-redis-cluster: node $1" "$work/$1" --cluster-enabled yes \
    --cluster-config-file "$work/$1/nodes.conf" --cluster-node-timeout 5000
  nodes+=("$REDIS_PORT:$REDIS_PID")
  ports+=("$REDIS_PORT")
}

nodes=()
ports=()
for i in 1 2 3 4 5 6; do start_node "$i"; done
echo "42-redis-cluster: $(redis-server --version | cut -d' ' -f1-3), 6 nodes on 127.0.0.1: ${nodes[*]} (port:pid)"

addresses=()
for p in "${ports[@]}"; do addresses+=("127.0.0.1:$p"); done
redis-cli --cluster create "${addresses[@]}" --cluster-replicas 1 --cluster-yes >"$work/create.log" 2>&1 || {
  cat "$work/create.log" >&2
  exit 1
}

# Every node must see the cluster as ok, with all six nodes known and three of
# them replicas (bounded).
replicas_seen_by() { redis-cli -p "$1" cluster nodes 2>/dev/null | awk '$3 ~ /slave/' | wc -l; }
deadline=$((SECONDS + 120))
until
  ok=0
  for p in "${ports[@]}"; do
    info="$(redis-cli -p "$p" cluster info 2>/dev/null || true)"
    if grep -q '^cluster_state:ok' <<<"$info" && grep -q '^cluster_known_nodes:6' <<<"$info" &&
      [ "$(replicas_seen_by "$p")" -eq 3 ]; then ok=$((ok + 1)); fi
  done
  [ "$ok" -eq 6 ]
do
  if [ "$SECONDS" -ge "$deadline" ]; then
    echo "42-redis-cluster: the cluster did not reach cluster_state:ok on all 6 nodes" >&2
    for p in "${ports[@]}"; do echo "--- $p"; redis-cli -p "$p" cluster info | head -3; done >&2
    exit 1
  fi
  sleep 0.2
done
echo "42-redis-cluster: cluster_state:ok on all 6 nodes, each seeing 3 primaries and 3 replicas"

export KVKEY_CLUSTER_NODES="${nodes[*]}"
set +e
# kvkey.stores.RedisClusterStore and kvkey.testing.check_store first: the scenarios
# below kill a primary.
(cd "$root/python/tests" && "$py" -m pytest -q -s -p no:cacheprovider -k cluster \
  test_redis_stores.py test_redis_cluster_wire_faults.py) 2>&1 | tee "$work/stores.log"
stores_status="${PIPESTATUS[0]}"
# KVKEY_CLUSTER_PYTEST_ARGS: extra pytest arguments, e.g. "-k failover" while working on one scenario.
# shellcheck disable=SC2086
(cd "$example" && "$py" -m pytest -q -s -p no:cacheprovider ${KVKEY_CLUSTER_PYTEST_ARGS:-} tests) 2>&1 | tee "$work/tests.log"
status="${PIPESTATUS[0]}"
[ "$stores_status" -eq 0 ] || status="$stores_status"
set -e
echo "=== cluster results === (a 'Killed' notice above is the primary the failover scenario killed)"
grep -hoE 'cluster (isolation|failover|resharding|purge|faults|keyed|migration): .*|wire faults: .*' "$work/stores.log" \
  "$work/tests.log" || true
exit "$status"
