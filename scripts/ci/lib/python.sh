# shellcheck shell=bash
# Sourced by the CI stages that run Python: sets `py` to the project venv's python
# (scripts/venv.sh: ~/.cache/kvkey/venv over Debian's /usr/bin/python3, created when
# missing), after installing the requirement files named (python/requirements/NAME.txt).
#   . "$root/scripts/ci/lib/python.sh" [NAME...]
# Fails, naming the package, when a requirement cannot be installed.
py="$("${KVKEY_ROOT:-${root:?}}/scripts/venv.sh" "$@" | tail -n 1)"
[ -x "$py" ] || { echo "the project venv has no python ($py)" >&2; exit 1; }
