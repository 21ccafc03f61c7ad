#!/usr/bin/env bash
# Installs the Debian packages kvkey needs that are not installed yet.
#   scripts/install-deps.sh example   # build the C++ library and examples
#   scripts/install-deps.sh test      # everything the test suite uses (default)
#   scripts/install-deps.sh bench     # the library, Google Benchmark, gnuplot, numpy, nlohmann-json (scripts/bench.sh)
#   scripts/install-deps.sh mooncake  # what scripts/mooncake.sh build needs to build the vendored Mooncake Store
set -euo pipefail

profile="${1:-test}"
example_pkgs=(build-essential cmake pkg-config libssl-dev libfmt-dev libxxhash-dev)
test_pkgs=("${example_pkgs[@]}" clang libclang-rt-14-dev catch2 nlohmann-json3-dev libcli11-dev libtomlplusplus-dev
  python3-dev python3-pybind11 python3-pytest python3-hypothesis python3-mypy python3-numpy python3-pip
  python3-setuptools python3-wheel python3-venv
  redis-server redis-tools python3-redis libhiredis-dev libbenchmark-dev gnuplot-nox
  prometheus python3-prometheus-client python3-matplotlib clang-format-14 clang-tidy-14
  golang-go librust-sha2-dev librust-hmac-dev librust-xxhash-rust-dev librust-serde-json-dev)
# The Mooncake Store build (../shared/vendor/mooncake/README.md): master, TCP transport, Python binding.
mooncake_pkgs=(build-essential cmake ninja-build pkg-config python3-dev libibverbs-dev libgoogle-glog-dev libgflags-dev
  libjsoncpp-dev libnuma-dev libboost-dev libcurl4-openssl-dev libyaml-cpp-dev libzstd-dev libxxhash-dev
  libmsgpack-cxx-dev liburing-dev)
test_pkgs+=("${mooncake_pkgs[@]}")
case "$profile" in
  example) pkgs=("${example_pkgs[@]}") ;;
  test) pkgs=("${test_pkgs[@]}") ;;
  bench) pkgs=("${example_pkgs[@]}" libbenchmark-dev gnuplot-nox python3-numpy nlohmann-json3-dev) ;;
  mooncake) pkgs=("${mooncake_pkgs[@]}") ;;
  *) echo "install-deps.sh: unknown profile '$profile' (use: example | test | bench | mooncake)" >&2; exit 2 ;;
esac

missing=()
for p in "${pkgs[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if [ "${#missing[@]}" -eq 0 ]; then
  echo "install-deps: all ${#pkgs[@]} packages present"
  exit 0
fi
sudo=""
if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
echo "install-deps: installing ${missing[*]}"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
