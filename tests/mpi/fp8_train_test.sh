#!/usr/bin/env bash
# FP8 training under data and tensor parallelism (with sequence parallelism) against the FP8
# single-process run, for each recipe (delayed, current, block), fp32 compute, 5 steps; tolerances in
# compare_runs.py --fp8. The model's shards are multiples of 128 (MHA, hidden 256, ffn 512), so
# block-scaling tiles and blocks are the same under tp2 as in one process. Delayed scaling under expert
# parallelism reduces each expert's amax with its own. Then resumption: a delayed-
# scaling run stopped at step 3 resumes (amax histories and scales from the checkpoint) bit for bit.
# Usage: fp8_train_test.sh TESSEL_BINARY CONFIG_DIR MPIRUN
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/prelude.sh"
COMMON=(--set train.train_iters=5 --set train.lr_warmup_iters=1 --set model.num_layers=2 --set model.hidden_size=256
        --set model.num_attention_heads=4 --set model.num_query_groups=4 --set model.ffn_hidden_size=512
        --set train.micro_batch_size=2 --set train.global_batch_size=8 --set precision.compute=fp32)
train() {  # np, log dir, extra args...
  local np=$1 dir=$2; shift 2
  if [ "$np" = 1 ]; then
    OMP_NUM_THREADS=${SINGLE_THREADS:-2} "$TESSEL" train "$CONFIGS/synthetic.yaml" "${COMMON[@]}" --set log.dir="$dir" "$@" > "$dir.log" 2>&1 ||
      { echo "run $dir failed"; exit 1; }
  else
    OMP_NUM_THREADS=${RANK_THREADS:-1} "$MPIRUN" --oversubscribe --mca mpi_yield_when_idle 1 -np "$np" "$TESSEL" train \
      "$CONFIGS/synthetic.yaml" "${COMMON[@]}" --set log.dir="$dir" "$@" > "$dir.log" 2>&1 ||
      { echo "run $dir ($np ranks) failed"; tail -5 "$dir.log"; exit 1; }
  fi
}
for recipe in delayed current block; do
  F=(--set precision.fp8.recipe=$recipe)
  train 1 $recipe "${F[@]}"
  train 2 $recipe-dp2 "${F[@]}"
  /usr/bin/python3 "$HERE/compare_runs.py" $recipe $recipe-dp2 --fp8
  train 2 $recipe-tp2-sp "${F[@]}" --set parallel.tensor_model_parallel_size=2 --set parallel.sequence_parallel=true
  /usr/bin/python3 "$HERE/compare_runs.py" $recipe $recipe-tp2-sp --fp8
done
train 4 delayed-tp2-dp2 --set precision.fp8.recipe=delayed --set parallel.tensor_model_parallel_size=2
/usr/bin/python3 "$HERE/compare_runs.py" delayed delayed-tp2-dp2 --fp8
# DualPipe: each stage's two copies (pipeline ranks r and P-1-r) run half of the micro-batches each and
# take the max of their amaxes, so the step-1 amax of every tensor is the single run's (max is exact).
train 1 delayed-ck --set precision.fp8.recipe=delayed --set checkpoint.dir=delayed-ck/ckpt
train 2 delayed-pp2-dualpipe --set precision.fp8.recipe=delayed --set parallel.pipeline_model_parallel_size=2 \
  --set parallel.pipeline_schedule=dualpipe --set checkpoint.dir=delayed-pp2-dualpipe/ckpt
/usr/bin/python3 "$HERE/compare_runs.py" delayed-ck delayed-pp2-dualpipe --fp8
/usr/bin/python3 "$HERE/compare_runs.py" --fp8-amax --dense delayed-ck delayed-pp2-dualpipe

# Delayed scaling with expert parallelism: a routed expert's amax is reduced over the ranks holding
# that expert, not with other experts' at the same slot. The step-1 amax of every tensor (the same
# forward and backward up to summation order) equals the single run's.
MOE=(--set precision.fp8.recipe=delayed --set model.arch=mixtral --set model.num_experts=4 --set model.moe_router_topk=2
     --set model.moe_ffn_hidden_size=256)
