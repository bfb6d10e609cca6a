#!/usr/bin/env python3
"""Data-parallel scaling on one machine, stoke and PyTorch in the same run (issue 10's benchmark).

For each framework: one process with --threads T on batch B, against N processes with T/N
threads each on batch B/N per rank (the same global batch), averaging gradients every step:
stoke-train under `mpirun -np N` (DDP over MPI) and PyTorch's DistributedDataParallel over gloo
(Debian's python3-torch, CPU). Efficiency = images/s of N processes / images/s of one.

    python3 bench/ddp_scaling.py --stoke-train build/apps/stoke-train [--model resnet8]

stoke trains through stoke-train on Fashion-MNIST (its loader included, 1 worker per rank);
PyTorch steps on random tensors of the same shape (no loader), so its side has less to do. The
rounds alternate stoke and PyTorch so that machine noise falls on both. Prints a table and one
JSON line.
"""

import argparse
import json
import os
import re
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def stoke_run(a, ranks):
    images = a.steps * a.batch
    common = ["--model", a.model, "--epochs", "1", "--limit-train", str(images), "--limit-test",
              "100", "--no-progress", "--workers", "1"]
    if ranks == 1:
        cmd = [a.stoke_train] + common + ["--batch", str(a.batch), "--threads", str(a.threads)]
    else:
        cmd = [a.mpirun, "--allow-run-as-root", "--oversubscribe", "-np", str(ranks),
               a.stoke_train] + common + ["--batch", str(a.batch // ranks), "--threads",
                                          str(max(1, a.threads // ranks))]
    env = dict(os.environ, OMPI_MCA_mpi_yield_when_idle="1")
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, check=True).stdout
    m = re.search(r"^epoch 1/1: .*\(([\d.]+) img/s", out, re.M)
    if not m:
        sys.exit(f"no epoch line in stoke-train's output:\n{out}")
    return float(m.group(1))


TORCH_WORKER = r"""
import os, sys, time, torch, torch.nn.functional as F
import torch.distributed as dist
sys.path.insert(0, sys.argv[1])
from torch_models import make_model
model_name, batch, steps, threads, rank, world, port = sys.argv[2], int(sys.argv[3]), \
    int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6]), int(sys.argv[7]), sys.argv[8]
torch.set_num_threads(threads)
torch.manual_seed(0)
model = make_model(model_name)
if world > 1:
    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:" + port, rank=rank,
                            world_size=world)
    model = torch.nn.parallel.DistributedDataParallel(model)
opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
x, y = torch.randn(batch, 1, 28, 28), torch.randint(0, 10, (batch,))
def step():
    loss = F.cross_entropy(model(x), y)
    opt.zero_grad(); loss.backward(); opt.step()
for _ in range(3): step()
if world > 1: dist.barrier()
t0 = time.perf_counter()
for _ in range(steps): step()
if world > 1: dist.barrier()
dt = time.perf_counter() - t0
if rank == 0: print(batch * world * steps / dt)
if world > 1: dist.destroy_process_group()
"""


def torch_run(a, ranks, port):
    per_rank, threads = a.batch // ranks, max(1, a.threads // ranks)
    procs = [subprocess.Popen([a.python, "-c", TORCH_WORKER, HERE, a.model, str(per_rank),
                               str(a.steps), str(threads), str(r), str(ranks), str(port)],
                              stdout=subprocess.PIPE, text=True) for r in range(ranks)]
    outs = [p.communicate()[0] for p in procs]
    if any(p.returncode for p in procs):
        sys.exit(f"the PyTorch run failed: {[p.returncode for p in procs]}")
    return float(outs[0].strip())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--stoke-train", required=True)
    ap.add_argument("--mpirun", default="mpirun")
    ap.add_argument("--python", default="/usr/bin/python3")
    ap.add_argument("--model", default="resnet8")
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2, help="threads of the single process")
    ap.add_argument("--batch", type=int, default=128, help="global batch")
    ap.add_argument("--steps", type=int, default=48)
    ap.add_argument("--rounds", type=int, default=2)
    a = ap.parse_args()
    rows = []
    port = 29500 + os.getpid() % 1000
    for rnd in range(a.rounds):
        for fw in ("stoke", "torch"):
            for ranks in (1, a.ranks):
                t0 = time.time()
                ips = stoke_run(a, ranks) if fw == "stoke" else torch_run(a, ranks, port + rnd * 4 + ranks)
                rows.append({"framework": fw, "round": rnd + 1, "ranks": ranks,
                             "threads_per_rank": max(1, a.threads // ranks),
                             "batch_per_rank": a.batch // ranks, "images_per_s": round(ips, 1),
                             "wall_s": round(time.time() - t0, 1)})
    print(f"{a.model}, global batch {a.batch}, {a.steps} steps; one process x {a.threads} threads "
          f"vs {a.ranks} processes x {max(1, a.threads // a.ranks)}")
    print(f"{'framework':<10}{'round':>6}{'ranks':>6}{'img/s':>10}{'efficiency':>12}")
    summary = {}
    for r in rows:
        single = next(x for x in rows if x["framework"] == r["framework"]
                      and x["round"] == r["round"] and x["ranks"] == 1)["images_per_s"]
        r["efficiency"] = round(r["images_per_s"] / single, 3)
        print(f"{r['framework']:<10}{r['round']:>6}{r['ranks']:>6}{r['images_per_s']:>10.0f}"
              f"{r['efficiency']:>12.2f}")
        if r["ranks"] > 1:
            summary.setdefault(r["framework"], []).append(r["efficiency"])
    for fw, eff in summary.items():
        print(f"{fw}: {a.ranks}-process efficiency {min(eff):.2f}-{max(eff):.2f} over {len(eff)} rounds")
    print(json.dumps({"bench": "ddp_scaling", "model": a.model, "ranks": a.ranks,
                      "global_batch": a.batch, "steps": a.steps, "rows": rows}))


if __name__ == "__main__":
    main()
