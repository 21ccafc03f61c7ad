#!/usr/bin/env bash
# kvkey on a real Mooncake Store, as engine users install it: the pinned wheel
# (python/requirements/mooncake.txt) into the project venv (scripts/mooncake.sh install),
# a master from that wheel on loopback (free ports, its own state folder), then the Python
# tests marked `mooncake` (python/tests/test_mooncake*.py: the store, check_store over two
# processes, the zero-copy path, a killed client and a restarted master,
# docs/integration/mooncake.md) and the seed's scenario (examples/mooncake/seed_probe.py
# --check); the master is stopped on every exit path. A wheel that cannot be installed
# fails the stage, naming it: it never skips.
set -euo pipefail
root="${KVKEY_ROOT:-$(cd "$(dirname "$0")/../../.." && pwd)}"

"$root/scripts/mooncake.sh" install
eval "$("$root/scripts/mooncake.sh" env)"
export MOONCAKE_MASTER
py="$MOONCAKE_PYTHON"

# shellcheck source=scripts/ci/lib/mooncake.sh
. "$root/scripts/ci/lib/mooncake.sh"
mooncake_master_start mooncake-ci
echo "44-mooncake: master $MOONCAKE_MASTER (pid $MOONCAKE_PID) on $MOONCAKE_MASTER_ADDR"

extra="$("$root/scripts/ci/python-module.sh" "$root/build/mooncake-python")"
if [ -n "$extra" ]; then export PYTHONPATH="$extra${PYTHONPATH:+:$PYTHONPATH}"; fi
export GLOG_minloglevel="${GLOG_minloglevel:-1}"  # Mooncake's clients log every call at INFO

status=0
(cd "$root/python/tests" && "$py" -m pytest -q -s -p no:cacheprovider -m mooncake test_mooncake*.py) || status=$?
"$py" "$root/examples/mooncake/seed_probe.py" --check || status=$?
exit "$status"
