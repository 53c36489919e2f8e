#!/usr/bin/env bash
# Data parallelism end to end: `mpirun -np N tessel train` gives the single-process run's losses
# (5 steps) and final parameters on the same global batch, for N = 2 and 4, with gradient
# accumulation and small buckets (many overlapping all-reduces), fp32, with and without the
# distributed optimizer (reduce-scatter after backward, or per-bucket reduces during backward);
# then resumption of its checkpoint on 2 ranks and in one process; then bf16 with sharded masters
# against plain data parallelism.
# Tolerances: compare_runs.py (K x the spread measured by measure_spread.sh).
# Usage: data_parallel_train_test.sh TESSEL_BINARY CONFIG_DIR MPIRUN
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/prelude.sh"
source "$HERE/train_runs.sh"
COMMON=(--set train.train_iters=5 --set train.lr_warmup_iters=1 --set model.num_layers=2 --set model.tie_embeddings=true
        --set train.micro_batch_size=2 --set train.global_batch_size=16 --set precision.compute=fp32
        --set parallel.ddp_bucket_size=20000)

single single
for layout in dp2 dp4 zero2 zero4; do
  np=${layout: -1}
  extra=()
  [[ $layout == zero* ]] && extra=(--set parallel.use_distributed_optimizer=true)
  run $np $layout "${extra[@]}"
  grep -q "dp $np" $layout.log
  compare single $layout
done
# The distributed optimizer reducing its buckets during backward, to the ranks owning their parts.
for np in 2 4; do
  run $np zero$np-overlap --set parallel.use_distributed_optimizer=true --set parallel.overlap_grad_reduce=true
  compare single zero$np-overlap
done

# The distributed optimizer's checkpoint holds the gathered moments: stopping at step 3 and resuming
# (again on 2 ranks) reproduces the uninterrupted run's losses bit for bit.
ZERO=(--set parallel.use_distributed_optimizer=true --set checkpoint.dir=zr/ckpt)
run 2 zr "${ZERO[@]}" --set train.exit_interval=3
cp -r zr/ckpt zr-ckpt-at-3
run 2 zr "${ZERO[@]}"
grep -q "resumed from checkpoint.dir zr/ckpt at step 3" zr.log
/usr/bin/python3 -c "
import json
l = lambda d: [json.loads(x)['loss'] for x in open(d + '/metrics.jsonl') if '\"loss\"' in x]
assert l('zr') == l('zero2'), (l('zr'), l('zero2'))
print('zero2: resume at step 3 reproduces the uninterrupted losses bit for bit')"

# Checkpoints hold whole tensors: the ZeRO-1 checkpoint saved by 2 ranks at step 3 resumes in a
# single process, which continues like the single-process run (within summation-order noise).
single reshard --set checkpoint.dir=zr-ckpt-at-3
grep -q "resumed from checkpoint.dir zr-ckpt-at-3 at step 3" reshard.log
compare --resumed single reshard --from-step 3

# bf16 with the distributed optimizer: each rank holds the fp32 masters of its shard only, updates
# them with its bf16 copy, and gathers the copies. With gradient clipping off the update is the same
# arithmetic in the same order as plain data parallelism (2 ranks: a+b either way), so the losses
# agree bit for bit; so do the continued losses of a checkpoint saved from the shards and resumed
# without the distributed optimizer, and the other way round.
BF16=(--set precision.compute=bf16 --set train.clip_grad=0)
ZERO=(--set parallel.use_distributed_optimizer=true)
run 2 bf16-dp2 "${BF16[@]}"
run 2 bf16-zero2 "${BF16[@]}" "${ZERO[@]}"
# Both overlaps: gradient buckets reduced during backward, parameters gathered layer by layer during
# the next forward (parallel.overlap_param_gather).
PGATHER=(--set parallel.overlap_param_gather=true)
run 2 bf16-zero2-overlap "${BF16[@]}" "${ZERO[@]}" --set parallel.overlap_grad_reduce=true "${PGATHER[@]}"
# FP8 (block scaling) quantises the bf16 copy, which the shards' gather rebuilds (here during the
# forward, each Linear's weights once its layer's bucket arrived): the same bits too.
run 2 bf16-fp8-dp2 "${BF16[@]}" --set precision.fp8.recipe=block
run 2 bf16-fp8-zero2 "${BF16[@]}" "${ZERO[@]}" --set precision.fp8.recipe=block "${PGATHER[@]}"
# Under tensor parallelism (tp2 x dp2), overlapped so that the data-parallel sums come before the
# tensor-parallel ones as in plain data parallelism: the same bits too.
run 4 bf16-tp2-dp2 "${BF16[@]}" --set $TP=2 --set train.train_iters=4
run 4 bf16-tp2-zero2 "${BF16[@]}" "${ZERO[@]}" --set parallel.overlap_grad_reduce=true --set $TP=2 --set train.train_iters=4 \
  "${PGATHER[@]}"
