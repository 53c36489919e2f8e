"""Compares a parallel training run with the single-process reference on the same global batch.

Usage: compare_runs.py REFERENCE RUN [--steps N] [--fp8 [--step1 TOL]]
       compare_runs.py --resumed REFERENCE RUN --from-step K
       compare_runs.py --fp8-amax [--dense] REFERENCE RUN
Each argument is a run's log.dir, holding metrics.jsonl, with its checkpoint.dir at <log.dir>/ckpt.
--resumed: RUN resumed at step K from a checkpoint another layout saved and logged the steps after K
only; its losses are compared with the reference's at the same steps (figure resumed_loss).
--fp8-amax [--dense]: both runs trained 5 steps with delayed scaling (--dense: a model without routed
experts); the step-1 entry of every amax history
in the checkpoints' state.safetensors (experts' included) is compared (figure fp8_step1_amax).
Every figure is relative; each tolerance is K times the largest value of that figure measured over
every comparison of the MPI equivalence scripts, with oneDNN capped to each instruction set
(default = AMX on Intel / AVX512_CORE_BF16 on AMD, AVX512_CORE, AVX2: ONEDNN_MAX_CPU_ISA, which
tessel's own kernels honour too), with the single-process reference on 1, 2 and 4 threads, at every
rank count the scripts use (tests/mpi/measure_spread.sh measures it; the table below holds its
result and the date). The figures (fp32):
  loss               losses at every step
  step1_grad_norm    gradient norm at step 1 (same parameters: only summation order differs)
  later_grad_norm    gradient norms at later steps (Adam's m / sqrt(v) is ~1 whatever a near-zero
                     gradient's size, so summation-order noise becomes ~lr-sized parameter differences
                     on such elements, and the next gradients differ more than the first)
  param_l2           final parameters, per tensor: L2 norm of the difference over the tensor's
  param_max_element  final parameters, per tensor: largest element difference over its largest value
                     (the same effect: a few elements of near-zero gradient move by ~lr)
  moe_aux_loss, mtp_loss   auxiliary and multi-token-prediction losses, summed over every rank's rows
  resumed_loss       losses after a resume, in another layout, of a checkpoint saved at step K
With --fp8 (both runs train with an FP8 recipe): FP8 quantisation is discontinuous, so the ~1e-7
differences summation order leaves in the parameters after step 1 flip a few FP8 codes at later
steps (each a 2^-4..2^-3 relative change of that element), and the runs drift apart chaotically.
Checked then: the step-1 loss (same scales and codes: the forward is the same up to summation order),
the step-1 gradient norm, every later loss; parameters are not compared. --step1 TOL sets the step-1
loss and gradient-norm tolerances where the first step cannot match to summation order: MoE under
tensor parallelism with current scaling, where summation-order differences before an FP8 GEMM
already flip codes in the first forward (every tensor's amax equal to 9 digits, the loss 1.6e-5
apart), and replicated experts under sequence parallelism, which take per-rank scales (each rank's
expert sees its own rows).
The key bias (GPT-2) is not compared: its exact gradient is zero (softmax is invariant to adding
q . b_k to every key's score), so what both runs hold there is Adam-amplified rounding noise.
Prints every figure; exits non-zero when any is out of tolerance. TESSEL_COMPARE_RECORD=FILE appends
the figures as JSON lines, TESSEL_COMPARE_REPORT_ONLY=1 never fails (both for measure_spread.sh).
"""
import json
import os
import struct
import sys

import numpy as np


