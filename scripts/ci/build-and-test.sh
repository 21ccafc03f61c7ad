#!/usr/bin/env bash
# build-and-test.sh NAME CC CXX [extra cmake args...]
# Configures build/NAME with the given compilers, builds everything, runs CTest.
set -euo pipefail
name="$1"; cc="$2"; cxx="$3"; shift 3
dir="$KVKEY_ROOT/build/$name"
cmake -S "$KVKEY_ROOT" -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_C_COMPILER="$cc" -DCMAKE_CXX_COMPILER="$cxx" -DKVKEY_WARNINGS_AS_ERRORS=ON "$@" >/dev/null
cmake --build "$dir" -j"$KVKEY_JOBS"
ctest --test-dir "$dir" --output-on-failure -j"$KVKEY_JOBS" --timeout 600
