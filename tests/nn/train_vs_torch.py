#!/usr/bin/env python3
"""Training that matches PyTorch step after step.

    train_vs_torch.py STOKE_TEST_TRAIN_STEPS MODEL [--steps 5] [--batch 8] [--configs all|default]
                      [--optimizers sgd,adamw]

PyTorch's twin of MODEL (bench/torch_models.py: the same modules and parameter names) is built with
its own initialization, its weights rounded to float32 so that both sides start from the same
point, and 5 random 28x28 batches are drawn. stoke (STOKE_TEST_TRAIN_STEPS,
tests/nn/steps/train_steps_main.cpp) trains the 5 steps in float32 with SGD (lr 0.05, momentum
0.9, weight decay 5e-4) and, from the same start, with AdamW (lr 1e-3, weight decay 1e-2), once
per configuration: 1 and 2 threads, every CPU conv path on (the default) and each forced off
(STOKE_CONV_WINOGRAD, _DIRECT, _BLOCKED, _THIN = 0: the shapes it took fall to the next path), and
writes each step's loss, gradients, parameters, buffers and optimizer state. Dropout and
stochastic depth are off on both sides.

Each step k is checked against PyTorch's float64 run of that step from stoke's own state after
step k - 1 (parameters, buffers, optimizer state; the fixture's weights for k = 1): its loss, every
gradient, and the parameters, buffers and optimizer state after the update. Replaying each step
from stoke's state keeps every step's check as sharp as the first: following torch's own
trajectory instead, one legitimate difference (below) at step 2 moves every later step by far more
than rounding. torch's own float32 replay of the same steps is printed beside stoke's errors for
scale (for each optimizer's first configuration: 1 thread, default paths), never asserted on; the loss of torch's float64 trajectory from the shared start is printed
too.

The bound, from f32 rounding (u = 2^-24): a value of the step is the end of a chain of D rounded
sums (forward: one per conv/linear layer; backward: the input and the weight gradient per layer,
so D = 3 L), each of at most K terms (the model's longest reduction: a weight gradient over the
batch and the plane, or a dot product over C_in kh kw). Under the probabilistic model of rounding
errors (Higham & Mary, SIAM J. Sci. Comput. 41(5), 2019: a sum of K terms is off by at most
lambda sqrt(K) u relative to the sum of magnitudes, with probability >= 1 - 2 exp(-lambda^2 / 2)),
independent errors along the chain add in quadrature:
    tau = lambda sqrt(D K) u,   lambda = 3.
Checks against tau: the loss relative to itself; each tensor row by row (a row: one output channel,
so that one wrong channel cannot hide in a large tensor), ||stoke - ref|| <= tau max(||ref row||,
||ref tensor|| / sqrt(rows)) (a row far smaller than the tensor's typical row is held to the
tensor's scale). A conv or linear weight gradient dW = sum dy x is held to its sum of magnitudes,
sum |dy| |x| (the rounding model's own scale, computed in torch's float64 replay) in place of |dW|:
the two agree where the terms do not cancel, and a depthwise weight gradient summed over a batch of
8 small planes (2x2 and less) can cancel to a fraction of its terms. Its error reaches SGD's
momentum buffer and lr times it the parameter (added to their bounds), and AdamW's G below.
Parameters and buffers through the step's change p_k - p_(k-1), plus 2 u |p| per row for p's
float32 storage (the step rounds p, and SGD's momentum buffer before it: an absolute error that can
dwarf a small change, as torch's float32 replay shows). AdamW divides by sqrt(v): an element whose
gradient lies within the gradient's error of zero can step either way, so its parameter bound is
per element,
    |e_i| <= tau |dp_i| + lr min(5, 4 tau G / (|g_i| + eps)),
G the tensor's largest |gradient|, or of its sum of magnitudes where larger (a weight gradient's
sum |dy| |x|, and batch norm's sum |dy| |x_hat| and sum |dy|, which only G takes: check_step says
why) (its error bound tau G against the element's own |g_i|; 5 bounds
|m_hat / sqrt(v_hat)| twice over 5 steps of beta1 0.9, beta2 0.999). Gradients that are rounding
noise in float64 (a conv bias under batch norm: zero in exact arithmetic) are held to the model's
gradient scale, and so is G for their parameters: AdamW divides such a gradient by its own size,
so stoke's float32 noise (about tau times the model's gradients) steps a bias by up to lr where
torch's float64 noise steps it by nothing (VGG-11's conv biases under batch norm, step 1).

A batch norm's running mean is held to its own derivation: a channel's batch mean is a sum with
cancellation (zero in exact arithmetic behind a batch norm whose bias is 0), whose error is tau
times mean|x| <= rms(x) = sqrt(var + mean^2), times the momentum m, per element.

Where the chain bound does not describe the model (depthwise convs and batch norm over 1x1 and 2x2
planes are ill-conditioned: torch's own float32 replay lands at up to hundreds of tau), a check
beyond tau may still pass by the rule torch's compiler tests use for a float32 result against a
float64 reference (torch._dynamo.utils.same with fp64_ref): RMSE(stoke - f64) <= m RMSE(torch f32 -
f64), m = 2 (3 under 1,000 elements or for 1x1 kernels), without torch's absolute slack. torch's
RMSE is the RMS over eight float32 replays of the step, its own batch and seven copies with each
pixel moved one ulp (Torch32 says why: one replay is one sample of an error that spreads 6x where
the step is ill-conditioned). The table counts, per configuration, the checks that needed it.

Decisions at a kink, within f32 rounding of it. An activation whose exact value is 2.7e-7 can
come out negative in float32 (conv sums carry errors ~1e-6 of their magnitude), and then ReLU cuts
its gradient where float64 passes it: one element, but batch norm's backward spreads a
bias-gradient change over the whole channel and the layers before it (1.7% of the stem's gradient
in the case that made this test: ResNet-8, SGD, step 3). A max-pool window whose two largest inputs
differ by less than their rounding errors likewise sends its gradient to either one (VGG-11, AdamW,
step 2: two inputs 0.0015 delta apart in the first pool moved 1.3% of the first conv's weight
gradient). Both results are right to float32 precision; they differ by a decision, not by rounding.
So when a step fails, the replay first takes stoke's own ReLU decisions (the program's --decisions
1 writes each ReLU's output mask: autograd/elementwise_relu_observer.h) for every input within
delta = tau * rms(input) of zero where they differ from float64's, all at once (an input made
active outputs |x|, so that a max-pool window of zeros behind it picks it as stoke's did);
decisions that differ beyond delta are never adopted (the table counts them). If the step still
fails, it looks for ReLU inputs within delta of zero and max-pool windows whose runner-up is
within delta of the maximum, and flips those decisions in torch, one at a time among the closest
16 (by distance over delta) and then in pairs among the closest six, and the step passes if some
flip set brings every check within tau (or the float32 rule above): the table names each such
decision. No flip is tried on a step that passes as is, and nothing else is forgiven.

Exits 1 naming the configuration, step, tensor and both errors when a check fails; 77 (skipped)
without python3-torch. --plant NAME:STEP:REL has stoke scale one row of a gradient by 1 + REL at
that step: the ctest case that plants 1% in one row of EfficientNet-B0's depthwise weight
gradient (held to sum |dy| |x|), checks that it fails.
"""

