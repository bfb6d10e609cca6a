#!/usr/bin/env python3
"""stoke-pack --limit and stoke-train --limit-train/--limit-test read an IDX .gz only as far as the
images asked for need (issue 39: a 2.8 MB .gz of 2.9 GB took 2.9 GB of RSS with --limit 100).

usage: idx_limit_check.py STOKE_PACK STOKE_TRAIN

The files declare 502 MB of images (all there: one MiB of zeros compresses to ~1 KiB, so the .gz is
0.5 MB). Each program is run as a child of this small process and its peak RSS read from wait4:
reading the whole stream needs 502 MB for the tensor alone (stoke-pack took 502,512 KiB and
stoke-train 744,064 KiB before the fix), the images asked for need 5 MB and 0.2 MB. The bound is each program's own
peak on a small raw IDX file with the same flags (15 and 31 MB in a CPU-only build, 240 MB for
stoke-train with the CUDA libraries loaded) plus 250 MB, half of what the whole stream takes: it
tells the two apart with room on both sides whatever the program's own size.
(A child of the C++ test binary would not do: a forked child's peak RSS counts the parent's pages
it shared before exec.)
"""
import os
import struct
import subprocess
import sys
import tempfile
import zlib

PACK, TRAIN = sys.argv[1], sys.argv[2]
MARGIN_KIB = 250 * 1024


def gzip_member(data):
    c = zlib.compressobj(9, zlib.DEFLATED, 31)
    return c.compress(data) + c.flush()


def write_split(d, prefix, n, h, w, gz):
    """n black h x w images: gzipped as members of 1 MiB of zeros, or raw; labels raw."""
    header = struct.pack(">IIII", 0x803, n, h, w)
    total = n * h * w
    if gz:
        mib = gzip_member(bytes(1 << 20))
        data = gzip_member(header) + mib * (total >> 20) + gzip_member(bytes(total & ((1 << 20) - 1)))
        name = f"{prefix}-images-idx3-ubyte.gz"
    else:
        data, name = header + bytes(total), f"{prefix}-images-idx3-ubyte"
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)
    with open(os.path.join(d, f"{prefix}-labels-idx1-ubyte"), "wb") as f:
        f.write(struct.pack(">II", 0x801, n) + bytes(i % 10 for i in range(n)))


def peak_rss_kib(cmd):
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    out = p.stdout.read()
    _, status, usage = os.wait4(p.pid, 0)
    p.returncode = os.waitstatus_to_exitcode(status)
    return p.returncode, out, usage.ru_maxrss


def require(ok, what, out=""):
    if not ok:
        sys.exit(f"FAIL: {what}\n{out}")


with tempfile.TemporaryDirectory() as d:
    pack_in = os.path.join(d, "pack")
    os.makedirs(pack_in)
    small_in = os.path.join(d, "pack-small")
    os.makedirs(small_in)
    write_split(small_in, "train", 100, 224, 224, gz=False)  # what --limit 100 needs, raw
    rc, out, base = peak_rss_kib([PACK, "--format", "idx", "--input", small_in, "--limit", "100",
                                  "--output", os.path.join(d, "packed-small")])
    require(rc == 0, "stoke-pack of 100 raw images ran", out)
    write_split(pack_in, "train", 10000, 224, 224, gz=True)  # 502 MB declared and held
    rc, out, kib = peak_rss_kib([PACK, "--format", "idx", "--input", pack_in, "--limit", "100",
                                 "--output", os.path.join(d, "packed")])
    require(rc == 0 and "packed 100 records (224x224x1" in out, "stoke-pack --limit 100 ran", out)
    require(kib < base + MARGIN_KIB,
            f"stoke-pack --limit 100 peaked at {kib} KiB, bound {base} + {MARGIN_KIB}", out)
    print(f"stoke-pack --limit 100 of a 502 MB .gz: peak RSS {kib} KiB ({base} KiB on 100 raw)")

    train_in = os.path.join(d, "train")
    os.makedirs(train_in)
    write_split(train_in, "train", 640000, 28, 28, gz=True)  # 502 MB declared and held
    write_split(train_in, "t10k", 100, 28, 28, gz=False)
    small_train = os.path.join(d, "train-small")
    os.makedirs(small_train)
    write_split(small_train, "train", 256, 28, 28, gz=False)
    write_split(small_train, "t10k", 100, 28, 28, gz=False)
    flags = ["--limit-train", "256", "--limit-test", "64", "--epochs", "1", "--no-progress",
             "--threads", "2"]
    rc, out, base = peak_rss_kib([TRAIN, "--data", small_train] + flags)
    require(rc == 0, "stoke-train on 256 raw images ran", out)
    rc, out, kib = peak_rss_kib([TRAIN, "--data", train_in] + flags)
    require(rc == 0 and "data: 256 train / 64 test images" in out, "stoke-train ran", out)
    require(kib < base + MARGIN_KIB,
            f"stoke-train --limit-train 256 peaked at {kib} KiB, bound {base} + {MARGIN_KIB}", out)
    print(f"stoke-train --limit-train 256 of a 502 MB .gz: peak RSS {kib} KiB ({base} KiB on 256 raw)")
