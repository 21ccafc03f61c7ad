# shellcheck shell=bash disable=SC2154,SC2034  # work is the caller's; redis_port and redis_pid are for it
# Shell functions that start throwaway local services on free loopback ports,
# for scripts/soak.sh and CI stages. Source it, set `work` to a scratch
# directory, and call stop_services on exit (it stops only what was started here).
#   start_redis        -> sets redis_port, redis_pid
#   free_port          -> prints a free TCP port on 127.0.0.1
#   wait_for CMD...    -> retries CMD for up to 60 s

service_pids=()

free_port() {
  /usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

wait_for() {
  local deadline=$((SECONDS + 60))  # generous: a loaded machine starts services late
  while [ "$SECONDS" -lt "$deadline" ]; do
    if "$@" >/dev/null 2>&1; then return 0; fi
    sleep 0.2
  done
  return 1
}

stop_services() {
  local pid
  for pid in "${service_pids[@]}"; do
    if kill -0 "$pid" 2>/dev/null; then
      kill "$pid" 2>/dev/null || true
      wait "$pid" 2>/dev/null || true
    fi
  done
  service_pids=()
}

redis_ping() { [ "$(redis-cli -p "$1" ping 2>/dev/null)" = "PONG" ]; }

# A redis-server without persistence on a free port: scripts/ci/lib/redis.sh's
# redis_start (which tries a few ports), its pid kept with the other services.
# shellcheck source=scripts/ci/lib/redis.sh
. "$(dirname "${BASH_SOURCE[0]}")/../ci/lib/redis.sh"
start_redis() {
  redis_start redis "$work/redis-${#service_pids[@]}" || return 1
  redis_port="$REDIS_PORT"
  redis_pid="$REDIS_PID"
  service_pids+=("$redis_pid")
}

