#!/usr/bin/python3
"""Writes the fuzzers' seed corpora, fuzz/corpus/<harness>/ (committed; run again to refresh).

Each seed is a small valid input (and a few known-bad ones: the reproductions of issue 14) in the
harness's input layout (fuzz/fuzz_<harness>.cpp's header comment). Needs python3-pil for the
images (Debian's /usr/bin/python3). Run from anywhere: /usr/bin/python3 fuzz/make_seeds.py
"""
import gzip
import io
import json
import os
import shutil
import struct
import sys
import zlib

from PIL import Image

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
CORPUS = os.path.join(HERE, "corpus")


def put(harness, name, data):
    d = os.path.join(CORPUS, harness)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def safetensors(tensors, metadata=None):
    """tensors: [(name, dtype, shape, raw bytes)] in data order; no stoke.crc32 (optional)."""
    header, offset, blob = {}, 0, b""
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, dtype, shape, raw in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(raw)]}
        offset += len(raw)
        blob += raw
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + blob


# stoke's writer (nn/checkpoint/safetensors.cpp): tensors by descending dtype alignment, then name;
# "__metadata__" first with sorted keys and "stoke.crc32", the CRC-32 of each tensor's name, dtype,
# shape and data and of the other metadata.
RANK = {"BOOL": 0, "U8": 1, "F16": 2, "BF16": 3, "I32": 4, "F32": 5, "F64": 6, "I64": 7}


def stoke_safetensors(tensors, metadata):
    tensors = sorted(tensors, key=lambda t: (-RANK[t[1]], t[0]))
    sums = {}
    for name, dtype, shape, raw in tensors:
        desc = (name + "\0" + dtype + "\0" + ",".join(map(str, shape)) + "\0").encode()
        sums[name] = "%08x" % zlib.crc32(raw, zlib.crc32(desc))
    other = json.dumps(metadata, separators=(",", ":"), sort_keys=True, ensure_ascii=False)
    sums["__metadata__"] = "%08x" % zlib.crc32(other.encode())
    meta = dict(metadata)
    meta["stoke.crc32"] = json.dumps(sums, separators=(",", ":"), sort_keys=True)
    head = '{"__metadata__":' + json.dumps(dict(sorted(meta.items())), separators=(",", ":"),
                                           ensure_ascii=False)
    offset, blob = 0, b""
    for name, dtype, shape, raw in tensors:
        head += ',%s:{"dtype":"%s","shape":%s,"data_offsets":[%d,%d]}' % (
            json.dumps(name), dtype, json.dumps(shape, separators=(",", ":")), offset,
            offset + len(raw))
        offset += len(raw)
        blob += raw
    h = (head + "}").encode()
    h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + blob


