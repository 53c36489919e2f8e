#!/usr/bin/env bash
# export-hf / import-hf end to end, per flavour (Llama with GQA and tied, GPT-2, Mixtral MoE,
# DeepSeek-V3): train a tiny model on a generated corpus, export it, compute its loss with the
# independent PyTorch implementation of the Hugging Face model (hf_reference_loss.py, which reads
# only the exported config.json + model.safetensors) and compare with `tessel eval`; import the
# export and export again: the two Hugging Face files are identical.
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

eval_loss() {  # checkpoint dir -> tessel's mean loss over the first 16 windows
  "$TESSEL" eval --ckpt "$1" --data data/c --max-samples 16 | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["loss"])'
}

train_tiny() {  # name, config, extra --set flags: a few steps into ck-NAME
  local name=$1 config=$2; shift 2
  "$TESSEL" train "$CONFIGS/$config" --set model.vocab_size=300 --set model.seq_length=32 \
    --set train.train_iters=4 --set train.lr_warmup_iters=1 --set train.micro_batch_size=4 \
    --set train.global_batch_size=4 --set precision.compute=fp32 --set data.path=data/c --set data.tokenizer=tok.model \
    --set log.dir="run-$name" --set checkpoint.dir="ck-$name" "$@" > /dev/null
}

check() {  # name: export ck-NAME, compare the losses, import, export again
  local name=$1
  "$TESSEL" export-hf --ckpt "ck-$name" --out "hf-$name" > /dev/null
  local ours theirs
  ours=$(eval_loss "ck-$name")
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

SMALL=(--set model.num_layers=2 --set model.hidden_size=32 --set model.num_attention_heads=4 --set model.ffn_hidden_size=48)
train_tiny llama-gqa synthetic.yaml "${SMALL[@]}" --set model.num_query_groups=2 --set model.tie_embeddings=false
train_tiny llama-tied synthetic.yaml "${SMALL[@]}" --set model.num_query_groups=4 --set model.tie_embeddings=true
train_tiny gpt2 synthetic.yaml "${SMALL[@]}" --set model.arch=gpt2 --set model.num_query_groups=4 --set model.tie_embeddings=true
train_tiny mixtral synthetic.yaml "${SMALL[@]}" --set model.arch=mixtral --set model.num_experts=4 --set model.moe_router_topk=2 \
  --set model.num_query_groups=2 --set model.moe_router_load_balancing_type=aux_loss --set model.moe_aux_loss_coeff=0.01
for name in llama-gqa llama-tied gpt2 mixtral; do check $name; done

# DeepSeek-V3 (deepseek-v3-tiny shrunk: multi-latent attention, a dense layer then MoE layers with
# shared and routed experts, the sigmoid group-limited router with its expert bias, one MTP module).
# The first case has a low-rank query, an untied head and the biases 3 steps of training left (moved
# by +-gamma each step: non-zero after an odd number); the second a plain q_proj, a tied head, 8 RoPE
# dims (with 4 the interleaving is its own inverse), two shared experts, unnormalised gate weights,
# and biases set by hand so that in each group one
# expert's s + b is negative: without the export's shift Hugging Face would route differently (its
# group mask sets the other groups' experts to 0.0, which would outrank that expert).
DS=(--set model.num_layers=3 --set model.hidden_size=32 --set model.num_attention_heads=4 --set model.num_query_groups=4
    --set model.qk_head_dim=8 --set model.qk_pos_emb_head_dim=4 --set model.v_head_dim=6 --set model.kv_lora_rank=10
    --set model.ffn_hidden_size=48 --set model.num_experts=4 --set model.moe_ffn_hidden_size=16
    --set model.moe_router_num_groups=2 --set model.moe_router_group_topk=1 --set model.init_method_std=0.3
    --set train.train_iters=3)
train_tiny deepseek-v3 deepseek-v3-tiny.yaml "${DS[@]}" --set model.q_lora_rank=12 \
  --set model.moe_shared_expert_intermediate_size=16 --set model.moe_router_bias_update_rate=0.05
train_tiny deepseek-v3-tied deepseek-v3-tiny.yaml "${DS[@]}" --set model.q_lora_rank=0 --set model.tie_embeddings=true \
  --set model.qk_pos_emb_head_dim=8 --set model.moe_shared_expert_intermediate_size=32 \
  --set model.moe_router_norm_topk_prob=false
/usr/bin/python3 - "ck-deepseek-v3-tied/$(cat ck-deepseek-v3-tied/latest)" <<'PY'
# Rewrites the expert biases in state.safetensors (same size) and the file's CRC-32 in metadata.json.
import json, struct, sys, zlib
step = sys.argv[1]
want = {"model.layers.1.mlp.expert_bias": [0.5, -2.0, 0.0, -0.75],
        "model.layers.2.mlp.expert_bias": [-1.5, 0.25, -0.5, 1.0],
        "model.layers.3.mlp.expert_bias": [0.25, -1.0, 0.75, -0.5]}  # the MTP module's router
raw = bytearray(open(step + "/state.safetensors", "rb").read())
n = struct.unpack("<Q", raw[:8])[0]
header = json.loads(raw[8:8 + n])
assert set(want) == {k for k in header if k.endswith(".expert_bias")}, list(header)
for name, values in want.items():
    b, e = header[name]["data_offsets"]
    raw[8 + n + b:8 + n + e] = struct.pack(f"<{len(values)}f", *values)
open(step + "/state.safetensors", "wb").write(raw)
md = json.load(open(step + "/metadata.json"))
md["files"]["state.safetensors"]["crc32"] = zlib.crc32(raw)
json.dump(md, open(step + "/metadata.json", "w"))
PY
check deepseek-v3
check deepseek-v3-tied

# The round trip tensor by tensor (parameters, expert biases, MTP tensors), and the imported
# checkpoint evaluates to the trained one's loss.
for name in deepseek-v3 deepseek-v3-tied; do
  /usr/bin/python3 "$HERE/deepseek_roundtrip_check.py" "ck-$name/$(cat "ck-$name/latest")" \
    "imported-$name/$(cat "imported-$name/latest")" "hf-$name"
  /usr/bin/python3 -c "
import sys
a, b = $(eval_loss "ck-$name"), $(eval_loss "imported-$name")
print(f'$name: tessel eval of the trained checkpoint {a:.8f}, of the imported one {b:.8f}')
sys.exit(0 if abs(a - b) <= 1e-6 * abs(a) else 1)"
done

# What Hugging Face DeepSeek-V3 cannot express is refused, naming the setting, and nothing is written.
for setting in moe_router_score_function=softmax moe_expert_capacity_factor=1.5; do
  train_tiny refused deepseek-v3-tiny.yaml "${DS[@]}" --set train.train_iters=1 --set "model.$setting"
  if "$TESSEL" export-hf --ckpt ck-refused --out hf-refused 2> refused.err; then
    echo "export-hf accepted model.$setting"; exit 1
  fi
  grep -q "model.${setting%%=*}" refused.err
  [ ! -e hf-refused ]
  echo "refused: $(sed 's/.*export-hf: //' refused.err)"
  rm -rf ck-refused run-refused
done

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
