#!/usr/bin/env bash
# Mixture of Experts, multi-head latent attention and multi-token prediction end to end: under every
# kind of parallelism (data, pipeline, tensor with split or replicated experts, sequence, context,
# expert, the distributed optimizer, and recompute) `mpirun -np N tessel train` gives the
# single-process run's losses, gradient norms, final parameters, auxiliary and MTP losses over 5 steps
# on the same global batch, fp32 (tolerances in compare_runs.py).
# Usage: moe_parallel_train_test.sh TESSEL_BINARY CONFIG_DIR MPIRUN
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/prelude.sh"
source "$HERE/train_runs.sh"

# Mixture of Experts (sigmoid router with bias balancing, sequence-wise balance loss, shared expert,
# a first dense layer): data, pipeline and context parallelism and ZeRO give the single run's.
MOE=(--set model.arch=mixtral --set model.num_layers=4 --set model.num_experts=4 --set model.moe_router_topk=2
     --set model.moe_router_score_function=sigmoid --set model.moe_router_enable_expert_bias=true
     --set model.moe_router_bias_update_rate=0.01 --set model.moe_shared_expert_intermediate_size=32
     --set model.moe_first_dense_layers=1 --set model.moe_router_load_balancing_type=seq_aux_loss
     --set model.moe_aux_loss_coeff=0.01)
single moe "${MOE[@]}"
run 2 moe-dp2 "${MOE[@]}"
compare moe moe-dp2
run 4 moe-pp2-dp2-zero "${MOE[@]}" --set $PP=2 --set parallel.use_distributed_optimizer=true
compare moe moe-pp2-dp2-zero
# Expert parallelism: each rank holds 4/ep experts; token copies travel by all-to-all(v).
EP=parallel.expert_model_parallel_size
run 2 moe-ep2 "${MOE[@]}" --set $EP=2
compare moe moe-ep2
run 4 moe-ep4 "${MOE[@]}" --set $EP=4
compare moe moe-ep4
run 4 moe-ep2-dp2 "${MOE[@]}" --set $EP=2
compare moe moe-ep2-dp2
run 4 moe-ep2-dp2-zero "${MOE[@]}" --set $EP=2 --set parallel.use_distributed_optimizer=true
compare moe moe-ep2-dp2-zero
# The same reducing each gradient bucket during backward (parallel.overlap_grad_reduce), unit by
# unit over each unit's group (optim/grad_reducer.h); without ZeRO (moe-ep2-dp2, moe-ep4) the
# buckets are all-reduced during backward that way too.
run 4 moe-ep2-dp2-zero-overlap-reduce "${MOE[@]}" --set $EP=2 --set parallel.use_distributed_optimizer=true \
  --set parallel.overlap_grad_reduce=true
