#!/usr/bin/env python3
"""`tessel plan estimate` against `tessel bench` on this machine: for a fixed list of layouts that
really run here (one process at 1 and 2 threads; 2 ranks at 1 thread each), the predicted step time
against the measured median, and the predicted peak memory (the reserve of tessel's pool: blocks in
use and the free blocks it keeps) against the real peak heap growth (counted by bench/heap_peak, an
allocation interposer, not by tessel's allocator), each the most any rank holds. The profiles are
configs/hardware/cpu-2core-*.json from `tessel plan calibrate`, whose GEMM grid ({128, 512,
2048}^3) holds none of these models' GEMM shapes.

usage: bench/planner_cpu.py [BUILD_DIR] [--only NAME[,NAME...]] [--rounds R] [--calibrate | --calibrate-each]
Last line: JSON. With R rounds, the layouts are measured R times in turn and each one's median counts.
--calibrate: each round first calibrates the three profiles afresh (`tessel plan calibrate
--repeats 5`, the 2-rank one under mpirun), as `parallel.auto` measures the machine at start-up, and
predicts that round's runs with them; the prediction counted is the median of the rounds'. This VM
drifts 10-40% between minutes, so a profile measured in another phase than the runs is off by that
much whatever the model; the committed profiles (the default) keep that error in.
--calibrate-each: as --calibrate, but the profile a layout is predicted with is calibrated just
before that layout's run (seconds, not minutes, before it), as `parallel.auto` does for the one run
it starts."""
import json
import os
import statistics
import subprocess
import sys
import tempfile

from tessel_runs import last_json

build = sys.argv[1] if len(sys.argv) > 1 and not sys.argv[1].startswith("--") else "build"
only = sys.argv[sys.argv.index("--only") + 1] if "--only" in sys.argv else None
rounds = int(sys.argv[sys.argv.index("--rounds") + 1]) if "--rounds" in sys.argv else 1
calibrate_each = "--calibrate-each" in sys.argv
recalibrate = "--calibrate" in sys.argv or calibrate_each
tessel = os.path.join(build, "tessel")
preload = os.path.join(build, "libtessel_heap_peak.so")
hw1, hw2, hwr = ("configs/hardware/cpu-2core-1thread.json", "configs/hardware/cpu-2core-2threads.json",
                 "configs/hardware/cpu-2core-1thread-2ranks.json")
tiny, m134, moe, dsv3 = ("configs/bench/llama-tiny.yaml", "configs/bench/llama-134m.yaml",
                         "configs/mixtral-tiny.yaml", "configs/deepseek-v3-tiny.yaml")
