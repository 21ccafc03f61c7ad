#!/usr/bin/env bash
# The whole C++ suite with Clang 14.
set -euo pipefail
exec "$KVKEY_ROOT/scripts/ci/build-and-test.sh" clang clang-14 clang++-14