import argparse
import collections
import copy
import hashlib
import itertools
import json
import math
import os
import struct
import subprocess
import sys
import tempfile

try:
    import numpy as np
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
except ImportError as e:  # python3-torch is optional (install-deps.sh --no-torch): skip, visibly
    print("skipped: %s (scripts/install-deps.sh installs python3-torch)" % e)
    sys.exit(77)

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))
import torch_models  # noqa: E402  (the twins of stoke's models)

U = 2.0 ** -24
LAMBDA = 3.0
SGD = dict(lr=0.05, momentum=0.9, weight_decay=5e-4)
ADAMW = dict(lr=1e-3, weight_decay=1e-2, eps=1e-8)
CONV_PATHS = ["WINOGRAD", "DIRECT", "BLOCKED", "THIN"]

# --- ReLU and max-pool with recorded inputs and chosen flips (every twin calls F.relu and
# F.max_pool2d, nn.ReLU and nn.MaxPool2d included). A flip is ("relu", call, element): the
# element's decision reversed; or ("pool", call, output element, input element): that window's
# maximum taken from another of its inputs (its runner-up, within delta of the maximum). ---
_relu = F.relu
_max_pool2d = F.max_pool2d
HOOK = {"record": None, "flips": (), "relu_call": 0, "pool_call": 0}
BN_MOMENTUM = {}  # batch norm module name -> its momentum (main fills it from the model)


def relu_hooked(x, inplace=False):
    call = HOOK["relu_call"]
    HOOK["relu_call"] += 1
    if HOOK["record"] is not None:
        HOOK["record"].append(("relu", call, x.detach(), None))
    mine = [f for f in HOOK["flips"] if f[0] == "relu" and f[1] == call]
    if not mine:
        return _relu(x, inplace=inplace)
    mask = (x > 0).to(x.dtype)
    flat = mask.view(-1)
    # An element flipped to active outputs |x| (the smallest positive double where x is 0): on the
    # side of the kink stoke took, within delta of 0 either way. x itself (negative) would lose to
    # the zeros of a max-pool window behind it, where stoke's positive value won: VGG-11, SGD, step
    # 3, with Winograd off: stoke's 2.4e-7 against float64's -7.2e-7 in a 2x2 window of zeros, the
    # gradient then through (3, 4) in stoke and into a dead (2, 4) in torch, 6 times the gradient's
    # rms in that plane. The gradient stays the mask: the shift to |x| is constant.
    shift = torch.zeros_like(flat)
    flat_x = x.detach().reshape(-1)
    tiny = torch.finfo(x.dtype).tiny
    for _, _, i in mine:
        flat[i] = 1 - flat[i]
        if flat[i] > 0:
            shift[i] = max(abs(float(flat_x[i])), tiny) - float(flat_x[i])
    return x * mask + shift.view_as(x)


