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
    def __init__(self, blocks, widths, in_channels=1, num_classes=10, norm=nn.BatchNorm2d,
                 stem_pool=False):
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, widths[0], 3, 1, 1, bias=False)
        self.bn1 = norm(widths[0])
        self.maxpool = nn.MaxPool2d(2) if stem_pool else None
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
        if self.maxpool is not None:
            x = self.maxpool(x)
        for s in range(self.nstages):
            x = getattr(self, "layer%d" % (s + 1))(x)
        return self.fc(F.adaptive_avg_pool2d(x, 1).flatten(1))


class VGG(nn.Module):
    """stoke's VGG (nn/models/vgg_mobilenet.cpp): conv-BN-ReLU per entry, a 2x2 max pool per -1
    while the map is at least 2 wide, global average pool, one linear layer."""

    def __init__(self, config, in_channels=1, num_classes=10, input_size=28):
        super().__init__()
        layers, inp, size = [], in_channels, input_size
        for c in config:
            if c < 0:
                if size >= 2:
                    layers.append(nn.MaxPool2d(2))
                    size //= 2
                continue
            layers += [nn.Conv2d(inp, c, 3, padding=1), nn.BatchNorm2d(c), nn.ReLU()]
            inp = c
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Linear(inp, num_classes)

    def forward(self, x):
        return self.classifier(F.adaptive_avg_pool2d(self.features(x), 1).flatten(1))


class InvertedResidual(nn.Module):
    def __init__(self, inp, out, expansion, stride):
        super().__init__()
        planes = expansion * inp
        self.stride = stride
        self.conv1 = nn.Conv2d(inp, planes, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride, 1, groups=planes, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3 = nn.Conv2d(planes, out, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(out)
        self.shortcut = None
        if stride == 1 and inp != out:
            self.shortcut = nn.Sequential(nn.Conv2d(inp, out, 1, bias=False), nn.BatchNorm2d(out))

    def forward(self, x):
        h = F.relu(self.bn1(self.conv1(x)))
        h = F.relu(self.bn2(self.conv2(h)))
        h = self.bn3(self.conv3(h))
        if self.stride != 1:
            return h
        return h + (self.shortcut(x) if self.shortcut is not None else x)


class MobileNetV2(nn.Module):
    """stoke's MobileNetV2 (kuangliu's CIFAR variant, nn/models/vgg_mobilenet.cpp)."""

    CONFIG = [(1, 16, 1, 1), (6, 24, 2, 1), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1),
              (6, 160, 3, 2), (6, 320, 1, 1)]

    def __init__(self, in_channels=1, num_classes=10):
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, 32, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(32)
        blocks, inp = [], 32
        for expansion, out, n, stride in self.CONFIG:
            for b in range(n):
                blocks.append(InvertedResidual(inp, out, expansion, stride if b == 0 else 1))
                inp = out
        self.layers = nn.Sequential(*blocks)
        self.conv2 = nn.Conv2d(320, 1280, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(1280)
        self.linear = nn.Linear(1280, num_classes)

    def forward(self, x):
        h = F.relu(self.bn1(self.conv1(x)))
        h = self.layers(h)
        h = F.relu(self.bn2(self.conv2(h)))
        return self.linear(F.adaptive_avg_pool2d(h, 1).flatten(1))


VGG_CONFIGS = {
    "vgg11": [64, -1, 128, -1, 256, 256, -1, 512, 512, -1, 512, 512, -1],
    "vgg16": [64, 64, -1, 128, 128, -1, 256, 256, 256, -1, 512, 512, 512, -1, 512, 512, 512, -1],
}


def make_model(name, in_channels=1, num_classes=10, input_size=28):
    if name == "lenet5":
        return LeNet5(in_channels, num_classes, input_size)
    depths = {"resnet8": 1, "resnet20": 3, "resnet56": 9}
    gn = name.endswith("_gn")
    base = name[:-3] if gn else name
    norm = group_norm if gn else nn.BatchNorm2d
    if name == "resnet8_pool":
        return ResNet([1, 1, 1], [16, 32, 64], in_channels, num_classes, stem_pool=True)
    if base in depths:
        n = depths[base]
        return ResNet([n, n, n], [16, 32, 64], in_channels, num_classes, norm)
    if base == "resnet18":
        return ResNet([2, 2, 2, 2], [64, 128, 256, 512], in_channels, num_classes, norm)
    if name in VGG_CONFIGS:
        return VGG(VGG_CONFIGS[name], in_channels, num_classes, input_size)
    if name == "mobilenetv2":
        return MobileNetV2(in_channels, num_classes)
    if name in ("resnet50", "efficientnet_b0", "convnext_tiny", "convnext_nano"):
        return torchvision_model(name, in_channels, num_classes)
    raise ValueError("no torch twin for model %r" % name)


def torchvision_model(name, in_channels, num_classes):
    """torchvision's own ResNet-50, EfficientNet-B0 and ConvNeXt (Debian's python3-torchvision),
    with the stem convolution rebuilt for `in_channels` (and, for convnext_nano, 2x2: 28x28
    inputs); the names do not change, so a stoke checkpoint loads with strict=True."""
    import torchvision  # only these models need it
    from torchvision.models.convnext import CNBlockConfig, ConvNeXt
    if name == "resnet50":
        m = torchvision.models.resnet50(num_classes=num_classes)
        if in_channels != 3:
            m.conv1 = nn.Conv2d(in_channels, 64, 7, 2, 3, bias=False)
        return m
    if name == "efficientnet_b0":
        m = torchvision.models.efficientnet_b0(num_classes=num_classes)
        m.features[0][0] = nn.Conv2d(in_channels, 32, 3, 2, 1, bias=False)
        return m
    if name == "convnext_tiny":
        m = torchvision.models.convnext_tiny(num_classes=num_classes)
        m.features[0][0] = nn.Conv2d(in_channels, 96, 4, 4)
        return m
    dims, depths = [32, 64, 128, 256], [2, 2, 6, 2]
    setting = [CNBlockConfig(d, dims[i + 1] if i + 1 < len(dims) else None, n)
               for i, (d, n) in enumerate(zip(dims, depths))]
    m = ConvNeXt(setting, num_classes=num_classes)
    m.features[0][0] = nn.Conv2d(in_channels, 32, 2, 2)
    return m


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


def save_safetensors(path, tensors):
    """A plain safetensors writer: the tensors in order, their data end to end (offsets cover the
    data section exactly, as the reference library requires)."""
    names = {np.dtype(v): k for k, v in _SAFETENSORS_DTYPES.items()}
    header, blobs, offset = {}, [], 0
    for name, t in tensors.items():
        a = t.detach().cpu().contiguous().numpy()
        b = a.tobytes()
        header[name] = {"dtype": names[a.dtype], "shape": list(a.shape),
                        "data_offsets": [offset, offset + len(b)]}
        blobs.append(b)
        offset += len(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


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
