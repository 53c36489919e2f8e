#!/usr/bin/env bash
# Distributed checkpoints (checkpoint.distributed, tessel-checkpoint-2): every rank writes its own
# pieces, and any layout resumes them.
#  1. tp2 x pp2 x dp2 with the distributed optimizer trains 5 steps like one process (its final
#     checkpoint assembled from the pieces by compare_runs.py's own reader); stopped at step 3, its
#     checkpoint holds every element exactly once, over 8 rank files of similar size;
#  2. that checkpoint (saved with a CRC-32 per 256 bytes of each piece, so that ranks read pieces in
#     part) resumes on the same layout bit for bit, and under dp4 (ZeRO), pp4 and in one process with
#     the single-process run's continued losses, and under tp4 (also from the same step saved
#     without block CRC-32s: the same losses, and rank 0 read fewer bytes with them); consolidated
#     into whole tensors it resumes in one process bit for bit like the distributed form;
#  3. bf16 with sharded fp32 masters, and MoE under expert parallelism with the distributed
#     optimizer and expert biases: saved and resumed on the same layout bit for bit, and resumed
#     under another;
#  4. a rank killed in the middle of a save leaves the previous checkpoint the newest (the next run
#     removes the partial save and resumes from it); a rank file damaged after the save makes every
#     rank fall back to the previous checkpoint together.
# Usage: distributed_checkpoint_test.sh TESSEL_BINARY CONFIG_DIR MPIRUN
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/prelude.sh"
source "$HERE/train_runs.sh"
DIST=(--set checkpoint.distributed=true)
ZERO=(--set parallel.use_distributed_optimizer=true)
same_losses() {  # run run...: every run logged the same losses as the first, bit for bit
  /usr/bin/python3 - "$@" <<'PY'
import json, sys
col = lambda d: [json.loads(l)["loss"] for l in open(d + "/metrics.jsonl") if '"loss"' in l]
ref = col(sys.argv[1])
for run in sys.argv[2:]:
    assert col(run) == ref, (run, col(run), sys.argv[1], ref)
print(f"{', '.join(sys.argv[2:])}: the losses of {sys.argv[1]} bit for bit")
PY
}

# 1. Save under tp2 x pp2 x dp2 with ZeRO.
single llama
run 8 full "${ZERO[@]}" "${DIST[@]}" --set $TP=2 --set $PP=2
compare llama full
# Its pieces get a CRC-32 per 256 bytes (the default, 16 MiB, is more than these tiny pieces hold),
# so every resume below reads only the blocks of the pieces it needs.
TESSEL_TEST_CKPT_CRC_BLOCK_BYTES=256 run 8 stop "${ZERO[@]}" "${DIST[@]}" --set $TP=2 --set $PP=2 --set train.exit_interval=3
/usr/bin/python3 - "$HERE" stop/ckpt/step_00000003 <<'PY'
import json, os, sys
sys.path.insert(0, sys.argv[1])
from compare_runs import assemble_pieces
d = sys.argv[2]
md = json.load(open(f"{d}/metadata.json"))
assert md["format"] == "tessel-checkpoint-2" and md["parallel"]["tensor"] == 2 and md["parallel"]["pipeline"] == 2
for kind in ("model", "optimizer"):  # asserts every element is in exactly one piece
    assert assemble_pieces(d, kind), kind
blocked = [p for p in md["pieces"] if "crc32_blocks" in p]
assert blocked and all(p["crc32_blocks"]["bytes"] == 256 for p in blocked), "no pieces with block CRC-32s"
assert all(4 * (p["flat"][1] - p["flat"][0]) <= 256 or p["key"].startswith("state.")
           for p in md["pieces"] if "crc32_blocks" not in p)
sizes = {f: os.path.getsize(f"{d}/{f}") for f in sorted(md["files"])}
assert len(sizes) == 8, sizes
assert max(sizes.values()) < 1.5 * min(sizes.values()), sizes
print("tp2 x pp2 x dp2 ZeRO checkpoint: every element once; bytes per rank file:",
      ", ".join(f"{f.split('.')[0]} {b}" for f, b in sizes.items()))
PY

# 2. Resume it on the same layout, under dp4 with ZeRO, pp4, in one process, and consolidated.
for copy in dp4 pp4 tp4 one whole-src; do cp -r stop/ckpt at3-$copy; done
run 8 stop "${ZERO[@]}" "${DIST[@]}" --set $TP=2 --set $PP=2
grep -q "resumed from checkpoint.dir stop/ckpt at step 3" stop.log
same_losses full stop
run 4 dp4 "${ZERO[@]}" "${DIST[@]}" --set checkpoint.dir=at3-dp4
run 4 pp4 "${DIST[@]}" --set $PP=4 --set checkpoint.dir=at3-pp4
single one --set checkpoint.dir=at3-one
for r in dp4 pp4 one; do
  grep -q "resumed from checkpoint.dir at3-$r at step 3" $r.log
  compare --resumed llama $r --from-step 3