compare moe moe-ep2-dp2-zero-overlap-reduce
# ZeRO under expert parallelism shards the replicated parameters over every data-parallel rank and
# the experts over the ranks holding the same experts (nn/flat_shard.h). With ep = dp = 2 no other
# rank holds a rank's experts: it keeps their state whole and shards the rest over both ranks.
run 2 moe-ep2-zero "${MOE[@]}" --set $EP=2 --set parallel.use_distributed_optimizer=true
compare moe moe-ep2-zero
# bf16 with sharded masters, so the compute copy and the fp32 copy are gathered region by region.
# ep2: with clipping off the update is the same arithmetic as without ZeRO (every sum over two ranks,
# a + b either way), so the losses agree bit for bit. ep2 x dp2: the replicated parameters' gradients
# sum over 4 ranks, by all-reduce without ZeRO and by reduce-scatter with it, whose reduction orders
# differ (OpenMPI's algorithms); bf16 rounding of the compute copy carries that on, so the losses
# agree within 1e-3 (measured: equal for 2 steps, then 1.5e-4 at most over 5).
BF16=(--set precision.compute=bf16 --set train.clip_grad=0 --set $EP=2)
run 2 moe-bf16-ep2 "${MOE[@]}" "${BF16[@]}"
run 2 moe-bf16-ep2-zero "${MOE[@]}" "${BF16[@]}" --set parallel.use_distributed_optimizer=true
run 4 moe-bf16-ep2-dp2 "${MOE[@]}" "${BF16[@]}"
run 4 moe-bf16-ep2-dp2-zero "${MOE[@]}" "${BF16[@]}" --set parallel.use_distributed_optimizer=true
# The same with the parameter all-gather overlapped with the next forward, unit by unit over each
# unit's group (optim/param_gather.h): it moves the same values, so the losses are those of the
# gather after the step, bit for bit (bf16: the compute and fp32 copies; fp32: the masters).
OVERLAP=(--set parallel.use_distributed_optimizer=true --set parallel.overlap_param_gather=true)
run 4 moe-bf16-ep2-dp2-zero-overlap "${MOE[@]}" "${BF16[@]}" "${OVERLAP[@]}"
run 4 moe-ep2-dp2-zero-overlap "${MOE[@]}" --set $EP=2 "${OVERLAP[@]}"
/usr/bin/python3 - <<'PY'
import json
l = lambda d: [json.loads(x)['loss'] for x in open(d + '/metrics.jsonl') if '"loss"' in x]
assert len(l('moe-bf16-ep2')) == 5 and l('moe-bf16-ep2-zero') == l('moe-bf16-ep2'), (l('moe-bf16-ep2-zero'), l('moe-bf16-ep2'))
ref, zero = l('moe-bf16-ep2-dp2'), l('moe-bf16-ep2-dp2-zero')
diff = max(abs(a - b) for a, b in zip(ref, zero))
assert len(ref) == 5 and len(zero) == 5 and diff <= 1e-3, (zero, ref)
for after, overlapped in (('moe-bf16-ep2-dp2-zero', 'moe-bf16-ep2-dp2-zero-overlap'),
                          ('moe-ep2-dp2-zero', 'moe-ep2-dp2-zero-overlap')):
    assert len(l(after)) == 5 and l(overlapped) == l(after), (overlapped, l(overlapped), l(after))
print(f'bf16 with ZeRO under expert parallelism (replicated parameters over dp, experts over the ranks holding them): '
      f'ep2 = without ZeRO bit for bit; ep2 x dp2 losses within {diff:.1e}; the overlapped parameter gather = '
      f'the gather after the step, bit for bit (bf16 and fp32)')
PY
run 4 moe-ep2-pp2 "${MOE[@]}" --set $EP=2 --set $PP=2
compare moe moe-ep2-pp2
# Under tensor parallelism the experts are split like the MLP (expert_tensor_parallel_size defaults
# to the tensor-parallel size) or replicated (1); with sequence parallelism each rank routes its rows
# (split experts: every rank's copies gathered), the balance losses sum each sequence's token counts
# over the group, the bias balancing its loads. The micro-batch-wise "aux_loss" and the z-loss too.
run 2 moe-tp2 "${MOE[@]}" --set $TP=2
compare moe moe-tp2
run 4 moe-ep2-tp2 "${MOE[@]}" --set $EP=2 --set $TP=2
compare moe moe-ep2-tp2
run 2 moe-tp2-sp "${MOE[@]}" --set $TP=2 --set $SP=true
compare moe moe-tp2-sp
run 2 moe-tp2-sp-replicated "${MOE[@]}" --set $TP=2 --set $SP=true --set parallel.expert_tensor_parallel_size=1
compare moe moe-tp2-sp-replicated
run 8 moe-ep2-tp2-sp-dp2 "${MOE[@]}" --set $EP=2 --set $TP=2 --set $SP=true
compare moe moe-ep2-tp2-sp-dp2
MOE_AUX=("${MOE[@]}" --set model.moe_router_load_balancing_type=aux_loss --set model.moe_z_loss_coeff=0.001)
single moe-aux "${MOE_AUX[@]}"
run 2 moe-aux-tp2-sp "${MOE_AUX[@]}" --set $TP=2 --set $SP=true
compare moe-aux moe-aux-tp2-sp
# Multi-head latent attention (low-rank query, compressed key/value, shared RoPE key): heads split
# under tensor parallelism, layers across pipeline stages; under sequence parallelism the latent
# projections run on row shards (the shared key's gradient reduce-scattered), under context
# parallelism RoPE takes the chunks' global positions and attention runs around the ring.
MLA=(--set model.arch=deepseek_v3 --set model.num_layers=2 --set model.q_lora_rank=24 --set model.kv_lora_rank=32
     --set model.qk_head_dim=16 --set model.qk_pos_emb_head_dim=8 --set model.v_head_dim=16)
