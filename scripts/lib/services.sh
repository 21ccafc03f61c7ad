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

# A redis-server without persistence; a port found free can be taken before
# the server binds it, so a few ports are tried.
start_redis() {
  local attempt candidate
  redis_port=""
  for attempt in 1 2 3 4 5; do
    candidate="$(free_port)"
    redis-server --port "$candidate" --bind 127.0.0.1 --save '' --appendonly no --daemonize no \
      --dir "$work" --logfile "$work/redis-$candidate.log" &
    redis_pid=$!
    service_pids+=("$redis_pid")
    if wait_for redis_ping "$candidate"; then redis_port="$candidate"; return 0; fi
    echo "redis-server did not start on port $candidate (attempt $attempt)" >&2
    tail -n 5 "$work/redis-$candidate.log" >&2 || true
    kill "$redis_pid" 2>/dev/null || true
  done
  return 1
}

