#!/usr/bin/env bash
# Resilience end to end (docs/resilience.md): each injected fault on a multi-rank run, recovered, with
# the losses after recovery equal, bit for bit, to a run without the fault:
#   - a rewind (nan, spike) equals an uninterrupted run that skipped the same iterations
#     (train.skip_train_iteration_range): the restore brings back everything a step reads;
#   - a restart under `tessel launch` (kill, hang, sigterm, damaged checkpoints, disk-full) ends with
#     the uninterrupted run's losses: it resumed from the newest valid checkpoint, bit-exactly;
#   - a run that cannot recover (lr 1e9) stops with exit 65, its checkpoints good ones.
# Each case prints one line "ROW fault | layout | recovered | steps lost | seconds lost": docs/resilience.md's
# table; seconds lost = the faulty run's wall time less its fault-free reference's.
# Usage: resilience_test.sh TESSEL_BINARY CONFIG_DIR MPIRUN
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/prelude.sh"
source "$HERE/train_runs.sh"
COMMON+=(--set train.train_iters=10 --set model.num_layers=4 --set log.interval=1)
TP2PP2=(--set $TP=2 --set $PP=2)
EP=parallel.expert_model_parallel_size
check() { /usr/bin/python3 "$HERE/resilience_check.py" "$@" || exit 1; }
now() { date +%s.%N; }
seconds() { /usr/bin/python3 -c "print(f'{$2 - $1:.1f}')"; }
timed() {  # variable, command...: runs the command, sets the variable to its wall seconds
  local var=$1 t0 t1; shift
  t0=$(now); "$@"; t1=$(now)
  printf -v "$var" '%s' "$(seconds "$t0" "$t1")"
}
lost() { /usr/bin/python3 -c "print(f'{$2 - $1 - $3:.1f}')"; }  # t0 t1 reference
# Under the launcher: np, log dir, args... (its status is the launcher's).
supervised() {
  local np=$1 dir=$2; shift 2
  OMP_NUM_THREADS=1 "$TESSEL" launch --restart-delay 0.2 --max-restarts 2 -- "$MPIRUN" --oversubscribe \
    --mca mpi_yield_when_idle 1 -np "$np" "$TESSEL" train "$CONFIGS/synthetic.yaml" "${COMMON[@]}" \
    --set log.dir="$dir" --set checkpoint.dir="$dir/ckpt" "$@" > "$dir.log" 2>&1
}
expect_in() {  # file, text
  grep -qF -- "$2" "$1" || { echo "$1 does not say: $2"; tail -20 "$1"; exit 1; }
}
# Steps completed before the failure and not in the checkpoint the restart resumed from.
steps_lost() {
  /usr/bin/python3 - "$1" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
before = text.split("tessel launch: attempt 1 ended")[0]
done = [int(m) for m in re.findall(r"^step +(\d+)/", before, re.M)]
resumed = re.findall(r"resumed from checkpoint.dir \S+ at step (\d+)", text)
print(max(done, default=0) - (int(resumed[-1]) if resumed else 0))
PY
}

# 1. nan: rank 1's gradients poisoned at step 5; dp2 in bf16 with the distributed optimizer (sharded
# masters, parameters gathered during the next forward): the snapshot of step 3 is restored and
# iterations 4-5 skipped.
ZERO=(--set precision.compute=bf16 --set parallel.use_distributed_optimizer=true --set parallel.overlap_param_gather=true)
timed REF run 2 nan-ref "${ZERO[@]}" --set train.skip_train_iteration_range=4-5
t0=$(now)
run 2 nan "${ZERO[@]}" --set resilience.snapshot_interval=3 --inject nan@5:1
t1=$(now)
check event nan nonfinite 3 4 5
check same nan-ref nan --after 5
expect_in nan.log "rewind at step 5: a non-finite loss or gradient norm (nan) on ranks 0,1; restored step 3 from snapshot"
echo "ROW nan | dp2, bf16, distributed optimizer | yes: rewound to the in-memory snapshot | 2 | $(lost "$t0" "$t1" "$REF")"

# 1c (defined below, run here). The learning-rate factor of a rewind (rewind_lr_scale 0.5 at step 5)
# is saved in checkpoints: rank 1 killed at step 8 under the launcher, the restart resumes from step
# 6 at half rate and ends with the losses of the run that was not killed.
LR=(--set resilience.snapshot_interval=3 --set resilience.rewind_lr_scale=0.5 --set checkpoint.interval=2)
run 2 lr-ref "${LR[@]}" --inject nan@5:1
supervised 2 lr "${LR[@]}" --inject nan@5:1,kill@8:1 || { echo "lr: launch failed"; tail lr.log; exit 1; }
expect_in lr.log "resumed from checkpoint.dir lr/ckpt at step 6"
check same lr-ref lr --after 0

