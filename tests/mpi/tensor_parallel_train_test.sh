#!/usr/bin/env bash
# Tensor parallelism end to end: `mpirun -np N tessel train` with tensor_model_parallel_size set
# (heads, MLP and vocabulary split; norms replicated) gives the single-process run's losses, gradient
# norms and final parameters over 5 steps on the same global batch, fp32: Llama with GQA at tp2 and
# tp2 x dp2, GPT-2 (biases, learned positions, tied head) at tp2 and tp4. Then checkpoints: a tp2 run
# stopped at step 3 resumes on tp2 bit-exactly, its checkpoint resumes in one process, and a
# single-process checkpoint resumes on tp2. Tolerances: compare_runs.py (K x the spread measured by
# measure_spread.sh).
# Usage: tensor_parallel_train_test.sh TESSEL_BINARY CONFIG_DIR MPIRUN
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/prelude.sh"
source "$HERE/train_runs.sh"
COMMON=(--set train.train_iters=5 --set train.lr_warmup_iters=1 --set model.num_layers=2
        --set train.micro_batch_size=2 --set train.global_batch_size=8 --set precision.compute=fp32)

single llama
single gpt2 "${GPT2[@]}"
run 2 llama-tp2 --set $TP=2
compare llama llama-tp2
run 4 llama-tp2dp2 --set $TP=2
grep -q "tp 2 x cp 1 x dp 2" llama-tp2dp2.log
compare llama llama-tp2dp2
run 2 gpt2-tp2 "${GPT2[@]}" --set $TP=2
compare gpt2 gpt2-tp2
run 4 gpt2-tp4 "${GPT2[@]}" --set $TP=4
compare gpt2 gpt2-tp4

# Checkpoints gather the shards into whole tensors: a tp2 run stopped at step 3 resumes on tp2
# bit-exactly, and its checkpoint resumes in a single process (and a single-process checkpoint on
# tp2) continuing like the single-process run.
run 2 stop "${GPT2[@]}" --set $TP=2 --set train.exit_interval=3
cp -r stop/ckpt tp2-ckpt-at-3
run 2 stop "${GPT2[@]}" --set $TP=2
grep -q "resumed from checkpoint.dir stop/ckpt at step 3" stop.log
/usr/bin/python3 - <<'PY'
import json
def col(d):
    return [json.loads(l)["loss"] for l in open(d + "/metrics.jsonl") if '"loss"' in l]
assert col("stop") == col("gpt2-tp2"), (col("stop"), col("gpt2-tp2"))
print("gpt2-tp2: stop at step 3 and resume on tp2 reproduces the uninterrupted losses bit for bit")
PY
single one "${GPT2[@]}" --set checkpoint.dir=tp2-ckpt-at-3
grep -q "resumed from checkpoint.dir tp2-ckpt-at-3 at step 3" one.log
compare --resumed gpt2 one --from-step 3
single one-stop "${GPT2[@]}" --set train.exit_interval=3
run 2 one-on-tp2 "${GPT2[@]}" --set $TP=2 --set checkpoint.dir=one-stop/ckpt
grep -q "resumed from checkpoint.dir one-stop/ckpt at step 3" one-on-tp2.log
compare --resumed gpt2 one-on-tp2 --from-step 3

# A group size that splits neither heads nor vocabulary is refused on every rank, with the reason.
if launch 3 bad --set $TP=3; then echo "expected a failure"; exit 1; fi
grep -q "tensor_model_parallel_size 3 must divide" bad.log
echo "tp3 with 4 heads: refused with the reason"
