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
set -euo pipefail
root="${KVKEY_ROOT:-$(cd "$(dirname "$0")/../../.." && pwd)}"
jobs="${KVKEY_JOBS:-$(nproc)}"
py=/usr/bin/python3
example="$root/examples/python/redis_cluster"

extra="$("$root/scripts/ci/python-module.sh" "$root/build/cluster")"
if [ -n "$extra" ]; then export PYTHONPATH="$extra${PYTHONPATH:+:$PYTHONPATH}"; fi

work="$(mktemp -d /tmp/kvkey-cluster-XXXXXX)"
pids=()
stop_nodes() {
  for p in "${pids[@]}"; do
    if kill -0 "$p" 2>/dev/null; then kill "$p" 2>/dev/null || true; fi
  done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done  # also reaps a node the tests killed
  rm -rf "$work"
}
trap stop_nodes EXIT
trap 'exit 130' INT TERM

# n distinct ports on 127.0.0.1 that nothing listens on (all bound at once, then released).
free_ports() {
  "$py" -c '
import socket, sys
socks = [socket.socket() for _ in range(int(sys.argv[1]))]
for s in socks: s.bind(("127.0.0.1", 0))
print(" ".join(str(s.getsockname()[1]) for s in socks))' "$1"
}

# Starts one node on a free port (and a free cluster-bus port); a port found
# free can be taken before the server binds it, so it tries a few.
start_node() {
  local i="$1" port bus pid attempt deadline
  for attempt in 1 2 3 4 5; do
    read -r port bus <<<"$(free_ports 2)"
    mkdir -p "$work/$i"
    redis-server --port "$port" --cluster-port "$bus" --bind 127.0.0.1 --save '' --appendonly no \
      --daemonize no --cluster-enabled yes --cluster-config-file "$work/$i/nodes.conf" \
      --cluster-node-timeout 5000 --dir "$work/$i" --logfile "$work/$i/redis.log" &
    pid=$!
    pids+=("$pid")
    deadline=$((SECONDS + 60))  # generous: a loaded machine starts it late
    while [ "$SECONDS" -lt "$deadline" ] && kill -0 "$pid" 2>/dev/null; do
      if [ "$(redis-cli -p "$port" ping 2>/dev/null)" = "PONG" ]; then
        nodes+=("$port:$pid")
        ports+=("$port")
        return 0
      fi
      sleep 0.1
    done
    echo "42-redis-cluster: node $i did not start on port $port (attempt $attempt):" >&2
    tail -n 5 "$work/$i/redis.log" >&2 || true
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  echo "42-redis-cluster: could not start node $i" >&2
  return 1
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
(cd "$root/python/tests" && KVKEY_REQUIRE_CLUSTER=1 "$py" -m pytest -q -s -p no:cacheprovider -k cluster \
  test_redis_stores.py test_redis_cluster_wire_faults.py) 2>&1 | tee "$work/stores.log"
stores_status="${PIPESTATUS[0]}"
# KVKEY_CLUSTER_PYTEST_ARGS: extra pytest arguments, e.g. "-k failover" while working on one scenario.
# shellcheck disable=SC2086
(cd "$example" && "$py" -m pytest -q -s -p no:cacheprovider ${KVKEY_CLUSTER_PYTEST_ARGS:-} tests) 2>&1 | tee "$work/tests.log"
status="${PIPESTATUS[0]}"
[ "$stores_status" -eq 0 ] || status="$stores_status"
set -e
echo "=== cluster results === (a 'Killed' notice above is the primary the failover scenario killed)"
grep -hoE 'cluster (isolation|failover|resharding|purge|faults|keyed): .*|wire faults: .*' "$work/stores.log" \
  "$work/tests.log" || true
exit "$status"
