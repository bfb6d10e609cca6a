#!/usr/bin/env python3
"""A stoke state_dict loads in PyTorch and gives the same logits.

Loads WEIGHTS (a safetensors file written by stoke-train) into the PyTorch twin of the model with
load_state_dict(strict=True), runs the first N Fashion-MNIST test images through it, and compares
with the logits stoke-logits prints for the same file and images.

    /usr/bin/python3 bench/check_interop.py --stoke-logits build/apps/stoke-logits \
        --model lenet5 --weights ckpt/best.safetensors
"""

import argparse
import json
import os
import subprocess
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_models import load_fashion, load_safetensors, make_model  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--stoke-logits", required=True)
    ap.add_argument("--model", default="lenet5")
    ap.add_argument("--weights", required=True)
    ap.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--count", type=int, default=16)
    a = ap.parse_args()
    out = subprocess.run([a.stoke_logits, "--model", a.model, "--weights", a.weights, "--data", a.data,
                          "--count", str(a.count)], check=True, capture_output=True, text=True).stdout
    stoke = torch.tensor(json.loads(out)["logits"]).view(a.count, -1)
    model = make_model(a.model)
    state = load_safetensors(a.weights)
    model.load_state_dict(state, strict=True)
    model.eval()
    x, _ = load_fashion(a.data, False)
    with torch.no_grad():
        ref = model(x[:a.count])
    err = (stoke - ref).abs().max().item()
    # Relative to the logits' scale: both sides compute in f32, in a different order.
    rel = err / max(1.0, ref.abs().max().item())
    same_argmax = bool((stoke.argmax(1) == ref.argmax(1)).all())
    print(json.dumps({"model": a.model, "keys": len(state), "max_abs_logit_diff": err,
                      "max_rel_logit_diff": rel, "same_predictions": same_argmax}))
    sys.exit(0 if rel <= 1e-5 and same_argmax else 1)


if __name__ == "__main__":
    main()
