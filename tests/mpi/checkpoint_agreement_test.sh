#!/usr/bin/env bash
# Every rank must resume from the same checkpoint. Two ranks started in different working directories
# (MPMD launch) see different `checkpoint.dir ck`, as ranks without a shared file system would:
#  1. rank 0 finds a checkpoint at step 2, rank 1 none: every rank stops naming both ends;
#  2. rank 0's only checkpoint is damaged (cannot be read), rank 1 has none: the job stops with
#     rank 0's reason instead of hanging in the agreement's all-reduce.
# Usage: checkpoint_agreement_test.sh TESSEL_BINARY CONFIG_DIR MPIRUN
source "$(dirname "$0")/prelude.sh"
ARGS=(train "$CONFIGS/synthetic.yaml" --set model.num_layers=1 --set train.lr_warmup_iters=1 --set train.train_iters=4
      --set log.dir=run --set checkpoint.dir=ck)
mkdir a b
(cd a && OMP_NUM_THREADS=1 "$TESSEL" "${ARGS[@]}" --set train.train_iters=2 > first.log)
two_ranks() {  # rank 0 in a/, rank 1 in b/; returns the job's status
  OMP_NUM_THREADS=1 timeout 120 "$MPIRUN" --oversubscribe -np 1 -wdir "$WORK/a" "$TESSEL" "${ARGS[@]}" \
    : -np 1 -wdir "$WORK/b" "$TESSEL" "${ARGS[@]}" > "$1.log" 2>&1
}
status=0; two_ranks split || status=$?
[[ $status -ne 0 && $status -ne 124 ]] || { echo "split: expected a failure, got status $status"; cat split.log; exit 1; }
grep -q "the ranks loaded different checkpoints from checkpoint.dir 'ck' (from none to step 2)" split.log ||
  { echo "split: no agreement error"; cat split.log; exit 1; }
[[ ! -e a/ck/step_00000003 && ! -e b/ck/step_00000003 ]] || { echo "split: trained on"; exit 1; }

rm -f a/ck/step_00000002/optimizer.safetensors a/ck/step_00000001/optimizer.safetensors
status=0; two_ranks unreadable || status=$?
[[ $status -ne 0 && $status -ne 124 ]] || { echo "unreadable: expected a failure, got status $status"; cat unreadable.log; exit 1; }
grep -q "no valid checkpoint in 'ck'" unreadable.log || { echo "unreadable: no reason given"; cat unreadable.log; exit 1; }
echo "ranks that loaded different checkpoints, or could not load one, stop the job with the reason"
