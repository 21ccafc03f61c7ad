#!/bin/sh
# Builds and runs the package consumers the way a project without CMake does,
# with `pkg-config --cflags --libs` against an installed kvkey:
#   pkg-config.sh PKGCONFIG_DIR VERSION CXX BUILD_DIR
# kvkey.pc must not bring {fmt}; kvkey-fmt.pc must.
set -eu
export PKG_CONFIG_PATH="$1"
version=$2
cxx=$3
out=$4
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"

pkg-config --exact-version="$version" kvkey || { echo "kvkey.pc is not version $version" >&2; exit 1; }
includedir=$(pkg-config --variable=includedir kvkey)
[ -f "$includedir/kvkey/kvkey.hpp" ] || { echo "kvkey.pc's includedir $includedir has no kvkey/kvkey.hpp" >&2; exit 1; }

core=$(pkg-config --cflags --libs kvkey)
case "$core" in *fmt*) echo "kvkey.pc brings {fmt}: $core" >&2; exit 1 ;; esac
# shellcheck disable=SC2086 # the flags are words
"$cxx" -std=c++17 "$here/consumer_core.cpp" -o "$out/consumer_core" $core
"$out/consumer_core"

with_fmt=$(pkg-config --cflags --libs kvkey-fmt)
case "$with_fmt" in *-lfmt*) ;; *) echo "kvkey-fmt.pc does not link {fmt}: $with_fmt" >&2; exit 1 ;; esac
# shellcheck disable=SC2086
"$cxx" -std=c++17 "$here/consumer.cpp" -o "$out/consumer_fmt" $with_fmt
"$out/consumer_fmt"
