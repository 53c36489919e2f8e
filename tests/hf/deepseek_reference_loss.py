"""Independent float64 PyTorch forward of a tessel DeepSeek-V3-style checkpoint (tessel's parameter
names, which follow Hugging Face DeepSeek-V3's): multi-head latent attention (low-rank query,
compressed key/value with RMSNorm latents, a decoupled RoPE key shared by the heads, rotate-half
RoPE as tessel applies it), dense then MoE layers (sigmoid or softmax affinities, top-k on affinity +
expert bias within the best groups, normalised and scaled gate weights, a shared expert). Prints the
mean next-token loss over the dataset's first windows. The model's shape comes as JSON (--config).
Usage: deepseek_reference_loss.py --ckpt STEP_DIR --data PREFIX --seq T --max-samples N --config JSON
"""
import argparse
import json
import math
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(__file__))
from hf_reference_loss import mean_loss, read_safetensors, rms_norm, windows  # noqa: E402


def rope(x, T, base):  # rotate-half over the last dim, positions 0..T-1 along dim -3 or -2 (see callers)
    D = x.shape[-1]
    inv = 1.0 / (base ** (torch.arange(0, D, 2, dtype=torch.float64) / D))
    ang = torch.outer(torch.arange(T, dtype=torch.float64), inv)
    cos, sin = torch.cat([ang, ang], -1).cos(), torch.cat([ang, ang], -1).sin()
    x1, x2 = x[..., : D // 2], x[..., D // 2:]
    return x * cos + torch.cat([-x2, x1], -1) * sin


def swiglu(W, p, y):
    return (torch.nn.functional.silu(y @ W[p + "gate_proj.weight"].T) * (y @ W[p + "up_proj.weight"].T)) @ W[p + "down_proj.weight"].T


def moe(c, W, S, p, y):
    E, k, G = c["num_experts"], c["moe_router_topk"], c["moe_router_num_groups"]
    u = y @ W[p + "gate.weight"].T
    s = torch.sigmoid(u) if c["moe_router_score_function"] == "sigmoid" else torch.softmax(u, -1)
    sel = s + S.get(p + "expert_bias", torch.zeros(E, dtype=torch.float64))
    if G > 1:  # keep the best group_topk groups, a group scoring the sum of its two best
        g = sel.view(*sel.shape[:-1], G, E // G)
        score = g.topk(min(2, E // G), -1).values.sum(-1)
        keep = torch.zeros_like(score).scatter(-1, score.topk(c["moe_router_group_topk"], -1).indices, 1.0)
        sel = sel.masked_fill(keep.repeat_interleave(E // G, -1) == 0, float("-inf"))
    idx = sel.topk(k, -1).indices
    w = s.gather(-1, idx)
    if c["moe_router_norm_topk_prob"]:
        w = w / w.sum(-1, keepdim=True)
    w = w * c["moe_router_topk_scaling_factor"]
    out = torch.zeros_like(y)
    for e in range(E):
        out = out + swiglu(W, f"{p}experts.{e}.", y) * (w * (idx == e)).sum(-1, keepdim=True)
    if p + "shared_experts.gate_proj.weight" in W:
        out = out + swiglu(W, p + "shared_experts.", y)
    return out


def logits(c, W, S, tokens):
    B, T = tokens.shape
    H, nope, rp, vd = c["num_attention_heads"], c["qk_head_dim"], c["qk_pos_emb_head_dim"], c["v_head_dim"]
    eps, base = c["norm_epsilon"], c["rotary_base"]
    x = W["model.embed_tokens.weight"][tokens]
    for i in range(c["num_layers"]):
        p = f"model.layers.{i}."
        a = p + "self_attn."
        y = rms_norm(x, W[p + "input_layernorm.weight"], eps)
        if c["q_lora_rank"] > 0:
            q = rms_norm(y @ W[a + "q_a_proj.weight"].T, W[a + "q_a_layernorm.weight"], eps) @ W[a + "q_b_proj.weight"].T
        else:
            q = y @ W[a + "q_proj.weight"].T
        q = q.view(B, T, H, nope + rp)
        kva = y @ W[a + "kv_a_proj_with_mqa.weight"].T
        ckv, kpe = kva[..., : c["kv_lora_rank"]], kva[..., c["kv_lora_rank"]:]
        kv = (rms_norm(ckv, W[a + "kv_a_layernorm.weight"], eps) @ W[a + "kv_b_proj.weight"].T).view(B, T, H, nope + vd)
        q_pe = rope(q[..., nope:].transpose(1, 2), T, base)       # [B, H, T, rope]
        k_pe = rope(kpe, T, base).unsqueeze(1).expand(B, H, T, rp)  # shared by the heads
        qq = torch.cat([q[..., :nope].transpose(1, 2), q_pe], -1)
        kk = torch.cat([kv[..., :nope].transpose(1, 2), k_pe], -1)
        vv = kv[..., nope:].transpose(1, 2)
        s = qq @ kk.transpose(-1, -2) / math.sqrt(nope + rp)
        s = s.masked_fill(torch.triu(torch.ones(T, T, dtype=torch.bool), 1), float("-inf"))
        att = (torch.softmax(s, -1) @ vv).transpose(1, 2).reshape(B, T, H * vd)
        x = x + att @ W[a + "o_proj.weight"].T
        y = rms_norm(x, W[p + "post_attention_layernorm.weight"], eps)
        is_moe = c["num_experts"] > 0 and i >= c["moe_first_dense_layers"]
        x = x + (moe(c, W, S, p + "mlp.", y) if is_moe else swiglu(W, p + "mlp.", y))
    x = rms_norm(x, W["model.norm.weight"], eps)
    head = W["lm_head.weight"] if "lm_head.weight" in W else W["model.embed_tokens.weight"]
    return x @ head.T


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ckpt", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--seq", type=int, required=True)
    ap.add_argument("--max-samples", type=int, default=16)
    ap.add_argument("--config", required=True)
    a = ap.parse_args()
    c = json.loads(a.config)
    W = read_safetensors(a.ckpt + "/model.safetensors")
    S = read_safetensors(a.ckpt + "/state.safetensors") if os.path.exists(a.ckpt + "/state.safetensors") else {}
    print(f"{mean_loss(lambda t: logits(c, W, S, t), windows(a.data, a.seq, a.max_samples)):.10f}")


if __name__ == "__main__":
    main()
