#!/usr/bin/env python3
"""How much of the process's real heap the cpu allocator's accounting covers, and whether the dry
run predicts it, for the layouts of the device-seam issue (dense Llama and GPT-2, MoE,
DeepSeek-V3-tiny with MLA and MTP; tp, tp+sp, pp, interleaved pp, cp, ep, ZeRO-1, FP8, recompute).

Each layout runs `tessel bench` (2 warm-up + 3 measured steps) under bench/heap_peak, an allocation
interposer that counts every block the process holds from malloc by any path, independently of
tessel's allocator; 2-rank layouts under mpirun, rank 0's figures. Reported per layout: the
accounted peak in use and the pool's reserve (in use plus the free blocks the pool keeps) as shares
of the real heap growth, and the dry run's reserve for rank 0 after the same 5 steps
(`tessel dry-run --steps 5`) against the bench's. MoE layouts route for real in the bench and in
balance in the dry run: their difference is the routing's.

usage: bench/heap_coverage.py [BUILD_DIR] [--only NAME]   Last line: JSON."""
import json
import os
import sys

from tessel_runs import last_json, set_args

build = sys.argv[1] if len(sys.argv) > 1 and not sys.argv[1].startswith("--") else "build"
only = sys.argv[sys.argv.index("--only") + 1] if "--only" in sys.argv else None
tessel = os.path.join(build, "tessel")
preload = os.path.abspath(os.path.join(build, "libtessel_heap_peak.so"))
tiny, gpt2, moe, dsv3 = ("configs/bench/llama-tiny.yaml", "configs/bench/llama-tiny.yaml",
                         "configs/mixtral-tiny.yaml", "configs/deepseek-v3-tiny.yaml")
bf16 = ["precision.compute=bf16"]
gpt2_sets = ["model.arch=gpt2", "model.ffn_hidden_size=1024", "model.tie_embeddings=true"]
# (name, config, overrides, ranks)
layouts = [
    ("llama-tiny", tiny, [], 1),
    ("llama-tiny recompute", tiny, ["model.recompute=true"], 1),
    ("llama-tiny fp8 block", tiny, ["precision.fp8.recipe=block"], 1),
    ("llama-tiny fp8 delayed", tiny, ["precision.fp8.recipe=delayed"], 1),
    ("gpt2-tiny", gpt2, gpt2_sets, 1),
    ("mixtral-tiny", moe, [], 1),
    ("deepseek-v3-tiny (MLA, MoE, MTP)", dsv3, [], 1),
    ("llama-tiny dp2 ZeRO-1", tiny, bf16 + ["train.global_batch_size=16", "parallel.use_distributed_optimizer=true"], 2),
    ("llama-tiny tp2", tiny, bf16 + ["parallel.tensor_model_parallel_size=2"], 2),
    ("llama-tiny tp2 sp", tiny, bf16 + ["parallel.tensor_model_parallel_size=2", "parallel.sequence_parallel=true"], 2),
    ("llama-tiny pp2 1f1b", tiny, bf16 + ["parallel.pipeline_model_parallel_size=2", "train.micro_batch_size=2",
                                          "train.global_batch_size=16"], 2),
    ("llama-tiny pp2 interleaved vpp2", tiny, bf16 + ["model.num_layers=8", "parallel.pipeline_model_parallel_size=2",
                                                      "parallel.virtual_pipeline_model_parallel_size=2",
                                                      "train.micro_batch_size=2", "train.global_batch_size=16"], 2),
    ("llama-tiny cp2", tiny, bf16 + ["parallel.context_parallel_size=2"], 2),
    ("mixtral-tiny ep2", moe, ["parallel.expert_model_parallel_size=2", "train.global_batch_size=16"], 2),
]




rows = []
for name, config, overrides, ranks in layouts:
    if only and only not in name:
        continue
    env = dict(os.environ)
    bench = [tessel, "bench", config, "--steps", "3", "--warmup", "2"] + set_args(overrides)
    if ranks == 1:
        env.update(LD_PRELOAD=preload, OMP_NUM_THREADS="2")
    else:
        env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMP_NUM_THREADS="1")
        bench = ["mpirun", "-np", str(ranks), "--oversubscribe", "--mca", "mpi_yield_when_idle", "1",
                 "-x", f"LD_PRELOAD={preload}", "-x", "OMP_NUM_THREADS=1"] + bench
    b = last_json(bench, env)
    d = last_json([tessel, "dry-run", config, "--world", str(ranks), "--steps", "5"] + set_args(overrides), dict(os.environ))
    role = next(r for r in d["roles"] if 0 in r["ranks"])
    growth = b["heap_peak_growth_bytes"]
    row = {"layout": name, "ranks": ranks, "heap_growth_mb": growth / 1e6,
           "accounted_mb": b["accounted_peak_bytes"] / 1e6, "reserved_mb": b["accounted_peak_reserved_bytes"] / 1e6,
           "pool_free_mb": b["accounted_peak_reserved_bytes_by_category"]["pool_free"] / 1e6,
           "accounted_share": b["accounted_peak_bytes"] / growth, "reserved_share": b["accounted_peak_reserved_bytes"] / growth,
           "dry_run_reserved_mb": role["peak_reserved_bytes"] / 1e6,
           "dry_run_minus_bench_bytes": role["peak_reserved_bytes"] - b["accounted_peak_reserved_bytes"]}
    rows.append(row)
    print(f"{name}: heap {row['heap_growth_mb']:.2f} MB, accounted {100 * row['accounted_share']:.1f}%, "
          f"reserve {100 * row['reserved_share']:.1f}% (pool free {row['pool_free_mb']:.2f} MB), "
          f"dry run - bench reserve {row['dry_run_minus_bench_bytes']} B", flush=True)

print()
print("| layout | ranks | real heap growth MB | accounted in use / real | reserve (in use + pool free) / real | pool free MB | dry run's reserve - bench's |")
print("|---|---|---|---|---|---|---|")
for r in rows:
    diff = "0 (exact)" if r["dry_run_minus_bench_bytes"] == 0 else f"{r['dry_run_minus_bench_bytes'] / 1e6:+.2f} MB"
    print(f"| {r['layout']} | {r['ranks']} | {r['heap_growth_mb']:.2f} | {100 * r['accounted_share']:.1f}% | "
          f"**{100 * r['reserved_share']:.1f}%** | {r['pool_free_mb']:.2f} | {diff} |")
print(json.dumps(rows))
