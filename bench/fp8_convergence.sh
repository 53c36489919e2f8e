#!/usr/bin/env bash
# FP8 convergence study (a benchmark, not a test): the demo model (configs/demo.yaml) trained for
# STEPS steps on the demo corpus in bf16 and with each FP8 recipe, same seed and data order. Writes
# runs/fp8-study/<recipe>/metrics.jsonl, a summary table (bench/fp8_summary.py: final and best eval
# loss and the late training loss, each against bf16) and docs/fp8-loss.png (loss curves). Needs the demo data: run `make demo` once first.
# Usage: bench/fp8_convergence.sh [STEPS] (default 2000); RECIPES="none block delayed current",
# SEED (train.seed: initialisation and data order; default the config's 1234), OUT (runs/fp8-study),
# PLOT (docs/fp8-loss.png).
set -euo pipefail
cd "$(dirname "$0")/.."
STEPS=${1:-2000}
RECIPES=${RECIPES:-"none block delayed current"}
TESSEL=${TESSEL:-build/tessel}
OUT=${OUT:-runs/fp8-study}
PLOT=${PLOT:-docs/fp8-loss.png}
SEED_ARGS=()
[ -n "${SEED:-}" ] && SEED_ARGS=(--set train.seed="$SEED")
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
[ -f runs/demo/data/fortunes.idx ] || { echo "fp8_convergence: no demo data; run 'make demo' first" >&2; exit 1; }
if ! /usr/bin/python3 -c "import matplotlib" 2>/dev/null; then
  if [ "$(id -u)" = 0 ]; then DEBIAN_FRONTEND=noninteractive apt-get install -y -q python3-matplotlib >/dev/null
  else echo "fp8_convergence: needs python3-matplotlib (sudo apt-get install python3-matplotlib)" >&2; exit 1; fi
fi
for r in $RECIPES; do
  dir=$OUT/$r
  if [ -f "$dir/done" ]; then echo "== $r: already done ($dir)"; continue; fi
  echo "== $r: $STEPS steps"
  rm -rf "$dir"
  "$TESSEL" train configs/demo.yaml --set train.train_iters="$STEPS" --set precision.fp8.recipe="$r" \
    --set train.eval_interval=250 --set train.eval_iters=16 --set log.interval=100 --set log.dir="$dir" \
    --set checkpoint.dir="$dir/checkpoints" --set checkpoint.interval=0 "${SEED_ARGS[@]}" | tail -3
  touch "$dir/done"
done
/usr/bin/python3 bench/fp8_summary.py "$OUT" "$PLOT" $RECIPES
