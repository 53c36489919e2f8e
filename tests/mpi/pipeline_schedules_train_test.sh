#!/usr/bin/env bash
# The zero-bubble and DualPipeV schedules end to end (issue 15): `mpirun -np N tessel train` with
# parallel.pipeline_schedule = zb-h1, zb-h2, zb-v, dualpipev or dualpipe gives the single-process run's losses,
# gradient norms and final parameters over 5 steps on the same global batch (8 micro-batches), fp32
# (tolerances in compare_runs.py). Deferred W's run after later micro-batches' B's, so each weight
# gradient is summed in micro-batch order either way; the V's bend (stage P-1 to P on one rank) hands
# its tensors over in place; under a V rank 0 holds both the embedding and the head, so a tied head
# needs no embedding group. Dense Llama at pp2 and pp4, GPT-2 with a tied head, DeepSeek-V3-tiny
# with expert parallelism and multi-token prediction, and the distributed optimizer reducing its
# buckets during each chunk's last W. Under DualPipe ranks r and P-1-r hold the same two stages: their
# gradients, expert loads and FP8 amaxes are summed (maxed) over the pair, and only the first saves.
# Usage: pipeline_schedules_train_test.sh TESSEL_BINARY CONFIG_DIR MPIRUN
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/prelude.sh"
source "$HERE/train_runs.sh"
KIND=parallel.pipeline_schedule

single llama
for kind in zb-h1 zb-h2 zb-v dualpipev dualpipe; do
  run 2 "llama-pp2-$kind" --set $PP=2 --set $KIND=$kind
  compare llama "llama-pp2-$kind"
  run 4 "llama-pp4-$kind" --set $PP=4 --set $KIND=$kind
  compare llama "llama-pp4-$kind"
done
# parallel.overlap_p2p_comm: receives posted one operation early, the same losses; and under the
# test-only transfer time (every message stamped and held back), still the same.
run 4 llama-pp4-dualpipev-overlap --set $PP=4 --set $KIND=dualpipev --set parallel.overlap_p2p_comm=true
compare llama llama-pp4-dualpipev-overlap
TESSEL_TEST_P2P_DELAY_MS=0.2 run 2 llama-pp2-zb-h1-overlap-delayed --set $PP=2 --set $KIND=zb-h1 \
  --set parallel.overlap_p2p_comm=true
compare llama llama-pp2-zb-h1-overlap-delayed
# Buckets reduced to their owners during each chunk's last W (not the last micro-batch's: deferred).
run 4 llama-pp2-dp2-zero-zb-v --set $PP=2 --set $KIND=zb-v --set parallel.use_distributed_optimizer=true \
  --set parallel.overlap_grad_reduce=true
compare llama llama-pp2-dp2-zero-zb-v

single gpt2 "${GPT2[@]}"
run 2 gpt2-pp2-zb-v "${GPT2[@]}" --set $PP=2 --set $KIND=zb-v
compare gpt2 gpt2-pp2-zb-v
run 4 gpt2-pp4-dualpipev "${GPT2[@]}" --set $PP=4 --set $KIND=dualpipev
compare gpt2 gpt2-pp4-dualpipev
run 4 gpt2-pp4-dualpipe "${GPT2[@]}" --set $PP=4 --set $KIND=dualpipe
compare gpt2 gpt2-pp4-dualpipe
# DualPipe with data parallelism and ZeRO-1: buckets reduce-scattered during backward, or one reduce-scatter
# after it; then the pair sums the shard both of its ranks own.
run 4 llama-pp2-dp2-zero-dualpipe --set $PP=2 --set $KIND=dualpipe --set parallel.use_distributed_optimizer=true \
  --set parallel.overlap_grad_reduce=true
