#!/usr/bin/env bash
# The full-size dry runs of docs/perf.md ("Dry runs"): each planning config at its layout on the meta
# device, as one markdown table row per config: the largest role's model state by category, and
# its training step's peak (where the step runs on meta), with where in the step it occurs.
# usage: bench/dry_run_full_size.sh [build/tessel]
set -euo pipefail
tessel=${1:-build/tessel}
echo "| config | ranks | layout | parameters (total / active) | largest role | model state per rank, GiB: parameters + gradients + optimizer = total | step peak per rank, GiB (activations), where | dry run |"
echo "|---|---|---|---|---|---|---|---|"
# config:world[:a --set override]; DeepSeek-V3 also with recompute.
for run in llama3-8b:8 llama3-70b:64 llama3-405b:16384 mixtral-8x7b:8 deepseek-v3:2048 \
           deepseek-v3:2048:model.recompute=true; do
  IFS=: read -r cfg world set <<<"$run"
  out=$("$tessel" dry-run "configs/$cfg.yaml" --world "$world" ${set:+--set "$set"})
  [ -n "$set" ] && cfg="$cfg --set $set"
  layout=$(sed -n 's/.*(meta device): world [0-9]* = \(.*\); this rank.*/\1/p' <<<"$out")
  DRY_RUN_JSON=$(tail -n 1 <<<"$out") python3 - "$cfg" "$world" "$layout" <<'PY'
import json, os, sys
cfg, world, layout = sys.argv[1:4]
j = json.loads(os.environ["DRY_RUN_JSON"])
stepped = j["roles"][0]["peak_bytes"] is not None
role = max(j["roles"], key=lambda r: r["peak_requested_bytes"] if stepped else r["model_state_requested_bytes"])
c = role["model_state_requested_bytes_by_category"]
g = lambda b: b / 2**30
step = (f"{g(role['peak_requested_bytes']):.1f} ({g(role['peak_requested_bytes_by_category']['activations']):.1f}), {role['peak_at']}"
        if stepped else "not on meta yet")
print(f"| `{cfg}` | {world} | {layout} | {j['parameters_total']/1e9:.1f}B / {j['parameters_active_per_token']/1e9:.1f}B "
      f"| {role['role']} | {g(c['parameters']):.1f} + {g(c['gradients']):.1f} + {g(c['optimizer_state']):.1f} = "
      f"{g(role['model_state_requested_bytes']):.1f} | {step} | {j['seconds']:.2f} s |")
PY
done
