#!/usr/bin/env bash
# The Python binding for Debian's /usr/bin/python3: built by CMake
# (-DKVKEY_BUILD_PYTHON=ON) and installed with pip from the source tree, each
# tested with pytest; then the Python examples run against the installed module
# and are type-checked (mypy --strict) against the package's stubs.
# Afterwards `/usr/bin/python3 examples/python/seed_probe.py` works as is.
set -euo pipefail
root="$KVKEY_ROOT"
py=/usr/bin/python3
dir="$root/build/python"

# 1. CMake build of the module (in the background: the pip build below is the other core's work).
cmake -S "$root" -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKVKEY_WARNINGS_AS_ERRORS=ON \
  -DKVKEY_BUILD_PYTHON=ON -DPython_EXECUTABLE="$py" -DCMAKE_INTERPROCEDURAL_OPTIMIZATION=OFF \
  -DKVKEY_BUILD_EXAMPLES=OFF -DKVKEY_BUILD_TOOLS=OFF >/dev/null
cmake --build "$dir" --target kvkey_python -j1 >"$dir/python-build.log" 2>&1 &
cmake_pid=$!

# 2. pip install from the source tree, offline, into the system interpreter
#    (Debian marks it externally managed: --break-system-packages; the files go
#    to /usr/local/lib/python3*/dist-packages). A fresh build dir, so header
#    changes are never missed (setuptools does not track headers).
rm -rf "$root/python/build"
"$py" -m pip install --quiet --no-index --no-build-isolation --no-deps --force-reinstall \
  --break-system-packages --root-user-action=ignore "$root/python"

if ! wait "$cmake_pid"; then
  cat "$dir/python-build.log"
  echo "30-python: CMake build of the module failed" >&2
  exit 1
fi

# 3. pytest against the CMake-built module (ctest sets PYTHONPATH to it). Here and in 4.
#    the tests marked redis / redis_cluster are deselected: 40-redis and 42-redis-cluster
#    start their servers and run them.
ctest --test-dir "$dir" -L python --output-on-failure

# 4. pytest against the pip-installed module, from outside the source package.
installed="$(cd / && "$py" -c 'import os, kvkey._kvkey as m; print(os.path.dirname(m.__file__))')"
case "$installed" in
  "$root"/*) echo "30-python: import kvkey found $installed, not the installed module" >&2; exit 1 ;;
esac
echo "30-python: installed module in $installed"
(cd / && KVKEY_EXPECT_MODULE_DIR="$installed" "$py" -m pytest -q -p no:cacheprovider \
  -m "not redis and not redis_cluster and not mooncake" "$root/python/tests")

# 5. The examples, as a user runs them.
cd "$root"
"$py" examples/python/seed_probe.py
"$py" examples/python/connector_roundtrip.py

# 6. The type stubs (python/kvkey/*.pyi) against the examples, strictly.
MYPYPATH="$root/python" "$py" -m mypy --strict --no-incremental --cache-dir=/dev/null examples/python/*.py
MYPYPATH="$root/python" "$py" -m mypy --strict --no-incremental --cache-dir=/dev/null examples/mooncake/*.py
