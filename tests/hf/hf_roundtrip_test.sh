#!/usr/bin/env bash
# export-hf / import-hf end to end, per flavour (Llama with GQA and tied, GPT-2, Mixtral MoE): train a tiny model on a generated corpus, export it,
# compute its loss with the independent PyTorch implementation (hf_reference_loss.py) and compare
# with `tessel eval`; import the export and export again: the two Hugging Face files are identical.
# Usage: hf_roundtrip_test.sh TESSEL_BINARY CONFIG_DIR
set -euo pipefail
TESSEL=$1
CONFIGS=$2
HERE=$(cd "$(dirname "$0")" && pwd)
WORK=$(mktemp -d /tmp/tessel-hf-XXXXXX)
trap 'rm -rf "$WORK"' EXIT
cd "$WORK"
export OMP_NUM_THREADS=2 OMP_WAIT_POLICY=passive

words=(river stone light cloud north quiet ember field glass orbit)
for d in $(seq 0 299); do
  echo "${words[$((d % 10))]} ${words[$(((d * 3) % 10))]} ${words[$(((d * 7) % 10))]} $d"
  echo "${words[$(((d + 1) % 10))]} and ${words[$(((d + 5) % 10))]}"
  echo "%"
done > corpus.txt
"$TESSEL" train-tokenizer --input corpus.txt --doc-boundary percent --model-prefix tok --vocab-size 300 > /dev/null
"$TESSEL" preprocess --input corpus.txt --doc-boundary percent --tokenizer tok.model --output-prefix data/c > /dev/null

check() {  # name, extra --set flags
  local name=$1; shift
  "$TESSEL" train "$CONFIGS/synthetic.yaml" --set model.num_layers=2 --set model.hidden_size=32 \
    --set model.num_attention_heads=4 --set model.ffn_hidden_size=48 --set model.vocab_size=300 \
    --set model.seq_length=32 --set train.train_iters=4 --set train.lr_warmup_iters=1 \
    --set train.micro_batch_size=4 --set train.global_batch_size=4 --set precision.compute=fp32 \
    --set data.path=data/c --set data.tokenizer=tok.model --set log.dir="run-$name" \
    --set checkpoint.dir="ck-$name" "$@" > /dev/null
  "$TESSEL" export-hf --ckpt "ck-$name" --out "hf-$name" > /dev/null
  local ours theirs
  ours=$("$TESSEL" eval --ckpt "ck-$name" --data data/c --max-samples 16 | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["loss"])')
  theirs=$(/usr/bin/python3 "$HERE/hf_reference_loss.py" --model "hf-$name" --data data/c --seq 32 --max-samples 16)
  /usr/bin/python3 -c "
import sys
a, b = $ours, $theirs
rel = abs(a - b) / abs(b)
print(f'$name: tessel eval {a:.8f}, PyTorch on the export {b:.8f}, relative difference {rel:.2e}')
sys.exit(0 if rel < 1e-5 else 1)"
  "$TESSEL" import-hf --hf "hf-$name" --out "imported-$name" > /dev/null
  "$TESSEL" export-hf --ckpt "imported-$name" --out "again-$name" > /dev/null
  cmp "hf-$name/model.safetensors" "again-$name/model.safetensors"
  echo "$name: import-hf then export-hf reproduces model.safetensors byte for byte"
}

check llama-gqa --set model.num_query_groups=2 --set model.tie_embeddings=false
check llama-tied --set model.num_query_groups=4 --set model.tie_embeddings=true
check gpt2 --set model.arch=gpt2 --set model.num_query_groups=4 --set model.tie_embeddings=true
check mixtral --set model.arch=mixtral --set model.num_experts=4 --set model.moe_router_topk=2 \
  --set model.num_query_groups=2 --set model.moe_router_load_balancing_type=aux_loss --set model.moe_aux_loss_coeff=0.01

