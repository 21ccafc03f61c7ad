#!/usr/bin/env bash
# Builds examples/mooncake/cpp/check.cpp (kvkey's C++ check_store over the Mooncake C API
# adapter, mooncake_store.hpp) against a Mooncake build from scripts/mooncake.sh:
#   examples/mooncake/cpp/build.sh OUT [MOONCAKE_DIR]
# MOONCAKE_DIR holds include/mooncake-store/store_c.h and lib/ with Mooncake's static
# libraries (default: the cache folder of scripts/mooncake.sh env).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../../.." && pwd)"
out="${1:?usage: build.sh OUT [MOONCAKE_DIR]}"
mc="${2:-}"
if [ -z "$mc" ]; then
  eval "$("$root/scripts/mooncake.sh" env)"
  mc="$(dirname "$(dirname "$MOONCAKE_MASTER")")"
fi
lib="$mc/lib"
for a in libmooncake_store.a libtransfer_engine.a libmooncake_common.a libbase.a libcachelib_memory_allocator.a; do
  [ -f "$lib/$a" ] || { echo "build.sh: $lib/$a is missing (a Mooncake build of scripts/mooncake.sh recipe 2 or later keeps it)" >&2; exit 1; }
done
extra=()
[ -f "$lib/libmooncake_local_ssd.a" ] && extra+=("$lib/libmooncake_local_ssd.a")
g++ -std=c++17 -O2 -Wall -Wextra -Wpedantic -I "$root/include" -I "$mc/include/mooncake-store" \
  "$here/check.cpp" -o "$out" \
  -Wl,--start-group "$lib/libmooncake_store.a" "$lib/libtransfer_engine.a" "$lib/libmooncake_common.a" \
  "$lib/libbase.a" "$lib/libcachelib_memory_allocator.a" "${extra[@]}" -Wl,--end-group \
  -L"$lib" -lasio -Wl,-rpath,"$lib" -lglog -lgflags -ljsoncpp -lcurl -lyaml-cpp -lzstd -lxxhash -luring -libverbs \
  -lnuma -lssl -lcrypto -lpthread -ldl
echo "build.sh: built $out"
