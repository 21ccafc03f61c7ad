#!/usr/bin/env bash
# The whole C++ suite with GCC (C++17 build; the header checks also compile in C++20).
set -euo pipefail
exec "$KVKEY_ROOT/scripts/ci/build-and-test.sh" gcc gcc g++
