#!/usr/bin/env python3
"""PyTorch peer of bench/train_cpu: trains the twin model for a fixed number of steps on random
inputs of the same shape (--size, --channels, --classes) and prints one JSON line with images/s.

    /usr/bin/python3 bench/train_cpu_torch.py --model lenet5 --batch 128 --steps 50 --threads 2
"""

import argparse
import json
import os
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_models import make_model  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="lenet5")
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--size", type=int, default=28)
    ap.add_argument("--channels", type=int, default=1)
    ap.add_argument("--classes", type=int, default=10)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    model = make_model(a.model, in_channels=a.channels, num_classes=a.classes,
                       input_size=a.size)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x = torch.randn(a.batch, a.channels, a.size, a.size)
    y = torch.randint(0, a.classes, (a.batch,))

    def step():
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss.item()

    for _ in range(a.warmup):
        step()
    t0 = time.perf_counter()
    for _ in range(a.steps):
        step()
    dt = time.perf_counter() - t0
    print(json.dumps({"framework": "torch", "model": a.model, "batch": a.batch, "steps": a.steps,
                      "threads": a.threads, "images_per_s": round(a.batch * a.steps / dt, 1),
                      "ms_per_step": round(1000 * dt / a.steps, 3)}))


if __name__ == "__main__":
    main()