train 1 moe "${MOE[@]}" --set checkpoint.dir=moe/ckpt
train 2 moe-ep2 "${MOE[@]}" --set parallel.expert_model_parallel_size=2 --set checkpoint.dir=moe-ep2/ckpt
/usr/bin/python3 "$HERE/compare_runs.py" --fp8-amax moe moe-ep2
# Current scaling with MoE under tp2 + sp: split experts (every rank runs every expert on the gathered
# copies) reduce their amaxes over the group; replicated experts (each rank routes its own rows, so an
# expert may run on one rank only) take per-rank scales and must not wait on a collective.
train 1 moe-current "${MOE[@]}" --set precision.fp8.recipe=current
TPSP=(--set precision.fp8.recipe=current --set parallel.tensor_model_parallel_size=2 --set parallel.sequence_parallel=true)
train 2 moe-current-tp2-sp "${MOE[@]}" "${TPSP[@]}"
/usr/bin/python3 "$HERE/compare_runs.py" moe-current moe-current-tp2-sp --fp8 --step1 1e-4
# 16 experts, top-1, 8 rows per rank: most experts get no row on one rank and some on the other.
SPARSE=(--set model.num_experts=16 --set model.moe_router_topk=1 --set model.seq_length=16 --set train.micro_batch_size=1)
train 1 moe-sparse "${MOE[@]}" "${SPARSE[@]}" --set precision.fp8.recipe=current
train 2 moe-sparse-tp2-sp-replicated "${MOE[@]}" "${SPARSE[@]}" "${TPSP[@]}" --set parallel.expert_tensor_parallel_size=1
/usr/bin/python3 "$HERE/compare_runs.py" moe-sparse moe-sparse-tp2-sp-replicated --fp8 --step1 1e-2

# The checkpoint holds every rank's experts' scaling state: stopping at step 3 and resuming under ep2
# reproduces the uninterrupted run bit for bit.
EP2=("${MOE[@]}" --set parallel.expert_model_parallel_size=2 --set checkpoint.dir=ck-moe-part)
train 2 moe-part "${EP2[@]}" --set train.exit_interval=3
train 2 moe-part "${EP2[@]}"
grep -q "resumed from checkpoint.dir ck-moe-part at step 3" moe-part.log
/usr/bin/python3 - <<'PY'
import json
def col(d, k):
    return [json.loads(l)[k] for l in open(d + "/metrics.jsonl") if f'"{k}"' in l]
assert col("moe-ep2", "loss") == col("moe-part", "loss"), (col("moe-ep2", "loss"), col("moe-part", "loss"))
print("fp8 delayed, ep2: stop at step 3 and resume reproduces the uninterrupted run bit for bit")
PY

# Resume with delayed scaling: the checkpoint carries the amax histories and scales.
train 2 whole --set precision.fp8.recipe=delayed --set parallel.tensor_model_parallel_size=2 --set checkpoint.dir=ck-a
train 2 part --set precision.fp8.recipe=delayed --set parallel.tensor_model_parallel_size=2 --set checkpoint.dir=ck-b \
  --set train.exit_interval=3
test -f ck-b/step_00000003/state.safetensors
train 2 part --set precision.fp8.recipe=delayed --set parallel.tensor_model_parallel_size=2 --set checkpoint.dir=ck-b
grep -q "resumed from checkpoint.dir ck-b at step 3" part.log
/usr/bin/python3 - <<'PY'
import json
def col(d, k):
    return [json.loads(l)[k] for l in open(d + "/metrics.jsonl") if f'"{k}"' in l]
for k in ("loss", "grad_norm"):
    assert col("whole", k) == col("part", k), (k, col("whole", k), col("part", k))
print("fp8 delayed, tp2: stop at step 3 and resume reproduces the uninterrupted run bit for bit")
PY