def max_pool2d_hooked(x, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
                      return_indices=False):
    call = HOOK["pool_call"]
    HOOK["pool_call"] += 1
    geometry = (kernel_size, stride or kernel_size, padding, dilation, ceil_mode)
    if HOOK["record"] is not None:
        HOOK["record"].append(("pool", call, x.detach(), geometry))
    mine = [f for f in HOOK["flips"] if f[0] == "pool" and f[1] == call]
    if not mine:
        return _max_pool2d(x, kernel_size, stride, padding, dilation, ceil_mode,
                           return_indices=return_indices)
    out, idx = _max_pool2d(x, kernel_size, stride, padding, dilation, ceil_mode,
                           return_indices=True)
    idx = idx.clone()
    for _, _, o, i in mine:
        idx.view(-1)[o] = i
    n, c = x.shape[:2]
    out = x.reshape(n, c, -1).gather(2, idx.reshape(n, c, -1)).reshape(out.shape)
    return (out, idx) if return_indices else out


F.relu = relu_hooked
F.max_pool2d = max_pool2d_hooked


def pool_near_ties(x, geometry, delta):
    """[(gap, output element, runner-up's input element)] of the windows of max_pool2d(x) whose
    two largest inputs are within delta of each other, the largest above 0 (an all-zero window
    after a ReLU passes no gradient either way)."""
    k, s, p, d, ceil = geometry
    assert not ceil, "ceil_mode pools are not searched"
    n, c, h, w = x.shape
    pads = (p, p, p, p) if isinstance(p, int) else (p[1], p[1], p[0], p[0])
    planes = F.pad(x.reshape(n * c, 1, h, w), pads, value=float("-inf"))
    index = F.pad(torch.arange(h * w, dtype=torch.float64).reshape(1, 1, h, w), pads, value=-1.0)
    windows = F.unfold(planes, k, dilation=d, stride=s)        # (n c, k k, L)
    where = F.unfold(index, k, dilation=d, stride=s)[0]        # (k k, L)
    top, arg = windows.topk(2, dim=1)                           # (n c, 2, L)
    gap = (top[:, 0] - top[:, 1]).reshape(-1)
    second = arg[:, 1]                                          # (n c, L): row in the window
    runner_up = where.t().unsqueeze(0).expand(n * c, -1, -1).gather(
        2, second.unsqueeze(2)).squeeze(2).reshape(-1)          # input element per output
    near = ((gap < delta) & (top[:, 0].reshape(-1) > 0)).nonzero().reshape(-1).tolist()
    return [(float(gap[o]), o, int(runner_up[o])) for o in near]



save_safetensors = torch_models.save_safetensors


