#!/usr/bin/env bash
# Data parallelism end to end: `mpirun -np N tessel train` gives the single-process run's losses
# (5 steps) and final parameters on the same global batch, for N = 2 and 4, with gradient
# accumulation and small buckets (many overlapping all-reduces), fp32. Tolerances: 1e-5 relative on
# losses (measured ~3e-9); 5e-4 relative to each tensor's largest value on parameters after 5 AdamW
# steps (measured ~7e-5): the gradients differ only in summation order (~1e-7), but Adam's update
# m / sqrt(v) is ~lr whatever a near-zero gradient's size, so such elements carry the difference up.
# Usage: data_parallel_train_test.sh TESSEL_BINARY CONFIG_DIR MPIRUN
source "$(dirname "$0")/prelude.sh"
COMMON=(--set train.train_iters=5 --set train.lr_warmup_iters=1 --set model.num_layers=2 --set model.tie_embeddings=true
        --set train.micro_batch_size=2 --set train.global_batch_size=16 --set precision.compute=fp32
        --set parallel.ddp_bucket_size=20000)

OMP_NUM_THREADS=${SINGLE_THREADS:-2} "$TESSEL" train "$CONFIGS/synthetic.yaml" "${COMMON[@]}" --set log.dir=single --set checkpoint.dir=ck-single > /dev/null
for run in dp2 dp4 zero2 zero4; do
  np=${run: -1}
  extra=()
  [[ $run == zero* ]] && extra=(--set parallel.use_distributed_optimizer=true)
  OMP_NUM_THREADS=${RANK_THREADS:-1} "$MPIRUN" --oversubscribe --mca mpi_yield_when_idle 1 -np $np "$TESSEL" train "$CONFIGS/synthetic.yaml" \
    "${COMMON[@]}" "${extra[@]}" --set log.dir=$run --set checkpoint.dir=ck-$run > $run.log
  grep -q "dp $np" $run.log
  /usr/bin/python3 - single $run ck-single/step_00000005/model.safetensors ck-$run/step_00000005/model.safetensors <<'PY'
import json, struct, sys
import numpy as np
def losses(d):
    return [json.loads(l)["loss"] for l in open(d + "/metrics.jsonl") if '"loss"' in l]
def tensors(p):
    with open(p, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]; h = json.loads(f.read(n)); data = f.read()
    return {k: np.frombuffer(data[v["data_offsets"][0]:v["data_offsets"][1]], dtype=np.float32)
            for k, v in h.items() if k != "__metadata__"}
a, b = losses(sys.argv[1]), losses(sys.argv[2])
assert len(a) == len(b) == 5, (len(a), len(b))
worst = max(abs(x - y) / abs(x) for x, y in zip(a, b))
ta, tb = tensors(sys.argv[3]), tensors(sys.argv[4])
assert ta.keys() == tb.keys()
worst_p = max(float(np.max(np.abs(ta[k] - tb[k])) / max(np.max(np.abs(ta[k])), 1e-30)) for k in ta)
print(f"{sys.argv[2]}: worst loss difference {worst:.2e}, worst parameter difference {worst_p:.2e} (relative)")
sys.exit(0 if worst < 1e-5 and worst_p < 5e-4 else 1)
PY
done

# The distributed optimizer's checkpoint holds the gathered moments: stopping at step 3 and resuming
# (again on 2 ranks) reproduces the uninterrupted run's losses bit for bit.
OMP_NUM_THREADS=${RANK_THREADS:-1} "$MPIRUN" --oversubscribe -np 2 "$TESSEL" train "$CONFIGS/synthetic.yaml" "${COMMON[@]}" \
  --set parallel.use_distributed_optimizer=true --set train.exit_interval=3 --set log.dir=zr --set checkpoint.dir=ck-zr > zr1.log
OMP_NUM_THREADS=${RANK_THREADS:-1} "$MPIRUN" --oversubscribe -np 2 "$TESSEL" train "$CONFIGS/synthetic.yaml" "${COMMON[@]}" \
  --set parallel.use_distributed_optimizer=true --set log.dir=zr --set checkpoint.dir=ck-zr > zr2.log
grep -q "resumed from checkpoint.dir ck-zr at step 3" zr2.log
/usr/bin/python3 -c "
import json
l = lambda d: [json.loads(x)['loss'] for x in open(d + '/metrics.jsonl') if '\"loss\"' in x]
assert l('zr') == l('zero2'), (l('zr'), l('zero2'))
print('zero2: resume at step 3 reproduces the uninterrupted losses bit for bit')"

# Checkpoints hold whole tensors: the ZeRO-1 checkpoint saved by 2 ranks at step 3 resumes in a
# single process, which continues like the single-process run (within summation-order noise).
mkdir ck-reshard && cp -r ck-zr/step_00000003 ck-reshard/ && echo step_00000003 > ck-reshard/latest
OMP_NUM_THREADS=${SINGLE_THREADS:-2} "$TESSEL" train "$CONFIGS/synthetic.yaml" "${COMMON[@]}" --set log.dir=reshard --set checkpoint.dir=ck-reshard > reshard.log
grep -q "resumed from checkpoint.dir ck-reshard at step 3" reshard.log
/usr/bin/python3 -c "
import json
l = lambda d: [json.loads(x)['loss'] for x in open(d + '/metrics.jsonl') if '\"loss\"' in x]
a, b = l('single')[3:], l('reshard')
assert len(b) == 2, b
worst = max(abs(x - y) / x for x, y in zip(a, b))
assert worst < 1e-5, worst
print(f'zero2 checkpoint resumed in one process: steps 4-5 within {worst:.1e} of the single-process run')"

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