# DeepSeek-V3's structure (MLA's norms, the fp32 router, MoE, the MTP module): the same bits too.
# Untied, so that the MTP module adds to the output head's own gradient, with buckets (20,000
# elements) smaller than the head: dp2 all-reduces the head's bucket only once MTP has added to it.
DSV3=(--set train.train_iters=4 --set model.seq_length=64 --set train.global_batch_size=8 --set model.tie_embeddings=false)
CONFIG=$CONFIGS/deepseek-v3-tiny.yaml run 2 dsv3-dp2 "${BF16[@]}" "${DSV3[@]}"
CONFIG=$CONFIGS/deepseek-v3-tiny.yaml run 2 dsv3-zero2 "${BF16[@]}" "${DSV3[@]}" "${ZERO[@]}" "${PGATHER[@]}"
# precision.fp32_embedding off (Megatron-LM's layout): the table is looked up from the bf16 copy and,
# under the distributed optimizer, no rank keeps a whole fp32 copy of it: ZeRO = plain data
# parallelism bit for bit again, also under tp2 (the vocabulary-parallel lookup); the losses are not
# the fp32 lookup's.
BF16EMB=(--set precision.fp32_embedding=false)
run 2 bf16emb-dp2 "${BF16[@]}" "${BF16EMB[@]}"
run 2 bf16emb-zero2 "${BF16[@]}" "${ZERO[@]}" "${BF16EMB[@]}" "${PGATHER[@]}"
run 4 bf16emb-tp2-dp2 "${BF16[@]}" "${BF16EMB[@]}" --set $TP=2 --set train.train_iters=4
run 4 bf16emb-tp2-zero2 "${BF16[@]}" "${ZERO[@]}" "${BF16EMB[@]}" --set $TP=2 --set train.train_iters=4
# With the flag off under pipeline parallelism (the tied embedding's copy on the last stage, summed
# with the first stage's over the embedding group) and under pp2 x ZeRO-2, stopped at step 3 and
# resumed from its checkpoint: the single-process run's losses, as dp2's, within bf16's
# summation-order noise (gradients summed over ranks or stages in another order; measured
# 2026-12-05: at most 9e-7 and 6e-6 relative). These runs check that the stages and the resume work
# with the flag off; that it takes effect is checked above (the fp32 lookup's losses differ by only
# 1e-6 .. 2e-5 here, too close to that noise to tell apart).
single bf16emb-single "${BF16[@]}" "${BF16EMB[@]}"
run 2 bf16emb-pp2 "${BF16[@]}" "${BF16EMB[@]}" --set $PP=2
run 4 bf16emb-pp2-zero2 "${BF16[@]}" "${BF16EMB[@]}" "${ZERO[@]}" --set $PP=2 --set train.exit_interval=3
run 4 bf16emb-pp2-zero2 "${BF16[@]}" "${BF16EMB[@]}" "${ZERO[@]}" --set $PP=2 \
  --set checkpoint.dir=bf16emb-pp2-zero2/ckpt