# figure: (largest value measured by measure_spread.sh, K). Tolerance = K x measured.
# Measured on two machines, each figure's largest value kept:
# - 2026-12-01, AMD EPYC Zen 5 (AVX512-BF16, no AMX), ISA caps default and AVX2 (FP8: default and
#   AVX512_CORE), the reference on 2 threads; an earlier binary measured 1, 2 and 4 threads and
#   AVX512_CORE too, and they gave the same bits as default at 2 threads (fp32 on these shapes: the
#   AVX-512 kernels split no reduction over threads, and AVX512_CORE is the fp32 path of every
#   AVX-512 CPU, AMX or not).
# - 2026-12-02, AMD EPYC Zen 3 (AVX2 only: oneDNN's AVX2 sgemm, bf16 and FP8 GEMMs widened to fp32),
#   the reference on 1, 2 and 4 threads (there the thread count changes the bits: rows where the
#   threads' shares meet are summed in another order). Marked "Zen 3" below; the rest are Zen 5's.
# K = 10 covers the machines not measured.
SPREAD = {
    "loss": (7.4e-8, 10),                 # moe-cp2, AVX2
    "step1_grad_norm": (3.0e-8, 10),      # gpt2-tp2-pp2-vpp2-dp2
    "later_grad_norm": (1.65e-6, 10),     # tp2-cp2, Zen 3, reference on 4 threads
    "param_l2": (4.0e-6, 10),             # moe-aux-tp2-sp-cp2, AVX2
    "param_max_element": (2.2e-4, 10),    # moe-aux-tp2-sp-cp2, AVX2
    "moe_aux_loss": (2.6e-8, 10),         # moe-aux-tp2-sp-cp2, AVX2
    "mtp_loss": (8.9e-9, 10),             # mtp-tp2-sp
    "fp8_step1_loss": (2.7e-9, 10),       # block-tp2-sp
    "fp8_step1_grad_norm": (4.7e-5, 10),  # current-tp2-sp, AVX512_CORE
    "fp8_loss": (9.4e-4, 10),             # moe-sparse-tp2-sp-replicated, Zen 3, reference on 1 thread
    # moe-ep2: 0 (bit-identical) on both machines. The smallest difference that is not 0 is one fp32
    # rounding of the largest element (2^-24 relative), taken as the spread so that K x it is a bound.
    "fp8_step1_amax": (2.0 ** -24, 10),
    "resumed_loss": (5.8e-9, 10),         # one-on-tp2 (a single-process checkpoint resumed on tp2), Zen 3
}


def tolerance(figure):
    measured, k = SPREAD[figure]
    if measured is None:  # a new figure: measure_spread.sh records it; nothing can pass before that
        if os.environ.get("TESSEL_COMPARE_REPORT_ONLY") == "1":
            return float("inf")
        sys.exit(f"compare_runs.py: no measured spread for {figure} yet (run tests/mpi/measure_spread.sh)")
    return measured * k


def metric(run, key):
    return [json.loads(l)[key] for l in open(f"{run}/metrics.jsonl") if f'"{key}"' in l]


