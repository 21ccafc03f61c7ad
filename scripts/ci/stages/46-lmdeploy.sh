#!/usr/bin/env bash
# kvkey inside lmdeploy's own Mooncake store connector, as lmdeploy's users install it:
# lmdeploy 0.18.0 and what its connector imports (python/requirements/lmdeploy.txt: torch
# from PyPI, CPU execution) and the Mooncake wheel (python/requirements/mooncake.txt) into
# the project venv, a Mooncake master from that wheel on loopback, then:
#   1. the bug report's probe (../shared/seed/mc_probe_f2.py) against the installed release:
#      it must exit 0 (the collisions are there);
#   2. python/tests/test_lmdeploy_*.py: lmdeploy's real scheduler- and worker-side connector
#      classes with kvkey switched on (and off), bad configurations refused;
#   3. the report's scenario in two processes (examples/lmdeploy/scenario.py --check);
#   4. bench/lmdeploy_bench.py for two rounds (it runs; no timing is asserted);
#   5. lmdeploy's own connector tests when the release's sdist ships them (0.18.0 has no
#      sdist on PyPI; the stage says so).
# Anything missing (a package, the probe, the master) fails the stage, naming it. The master
# is stopped on every exit path.
set -euo pipefail
root="${KVKEY_ROOT:-$(cd "$(dirname "$0")/../../.." && pwd)}"
t0=$(date +%s)

probe=""
# KVKEY_SHARED: where shared/ is when it does not lie next to the checkout.
for p in ${KVKEY_SHARED:+"$KVKEY_SHARED/seed/mc_probe_f2.py"} "$root/../shared/seed/mc_probe_f2.py"; do
  if [ -f "$p" ]; then probe="$p"; break; fi
done
[ -n "$probe" ] || { echo "46-lmdeploy: the seed's probe is missing: no ../shared/seed/mc_probe_f2.py next to $root" >&2; exit 1; }
KVKEY_SHARED="$(cd "$(dirname "$probe")/.." && pwd)"
export KVKEY_SHARED  # the tests run the probe too

"$root/scripts/mooncake.sh" install
# shellcheck source=scripts/ci/lib/python.sh
. "$root/scripts/ci/lib/python.sh" lmdeploy
eval "$("$root/scripts/mooncake.sh" env)"
t_install=$(($(date +%s) - t0))

# shellcheck source=scripts/ci/lib/mooncake.sh
. "$root/scripts/ci/lib/mooncake.sh"
mooncake_master_start lmdeploy-ci
echo "46-lmdeploy: master (pid $MOONCAKE_PID) on $MOONCAKE_MASTER_ADDR; installs took ${t_install} s"

# The kvkey module of this checkout (with kvkey.integrations): the installed one, else one built here.
extra="$("$root/scripts/ci/python-module.sh" "$root/build/lmdeploy-python" kvkey.integrations.lmdeploy)"
if [ -n "$extra" ]; then export PYTHONPATH="$extra${PYTHONPATH:+:$PYTHONPATH}"; fi
export GLOG_minloglevel="${GLOG_minloglevel:-2}"  # Mooncake's clients log every call at INFO

status=0
echo "46-lmdeploy: $probe against lmdeploy $("$py" -c 'from importlib.metadata import version; print(version("lmdeploy"))')"
"$py" "$probe" || { echo "46-lmdeploy: the probe did not exit 0" >&2; status=1; }
(cd "$root/python/tests" && "$py" -m pytest -q -p no:cacheprovider test_lmdeploy_*.py) || status=$?
"$py" "$root/examples/lmdeploy/scenario.py" --check || status=$?
# The speed bench through lmdeploy's connector, two rounds: that it runs (figures only, no
# timing is asserted; docs/integration/lmdeploy.md, "Speed", has the measured ones).
"$py" "$root/bench/lmdeploy_bench.py" --rounds 2 || status=$?

# lmdeploy's own connector tests ship only in a source distribution.
sdist="$mooncake_state/sdist"
if "$py" -m pip download --quiet --no-deps --no-binary :all: --dest "$sdist" lmdeploy=="$("$py" -c \
  'from importlib.metadata import version; print(version("lmdeploy"))')" >/dev/null 2>&1; then
  mkdir -p "$sdist/x" && tar -xzf "$sdist"/lmdeploy-*.tar.gz -C "$sdist/x"
  tests=("$sdist"/x/*/tests/pytorch/kv_connector/test_mooncake_store_*.py)
  if [ -e "${tests[0]}" ]; then
    # kvkey switched on for them: the connector classes are kvkey's (inert without the setting).
    (cd "$sdist/x" && "$py" -c 'import sys, pytest; from kvkey.integrations import lmdeploy as m; m.install();
sys.exit(pytest.main(["-q", "-p", "no:cacheprovider", *sys.argv[1:]]))' "${tests[@]}") || status=$?
  else
    echo "46-lmdeploy: lmdeploy's sdist ships no tests/pytorch/kv_connector/test_mooncake_store_*.py"
  fi
else
  echo "46-lmdeploy: lmdeploy has no source distribution on PyPI for this release: its connector tests are not shipped"
fi
echo "46-lmdeploy: done in $(($(date +%s) - t0)) s (installs ${t_install} s)"
exit "$status"
