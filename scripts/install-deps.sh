#!/usr/bin/env bash
# Installs the Debian packages kvkey needs that are not installed yet.
#   scripts/install-deps.sh example   # build the C++ library and examples
#   scripts/install-deps.sh test      # everything the test suite uses (default)
#   scripts/install-deps.sh bench     # the library, Google Benchmark, gnuplot, numpy, nlohmann-json (scripts/bench.sh)
#   scripts/install-deps.sh mooncake  # the shared libraries the pinned Mooncake wheel loads (scripts/mooncake.sh install)
#   scripts/install-deps.sh mooncake-source  # what `scripts/mooncake.sh build --from-source` needs
#
# Only Debian packages are installed here. Go and Rust are not: the machines come
# with Go 1.26 (/usr/local/go) and Rust 1.95 (rustup), the toolchains the ports are
# built and tested with (docs/ports.md). What only PyPI has goes into the project's
# venv (scripts/venv.sh).
set -euo pipefail

profile="${1:-test}"
example_pkgs=(build-essential cmake pkg-config libssl-dev libfmt-dev libxxhash-dev)
test_pkgs=("${example_pkgs[@]}" clang libclang-rt-14-dev catch2 nlohmann-json3-dev libcli11-dev libtomlplusplus-dev
  python3-dev python3-pybind11 python3-pytest python3-hypothesis python3-mypy python3-numpy python3-pip
  python3-setuptools python3-wheel python3-venv python3-build
  redis-server redis-tools python3-redis libhiredis-dev libbenchmark-dev gnuplot-nox
  prometheus python3-prometheus-client python3-matplotlib clang-format-14 clang-tidy-14 ccache)
# What the Mooncake wheel's master and Python module load that a bare machine lacks, and the
# Python packages it requires (from Debian: the venv sees them).
mooncake_pkgs=(libibverbs1 libnuma1 libcurl4 python3-aiohttp python3-requests python3-msgpack)
# The Mooncake Store source build (../shared/vendor/mooncake/README.md): master, TCP transport, Python binding.
mooncake_source_pkgs=(build-essential cmake ninja-build pkg-config python3-dev libibverbs-dev libgoogle-glog-dev libgflags-dev
  libjsoncpp-dev libnuma-dev libboost-dev libcurl4-openssl-dev libyaml-cpp-dev libzstd-dev libxxhash-dev
  libmsgpack-cxx-dev liburing-dev)
test_pkgs+=("${mooncake_pkgs[@]}")
case "$profile" in
  example) pkgs=("${example_pkgs[@]}") ;;
  test) pkgs=("${test_pkgs[@]}") ;;
  bench) pkgs=("${example_pkgs[@]}" libbenchmark-dev gnuplot-nox python3-numpy nlohmann-json3-dev) ;;
  mooncake) pkgs=("${mooncake_pkgs[@]}") ;;
  mooncake-source) pkgs=("${mooncake_source_pkgs[@]}") ;;
  *) echo "install-deps.sh: unknown profile '$profile' (use: example | test | bench | mooncake | mooncake-source)" >&2; exit 2 ;;
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
