#!/usr/bin/env bash
# `tessel bench` under mpirun reports the parallel figures, checked against the sizes and the ring
# formulas (../shared/REFERENCE.md): per-rank memory of parameters (falls as 1/(TP x PP), up to the
# replicated norms), gradients and Adam state (falls as 1/DP with the distributed optimizer); bytes per
# step of the data-, tensor- (with and without sequence parallelism), pipeline-, context-parallel and
# embedding groups; the share of data-parallel communication hidden behind backward is reported (a
# number in [0, 1], with and without the distributed optimizer); the operator table stays behind --profile
# although the profiler times the dp wait.
# Small Llama (configs/synthetic.yaml: 4 layers, hidden 128, GQA, vocab 512, seq 128, bf16), micro
# batch 2, global batch 8.
# Usage: bench_parallel_test.sh TESSEL_BINARY CONFIG_DIR MPIRUN
source "$(dirname "$0")/../mpi/prelude.sh"
bench() {  # name, np, extra args...
  local name=$1 np=$2; shift 2
  OMP_NUM_THREADS=1 "$MPIRUN" --oversubscribe --mca mpi_yield_when_idle 1 -np "$np" "$TESSEL" bench \
    "$CONFIGS/synthetic.yaml" --steps 2 --warmup 1 --set train.micro_batch_size=2 --set train.global_batch_size=8 \
    "$@" > "$name.log" 2>&1 || { cat "$name.log"; exit 1; }
}
TP=parallel.tensor_model_parallel_size PP=parallel.pipeline_model_parallel_size
bench dp2 2
bench zero2 2 --set parallel.use_distributed_optimizer=true
bench zero2-overlap 2 --set parallel.use_distributed_optimizer=true --set parallel.overlap_grad_reduce=true
bench tp2 2 --set $TP=2
bench pp2-tied 2 --set $PP=2 --set model.tie_embeddings=true
bench tp2-pp2 4 --set $TP=2 --set $PP=2
bench tp2-sp 2 --set $TP=2 --set parallel.sequence_parallel=true --set precision.compute=fp32
bench tp2-sp-bf16 2 --set $TP=2 --set parallel.sequence_parallel=true
bench cp2 2 --set parallel.context_parallel_size=2
bench pp2-vocab 2 --set $PP=2 --set model.vocab_size=8192
if grep -q gemm_fwd dp2.log; then echo "operator table printed without --profile"; exit 1; fi

/usr/bin/python3 - <<'PY'
import json
import os
def j(name):
    return json.loads(open(name + ".log").read().strip().splitlines()[-1])
def close(a, b, rel=1e-3):
    assert abs(a - b) <= rel * abs(b), (a, b)
L, d, V, T, B = 4, 128, 512, 128, 2          # layers, hidden, vocab, seq, micro batch
act = B * T * d * 4                            # one micro-batch's activations (or their gradient), fp32
dp2, zero2, tp2, pp2, tp2pp2 = j("dp2"), j("zero2"), j("tp2"), j("pp2-tied"), j("tp2-pp2")
zero2o = j("zero2-overlap")
sp, sp16, cp2 = j("tp2-sp"), j("tp2-sp-bf16"), j("cp2")
G, Dh = 2, 32                                  # key/value heads, head dim
P = dp2["params"]                              # the whole model on each data-parallel rank

# Memory per rank: fp32 masters + bf16 copy, fp32 grads, Adam m and v (fp32) of the owned range.
close(dp2["param_mb"], 6 * P / 1e6, 1e-9)
close(dp2["grad_mb"], 4 * P / 1e6, 1e-9)
close(dp2["optimizer_state_mb"], 8 * P / 1e6, 1e-9)
# ZeRO-1 in bf16 shards the fp32 masters too: the owned half, plus a whole fp32 copy of what computes
# in fp32 (the embedding table and the RMSNorm weights), and the whole bf16 copy.
owned, f32 = (P + 1) // 2, V * d + (2 * L + 1) * d
close(zero2["param_mb"], (4 * (owned + f32) + 2 * P) / 1e6, 1e-9)
assert zero2["grad_mb"] == dp2["grad_mb"]
assert abs(2 * zero2["optimizer_state_mb_max"] - dp2["optimizer_state_mb"]) <= 16e-6, (zero2, dp2)
replicated = (2 * L + 1) * d                   # RMSNorm weights, whole on every tensor-parallel rank
assert 0 <= 2 * tp2["params"] - P <= replicated, (tp2["params"], P)
r = tp2pp2["param_mb_max"] / dp2["param_mb"]
assert 0.25 <= r <= 0.25 + replicated / P, r   # 1/(TP x PP)
print(f"memory: params {dp2['param_mb']:.3f} MB/rank whole, x{tp2['param_mb'] / dp2['param_mb']:.4f} at tp2, "
      f"x{r:.4f} at tp2 x pp2; Adam state x{zero2['optimizer_state_mb_max'] / dp2['optimizer_state_mb']:.4f} with ZeRO-1 at dp2")

