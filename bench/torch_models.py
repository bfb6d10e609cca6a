"""The PyTorch twins of stoke's models (same layers, same parameter names), for the peers in
bench/ and the checkpoint interop check. Used with Debian's python3-torch only."""

import gzip
import json
import os
import struct

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class LeNet5(nn.Module):
    def __init__(self, in_channels=1, num_classes=10, input_size=28):
        super().__init__()
        pad = 2 if input_size == 28 else 0
        self.conv1 = nn.Conv2d(in_channels, 6, 5, padding=pad)
        self.conv2 = nn.Conv2d(6, 16, 5)
        self.fc1 = nn.Linear(400, 120)
        self.fc2 = nn.Linear(120, 84)
        self.fc3 = nn.Linear(84, num_classes)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = x.flatten(1)
        return self.fc3(F.relu(self.fc2(F.relu(self.fc1(x)))))


def group_norm(c):
    """stoke's ResNet GroupNorm (nn/models/models.h): min(32, C / 2) groups."""
    return nn.GroupNorm(min(32, max(1, c // 2)), c)


class BasicBlock(nn.Module):
    def __init__(self, inp, planes, stride, norm=nn.BatchNorm2d):
        super().__init__()
        self.conv1 = nn.Conv2d(inp, planes, 3, stride, 1, bias=False)
        self.bn1 = norm(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = norm(planes)
        self.downsample = None
        if stride != 1 or inp != planes:
            self.downsample = nn.Sequential(nn.Conv2d(inp, planes, 1, stride, bias=False),
                                            norm(planes))

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + (self.downsample(x) if self.downsample is not None else x))


class ResNet(nn.Module):
    def __init__(self, blocks, widths, in_channels=1, num_classes=10, norm=nn.BatchNorm2d):
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, widths[0], 3, 1, 1, bias=False)
        self.bn1 = norm(widths[0])
        inp = widths[0]
        for s, (n, w) in enumerate(zip(blocks, widths)):
            layer = []
            for b in range(n):
                layer.append(BasicBlock(inp, w, 2 if (s > 0 and b == 0) else 1, norm))
                inp = w
            setattr(self, "layer%d" % (s + 1), nn.Sequential(*layer))
        self.nstages = len(blocks)
        self.fc = nn.Linear(inp, num_classes)

    def forward(self, x):
        x = F.relu(self.bn1(self.conv1(x)))
        for s in range(self.nstages):
            x = getattr(self, "layer%d" % (s + 1))(x)
        return self.fc(F.adaptive_avg_pool2d(x, 1).flatten(1))


def make_model(name, in_channels=1, num_classes=10, input_size=28):
    if name == "lenet5":
        return LeNet5(in_channels, num_classes, input_size)
    depths = {"resnet8": 1, "resnet20": 3, "resnet56": 9}
    gn = name.endswith("_gn")
    base = name[:-3] if gn else name
    norm = group_norm if gn else nn.BatchNorm2d
    if base in depths:
        n = depths[base]
        return ResNet([n, n, n], [16, 32, 64], in_channels, num_classes, norm)
    if base == "resnet18":
        return ResNet([2, 2, 2, 2], [64, 128, 256, 512], in_channels, num_classes, norm)
    raise ValueError("no torch twin for model %r" % name)


def read_idx(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        data = f.read()
    ndim = data[3]
    dims = struct.unpack(">" + "I" * ndim, data[4:4 + 4 * ndim])
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def load_fashion(root, train):
    prefix = "train" if train else "t10k"
    images = read_idx(os.path.join(root, prefix + "-images-idx3-ubyte.gz"))
    labels = read_idx(os.path.join(root, prefix + "-labels-idx1-ubyte.gz"))
    x = torch.from_numpy(images.astype(np.float32) / 255.0).unsqueeze(1)
    x = (x - 0.2860) / 0.3530
    return x, torch.from_numpy(labels.astype(np.int64))


_SAFETENSORS_DTYPES = {"F32": np.float32, "F64": np.float64, "I64": np.int64, "I32": np.int32,
                       "U8": np.uint8, "F16": np.float16}


def load_safetensors(path):
    """A plain reader of the safetensors format (the safetensors package is not in Debian)."""
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    base = 8 + n
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        arr = np.frombuffer(blob[base + begin:base + end], dtype=_SAFETENSORS_DTYPES[info["dtype"]])
        out[name] = torch.from_numpy(arr.reshape(info["shape"]).copy())
    return out
