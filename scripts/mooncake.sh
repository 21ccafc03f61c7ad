#!/usr/bin/env bash
# Installs, locates, starts and stops a Mooncake Store for kvkey's tests and examples.
#
#   scripts/mooncake.sh install  install the pinned Mooncake wheel (python/requirements/mooncake.txt,
#                                mooncake-transfer-engine-non-cuda) into the project's venv
#                                (scripts/venv.sh) with the Debian libraries it loads; seconds
#   scripts/mooncake.sh build --from-source
#                                build the master, the TCP transport, the Python binding and the
#                                C++ libraries from the vendored sources (about 15 minutes on 2 cores)
#                                into a cache; `env` and `start` then use that build when
#                                KVKEY_MOONCAKE=source is set
#   scripts/mooncake.sh env      print MOONCAKE_MASTER=<path>, MOONCAKE_PYTHON=<python that imports
#                                mooncake.store> and MOONCAKE_PYTHONPATH=<dir or empty> as shell
#                                assignments: eval "$(scripts/mooncake.sh env)"
#   scripts/mooncake.sh start    start a master on loopback ports; prints the assignments
#                                MOONCAKE_MASTER_ADDR, MOONCAKE_METADATA_URL, MOONCAKE_PID
#   scripts/mooncake.sh stop     stop the master that `start` started
#
# `build` without --from-source is `install`. Which Mooncake `env` and `start` use: the source
# build when KVKEY_MOONCAKE=source, else the wheel in the venv (${KVKEY_VENV:-~/.cache/kvkey/venv});
# when that is missing they fail, saying to run `scripts/mooncake.sh install`.
#
# Where the sources of --from-source come from, in this order:
#   1. KVKEY_MOONCAKE_SRC: a Mooncake source tree with its submodules (extern/pybind11 and
#      yalantinglibs next to it or in extern/), or a folder holding the three tarballs;
#   2. the vendored tarballs: KVKEY_MOONCAKE_VENDOR, else ../shared/vendor/mooncake next to
#      the checkout (Mooncake.tar.gz, yalantinglibs.tar.gz, pybind11.tar.gz).
# The build goes to a cache outside the checkout, keyed by the tarballs' SHA-256 and this
# script's recipe version: ${KVKEY_CACHE_DIR:-$XDG_CACHE_HOME/kvkey or ~/.cache/kvkey}/mooncake/<key>.
#
# `start` settings (environment): MOONCAKE_RPC_PORT, MOONCAKE_HTTP_PORT, MOONCAKE_METRICS_PORT
# (default: free ports on 127.0.0.1), MOONCAKE_STATE_DIR (/tmp/kvkey-mooncake), MOONCAKE_LEASE_TTL_MS
# (master's --default_kv_lease_ttl, default 5000).
set -euo pipefail

RECIPE=1 # bump when the build steps below change, so old caches are not reused
here="$(cd "$(dirname "$0")/.." && pwd)"
cache_root="${KVKEY_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/kvkey}/mooncake"
state_dir="${MOONCAKE_STATE_DIR:-/tmp/kvkey-mooncake}"
# free_port
# shellcheck source=scripts/lib/services.sh
. "$here/scripts/lib/services.sh"

die() {
  echo "mooncake.sh: $*" >&2
  exit 1
}

how_to_provide() {
  cat >&2 <<EOF
mooncake.sh: no Mooncake Store sources to build from were found.
  Provide one of:
  - the vendored tarballs (Mooncake.tar.gz, yalantinglibs.tar.gz, pybind11.tar.gz) in
    ../shared/vendor/mooncake next to the checkout, or in a folder named by KVKEY_MOONCAKE_VENDOR;
  - a Mooncake source tree with its submodules, named by KVKEY_MOONCAKE_SRC.
  Looked in: ${vendor_candidates[*]:-(none)}
  (The tests and examples need no build: 'scripts/mooncake.sh install' installs the pinned wheel.)
EOF
  exit 1
}

venv="${KVKEY_VENV:-$HOME/.cache/kvkey/venv}"

# True when the venv has the pinned wheel's master and Python module.
wheel_installed() {
  [ -x "$venv/bin/mooncake_master" ] && "$venv/bin/python" -c 'import mooncake.store' >/dev/null 2>&1
}

cmd_install() {
  "$here/scripts/install-deps.sh" mooncake
  "$here/scripts/venv.sh" mooncake >/dev/null || die "could not install the Mooncake wheel (python/requirements/mooncake.txt)"
  wheel_installed || die "the venv $venv has no working Mooncake after installing python/requirements/mooncake.txt"
  local version
  version="$("$venv/bin/python" -c 'from importlib import metadata; print(metadata.version("mooncake-transfer-engine-non-cuda"))')"
  echo "mooncake.sh: Mooncake $version (wheel) in $venv"
}

