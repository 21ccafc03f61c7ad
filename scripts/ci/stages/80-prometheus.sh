#!/usr/bin/env bash
# kvkey's metrics on a real Prometheus: checks the alert rules with promtool,
# starts a redis-server, the example exporter (examples/python/metrics_exporter.py:
# a workload with injected faults through kvkey.Connector, /metrics served by
# prometheus_client) and Debian's prometheus scraping it every second with the
# rules loaded, then compares what Prometheus answers for
# `sum by (reason, field) (kvkey_rejected_blocks_total)` with what the workload
# injected (scripts/ci/prometheus_check.py). Stops everything it started.
# ci: beside
set -euo pipefail
root="${KVKEY_ROOT:-$(cd "$(dirname "$0")/../../.." && pwd)}"
# shellcheck source=scripts/ci/lib/python.sh
. "$root/scripts/ci/lib/python.sh"

promtool check rules "$root/docs/alerts/kvkey.rules.yml"
(cd "$root/docs/alerts" && promtool test rules kvkey.rules.test.yml)

work="$(mktemp -d /tmp/kvkey-prometheus-XXXXXX)"
# shellcheck source=scripts/lib/services.sh
. "$root/scripts/lib/services.sh"
trap 'stop_services; rm -rf "$work"' EXIT
trap 'exit 130' INT TERM
extra="$("$root/scripts/ci/python-module.sh" "$root/build/metrics-python")"  # the installed one when 30-python ran
if [ -n "$extra" ]; then export PYTHONPATH="$extra${PYTHONPATH:+:$PYTHONPATH}"; fi

start_redis || { echo "80-prometheus: could not start redis-server" >&2; exit 1; }
exporter_port="$(free_port)"
"$py" "$root/examples/python/metrics_exporter.py" --redis-port "$redis_port" --port "$exporter_port" \
  --seed "${KVKEY_PROMETHEUS_SEED:-$RANDOM}" --report "$work/injected.json" --serve 300 &
exporter_pid=$!
service_pids+=("$exporter_pid")

prom_port="$(free_port)"
cp "$root/docs/alerts/kvkey.rules.yml" "$work/"
cat >"$work/prometheus.yml" <<YAML
global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files:
  - $work/kvkey.rules.yml
scrape_configs:
  - job_name: kvkey-exporter
    static_configs:
      - targets: ['127.0.0.1:$exporter_port']
YAML
promtool check config "$work/prometheus.yml" >/dev/null
prometheus --config.file="$work/prometheus.yml" --storage.tsdb.path="$work/tsdb" \
  --web.listen-address="127.0.0.1:$prom_port" --log.level=warn >"$work/prometheus.log" 2>&1 &
service_pids+=("$!")
echo "80-prometheus: $(prometheus --version 2>&1 | head -n 1) on 127.0.0.1:$prom_port," \
  "exporter on :$exporter_port, redis on :$redis_port"

# shellcheck disable=SC2317  # called through wait_for
exporter_done() { [ -s "$work/injected.json" ] || ! kill -0 "$exporter_pid"; }
wait_for exporter_done || true
if [ ! -s "$work/injected.json" ]; then echo "80-prometheus: the exporter's workload did not finish" >&2; exit 1; fi
status=0
"$py" "$root/scripts/ci/prometheus_check.py" --prometheus "http://127.0.0.1:$prom_port" \
  --report "$work/injected.json" || status=$?
if [ "$status" -ne 0 ]; then tail -n 20 "$work/prometheus.log" >&2 || true; fi
exit "$status"
