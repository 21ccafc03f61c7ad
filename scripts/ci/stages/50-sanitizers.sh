#!/usr/bin/env bash
# Sanitizers (docs/security.md, "Fuzzing and sanitizers"); the C++ suite under
# AddressSanitizer and UBSan is stage 20-clang's build. Here:
#  1. the concurrency test (one const KeyNamespace, Sha256 and HmacSha256,
#     shared by 8 threads) built with -fsanitize=thread and run;
#  2. the Python module built by CMake (-DKVKEY_BUILD_PYTHON=ON) with
#     -fsanitize=address,undefined and its pytest suite run by the project venv's
#     python with the ASan runtime preloaded (less the tests that need a Redis
#     server or a Mooncake master, which stages 40, 42 and 44 run).
# Any sanitizer report fails the stage. Only the targets the sanitizers need are built.
set -euo pipefail
root="${KVKEY_ROOT:?run through scripts/test.sh}"
jobs="${KVKEY_JOBS:-2}"
if [ "$jobs" -gt 2 ]; then jobs=2; fi
san_flags="-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer"

# ---- 1. ThreadSanitizer on the shared-namespace test ---------------------------
# OpenSSL's libcrypto is not TSan-instrumented: TSan sees its locks (pthread
# interceptors) but not its memory accesses, so it cannot report races inside
# it, and none were reported in kvkey's calls into it. No suppressions are used;
# should one ever be needed it must name a libcrypto frame only
# (docs/security.md).
tsan="$root/build/tsan"
mkdir -p "$tsan"
tsan_cxx=(clang++-14 -std=c++17 -O1 -g -fsanitize=thread -fno-omit-frame-pointer
  -Wall -Wextra -Wpedantic -Wshadow -Werror -I"$root/include" -I"$root/tests")
"${tsan_cxx[@]}" -c "$root/tests/unit/main.cpp" -o "$tsan/main.o" &
"${tsan_cxx[@]}" -c "$root/tests/unit/concurrency_test.cpp" -o "$tsan/concurrency.o"
wait $!
"${tsan_cxx[@]}" "$tsan/main.o" "$tsan/concurrency.o" -lcrypto -lxxhash -o "$tsan/kvkey_concurrency_test"
TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1" \
  "$tsan/kvkey_concurrency_test" "[concurrency]" --warn NoTests

# ---- 2. The Python binding under AddressSanitizer + UBSan -----------------------
# The interpreter is not instrumented: the ASan runtime is preloaded so that the
# module's instrumented code (and every malloc/free, the interpreter's included)
# is checked; a use-after-free through a binding object aborts the test run.
# CPython keeps memory until exit by design, so leak detection is off.
# shellcheck source=scripts/ci/lib/python.sh
. "$root/scripts/ci/lib/python.sh"
pyasan="$root/build/asan-python"
cmake -S "$root" -B "$pyasan" -G "Unix Makefiles" -DCMAKE_BUILD_TYPE=Debug \
  -DCMAKE_CXX_COMPILER=clang++-14 \
  -DCMAKE_CXX_FLAGS="$san_flags -O1 -g" \
  -DCMAKE_MODULE_LINKER_FLAGS="-fsanitize=address,undefined" \
  -DKVKEY_WARNINGS_AS_ERRORS=ON -DKVKEY_INSTALL=OFF -DKVKEY_BUILD_TOOLS=OFF -DKVKEY_BUILD_TESTS=OFF \
  -DKVKEY_BUILD_EXAMPLES=OFF -DKVKEY_BUILD_PYTHON=ON -DPython_EXECUTABLE=/usr/bin/python3 >/dev/null
cmake --build "$pyasan" -j"$jobs" --target kvkey_python
asan_runtime="$(clang-14 -print-file-name=libclang_rt.asan-x86_64.so)"
if [ ! -f "$asan_runtime" ]; then
  echo "50-sanitizers: ASan runtime not found ($asan_runtime); install libclang-rt-14-dev" >&2
  exit 1
fi
(cd / && LD_PRELOAD="$asan_runtime" \
  ASAN_OPTIONS="detect_leaks=0:abort_on_error=1:strict_string_checks=1:detect_stack_use_after_return=1" \
  PYTHONPATH="$pyasan/python" KVKEY_EXPECT_MODULE_DIR="$pyasan/python/kvkey" PYTHONDONTWRITEBYTECODE=1 \
  "$py" -m pytest -q -p no:cacheprovider -m "not redis and not redis_cluster and not mooncake and not vllm" "$root/python/tests")
