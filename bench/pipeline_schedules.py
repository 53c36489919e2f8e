#!/usr/bin/env python3
"""Pipeline schedules measured against the simulator (issue 15): `mpirun -np 2 tessel train` on
configs/synthetic.yaml (8 layers, 4 per rank: llama-tiny-sized stages), 1 thread per rank, for each
schedule and micro-batch count; each run's last step is traced (log.pipeline_trace) and
`tessel schedule --costs-from` prices the same schedule with that step's mean F, B, W per stage.
Prints one markdown row per run: measured step and idle time per rank (the bubble, waits inside
receives included) beside the prediction, and the step time of the run's metrics (median of the
steps after the first).

Usage: bench/pipeline_schedules.py [TESSEL] [--micro-batches 8,16] [--kinds 1f1b,zb-h1,zb-v,dualpipev]
"""
import argparse
import json
import os
import statistics
import subprocess
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("tessel", nargs="?", default=os.path.join(HERE, "..", "build", "tessel"))
    ap.add_argument("--micro-batches", default="8,16")
    ap.add_argument("--kinds", default="1f1b,zb-h1,zb-v,dualpipev")
    ap.add_argument("--steps", type=int, default=6)
    a = ap.parse_args()
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMP_NUM_THREADS="1",
               OMP_WAIT_POLICY="passive")
    config = os.path.join(HERE, "..", "configs", "synthetic.yaml")
    print("| schedule | micro-batches | step ms (metrics) | traced step ms | predicted ms | idle ms per rank | "
          "predicted idle ms |")
    print("|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as work:
        for m in [int(x) for x in a.micro_batches.split(",")]:
            for kind in a.kinds.split(","):
                log = os.path.join(work, f"{kind}-{m}")
                subprocess.run(["mpirun", "--oversubscribe", "--mca", "mpi_yield_when_idle", "1", "-np", "2", a.tessel,
                                "train", config, "--set", f"train.train_iters={a.steps}", "--set",
                                "model.num_layers=8", "--set", "train.micro_batch_size=1", "--set",
                                f"train.global_batch_size={m}", "--set", "parallel.pipeline_model_parallel_size=2",
                                "--set", f"parallel.pipeline_schedule={kind}", "--set", "log.pipeline_trace=true",
                                "--set", f"log.dir={log}", "--set", "checkpoint.interval=0", "--set",
                                f"checkpoint.dir={log}/ckpt"],
                               check=True, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                steps = [json.loads(l)["step_s"] for l in open(os.path.join(log, "metrics.jsonl")) if '"step_s"' in l]
                out = subprocess.run([a.tessel, "schedule", "--kind", kind, "--pp", "2", "--micro-batches", str(m),
                                      "--costs-from", os.path.join(log, "pipeline_trace.json")],
                                     check=True, capture_output=True, text=True).stdout
                j = json.loads(out.strip().splitlines()[-1])
                print(f"| {kind} | {m} | {statistics.median(steps[1:]) * 1e3:.1f} | {j['measured_makespan'] * 1e3:.1f} | "
                      f"{j['makespan'] * 1e3:.1f} | {j['measured_bubble'] * 1e3:.1f} | {j['bubble'] * 1e3:.1f} |",
                      flush=True)


if __name__ == "__main__":
    main()
