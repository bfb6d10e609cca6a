#!/usr/bin/env python3
"""PyTorch peer of the C++ benchmark bench/ops_cpu.

Usage:
    /usr/bin/python3 bench/ops_cpu_torch.py --op OP [--threads 2] [--reps N] [--warmup W]
                                            [--case NAME] [--list]
    /usr/bin/python3 bench/ops_cpu_torch.py --serve [--threads 2] [--reps N] [--warmup W]

--serve (how stoke-bench-ops-cpu runs it): prints {"ready": true} once torch is imported, then
reads "OP CASE" lines from stdin and answers each with
its JSON line ({"op": ..., "case": ..., "error": "..."} for a request it cannot run), until stdin
closes; so the bench measures both sides of a row back to back.

Prints one JSON line per case to stdout, e.g.
    {"op": "conv2d", "case": "N64_C32_K64_H14_k3", "fwd_ms": 2.71, "fwdbwd_ms": 8.70}
sgemm prints {"op": "sgemm", "case": "n1024", "fwd_ms": ..., "gflops": ...} instead, and
optimizer {"op": "optimizer", "case": "adam_n1048576", "fwd_ms": ...}: one optimizer.step() over
one parameter of n elements (torch.optim.SGD with momentum 0.9, torch.optim.Adam; foreach=False,
the single-tensor rules stoke implements), after a first untimed step that creates the state.
optimizer_list: one step over t parameters of n elements ("sgd_fused_t200_n5000": foreach=True,
"..._loop_...": foreach=False), against stoke's multi-tensor step and its per-tensor loop.
Times are medians over --reps timed repetitions (time.perf_counter), in milliseconds.

fwd_ms     : forward only, under torch.no_grad() (no autograd graph is recorded).
fwdbwd_ms  : forward with the input and parameters requiring grad, then
             out.backward(grad_out) (loss.backward() for cross_entropy); grads are
             reset to None between repetitions, outside the timed region.
Everything is float32. Nothing but the JSON lines goes to stdout.
"""

import argparse
import json
import statistics
import sys
import time

import torch
import torch.nn.functional as F

OPS = {
    "conv2d": ["N64_C1_K32_H28_k3", "N64_C32_K64_H14_k3", "N64_C64_K64_H8_k3"],
    # ResNet-8's nine convolutions at batch 128 (no bias; s2: stride 2; data: no input gradient)
    "conv2d_resnet8": ["N128_C1_K16_H28_k3_data", "N128_C16_K16_H28_k3", "N128_C16_K32_H28_k3_s2",
                       "N128_C16_K32_H28_k1_s2", "N128_C32_K32_H14_k3", "N128_C32_K64_H14_k3_s2",
                       "N128_C32_K64_H14_k1_s2", "N128_C64_K64_H7_k3"],
    # VGG-11's convolutions on 28x28 images at batch 128 (its last two share one shape)
    "conv2d_vgg11": ["N128_C1_K64_H28_k3_data", "N128_C64_K128_H14_k3", "N128_C128_K256_H7_k3",
                     "N128_C256_K256_H7_k3", "N128_C256_K512_H3_k3", "N128_C512_K512_H3_k3",
                     "N128_C512_K512_H1_k3"],
    "linear": ["N128_784_256"],
    "batch_norm": ["N64_C32_H28"],
    "batch_norm_relu": ["N64_C32_H28_unfused", "N64_C32_H28_fused"],
    "group_norm": ["N64_C32_H28_G8"],
    "layer_norm": ["N8192_D384"],
    "max_pool2d": ["N64_C32_H28_k2s2"],
    "cross_entropy": ["N128_C10", "N1024_C1000"],
    "softmax": ["N1024_C1000"],
    "silu": ["N64_C32_H28"],
    "hardswish": ["N64_C32_H28"],
    "sgemm": ["n256", "n512", "n1024", "n2048"],
    "optimizer": ["sgd_n1048576", "adam_n1048576"],
    "optimizer_list": ["sgd_fused_t200_n5000", "sgd_loop_t200_n5000", "adam_fused_t200_n5000",
                       "adam_loop_t200_n5000"],
}


def parse_case(case):
    """'N64_C32_K64_H14_k3' -> {'N': 64, 'C': 32, 'K': 64, 'H': 14, 'k': 3}."""
    out = {}
    for part in case.split("_"):
        i = 0
        while i < len(part) and not part[i].isdigit():
            i += 1
        out[part[:i]] = part[i:]
    return out


# The first measurement of a process warms up for at least this long (as bench/bench_util.h):
# right after start the machine is cold, and a process's first case read up to 10x slower. In
# --serve mode each case after the first warms up for HANDOFF_WARMUP_MS at least: stoke's side
# just ran (bench_util.h's kHandoffWarmupMs, the same rule on stoke's side).
FIRST_WARMUP_MS = 2000.0
HANDOFF_WARMUP_MS = 1000.0
_min_warmup_ms = [FIRST_WARMUP_MS]


