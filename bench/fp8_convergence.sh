#!/usr/bin/env bash
# FP8 convergence study (a benchmark, not a test): the demo model (configs/demo.yaml) trained for
# STEPS steps on the demo corpus in bf16 and with each FP8 recipe, same seed and data order. Writes
# runs/fp8-study/<recipe>/metrics.jsonl, a summary table (final eval loss and its relative difference
# from bf16) and docs/fp8-loss.png (loss curves). Needs the demo data: run `make demo` once first.
# Usage: bench/fp8_convergence.sh [STEPS] (default 2000); RECIPES="none block delayed current".
set -euo pipefail
cd "$(dirname "$0")/.."
STEPS=${1:-2000}
RECIPES=${RECIPES:-"none block delayed current"}
TESSEL=${TESSEL:-build/tessel}
OUT=runs/fp8-study
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
    --set checkpoint.dir="$dir/checkpoints" --set checkpoint.interval=0 | tail -3
  touch "$dir/done"
done
/usr/bin/python3 - "$OUT" $RECIPES <<'PY'
import json, sys
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
out, recipes = sys.argv[1], sys.argv[2:]
def read(r):
    rows = [json.loads(l) for l in open(f"{out}/{r}/metrics.jsonl")]
    return [(x["step"], x["loss"]) for x in rows if "loss" in x], [(x["step"], x["eval_loss"]) for x in rows if "eval_loss" in x]
runs = {r: read(r) for r in recipes}
base = runs["none"][1][-1][1] if "none" in runs else None
print(f"| recipe | final eval loss (step {runs[recipes[0]][1][-1][0]}) | relative difference from bf16 |")
print("|---|---|---|")
for r, (train, ev) in runs.items():
    diff = "-" if r == "none" or base is None else f"{100 * (ev[-1][1] - base) / base:+.3f}%"
    print(f"| {'bf16' if r == 'none' else r} | {ev[-1][1]:.4f} | {diff} |")
fig, ax = plt.subplots(figsize=(8, 4.5))
for r, (train, ev) in runs.items():
    steps, losses = zip(*train)
    k = 20  # running mean over 20 steps for readability
    smooth = [sum(losses[max(0, i - k + 1):i + 1]) / len(losses[max(0, i - k + 1):i + 1]) for i in range(len(losses))]
    line, = ax.plot(steps, smooth, label=("bf16" if r == "none" else f"fp8 {r}") + " (train, 20-step mean)", lw=1)
    es, el = zip(*ev)
    ax.plot(es, el, "o--", color=line.get_color(), ms=3, lw=0.8)
ax.set_xlabel("step"); ax.set_ylabel("loss"); ax.set_ylim(top=6)
ax.set_title("demo model (6.5M Llama) on fortunes: bf16 vs FP8 recipes (dashed: eval loss)")
ax.legend(); ax.grid(alpha=0.3)
fig.tight_layout(); fig.savefig("docs/fp8-loss.png", dpi=110)
print("wrote docs/fp8-loss.png")
PY