single mla "${MLA[@]}"
run 2 mla-tp2 "${MLA[@]}" --set $TP=2
compare mla mla-tp2
run 2 mla-pp2 "${MLA[@]}" --set $PP=2
compare mla mla-pp2
run 2 mla-tp2-sp "${MLA[@]}" --set $TP=2 --set $SP=true
compare mla mla-tp2-sp
run 2 mla-cp2 "${MLA[@]}" --set $CP=2
compare mla mla-cp2
run 4 mla-tp2-cp2 "${MLA[@]}" --set $TP=2 --set $CP=2
compare mla mla-tp2-cp2
run 4 mla-tp2-sp-cp2 "${MLA[@]}" --set $TP=2 --set $SP=true --set $CP=2
compare mla mla-tp2-sp-cp2

# configs/deepseek-v3-tiny.yaml (MLA, dense then MoE layers with a shared expert, grouped sigmoid
# routing with bias balancing and the sequence-wise loss, one multi-token-prediction module), shrunk:
# data and expert parallelism give the single run's losses and parameters.
DS=(--set model.num_layers=3 --set model.seq_length=64 --set model.vocab_size=256 --set data.path=synthetic)
export CONFIG=$CONFIGS/deepseek-v3-tiny.yaml
single deepseek "${DS[@]}"
run 2 deepseek-dp2 "${DS[@]}"
compare deepseek deepseek-dp2
run 2 deepseek-ep2 "${DS[@]}" --set $EP=2
compare deepseek deepseek-ep2
run 4 deepseek-ep4 "${DS[@]}" --set $EP=4
compare deepseek deepseek-ep4
# Activation recompute with MoE layers: the second forward rebuilds the router's saved state without
# counting loads and auxiliary losses again.
run 2 deepseek-ep2-recompute "${DS[@]}" --set $EP=2 --set model.recompute=true
compare deepseek deepseek-ep2-recompute
# Everything at once: MLA, split experts, balance losses, MTP under tp2 + sp x cp2 (x ep2: 8 ranks).
run 4 deepseek-tp2-sp-cp2 "${DS[@]}" --set $TP=2 --set $SP=true --set $CP=2
compare deepseek deepseek-tp2-sp-cp2
run 8 deepseek-ep2-tp2-sp-cp2 "${DS[@]}" --set $TP=2 --set $SP=true --set $CP=2 --set $EP=2
compare deepseek deepseek-ep2-tp2-sp-cp2
# Multi-token prediction on the last pipeline stage, with its copy of the embedding.
run 4 deepseek-pp2-ep2 "${DS[@]}" --set $PP=2 --set parallel.pipeline_layers_per_stage=2,1 --set $EP=2
compare deepseek deepseek-pp2-ep2
# (compare checks its value: mtp_loss; here only that the last stage logged it at every step)
/usr/bin/python3 - <<'PY'
import json
n = sum('"mtp_loss"' in l for l in open("deepseek-pp2-ep2/metrics.jsonl"))
assert n == 5, f"deepseek-pp2-ep2 logged the MTP loss at {n} of 5 steps"
print("deepseek-pp2-ep2: the multi-token-prediction loss is logged from the last stage")
PY
unset CONFIG

# Under context parallelism a rank holds parts of each sequence: the balance losses sum the counts
# over the context-parallel ranks, the bias balancing its loads over data x context ranks.
run 2 moe-cp2 "${MOE[@]}" --set $CP=2
compare moe moe-cp2
run 4 moe-aux-tp2-sp-cp2 "${MOE_AUX[@]}" --set $TP=2 --set $SP=true --set $CP=2
compare moe-aux moe-aux-tp2-sp-cp2

# Multi-token prediction under context parallelism (the shifted targets taken on the whole sequences,
# then each rank's chunks) and sequence parallelism (the modules on row shards like the layers).
MTP=(--set model.mtp_num_layers=2 --set model.mtp_loss_scaling_factor=0.3)
single mtp "${MTP[@]}"
run 2 mtp-cp2 "${MTP[@]}" --set $CP=2
compare mtp mtp-cp2
run 2 mtp-tp2-sp "${MTP[@]}" --set $TP=2 --set $SP=true
compare mtp mtp-tp2-sp