def load(path):
    """A stoke step file: float tensors as float64, and its parameter order."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        meta = json.loads(f.read(n)).get("__metadata__", {})
    t = {k: v.double() if v.is_floating_point() else v
         for k, v in torch_models.load_safetensors(path).items()}
    return t, meta.get("parameters", "").split(",")


def build(name):
    m = torch_models.make_model(name)
    for mod in m.modules():  # dropout and stochastic depth off, as on stoke's side
        if isinstance(mod, nn.Dropout) or type(mod).__name__ == "StochasticDepth":
            mod.p = 0.0
    return m


def chain_bound(model, batch):
    """tau = lambda sqrt(D K) u from the model's conv/linear layers and its activations' shapes."""
    count, longest = [0], [0]

    def hook(mod, inp, out):
        x = inp[0]
        if isinstance(mod, nn.Conv2d):
            kh, kw = mod.kernel_size
            sums = (mod.in_channels // mod.groups * kh * kw, out.shape[0] * out.shape[2] * out.shape[3],
                    mod.out_channels // mod.groups * kh * kw)
        else:
            sums = (mod.in_features, x.numel() // x.shape[-1], mod.out_features)
        count[0] += 1
        longest[0] = max(longest[0], *sums)

    handles = [m.register_forward_hook(hook) for m in model.modules()
               if isinstance(m, (nn.Conv2d, nn.Linear))]
    with torch.no_grad():
        model(torch.zeros(batch, 1, 28, 28, dtype=torch.float64))
    for h in handles:
        h.remove()
    D, K = 3 * count[0], longest[0]
    return LAMBDA * math.sqrt(D * K) * U, D, K


def magnitude_hooks(model, magnitude):
    """Hooks that fill magnitude[weight's name] with sum |dy| |x| over the terms of each conv and
    linear weight gradient dW = sum dy x (accumulated over calls), and batch norm's
    (batch_norm_magnitude): the scale of its rounding error, which the gradient itself understates
    where its terms cancel."""
    handles = []
    for name, mod in model.named_modules():
        if isinstance(mod, nn.BatchNorm2d) and mod.training:
            handles.append(mod.register_forward_hook(
                lambda mod, inp, out, name=name: batch_norm_magnitude(mod, inp[0], out, name,
                                                                      magnitude)))
            continue
        if not isinstance(mod, (nn.Conv2d, nn.Linear)):
            continue

        def forward(mod, inp, out, key=name + ".weight"):
            x = inp[0].detach().abs()

            def backward(dy):
                dy = dy.detach().abs()
                if isinstance(mod, nn.Conv2d):
                    t = torch.nn.grad.conv2d_weight(x, mod.weight.shape, dy, mod.stride,
                                                    mod.padding, mod.dilation, mod.groups)
                else:
                    t = dy.reshape(-1, dy.shape[-1]).t() @ x.reshape(-1, x.shape[-1])
                magnitude[key] = magnitude[key] + t if key in magnitude else t

            if out.requires_grad:
                out.register_hook(backward)

        handles.append(mod.register_forward_hook(forward))
    return handles


def batch_norm_magnitude(mod, x, out, name, magnitude):
    """magnitude[bn_NAME.weight] = sum |dy| |x_hat| and magnitude[bn_NAME.bias] = sum |dy| per
    channel: the terms of batch norm's dgamma = sum dy x_hat and dbeta = sum dy (training mode,
    batch statistics), which cancel as a weight gradient's do. Only AdamW's G takes them
    (check_step says why)."""
    if not out.requires_grad or mod.weight is None:
        return
    dims = (0, 2, 3)
    x = x.detach()
    mean = x.mean(dims, keepdim=True)
    var = x.var(dims, unbiased=False, keepdim=True)
    x_hat = ((x - mean) / (var + mod.eps).sqrt()).abs()

    def backward(dy):
        dy = dy.detach().abs()
        for key, t in (("bn_" + name + ".weight", (dy * x_hat).sum(dims)),
                       ("bn_" + name + ".bias", dy.sum(dims))):
            magnitude[key] = magnitude[key] + t if key in magnitude else t

    out.register_hook(backward)


def make_optimizer(opt_name, params):
    if opt_name == "sgd":
        return torch.optim.SGD(params, **SGD)
    return torch.optim.AdamW(params, **ADAMW)


def torch_step(model, state, order, batch, opt_name, dtype, flips=()):
    """One step of a copy of `model` in `dtype` from `state` (params/buffers/optim entries as in a
    stoke step file); returns the same entries after it, "grad.*" and "loss"."""
    m = copy.deepcopy(model).to(dtype)
    with torch.no_grad():
        for n, t in list(m.named_parameters()) + list(m.named_buffers()):
            src = state[("param." if isinstance(t, nn.Parameter) else "buffer.") + n]
            t.copy_(src.to(t.dtype))
    m.train()
    params = dict(m.named_parameters())
    opt = make_optimizer(opt_name, params.values())
    for i, n in enumerate(order):  # stoke numbers its state by its parameter order, as torch does
        key = "optim.state.%d." % i
        st = {k[len(key):]: v for k, v in state.items() if k.startswith(key)}
        if st:
            p = params[n]
            # copies: the step updates its state in place, and `state` is replayed again
            opt.state[p] = {k: (v.to(dtype).clone() if k != "step" else v.double().reshape(()).float())
                            for k, v in st.items()}
    x, y = batch
    HOOK.update(flips=tuple(flips), relu_call=0, pool_call=0, record=[] if not flips else None)
    magnitude = {}
    handles = magnitude_hooks(m, magnitude) if dtype == torch.float64 else []
    opt.zero_grad()
    loss = F.cross_entropy(m(x.to(dtype)), y)
    loss.backward()
    for h in handles:
        h.remove()
    decisions = HOOK["record"]
    HOOK.update(flips=(), record=None)
    out = {"loss": loss.detach().double().reshape(())}
    for n, p in params.items():
        out["grad." + n] = p.grad.detach().double().clone()
    for n, t in magnitude.items():
        out["magnitude." + n] = t
    opt.step()
    for n, p in params.items():
        out["param." + n] = p.detach().double().clone()
        for k, v in opt.state[p].items():
            idx = order.index(n)
            out["optim.state.%d.%s" % (idx, k)] = v.detach().double().clone().reshape(
                v.shape if k != "step" else ())
    for n, b in m.named_buffers():
        out["buffer." + n] = b.detach().double().clone() if b.is_floating_point() else b.detach().clone()
    return out, decisions


def rows(t):
    return t.reshape(t.shape[0], -1) if t.dim() >= 2 else t.reshape(1, -1)


def normwise(err, ref, tau, stored=None, extra=0.0):
    """Largest row error over tau times its scale: max(row norm, tensor norm / sqrt(rows)), plus
    2 u |p| of the row for values stored in float32 (`stored`), plus `extra` (an error carried in
    from the gradient)."""
    e, r = rows(err), rows(ref)
    floor = float(r.norm()) / math.sqrt(r.shape[0])
    # 1e-300: only keeps an all-zero row's bound from being 0 (0/0); no tolerance rests on it.
    bound = tau * torch.clamp(r.norm(dim=1), min=floor + 1e-300) + extra
    if stored is not None:
        bound = bound + 2 * U * rows(stored).norm(dim=1)
    return float((e.norm(dim=1) / bound).max())


def check_step(ref, got, before, opt_name, tau, grad_scale, order):
    """[(check, error / bound, tensor)] for one step: every value must be <= 1."""
    out = [("loss", abs(float(got["loss"]) - float(ref["loss"])) / (tau * abs(float(ref["loss"]))),
            "loss")]
    for key, rv in ref.items():
        if key == "loss" or key.startswith("magnitude."):
            continue  # magnitude: the scale of a weight gradient's error, used below
        gv = got.get(key)
        if gv is None or gv.shape != rv.shape:
            out.append(("missing", math.inf, key))
            continue
        if not rv.is_floating_point() or key.endswith(".step"):
            out.append(("count", 0.0 if torch.equal(gv.double(), rv.double()) else math.inf, key))
            continue
        kind = key.split(".", 1)[0]
        if kind == "grad":
            # Rounding noise in float64: an exact zero computed in f64 comes out within about
            # u64 sqrt(D K) (5e-14 for VGG-11) of the model's gradient scale; 1e-9 is four orders
            # above that and far below tau (f32's bound), so a real gradient is never taken for it.
            if float(rv.norm()) <= 1e-9 * grad_scale:
                out.append(("grad (noise)", float(gv.norm()) / (tau * grad_scale), key))
            else:
                # A conv or linear weight gradient is a sum of products dy x: its error is tau
                # times sum |dy| |x| (the rounding model's sum of magnitudes), which equals |dW|
                # only where no terms cancel.
                scale = ref.get("magnitude." + key[len("grad."):], rv)
                out.append(("grad", normwise(gv - rv, scale, tau), key))
            continue
        start = before.get(key)
        change = rv - start if start is not None else rv
        module = key[len("buffer."):-len(".running_mean")] if key.endswith(".running_mean") else None
        if kind == "buffer" and module in BN_MOMENTUM and start is not None:
            # A channel's batch mean is a sum with cancellation (zero in exact arithmetic behind a
            # batch norm whose bias is 0, as at every linear bottleneck's output at step 1): its
            # error is tau times the mean of |x|, not of the mean itself, and mean|x| <= rms(x) =
            # sqrt(var + mean^2) (Cauchy-Schwarz). The step's own mean and (unbiased, so at most
            # sqrt(n / (n - 1)) looser) variance come back from the running statistics' update,
            # r_new = (1 - m) r_old + m batch.
            m = BN_MOMENTUM[module]
            vkey = key[:-len("mean")] + "var"
            mean = change / m
            var = (ref[vkey] - (1 - m) * before[vkey]) / m
            b = tau * m * (var.clamp(min=0) + mean.pow(2)).sqrt() + 2 * U * rv.abs()
            out.append(("buffer (mean)", float(((gv - rv).abs() / (b + 1e-300)).max()), key))
            continue
        if kind == "param" and opt_name == "adamw":
            g = ref["grad." + key.split(".", 1)[1]]
            # G: the scale of the gradient's error. A noise gradient (below) is held to the model's
            # gradient scale, so its elements may step by up to 5 lr either way.
            G = float(g.abs().max())
            # A weight gradient's error scale, as in "grad" above; and batch norm's. Held to sum
            # |dy| |x_hat| and sum |dy|, dgamma's and dbeta's own checks would loosen ~65x (10%
            # planted in one of ResNet-8's bias gradient elements passed at 0.13 of it) where
            # stoke's error stays far below; here a gradient's error matters only through the
            # sign of its near-zero elements (MobileNetV2's batch norm weights, AdamW step 1).
            for mkey in ("magnitude.", "magnitude.bn_"):
                mag = ref.get(mkey + key.split(".", 1)[1])
                if mag is not None:
                    G = max(G, float(mag.max()))
            if float(g.norm()) <= 1e-9 * grad_scale:  # noise, as in "grad" above
                G = grad_scale
            b = tau * change.abs() + ADAMW["lr"] * torch.clamp(
                4 * tau * G / (g.abs() + ADAMW["eps"]), max=5.0) + 2 * U * rv.abs()
            out.append(("param (adamw)", float(((gv - rv).abs() / b).max()), key))
        elif kind == "optim" and opt_name == "adamw":
            continue  # exp_avg(_sq) of noise gradients are noise: the parameters are checked
        elif float(change.norm()) == 0:
            out.append((kind + " (unchanged)", 0.0 if torch.equal(gv, rv) else math.inf, key))
        else:
            # SGD carries the gradient's error into the momentum buffer (buf = m buf + g + wd p) and
            # lr times it into the parameter; a noise gradient's error (tau grad_scale, above) is
            # not tau times the buffer's change, which weight decay alone makes.
            # Likewise a weight gradient's error, tau times its row of sum |dy| |x| ("grad"),
            # where its terms cancel.
            extra, name = 0.0, key.split(".", 1)[1] if kind == "param" else None
            if kind == "optim":
                name = order[int(key.split(".")[2])] if key.startswith("optim.state.") else None
            g = ref.get("grad." + name) if name is not None else None
            carry = SGD["lr"] if kind == "param" else 1.0
            if g is not None and float(g.norm()) <= 1e-9 * grad_scale:  # noise, as in "grad"
                extra = tau * grad_scale * carry
            elif g is not None and "magnitude." + name in ref:
                extra = tau * carry * rows(ref["magnitude." + name]).norm(dim=1)
            out.append((kind + " change", normwise(gv - rv, change, tau, rv, extra), key))
    return out


class Torch32:
    """torch's own float32 replays of one step from one state: the reference of f32_rule.

    `base` is the replay of the step's own batch. A single replay is one sample of torch's float32
    error, and where the step is ill-conditioned that sample spreads widely: in EfficientNet-B0's
    SGD step 4 (the 2-thread state on a Zen 4 EPYC), moving every input pixel by one ulp moved
    torch's own RMSE on a squeeze-excitation fc2 weight gradient between 1.8e-6 and 1.1e-5, and
    the unperturbed replay happened to sit at 3.0e-6 (stoke's 1.1e-5 was 1.26 of the rule against
    that one sample). So the rule's reference error is the RMS over `base` and PERTURBED more
    replays, each with every input pixel moved one ulp up or down at random (fixed seed; an input
    error of u relative, below one layer's own rounding), made only when a check needs the rule.
    Eight replays in all: with the spread seen there (a coefficient of variation near 0.6 in the
    mean squared error) the RMS of n replays is within about 0.6 / (2 sqrt(n)) of torch's typical
    error, about 10% at n = 8 and 15% at 4. The perturbed replays are kept only as their squared
    errors against the step's float64 replay `ref` (a replay of VGG-11 holds hundreds of MB, and
    eight per cached state ran a 24 GiB machine out of memory); `base` is measured against the
    reference the rule is given (a replay with stoke's decisions adopted, where one is)."""
    PERTURBED = 7

    def __init__(self, model, state, order, batch, opt_name, ref):
        self.args = (model, state, order, batch, opt_name, ref)
        self.base, _ = torch_step(model, state, order, batch, opt_name, torch.float32)
        self.more_mse = None  # key -> sum over the perturbed replays of MSE against ref

    def error(self, key, rv):
        """The RMS over the replays of RMSE(torch f32 - reference) for tensor `key`, or None."""
        if key not in self.base:
            return None
        if self.more_mse is None:
            model, state, order, (x, y), opt_name, ref = self.args
            gen = torch.Generator().manual_seed(5)
            x32 = x.float()
            self.more_mse = {}
            for _ in range(self.PERTURBED):
                toward = x32 + (torch.randint(0, 2, x32.shape, generator=gen) * 2 - 1).float()
                xp = torch.nextafter(x32, toward).double()
                r, _ = torch_step(model, state, order, (xp, y), opt_name, torch.float32)
                for k, t in r.items():
                    if k in ref and t.is_floating_point() and t.shape == ref[k].shape:
                        mse = float((t.double() - ref[k].double()).pow(2).mean())
                        self.more_mse[k] = self.more_mse.get(k, 0.0) + mse
                del r
            self.args = self.args[:5] + (None,)
        if key not in self.more_mse:
            return None
        base = float((self.base[key].double() - rv).pow(2).mean())
        return math.sqrt((base + self.more_mse[key]) / (self.PERTURBED + 1))


def f32_rule(ref, got, r32, key):
    """torch's own accuracy rule for a float32 result against a float64 reference
    (torch._dynamo.utils.same with fp64_ref, as torch's compiler tests and benchmarks use it):
    RMSE(stoke - f64) <= m RMSE(torch f32 - f64), m = 2, or 3 for tensors under 1,000 elements and
    1x1 kernels ("noise might dominate our error metric for smaller tensors"), torch's RMSE taken
    over a few replays (Torch32). torch's absolute slack (tol / 10) is left out. Returns
    res_error / (m ref_error): <= 1 passes."""
    if r32 is None or key not in got:
        return math.inf
    rv, gv = ref[key].double(), got[key].double()
    if gv.shape != rv.shape or not rv.is_floating_point():
        return math.inf
    ref_error = r32.error(key, rv)
    if ref_error is None:
        return math.inf
    small = rv.numel() < 1000 or (rv.dim() == 4 and rv.shape[-1] == rv.shape[-2] == 1)
    m = 3.0 if small else 2.0
    res_error = float((gv - rv).pow(2).mean().sqrt())
    return res_error / (m * ref_error) if ref_error > 0 else (0.0 if res_error == 0 else math.inf)


def failing(res, ref, got, r32):
    """The checks of `res` beyond tau that torch's float32 rule (f32_rule) does not pass either,
    and the rule's ratios for those it passed."""
    bad, by_rule = [], []
    for what, v, key in res:
        if v <= 1:
            continue
        r = f32_rule(ref, got, r32, key) if what not in ("missing", "count") else math.inf
        if r <= 1:
            by_rule.append(r)
        else:
            bad.append((what, v, key, r))
    return bad, by_rule


def explain_by_flips(model, state, order, batch, opt_name, tau, grad_scale, got, before,
                     decisions, r32):
    """Descriptions of a set of decisions within delta = tau * rms(input) of their boundary (a ReLU
    input near zero; a max-pool window whose two largest inputs nearly tie) whose flips bring the
    step within the bound, or None."""
    cands = []  # (distance from the boundary / delta, flip, description)
    for kind, call, x, geometry in decisions:
        delta = tau * float(x.pow(2).mean().sqrt())
        if kind == "relu":
            flat = x.reshape(-1)
            for i in (flat.abs() < delta).nonzero().reshape(-1).tolist():
                v = float(flat[i])
                cands.append((abs(v) / delta, ("relu", call, i),
                              "ReLU call %d, element %d at %.2e" % (call, i, v)))
        else:
            for gap, o, i in pool_near_ties(x, geometry, delta):
                cands.append((gap / delta, ("pool", call, o, i),
                              "max-pool call %d, output %d from input %d, %.2e below the maximum"
                              % (call, o, i, gap)))
    cands.sort(key=lambda c: c[0])
    # The closest 16 alone, then pairs among the closest 6: a decision far from the closest ones is
    # no likelier to flip than they are, and each try is a float64 replay of the step.
    tries = [[c] for c in cands[:16]] + [list(p) for p in itertools.combinations(cands[:6], 2)]
    for t in tries:
        ref, _ = torch_step(model, state, order, batch, opt_name, torch.float64, [c[1] for c in t])
        res = check_step(ref, got, before, opt_name, tau, grad_scale, order)
        if not failing(res, ref, got, r32)[0]:
            return [c[2] for c in t]
    return None


def stoke_decisions(decisions, got, tau):
    """The flips that give torch's replay the ReLU decisions stoke took ("relu.<call>" in its step
    file, --decisions 1) where the two differ and the input lies within delta = tau * rms(input)
    of zero, and the number of differing decisions beyond delta (never adopted: those are errors,
    not rounding). None when stoke's ReLU calls do not line up with torch's."""
    relus = [(call, x) for kind, call, x, _ in decisions if kind == "relu"]
    if not relus or any("relu.%d" % call not in got for call, _ in relus) or \
            "relu.%d" % len(relus) in got:
        return None
    flips, beyond = [], 0
    for call, x in relus:
        mask = got["relu.%d" % call]
        if tuple(mask.shape) != tuple(x.shape):
            return None
        delta = tau * float(x.pow(2).mean().sqrt())
        differ = ((x > 0) != (mask != 0)).reshape(-1)
        near = (x.abs() < delta).reshape(-1)
        flips += [("relu", call, i) for i in (differ & near).nonzero().reshape(-1).tolist()]
        beyond += int((differ & ~near).sum())
    return flips, beyond


def check_stoke_step(model, state, order, batch, opt_name, tau, got, replays, key):
    """One stoke step (`got`, from `state`) against torch's float64 replay: (checks, the float32
    rule's ratios used, the decisions adopted or None, failure messages, torch f32's checks)."""
    # Configurations that reach the same state (a path a model never takes, forced off; every
    # configuration's first step) share torch's replay.
    if key not in replays:
        ref, decisions = torch_step(model, state, order, batch, opt_name, torch.float64)
        # torch's own float32 replay of the same step, for f32_rule and scale
        r32 = Torch32(model, state, order, batch, opt_name, ref)
        replays[key] = (ref, decisions, r32)
        if len(replays) > 8:
            replays.popitem(last=False)
    ref, decisions, r32 = replays[key]
    before = {kk: v for kk, v in state.items() if not kk.startswith("optim.")}
    grad_scale = max(float(v.norm()) for kk, v in ref.items() if kk.startswith("grad."))
    res = check_step(ref, got, before, opt_name, tau, grad_scale, order)
    bad, n_rule = failing(res, ref, got, r32)
    fl, fails = None, []
    own = stoke_decisions(decisions, got, tau) if bad else None
    if own is not None and own[0]:
        # stoke's own decisions within delta of the kink, adopted all at once
        ref2, _ = torch_step(model, state, order, batch, opt_name, torch.float64, own[0])
        res2 = check_step(ref2, got, before, opt_name, tau, grad_scale, order)
        bad2, n_rule2 = failing(res2, ref2, got, r32)
        if not bad2:
            bad, n_rule, res = [], n_rule2, res2
            fl = ["stoke's own decisions at %d ReLU inputs within delta of zero (%d differing"
                  " decisions beyond delta)" % (len(own[0]), own[1])]
    if bad:
        fl = explain_by_flips(model, state, order, batch, opt_name, tau, grad_scale, got, before,
                              decisions, r32)
        if fl is None:
            fails = ["%s %s at %.3g of its bound, %.3g of torch's float32 rule" % (what, key_, v, r)
                     for what, v, key_, r in bad]
        else:
            res = [(w, 0.0, kk) for w, _, kk in res]
    w32 = [(what, v) for what, v, _ in check_step(ref, r32.base, before, opt_name, tau, grad_scale,
                                                  order)]
    return res, (n_rule if not bad else []), fl, fails, w32


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("program")
    ap.add_argument("model")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--configs", default="all", choices=["all", "default"])
    ap.add_argument("--optimizers", default="sgd,adamw", help="comma-separated: sgd, adamw")
    ap.add_argument("--plant", help="NAME:STEP:REL, passed to the program: an error to catch")
    a = ap.parse_args()
    torch.manual_seed(1234)
    model = build(a.model).double()
    with torch.no_grad():  # start from float32 values: both sides hold the same weights
        for t in model.state_dict().values():
            if t.is_floating_point():
                t.copy_(t.float().double())
    tau, D, K = chain_bound(model, a.batch)
    BN_MOMENTUM.update({n: mod.momentum for n, mod in model.named_modules()
                        if isinstance(mod, nn.modules.batchnorm._BatchNorm)})
    g = torch.Generator().manual_seed(99)
    batches = [(torch.randn(a.batch, 1, 28, 28, generator=g).float().double(),
                torch.randint(0, 10, (a.batch,), generator=g)) for _ in range(a.steps)]
    init = {}
    for n, p in model.named_parameters():
        init["param." + n] = p.detach().clone()
    for n, b in model.named_buffers():
        init["buffer." + n] = b.detach().clone()
    order = [n for n, _ in model.named_parameters()]
    print("%s: batch %d, %d steps; %d conv/linear layers, longest sum K = %d: tau = 3 sqrt(%d * %d)"
          " u = %.2e" % (a.model, a.batch, a.steps, D // 3, K, D, K, tau))

    configs = [{}]
    if a.configs == "all":
        configs += [{"STOKE_CONV_" + p: "0"} for p in CONV_PATHS]
    failures, table, flips_used = [], [], []
    replays = collections.OrderedDict()  # (optimizer, step, state's hash) -> torch's f64 replay
    verdicts = {}  # (optimizer, step, state's hash, step file's hash) -> check_stoke_step's result
    with tempfile.TemporaryDirectory(prefix="stoke-vs-torch-") as tmp:
        fixture = {k: v.float() if v.is_floating_point() else v for k, v in init.items()}
        for k, (x, y) in enumerate(batches, start=1):
            fixture["x.%d" % k] = x.float()
            fixture["y.%d" % k] = y
        init_path = os.path.join(tmp, "init.safetensors")
        save_safetensors(init_path, fixture)
        for opt_name in a.optimizers.split(","):
            # torch's float64 trajectory from the shared start, for the printed loss column
            state, traj = dict(init), []
            for k in range(a.steps):
                r, _ = torch_step(model, state, order, batches[k], opt_name, torch.float64)
                traj.append(float(r["loss"]))
                state = r
            for threads in (1, 2):
                for cfg in configs:
                    env = dict(os.environ, STOKE_NUM_THREADS=str(threads), **cfg)
                    name = "%s, %d thread%s, %s" % (
                        opt_name, threads, "" if threads == 1 else "s",
                        " ".join("%s=0" % k[len("STOKE_CONV_"):] for k in cfg) or "default paths")
                    out = os.path.join(tmp, "run")
                    os.makedirs(out, exist_ok=True)
                    p = subprocess.run([a.program, "--model", a.model, "--init", init_path,
                                        "--optimizer", opt_name, "--steps", str(a.steps),
                                        "--out", out, "--decisions", "1"] +
                                       (["--plant", a.plant] if a.plant else []),
                                       env=env, capture_output=True, text=True)
                    if p.returncode != 0:
                        failures.append("%s: stoke exited %d: %s" % (name, p.returncode,
                                                                    p.stderr.strip()))
                        continue
                    worst, worst32, by_rule = {}, {}, []
                    state, state_key = dict(init), "init"
                    for k in range(1, a.steps + 1):
                        path = os.path.join(out, "step%d.safetensors" % k)
                        got, stoke_order = load(path)
                        if stoke_order != order:
                            failures.append("%s: stoke's parameter order differs from torch's" % name)
                            break
                        with open(path, "rb") as f:
                            got_key = hashlib.sha1(f.read()).hexdigest()
                        # A configuration whose step wrote the same bits from the same state as
                        # one checked before (a conv path a model never takes, forced off) gets
                        # that check's verdict: the same inputs give the same checks.
                        vkey = (opt_name, k, state_key, got_key)
                        if vkey not in verdicts:
                            verdicts[vkey] = check_stoke_step(
                                model, state, order, batches[k - 1], opt_name, tau, got, replays,
                                (opt_name, k, state_key))
                        res, n_rule, fl, fails, w32 = verdicts[vkey]
                        failures += ["%s, step %d: %s" % (name, k, f) for f in fails]
                        if fl is not None:
                            flips_used.append((name, k, fl))
                        by_rule += n_rule
                        for what, v in w32:
                            worst32[what] = max(worst32.get(what, 0.0), v)
                        for what, v, tensor in res:
                            if v > worst.get(what, (-1.0,))[0]:
                                worst[what] = (v, "step %d %s" % (k, tensor))
                        state, state_key = got, got_key
                    table.append((name, worst, worst32, float(got["loss"]), traj[-1], by_rule))
    print("errors as fractions of their bound (<= 1 passes); torch f32: torch's own float32 replay")
    print("%-40s %-16s %9s %9s  %s" % ("stoke configuration", "check", "stoke", "torch f32",
                                        "worst at"))
    for name, worst, worst32, last, last_traj, by_rule in table:
        for what, (v, where) in sorted(worst.items()):
            print("%-40s %-16s %9.2e %9.2e  %s" % (name, what, v, worst32.get(what, float("nan")),
                                                  where))
        print("%-40s %-16s %9.6f %9.6f  (stoke's last loss; torch f64's own trajectory)"
              % (name, "last loss", last, last_traj))
        if by_rule:
            print("%-40s %-16s %9.2e  %d checks beyond tau within torch's float32 rule (f32_rule;"
                  " the largest ratio)" % (name, "f32 rule", max(by_rule), len(by_rule)))
    for name, k, fl in flips_used:
        print("%s, step %d: matched after flipping %s" % (name, k, "; ".join(fl)))
    if failures:
        print("\nFAILED (%d checks):" % len(failures))
        for f in failures[:40]:
            print("  " + f)
        return 1
    print("\nevery step of every configuration within tau = %.2e" % tau)
    return 0


if __name__ == "__main__":
    sys.exit(main())