grep -q "resumed from checkpoint.dir bf16emb-pp2-zero2/ckpt at step 3" bf16emb-pp2-zero2.log
# And under context parallelism (each rank looks up its own chunks of the sequence), also with the
# masters sharded over the 2 context-parallel ranks: the single-process losses as above, and the
# sharded run the unsharded one's bit for bit.
run 2 bf16emb-cp2 "${BF16[@]}" "${BF16EMB[@]}" --set $CP=2
run 2 bf16emb-cp2-zero "${BF16[@]}" "${BF16EMB[@]}" "${ZERO[@]}" --set $CP=2
run 2 bf16-zero2-at-3 "${BF16[@]}" "${ZERO[@]}" --set train.exit_interval=3
run 2 bf16-dp2-at-3 "${BF16[@]}" --set train.exit_interval=3
cp -r bf16-zero2-at-3/ckpt bf16-zero-ckpt-at-3  # each resumed run saves into its own copy
run 2 bf16-zero2-resumed "${BF16[@]}" "${ZERO[@]}" --set checkpoint.dir=bf16-zero2-at-3/ckpt "${PGATHER[@]}"
run 2 bf16-dp2-from-zero "${BF16[@]}" --set checkpoint.dir=bf16-zero-ckpt-at-3
run 2 bf16-zero2-from-dp "${BF16[@]}" "${ZERO[@]}" --set checkpoint.dir=bf16-dp2-at-3/ckpt
grep -q "resumed from checkpoint.dir bf16-zero-ckpt-at-3 at step 3" bf16-dp2-from-zero.log
grep -q "resumed from checkpoint.dir bf16-dp2-at-3/ckpt at step 3" bf16-zero2-from-dp.log
/usr/bin/python3 -c "
import json
l = lambda d: [json.loads(x)['loss'] for x in open(d + '/metrics.jsonl') if '\"loss\"' in x]
ref = l('bf16-dp2')
assert len(ref) == 5, ref
assert l('bf16-zero2') == ref, (l('bf16-zero2'), ref)
assert l('bf16-zero2-overlap') == ref, (l('bf16-zero2-overlap'), ref)
assert l('bf16-fp8-zero2') == l('bf16-fp8-dp2') and len(l('bf16-fp8-dp2')) == 5, (l('bf16-fp8-zero2'), l('bf16-fp8-dp2'))
assert l('dsv3-zero2') == l('dsv3-dp2') and len(l('dsv3-dp2')) == 4, (l('dsv3-zero2'), l('dsv3-dp2'))
assert l('bf16-tp2-zero2') == l('bf16-tp2-dp2') and len(l('bf16-tp2-dp2')) == 4, (l('bf16-tp2-zero2'), l('bf16-tp2-dp2'))
assert l('bf16emb-zero2') == l('bf16emb-dp2') and len(l('bf16emb-dp2')) == 5, (l('bf16emb-zero2'), l('bf16emb-dp2'))
assert l('bf16emb-dp2') != ref, 'precision.fp32_embedding=false changed nothing'
assert l('bf16emb-tp2-zero2') == l('bf16emb-tp2-dp2') and len(l('bf16emb-tp2-dp2')) == 4, (l('bf16emb-tp2-zero2'), l('bf16emb-tp2-dp2'))
assert l('bf16emb-tp2-dp2') != l('bf16-tp2-dp2'), 'precision.fp32_embedding=false changed nothing under tp2'
single_emb = l('bf16emb-single')
assert l('bf16emb-cp2-zero') == l('bf16emb-cp2'), (l('bf16emb-cp2-zero'), l('bf16emb-cp2'))
for d in ['bf16emb-dp2', 'bf16emb-pp2', 'bf16emb-pp2-zero2', 'bf16emb-cp2']:
    got = l(d)
    assert len(got) == 5 and all(abs(a - b) <= 1e-4 * abs(b) for a, b in zip(got, single_emb)), (d, got, single_emb)
for resumed in ['bf16-zero2-resumed', 'bf16-dp2-from-zero', 'bf16-zero2-from-dp']:
    assert l(resumed)[-2:] == ref[-2:], (resumed, l(resumed), ref)
print('bf16 zero2 (sharded masters, also with both overlaps, also FP8, also DeepSeek-V3-tiny, also under tp2, also with the embedding looked up in bf16, also under cp2) = dp2 bit for bit; its checkpoint resumes with and '
      'without ZeRO, bit for bit')"

# tessel bench under mpirun reports the data-parallel traffic: one all-reduce of every fp32 gradient
# per step, i.e. 2(n-1)/n x 4 bytes x parameters moved per rank by a ring.
OMP_NUM_THREADS=${RANK_THREADS:-1} "$MPIRUN" --oversubscribe -np 2 "$TESSEL" bench "$CONFIGS/synthetic.yaml" --steps 2 --warmup 1 \
  --set model.num_layers=2 --set train.micro_batch_size=2 --set train.global_batch_size=8 > bench.log
/usr/bin/python3 -c "
import json
j = json.loads(open('bench.log').read().strip().splitlines()[-1])
assert j['data_parallel'] == 2 and j['world_size'] == 2, j
want = 2 * (2 - 1) / 2 * 4 * j['params'] / 1e6
assert abs(j['dp_comm_mb_per_step'] - want) / want < 1e-3, (j['dp_comm_mb_per_step'], want)
print(f'bench dp2: {j[\"dp_comm_mb_per_step\"]:.3f} MB moved per rank per step (expected {want:.3f})')"

# A batch that does not split over the ranks fails fast on every rank, with the reason.
if OMP_NUM_THREADS=${RANK_THREADS:-1} "$MPIRUN" --oversubscribe -np 2 "$TESSEL" train "$CONFIGS/synthetic.yaml" "${COMMON[@]}" \
    --set train.global_batch_size=6 --set log.dir=bad > bad.log 2>&1; then
  echo "expected the misconfigured run to fail"; exit 1
fi
grep -q "must be a multiple of train.micro_batch_size 2 x data-parallel size 2" bad.log
echo "misconfigured data parallelism: refused with the reason"