vendor_candidates=()
find_vendor() {
  vendor_candidates=()
  if [ -n "${KVKEY_MOONCAKE_VENDOR:-}" ]; then vendor_candidates+=("$KVKEY_MOONCAKE_VENDOR"); fi
  if [ -n "${KVKEY_MOONCAKE_SRC:-}" ] && [ -f "${KVKEY_MOONCAKE_SRC}/Mooncake.tar.gz" ]; then
    vendor_candidates+=("$KVKEY_MOONCAKE_SRC")
  fi
  vendor_candidates+=("$here/../shared/vendor/mooncake" "$(dirname "$here")/shared/vendor/mooncake" /work/shared/vendor/mooncake)
  local d
  for d in "${vendor_candidates[@]}"; do
    if [ -f "$d/Mooncake.tar.gz" ] && [ -f "$d/yalantinglibs.tar.gz" ] && [ -f "$d/pybind11.tar.gz" ]; then
      (cd "$d" && pwd)
      return 0
    fi
  done
  return 1
}

# Prints the cache folder for the sources at hand (empty when none are found).
cache_key_dir() {
  local key
  if [ -n "${KVKEY_MOONCAKE_SRC:-}" ] && [ -d "${KVKEY_MOONCAKE_SRC}/mooncake-store" ]; then
    local rev
    rev="$(git -C "$KVKEY_MOONCAKE_SRC" rev-parse HEAD 2>/dev/null || echo "$(cd "$KVKEY_MOONCAKE_SRC" && pwd)")"
    key="$(printf 'src %s recipe %s\n' "$rev" "$RECIPE" | sha256sum | cut -c1-16)"
  else
    local v
    v="$(find_vendor)" || return 1
    key="$( (cd "$v" && sha256sum Mooncake.tar.gz yalantinglibs.tar.gz pybind11.tar.gz | cut -d' ' -f1; echo "recipe $RECIPE") | sha256sum | cut -c1-16)"
  fi
  echo "$cache_root/$key"
}

install_pkgs() {
  "$here/scripts/install-deps.sh" mooncake-source
}

# The executables' RUNPATH names the build tree, which is gone once the build is
# assembled: bin/mooncake_master (and bin/mooncake_client) become wrappers that run the
# binaries from libexec/ with lib/ (libasio.so) on LD_LIBRARY_PATH, so MOONCAKE_MASTER runs
# as is. Idempotent; it also completes a cache assembled before it existed.
wrap_executables() {
  local dir="$1" exe
  for exe in mooncake_master mooncake_client; do
    [ -f "$dir/bin/$exe" ] || continue
    if [ ! -f "$dir/libexec/$exe" ]; then
      mkdir -p "$dir/libexec"
      cp -p "$dir/bin/$exe" "$dir/libexec/$exe.tmp.$$" && mv "$dir/libexec/$exe.tmp.$$" "$dir/libexec/$exe"
    fi
    if ! grep -q "libexec/$exe" "$dir/bin/$exe" 2>/dev/null; then
      printf '#!/bin/sh\n# Runs %s with the libraries of this Mooncake build (written by kvkey scripts/mooncake.sh).\nd="$(cd "$(dirname "$0")/.." && pwd)"\nLD_LIBRARY_PATH="$d/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" exec "$d/libexec/%s" "$@"\n' \
        "$exe" "$exe" >"$dir/bin/$exe.tmp.$$"
      chmod +x "$dir/bin/$exe.tmp.$$"
      mv "$dir/bin/$exe.tmp.$$" "$dir/bin/$exe"
    fi
  done
}