def median_ms(fn, reps, warmup, before=None):
    start = time.perf_counter()
    at_least_ms = _min_warmup_ms[0] if warmup > 0 else 0.0
    i = 0
    while i < warmup or (time.perf_counter() - start) * 1e3 < at_least_ms:
        if before is not None:
            before()
        fn()
        i += 1
    if warmup > 0:
        _min_warmup_ms[0] = 0.0
    times = []
    for _ in range(reps):
        if before is not None:
            before()
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def clear_grads(tensors):
    def run():
        for t in tensors:
            t.grad = None
    return run


def bench_autograd(forward, leaves, grad_out, reps, warmup):
    """forward: () -> output tensor, using `leaves` (which require grad)."""
    def fwd():
        with torch.no_grad():
            forward()

    def fwdbwd():
        out = forward()
        if grad_out is None:
            out.backward()
        else:
            out.backward(grad_out)

    fwd_ms = median_ms(fwd, reps, warmup)
    fwdbwd_ms = median_ms(fwdbwd, reps, warmup, before=clear_grads(leaves))
    return {"fwd_ms": round(fwd_ms, 4), "fwdbwd_ms": round(fwdbwd_ms, 4)}


def leaf(*shape):
    return torch.randn(*shape, dtype=torch.float32).requires_grad_(True)


