"""Hugging Face DeepSeek-V3 forward (DeepseekV3ForCausalLM in transformers; DeepSeek's
modeling_deepseek.py) in float64 PyTorch, from an exported directory's config.json and safetensors
alone, written from Hugging Face's conventions, not tessel's:
  - multi-head latent attention: q_proj or q_a_proj -> q_a_layernorm -> q_b_proj; kv_a_proj_with_mqa
    split into the latent (kv_a_layernorm -> kv_b_proj: per head [k_nope | v]) and one RoPE key shared
    by the heads; softmax scale (qk_nope_head_dim + qk_rope_head_dim)^-0.5 (rope_scaling null)
  - RoPE (rope_interleave, the default): the stored q_pe / k_pe dims are interleaved pairs; they are
    de-interleaved (x.view(..., d/2, 2).transpose(-1, -2)) before the rotate-half rotation
  - layers < first_k_dense_replace a SwiGLU MLP, the rest MoE: the noaux_tc router (sigmoid
    affinities; selection on affinity + e_score_correction_bias; a group scores the sum of its top-2;
    the best topk_group groups kept, the others' experts set to 0.0 (not -inf) before the top-k;
    weights the chosen affinities, normalised (+1e-20) when norm_topk_prob, times
    routed_scaling_factor), plus n_shared_experts x moe_intermediate_size shared experts
  - the multi-token-prediction layers (num_hidden_layers + k) are not part of the causal LM's
    forward, as in Hugging Face (the test checks their tensors against the checkpoint's directly)
Used by hf_reference_loss.py for model_type deepseek_v3.
"""

import torch

from hf_reference_loss import causal_attention, rms_norm


def rope_cos_sin(T, d, base):
    inv = 1.0 / (base ** (torch.arange(0, d, 2, dtype=torch.float64) / d))
    ang = torch.outer(torch.arange(T, dtype=torch.float64), inv)
    emb = torch.cat([ang, ang], -1)
    return emb.cos(), emb.sin()


def rotate_half(x):
    d = x.shape[-1]
    return torch.cat([-x[..., d // 2:], x[..., : d // 2]], -1)


def apply_rope(x, cos, sin, interleaved):  # x [..., T, d]
    if interleaved:
        d = x.shape[-1]
        x = x.reshape(*x.shape[:-1], d // 2, 2).transpose(-1, -2).reshape(*x.shape[:-1], d)
    return x * cos + rotate_half(x) * sin


def mlp(W, p, y):
    h = torch.nn.functional.silu(y @ W[p + "gate_proj.weight"].T) * (y @ W[p + "up_proj.weight"].T)
    return h @ W[p + "down_proj.weight"].T


def router(c, W, p, y):  # y [N, d] -> expert ids [N, k], weights [N, k]
    E, k, G = c["n_routed_experts"], c["num_experts_per_tok"], c["n_group"]
    scores = torch.sigmoid(y @ W[p + "gate.weight"].T)
    choice = scores + W[p + "gate.e_score_correction_bias"]
    group = choice.view(-1, G, E // G).topk(2, -1).values.sum(-1)
    keep = torch.zeros_like(group).scatter(1, group.topk(c["topk_group"], -1).indices, 1.0)
    mask = keep.unsqueeze(-1).expand(-1, G, E // G).reshape(-1, E)
    idx = choice.masked_fill(mask == 0, 0.0).topk(k, -1).indices
    w = scores.gather(1, idx)
    if c["norm_topk_prob"]:
        w = w / (w.sum(-1, keepdim=True) + 1e-20)
    return idx, w * c["routed_scaling_factor"]


def moe(c, W, p, y):
    shape = y.shape
    y = y.reshape(-1, shape[-1])
    idx, w = router(c, W, p, y)
    out = torch.zeros_like(y)
    for e in range(c["n_routed_experts"]):
        out = out + mlp(W, f"{p}experts.{e}.", y) * (w * (idx == e)).sum(-1, keepdim=True)
    if (c.get("n_shared_experts") or 0) > 0:
        out = out + mlp(W, p + "shared_experts.", y)
    return out.reshape(shape)


def attention(c, W, a, y, cos, sin):
    B, T, _ = y.shape
    H, nope, rp, vd = c["num_attention_heads"], c["qk_nope_head_dim"], c["qk_rope_head_dim"], c["v_head_dim"]
    eps, lora = c["rms_norm_eps"], c["kv_lora_rank"]
    interleaved = c.get("rope_interleave", True)
    if c.get("q_lora_rank") is None:
        q = y @ W[a + "q_proj.weight"].T
    else:
        q = rms_norm(y @ W[a + "q_a_proj.weight"].T, W[a + "q_a_layernorm.weight"], eps) @ W[a + "q_b_proj.weight"].T
    q = q.view(B, T, H, nope + rp).transpose(1, 2)
    q_pass, q_rot = q[..., :nope], q[..., nope:]
    ckv = y @ W[a + "kv_a_proj_with_mqa.weight"].T
    k_pass, k_rot = ckv[..., :lora], ckv[..., lora:]
    kv = (rms_norm(k_pass, W[a + "kv_a_layernorm.weight"], eps) @ W[a + "kv_b_proj.weight"].T)
    kv = kv.view(B, T, H, nope + vd).transpose(1, 2)
    k_pass, v = kv[..., :nope], kv[..., nope:]
    q_rot = apply_rope(q_rot, cos, sin, interleaved)
    k_rot = apply_rope(k_rot.view(B, 1, T, rp), cos, sin, interleaved).expand(B, H, T, rp)
    qq, kk = torch.cat([q_pass, q_rot], -1), torch.cat([k_pass, k_rot], -1)
    # causal_attention scales by (nope + rope)^-0.5, DeepSeek-V3's softmax scale without YaRN
    out = causal_attention(qq, kk, v).transpose(1, 2).reshape(B, T, H * vd)
    return out @ W[a + "o_proj.weight"].T


def decoder_layer(c, W, i, x, cos, sin):
    p = f"model.layers.{i}."
    eps = c["rms_norm_eps"]
    x = x + attention(c, W, p + "self_attn.", rms_norm(x, W[p + "input_layernorm.weight"], eps), cos, sin)
    y = rms_norm(x, W[p + "post_attention_layernorm.weight"], eps)
    dense = c.get("n_routed_experts") is None or i < c["first_k_dense_replace"]
    return x + (mlp(W, p + "mlp.", y) if dense else moe(c, W, p + "mlp.", y))


def check_config(c):
    assert c["model_type"] == "deepseek_v3", c["model_type"]
    assert c.get("rope_scaling") is None, "this reference has no YaRN"
    assert c.get("topk_method", "noaux_tc") == "noaux_tc" and c.get("scoring_func", "sigmoid") == "sigmoid"
    assert c.get("moe_layer_freq", 1) == 1 and not c.get("attention_bias", False)
    assert c["num_key_value_heads"] == c["num_attention_heads"]


def deepseek_v3_logits(c, W, tokens):
    """tokens [B, T] -> logits [B, T, V]."""
    check_config(c)
    T = tokens.shape[1]
    cos, sin = rope_cos_sin(T, c["qk_rope_head_dim"], c.get("rope_theta", 10000.0))
    x = W["model.embed_tokens.weight"][tokens]
    for i in range(c["num_hidden_layers"]):
        x = decoder_layer(c, W, i, x, cos, sin)
    head = W["lm_head.weight"] if "lm_head.weight" in W else W["model.embed_tokens.weight"]
    return rms_norm(x, W["model.norm.weight"], c["rms_norm_eps"]) @ head.T
