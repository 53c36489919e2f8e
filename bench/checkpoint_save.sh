#!/usr/bin/env bash
# Checkpoint save and load times, whole tensors gathered onto rank 0 (checkpoint.distributed=false)
# against every rank writing its own pieces (true), on the same run: llama-134m (bf16, fp32 masters
# and moments: 1.5 GB per checkpoint) under tp2 x dp2 with the distributed optimizer, 4 ranks of one
# thread. Each run saves after steps 1 and 2; then each checkpoint is resumed under dp4 (resharding).
# Prints the save and load lines and the bytes per file. The machine's page cache and disk decide
# the absolute times: compare the two formats measured in the same run.
# Usage: bench/checkpoint_save.sh [TESSEL_BINARY] [WORK_DIR]
set -euo pipefail
TESSEL=$(realpath "${1:-build/tessel}")
CONFIG=$(realpath "$(dirname "$0")/../configs/bench/llama-134m.yaml")
WORK=${2:-$(mktemp -d /tmp/tessel-ckpt-bench-XXXXXX)}
mkdir -p "$WORK" && cd "$WORK"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_WAIT_POLICY=passive OMP_NUM_THREADS=1
MPI=(mpirun --oversubscribe --mca mpi_yield_when_idle 1 -np 4)
ARGS=(--set train.lr_warmup_iters=1 --set train.micro_batch_size=1 --set train.global_batch_size=4
      --set model.seq_length=64 --set parallel.use_distributed_optimizer=true)
for distributed in false true; do
  rm -rf "ck-$distributed"
  echo "== checkpoint.distributed=$distributed"
  "${MPI[@]}" "$TESSEL" train "$CONFIG" "${ARGS[@]}" --set train.train_iters=2 --set checkpoint.interval=1 \
    --set parallel.tensor_model_parallel_size=2 --set log.dir="log-$distributed" --set checkpoint.dir="ck-$distributed" \
    --set checkpoint.distributed=$distributed | grep "saved checkpoint"
  ls -l "ck-$distributed/step_00000002" | awk 'NR > 1 {print "  " $5 " bytes  " $9}'
  "${MPI[@]}" "$TESSEL" train "$CONFIG" "${ARGS[@]}" --set train.train_iters=3 --set log.dir="log-$distributed" \
    --set checkpoint.dir="ck-$distributed" --set checkpoint.distributed=$distributed | grep -E "resumed|saved checkpoint"
done