def run_case(op, case, reps, warmup):
    p = parse_case(case)
    if op == "conv2d":
        n, c, k, h, ks = int(p["N"]), int(p["C"]), int(p["K"]), int(p["H"]), int(p["k"])
        x, w, b = leaf(n, c, h, h), leaf(k, c, ks, ks), leaf(k)
        fwd = lambda: F.conv2d(x, w, b, stride=1, padding=ks // 2)
        with torch.no_grad():
            gout = torch.randn_like(fwd())
        return bench_autograd(fwd, [x, w, b], gout, reps, warmup)
    if op in ("conv2d_resnet8", "conv2d_vgg11"):
        n, c, k, h, ks = int(p["N"]), int(p["C"]), int(p["K"]), int(p["H"]), int(p["k"])
        stride = int(p["s"]) if "s" in p else 1
        data = "data" in p
        x = torch.randn(n, c, h, h) if data else leaf(n, c, h, h)
        w = leaf(k, c, ks, ks)
        fwd = lambda: F.conv2d(x, w, None, stride=stride, padding=ks // 2)
        with torch.no_grad():
            gout = torch.randn_like(fwd())
        return bench_autograd(fwd, [w] if data else [w, x], gout, reps, warmup)
    if op == "linear":
        # N128_784_256 -> N=128, in=784, out=256
        parts = case.split("_")
        n, fin, fout = int(parts[0][1:]), int(parts[1]), int(parts[2])
        x, w, b = leaf(n, fin), leaf(fout, fin), leaf(fout)
        fwd = lambda: F.linear(x, w, b)
        gout = torch.randn(n, fout)
        return bench_autograd(fwd, [x, w, b], gout, reps, warmup)
    if op == "batch_norm":
        n, c, h = int(p["N"]), int(p["C"]), int(p["H"])
        x, w, b = leaf(n, c, h, h), leaf(c), leaf(c)
        rm, rv = torch.zeros(c), torch.ones(c)
        fwd = lambda: F.batch_norm(x, rm, rv, w, b, training=True, momentum=0.1, eps=1e-5)
        gout = torch.randn(n, c, h, h)
        return bench_autograd(fwd, [x, w, b], gout, reps, warmup)
    if op == "batch_norm_relu":  # torch runs the two ops for both of stoke's cases
        n, c, h = int(p["N"]), int(p["C"]), int(p["H"])
        x, w, b = leaf(n, c, h, h), leaf(c), leaf(c)
        rm, rv = torch.zeros(c), torch.ones(c)
        fwd = lambda: F.relu(F.batch_norm(x, rm, rv, w, b, training=True, momentum=0.1, eps=1e-5))
        gout = torch.randn(n, c, h, h)
        return bench_autograd(fwd, [x, w, b], gout, reps, warmup)
    if op == "group_norm":
        n, c, h, g = int(p["N"]), int(p["C"]), int(p["H"]), int(p["G"])
        x, w, b = leaf(n, c, h, h), leaf(c), leaf(c)
        fwd = lambda: F.group_norm(x, g, w, b, eps=1e-5)
        gout = torch.randn(n, c, h, h)
        return bench_autograd(fwd, [x, w, b], gout, reps, warmup)
    if op == "layer_norm":
        n, d = int(p["N"]), int(p["D"])
        x, w, b = leaf(n, d), leaf(d), leaf(d)
        fwd = lambda: F.layer_norm(x, (d,), w, b, eps=1e-5)
        gout = torch.randn(n, d)
        return bench_autograd(fwd, [x, w, b], gout, reps, warmup)
    if op == "max_pool2d":
        n, c, h, ks = int(p["N"]), int(p["C"]), int(p["H"]), int(p["k"].split("s")[0])
        stride = int(case.rsplit("s", 1)[1])
        x = leaf(n, c, h, h)
        fwd = lambda: F.max_pool2d(x, ks, stride)
        with torch.no_grad():
            gout = torch.randn_like(fwd())
        return bench_autograd(fwd, [x], gout, reps, warmup)
    if op == "cross_entropy":
        n, c = int(p["N"]), int(p["C"])
        x = leaf(n, c)
        target = torch.randint(0, c, (n,), dtype=torch.int64)
        fwd = lambda: F.cross_entropy(x, target, reduction="mean")
        return bench_autograd(fwd, [x], None, reps, warmup)
    if op == "softmax":
        n, c = int(p["N"]), int(p["C"])
        x = leaf(n, c)
        fwd = lambda: F.softmax(x, dim=-1)
        gout = torch.randn(n, c)
        return bench_autograd(fwd, [x], gout, reps, warmup)
    if op in ("silu", "hardswish"):
        n, c, h = int(p["N"]), int(p["C"]), int(p["H"])
        x = leaf(n, c, h, h)
        fn = F.silu if op == "silu" else F.hardswish
        fwd = lambda: fn(x)
        gout = torch.randn(n, c, h, h)
        return bench_autograd(fwd, [x], gout, reps, warmup)
    if op == "sgemm":
        n = int(p["n"])
        a = torch.randn(n, n, dtype=torch.float32)
        b = torch.randn(n, n, dtype=torch.float32)
        out = torch.empty(n, n, dtype=torch.float32)
        ms = median_ms(lambda: torch.mm(a, b, out=out), reps, warmup)
        return {"fwd_ms": round(ms, 4), "gflops": round(2.0 * n ** 3 / (ms * 1e-3) / 1e9, 3)}
    if op == "optimizer":
        n = int(p["n"])
        w = torch.randn(n, dtype=torch.float32).requires_grad_(True)
        w.grad = torch.randn(n, dtype=torch.float32)
        if "sgd" in p:
            opt = torch.optim.SGD([w], lr=0.01, momentum=0.9, foreach=False)
        else:
            opt = torch.optim.Adam([w], foreach=False)
        opt.step()  # the first step creates the state (untimed)
        return {"fwd_ms": round(median_ms(opt.step, reps, warmup), 4)}
    if op == "optimizer_list":
        ws = []
        for _ in range(int(p["t"])):
            w = torch.randn(int(p["n"]), dtype=torch.float32).requires_grad_(True)
            w.grad = torch.randn(int(p["n"]), dtype=torch.float32)
            ws.append(w)
        foreach = "fused" in p  # torch 1.13: fused=True is CUDA-only; foreach is its list path
        if "sgd" in p:
            opt = torch.optim.SGD(ws, lr=0.01, momentum=0.9, foreach=foreach)
        else:
            opt = torch.optim.Adam(ws, foreach=foreach)
        opt.step()
        return {"fwd_ms": round(median_ms(opt.step, reps, warmup), 4)}
    raise ValueError("unknown op %r" % op)


def measure(op, case, reps, warmup):
    torch.manual_seed(0)  # each case's inputs the same whatever ran before it
    res = {"op": op, "case": case}
    res.update(run_case(op, case, reps, warmup))
    return res


def serve(reps, warmup):
    """Says {"ready": true}, then answers "OP CASE" lines on stdin with JSON lines until stdin
    closes."""
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        parts = line.split()
        if not parts:
            continue
        if len(parts) != 2 or parts[0] not in OPS or parts[1] not in OPS[parts[0]]:
            res = {"op": parts[0], "case": parts[1] if len(parts) > 1 else "",
                   "error": "unknown request %r (expected OP CASE, a case of bench/ops_cpu_torch.py)"
                            % line.strip()}
        else:
            try:
                res = measure(parts[0], parts[1], reps, warmup)
            except Exception as e:  # report it and go on with the next request
                res = {"op": parts[0], "case": parts[1], "error": "%s: %s" % (type(e).__name__, e)}
            _min_warmup_ms[0] = max(_min_warmup_ms[0], HANDOFF_WARMUP_MS)
        print(json.dumps(res), flush=True)
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--op", choices=sorted(OPS))
    ap.add_argument("--serve", action="store_true",
                    help="answer 'OP CASE' lines on stdin (instead of --op)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--case", default=None, help="run only this case")
    ap.add_argument("--list", action="store_true", help="print the case names of OP and exit")
    args = ap.parse_args()
    if args.reps < 1 or args.warmup < 0:
        print("--reps must be >= 1 and --warmup >= 0", file=sys.stderr)
        return 2
    if args.serve == (args.op is not None):
        print("give either --op OP or --serve", file=sys.stderr)
        return 2
    torch.set_num_threads(args.threads)
    if args.serve:
        return serve(args.reps, args.warmup)

    cases = OPS[args.op]
    if args.list:
        for c in cases:
            print(c)
        return 0
    if args.case is not None:
        if args.case not in cases:
            print("unknown case %r for op %s; cases: %s" % (args.case, args.op, ", ".join(cases)),
                  file=sys.stderr)
            return 2
        cases = [args.case]
    for case in cases:
        print(json.dumps(measure(args.op, case, args.reps, args.warmup)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