# Traffic per step and rank (ring, n = 2): all-reduce 2(n-1)/n = 1 x payload.
close(dp2["dp_comm_mb_per_step"], 4 * P / 1e6)          # one all-reduce of every fp32 gradient
# ZeRO-1, bf16: reduce-scatter 1/2 x 4P, all-gather of the bf16 copy 1 x 2P/2, and of the fp32 copy
# the part inside rank 0's shard (the embedding table and the first layers' norms).
rs_ag = 4 * P / 2 + 2 * P / 2
assert rs_ag + 4 * V * d <= zero2["dp_comm_mb_per_step"] * 1e6 <= rs_ag + 4 * f32, (zero2, rs_ag, f32)
# Overlapped, the buckets' reduces to their owners move what the one reduce-scatter moves.
close(zero2o["dp_comm_mb_per_step"], zero2["dp_comm_mb_per_step"], 1e-9)
micro = 8 // B                                           # micro-batches per step (dp 1)
close(tp2["tp_comm_mb_per_step"], micro * (4 * L + 2) * act / 1e6, 1e-2)  # 2 fwd + 2 bwd per layer, embedding, head
close(pp2["pp_comm_mb_per_step"], micro * act / 1e6)    # stage 0 sends each micro-batch's activations
close(pp2["pp_comm_mb_per_step_max"], micro * act / 1e6)  # stage 1 sends their gradients
close(pp2["embedding_comm_mb_per_step"], V * d * 4 / 1e6)  # the tied embedding's gradient
# Sequence parallelism turns each all-reduce into a reduce-scatter (1/2 x input) and an all-gather
# (1 x own half): the same bytes in fp32 (the all-reduces are fp32 in either precision); computing in
# bf16, the activation all-gathers move bf16, so fewer bytes.
close(sp["tp_comm_mb_per_step"], tp2["tp_comm_mb_per_step"], 1e-2)
assert 0.7 < sp16["tp_comm_mb_per_step"] / tp2["tp_comm_mb_per_step"] < 1, (sp16, tp2)
# Ring attention, per layer: (cp-1) K/V blocks forward, (cp-1) K/V + cp dK/dV blocks backward; a block
# is this rank's K and V, 2 x B x T/cp x G x Dh fp32. Gradients are summed over dp x cp.
block = 2 * B * (T // 2) * G * Dh * 4
close(cp2["cp_comm_mb_per_step"], micro * L * (3 * 2 - 2) * block / 1e6)
close(cp2["dp_cp_comm_mb_per_step"], 4 * P / 1e6)
print(f"traffic: dp {dp2['dp_comm_mb_per_step']:.3f} MB, tp {tp2['tp_comm_mb_per_step']:.3f} MB "
      f"({sp['tp_comm_mb_per_step']:.3f} with sp, {sp16['tp_comm_mb_per_step']:.3f} with sp in bf16), pp {pp2['pp_comm_mb_per_step']:.3f} MB, "
      f"embedding {pp2['embedding_comm_mb_per_step']:.3f} MB, cp {cp2['cp_comm_mb_per_step']:.3f} MB per step, as the formulas say")

# The JSON is rank 0's; the peaks also as the most any rank held. Data- and tensor-parallel ranks
# hold the same; with a vocabulary of 8,192 the last pipeline stage holds a micro-batch's fp32 logits
# (B x T x V x 4 = 8.4 MB) that the first does not, and more than the first's second micro-batch in
# flight. (The pool's reserve only outside strict mode: there blocks go back as the kernel queue
# reaches their free, so each rank's reserve depends on timing.)
strict = os.environ.get("TESSEL_DEVICE") == "cpu-strict"
for run in (dp2, tp2):
    assert run["accounted_peak_bytes_max_over_ranks"] == run["accounted_peak_bytes"], run
    if not strict:
        assert run["accounted_peak_reserved_bytes_max_over_ranks"] == run["accounted_peak_reserved_bytes"], run
vocab = j("pp2-vocab")
assert vocab["accounted_peak_bytes_max_over_ranks"] - vocab["accounted_peak_bytes"] >= B * T * 8192 * 4 / 2, vocab
assert strict or vocab["accounted_peak_reserved_bytes_max_over_ranks"] > vocab["accounted_peak_reserved_bytes"], vocab
assert vocab["heap_peak_growth_bytes_max_over_ranks"] is None, vocab  # no interposer here
print(f"pp2 with vocab 8192: rank 0 peaked at {vocab['accounted_peak_bytes'] / 1e6:.2f} MB, the most any rank held "
      f"{vocab['accounted_peak_bytes_max_over_ranks'] / 1e6:.2f} MB")

# DP communication hidden behind backward.
assert 0 <= dp2["dp_comm_hidden_share"] <= 1 and dp2["dp_comm_exposed_s"] >= 0 and dp2["dp_comm_blocking_s"] > 0, dp2
# The distributed optimizer reduces its buckets during backward too (to the ranks owning their parts).
assert 0 <= zero2["dp_comm_hidden_share"] <= 1 and zero2["dp_comm_exposed_s"] >= 0 and zero2["dp_comm_blocking_s"] > 0, zero2
assert 0 <= zero2o["dp_comm_hidden_share"] <= 1 and zero2o["dp_comm_exposed_s"] >= 0 and zero2o["dp_comm_blocking_s"] > 0, zero2o
assert tp2["dp_comm_hidden_share"] is None, tp2
assert 0 <= cp2["dp_comm_hidden_share"] <= 1, cp2  # gradients over dp x cp
print(f"dp2: {dp2['dp_comm_exposed_s']:.4f} s exposed of {dp2['dp_comm_blocking_s']:.4f} s blocking, "
      f"{100 * dp2['dp_comm_hidden_share']:.0f}% hidden")
PY
