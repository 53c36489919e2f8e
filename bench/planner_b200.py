#!/usr/bin/env python3
"""Predicts every row of ../shared/simumax/b200_rows.json (measured Megatron-LM step times and memory
on 8 B200s) with `tessel plan estimate`, as tessel would run that model and layout there, and prints
tessel's and SimuMax's errors side by side. Nothing is fitted to the measured times: the hardware is
SimuMax's B200 system file as it is.

Then the model state of pipeline stage 0 by category against Megatron-LM's, counted here from the
model file: per parameter 2 bytes of bf16 weights, 4 of fp32 gradients (main_grad) and, with the
distributed optimizer, 12 of fp32 master and Adam moments over the ranks sharing it (dp x cp for
the replicated parameters, tp x dp x cp / ep for the routed experts). tessel files the fp32 master
under parameters, Megatron under the optimizer, so their sums are compared. The activations are
reported beside what Megatron's measured peak leaves after its model state.

usage: bench/planner_b200.py [TESSEL] [SHARED] [--rows FILE]   (defaults: build/tessel, ../shared)
--rows FILE: other rows of the same form instead of SHARED/simumax/b200_rows.json, e.g.
bench/simumax_b200_more_rows.json: the 21 further rows of SimuMax's published B200 table ("B200
Release v1.2 Summary" in its repository, v1.2): llama3-405b without CP, DeepSeek-V3 (a row's
"dense_layers" sets the model's leading dense layers) and 128k-token CP. Nothing was fitted to them.
Last line: JSON with per-row predictions and the error ranges."""
import json
import os
import subprocess
import sys

args = sys.argv[1:]
rows_file = None
if "--rows" in args:
    i = args.index("--rows")
    rows_file = args[i + 1]
    del args[i:i + 2]
tessel = args[0] if len(args) > 0 else "build/tessel"
shared = args[1] if len(args) > 1 else os.path.join(os.path.dirname(__file__), "..", "..", "shared")
simumax = os.path.join(shared, "simumax")
rows = json.load(open(rows_file or os.path.join(simumax, "b200_rows.json")))
system = os.path.join(simumax, "system", "b200_bf16_ceperm.json")

# SimuMax's model file names differ from the rows' "model" field only by the 405B's padding suffix.
model_files = {os.path.splitext(f)[0]: f for f in os.listdir(os.path.join(simumax, "models"))}


def model_path(name):
    for key in (name, name + "_padding_128"):
        if key in model_files:
            return os.path.join(simumax, "models", model_files[key])
    raise SystemExit(f"no model file for {name} in {simumax}/models")