# DeepSeek-V3-style model (no Hugging Face export yet): the checkpoint itself against an independent
# PyTorch forward of multi-head latent attention and grouped sigmoid routing with its expert bias
# (3 steps: the bias, moved by +-gamma each step, is non-zero after an odd number).
DSCFG='{"num_layers": 3, "num_attention_heads": 4, "qk_head_dim": 8, "qk_pos_emb_head_dim": 4, "v_head_dim": 6,
        "q_lora_rank": 12, "kv_lora_rank": 10, "norm_epsilon": 1e-5, "rotary_base": 10000.0, "num_experts": 4,
        "moe_router_topk": 2, "moe_router_num_groups": 2, "moe_router_group_topk": 1, "moe_first_dense_layers": 1,
        "moe_router_score_function": "sigmoid", "moe_router_norm_topk_prob": true, "moe_router_topk_scaling_factor": 2.5}'
"$TESSEL" train "$CONFIGS/deepseek-v3-tiny.yaml" --set model.num_layers=3 --set model.hidden_size=32 \
  --set model.num_attention_heads=4 --set model.num_query_groups=4 --set model.qk_head_dim=8 \
  --set model.qk_pos_emb_head_dim=4 --set model.v_head_dim=6 --set model.q_lora_rank=12 --set model.kv_lora_rank=10 \
  --set model.ffn_hidden_size=48 --set model.num_experts=4 --set model.moe_ffn_hidden_size=16 \
  --set model.moe_shared_expert_intermediate_size=16 --set model.moe_router_num_groups=2 \
  --set model.moe_router_group_topk=1 --set model.moe_router_bias_update_rate=0.05 --set model.vocab_size=300 \
  --set model.seq_length=32 --set train.train_iters=3 --set train.lr_warmup_iters=1 --set train.micro_batch_size=4 \
  --set train.global_batch_size=4 --set precision.compute=fp32 --set data.path=data/c --set data.tokenizer=tok.model \
  --set log.dir=run-ds --set checkpoint.dir=ck-ds > /dev/null
ours=$("$TESSEL" eval --ckpt ck-ds --data data/c --max-samples 16 | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["loss"])')
theirs=$(/usr/bin/python3 "$HERE/deepseek_reference_loss.py" --ckpt "ck-ds/$(cat ck-ds/latest)" --data data/c --seq 32 \
  --max-samples 16 --config "$DSCFG")
/usr/bin/python3 -c "
import sys
a, b = $ours, $theirs
rel = abs(a - b) / abs(b)
print(f'deepseek-v3-style: tessel eval {a:.8f}, PyTorch on the checkpoint {b:.8f}, relative difference {rel:.2e}')
sys.exit(0 if rel < 1e-5 else 1)"

# A sharded export (two files + model.safetensors.index.json, as large Hugging Face models ship)
# imports to the same model.
mkdir sharded && cp hf-llama-gqa/config.json sharded/
/usr/bin/python3 - hf-llama-gqa/model.safetensors sharded <<'PY'
import json, struct, sys
src, out = sys.argv[1], sys.argv[2]
with open(src, "rb") as f:
    n = struct.unpack("<Q", f.read(8))[0]; header = json.loads(f.read(n)); data = f.read()
names = [k for k in header if k != "__metadata__"]
weight_map = {}
for i, part in enumerate((names[: len(names) // 2], names[len(names) // 2:])):
    fname = f"model-{i + 1:05d}-of-00002.safetensors"
    h, blobs, off = {}, [], 0
    for k in part:
        b, e = header[k]["data_offsets"]
        h[k] = {"dtype": header[k]["dtype"], "shape": header[k]["shape"], "data_offsets": [off, off + e - b]}
        blobs.append(data[b:e]); off += e - b; weight_map[k] = fname
    hb = json.dumps(h).encode(); hb += b" " * ((8 - len(hb) % 8) % 8)
    with open(f"{out}/{fname}", "wb") as f:
        f.write(struct.pack("<Q", len(hb))); f.write(hb); f.write(b"".join(blobs))
json.dump({"metadata": {}, "weight_map": weight_map}, open(f"{out}/model.safetensors.index.json", "w"))
PY
"$TESSEL" import-hf --hf sharded --out imported-sharded > /dev/null
"$TESSEL" export-hf --ckpt imported-sharded --out again-sharded > /dev/null
cmp hf-llama-gqa/model.safetensors again-sharded/model.safetensors
echo "sharded: import-hf of a two-shard export reproduces the model"