compare llama llama-pp2-dp2-zero-dualpipe
run 4 llama-pp2-dp2-zero-dualpipe-after --set $PP=2 --set $KIND=dualpipe --set parallel.use_distributed_optimizer=true
compare llama llama-pp2-dp2-zero-dualpipe-after
# A DualPipe run stopped at step 3 resumes to the uninterrupted run's losses, bit for bit.
run 2 dualpipe-stop --set $PP=2 --set $KIND=dualpipe --set train.exit_interval=3
run 2 dualpipe-stop --set $PP=2 --set $KIND=dualpipe
/usr/bin/python3 - <<'PY'
import json
def col(d):
    return [json.loads(l)["loss"] for l in open(d + "/metrics.jsonl") if '"loss"' in l]
assert col("dualpipe-stop") == col("llama-pp2-dualpipe"), (col("dualpipe-stop"), col("llama-pp2-dualpipe"))
print("dualpipe: stopped at step 3 and resumed, the losses are the uninterrupted run's bit for bit")
PY
run 2 gpt2-pp2-zb-h1 "${GPT2[@]}" --set $PP=2 --set $KIND=zb-h1
compare gpt2 gpt2-pp2-zb-h1
# Data-parallel buckets fed during backward while the tied head adds to the embedding's gradient on
# the same rank (a V, DualPipe): the embedding's range is reported after the head chunk's last W.
run 4 gpt2-pp2-dp2-zb-v "${GPT2[@]}" --set $PP=2 --set $KIND=zb-v
compare gpt2 gpt2-pp2-dp2-zb-v
run 4 gpt2-pp2-dp2-dualpipe "${GPT2[@]}" --set $PP=2 --set $KIND=dualpipe
compare gpt2 gpt2-pp2-dp2-dualpipe

# DeepSeek-V3-tiny (MLA, MoE with a shared expert, one MTP module) with expert parallelism: MTP on the
# last stage (rank 0 under a V, with the embedding; rank P-1 otherwise, with its copy).
EP=parallel.expert_model_parallel_size
DS=(--set model.num_layers=4 --set model.seq_length=64 --set model.vocab_size=256 --set data.path=synthetic)
export CONFIG=$CONFIGS/deepseek-v3-tiny.yaml
single deepseek "${DS[@]}"
for kind in zb-h1 zb-v dualpipev dualpipe; do
  run 4 "deepseek-pp2-ep2-$kind" "${DS[@]}" --set $PP=2 --set $EP=2 --set $KIND=$kind
  compare deepseek "deepseek-pp2-ep2-$kind"
done
run 4 deepseek-pp2-ep2-dualpipev-overlap "${DS[@]}" --set $PP=2 --set $EP=2 --set $KIND=dualpipev \
  --set parallel.overlap_p2p_comm=true
compare deepseek deepseek-pp2-ep2-dualpipev-overlap
# parallel.overlap_moe_expert_parallel_comm: each F&B pair's F and B run interleaved at their MoE
# all-to-alls (core/paired_tasks.h), the B waiting for its input in its own first turn. Each pass
# makes the same calls in the same order as unfused, so the losses and gradient norms are the unfused
# run's bit for bit; with every all-to-all and pipeline message held back by the test-only transfer
# times, still the same.
run 4 deepseek-pp2-ep2-dualpipe-moe-overlap "${DS[@]}" --set $PP=2 --set $EP=2 --set $KIND=dualpipe \
  --set parallel.overlap_moe_expert_parallel_comm=true --set log.pipeline_trace=true
compare deepseek deepseek-pp2-ep2-dualpipe-moe-overlap
if grep -q "overlap_moe_expert_parallel_comm has no effect" deepseek-pp2-ep2-dualpipe-moe-overlap.log; then
  echo "deepseek-pp2-ep2-dualpipe-moe-overlap: warned that the overlap has no effect where it has"; exit 1
fi
TESSEL_TEST_A2A_DELAY_MS=0.3 TESSEL_TEST_P2P_DELAY_MS=0.3 run 4 deepseek-pp2-ep2-dualpipev-moe-overlap "${DS[@]}" \
  --set $PP=2 --set $EP=2 --set $KIND=dualpipev --set parallel.overlap_moe_expert_parallel_comm=true \
  --set parallel.overlap_p2p_comm=true --set log.pipeline_trace=true
