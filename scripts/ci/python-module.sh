#!/usr/bin/env bash
# Makes the kvkey Python module importable for the project venv's python in a CI
# stage: prints nothing when the module installed there (stage 30-python) has the
# module named ($2, default kvkey.testing: the connector kit), else builds the
# module with CMake in the directory given ($1) and prints the directory to
# prepend to PYTHONPATH. Progress goes to stderr.
#   extra="$(scripts/ci/python-module.sh "$root/build/x" [kvkey.integrations.lmdeploy])"
set -euo pipefail
root="${KVKEY_ROOT:-$(cd "$(dirname "$0")/../.." && pwd)}"
export KVKEY_ROOT="$root"
jobs="${KVKEY_JOBS:-$(nproc)}"
dir="$1"
need="${2:-kvkey.testing}"
shift "$#"
# shellcheck source=scripts/ci/lib/python.sh
. "$root/scripts/ci/lib/python.sh"  # no arguments: they would be requirement files

if (cd / && "$py" -c "import $need" 2>/dev/null); then exit 0; fi
echo "kvkey is not importable; building the module in $dir" >&2
cmake -S "$root" -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKVKEY_BUILD_PYTHON=ON -DPython_EXECUTABLE=/usr/bin/python3 \
  -DCMAKE_INTERPROCEDURAL_OPTIMIZATION=OFF -DKVKEY_BUILD_TESTS=OFF -DKVKEY_BUILD_EXAMPLES=OFF \
  -DKVKEY_BUILD_TOOLS=OFF >/dev/null
cmake --build "$dir" --target kvkey_python -j"$jobs" >&2
echo "$dir/python"