bf16 = ["precision.compute=bf16"]
# (name, config, overrides, ranks, threads per rank, profile)
layouts = [
    ("tiny fp32, 1 thread", tiny, [], 1, 1, hw1),
    ("tiny fp32, 2 threads", tiny, [], 1, 2, hw2),
    ("tiny bf16, 2 threads", tiny, bf16, 1, 2, hw2),
    ("134m fp32, 2 threads", m134, ["train.global_batch_size=2", "train.micro_batch_size=2"], 1, 2, hw2),
    ("mixtral-tiny, 2 threads", moe, [], 1, 2, hw2),
    ("deepseek-v3-tiny (MLA, MoE, MTP), 2 threads", dsv3, [], 1, 2, hw2),
    ("tiny bf16 dp2", tiny, bf16 + ["train.global_batch_size=16"], 2, 1, hwr),
    ("tiny bf16 dp2 ZeRO-1", tiny, bf16 + ["train.global_batch_size=16", "parallel.use_distributed_optimizer=true"], 2, 1, hwr),
    ("tiny bf16 tp2", tiny, bf16 + ["parallel.tensor_model_parallel_size=2"], 2, 1, hwr),
    ("tiny bf16 tp2 sp", tiny, bf16 + ["parallel.tensor_model_parallel_size=2", "parallel.sequence_parallel=true"], 2, 1, hwr),
    ("tiny bf16 pp2 1f1b", tiny, bf16 + ["parallel.pipeline_model_parallel_size=2", "train.micro_batch_size=2",
                                         "train.global_batch_size=16"], 2, 1, hwr),
    ("tiny bf16 pp2 interleaved vpp2", tiny, bf16 + ["model.num_layers=8", "parallel.pipeline_model_parallel_size=2",
                                                     "parallel.virtual_pipeline_model_parallel_size=2",
                                                     "train.micro_batch_size=2", "train.global_batch_size=16"], 2, 1, hwr),
    # The zero-bubble and V schedules (docs/pipeline-schedules.md): the V kinds hold 2 chunks a rank.
    ("tiny bf16 pp2 zb-h1", tiny, bf16 + ["parallel.pipeline_model_parallel_size=2", "parallel.pipeline_schedule=zb-h1",
                                          "train.micro_batch_size=2", "train.global_batch_size=16"], 2, 1, hwr),
    ("tiny bf16 pp2 zb-v (8 layers)", tiny, bf16 + ["model.num_layers=8", "parallel.pipeline_model_parallel_size=2",
                                                    "parallel.pipeline_schedule=zb-v", "train.micro_batch_size=2",
                                                    "train.global_batch_size=16"], 2, 1, hwr),
    ("tiny bf16 pp2 dualpipev (8 layers)", tiny, bf16 + ["model.num_layers=8", "parallel.pipeline_model_parallel_size=2",
                                                         "parallel.pipeline_schedule=dualpipev",
                                                         "train.micro_batch_size=2", "train.global_batch_size=16"],
     2, 1, hwr),
    ("tiny bf16 cp2", tiny, bf16 + ["parallel.context_parallel_size=2"], 2, 1, hwr),
    ("mixtral-tiny ep2", moe, ["parallel.expert_model_parallel_size=2", "train.global_batch_size=16"], 2, 1, hwr),
    # FP8: the emulated FP8 GEMM is on the calibration grid (per-tensor scales); these models' shapes are not.
    ("tiny bf16 + fp8 delayed, 2 threads", tiny, bf16 + ["precision.fp8.recipe=delayed"], 1, 2, hw2),
    ("134m fp32 + fp8 block, 2 threads", m134, ["train.global_batch_size=2", "train.micro_batch_size=2",
                                                "precision.fp8.recipe=block"], 1, 2, hw2),
    ("tiny bf16 + fp8 current tp2", tiny, bf16 + ["parallel.tensor_model_parallel_size=2",
                                                  "precision.fp8.recipe=current"], 2, 1, hwr),
]


def calibrate_profiles(into, which=(hw1, hw2, hwr)):
    """The profiles `which` (committed paths) measured now: {committed path: fresh path}."""
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    fresh = {}
    for hw, threads, ranks in ((hw1, 1, 1), (hw2, 2, 1), (hwr, 1, 2)):
        if hw not in which:
            continue
        out = os.path.join(into, os.path.basename(hw))
        cmd = [tessel, "plan", "calibrate", "--repeats", "5", "--out", out]
        if ranks > 1:
            cmd = ["mpirun", "--oversubscribe", "--mca", "mpi_yield_when_idle", "1", "-np", str(ranks),
                   "-x", "OMP_NUM_THREADS"] + cmd
        subprocess.run(cmd, env=dict(env, OMP_NUM_THREADS=str(threads)), check=True, capture_output=True)
        fresh[hw] = out
    return fresh


