# shellcheck shell=bash
# Starting redis-server on free ports, for the CI stages that need one
# (40-redis, 42-redis-cluster). Source it, then:
#
#   trap redis_stop_all EXIT
#   redis_start LABEL DIR [redis-server options...]
#
# starts one redis-server on 127.0.0.1 at a free port, without persistence,
# logging to DIR/redis.log, and waits until it answers PING; it sets REDIS_PORT
# and REDIS_PID. A port found free can be taken by another process before the
# server binds it, so it tries five ports. With `--cluster-enabled yes` among
# the options it also gives the node a free cluster-bus port. Every server it
# started is in REDIS_PIDS; redis_stop_all stops them (and reaps any that was
# killed meanwhile). The C++ integration tests start their own servers the same
# way (tests/integration/support.cpp).

REDIS_PIDS=()

# n distinct TCP ports on 127.0.0.1 that nothing listens on (all bound at once, then released).
redis_free_ports() {
  /usr/bin/python3 -c '
import socket, sys
socks = [socket.socket() for _ in range(int(sys.argv[1]))]
for s in socks: s.bind(("127.0.0.1", 0))
print(" ".join(str(s.getsockname()[1]) for s in socks))' "$1"
}

redis_start() {
  local label="$1" dir="$2"
  shift 2
  local attempt port bus pid deadline
  local bus_option=()
  mkdir -p "$dir"
  for attempt in 1 2 3 4 5; do
    read -r port bus <<<"$(redis_free_ports 2)"
    if [[ " $* " == *" --cluster-enabled yes "* ]]; then bus_option=(--cluster-port "$bus"); fi
    redis-server --port "$port" "${bus_option[@]}" --bind 127.0.0.1 --save '' --appendonly no --daemonize no \
      --dir "$dir" --logfile "$dir/redis.log" "$@" &
    pid=$!
    REDIS_PIDS+=("$pid")
    deadline=$((SECONDS + 60)) # generous: a loaded machine starts it late
    while [ "$SECONDS" -lt "$deadline" ] && kill -0 "$pid" 2>/dev/null; do
      if [ "$(redis-cli -p "$port" ping 2>/dev/null)" = "PONG" ]; then
        REDIS_PORT="$port"
        REDIS_PID="$pid"
        return 0
      fi
      sleep 0.1
    done
    echo "$label: redis-server did not start on port $port (attempt $attempt):" >&2
    tail -n 5 "$dir/redis.log" >&2 || true
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  echo "$label: could not start redis-server" >&2
  return 1
}

redis_stop_all() {
  local p
  for p in "${REDIS_PIDS[@]}"; do
    if kill -0 "$p" 2>/dev/null; then kill "$p" 2>/dev/null || true; fi
  done
  for p in "${REDIS_PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
}