compare deepseek deepseek-pp2-ep2-dualpipev-moe-overlap
/usr/bin/python3 - <<'PY'
import json
def col(d, key):
    return [json.loads(l)[key] for l in open(d + "/metrics.jsonl") if '"loss"' in l]
for kind in ("dualpipe", "dualpipev"):
    fused, plain = f"deepseek-pp2-ep2-{kind}-moe-overlap", f"deepseek-pp2-ep2-{kind}"
    for key in ("loss", "grad_norm"):
        assert col(fused, key) == col(plain, key), (kind, key, col(fused, key), col(plain, key))
# The pairs did run fused: in time, a turn of a pair's B is followed by a turn of its F before the
# pair's W (unfused, each pair runs F, B, W), on every rank.
spans = [e for e in json.load(open("deepseek-pp2-ep2-dualpipe-moe-overlap/pipeline_trace.json"))["traceEvents"]
         if e["ph"] == "X" and "made_by" not in e["args"]]  # the ops, not the transfers they made
for rank in sorted({e["tid"] for e in spans}):
    paired = sorted((e for e in spans if e["tid"] == rank and e["name"] in ("F", "B", "W") and e["args"]["pair"]),
                    key=lambda e: e["ts"])
    names = [e["name"] for e in paired]
    fused = [i for i in range(len(names) - 1) if names[i] == "B" and names[i + 1] == "F"]
    assert fused, f"rank {rank}: no F&B pair ran fused: {names[:12]}..."
