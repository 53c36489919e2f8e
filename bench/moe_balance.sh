#!/usr/bin/env bash
# Load balance of auxiliary-loss-free bias balancing (a benchmark, not a test): configs/deepseek-v3-tiny.yaml
# on the demo corpus for STEPS steps with the expert bias (gamma 1e-3, no balance loss) and with no
# balancing at all, same seed and data; prints the max / mean tokens per expert of every MoE layer
# (metrics.jsonl's expert_load_max_mean, 1 = even) averaged over windows of steps.
# Needs the demo data: run `make demo` once first. Usage: bench/moe_balance.sh [STEPS] (default 300).
set -euo pipefail
cd "$(dirname "$0")/.."
STEPS=${1:-300}
TESSEL=${TESSEL:-build/tessel}
OUT=runs/moe-balance
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
[ -f runs/demo/data/fortunes.idx ] || { echo "moe_balance: no demo data; run 'make demo' first" >&2; exit 1; }
COMMON=(--set train.train_iters="$STEPS" --set data.path=runs/demo/data/fortunes --set data.tokenizer=runs/demo/tokenizer.model
        --set model.moe_router_load_balancing_type=none --set log.interval=50)
"$TESSEL" train configs/deepseek-v3-tiny.yaml "${COMMON[@]}" --set model.moe_router_enable_expert_bias=true \
  --set log.dir=$OUT/bias | tail -1
"$TESSEL" train configs/deepseek-v3-tiny.yaml "${COMMON[@]}" --set model.moe_router_enable_expert_bias=false \
  --set log.dir=$OUT/none | tail -1
/usr/bin/python3 - "$OUT" "$STEPS" <<'PY'
import json, sys
out, steps = sys.argv[1], int(sys.argv[2])
def rows(run):
    return [json.loads(l) for l in open(f"{out}/{run}/metrics.jsonl") if '"expert_load_max_mean"' in l]
w = max(1, steps // 6)
print(f"| steps | bias: max/mean per MoE layer | no balancing: max/mean per MoE layer |")
print("|---|---|---|")
a, b = rows("bias"), rows("none")
for s in range(0, steps, w):
    def mean(rs):
        win = [r["expert_load_max_mean"] for r in rs if s < r["step"] <= s + w]
        return ", ".join(f"{sum(c) / len(c):.2f}" for c in zip(*win))
    print(f"| {s + 1}-{min(steps, s + w)} | {mean(a)} | {mean(b)} |")
print(f"final loss: bias {a[-1]['loss']:.4f}, none {b[-1]['loss']:.4f}")
PY