# 1b. The same rewind where a step changes more state: MoE with expert biases (aux-loss-free
# balancing) and FP8 delayed scaling (amax histories) under expert parallelism; and DualPipe at pp2,
# whose two ranks hold the same stages. There the NaN goes into the mirror's gradients after the
# pair's sum, whose values the norm does not count (the pair counts once) but whose NaN it carries:
# step 7 is flagged at once. The snapshot of step 6 was pending (a snapshot is kept once the step
# after it passes), so step 5's is restored and iterations 6-7 skipped.
MOE=(--set model.arch=mixtral --set model.num_experts=4 --set model.moe_router_topk=2
     --set model.moe_router_score_function=sigmoid --set model.moe_router_enable_expert_bias=true
     --set model.moe_router_bias_update_rate=0.01 --set model.moe_first_dense_layers=1
     --set precision.fp8.recipe=delayed --set $EP=2)
run 2 moe-ref "${MOE[@]}" --set train.skip_train_iteration_range=3-4
run 2 moe "${MOE[@]}" --set resilience.snapshot_interval=2 --inject nan@4:0
check event moe nonfinite 2 3 4
check same moe-ref moe --after 4
DUALPIPE=(--set $PP=2 --set parallel.pipeline_schedule=dualpipe)
run 2 dualpipe-ref "${DUALPIPE[@]}" --set train.skip_train_iteration_range=6-7
run 2 dualpipe "${DUALPIPE[@]}" --set resilience.snapshot_interval=1 --inject nan@7:1
check event dualpipe nonfinite 5 6 7
check same dualpipe-ref dualpipe --after 7

# 2. spike: the last stage's targets corrupted at step 7 under tp2 x pp2; the loss z-score detector
# fires. There is no snapshot; the checkpoint of step 6 was written but is dropped unpublished (the
# step after it was flagged), so the checkpoint of step 4 is loaded and iterations 5-7 skipped.
SPIKE=(--set resilience.loss_spike_zscore=3 --set resilience.spike_window=3 --set checkpoint.interval=2)
timed REF run 4 spike-ref "${TP2PP2[@]}" --set train.skip_train_iteration_range=5-7
t0=$(now)
run 4 spike "${TP2PP2[@]}" "${SPIKE[@]}" --inject spike@7:2,spike@7:3
t1=$(now)
check event spike loss_spike 4 5 7
check same spike-ref spike --after 7
echo "ROW spike | tp2 x pp2 | yes: rewound to the checkpoint of step 4 (that of step 6 dropped) | 3 | $(lost "$t0" "$t1" "$REF")"

# 2b. A restart goes on with what the detectors had learned (metadata.json "resilience"): stopped
# at step 6 and resumed, the run flags a spike at step 7 (every rank's targets corrupted) at once,
# where windows started afresh (not armed until they hold spike_window accepted steps) would have
# trained on it.
RESTART=(--set resilience.loss_spike_zscore=3 --set resilience.spike_window=3 --set checkpoint.interval=2)
run 2 windows "${RESTART[@]}" --set train.exit_interval=6
run 2 windows "${RESTART[@]}" --inject spike@7:0,spike@7:1
expect_in windows.log "resumed from checkpoint.dir windows/ckpt at step 6"
check event windows loss_spike 6 7 7

# The uninterrupted runs the restarts must reproduce.
timed TP2PP2_REF run 4 tp2pp2-ref "${TP2PP2[@]}" --set checkpoint.interval=2
timed DP2_REF run 2 dp2-ref --set checkpoint.interval=2

# 3. kill: rank 2 of 4 SIGKILLed as step 6 starts; mpirun ends the job, the launcher restarts it from
# the checkpoint of step 4 (published after step 5 passed).
t0=$(now)
supervised 4 kill "${TP2PP2[@]}" --set checkpoint.interval=2 --inject kill@6:2 || { echo "kill: launch failed"; tail kill.log; exit 1; }
t1=$(now)
expect_in kill.log "exit status 137"
expect_in kill.log "resumed from checkpoint.dir kill/ckpt at step 4"
check same tp2pp2-ref kill --after 0
echo "ROW kill | tp2 x pp2 | yes: restarted by tessel launch | $(steps_lost kill.log) | $(lost "$t0" "$t1" "$TP2PP2_REF")"

# 4. hang: rank 1 stops (SIGSTOP) as step 6 starts; rank 0's watchdog names it after 3 s, exits 76,
# and the launcher restarts the job.
t0=$(now)
supervised 2 hang --set checkpoint.interval=2 --set resilience.collective_timeout_s=3 --inject hang@6:1 ||
  { echo "hang: launch failed"; tail hang.log; exit 1; }
