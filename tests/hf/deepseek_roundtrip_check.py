#!/usr/bin/python3
"""DeepSeek-V3 export/import round trip, tensor by tensor: the imported checkpoint's parameters equal
the trained checkpoint's; its expert biases (state.safetensors) equal the trained ones shifted per
layer by the export's constant (up to non-negative when any is negative: the same routing), and so
does the export's mlp.gate.e_score_correction_bias; the export's multi-token-prediction tensors are
the checkpoint's, with the embedding and output head copied in (embed_tokens, shared_head.head); the
module's router bias is among the expert biases above.
Usage: deepseek_roundtrip_check.py TRAINED_STEP_DIR IMPORTED_STEP_DIR HF_DIR
"""
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hf_reference_loss import read_safetensors  # noqa: E402


def main():
    trained, imported, hf_dir = sys.argv[1:4]
    orig, imp, hf = (read_safetensors(d + "/model.safetensors") for d in (trained, imported, hf_dir))
    so, si = (read_safetensors(d + "/state.safetensors") for d in (trained, imported))
    c = json.load(open(hf_dir + "/config.json"))
    assert orig.keys() == imp.keys(), sorted(set(orig) ^ set(imp))
    changed = [n for n in orig if not torch.equal(orig[n], imp[n])]
    assert not changed, f"parameters changed by export + import: {changed}"
    biases = sorted(n for n in so if n.endswith(".expert_bias"))
    assert biases and biases == sorted(n for n in si if n.endswith(".expert_bias")), (list(so), list(si))
    shifted = 0
    for n in biases:
        b = so[n].float()
        want = b - min(b.min().item(), 0.0)  # in float32, as the export computes it
        shifted += int(b.min().item() < 0)
        assert torch.equal(si[n].float(), want), (n, so[n], si[n])
        assert torch.equal(hf[n.replace(".expert_bias", ".gate.e_score_correction_bias")].float(), want), n
    m = f"model.layers.{c['num_hidden_layers']}."
    head = orig.get("lm_head.weight", orig["model.embed_tokens.weight"])
    assert torch.equal(hf[m + "embed_tokens.weight"], orig["model.embed_tokens.weight"])
    assert torch.equal(hf[m + "shared_head.head.weight"], head)
    for t in ("enorm.weight", "hnorm.weight", "eh_proj.weight", "shared_head.norm.weight", "mlp.gate.weight"):
        assert torch.equal(hf[m + t], orig[m + t]), t
    assert m + "mlp.expert_bias" in biases, "the MTP module's router has no expert bias"
    print(f"{hf_dir}: import-hf restores every parameter and the {len(biases)} expert biases "
          f"({shifted} shifted up to non-negative); the MTP module's tensors are the checkpoint's")


if __name__ == "__main__":
    main()
