#!/usr/bin/env bash
# Regenerates the committed seed corpora, tests/fuzz/corpus/<target>/, with
# kvkey_fuzz_make_corpus (any C++ compiler). Review and commit the diff.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
build="$root/build/fuzz-corpus"
cmake -S "$root" -B "$build" -DKVKEY_BUILD_FUZZERS=ON -DKVKEY_BUILD_TESTS=OFF -DKVKEY_BUILD_EXAMPLES=OFF \
  -DKVKEY_BUILD_TOOLS=OFF -DKVKEY_INSTALL=OFF >/dev/null
cmake --build "$build" --target kvkey_fuzz_make_corpus -j2
rm -rf "$root/tests/fuzz/corpus"
"$build/tests/fuzz/kvkey_fuzz_make_corpus" "$root/tests/fuzz/corpus"
