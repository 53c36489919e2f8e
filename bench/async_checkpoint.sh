#!/usr/bin/env bash
# Asynchronous checkpoint saves against synchronous ones and none, in the same session: llama-134m
# (bf16; fp32 masters and moments: 1.6 GB per checkpoint, whole tensors), one process of 2 threads,
# STEPS steps (default 40) with a save every 10 steps. Prints, for each run, the throughput over steps
# 11..STEPS by the wall clock (saves included) and, for the asynchronous run, over the steps trained
# while a write was in flight (from each "saving ... in the background" line to its "saved" line).
# The writer thread competes with the training threads for the same 2 cores and the page cache:
# compare the runs' ratios, not their absolute figures.
# The asynchronous run also reports its in-flight steps against its own steps 12..STEPS with no write
# in flight, which this shared machine's drift between runs does not blur.
# Usage: [MODES="none async"] bench/async_checkpoint.sh [TESSEL_BINARY] [WORK_DIR] [STEPS]
set -euo pipefail
TESSEL=$(realpath "${1:-build/tessel}")
CONFIG=$(realpath "$(dirname "$0")/../configs/bench/llama-134m.yaml")
WORK=${2:-$(mktemp -d /tmp/tessel-async-bench-XXXXXX)}
STEPS=${3:-40}
mkdir -p "$WORK" && cd "$WORK"
export OMP_NUM_THREADS=2
ARGS=(--set precision.compute=bf16 --set train.train_iters="$STEPS" --set train.lr_warmup_iters=1 --set log.interval=1
      --set checkpoint.keep=1 --set data.path=synthetic:uniform)
MODES=${MODES:-none sync async}
for mode in $MODES; do
  rm -rf "log-$mode" "ck-$mode"
  case $mode in
    none) extra=() ;;
    sync) extra=(--set checkpoint.dir="ck-$mode" --set checkpoint.interval=10) ;;
    async) extra=(--set checkpoint.dir="ck-$mode" --set checkpoint.interval=10 --set checkpoint.async_save=true) ;;
  esac
  "$TESSEL" train "$CONFIG" "${ARGS[@]}" --set log.dir="log-$mode" "${extra[@]}" > "$mode.log"
done
/usr/bin/python3 - "$STEPS" $MODES <<'PY'
import json, re, sys
steps = int(sys.argv[1])
def metrics(mode):
    return {r["step"]: r for r in map(json.loads, open(f"log-{mode}/metrics.jsonl")) if "loss" in r}
def wall_tps(m, first, last):  # tokens/s over steps first..last by the wall clock
    tokens = sum(m[s]["tokens_per_s"] * m[s]["step_s"] for s in range(first, last + 1))
    return tokens / (m[last]["elapsed_s"] - m[first - 1]["elapsed_s"])
modes = sys.argv[2:]
rows = {mode: wall_tps(metrics(mode), 11, steps) for mode in modes}
for mode, tps in rows.items():
    ratio = f"  ({tps / rows['none']:.1%} of no saves)" if "none" in rows else ""
    print(f"{mode:5s}  steps 11-{steps}: {tps:8.1f} tokens/s by the wall clock{ratio}")
if "async" not in modes: sys.exit(0)
# Steps trained while a background write was in flight.
m, inflight, flying = metrics("async"), [], False
for line in open("async.log"):
    if line.startswith("saving the checkpoint"): flying = True
    elif line.startswith("saved checkpoint"): flying = False
    elif flying and (g := re.match(r"step +(\d+)/", line)): inflight.append(int(g.group(1)))
if inflight:
    tok = sum(m[s]["tokens_per_s"] * m[s]["step_s"] for s in inflight)
    t = sum(m[s]["elapsed_s"] - m[s - 1]["elapsed_s"] for s in inflight)
    ratio = f" ({tok / t / rows['none']:.1%} of no saves)" if "none" in rows else ""
    print(f"async  {len(inflight)} steps with a write in flight ({inflight[0]}..{inflight[-1]}): {tok / t:8.1f} tokens/s{ratio}")
    # The same run's steps after the first save with no write in flight, for a ratio within one run.
    others = [s for s in range(12, steps + 1) if s not in inflight]
    if others:
        tok_o = sum(m[s]["tokens_per_s"] * m[s]["step_s"] for s in others)
        t_o = sum(m[s]["elapsed_s"] - m[s - 1]["elapsed_s"] for s in others)
        print(f"async  {len(others)} steps with none in flight: {tok_o / t_o:8.1f} tokens/s; "
              f"in flight / none in flight: {(tok / t) / (tok_o / t_o):.1%}")
for mode in (m for m in ("sync", "async") if m in modes):
    for line in open(f"{mode}.log"):
        if "checkpoint" in line and ("saved" in line or "saving" in line): print(f"{mode:5s}  {line.strip()}")
PY
