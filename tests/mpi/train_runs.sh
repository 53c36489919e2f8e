# Sourced by the end-to-end equivalence scripts after prelude.sh: 5-step fp32 runs on the same
# global batch, single-process (`single DIR ARGS...`) or under mpirun (`run NP DIR ARGS...`; `launch`
# returns the status instead of stopping, for layouts that must be refused), each
# with its metrics and checkpoint under DIR, and `compare REFERENCE RUN` (compare_runs.py). CONFIG
# overrides configs/synthetic.yaml; SINGLE_THREADS (2) and RANK_THREADS (1) set the OpenMP threads of
# the single-process run and of each rank (measure_spread.sh varies them). A failed run stops the
# script (the functions exit themselves: under `set -e` a failure inside `f && g` would not).
COMMON=(--set train.train_iters=5 --set train.lr_warmup_iters=1 --set model.num_layers=8
        --set train.micro_batch_size=1 --set train.global_batch_size=8 --set precision.compute=fp32)
GPT2=(--set model.arch=gpt2 --set model.num_query_groups=4 --set model.tie_embeddings=true)
single() {  # log dir, extra args...
  local dir=$1; shift
  OMP_NUM_THREADS=${SINGLE_THREADS:-2} "$TESSEL" train "${CONFIG:-$CONFIGS/synthetic.yaml}" "${COMMON[@]}" --set log.dir="$dir" \
    --set checkpoint.dir="$dir/ckpt" "$@" > "$dir.log" || { echo "single-process run $dir failed"; exit 1; }
}
launch() {  # np, log dir, extra args...: returns the run's status (layouts that must be refused)
  local np=$1 dir=$2; shift 2
  OMP_NUM_THREADS=${RANK_THREADS:-1} "$MPIRUN" --oversubscribe --mca mpi_yield_when_idle 1 -np "$np" "$TESSEL" train \
    "${CONFIG:-$CONFIGS/synthetic.yaml}" "${COMMON[@]}" --set log.dir="$dir" --set checkpoint.dir="$dir/ckpt" "$@" \
    > "$dir.log" 2>&1
}
run() { launch "$@" || { echo "run $2 ($1 ranks) failed:"; tail -5 "$2.log"; exit 1; }; }
compare() { /usr/bin/python3 "$HERE/compare_runs.py" "$@"; }
PP=parallel.pipeline_model_parallel_size VPP=parallel.virtual_pipeline_model_parallel_size
TP=parallel.tensor_model_parallel_size SP=parallel.sequence_parallel CP=parallel.context_parallel_size