def seeds_safetensors():
    put("safetensors", "reference", open(os.path.join(ROOT, "tests/fixtures/safetensors_reference.safetensors"), "rb").read())
    f32 = struct.pack("<6f", 0.5, -1, 2, 3.25, 0, 7)
    put("safetensors", "f32", safetensors([("w", "F32", [2, 3], f32)], {"epoch": "1"}))
    put("safetensors", "mixed", safetensors([
        ("a", "I64", [2], struct.pack("<2q", -3, 1 << 40)),
        ("b", "BOOL", [3], b"\x00\x01\x00"),
        ("c", "F16", [1, 2], struct.pack("<2e", 1.5, -2)),
        ("d", "BF16", [2], b"\x80\x3f\x00\x40"),
        ("e", "U8", [0, 4], b""),
        ("f", "F64", [], struct.pack("<d", 3.0)),
    ]))
    put("safetensors", "empty", safetensors([]))
    # Issue 39: stoke's own files (with "stoke.crc32"), the edits that stepped around the
    # checksum (its key renamed in place; bytes inserted into its name with the length field
    # unchanged, which shifts the data), trailing bytes, a gap between tensors, and CRC-free files
    # shaped like stoke-train's checkpoints.
    w = struct.pack("<6f", 0.5, -1, 2, 3.25, 0, 7)
    b = struct.pack("<3f", 1, 2, 3)
    meta = {"format": "stoke-train/2", "model": "lenet5", "epoch": "1", "sample": "256",
            "global_step": "4"}
    stoke = stoke_safetensors([("fc.weight", "F32", [2, 3], w), ("fc.bias", "F32", [3], b),
                               ("bn.num_batches_tracked", "I64", [], struct.pack("<q", 4))], meta)
    put("safetensors", "stoke", stoke)
    put("safetensors", "stoke-key-renamed", stoke.replace(b"stoke.crc32", b"stoke.crc99"))
    n = struct.unpack("<Q", stoke[:8])[0]
    at = stoke.index(b"stoke.crc32")
    put("safetensors", "stoke-key-shifted", stoke[:at + 5] + b"abc" + stoke[at + 5:])
    put("safetensors", "stoke-trailing", stoke + b"\0\0\0")
    put("safetensors", "stoke-header-trimmed", stoke[:8 + n - 3] + stoke[8 + n:])
    plain = safetensors([("fc.bias", "F32", [3], b), ("fc.weight", "F32", [2, 3], w)], meta)
    put("safetensors", "crc-free-checkpoint", plain)
    put("safetensors", "crc-free-trailing", plain + b"xyz")
    gap = json.dumps({"a": {"dtype": "F32", "shape": [3], "data_offsets": [0, 12]},
                      "b": {"dtype": "U8", "shape": [2], "data_offsets": [16, 18]}},
                     separators=(",", ":")).encode()
    gap += b" " * (-len(gap) % 8)
    put("safetensors", "gap", struct.pack("<Q", len(gap)) + gap + b + b"\0" * 6)


def idx(code, dims, raw):
    return bytes([0, 0, code, len(dims)]) + b"".join(struct.pack(">I", d) for d in dims) + raw


def seeds_idx():
    images = idx(0x08, [2, 3, 4], bytes(range(24)))
    labels = idx(0x08, [3], b"\x01\x00\x09")
    others = {
        "i8": idx(0x09, [4], b"\x80\xff\x00\x7f"),
        "i16": idx(0x0B, [2, 2], struct.pack(">4h", -1, 2, 300, -32768)),
        "i32": idx(0x0C, [3], struct.pack(">3i", -7, 0, 1 << 30)),
        "f32": idx(0x0D, [2], struct.pack(">2f", 1.5, -0.25)),
        "f64": idx(0x0E, [1, 1, 1], struct.pack(">d", 2.5)),
    }
    # Byte 0: odd = as is, even = gzip-compressed by the harness.
    for name, data in [("images", images), ("labels", labels)] + list(others.items()):
        put("idx", name + "-raw", b"\x01" + data)
        put("idx", name + "-gz", b"\x00" + data)
    put("idx", "images-gzfile", b"\x01" + gzip.compress(images, mtime=0))


