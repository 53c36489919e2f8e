#!/usr/bin/env python3
"""Is `tessel plan search`'s best layout really the fastest here? For one model on this machine's
2 cores, at each way of using them (one process with 2 threads; 2 ranks with 1 thread each), the
search ranks the layouts with the calibrated profile of that use (configs/hardware/); then the
search's best, its next best and the config's own layout (what a user gets without the planner) are
measured with `tessel bench`, in alternating rounds (the machine is shared and noisy: each
layout's figure is the median over rounds of its median step).

usage: bench/planner_search_cpu.py [BUILD_DIR] [--config C] [--global-batch G] [--rounds R] [--set k=v ...]
Last line: JSON."""
import json
import os
import statistics
import sys

from tessel_runs import last_json, set_args

args = sys.argv[1:]
build = args.pop(0) if args and not args[0].startswith("--") else "build"


def option(name, default):
    if name in args:
        i = args.index(name)
        value = args[i + 1]
        del args[i:i + 2]
        return value
    return default


config = option("--config", "configs/bench/llama-134m.yaml")
global_batch = option("--global-batch", "8")
rounds = int(option("--rounds", "3"))
sets = []
while "--set" in args:
    sets.append(option("--set", None))
sets = ["precision.compute=bf16"] + sets + [f"train.global_batch_size={global_batch}"]
tessel = os.path.join(build, "tessel")
uses = [  # (name, ranks, threads per rank, profile)
    ("1 process x 2 threads", 1, 2, "configs/hardware/cpu-2core-2threads.json"),
    ("2 ranks x 1 thread", 2, 1, "configs/hardware/cpu-2core-1thread-2ranks.json"),
]




rows = []
for use, ranks, threads, profile in uses:
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    search = last_json([tessel, "plan", "search", config, "--hardware", profile, "--world", str(ranks), "--top", "2"]
                       + set_args(sets), env)
    default = last_json([tessel, "plan", "estimate", config, "--hardware", profile, "--world", str(ranks)]
                        + set_args(sets), env)
    candidates = [("search's best", search["top"][0]["layout"], search["top"][0]["overrides"], search["top"][0]["step_ms"]),
                  ("next best", search["top"][1]["layout"], search["top"][1]["overrides"], search["top"][1]["step_ms"]),
                  ("config's own", "as configured", [], default["step_ms"])]
    measured = {name: [] for name, *_ in candidates}
    for _ in range(rounds):
        for name, layout, overrides, predicted in candidates:
            bench = [tessel, "bench", config, "--steps", "5", "--warmup", "2"] + set_args(sets + overrides)
            if ranks > 1:
                bench = ["mpirun", "--oversubscribe", "--mca", "mpi_yield_when_idle", "1", "-np", str(ranks),
                         "-x", "OMP_NUM_THREADS"] + bench
            measured[name].append(1e3 * last_json(bench, env)["step_s"])
    print(f"{use}: {search['enumerated']} layouts, {search['fitting']} fit, searched in {search['seconds']:.1f} s")
    print(f"  {'':14} {'layout':78} {'predicted ms':>12} {'measured ms':>11}  rounds")
    for name, layout, overrides, predicted in candidates:
        m = statistics.median(measured[name])
        print(f"  {name:14} {layout:78} {predicted:12.1f} {m:11.1f}  " + " ".join(f"{x:.1f}" for x in measured[name]))
        rows.append({"use": use, "candidate": name, "layout": layout, "overrides": overrides,
                     "predicted_ms": predicted, "measured_ms": m, "rounds_ms": measured[name]})
print(json.dumps({"config": config, "global_batch": int(global_batch), "rows": rows}))
