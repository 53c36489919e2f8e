#!/usr/bin/env bash
# Does DualPipe hide the MoE all-to-alls inside its F&B pairs? Every MoE dispatch/combine all-to-all
# and every pipeline message is made to take DELAY_MS (TESSEL_TEST_A2A_DELAY_MS: done no earlier than
# D after this rank started it; TESSEL_TEST_P2P_DELAY_MS: delivered D after both sides posted it;
# test-only switches of the MPI backend), and the step time of `mpirun -np 4 tessel train`
# (configs/deepseek-v3-tiny.yaml with every layer MoE and no MTP module, so that both passes of a pair
# have as many all-to-alls; pp 2 x ep 2, 1 thread per rank, median of the steps after the first) is
# measured with and without that delay, with the overlaps off and on
# (parallel.overlap_moe_expert_parallel_comm and parallel.overlap_p2p_comm together). The overlap
# hides the delay where the step grows by less than it does with the overlaps off.
# Usage: bench/moe_overlap.sh [TESSEL] [DELAY_MS] [KINDS] [MICRO_BATCHES_PER_RANK] [LAYERS]
# LAYERS (default 4): at pp 2 DualPipe's passes then run 2 layers each, DualPipeV's 1 (its V has 4
# chunks); 8 gives DualPipeV's passes DualPipe's 2 layers, so as much compute beside each transfer.
# REPEATS=R (environment): each cell the median of R runs, and the on / off ratio of the growths.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/overlap_table.sh"
TESSEL=${1:-$HERE/../build/tessel}
DELAY=${2:-5}
KINDS=${3:-"dualpipe dualpipev"}
M=${4:-16}
LAYERS=${5:-4}
run_steps() {  # kind overlap delay dir
  TESSEL_TEST_A2A_DELAY_MS=$3 TESSEL_TEST_P2P_DELAY_MS=$3 mpirun -x TESSEL_TEST_A2A_DELAY_MS -x TESSEL_TEST_P2P_DELAY_MS \
    --oversubscribe --mca mpi_yield_when_idle 1 -np 4 "$TESSEL" train "$HERE/../configs/deepseek-v3-tiny.yaml" \
    --set train.train_iters=6 --set train.lr_warmup_iters=1 --set model.num_layers=$LAYERS --set model.seq_length=64 \
    --set model.vocab_size=256 --set model.moe_first_dense_layers=0 --set model.mtp_num_layers=0 \
    --set data.path=synthetic --set precision.compute=fp32 --set train.micro_batch_size=1 \
    --set train.global_batch_size=$((2 * M)) --set parallel.pipeline_model_parallel_size=2 \
    --set parallel.expert_model_parallel_size=2 --set parallel.pipeline_schedule="$1" \
    --set parallel.overlap_moe_expert_parallel_comm="$2" --set parallel.overlap_p2p_comm="$2" \
    --set log.dir="$4" --set checkpoint.interval=0 --set checkpoint.dir="$4/ckpt"
}
overlap_table overlaps "$DELAY" "$KINDS"