# The trace shows the all-to-alls in flight while the other pass of their pair computes: on each rank's
# transfer track, an all-to-all made by one pass whose span holds a whole turn of the other pass.
events = json.load(open("deepseek-pp2-ep2-dualpipev-moe-overlap/pipeline_trace.json"))["traceEvents"]
tracks = {e["tid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
spans = [e for e in events if e["ph"] == "X"]
for rank in (0, 1):
    mine = [e for e in spans if tracks[e["tid"]] == f"rank {rank}"]
    moved = [e for e in spans if tracks[e["tid"]] == f"rank {rank} transfers"]
    assert moved and all(e["name"].endswith("all_to_all") and e["cat"] == "communication" for e in moved), moved[:3]
    over = [(t["args"]["made_by"], c["name"], c["args"]["mb"]) for t in moved for c in mine
            if c["name"] in ("F", "B") and c["args"]["pair"] and c["name"] != t["args"]["made_by"]
            and t["ts"] <= c["ts"] and c["ts"] + c["dur"] <= t["ts"] + t["dur"]]
    assert over, f"rank {rank}: no all-to-all in flight over the other pass's turn"
    # Each pass posts its own output's send as it ends: some fused pair's send_fwd of its F's output
    # (the last F turn before it, same micro-batch and chunk) comes before a turn of its B (before the
    # pair's W), so the transfer runs while the B still computes.
    ops = sorted((e for e in mine if e["name"] in ("F", "B", "W", "send_fwd")), key=lambda e: e["ts"])
    early = []
    for i, e in enumerate(ops):
        if e["name"] != "send_fwd" or not e["args"]["pair"]:
            continue
        f = next((x for x in reversed(ops[:i]) if x["name"] == "F"), None)
        if f is None or (f["args"]["mb"], f["args"]["chunk"]) != (e["args"]["mb"], e["args"]["chunk"]):
            continue
        rest = ops[i + 1:]
        until_w = rest[:next((j for j, x in enumerate(rest) if x["name"] == "W"), len(rest))]
        if any(x["name"] == "B" and x["args"]["pair"] for x in until_w):
            early.append(e["args"]["mb"])
    assert early, f"rank {rank}: no pair posted its F's send before its B's last turn"
    # The B waits for its input gradient in its own turn, after the F's first turn began, so the F
    # computes while that gradient is in flight: each fused pair's receive (recorded before the pair's
    # turns) starts after the first of its F's turns that follow it in the record.
    late_receives = 0
    for i, e in enumerate(mine):
        if e["name"] != "recv_bwd" or not e["args"]["pair"]:
            continue
        f = next((x for x in mine[i + 1:] if x["name"] in ("F", "W")), None)
        if f is not None and f["name"] == "F":  # a fused pair's turns (unfused, its W comes first)
            assert f["ts"] < e["ts"], f"rank {rank}: a fused pair waited for its B's input before its F began: {e}"
            late_receives += 1
    assert late_receives, f"rank {rank}: no fused pair's receive found"
    print(f"rank {rank}: {len(moved)} all-to-alls traced, {len(over)} turns of the other pass computed while one "
          f"was in flight; {len(early)} pairs posted their F's send while their B computed; {late_receives} B "
          f"inputs received after their F began")
print("overlap_moe_expert_parallel_comm: dualpipe and dualpipev give the unfused runs' losses and grad norms bit for "
      "bit, and the pairs ran fused")
PY
unset CONFIG

# Evaluation walks the stages as the schedule places them: the valid loss of one process.
EVAL=(--set train.train_iters=2 --set train.eval_interval=2 --set train.eval_iters=1)
single eval-single "${EVAL[@]}"
for kind in zb-v dualpipe; do
  run 4 "eval-$kind" "${EVAL[@]}" --set $PP=4 --set $KIND=$kind
  want=$(grep -o "valid loss [0-9.]*" eval-single.log); got=$(grep -o "valid loss [0-9.]*" "eval-$kind.log")
  [ -n "$want" ] && [ "$want" = "$got" ] || { echo "eval-$kind: '$got', one process: '$want'"; exit 1; }
done
echo "evaluation under zb-v and dualpipe (pp4): the single process's $want"

# log.pipeline_trace: the last step's timeline, every rank's spans in the order the schedule lists its
# operations (sends and receives included); `tessel schedule --costs-from` prices it.
run 2 traced --set $PP=2 --set $KIND=zb-v --set log.pipeline_trace=true
"$TESSEL" schedule --kind zb-v --pp 2 --micro-batches 8 --ops > zb-v-ops.txt
"$TESSEL" schedule --kind zb-v --pp 2 --micro-batches 8 --costs-from traced/pipeline_trace.json > traced-priced.txt
/usr/bin/python3 - <<'PY'
import json, re
spans = [e for e in json.load(open("traced/pipeline_trace.json"))["traceEvents"] if e["ph"] == "X"]
for line in open("zb-v-ops.txt"):
    m = re.match(r"rank (\d+): (.*)", line)
    if not m:
        continue
    rank = int(m.group(1))
    want = re.findall(r"(\w+)\((\d+),(\d+)\)", m.group(2))
    got = [(e["name"], str(e["args"]["mb"]), str(e["args"]["chunk"])) for e in spans if e["tid"] == rank]
    assert got == want, f"rank {rank}: traced {got[:6]}... against the schedule's {want[:6]}..."
    starts = [e["ts"] for e in spans if e["tid"] == rank]
    assert starts == sorted(starts), f"rank {rank}: spans out of time order"
priced = json.loads(open("traced-priced.txt").read().strip().splitlines()[-1])
assert priced["measured_makespan"] > 0 and priced["makespan"] > 0, priced
print("traced: every rank ran the zb-v schedule's operations in order; measured step "
      f"{priced['measured_makespan'] * 1e3:.1f} ms, predicted from its F/B/W {priced['makespan'] * 1e3:.1f} ms")
PY

# DualPipe needs an even pipeline.
if launch 3 dualpipe-odd --set $PP=3 --set $KIND=dualpipe --set model.num_layers=6; then
  echo "dualpipe on 3 stages trained: expected a refusal"; exit 1
fi
grep -q "parallel.pipeline_schedule dualpipe needs an even pipeline_model_parallel_size, got 3" dualpipe-odd.log ||
  { echo "dualpipe-odd: no reason given:"; tail -3 dualpipe-odd.log; exit 1; }
echo "pipeline schedules: every run matches the single-process run"
