#!/usr/bin/env python3
"""Predicts every row of ../shared/simumax/b200_rows.json (measured Megatron-LM step times and memory
on 8 B200s) with `tessel plan estimate`, as tessel would run that model and layout there, and prints
tessel's and SimuMax's errors side by side. Nothing is fitted to the measured times: the hardware is
SimuMax's B200 system file as it is.

usage: bench/planner_b200.py [TESSEL] [SHARED]   (defaults: build/tessel, ../shared)
Last line: JSON with per-row predictions and the error ranges."""
import json
import os
import subprocess
import sys

tessel = sys.argv[1] if len(sys.argv) > 1 else "build/tessel"
shared = sys.argv[2] if len(sys.argv) > 2 else os.path.join(os.path.dirname(__file__), "..", "..", "shared")
simumax = os.path.join(shared, "simumax")
rows = json.load(open(os.path.join(simumax, "b200_rows.json")))
system = os.path.join(simumax, "system", "b200_bf16_ceperm.json")

# SimuMax's model file names differ from the rows' "model" field only by the 405B's padding suffix.
model_files = {os.path.splitext(f)[0]: f for f in os.listdir(os.path.join(simumax, "models"))}


def model_path(name):
    for key in (name, name + "_padding_128"):
        if key in model_files:
            return os.path.join(simumax, "models", model_files[key])
    raise SystemExit(f"no model file for {name} in {simumax}/models")


out = []
print(f"{'case':52} {'real ms':>8} {'tessel':>8} {'err':>7} {'simumax':>8} {'err':>7} | "
      f"{'real GiB':>8} {'tessel':>7} {'err':>7} {'simumax':>7} {'err':>6}")
for r in rows:
    world = r["tp"] * r["pp"] * r["dp"] * r["cp"]
    sets = [f"model.num_layers={r['layers']}", f"model.seq_length={r['seq']}",
            f"parallel.tensor_model_parallel_size={r['tp']}", f"parallel.pipeline_model_parallel_size={r['pp']}",
            f"parallel.expert_model_parallel_size={r['ep']}", f"parallel.context_parallel_size={r['cp']}",
            f"train.global_batch_size={r['mbc'] * r['dp']}"]
    cmd = [tessel, "plan", "estimate", model_path(r["model"]), "--hardware", system, "--world", str(world),
           "--memory-gib", "1000"]
    for s in sets:
        cmd += ["--set", s]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        print(f"{r['case']:52} FAILED: {p.stderr.strip().splitlines()[-1] if p.stderr.strip() else p.returncode}")
        out.append({"case": r["case"], "error": p.stderr.strip()})
        continue
    est = json.loads(p.stdout.strip().splitlines()[-1])
    t, m = est["step_ms"], est["peak_memory_gib"]
    et = t / r["real_ms"] - 1
    es = r["simumax_ms"] / r["real_ms"] - 1
    em = m / r["real_alloc_gib"] - 1
    esm = r["simumax_alloc_gib"] / r["real_alloc_gib"] - 1
    print(f"{r['case']:52} {r['real_ms']:8.1f} {t:8.1f} {100 * et:+6.1f}% {r['simumax_ms']:8.1f} {100 * es:+6.1f}% | "
          f"{r['real_alloc_gib']:8.2f} {m:7.2f} {100 * em:+6.1f}% {r['simumax_alloc_gib']:7.2f} {100 * esm:+5.1f}%")
    cats = est["stages"][0]["peak_memory_gib_by_category"]
    out.append({"case": r["case"], "real_ms": r["real_ms"], "tessel_ms": t, "simumax_ms": r["simumax_ms"],
                "real_gib": r["real_alloc_gib"], "tessel_gib": m, "simumax_gib": r["simumax_alloc_gib"],
                "time_error": et, "memory_error": em, "stage0_gib_by_category": cats})
ok = [o for o in out if "error" not in o]
if ok:
    te = [o["time_error"] for o in ok]
    me = [o["memory_error"] for o in ok]
    print(f"tessel time error {100 * min(te):+.1f}% .. {100 * max(te):+.1f}% over {len(ok)} rows "
          f"(within 10%: {sum(abs(e) <= 0.10 for e in te)}); memory error {100 * min(me):+.1f}% .. {100 * max(me):+.1f}%")
print(json.dumps({"rows": out}))