selected = [layout for layout in layouts if not only or any(o in layout[0] for o in only.split(","))]
steps_ms = {layout[0]: [] for layout in selected}  # each round's median step
predicted_ms = {layout[0]: [] for layout in selected}  # each round's prediction (--calibrate)
heap_mib, predicted, failed, committed = {}, {}, {}, {}
profiles_dir = tempfile.mkdtemp(prefix="planner_cpu_profiles_")
# Rounds alternate the layouts (the machine drifts by 10-40% over minutes): each layout's figure is
# the median of its rounds.
for r in range(rounds):
    profile = {}  # committed profile -> this round's, with --calibrate
    round_dir = os.path.join(profiles_dir, str(r))
    os.makedirs(round_dir)
    if recalibrate and not calibrate_each:
        profile = calibrate_profiles(round_dir)
    for i, (name, cfg, sets, ranks, threads, hw) in enumerate(selected):
        if name in failed:
            continue
        if calibrate_each:
            layout_dir = os.path.join(round_dir, str(i))
            os.makedirs(layout_dir)
            profile = calibrate_profiles(layout_dir, (hw,))
        env = dict(os.environ, OMP_NUM_THREADS=str(threads), OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
        setargs = sum((["--set", s] for s in sets), [])
        bench = [tessel, "bench", cfg, "--steps", "5", "--warmup", "2"] + setargs
        if ranks > 1:
            bench = ["mpirun", "--oversubscribe", "--mca", "mpi_yield_when_idle", "1", "-np", str(ranks),
                     "-x", "OMP_NUM_THREADS", "-x", "LD_PRELOAD"] + bench
        try:
            measured = last_json(bench, dict(env, LD_PRELOAD=os.path.abspath(preload)))
            if name not in predicted or recalibrate:
                predicted[name] = last_json([tessel, "plan", "estimate", cfg, "--hardware", profile.get(hw, hw),
                                             "--world", str(ranks)] + setargs, env)
                predicted_ms[name].append(predicted[name]["step_ms"])
            if recalibrate and name not in committed:  # the committed profile's, for comparison
                committed[name] = last_json([tessel, "plan", "estimate", cfg, "--hardware", hw, "--world", str(ranks)]
                                            + setargs, env)["step_ms"]
        except RuntimeError as e:
            failed[name] = str(e)
            continue
        steps_ms[name].append(1e3 * measured["step_s"])
        # The most any rank's heap grew, as the plan's peak is the most any rank holds (rank 0's
        # alone before the bench reported it: under zero-bubble schedules the last stage holds more).
        heap = measured.get("heap_peak_growth_bytes_max_over_ranks", measured.get("heap_peak_growth_bytes"))
        heap_mib.setdefault(name, heap / 2**20 if heap else None)

rows = []
print(f"{'layout':46} {'measured ms':>11} {'predicted':>9} {'err':>7} | {'heap MiB':>8} {'reserve':>9} {'err':>7} {'in use':>8}"
      + ("  rounds (ms)" if rounds > 1 else ""))
for name, cfg, sets, ranks, threads, hw in selected:
    if name in failed:
        print(f"{name:46} FAILED: {failed[name].strip().splitlines()[-1]}")
        rows.append({"layout": name, "error": failed[name]})
        continue
    t, tp = statistics.median(steps_ms[name]), statistics.median(predicted_ms[name])
    # The pool's reserve (in use plus its free blocks): what the process holds; the in-use peak beside it.
    mp = (predicted[name].get("peak_reserved_memory_gib") or predicted[name]["peak_memory_gib"]) * 1024
    mu = predicted[name]["peak_memory_gib"] * 1024
    hm = heap_mib[name]
    et = tp / t - 1
    em = mp / hm - 1 if hm else None
    emu = mu / hm - 1 if hm else None
    print(f"{name:46} {t:11.1f} {tp:9.1f} {100 * et:+6.1f}% | " +
          (f"{hm:8.1f} {mp:9.1f} {100 * em:+6.1f}% {mu:8.1f}" if hm else f"{'n/a':>8} {mp:9.1f}") +
          ("  " + " ".join(f"{x:.1f}" for x in steps_ms[name]) if rounds > 1 else "") +
          (" predicted " + " ".join(f"{x:.1f}" for x in predicted_ms[name]) if recalibrate and rounds > 1 else "") +
          (f" committed profile {committed[name]:.1f} ({100 * (committed[name] / t - 1):+.1f}%)" if recalibrate else ""))
    rows.append({"layout": name, "ranks": ranks, "threads": threads, "measured_ms": t, "rounds_ms": steps_ms[name],
                 "predicted_ms": tp, "rounds_predicted_ms": predicted_ms[name],
                 "committed_profile_ms": committed.get(name), "time_error": et, "heap_mib": hm, "predicted_mib": mu, "memory_error": emu,
                 "predicted_reserve_mib": mp, "reserve_error": em})
ok = [r for r in rows if "error" not in r]
if ok:
    te = [r["time_error"] for r in ok]
    print(f"time error {100 * min(te):+.1f}% .. {100 * max(te):+.1f}% over {len(ok)} layouts "
          f"(within 10%: {sum(abs(e) <= 0.10 for e in te)})")
    if recalibrate:
        tc = [r["committed_profile_ms"] / r["measured_ms"] - 1 for r in ok]
        print(f"with the committed profiles: {100 * min(tc):+.1f}% .. {100 * max(tc):+.1f}% "
              f"(within 10%: {sum(abs(e) <= 0.10 for e in tc)})")
    rm = [r["reserve_error"] for r in ok if r["reserve_error"] is not None]
    print(f"memory (reserve) error {100 * min(rm):+.1f}% .. {100 * max(rm):+.1f}% (within 3%: {sum(abs(e) <= 0.03 for e in rm)})")
print(json.dumps({"rows": rows}))