cmd_build() {
  local dir
  dir="$(cache_key_dir)" || how_to_provide
  if [ -f "$dir/done" ]; then
    wrap_executables "$dir"
    echo "mooncake.sh: cached build in $dir"
    return 0
  fi
  install_pkgs
  rm -rf "$dir.tmp"
  mkdir -p "$dir.tmp/src"
  local src="$dir.tmp/src" moon ylt
  if [ -n "${KVKEY_MOONCAKE_SRC:-}" ] && [ -d "${KVKEY_MOONCAKE_SRC}/mooncake-store" ]; then
    echo "mooncake.sh: building from the source tree $KVKEY_MOONCAKE_SRC"
    moon="$(cd "$KVKEY_MOONCAKE_SRC" && pwd)"
    [ -f "$moon/extern/pybind11/CMakeLists.txt" ] || die "$moon/extern/pybind11 is empty (git submodule update --init)"
    ylt="$moon/extern/yalantinglibs"
    [ -f "$ylt/CMakeLists.txt" ] || ylt="$(dirname "$moon")/yalantinglibs"
    [ -f "$ylt/CMakeLists.txt" ] || die "no yalantinglibs in $moon/extern or next to $moon"
  else
    local v
    v="$(find_vendor)" || how_to_provide
    echo "mooncake.sh: unpacking $v"
    tar -xzf "$v/Mooncake.tar.gz" -C "$src"
    tar -xzf "$v/yalantinglibs.tar.gz" -C "$src"
    rm -rf "$src/Mooncake/extern/pybind11"
    mkdir -p "$src/Mooncake/extern"
    tar -xzf "$v/pybind11.tar.gz" -C "$src/Mooncake/extern"
    moon="$src/Mooncake"
    ylt="$src/yalantinglibs"
  fi
  local jobs="${MOONCAKE_JOBS:-$(nproc)}"
  echo "mooncake.sh: yalantinglibs (header-only) into $dir.tmp/ylt"
  cmake -S "$ylt" -B "$dir.tmp/ylt-build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DBUILD_EXAMPLES=OFF \
    -DBUILD_BENCHMARK=OFF -DBUILD_UNIT_TESTS=OFF -DCMAKE_INSTALL_PREFIX="$dir.tmp/ylt" >"$dir.tmp/ylt.log" 2>&1 ||
    { tail -30 "$dir.tmp/ylt.log" >&2; die "yalantinglibs configure failed (log: $dir.tmp/ylt.log)"; }
  cmake --install "$dir.tmp/ylt-build" >>"$dir.tmp/ylt.log" 2>&1 || die "yalantinglibs install failed"
  echo "mooncake.sh: configuring Mooncake (about 15 minutes on 2 cores to build)"
  cmake -S "$moon" -B "$dir.tmp/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DENABLE_DEBUG_SYMBOLS=OFF \
    -DPython3_EXECUTABLE=/usr/bin/python3 -DBUILD_UNIT_TESTS=OFF -DBUILD_EXAMPLES=OFF -DBUILD_BENCHMARK=OFF \
    -DWITH_STORE=ON -DWITH_TE=ON -DWITH_STORE_RUST=OFF -DWITH_P2P_STORE=OFF -DUSE_ETCD=OFF -DUSE_REDIS=OFF \
    -DUSE_HTTP=ON -DUSE_TCP=ON -DUSE_CUDA=OFF -DPARALLEL_COMPILE_JOBS="$jobs" -DPARALLEL_LINK_JOBS=1 \
    -DCMAKE_DISABLE_FIND_PACKAGE_CUDAToolkit=ON -DCMAKE_DISABLE_FIND_PACKAGE_hip=ON \
    -DCMAKE_PREFIX_PATH="$dir.tmp/ylt" >"$dir.tmp/configure.log" 2>&1 ||
    { tail -30 "$dir.tmp/configure.log" >&2; die "Mooncake configure failed (log: $dir.tmp/configure.log)"; }
  cmake --build "$dir.tmp/build" -j "$jobs" >"$dir.tmp/build.log" 2>&1 ||
    { tail -40 "$dir.tmp/build.log" >&2; die "Mooncake build failed (log: $dir.tmp/build.log)"; }
  # Assemble what the tests use: the master, the client, and a `mooncake` package.
  local b="$dir.tmp/build"
  mkdir -p "$dir.tmp/bin" "$dir.tmp/python/mooncake" "$dir.tmp/lib" "$dir.tmp/include"
  cp "$b/mooncake-store/src/mooncake_master" "$dir.tmp/bin/"
  [ -f "$b/mooncake-store/src/mooncake_client" ] && cp "$b/mooncake-store/src/mooncake_client" "$dir.tmp/bin/"
  cp "$b"/mooncake-integration/store.cpython-*.so "$dir.tmp/python/mooncake/"
  cp "$b"/mooncake-integration/engine.cpython-*.so "$dir.tmp/python/mooncake/" 2>/dev/null || true
  cp "$b/mooncake-common/libasio.so" "$dir.tmp/python/mooncake/"
  cp "$b/mooncake-common/libasio.so" "$dir.tmp/lib/"
  cp "$b/mooncake-integration/mooncake/__init__.py" "$dir.tmp/python/mooncake/"
  cp "$moon/mooncake-integration/store/async_store.py" "$dir.tmp/python/mooncake/" 2>/dev/null || true
  find "$b" -name 'libmooncake_store.a' -exec cp {} "$dir.tmp/lib/" \;
  find "$b" -name 'libtransfer_engine.a' -exec cp {} "$dir.tmp/lib/" \;
  cp -r "$moon/mooncake-store/include" "$dir.tmp/include/mooncake-store"
  cp -r "$moon/mooncake-transfer-engine/include" "$dir.tmp/include/transfer-engine"
  # The build and source trees are not needed once assembled (they are ~1 GB).
  rm -rf "$dir.tmp/build" "$dir.tmp/ylt-build" "$dir.tmp/src"
  PYTHONPATH="$dir.tmp/python" /usr/bin/python3 -c 'from mooncake.store import MooncakeDistributedStore' ||
    die "the assembled Python package does not import (in $dir.tmp/python)"
  rm -rf "$dir"
  mv "$dir.tmp" "$dir"
  wrap_executables "$dir"
  date -u +%FT%TZ >"$dir/done"
  echo "mooncake.sh: built into $dir"
}

