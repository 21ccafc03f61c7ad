#!/usr/bin/env bash
# Lint. clang-tidy-14 with the checks of .clang-tidy on every public header
# (include/kvkey/**.hpp), each through its own translation unit compiled with
# the project's flags: the header-check units of tests/CMakeLists.txt, taken
# from compile_commands.json. Then clang-format-14 --dry-run --Werror over the
# C++ files of include/ tools/ python/src/ tests/ examples/ (scripts/format.sh
# --check). Fails on any tidy finding or unformatted file.
set -euo pipefail
root="${KVKEY_ROOT:-$(cd "$(dirname "$0")/../../.." && pwd)}"
jobs="${KVKEY_JOBS:-$(nproc)}"
dir="$root/build/lint"

cmake -S "$root" -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_COMPILER=clang++-14 -DCMAKE_EXPORT_COMPILE_COMMANDS=ON -DKVKEY_BUILD_TOOLS=OFF \
  -DKVKEY_BUILD_EXAMPLES=OFF >/dev/null
units=("$dir"/tests/header_check/cxx17/*.cpp)
echo "05-lint: clang-tidy-14 on ${#units[@]} public headers (one unit each)"
tidy=0
printf '%s\n' "${units[@]}" | xargs -P "$jobs" -I{} clang-tidy-14 --quiet -p "$dir" {} || tidy=1

format=0
"$root/scripts/format.sh" --check || format=1
echo "05-lint: clang-tidy $([ "$tidy" -eq 0 ] && echo clean || echo FAILED)," \
  "clang-format $([ "$format" -eq 0 ] && echo clean || echo FAILED)"
[ "$tidy" -eq 0 ] && [ "$format" -eq 0 ]
