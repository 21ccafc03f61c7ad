#!/usr/bin/env bash
# Installs what is missing, builds the main example and runs it.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh example
cmake -S . -B build/example -DCMAKE_BUILD_TYPE=Release -DKVKEY_BUILD_TESTS=OFF -DKVKEY_BUILD_TOOLS=OFF >/dev/null
cmake --build build/example --target seed_probe -j"$(nproc)"
build/example/examples/seed_probe
