"""Compares a parallel training run with the single-process reference on the same global batch.

Usage: compare_runs.py REFERENCE RUN [--steps N] [--fp8 [--step1 TOL]]
Each argument is a run's log.dir, holding metrics.jsonl, with its checkpoint.dir at <log.dir>/ckpt.
Checked (fp32, relative):
  losses at every step                1e-5  (also moe_aux_loss and mtp_loss when logged)
  gradient norm at step 1             1e-6  (same parameters: only summation order differs)
  gradient norms at later steps       1e-4  (Adam's m / sqrt(v) is ~1 whatever a near-zero gradient's
                                             size, so summation-order noise becomes ~lr-sized
                                             parameter differences on such elements)
  final parameters, per tensor        L2 norm of the difference 5e-4 of the tensor's (measured <= 2e-4,
                                      MoE experts under context parallelism); largest element
                                      difference 1e-2 of its largest value (the same effect: a few
                                      elements of near-zero gradient move by ~1e-5 where the tensor
                                      holds values ~0.03; measured up to 4e-3 at tp2 x pp2 x vpp2 x dp2)
With --fp8 (both runs train with an FP8 recipe): FP8 quantisation is discontinuous, so the ~1e-7
differences summation order leaves in the parameters after step 1 flip a few FP8 codes at later
steps (each a 2^-4..2^-3 relative change of that element), and the runs drift apart chaotically.
Checked then: the step-1 loss 1e-6 (same scales and codes: the forward is the same up to summation
order), the step-1 gradient norm 1e-4, every later loss 5e-3 (measured <= 2.1e-3); parameters are
not compared. --step1 TOL loosens the step-1 loss and gradient-norm checks to TOL where the first
step cannot match to summation order: MoE under tensor parallelism with current scaling, where
summation-order differences before an FP8 GEMM already flip codes in the first forward (every
tensor's amax equal to 9 digits, the loss 1.6e-5 apart), and replicated experts under sequence
parallelism, which take per-rank scales (each rank's expert sees its own rows).
The key bias (GPT-2) is not compared: its exact gradient is zero (softmax is invariant to adding
q . b_k to every key's score), so what both runs hold there is Adam-amplified rounding noise.
Prints every figure; exits non-zero when any is out of tolerance.
"""
import json
import struct
import sys

import numpy as np


def metric(run, key):
    return [json.loads(l)[key] for l in open(f"{run}/metrics.jsonl") if f'"{key}"' in l]


def tensors(run):
    ckpt = f"{run}/ckpt"
    step = open(f"{ckpt}/latest").read().strip()
    with open(f"{ckpt}/{step}/model.safetensors", "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    return {k: np.frombuffer(data[v["data_offsets"][0]:v["data_offsets"][1]], dtype=np.float32).reshape(v["shape"])
            for k, v in header.items() if k != "__metadata__" and not k.endswith("k_proj.bias")}


def relative(a, b):
    return [abs(x - y) / abs(x) for x, y in zip(a, b)]


def main():
    ref, run = sys.argv[1], sys.argv[2]
    steps = int(sys.argv[sys.argv.index("--steps") + 1]) if "--steps" in sys.argv else 5
    fp8 = "--fp8" in sys.argv
    step1 = float(sys.argv[sys.argv.index("--step1") + 1]) if "--step1" in sys.argv else 1e-6
    loss_ref, loss_run = metric(ref, "loss"), metric(run, "loss")
    assert len(loss_ref) == len(loss_run) == steps, f"{run}: {len(loss_run)} steps logged, expected {steps}"
    loss_err = max(relative(loss_ref, loss_run))
    norm_err = relative(metric(ref, "grad_norm"), metric(run, "grad_norm"))
    if fp8:
        first = relative(loss_ref, loss_run)[0]
        print(f"{run} (fp8): step-1 loss within {first:.1e}, step-1 grad norm {norm_err[0]:.1e}, losses {loss_err:.1e}")
        sys.exit(0 if first < step1 and norm_err[0] < max(step1, 1e-4) and loss_err < 5e-3 else 1)
    ta, tb = tensors(ref), tensors(run)
    assert ta.keys() == tb.keys(), f"{run}: checkpoint tensors differ: {sorted(ta.keys() ^ tb.keys())}"
    l2_err = {k: float(np.linalg.norm(ta[k] - tb[k]) / max(float(np.linalg.norm(ta[k])), 1e-30)) for k in ta}
    max_err = {k: float(np.max(np.abs(ta[k] - tb[k])) / max(float(np.max(np.abs(ta[k]))), 1e-30)) for k in ta}
    worst_l2, worst_max = max(l2_err, key=l2_err.get), max(max_err, key=max_err.get)
    print(f"{run}: losses within {loss_err:.1e}, step-1 grad norm {norm_err[0]:.1e}, later {max(norm_err):.1e}; "
          f"parameters L2 {l2_err[worst_l2]:.1e} ({worst_l2}), largest element {max_err[worst_max]:.1e}")
    ok = (loss_err < 1e-5 and norm_err[0] < 1e-6 and max(norm_err) < 1e-4 and l2_err[worst_l2] < 5e-4
          and max_err[worst_max] < 1e-2)
    # MoE auxiliary losses and multi-token-prediction losses, summed over every rank's rows.
    for key in ("moe_aux_loss", "mtp_loss"):
        a, b = metric(ref, key), metric(run, key)
        if a:
            err = max(relative(a, b)) if len(a) == len(b) else float("inf")
            print(f"{run}: {key} within {err:.1e}")
            ok = ok and err < 1e-5
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
