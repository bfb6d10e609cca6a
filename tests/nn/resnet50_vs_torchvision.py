#!/usr/bin/env python3
"""ResNet-50 loads torchvision's state_dict strictly and gives torchvision's logits.

    resnet50_vs_torchvision.py STOKE_TEST_FORWARD [--size 224] [--batch 2]

torchvision.models.resnet50() (3 channels, 1000 classes, 25,557,032 parameters) is built with its
own initialization (seed 0). So that eval mode computes something other than the identity, its
batch norms get random affine parameters (weight U(0.5, 1.5), bias N(0, 0.1^2)) and the running
statistics of a calibration batch (one train-mode forward with momentum 1), and fc's bias is
N(0, 0.1^2). Its state_dict, as PyTorch names it (320 tensors, the int64 num_batches_tracked
included), is saved to safetensors; STOKE_TEST_FORWARD (tests/nn/steps/forward_main.cpp) loads it
into stoke's `resnet50` with strict=True, at 1 and 2 threads, and writes the eval-mode logits of a
random batch at SIZE x SIZE. Reference: torchvision's float64 forward of the same weights.

The bound, from f32 rounding (u = 2^-24), as tests/nn/train_vs_torch.py derives it: the logits end
a chain of D = 50 rounded sums (the stem, 16 bottlenecks of 3 convolutions, fc; the shortcut
convolutions are shorter chains), each of at most K = 4,608 terms (layer4's 3x3 convolutions over
512 channels), and under the probabilistic model of rounding errors (Higham & Mary 2019, lambda = 3)
    tau = lambda sqrt(D K) u = 8.6e-5,
relative to the rounding model's own scale for a logit, fc's sum of magnitudes sum_j |W_ij| |h_j| +
|b_i| (h: the pooled features of the float64 forward), per image: ||stoke - f64|| <= tau ||scale||.
torch's own float32 forward is printed beside it, for scale, never asserted on. A state_dict with a
key missing or renamed must be refused, naming the key (the strict load's negative control).

Exits 1 naming the image and both errors when the check fails; 77 (skipped) without
python3-torch/torchvision.
"""

import argparse
import math
import os
import subprocess
import sys
import tempfile

try:
    import torch
    import torchvision  # noqa: F401  (torch_models builds the twin from it)
except ImportError as e:  # python3-torch is optional (install-deps.sh --no-torch): skip, visibly
    print("skipped: %s (scripts/install-deps.sh installs python3-torch)" % e)
    sys.exit(77)

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))
import torch_models  # noqa: E402

U = 2.0 ** -24
LAMBDA = 3.0
D, K = 50, 4608
TAU = LAMBDA * math.sqrt(D * K) * U


def build(size, batch):
    torch.manual_seed(0)
    m = torch_models.make_model("resnet50", in_channels=3, num_classes=1000)
    assert sum(p.numel() for p in m.parameters()) == 25557032
    bns = [mod for mod in m.modules() if isinstance(mod, torch.nn.BatchNorm2d)]
    with torch.no_grad():
        for bn in bns:
            bn.weight.uniform_(0.5, 1.5)
            bn.bias.normal_(0, 0.1)
            bn.momentum = 1.0
        m.fc.bias.normal_(0, 0.1)
        m.train()
        m(torch.randn(4, 3, size, size))  # the running statistics of a calibration batch
        for bn in bns:
            bn.momentum = 0.1
    m.eval()
    x = torch.randn(batch, 3, size, size)
    return m, x


def run_stoke(exe, workdir, weights, x_path, threads):
    out = os.path.join(workdir, "logits%d.safetensors" % threads)
    env = dict(os.environ, STOKE_NUM_THREADS=str(threads))
    subprocess.run([exe, "--model", "resnet50", "--in-channels", "3", "--classes", "1000",
                    "--weights", weights, "--input", x_path, "--out", out], check=True, env=env)
    return torch_models.load_safetensors(out)["logits"].double()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("exe")
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--batch", type=int, default=2)
    args = ap.parse_args()

    m, x = build(args.size, args.batch)
    state = m.state_dict()
    with torch.no_grad():
        f32 = m(x).double()
        m64 = m.double()
        pooled = {}
        m64.fc.register_forward_hook(lambda mod, inp, out: pooled.update(h=inp[0]))
        ref = m64(x.double())
        scale = pooled["h"].abs() @ m64.fc.weight.abs().t() + m64.fc.bias.abs()

    failed = False
    with tempfile.TemporaryDirectory() as d:
        weights = os.path.join(d, "resnet50.safetensors")
        x_path = os.path.join(d, "x.safetensors")
        torch_models.save_safetensors(weights, state)
        torch_models.save_safetensors(x_path, {"x": x})
        print("ResNet-50, %d images at %dx%d, eval mode; tau = %.3g" % (args.batch, args.size,
                                                                         args.size, TAU))
        print("  %-14s %5s  %12s  %12s  %s" % ("run", "image", "||err||/||s||", "of tau",
                                               "max |err| / max |logit|"))
        runs = [("torch f32", f32)] + [("stoke %d thr" % t, run_stoke(args.exe, d, weights, x_path, t))
                                      for t in (1, 2)]
        for name, got in runs:
            for i in range(args.batch):
                rel = (got[i] - ref[i]).norm().item() / scale[i].norm().item()
                worst = (got[i] - ref[i]).abs().max().item() / ref[i].abs().max().item()
                asserted = name.startswith("stoke")
                bad = asserted and not rel <= TAU
                failed |= bad
                print("  %-14s %5d  %12.3g  %12.3f  %.3g%s" % (name, i, rel, rel / TAU, worst,
                                                              "  FAILED" if bad else ""))
        # The strict load's negative control: a renamed key is refused, naming both.
        broken = dict(state)
        broken["layer3.5.bn2.running_vars"] = broken.pop("layer3.5.bn2.running_var")
        torch_models.save_safetensors(weights, broken)
        r = subprocess.run([args.exe, "--model", "resnet50", "--weights", weights, "--input",
                            x_path, "--out", os.path.join(d, "no.safetensors")],
                           capture_output=True, text=True)
        named = ("missing key 'layer3.5.bn2.running_var'" in r.stderr and
                 "unexpected key 'layer3.5.bn2.running_vars'" in r.stderr)
        print("renamed key: exit %d, %s" % (r.returncode, "named" if named else r.stderr.strip()))
        if r.returncode == 0 or not named:
            failed = True
    if failed:
        print("FAILED: see the rows above")
        return 1
    print("passed: torchvision's state_dict loads strictly; every image's logits within tau")
    return 0


if __name__ == "__main__":
    sys.exit(main())
