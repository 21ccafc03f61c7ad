#!/usr/bin/env bash
# The weights fingerprint against the coreutils, in the same run on the same
# page-cached files:
#   1. one file: `kvkey init` on a directory holding it vs `sha256sum FILE`;
#   2. two files: `kvkey init` (one thread per file) vs `sha256sum F1 F2`
#      (one after the other).
# Prints the median wall time of each over N repetitions and the ratios.
#
#   bench/fingerprint_vs_sha256sum.sh KVKEY_TOOL [MIB] [N]    # defaults 512, 5
set -euo pipefail
tool=${1:?usage: fingerprint_vs_sha256sum.sh KVKEY_TOOL [MIB] [N]}
mib=${2:-512}
n=${3:-5}
dir=$(mktemp -d /tmp/kvkey-fp-bench-XXXXXX)
trap 'rm -rf "$dir"' EXIT
mkdir -p "$dir/one" "$dir/two"
cfg='{"num_hidden_layers": 24, "num_attention_heads": 14, "num_key_value_heads": 2, "hidden_size": 896}'
echo "$cfg" > "$dir/one/config.json"
echo "$cfg" > "$dir/two/config.json"
head -c $((mib * 1048576)) /dev/urandom > "$dir/one/model.safetensors"
head -c $((mib * 524288)) /dev/urandom > "$dir/two/model-1.safetensors"
head -c $((mib * 524288)) /dev/urandom > "$dir/two/model-2.safetensors"
cat "$dir"/one/* "$dir"/two/* > /dev/null  # page them in

median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
seconds() {  # wall seconds of a command
  local t0 t1
  t0=$(date +%s.%N); "$@" > /dev/null; t1=$(date +%s.%N)
  awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }'
}
init() { "$tool" init --model "$1" --revision bench --tenant bench --kv-dtype fp16 --block-size 64 --layout bench; }
run() {  # label, then the command; prints the median
  local label=$1; shift
  local m
  m=$(for _ in $(seq "$n"); do seconds "$@"; done | median)
  printf '%-34s %8.3f s  %7.0f MB/s\n' "$label" "$m" "$(awk -v m="$mib" -v t="$m" 'BEGIN { print m * 1.048576 / t }')" >&2
  echo "$m"
}
echo "files: $mib MiB in total; median of $n runs; load before: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
s1=$(run "sha256sum, one file" sha256sum "$dir/one/model.safetensors")
k1=$(run "kvkey init, one file" init "$dir/one")
s2=$(run "sha256sum, two files" sha256sum "$dir/two/model-1.safetensors" "$dir/two/model-2.safetensors")
k2=$(run "kvkey init, two files (parallel)" init "$dir/two")
printf 'one file:  kvkey / sha256sum throughput = %.2f\n' "$(awk -v a="$s1" -v b="$k1" 'BEGIN { print a / b }')"
printf 'two files: kvkey / sha256sum throughput = %.2f\n' "$(awk -v a="$s2" -v b="$k2" 'BEGIN { print a / b }')"
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