def megatron_stage0_state(m, r):
    """Bytes of Megatron-LM's model state on a rank of pipeline stage 0 (tp rank 0, ep rank 0):
    (weights and gradients, master and moments)."""
    h, t = m["hidden_size"], r["tp"]
    V = (m["vocab_size"] + 128 * t - 1) // (128 * t) * (128 * t)  # Megatron pads to 128 x tp
    heads = m["head_num"]
    if m.get("attention_type", "mha") == "mla":
        qk, rope, v = m["qk_head_dim"], m["qk_pos_emb_head_dim"], m["v_head_dim"]
        ql, kvl = m.get("q_lora_rank", 0), m["kv_lora_rank"]
        q = (h * ql + ql + ql * heads * (qk + rope) // t) if ql else h * heads * (qk + rope) // t
        attn = q + h * (kvl + rope) + kvl + kvl * heads * (qk + v) // t + heads * v * h // t
    else:
        hd, kv = m["head_size"], m["kv_head_num"]
        attn = (2 * h * heads * hd + 2 * h * kv * hd) // t
    replicated = experts = 0
    layers = range(0, r["layers"] // r["pp"])
    for layer in layers:
        replicated += attn + 2 * h
        if m["model_type"] == "moe" and layer >= m.get("dense_layers", 0):
            E, ffn = m["expert_num"], m.get("moe_ffn_hidden_size", m["intermediate_size"])
            replicated += h * E + 3 * h * m.get("moe_shared_expert_intermediate_size", 0) // t
            experts += E // r["ep"] * 3 * h * ffn
        else:
            replicated += 3 * h * m["intermediate_size"] // t
    replicated += V * h // t  # the embedding
    if r["pp"] == 1:
        replicated += h + V * h // t  # final norm, untied output head
    dp_cp = r["dp"] * r["cp"]
    edp = r["tp"] * dp_cp // r["ep"]
    P = replicated + experts
    return 2 * P, 4 * P, 12 * replicated / dp_cp + 12 * experts / edp


out = []
print(f"{'case':52} {'real ms':>8} {'tessel':>8} {'err':>7} {'simumax':>8} {'err':>7} | "
      f"{'real GiB':>8} {'tessel':>7} {'err':>7} {'simumax':>7} {'err':>6}")
for r in rows:
    world = r["tp"] * r["pp"] * r["dp"] * r["cp"]
    sets = [f"model.num_layers={r['layers']}", f"model.seq_length={r['seq']}",
            f"parallel.tensor_model_parallel_size={r['tp']}", f"parallel.pipeline_model_parallel_size={r['pp']}",
            f"parallel.expert_model_parallel_size={r['ep']}", f"parallel.context_parallel_size={r['cp']}",
            f"train.global_batch_size={r['mbc'] * r['dp']}"]
    if "dense_layers" in r:
        sets.append(f"model.moe_first_dense_layers={r['dense_layers']}")
    cmd = [tessel, "plan", "estimate", model_path(r["model"]), "--hardware", system, "--world", str(world),
           "--memory-gib", "1000"]
    for s in sets:
        cmd += ["--set", s]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        print(f"{r['case']:52} FAILED: {p.stderr.strip().splitlines()[-1] if p.stderr.strip() else p.returncode}")
        out.append({"case": r["case"], "error": p.stderr.strip()})
        continue
    est = json.loads(p.stdout.strip().splitlines()[-1])
    t, m = est["step_ms"], est["peak_memory_gib"]
    et = t / r["real_ms"] - 1
    es = r["simumax_ms"] / r["real_ms"] - 1
    em = m / r["real_alloc_gib"] - 1
    esm = r["simumax_alloc_gib"] / r["real_alloc_gib"] - 1
    print(f"{r['case']:52} {r['real_ms']:8.1f} {t:8.1f} {100 * et:+6.1f}% {r['simumax_ms']:8.1f} {100 * es:+6.1f}% | "
          f"{r['real_alloc_gib']:8.2f} {m:7.2f} {100 * em:+6.1f}% {r['simumax_alloc_gib']:7.2f} {100 * esm:+5.1f}%")
    cats = est["stages"][0]["peak_memory_gib_by_category"]
    with open(model_path(r["model"])) as f:
        model = json.load(f)
    if "dense_layers" in r:
        model["dense_layers"] = r["dense_layers"]
    weights, grads, optimizer = (b / 2**30 for b in megatron_stage0_state(model, r))
    state = {"megatron_gradients_gib": grads, "megatron_weights_and_optimizer_gib": weights + optimizer,
             "tessel_gradients_gib": cats["gradients"],
             "tessel_weights_and_optimizer_gib": cats["parameters"] + cats["optimizer_state"],
             "megatron_activations_gib": r["real_alloc_gib"] - (weights + grads + optimizer),
             "tessel_activations_gib": cats["activations"]}
    out.append({"case": r["case"], "real_ms": r["real_ms"], "tessel_ms": t, "simumax_ms": r["simumax_ms"],
                "real_gib": r["real_alloc_gib"], "tessel_gib": m, "simumax_gib": r["simumax_alloc_gib"],
                "time_error": et, "memory_error": em, "stage0_gib_by_category": cats, "stage0_state": state})
ok = [o for o in out if "error" not in o]
if ok:
    te = [o["time_error"] for o in ok]
    me = [o["memory_error"] for o in ok]
    print(f"tessel time error {100 * min(te):+.1f}% .. {100 * max(te):+.1f}% over {len(ok)} rows "
          f"(within 10%: {sum(abs(e) <= 0.10 for e in te)}); memory error {100 * min(me):+.1f}% .. {100 * max(me):+.1f}%")
print(f"\npipeline stage 0's model state, GiB: tessel against Megatron-LM's counted from the model file")
print(f"{'case':52} {'grads':>7} {'Megatron':>8} {'err':>7} | {'weights+opt':>11} {'Megatron':>8} {'err':>7} | "
      f"{'activations':>11} {'Megatron (measured - state)':>27}")
for o in ok:
    st = o["stage0_state"]
    eg = st["tessel_gradients_gib"] / st["megatron_gradients_gib"] - 1
    ew = st["tessel_weights_and_optimizer_gib"] / st["megatron_weights_and_optimizer_gib"] - 1
    o["stage0_state"]["gradients_error"], o["stage0_state"]["weights_and_optimizer_error"] = eg, ew
    print(f"{o['case']:52} {st['tessel_gradients_gib']:7.2f} {st['megatron_gradients_gib']:8.2f} {100 * eg:+6.2f}% | "
          f"{st['tessel_weights_and_optimizer_gib']:11.2f} {st['megatron_weights_and_optimizer_gib']:8.2f} {100 * ew:+6.2f}% | "
          f"{st['tessel_activations_gib']:11.2f} {st['megatron_activations_gib']:27.2f}")
if ok:
    errs = [e for o in ok for e in (o["stage0_state"]["gradients_error"], o["stage0_state"]["weights_and_optimizer_error"])]
    print(f"model state error {100 * min(errs):+.2f}% .. {100 * max(errs):+.2f}% "
          f"(within 3%: {sum(abs(e) <= 0.03 for e in errs)} of {len(errs)})")
print(json.dumps({"rows": out}))
