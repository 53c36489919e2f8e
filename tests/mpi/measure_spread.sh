#!/usr/bin/env bash
# Measures the spread the MPI equivalence tolerances (compare_runs.py SPREAD) are set from: runs the
# equivalence scripts with oneDNN (and tessel's own kernels) capped to each instruction set and the
# single-process reference on 1, 2 and 4 threads, every comparison recorded and none failing, then
# prints the largest value of each figure per setting and over all of them.
# Usage: measure_spread.sh TESSEL_BINARY CONFIG_DIR MPIRUN [OUT.jsonl]
#   GRID="ISA:THREADS ..." (default: the 3 x 3 grid below; ISA "default" = no cap)
#   SCRIPTS="moe_parallel_train_test.sh ..." (default: every script that uses compare_runs.py)
# Takes about 3 minutes per grid point on 2 idle cores (the scripts run in full; much longer on a
# loaded machine).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
TESSEL=$1 CONFIGS=$2 MPIRUN=$3
OUT=${4:-$PWD/spread.jsonl}
GRID=${GRID:-"default:2 default:1 default:4 AVX512_CORE:2 AVX512_CORE:1 AVX512_CORE:4 AVX2:2 AVX2:1 AVX2:4"}
SCRIPTS=${SCRIPTS:-"data_parallel_train_test.sh hybrid_parallel_train_test.sh moe_parallel_train_test.sh tensor_parallel_train_test.sh fp8_train_test.sh"}
for point in $GRID; do
  isa=${point%%:*} threads=${point##*:}
  for script in $SCRIPTS; do
    echo "== $script, ISA cap $isa, reference on $threads threads"
    (
      [ "$isa" = default ] || export ONEDNN_MAX_CPU_ISA=$isa
      export SINGLE_THREADS=$threads TESSEL_SPREAD_ENV="$isa:$threads:$script"
      export TESSEL_COMPARE_RECORD=$OUT TESSEL_COMPARE_REPORT_ONLY=1
      bash "$HERE/$script" "$TESSEL" "$CONFIGS" "$MPIRUN" > /dev/null || echo "   ($script stopped early: $?)"
    )
  done
done
/usr/bin/python3 - "$OUT" <<'PY'
import collections, json, sys
worst = collections.defaultdict(lambda: (0.0, ""))
per_env = collections.defaultdict(dict)
for line in open(sys.argv[1]):
    r = json.loads(line)
    for k, v in r["figures"].items():
        if k in r.get("set_by_caller", []):
            continue  # a tolerance the script chose for a known reason (compare_runs.py --step1)
        if v > worst[k][0]:
            worst[k] = (v, f'{r["run"]} [{r["env"]}]')
        point = r["env"].rsplit(":", 1)[0]
        per_env[point][k] = max(per_env[point].get(k, 0.0), v)
for env, figs in sorted(per_env.items()):
    print(env, " ".join(f"{k}={v:.1e}" for k, v in sorted(figs.items())))
print("largest over everything:")
for k, (v, where) in sorted(worst.items()):
    print(f"  {k:22s} {v:.2e}  ({where})")
PY
