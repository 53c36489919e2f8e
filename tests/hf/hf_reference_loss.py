#!/usr/bin/python3
"""Independent check of `tessel export-hf`: the loss of an exported Hugging Face directory, computed
here in PyTorch (float64) from config.json + model.safetensors alone, on the same windows
`tessel eval` uses (the dataset's sequences in index order, concatenated; window i is tokens
[i*T, i*T+T+1)).

Llama: HF LlamaForCausalLM semantics (RMSNorm, rotate-half RoPE with rope_theta, GQA, SwiGLU).
GPT-2: HF GPT2LMHeadModel semantics (Conv1D weights stored [in, out], fused c_attn, gelu_new,
learned positions, tied head unless lm_head.weight is present).
DeepSeek-V3: HF DeepseekV3ForCausalLM semantics (deepseek_reference_loss.py).

Usage: hf_reference_loss.py --model DIR --data PREFIX --seq T --max-samples N  -> prints the loss
"""
import argparse, json, math, struct
import numpy as np
import torch

DTYPES = {"F32": np.float32, "F16": np.float16, "I64": np.int64, "I32": np.int32}


def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        b, end = e["data_offsets"]
        if e["dtype"] == "BF16":
            raw = np.frombuffer(data[b:end], dtype=np.uint16).astype(np.uint32) << 16
            arr = raw.view(np.float32)
        else:
            arr = np.frombuffer(data[b:end], dtype=DTYPES[e["dtype"]])
        out[name] = torch.from_numpy(arr.reshape(e["shape"]).astype(np.float64))
    return out


def read_indexed_dataset(prefix):
    codes = {1: np.uint8, 2: np.int8, 3: np.int16, 4: np.int32, 5: np.int64, 8: np.uint16}
    with open(prefix + ".idx", "rb") as f:
        assert f.read(9) == b"MMIDIDX\x00\x00"
        version, code, nseq, ndoc = struct.unpack("<QBQQ", f.read(25))
        assert version == 1
        sizes = np.frombuffer(f.read(4 * nseq), dtype=np.int32)
    tokens = np.fromfile(prefix + ".bin", dtype=codes[code]).astype(np.int64)
    assert len(tokens) == int(sizes.sum())
    return tokens


def rms_norm(x, w, eps):
    return x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps) * w


def layer_norm(x, w, b, eps):
    mu = x.mean(-1, keepdim=True)
    var = ((x - mu) ** 2).mean(-1, keepdim=True)
    return (x - mu) / torch.sqrt(var + eps) * w + b


def causal_attention(q, k, v):  # [B, H, T, Dh]
    T = q.shape[-2]
    s = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    s = s.masked_fill(torch.triu(torch.ones(T, T, dtype=torch.bool), 1), float("-inf"))
    return torch.softmax(s, -1) @ v


def mixtral_moe(c, W, p, y):  # Hugging Face MixtralSparseMoeBlock: softmax, top-k, renormalised
    probs = torch.softmax(y @ W[p + "gate.weight"].T, -1)
    w, idx = torch.topk(probs, c["num_experts_per_tok"], -1)
    w = w / w.sum(-1, keepdim=True)
    out = torch.zeros_like(y)
    for e in range(c["num_local_experts"]):
        q = f"{p}experts.{e}."
        h = (torch.nn.functional.silu(y @ W[q + "w1.weight"].T) * (y @ W[q + "w3.weight"].T)) @ W[q + "w2.weight"].T
        out = out + h * (w * (idx == e)).sum(-1, keepdim=True)
    return out