t1=$(now)
expect_in hang.log "has waited"
expect_in hang.log "rank 1 did not arrive: not responding"
expect_in hang.log "exit status 76 (a collective timed out)"
check same dp2-ref hang --after 0
echo "ROW hang | dp2 | yes: watchdog (3 s) named rank 1, restarted | $(steps_lost hang.log) | $(lost "$t0" "$t1" "$DP2_REF")"

# 5. sigterm (a preemption) to rank 1 at step 6: every rank saves step 6 and exits 75; restarted. The
# save of step 4 was written by a background thread (checkpoint.async_save): the stop waits for it.
t0=$(now)
supervised 2 sigterm --set checkpoint.interval=4 --set checkpoint.async_save=true --inject sigterm@6:1 || { echo "sigterm: launch failed"; tail sigterm.log; exit 1; }
t1=$(now)
expect_in sigterm.log "exit status 75 (stopped by a signal after saving)"
expect_in sigterm.log "resumed from checkpoint.dir sigterm/ckpt at step 6"
expect_in sigterm.log "saved checkpoint sigterm/ckpt/step_00000004, written in the background"
check same dp2-ref sigterm --after 0
echo "ROW sigterm | dp2, asynchronous saves | yes: saved, exit 75, restarted | $(steps_lost sigterm.log) | $(lost "$t0" "$t1" "$DP2_REF")"

# 6, 7. The newest checkpoint damaged (bytes flipped, or cut to half), then rank 1 killed: the restart
# finds the damage by its CRC or size, says so, and resumes from the one before. Distributed
# checkpoints.
for kind in corrupt truncate; do
  t0=$(now)
  supervised 2 "$kind" --set checkpoint.interval=2 --set checkpoint.distributed=true --inject "$kind-checkpoint@4,kill@6:1" ||
    { echo "$kind: launch failed"; tail "$kind.log"; exit 1; }
  t1=$(now)
  expect_in "$kind.log" "injected fault $kind-checkpoint on rank 0: damaged"
  expect_in "$kind.log" "resumed from checkpoint.dir $kind/ckpt at step 2"
  check same dp2-ref "$kind" --after 0
  echo "ROW $kind-checkpoint | dp2, distributed checkpoints | yes: the damaged step-4 checkpoint skipped, resumed from step 2 | $(steps_lost "$kind.log") | $(lost "$t0" "$t1" "$DP2_REF")"
done

# 8. disk-full: rank 1's writes of the step-4 save fail (ENOSPC) under distributed checkpoints (with
# the distributed optimizer rank 1 writes its shard); the run stops, the checkpoint of step 2 stays
# the newest, and the restart resumes from it.
DIST=(--set checkpoint.interval=2 --set checkpoint.distributed=true --set parallel.use_distributed_optimizer=true)
timed ZERO_REF run 2 dp2-zero-ref "${DIST[@]}"
t0=$(now)
supervised 2 disk-full "${DIST[@]}" --inject disk-full@4:1 ||
  { echo "disk-full: launch failed"; tail disk-full.log; exit 1; }
t1=$(now)
expect_in disk-full.log "No space left on device"
expect_in disk-full.log "resumed from checkpoint.dir disk-full/ckpt at step 2"
check same dp2-zero-ref disk-full --after 0
echo "ROW disk-full | dp2, distributed checkpoints | yes: the failed save left step 2 newest, restarted | $(steps_lost disk-full.log) | $(lost "$t0" "$t1" "$ZERO_REF")"

# 9. lr 1e9: every step after the first diverges. Two rewinds within the window are allowed, the third
# stops the run with exit 65 and a checkpoint of the last good state; the checkpoints kept (keep 2)
# are good ones, and training on from them with a sane rate gives finite losses.
set +e
launch 2 diverge --set train.lr=1e9 --set resilience.snapshot_interval=1 --set resilience.max_rewinds=2 \
  --set checkpoint.interval=1 --set checkpoint.keep=2
status=$?
set -e
[ "$status" = 65 ] || { echo "diverge: exit status $status, expected 65"; tail diverge.log; exit 1; }
expect_in diverge.log "3 rewinds within 100 steps (resilience.max_rewinds = 2)"
run 2 diverge --set train.lr=3e-3 --set checkpoint.keep=2
/usr/bin/python3 - <<'PY' || exit 1
import json, math
losses = [r["loss"] for r in map(json.loads, open("diverge/metrics.jsonl")) if "loss" in r]
assert losses and all(math.isfinite(x) for x in losses), losses
print(f"diverge: every logged loss finite, the last {losses[-1]:.4f}")
PY
echo "ROW nan (lr 1e9) | dp2 | stopped (exit 65) after 2 rewinds, good checkpoints kept | - | -"
echo "every fault recovered"