done
# Under tp4 from the block-CRC checkpoint, and from the same step saved without block CRC-32s: the
# single-process run's losses, the same from both, and rank 0 read less with the blocks (a quarter
# of the rows is half of a tp2 piece's rows for column-parallel weights and the embedding).
run 8 stop-whole "${ZERO[@]}" "${DIST[@]}" --set $TP=2 --set $PP=2 --set train.exit_interval=3
cp -r stop-whole/ckpt at3-tp4-whole
run 4 tp4 "${DIST[@]}" --set $TP=4 --set checkpoint.dir=at3-tp4
run 4 tp4-whole "${DIST[@]}" --set $TP=4 --set checkpoint.dir=at3-tp4-whole
compare --resumed llama tp4 --from-step 3
same_losses tp4 tp4-whole
/usr/bin/python3 - tp4.log tp4-whole.log <<'PY'
import re, sys
read = [int(re.search(r"(\d+) bytes of tensor data read by rank 0", open(f).read()).group(1)) for f in sys.argv[1:]]
assert read[0] < read[1], f"rank 0 read {read[0]} bytes with block CRC-32s, {read[1]} without"
print(f"tp4 resume: rank 0 read {read[0]} bytes with block CRC-32s, {read[1]} reading whole pieces")
PY
"$TESSEL" ckpt consolidate --ckpt at3-whole-src --out at3-whole > consolidate.log
grep -q "consolidated at3-whole-src/step_00000003 into at3-whole/step_00000003" consolidate.log
single one-whole --set checkpoint.dir=at3-whole
same_losses one one-whole

# 3. bf16 with sharded masters; MoE with expert parallelism, ZeRO and expert biases.
BF16=(--set precision.compute=bf16)
run 2 bf16-zero2 "${BF16[@]}" "${ZERO[@]}" "${DIST[@]}"
run 2 bf16-zero2-at3 "${BF16[@]}" "${ZERO[@]}" "${DIST[@]}" --set train.exit_interval=3
cp -r bf16-zero2-at3/ckpt bf16-at3-one
run 2 bf16-zero2-at3 "${BF16[@]}" "${ZERO[@]}" "${DIST[@]}"
same_losses bf16-zero2 bf16-zero2-at3
single bf16-one "${BF16[@]}" --set checkpoint.dir=bf16-at3-one
grep -q "resumed from checkpoint.dir bf16-at3-one at step 3" bf16-one.log
EP=parallel.expert_model_parallel_size
MOE=(--set model.arch=mixtral --set model.num_layers=4 --set model.num_experts=4 --set model.moe_router_topk=2
     --set model.moe_router_score_function=sigmoid --set model.moe_router_enable_expert_bias=true
     --set model.moe_router_bias_update_rate=0.01 --set model.moe_first_dense_layers=1)
single moe "${MOE[@]}"
run 4 moe-ep2 "${MOE[@]}" --set $EP=2 "${ZERO[@]}" "${DIST[@]}"
run 4 moe-ep2-at3 "${MOE[@]}" --set $EP=2 "${ZERO[@]}" "${DIST[@]}" --set train.exit_interval=3
cp -r moe-ep2-at3/ckpt moe-at3-one
run 4 moe-ep2-at3 "${MOE[@]}" --set $EP=2 "${ZERO[@]}" "${DIST[@]}"
same_losses moe-ep2 moe-ep2-at3
grep -q '"key": "state.model.layers.1.mlp.expert_bias"' moe-at3-one/step_00000003/metadata.json
single moe-one "${MOE[@]}" --set checkpoint.dir=moe-at3-one
compare --resumed moe moe-one --from-step 3

# 4. A rank killed mid-save, and a rank file damaged after one.
run 4 kill "${ZERO[@]}" "${DIST[@]}" --set $PP=2 --set train.exit_interval=2
status=0
TESSEL_INJECT_FAULT=checkpoint-save:1 launch 4 killed "${ZERO[@]}" "${DIST[@]}" --set $PP=2 --set checkpoint.dir=kill/ckpt ||
  status=$?
[[ $status -ne 0 ]] || { echo "the save with a killed rank succeeded"; exit 1; }
grep -q "TESSEL_INJECT_FAULT: rank 1 killed at checkpoint-save" killed.log
[[ $(cat kill/ckpt/latest) == step_00000002 && ! -e kill/ckpt/step_00000005 ]] ||
  { echo "the interrupted save was published"; ls kill/ckpt; exit 1; }
tmp=$(ls -d kill/ckpt/step_00000005.tmp-*)
# A requeued job starts once the killed one is gone: wait for its rank 0 (the save's PID) to exit.
for _ in $(seq 50); do
  state=$(awk '{print $3}' "/proc/${tmp##*.tmp-}/stat" 2> /dev/null || echo gone)
  [[ $state == gone || $state == Z ]] && break
  sleep 0.2
done
run 4 kill "${ZERO[@]}" "${DIST[@]}" --set $PP=2
grep -q "removed kill/ckpt/step_00000005.tmp-" kill.log
grep -q "resumed from checkpoint.dir kill/ckpt at step 2" kill.log
compare llama kill
echo "a rank killed mid-save: the previous checkpoint stayed the newest, and the run resumed from it"
# Damage to rank 3's file of step 5 that rank 3 alone reads: all fall back to step 2 together.
# (100 bytes from its end: in a moment's piece, which only rank 3 reads).
f=kill/ckpt/step_00000005/rank_00003.safetensors
printf '\x7f' | dd of=$f bs=1 seek=$(( $(stat -c %s $f) - 100 )) conv=notrunc 2> /dev/null
run 4 kill "${ZERO[@]}" "${DIST[@]}" --set $PP=2
[[ $(grep -c "skipping damaged checkpoint step_00000005: (rank 3) checkpoint 'kill/ckpt/step_00000005': rank_00003.safetensors is corrupted: its piece" kill.log) == 1 ]] ||
  { echo "expected rank 0 to report rank 3's reason once"; grep skipping kill.log; exit 1; }
grep -q "resumed from checkpoint.dir kill/ckpt at step 2" kill.log
compare llama kill
echo "a damaged rank file: every rank fell back to the previous checkpoint"