def pack(h, w, c, labels, per_shard, names):
    """A stoke-pack index and shards (data/packed.cpp's format, version 1)."""
    n, rec = len(labels), h * w * c + 4
    shards, crcs = [], []
    for s in range(0, (n + per_shard - 1) // per_shard):
        recs = b""
        for i in range(s * per_shard, min(n, (s + 1) * per_shard)):
            recs += bytes((i * 7 + k) % 256 for k in range(h * w * c)) + struct.pack("<I", labels[i])
        crc = zlib.crc32(recs)
        count = len(recs) // rec
        hd = b"STKSHRD\0" + struct.pack("<IIIIIIQQQ", 1, s, h, w, c, crc, s * per_shard, count, rec)
        shards.append(hd.ljust(64, b"\0") + recs)
        crcs.append((count, crc))
    index = b"STKPIDX\0" + struct.pack("<IIIIIIQQQI", 1, h, w, c, max(labels) + 1, len(shards), n, rec, per_shard, len(names))
    for name in names:
        index += struct.pack("<I", len(name)) + name.encode()
    for count, crc in crcs:
        index += struct.pack("<QII", count, crc, 0)
    index += struct.pack("<I", zlib.crc32(index))
    return index, shards


def seeds_packed():
    for name, (h, w, c, labels, per, names) in {
        "one-shard": (2, 3, 1, [0, 1, 1], 4, ["a", "b"]),
        "two-shards": (2, 2, 3, [2, 0, 1, 2, 1], 3, []),
    }.items():
        index, shards = pack(h, w, c, labels, per, names)
        body = struct.pack("<I", len(index)) + index + struct.pack("<I", len(shards[0])) + shards[0]
        body += shards[1] if len(shards) > 1 else b""
        for flags in (1, 2):  # verify; recompute the index CRC (no verify)
            put("packed", "%s-%d" % (name, flags), bytes([flags]) + body)


def encoded(img, fmt, **kw):
    b = io.BytesIO()
    img.save(b, fmt, **kw)
    return b.getvalue()


def huffman_over_256(jpeg):
    """A DHT segment whose 16 counts sum to 257 (> 256 symbols), inserted before the first SOS:
    stb_image 2.27 wrote out of bounds in stbi__build_huffman (issue 14)."""
    counts = [0] * 14 + [2, 255]
    seg = bytes([0x00]) + bytes(counts) + bytes(i % 256 for i in range(257))
    dht = b"\xff\xc4" + struct.pack(">H", len(seg) + 2) + seg
    sos = jpeg.index(b"\xff\xda")
    return jpeg[:sos] + dht + jpeg[sos:]


def bmp_height_int_min():
    """A 40-byte-header BMP of width 1 and height INT_MIN (stb 2.27 negated it: overflow)."""
    dib = struct.pack("<IiiHHIIiiII", 40, 1, -(1 << 31), 1, 24, 0, 4, 2835, 2835, 0, 0)
    return b"BM" + struct.pack("<IHHI", 14 + 40 + 4, 0, 0, 54) + dib + b"\x00\x00\xff\x00"


def seeds_image():
    rgb = Image.new("RGB", (8, 6))
    rgb.putdata([((x * 31) % 256, (y * 40) % 256, (x * y * 9) % 256) for y in range(6) for x in range(8)])
    rgba = rgb.copy()
    rgba.putalpha(Image.linear_gradient("L").resize((8, 6)))
    files = {
        "png-gray": encoded(rgb.convert("L"), "PNG"),
        "png-gray-alpha": encoded(rgba.convert("LA"), "PNG"),
        "png-rgb": encoded(rgb, "PNG"),
        "png-rgba": encoded(rgba, "PNG"),
        "png-palette": encoded(rgb.convert("P"), "PNG"),
        "png-palette-trns": encoded(rgb.convert("P"), "PNG", transparency=0),
        "png-16bit": encoded(rgb.convert("L").point(lambda v: v * 257, "I"), "PNG"),
        "png-optimized": encoded(rgb, "PNG", optimize=True),
        "jpeg-rgb": encoded(rgb, "JPEG", quality=90),
        "jpeg-gray": encoded(rgb.convert("L"), "JPEG"),
        "jpeg-progressive": encoded(rgb, "JPEG", progressive=True),
        "jpeg-cmyk": encoded(rgb.convert("CMYK"), "JPEG"),
        "jpeg-420": encoded(rgb.resize((17, 9)), "JPEG", subsampling=2),
        "bmp-rgb": encoded(rgb, "BMP"),
        "bmp-rgba": encoded(rgba, "BMP"),
        "bmp-palette": encoded(rgb.convert("P"), "BMP"),
        "bmp-1bit": encoded(rgb.convert("1"), "BMP"),
    }
    files["jpeg-huffman-over-256"] = huffman_over_256(files["jpeg-rgb"])
    files["bmp-height-int-min"] = bmp_height_int_min()
    for i, (name, data) in enumerate(sorted(files.items())):
        put("image", name, bytes([i % 5]) + data)  # byte 0: requested channels (0-4)


def seeds_train_flags():
    argvs = [
        ["--model", "lenet5", "--epochs", "3", "--batch", "64", "--lr", "0.1"],
        ["--optimizer=adamw", "--weight-decay", "0.01", "--schedule", "onecycle", "--warmup", "10"],
        ["--schedule", "multistep", "--milestones", "1,2,5", "--gamma", "0.5", "--nesterov=true"],
        ["--accum", "4", "--clip-grad", "1.0", "--label-smoothing", "0.1", "--augment"],
        ["--data-format", "packed", "--workers", "3", "--prefetch", "4", "--threads", "2"],
        ["--checkpoint", "/tmp/x", "--checkpoint-every", "100", "--resume", "--overwrite"],
        ["--device", "cuda:1", "--allow-cpu-fallback", "--tf32", "--no-progress"],
        ["--recipe", "fast", "--patience", "3", "--seed", "42", "--step-size", "2"],
        ["--allreduce", "ring", "--dist-timeout", "30", "--limit-train", "100"],
    ]
    for i, argv in enumerate(argvs):
        put("train_flags", "argv-%d" % i, b"\0".join(a.encode() for a in argv))


def seeds_report():
    """stoke-train metrics files (apps/train/metrics_records.cpp's records), and the values that
    aborted stoke-report in issue 39: null (stoke-train's non-finite value), wrong types."""
    step = {"type": "step", "epoch": 1, "step": 2, "loss": 2.1, "lr": 0.05, "data_wait_s": 0.001}
    amp = dict(step, loss_scale=65536.0, skipped_steps=0)
    ev = {"type": "eval", "step": 8, "test_loss": 1.2, "test_acc": 61.5}
    epoch = {"type": "epoch", "epoch": 1, "step": 16, "train_loss": 1.5, "train_acc": 45.1,
             "test_loss": 1.1, "test_acc": 62.0, "test_acc5": 97.0, "time_s": 2.5,
             "images_per_s": 409.6, "data_wait_s": 0.1, "data_wait_pct": 4.0, "lr": 0.05,
             "rss_mib": 120.5, "peak_rss_mib": 130.0}
    prof = {"type": "profile", "step": 10, "steps": 8, "step_ms": 12.5,
            "phase_ms": {"data wait": 0.5, "forward": 4.0, "backward": 6.0, "optimizer": 1.5,
                         "(other)": 0.5}}
    line = lambda r: json.dumps(r, separators=(",", ":")).encode() + b"\n"
    run = b"".join(line(r) for r in (step, amp, ev, prof, epoch))
    put("report", "run", run)
    put("report", "null-loss", line(dict(step, loss=None)) + line(dict(epoch, test_loss=None)))
    put("report", "wrong-types", line(dict(step, step="2")) + line(dict(prof, phase_ms=[1, 2])) +
        line({"type": 3}) + line([1, 2]))
    put("report", "unknown-type", line({"type": "note", "text": "hello"}) + line(step))
    put("report", "cut-short", run[:-20])


def main():
    for h in ("safetensors", "idx", "packed", "image", "train_flags", "report"):
        shutil.rmtree(os.path.join(CORPUS, h), ignore_errors=True)
    seeds_safetensors()
    seeds_idx()
    seeds_packed()
    seeds_image()
    seeds_train_flags()
    seeds_report()
    for h in sorted(os.listdir(CORPUS)):
        print("fuzz/corpus/%s: %d seeds" % (h, len(os.listdir(os.path.join(CORPUS, h)))))


if __name__ == "__main__":
    sys.exit(main())