# Sets master, python and pythonpath for the Mooncake at hand, or fails saying how to provide it.
locate() {
  if [ "${KVKEY_MOONCAKE:-wheel}" != source ]; then
    [ "${KVKEY_MOONCAKE:-wheel}" = wheel ] || die "KVKEY_MOONCAKE=${KVKEY_MOONCAKE} (use: wheel | source)"
    wheel_installed || die "no Mooncake wheel in the venv $venv: run 'scripts/mooncake.sh install'"
    master="$venv/bin/mooncake_master"
    python="$venv/bin/python"
    pythonpath=""
    return 0
  fi
  python=/usr/bin/python3
  local dir
  dir="$(cache_key_dir)" || how_to_provide
  [ -f "$dir/done" ] || die "no Mooncake build in $dir: run 'scripts/mooncake.sh build --from-source' first (about 15 minutes on 2 cores)"
  wrap_executables "$dir"
  master="$dir/bin/mooncake_master"
  pythonpath="$dir/python"
}

cmd_env() {
  local master python pythonpath
  locate
  printf 'MOONCAKE_MASTER=%q\nMOONCAKE_PYTHON=%q\nMOONCAKE_PYTHONPATH=%q\n' "$master" "$python" "$pythonpath"
}

cmd_start() {
  local master python pythonpath
  locate
  local rpc="${MOONCAKE_RPC_PORT:-$(free_port)}" http="${MOONCAKE_HTTP_PORT:-$(free_port)}"
  local metrics="${MOONCAKE_METRICS_PORT:-$(free_port)}"
  mkdir -p "$state_dir"
  if [ -f "$state_dir/master.pid" ] && kill -0 "$(cat "$state_dir/master.pid")" 2>/dev/null; then
    cmd_stop >/dev/null
  fi
  local ld="${LD_LIBRARY_PATH:-}"
  [ -d "$(dirname "$(dirname "$master")")/lib" ] && ld="$(dirname "$(dirname "$master")")/lib${ld:+:$ld}"
  LD_LIBRARY_PATH="$ld" nohup "$master" --rpc_port="$rpc" --rpc_address=127.0.0.1 \
    --enable_http_metadata_server=true --http_metadata_server_port="$http" \
    --metrics_host=127.0.0.1 --metrics_port="$metrics" \
    --default_kv_lease_ttl="${MOONCAKE_LEASE_TTL_MS:-5000}" >"$state_dir/master.log" 2>&1 &
  local pid=$!
  echo "$pid" >"$state_dir/master.pid"
  # Ready when both the RPC port and the metadata server answer.
  local i
  for i in $(seq 1 100); do
    if ! kill -0 "$pid" 2>/dev/null; then
      tail -20 "$state_dir/master.log" >&2
      die "the master exited at start (log: $state_dir/master.log)"
    fi
    if (exec 3<>"/dev/tcp/127.0.0.1/$rpc") 2>/dev/null && (exec 3<>"/dev/tcp/127.0.0.1/$http") 2>/dev/null; then
      printf 'MOONCAKE_MASTER_ADDR=127.0.0.1:%s\nMOONCAKE_METADATA_URL=http://127.0.0.1:%s/metadata\nMOONCAKE_PID=%s\n' \
        "$rpc" "$http" "$pid"
      return 0
    fi
    sleep 0.2
  done
  kill "$pid" 2>/dev/null || true
  die "the master did not listen on 127.0.0.1:$rpc and :$http within 20 s (log: $state_dir/master.log)"
}

cmd_stop() {
  local f="$state_dir/master.pid"
  if [ ! -f "$f" ]; then
    echo "mooncake.sh: no master started from $state_dir"
    return 0
  fi
  local pid
  pid="$(cat "$f")"
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid"
    local i
    for i in $(seq 1 50); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
    kill -0 "$pid" 2>/dev/null && kill -KILL "$pid"
  fi
  rm -f "$f"
  echo "mooncake.sh: master $pid stopped"
}

case "${1:-}" in
  install) cmd_install ;;
  build)
    case "${2:-}" in
      --from-source) cmd_build ;;
      "") cmd_install ;;
      *) die "build: unknown option '$2' (use: build --from-source)" ;;
    esac
    ;;
  env) cmd_env ;;
  start) cmd_start ;;
  stop) cmd_stop ;;
  *)
    sed -n '2,34p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
    ;;
esac
