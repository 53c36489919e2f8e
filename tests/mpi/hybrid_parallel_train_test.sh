#!/usr/bin/env bash
# Hybrid parallelism end to end: `mpirun -np N tessel train` with every kind of model parallelism
# (pipeline stages and virtual stages, tensor parallelism with and without sequence parallelism,
# context parallelism) combined with data parallelism and the distributed optimizer gives the
# single-process run's losses, gradient norms and final parameters over 5 steps on the same global
# batch, fp32 (tolerances in compare_runs.py). Llama with GQA, 8 layers; GPT-2 with biases, learned
# positions and a tied head (so under pipelining the first and last stages each hold the embedding
# and sum its gradient over the embedding group).
# Then checkpoints: a pp2 run stopped at step 3 resumes on pp2 bit-exactly, and resumes in one process.
# Usage: hybrid_parallel_train_test.sh TESSEL_BINARY CONFIG_DIR MPIRUN
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/prelude.sh"
source "$HERE/train_runs.sh"

single llama
single gpt2 "${GPT2[@]}"
run 2 pp2 --set $PP=2
compare llama pp2
run 4 pp4-vpp2 --set $PP=4 --set $VPP=2
compare llama pp4-vpp2
run 2 pp2-uneven --set $PP=2 --set parallel.pipeline_layers_per_stage=5,3
compare llama pp2-uneven
run 4 tp2-pp2 --set $TP=2 --set $PP=2
compare llama tp2-pp2
run 8 tp2-pp2-dp2 --set $TP=2 --set $PP=2
grep -q "tp 2 x cp 1 x dp 2 x pp 2" tp2-pp2-dp2.log
compare llama tp2-pp2-dp2
# Overlapped: each stage reduces its gradient buckets to their owners during its W ops.
run 4 pp2-dp2-zero --set $PP=2 --set parallel.use_distributed_optimizer=true --set parallel.overlap_grad_reduce=true \
  --set parallel.overlap_param_gather=true
compare llama pp2-dp2-zero
run 4 tp2-dp2-zero --set $TP=2 --set parallel.use_distributed_optimizer=true
compare llama tp2-dp2-zero
run 2 gpt2-pp2 "${GPT2[@]}" --set $PP=2
compare gpt2 gpt2-pp2
# The tied embedding's two stages sum their gradients after backward: the overlap cannot apply, says so.
run 4 gpt2-pp2-dp2-zero "${GPT2[@]}" --set $PP=2 --set parallel.use_distributed_optimizer=true \
  --set parallel.overlap_grad_reduce=true
grep -q "warning: parallel.overlap_grad_reduce=true has no effect here: the embedding is held by the first and last" \
  gpt2-pp2-dp2-zero.log
compare gpt2 gpt2-pp2-dp2-zero
# Sequence parallelism: norms and residuals on row shards, all-gather / reduce-scatter around the GEMMs.
run 2 tp2 --set $TP=2
compare llama tp2
run 2 tp2-sp --set $TP=2 --set $SP=true
compare llama tp2-sp
# 4 ranks, 2 key/value heads: each head replicated on 2 ranks, its gradient summed over them.
run 4 tp4-sp --set $TP=4 --set $SP=true
compare llama tp4-sp
run 4 gpt2-tp4-sp "${GPT2[@]}" --set $TP=4 --set $SP=true
compare gpt2 gpt2-tp4-sp
# Context parallelism: two load-balanced chunks of every sequence per rank, K/V around the ring.
run 2 cp2 --set $CP=2
compare llama cp2
run 4 tp2-cp2 --set $TP=2 --set $CP=2
compare llama tp2-cp2
run 4 cp2-dp2-zero --set $CP=2 --set parallel.use_distributed_optimizer=true --set parallel.overlap_grad_reduce=true
compare llama cp2-dp2-zero
run 2 gpt2-cp2 "${GPT2[@]}" --set $CP=2
compare gpt2 gpt2-cp2
run 8 gpt2-tp2-sp-cp2-pp2 "${GPT2[@]}" --set $TP=2 --set $SP=true --set $CP=2 --set $PP=2
compare gpt2 gpt2-tp2-sp-cp2-pp2
run 8 gpt2-tp2-pp2-vpp2-dp2 "${GPT2[@]}" --set $TP=2 --set $PP=2 --set $VPP=2
compare gpt2 gpt2-tp2-pp2-vpp2-dp2
# The distributed optimizer gathering the parameters chunk by chunk, layer by layer during the
# interleaved schedule's forwards, with the embedding tied across the stages.
run 4 gpt2-pp2-vpp2-dp2-zero "${GPT2[@]}" --set $PP=2 --set $VPP=2 --set parallel.use_distributed_optimizer=true \
  --set parallel.overlap_param_gather=true
compare gpt2 gpt2-pp2-vpp2-dp2-zero

# Checkpoints hold whole tensors gathered from every stage: stop at step 3, resume on pp2 (bit-exact
# with the uninterrupted pp2 run), and resume the same checkpoint in one process.
run 2 stop "${GPT2[@]}" --set $PP=2 --set train.exit_interval=3
cp -r stop/ckpt pp2-ckpt-at-3
run 2 stop "${GPT2[@]}" --set $PP=2
grep -q "resumed from checkpoint.dir stop/ckpt at step 3" stop.log
/usr/bin/python3 - <<'PY'
import json
def col(d):
    return [json.loads(l)["loss"] for l in open(d + "/metrics.jsonl") if '"loss"' in l]
assert col("stop") == col("gpt2-pp2"), (col("stop"), col("gpt2-pp2"))
print("pp2 checkpoint: resumes on pp2 bit for bit")
PY
single one "${GPT2[@]}" --set checkpoint.dir=pp2-ckpt-at-3
grep -q "resumed from checkpoint.dir pp2-ckpt-at-3 at step 3" one.log
compare --resumed gpt2 one --from-step 3

# A layout that does not fit fails on every rank with the reason.
if launch 2 bad --set $PP=2 --set parallel.pipeline_layers_per_stage=4,3; then echo "expected a failure"; exit 1; fi
grep -q "pipeline_layers_per_stage sums to 7 layers, model.num_layers is 8" bad.log
if launch 4 bad --set $PP=4 --set $VPP=2 --set train.global_batch_size=6 --set train.micro_batch_size=1; then
  echo "expected a failure"; exit 1; fi
grep -q "multiple of the pipeline size" bad.log
if launch 4 bad --set $CP=4 --set model.seq_length=36; then echo "expected a failure"; exit 1; fi
grep -q "model.seq_length 36 must be divisible by 2 x parallel.context_parallel_size = 8" bad.log
echo "misconfigured layouts: refused with the reason"