def read_safetensors(path):
    """Float32 tensors of a safetensors file, by name."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    return {k: np.frombuffer(data[v["data_offsets"][0]:v["data_offsets"][1]], dtype=np.float32).reshape(v["shape"])
            for k, v in header.items() if k != "__metadata__" and v["dtype"] == "F32"}


def assemble_pieces(step_dir, name):
    """The whole tensors of a distributed checkpoint (tessel-checkpoint-2), assembled here from every
    rank's pieces independently of tessel's reader: NAME "model" gives the parameters, "optimizer"
    the moments (exp_avg.*, exp_avg_sq.*), "state" the state.* tensors (without the prefix). Each
    piece is the flat range [b, e) of a box of its tensor; every element must be in exactly one."""
    assert name in ("model", "optimizer", "state"), name
    md = json.load(open(f"{step_dir}/metadata.json"))
    files = {f: read_safetensors(f"{step_dir}/{f}") for f in md["files"]}
    out, held = {}, {}
    for p in md["pieces"]:
        key = p["key"]
        kind = ("state" if key.startswith("state.") else
                "optimizer" if key.startswith(("exp_avg.", "exp_avg_sq.")) else "model")
        if kind != name:
            continue
        if kind == "state":
            key = key[len("state."):]
        whole = out.setdefault(key, np.zeros(p["global_shape"], dtype=np.float32))
        count = held.setdefault(key, np.zeros(p["global_shape"], dtype=np.int64))
        box = tuple(slice(b, b + s) for b, s in zip(p["begin"], p["shape"]))
        block, times = whole[box].reshape(-1).copy(), count[box].reshape(-1).copy()
        block[p["flat"][0]:p["flat"][1]] = files[p["file"]][p["key"]]
        times[p["flat"][0]:p["flat"][1]] += 1
        whole[box], count[box] = block.reshape(p["shape"]), times.reshape(p["shape"])
    wrong = {k: (int((c == 0).sum()), int((c > 1).sum())) for k, c in held.items() if (c != 1).any()}
    assert not wrong, f"{step_dir}: elements in no piece / in more than one: {wrong}"
    return out


def latest_file(run, name):
    """Tensors of NAME.safetensors in the run's newest checkpoint, as float32 arrays by name (for a
    distributed checkpoint, assembled from its pieces)."""
    ckpt = f"{run}/ckpt"
    step = open(f"{ckpt}/latest").read().strip()
    if json.load(open(f"{ckpt}/{step}/metadata.json"))["format"] == "tessel-checkpoint-2":
        return assemble_pieces(f"{ckpt}/{step}", name)
    return read_safetensors(f"{ckpt}/{step}/{name}.safetensors")


def tensors(run):
    return {k: v for k, v in latest_file(run, "model").items() if not k.endswith("k_proj.bias")}


def relative(a, b):
    return [abs(x - y) / abs(x) for x, y in zip(a, b)]


def record(run, figures, tolerances):
    """Appends the measured figures to $TESSEL_COMPARE_RECORD (JSON lines) for measure_spread.sh;
    figures whose tolerance a --step1 argument set are listed as "set_by_caller", outside the spread."""
    path = os.environ.get("TESSEL_COMPARE_RECORD")
    if path:
        own = [k for k in tolerances if tolerances[k] != tolerance(k)]
        with open(path, "a") as f:
            f.write(json.dumps({"run": run, "env": os.environ.get("TESSEL_SPREAD_ENV", "default"),
                                "figures": figures, "tolerances": tolerances, "set_by_caller": own}) + "\n")


def verdict(run, figures, tolerances):
    """Exits 0 when every figure is within its tolerance (always with TESSEL_COMPARE_REPORT_ONLY=1)."""
    record(run, figures, tolerances)
    over = [f"{k} {figures[k]:.1e} > {tolerances[k]:.1e}" for k in tolerances if not figures[k] < tolerances[k]]
    if over:
        print(f"{run}: OUT OF TOLERANCE: " + "; ".join(over))
    sys.exit(0 if not over or os.environ.get("TESSEL_COMPARE_REPORT_ONLY") == "1" else 1)


def resumed(ref, run, from_step):
    """RUN logged only the steps after FROM_STEP; the reference logged every step."""
    loss_ref, loss_run = metric(ref, "loss")[from_step:], metric(run, "loss")[-(5 - from_step):]
    assert len(loss_ref) == len(loss_run) == 5 - from_step, f"{run}: {loss_run} after step {from_step}"
    figures = {"resumed_loss": max(relative(loss_ref, loss_run))}
    print(f"{run}: resumed at step {from_step}, losses within {figures['resumed_loss']:.1e} of {ref}")
    verdict(run, figures, {k: tolerance(k) for k in figures})


def fp8_amax(ref, run, experts=True):
    """Step 1 of 5 is entry 4 of each amax history (the newest entry is 0). experts: the model has
    routed experts, whose histories must be among them."""
    a = {k: v for k, v in latest_file(ref, "state").items() if k.endswith(".amax_history")}
    b = {k: v for k, v in latest_file(run, "state").items() if k.endswith(".amax_history")}
    assert a and a.keys() == b.keys(), f"{run}: amax histories differ: {sorted(a.keys() ^ b.keys())}"
    assert not experts or any(".experts." in k for k in a), f"{ref}: no expert amax history"
    figures = {"fp8_step1_amax": max(abs(float(a[k][4] - b[k][4])) / float(a[k][4]) for k in a)}
    print(f"{run}: step-1 amax of every tensor ({len(a)}{', experts included' if experts else ''}) within "
          f"{figures['fp8_step1_amax']:.1e} of {ref}")
    verdict(run, figures, {k: tolerance(k) for k in figures})


def main():
    if "--resumed" in sys.argv:
        args = [a for a in sys.argv[1:] if not a.startswith("--")]
        return resumed(args[0], args[1], int(sys.argv[sys.argv.index("--from-step") + 1]))
    if "--fp8-amax" in sys.argv:
        args = [a for a in sys.argv[1:] if not a.startswith("--")]
        return fp8_amax(args[0], args[1], experts="--dense" not in sys.argv)
    ref, run = sys.argv[1], sys.argv[2]
    steps = int(sys.argv[sys.argv.index("--steps") + 1]) if "--steps" in sys.argv else 5
    fp8 = "--fp8" in sys.argv
    step1 = float(sys.argv[sys.argv.index("--step1") + 1]) if "--step1" in sys.argv else None
    loss_ref, loss_run = metric(ref, "loss"), metric(run, "loss")
    assert len(loss_ref) == len(loss_run) == steps, f"{run}: {len(loss_run)} steps logged, expected {steps}"
    losses = relative(loss_ref, loss_run)
    norm_err = relative(metric(ref, "grad_norm"), metric(run, "grad_norm"))
    if fp8:
        figures = {"fp8_step1_loss": losses[0], "fp8_step1_grad_norm": norm_err[0], "fp8_loss": max(losses)}
        tolerances = {k: tolerance(k) for k in figures}
        if step1 is not None:
            tolerances["fp8_step1_loss"] = step1
            tolerances["fp8_step1_grad_norm"] = max(step1, tolerances["fp8_step1_grad_norm"])
        print(f"{run} (fp8): step-1 loss within {losses[0]:.1e}, step-1 grad norm {norm_err[0]:.1e}, "
              f"losses {max(losses):.1e}")
        verdict(run, figures, tolerances)
    ta, tb = tensors(ref), tensors(run)
    assert ta.keys() == tb.keys(), f"{run}: checkpoint tensors differ: {sorted(ta.keys() ^ tb.keys())}"
    l2_err = {k: float(np.linalg.norm(ta[k] - tb[k]) / max(float(np.linalg.norm(ta[k])), 1e-30)) for k in ta}
    max_err = {k: float(np.max(np.abs(ta[k] - tb[k])) / max(float(np.max(np.abs(ta[k]))), 1e-30)) for k in ta}
    worst_l2, worst_max = max(l2_err, key=l2_err.get), max(max_err, key=max_err.get)
    print(f"{run}: losses within {max(losses):.1e}, step-1 grad norm {norm_err[0]:.1e}, later {max(norm_err):.1e}; "
          f"parameters L2 {l2_err[worst_l2]:.1e} ({worst_l2}), largest element {max_err[worst_max]:.1e}")
    figures = {"loss": max(losses), "step1_grad_norm": norm_err[0], "later_grad_norm": max(norm_err),
               "param_l2": l2_err[worst_l2], "param_max_element": max_err[worst_max]}
    # MoE auxiliary losses and multi-token-prediction losses, summed over every rank's rows.
    for key in ("moe_aux_loss", "mtp_loss"):
        a, b = metric(ref, key), metric(run, key)
        if a:
            figures[key] = max(relative(a, b)) if len(a) == len(b) else float("inf")
            print(f"{run}: {key} within {figures[key]:.1e}")
    verdict(run, figures, {k: tolerance(k) for k in figures})


if __name__ == "__main__":
    main()
