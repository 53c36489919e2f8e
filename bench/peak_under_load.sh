#!/usr/bin/env bash
# The GEMM peak with and without load: `tessel bench --steps 1` with an empty peak cache on the machine
# as it is, then with an empty cache while two busy loops load the cores (as `make test` did when the
# issue's peak was poisoned), then with the first run's cache while loaded and --remeasure-peak.
# Prints each run's peak line and what each left in its cache.
# Usage: bench/peak_under_load.sh TESSEL_BINARY CONFIG [--set ...]
set -u
bin=$1 cfg=$2
shift 2
dir=$(mktemp -d)
run() {  # NAME [extra args]: one bench with XDG_CACHE_HOME=$dir/NAME
  local name=$1
  shift
  echo "== $name"
  XDG_CACHE_HOME=$dir/$name "$bin" bench "$cfg" --steps 1 --warmup 0 "$@" 2>&1 | grep -E "^tessel: |GEMM peak" |
    sed -E 's/^median step.*(GEMM peak [0-9.]+ GFLOP\/s)/\1/; s/ \| MFU.*//'
  echo "cached: $(tr -d '\n ' 2>/dev/null < "$dir/$name/tessel/gemm_peak.json" || echo nothing)"
}
busy_loops() { for _ in 1 2; do (while :; do :; done) & done; }
run as-it-is "$@"
busy_loops
run loaded "$@"
mkdir -p "$dir/loaded-remeasure" && cp -r "$dir/as-it-is/tessel" "$dir/loaded-remeasure/" 2>/dev/null
run loaded-remeasure --remeasure-peak "$@"
kill $(jobs -p)
rm -rf "$dir"
