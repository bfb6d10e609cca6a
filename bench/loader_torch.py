#!/usr/bin/python3
"""PyTorch peer of stoke-bench-loader: torch's DataLoader over a PNG image folder.

The same work as stoke's case (a): decode each PNG (PIL), random crop 28 with zero padding 4,
horizontal flip with probability 1/2, uint8 HWC -> a uint8 CHW tensor (torchvision's ToTensor
without the float conversion, since stoke's batches also stay uint8), batches of 128, shuffled.
torchvision may be missing from Debian's python3-torch, so the dataset is written here with PIL and
numpy. Prints one JSON line: {"images": N, "results": [{"workers": w, "images_per_s": x}, ...]}.
"""
import argparse
import json
import os
import time

import numpy as np
import torch
from PIL import Image


class PngFolder(torch.utils.data.Dataset):
    """root/<class>/<file>.png, classes sorted by name (torchvision's ImageFolder order)."""

    def __init__(self, root, size=28, padding=4):
        self.classes = sorted(d for d in os.listdir(root) if os.path.isdir(os.path.join(root, d)))
        self.files = []
        for label, c in enumerate(self.classes):
            d = os.path.join(root, c)
            self.files += [(os.path.join(d, f), label) for f in sorted(os.listdir(d))
                           if f.lower().endswith(".png")]
        self.size, self.padding = size, padding

    def __len__(self):
        return len(self.files)

    def __getitem__(self, i):
        path, label = self.files[i]
        with Image.open(path) as im:
            a = np.asarray(im, dtype=np.uint8)
        if a.ndim == 2:
            a = a[:, :, None]
        p, s = self.padding, self.size
        a = np.pad(a, ((p, p), (p, p), (0, 0)))  # zeros, as RandomCrop(28, padding=4)
        top = np.random.randint(0, a.shape[0] - s + 1)
        left = np.random.randint(0, a.shape[1] - s + 1)
        a = a[top:top + s, left:left + s]
        if np.random.rand() < 0.5:
            a = a[:, ::-1]
        return torch.from_numpy(np.ascontiguousarray(a.transpose(2, 0, 1))), label


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--root", required=True)
    ap.add_argument("--workers", default="0,1,2")
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--epochs", type=int, default=1, help="timed epochs per worker count (median)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    ds = PngFolder(args.root)
    results = []
    for w in [int(x) for x in args.workers.split(",")]:
        times = []
        for _ in range(args.epochs):
            # prefetch_factor is torch 1.13's default, 2 batches per worker, as stoke's --prefetch.
            loader = torch.utils.data.DataLoader(ds, batch_size=args.batch, shuffle=True,
                                                 num_workers=w)
            t0 = time.perf_counter()
            n = 0
            for images, labels in loader:
                n += labels.numel()
            times.append(time.perf_counter() - t0)
        times.sort()
        median = times[len(times) // 2] if len(times) % 2 else 0.5 * (
            times[len(times) // 2 - 1] + times[len(times) // 2])
        results.append({"workers": w, "images_per_s": n / median})
    print(json.dumps({"images": len(ds), "results": results}))


if __name__ == "__main__":
    main()