def llama_logits(c, W, tokens):
    B, T = tokens.shape
    d, H = c["hidden_size"], c["num_attention_heads"]
    G, Dh = c.get("num_key_value_heads", H), d // H
    eps, base = c["rms_norm_eps"], c.get("rope_theta", 10000.0)
    inv = 1.0 / (base ** (torch.arange(0, Dh, 2, dtype=torch.float64) / Dh))
    ang = torch.outer(torch.arange(T, dtype=torch.float64), inv)
    cos, sin = torch.cat([ang, ang], -1).cos(), torch.cat([ang, ang], -1).sin()

    def rope(x):
        x1, x2 = x[..., : Dh // 2], x[..., Dh // 2:]
        return x * cos + torch.cat([-x2, x1], -1) * sin

    x = W["model.embed_tokens.weight"][tokens]
    for i in range(c["num_hidden_layers"]):
        p = f"model.layers.{i}."
        y = rms_norm(x, W[p + "input_layernorm.weight"], eps)
        q = (y @ W[p + "self_attn.q_proj.weight"].T).view(B, T, H, Dh).transpose(1, 2)
        k = (y @ W[p + "self_attn.k_proj.weight"].T).view(B, T, G, Dh).transpose(1, 2)
        v = (y @ W[p + "self_attn.v_proj.weight"].T).view(B, T, G, Dh).transpose(1, 2)
        q, k = rope(q), rope(k)
        k, v = k.repeat_interleave(H // G, 1), v.repeat_interleave(H // G, 1)
        a = causal_attention(q, k, v).transpose(1, 2).reshape(B, T, H * Dh)
        x = x + a @ W[p + "self_attn.o_proj.weight"].T
        y = rms_norm(x, W[p + "post_attention_layernorm.weight"], eps)
        if c["model_type"] == "mixtral":
            x = x + mixtral_moe(c, W, p + "block_sparse_moe.", y)
            continue
        g = y @ W[p + "mlp.gate_proj.weight"].T
        u = y @ W[p + "mlp.up_proj.weight"].T
        x = x + (torch.nn.functional.silu(g) * u) @ W[p + "mlp.down_proj.weight"].T
    x = rms_norm(x, W["model.norm.weight"], eps)
    head = W["lm_head.weight"] if "lm_head.weight" in W else W["model.embed_tokens.weight"]
    return x @ head.T


def gpt2_logits(c, W, tokens):
    B, T = tokens.shape
    d, H = c["n_embd"], c["n_head"]
    Dh, eps = d // H, c["layer_norm_epsilon"]

    def gelu_new(x):
        return 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))

    x = W["transformer.wte.weight"][tokens] + W["transformer.wpe.weight"][:T]
    for i in range(c["n_layer"]):
        p = f"transformer.h.{i}."
        y = layer_norm(x, W[p + "ln_1.weight"], W[p + "ln_1.bias"], eps)
        qkv = y @ W[p + "attn.c_attn.weight"] + W[p + "attn.c_attn.bias"]  # Conv1D: x @ W, W [in, out]
        q, k, v = (t.view(B, T, H, Dh).transpose(1, 2) for t in qkv.split(d, -1))
        a = causal_attention(q, k, v).transpose(1, 2).reshape(B, T, d)
        x = x + a @ W[p + "attn.c_proj.weight"] + W[p + "attn.c_proj.bias"]
        y = layer_norm(x, W[p + "ln_2.weight"], W[p + "ln_2.bias"], eps)
        h = gelu_new(y @ W[p + "mlp.c_fc.weight"] + W[p + "mlp.c_fc.bias"])
        x = x + h @ W[p + "mlp.c_proj.weight"] + W[p + "mlp.c_proj.bias"]
    x = layer_norm(x, W["transformer.ln_f.weight"], W["transformer.ln_f.bias"], eps)
    head = W["lm_head.weight"] if "lm_head.weight" in W else W["transformer.wte.weight"]
    return x @ head.T


def windows(data, seq, max_samples):
    """The dataset's first max_samples (0: all) windows of seq + 1 tokens, [N, seq + 1]."""
    stream = read_indexed_dataset(data)
    n = (len(stream) - 1) // seq
    if max_samples:
        n = min(n, max_samples)
    return torch.tensor(np.stack([stream[i * seq: i * seq + seq + 1] for i in range(n)]))


def mean_loss(forward, w):
    """Mean next-token cross-entropy of forward(tokens [N, T]) -> logits [N, T, V] over windows w."""
    lg = forward(w[:, :-1])
    return torch.nn.functional.cross_entropy(lg.reshape(-1, lg.shape[-1]), w[:, 1:].reshape(-1)).item()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--seq", type=int, required=True)
    ap.add_argument("--max-samples", type=int, default=0)
    a = ap.parse_args()
    c = json.load(open(a.model + "/config.json"))
    W = read_safetensors(a.model + "/model.safetensors")
    if c["model_type"] == "deepseek_v3":
        from deepseek_reference_loss import deepseek_v3_logits as fwd
    else:
        fwd = gpt2_logits if c["model_type"] == "gpt2" else llama_logits
    print(f"{mean_loss(lambda t: fwd(c, W, t), windows(a.data, a.seq, a.max_samples)):.10f}")


if __name__ == "__main__":
    main()
