#!/usr/bin/env python3
"""The PyTorch side of stoke's accuracy comparison: trains the same model with the same recipe
(SGD momentum, lr, batch, epochs, no augmentation) on Fashion-MNIST and prints the test accuracy
after each epoch as JSON lines.

    /usr/bin/python3 bench/train_torch.py --model lenet5 --epochs 2 --lr 0.05 --batch 128 --threads 2
"""

import argparse
import json
import os
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_models import load_fashion, make_model  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="lenet5")
    ap.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--momentum", type=float, default=0.9)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--schedule", default="none", choices=["none", "cosine"])
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    xtr, ytr = load_fashion(a.data, True)
    xte, yte = load_fashion(a.data, False)
    model = make_model(a.model)
    opt = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=a.momentum)
    steps_per_epoch = (len(xtr) + a.batch - 1) // a.batch
    sched = None
    if a.schedule == "cosine":  # per step, over the whole run, as stoke-train --schedule cosine
        sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=a.epochs * steps_per_epoch)
    for epoch in range(a.epochs):
        model.train()
        t0 = time.perf_counter()
        perm = torch.randperm(len(xtr))
        for i in range(0, len(xtr), a.batch):
            idx = perm[i:i + a.batch]
            loss = F.cross_entropy(model(xtr[idx]), ytr[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
            if sched is not None:
                sched.step()
        train_s = time.perf_counter() - t0
        model.eval()
        with torch.no_grad():
            correct = sum((model(xte[i:i + 1000]).argmax(1) == yte[i:i + 1000]).sum().item()
                          for i in range(0, len(xte), 1000))
        print(json.dumps({"framework": "torch", "model": a.model, "epoch": epoch + 1,
                          "test_acc": 100.0 * correct / len(xte), "train_s": round(train_s, 2),
                          "images_per_s": round(len(xtr) / train_s, 1)}), flush=True)


if __name__ == "__main__":
    main()
