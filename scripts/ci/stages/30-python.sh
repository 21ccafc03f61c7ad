#!/usr/bin/env bash
# The Python binding, installed the ways its users install it, each tested:
#  1. offline into the project venv (scripts/venv.sh: ~/.cache/kvkey/venv over Debian's
#     /usr/bin/python3): `pip install --no-build-isolation --no-index ./python`, with
#     Debian's setuptools, wheel and pybind11; then the whole pytest suite against it
#     from outside the source tree, the Python examples as a user runs them, and the
#     type stubs (python/kvkey/*.pyi) against the examples (mypy --strict). Later
#     stages use this installed module.
#  2. a wheel built by `python -m build --wheel` (normal build isolation: the build
#     requirements pinned in python/pyproject.toml, from PyPI), installed with
#     `pip install kvkey-*.whl` into a fresh venv outside the tree, imported and run;
#  3. `pip install ./python` with normal build isolation into another fresh venv,
#     imported and run.
# The CMake build of the module (-DKVKEY_BUILD_PYTHON=ON) is built and tested by
# stage 50-sanitizers, under AddressSanitizer.
set -euo pipefail
root="$KVKEY_ROOT"
# shellcheck source=scripts/ci/lib/python.sh
. "$root/scripts/ci/lib/python.sh"
work="$(mktemp -d /tmp/kvkey-python-ci-XXXXXX)"
trap 'rm -rf "$work"' EXIT
export PIP_DISABLE_PIP_VERSION_CHECK=1
# setup.py compiles the binding's sources in parallel (pybind11's ParallelCompile).
export KVKEY_BUILD_JOBS="${KVKEY_JOBS:-2}"

# A fresh build dir each time, so header changes are never missed (setuptools does not track headers).
clean_build() { rm -rf "$root/python/build" "$root/python/kvkey.egg-info"; }

# installed_dir PYTHON: where PYTHON imports kvkey from, outside the tree; fails when
# that is the source tree rather than the installed module.
installed_dir() {
  local where
  where="$(cd / && "$1" -c 'import os, kvkey._kvkey as m; print(os.path.dirname(m.__file__))')"
  case "$where" in
    "$root"/*) echo "30-python: import kvkey found $where, not the installed module" >&2; return 1 ;;
  esac
  echo "$where"
}

# smoke PYTHON: the module imports from outside the tree, from where it was installed
# (not the source tree), and the seed probe example runs on it.
smoke() {
  local python="$1" where
  where="$(installed_dir "$python")"
  # Every package of the source tree was installed (pyproject.toml finds them), with its stubs.
  (cd "$root/python" && find kvkey -name __init__.py -printf '%h\n') | tr / . | while read -r pkg; do
    (cd / && "$python" -c "import importlib.util as u, sys; sys.exit(u.find_spec('$pkg') is None)") ||
      { echo "30-python: $python did not get the package $pkg" >&2; return 1; }
  done
  [ -f "$where/__init__.pyi" ] || { echo "30-python: the type stubs were not installed in $where" >&2; return 1; }
  (cd / && "$python" "$root/examples/python/seed_probe.py" >/dev/null)
  echo "30-python: $python imports kvkey $("$python" -c 'import kvkey; print(kvkey.__version__)') from $where"
}

# ---- 1. offline, into the project venv ------------------------------------------
clean_build
"$py" -m pip install --quiet --no-index --no-build-isolation --no-deps --force-reinstall \
  --root-user-action=ignore "$root/python"
installed="$(installed_dir "$py")"
echo "30-python: installed module in $installed"
# The tests marked redis / redis_cluster / mooncake need their servers: stages 40, 42 and 44 run them.
(cd / && KVKEY_EXPECT_MODULE_DIR="$installed" "$py" -m pytest -q -p no:cacheprovider \
  -m "not redis and not redis_cluster and not mooncake and not vllm" "$root/python/tests")
cd "$root"
"$py" examples/python/seed_probe.py
"$py" examples/python/connector_roundtrip.py
MYPYPATH="$root/python" "$py" -m mypy --strict --no-incremental --cache-dir=/dev/null examples/python/*.py
MYPYPATH="$root/python" "$py" -m mypy --strict --no-incremental --cache-dir=/dev/null examples/mooncake/*.py

# ---- 2. a wheel from `python -m build`, into a fresh venv --------------------------
clean_build
"$py" -m build --wheel --outdir "$work/dist" "$root/python" >"$work/build.log" 2>&1 || {
  tail -40 "$work/build.log" >&2
  echo "30-python: python -m build --wheel failed (its build requirements come from PyPI: python/pyproject.toml)" >&2
  exit 1
}
wheel="$(ls "$work"/dist/kvkey-*.whl)"
echo "30-python: built $(basename "$wheel")"
/usr/bin/python3 -m venv "$work/wheel-venv"
"$work/wheel-venv/bin/python" -m pip install --quiet --no-index "$wheel"
smoke "$work/wheel-venv/bin/python"

# ---- 3. pip install ./python with build isolation, into a fresh venv ---------------
clean_build
/usr/bin/python3 -m venv "$work/pip-venv"
"$work/pip-venv/bin/python" -m pip install --quiet "$root/python" >"$work/pip.log" 2>&1 || {
  tail -40 "$work/pip.log" >&2
  echo "30-python: pip install ./python (isolated build) failed" >&2
  exit 1
}
smoke "$work/pip-venv/bin/python"
clean_build
