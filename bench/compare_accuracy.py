#!/usr/bin/env python3
"""Trains the same recipe in stoke (stoke-train) and in PyTorch (train_torch.py), one after the
other in this run, and prints test accuracy per epoch side by side, then a JSON line.

    /usr/bin/python3 bench/compare_accuracy.py --stoke-train build/apps/stoke-train \
        [--models lenet5,resnet8] [--epochs 2] [--lr 0.05] [--batch 128] [--seed 1]
"""

import argparse
import json
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
EPOCH = re.compile(r"^epoch (\d+)/\d+: .*test loss [0-9.]+ acc ([0-9.]+)%.*\(([0-9]+) img/s")


def run_stoke(exe, model, a):
    out = subprocess.run([exe, "--model", model, "--epochs", str(a.epochs), "--lr", str(a.lr),
                          "--batch", str(a.batch), "--seed", str(a.seed), "--threads", str(a.threads),
                          "--schedule", a.schedule, "--no-progress"], check=True, capture_output=True, text=True).stdout
    rows = []
    for line in out.splitlines():
        m = EPOCH.match(line)
        if m:
            rows.append((int(m.group(1)), float(m.group(2)), float(m.group(3))))
    return rows


def run_torch(model, a):
    out = subprocess.run([sys.executable, os.path.join(HERE, "train_torch.py"), "--model", model,
                          "--epochs", str(a.epochs), "--lr", str(a.lr), "--batch", str(a.batch),
                          "--seed", str(a.seed), "--threads", str(a.threads), "--schedule", a.schedule],
                         check=True, capture_output=True, text=True).stdout
    return [(r["epoch"], r["test_acc"], r["images_per_s"])
            for r in (json.loads(line) for line in out.splitlines() if line.startswith("{"))]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--stoke-train", required=True)
    ap.add_argument("--models", default="lenet5,resnet8")
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--schedule", default="none", choices=["none", "cosine"])
    a = ap.parse_args()
    result = []
    print("%-8s %5s %10s %10s %8s %12s %12s" % ("model", "epoch", "stoke acc", "torch acc", "diff",
                                               "stoke img/s", "torch img/s"))
    for model in a.models.split(","):
        s = run_stoke(a.stoke_train, model, a)
        t = run_torch(model, a)
        for (e, sa, si), (_, ta, ti) in zip(s, t):
            print("%-8s %5d %9.2f%% %9.2f%% %+7.2f %12.0f %12.0f" % (model, e, sa, ta, sa - ta, si, ti))
            result.append({"model": model, "epoch": e, "stoke_acc": sa, "torch_acc": ta,
                           "stoke_images_per_s": si, "torch_images_per_s": ti})
        sys.stdout.flush()
    print(json.dumps({"bench": "compare_accuracy", "lr": a.lr, "batch": a.batch,
                      "schedule": a.schedule, "rows": result}))


if __name__ == "__main__":
    main()
