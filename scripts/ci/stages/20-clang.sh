#!/usr/bin/env bash
# The whole C++ suite with Clang 14, under AddressSanitizer and
# UndefinedBehaviorSanitizer (-fsanitize=address,undefined -fno-sanitize-recover=all,
# -O1): the unit tests, the examples, the tool and its tests, the header checks in
# C++17 and C++20 and the package consumers, warning-free (-Werror), in one build
# tree. Any sanitizer report fails the stage (docs/security.md, "Fuzzing and
# sanitizers"). Stage 50-sanitizers adds ThreadSanitizer and the Python module
# under ASan.
set -euo pipefail
san="-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer"
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1:strict_string_checks=1:detect_stack_use_after_return=1:check_initialization_order=1"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
exec "$KVKEY_ROOT/scripts/ci/build-and-test.sh" clang clang-14 clang++-14 \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g -DNDEBUG" -DCMAKE_CXX_FLAGS="$san" \
  -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" -DCMAKE_SHARED_LINKER_FLAGS="-fsanitize=address,undefined"
