#!/usr/bin/env bash
# Does a pipeline schedule hide its transfers? Each point-to-point message is made to take DELAY_MS
# to move once both sides have posted it (TESSEL_TEST_P2P_DELAY_MS, a test-only switch of the MPI
# backend), and the step time of `mpirun -np 2 tessel train` (configs/synthetic.yaml, 8 layers,
# 1 thread per rank, median of the steps after the first) is measured with and without that delay,
# with parallel.overlap_p2p_comm off and on. The overlap hides the delay where the step grows by less
# than it does with the overlap off.
# Usage: bench/pipeline_overlap.sh [TESSEL] [DELAY_MS] [KINDS] [MICRO_BATCHES]
# REPEATS=R (environment): each cell the median of R runs, and the on / off ratio of the growths.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/overlap_table.sh"
TESSEL=${1:-$HERE/../build/tessel}
DELAY=${2:-1}
KINDS=${3:-"1f1b zb-h1 zb-v dualpipev"}
M=${4:-8}
run_steps() {  # kind overlap delay dir
  TESSEL_TEST_P2P_DELAY_MS=$3 mpirun -x TESSEL_TEST_P2P_DELAY_MS --oversubscribe --mca mpi_yield_when_idle 1 -np 2 \
    "$TESSEL" train "$HERE/../configs/synthetic.yaml" --set train.train_iters=8 --set model.num_layers=8 \
    --set train.micro_batch_size=1 --set train.global_batch_size="$M" --set parallel.pipeline_model_parallel_size=2 \
    --set parallel.pipeline_schedule="$1" --set parallel.overlap_p2p_comm="$2" --set log.dir="$4" \
    --set checkpoint.interval=0 --set checkpoint.dir="$4/ckpt"
}
overlap_table overlap_p2p_comm "$DELAY" "$KINDS"
