#!/usr/bin/env bash
# The project's Python environment: one venv over Debian's /usr/bin/python3
# (--system-site-packages, so Debian's numpy, redis-py, prometheus_client and
# matplotlib are used), into which go the packages only PyPI has, pinned with
# their hashes in python/requirements/<name>.txt.
#
#   scripts/venv.sh [NAME...]   create the venv if it is missing, then
#                               `pip install --require-hashes -r python/requirements/NAME.txt`
#                               for each NAME (e.g. `scripts/venv.sh mooncake build`);
#                               prints the venv's python on its last line:
#                                 py="$(scripts/venv.sh mooncake | tail -n 1)"
#   scripts/venv.sh env [NAME...]  the same, then prints KVKEY_VENV=<dir> and
#                               KVKEY_PYTHON=<dir>/bin/python as shell assignments:
#                                 eval "$(scripts/venv.sh env mooncake)"
#   scripts/venv.sh python      prints the venv's python (creating the venv if missing)
#
# A requirement file holding the line `# venv.sh: --no-deps` is installed with pip's
# --no-deps: exactly the packages it pins go in, nothing they declare (for a package whose
# declared dependencies are far more than the parts the project imports need; the file then
# pins those needs itself).
#
# A requirement file holding the line `# venv.sh: venv=NAME` goes into its own venv,
# $HOME/.cache/kvkey/venv-NAME (for a package whose pins cannot share the project venv's:
# vllm.txt's torch and transformers differ from lmdeploy.txt's). A call naming files of
# several venvs installs each into its own; `env` and the last line name the first file's.
#
# The venv is ${KVKEY_VENV:-$HOME/.cache/kvkey/venv} (KVKEY_VENV, when set, wins over a
# file's venv= line). A requirement file whose
# pinned versions are all installed already is not installed again (pip is not
# even started), so a second call returns at once. A package that cannot be had fails the call,
# naming the package and the requirement file. Progress goes to stderr.
set -euo pipefail

here="$(cd "$(dirname "$0")/.." && pwd)"
venv="${KVKEY_VENV:-$HOME/.cache/kvkey/venv}"
base_python=/usr/bin/python3
reqdir="$here/python/requirements"

die() {
  echo "venv.sh: $*" >&2
  exit 1
}

usage() {
  sed -n '2,31p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
}

# The venv works when its python runs and has pip (a half-made one is made again).
venv_ok() {
  [ -x "$venv/bin/python" ] && "$venv/bin/python" -c 'import pip' >/dev/null 2>&1
}

make_venv() {
  venv_ok && return 0
  [ -x "$base_python" ] || die "$base_python is missing (install Debian's python3: scripts/install-deps.sh test)"
  "$base_python" -c 'import ensurepip' >/dev/null 2>&1 ||
    die "$base_python has no ensurepip, which the venv needs (apt-get install python3-venv)"
  echo "venv.sh: creating $venv (--system-site-packages over $base_python)" >&2
  rm -rf "$venv"
  mkdir -p "$(dirname "$venv")"
  "$base_python" -m venv --system-site-packages "$venv" >&2 || die "could not create the venv $venv"
  venv_ok || die "the venv $venv has no working python with pip"
}

# Names the packages pip could not get, from its output.
failed_packages() {
  sed -nE \
    -e 's/.*No matching distribution found for ([^ ;]+).*/\1/p' \
    -e 's/.*Could not find a version that satisfies the requirement ([^ ;]+).*/\1/p' \
    -e 's/^ *([A-Za-z0-9._-]+==[^ ]+) from .*\(from -r .*/\1 (hash mismatch)/p' \
    -e 's/.*Hashes are required in --require-hashes mode, but they are missing from some requirements.*/(a requirement without hashes)/p' \
    -e 's/.*In --require-hashes mode, all requirements must have their versions pinned with ==. These do not:.*/(a requirement not pinned with ==)/p' \
    "$1" | sort -u | paste -sd' ' -
}

# True when every `name==version` of the file is what the venv's python has installed.
satisfied() {
  "$venv/bin/python" - "$1" <<'PY' 2>/dev/null
import re, sys
from importlib import metadata
for line in open(sys.argv[1]):
    m = re.match(r"\s*([A-Za-z0-9._-]+)(?:\[[^]]*\])?\s*==\s*([^\s;\\]+)", line)
    if not m:
        continue
    try:
        have = metadata.version(m.group(1))
    except metadata.PackageNotFoundError:
        sys.exit(1)
    if have != m.group(2):
        sys.exit(1)
PY
}

install_requirements() {
  local name="$1" file="$reqdir/$1.txt"
  [ -f "$file" ] || die "no requirement file python/requirements/$name.txt (have: $(cd "$reqdir" 2>/dev/null && ls -- *.txt 2>/dev/null | sed 's/\.txt$//' | tr '\n' ' '))"
  satisfied "$file" && return 0
  echo "venv.sh: installing python/requirements/$name.txt into $venv" >&2
  local log="$venv/kvkey-requirements/$name.log"
  mkdir -p "$venv/kvkey-requirements"
  local opts=()
  if grep -qxF '# venv.sh: --no-deps' "$file"; then opts+=(--no-deps); fi
  if ! PIP_DISABLE_PIP_VERSION_CHECK=1 "$venv/bin/python" -m pip install --require-hashes --quiet \
    --no-input --root-user-action=ignore "${opts[@]}" -r "$file" >"$log" 2>&1; then
    tail -n 25 "$log" >&2
    local pkgs
    pkgs="$(failed_packages "$log")"
    die "could not install ${pkgs:-the packages} from python/requirements/$name.txt (pip's log: $log)"
  fi
  satisfied "$file" || die "pip installed python/requirements/$name.txt, but the venv's versions differ from its pins"
}

cmd=install
case "${1:-}" in
  env) cmd=env; shift ;;
  python) cmd=python; shift; [ "$#" -eq 0 ] || usage ;;
  -h | --help | help) usage ;;
  -*) usage ;;
esac

# The venv a requirement file asks for (its `# venv.sh: venv=NAME` line), or the default.
file_venv() {
  local file="$reqdir/$1.txt" own
  [ -f "$file" ] || { echo "$default_venv"; return 0; }
  own="$(sed -nE 's/^# venv\.sh: venv=([A-Za-z0-9_-]+)$/\1/p' "$file" | head -n 1)"
  if [ -n "$own" ] && [ -z "${KVKEY_VENV:-}" ]; then
    echo "$HOME/.cache/kvkey/venv-$own"
  else
    echo "$default_venv"
  fi
}

# Each file goes into its venv, one venv at a time under that venv's lock (CI stages and
# developers' shells may share it); the venv printed is the first file's.
default_venv="$venv"
first="$venv"
[ "$#" -eq 0 ] || first="$(file_venv "$1")"
for target in $( { echo "$first"; for name in "$@"; do file_venv "$name"; done; } | awk '!seen[$0]++'); do
  venv="$target"
  mkdir -p "$(dirname "$venv")"
  exec 9>"$venv.lock"
  flock 9
  make_venv
  for name in "$@"; do
    if [ "$(file_venv "$name")" = "$venv" ]; then install_requirements "$name"; fi
  done
  flock -u 9
done
venv="$first"

case "$cmd" in
  env) printf 'KVKEY_VENV=%q\nKVKEY_PYTHON=%q\n' "$venv" "$venv/bin/python" ;;
  *) echo "$venv/bin/python" ;;
esac
