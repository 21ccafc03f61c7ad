#!/usr/bin/env bash
# kvkey on a real Mooncake Store: builds Mooncake from the vendored sources (or reuses the
# cached build, or an installed Mooncake; scripts/mooncake.sh), starts a master on
# loopback (free ports, its own state folder), runs the Python tests marked `mooncake`
# (python/tests/test_mooncake*.py: the store, check_store over two processes, the
# zero-copy path, a killed client and a restarted master, docs/integration/mooncake.md)
# and the seed's scenario (examples/mooncake/seed_probe.py --check), and stops the master
# on every exit path.
#
# Without the vendored sources and without an installed Mooncake this stage fails and
# says how to provide them: it never skips.
set -euo pipefail
root="${KVKEY_ROOT:-$(cd "$(dirname "$0")/../../.." && pwd)}"
py=/usr/bin/python3

# The first build takes about 15 minutes on 2 cores; later runs reuse the cache.
MOONCAKE_JOBS="${MOONCAKE_JOBS:-${KVKEY_JOBS:-$(nproc)}}" "$root/scripts/mooncake.sh" build
eval "$("$root/scripts/mooncake.sh" env)"
export MOONCAKE_MASTER MOONCAKE_PYTHONPATH

state="$(mktemp -d /tmp/kvkey-mooncake-ci-XXXXXX)"
export MOONCAKE_STATE_DIR="$state"
stop_master() {
  "$root/scripts/mooncake.sh" stop >/dev/null || true
  rm -rf "$state"
}
trap stop_master EXIT
trap 'exit 130' INT TERM
eval "$("$root/scripts/mooncake.sh" start)"
export MOONCAKE_MASTER_ADDR MOONCAKE_METADATA_URL
echo "44-mooncake: master $MOONCAKE_MASTER (pid $MOONCAKE_PID) on $MOONCAKE_MASTER_ADDR"

extra="$("$root/scripts/ci/python-module.sh" "$root/build/mooncake-python")"
export PYTHONPATH="$MOONCAKE_PYTHONPATH${extra:+:$extra}${PYTHONPATH:+:$PYTHONPATH}"
export GLOG_minloglevel="${GLOG_minloglevel:-1}"  # Mooncake's clients log every call at INFO

status=0
(cd "$root/python/tests" && "$py" -m pytest -q -s -p no:cacheprovider -m mooncake test_mooncake*.py) || status=$?
"$py" "$root/examples/mooncake/seed_probe.py" --check || status=$?
exit "$status"
