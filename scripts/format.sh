#!/usr/bin/env bash
# Formats the project's C++ files in place with clang-format-14 and the root .clang-format:
# include/, tools/, python/src/, tests/ and examples/. With --check, changes nothing and fails
# when a file is not formatted (what the CI stage 05-lint runs).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
mapfile -t files < <(git ls-files -- 'include/*.hpp' 'tools/*.hpp' 'tools/*.cpp' 'python/src/*.hpp' 'python/src/*.cpp' \
  'tests/*.hpp' 'tests/*.cpp' 'examples/*.hpp' 'examples/*.cpp')
if [ "${1:-}" = "--check" ]; then
  exec clang-format-14 --dry-run --Werror "${files[@]}"
fi
clang-format-14 -i "${files[@]}"
echo "format.sh: formatted ${#files[@]} files"
