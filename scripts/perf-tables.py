#!/usr/bin/env python3
"""Writes docs/performance.md from the benchmarks' JSON lines, so that no table outlives the code
it measured: every figure in it comes from the runs named in its header (date, CPU, commit,
command).

    scripts/perf-tables.py --out docs/performance.md RUN.json [RUN.json ...]

Each RUN.json is a benchmark's output (stdout); the last line that parses as a JSON object is its
record (every stoke benchmark ends with one). A file may begin with a line "# command: ..." naming
the command that produced it (scripts/perf-report.sh writes it). Known records: "ops_cpu"
(stoke-bench-ops-cpu), "train_cpu" (stoke-bench-train-cpu), "loader" (stoke-bench-loader); any
other is listed key by key.
"""
import argparse
import datetime
import json
import os
import subprocess
import sys


def record_of(path):
    command, record = None, None
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line.startswith("# command:"):
                command = line[len("# command:"):].strip()
            elif line.startswith("{"):
                try:
                    r = json.loads(line)
                except json.JSONDecodeError:
                    continue
                if isinstance(r, dict):
                    record = r
    if record is None:
        sys.exit("perf-tables: %s holds no JSON record (a benchmark's last line)" % path)
    return command, record


def fmt(v, digits=3):
    if v is None:
        return "-"
    if isinstance(v, float):
        if v == 0:
            return "0"
        if abs(v) >= 1000:
            return "%.0f" % v
        return ("%%.%dg" % digits) % v
    return str(v)


def table(header, rows):
    out = ["| " + " | ".join(header) + " |",
           "| " + " | ".join("---" if i < 2 else "---:" for i in range(len(header))) + " |"]
    out += ["| " + " | ".join(fmt(c) for c in r) + " |" for r in rows]
    return out


def ops_cpu(r):
    lines = ["Times are medians in ms (best of %s rounds of %s repetitions, %s threads); ratio = "
             "torch / stoke, above 1: stoke is faster; GFLOP/s for the convolutions' forward + "
             "backward. Peer: %s." % (r.get("rounds"), r.get("reps"), r.get("threads"),
                                      r.get("peer")), ""]
    rows = [(x["op"], x["case"], x.get("stoke_fwd_ms"), x.get("stoke_fwdbwd_ms"),
             x.get("torch_fwd_ms"), x.get("torch_fwdbwd_ms"), x.get("ratio_fwd"),
             x.get("ratio_fwdbwd"), x.get("stoke_gflops"), x.get("torch_gflops"))
            for x in r["rows"]]
    return lines + table(["op", "case", "stoke fwd", "stoke fwd+bwd", "torch fwd",
                          "torch fwd+bwd", "ratio fwd", "ratio fwd+bwd", "stoke GFLOP/s",
                          "torch GFLOP/s"], rows)


def train_cpu(r):
    lines = ["Training steps per second as images/s (batch %s, %s timed steps, %s threads); "
             "torch 0 or absent: no peer ran." % (r.get("batch"), r.get("steps"),
                                                   r.get("threads")), ""]
    rows = []
    for x in r["rows"]:
        s, t = x.get("stoke_images_per_s"), x.get("torch_images_per_s")
        rows.append((x["model"], s, t or None, (s / t) if s and t else None))
    return lines + table(["model", "stoke img/s", "torch img/s", "stoke / torch"], rows)


def loader(r):
    lines = ["%s images, batch %s; per-image costs: read + decode %s us, decode %s us, transforms "
             "%s us." % (r.get("images"), r.get("batch"), fmt(r.get("read_decode_us")),
                         fmt(r.get("decode_us")), fmt(r.get("transforms_us"))), ""]
    rows = [(x["format"], x["workers"], x.get("images_per_s"), x.get("torch_png_images_per_s"),
             x.get("ratio_vs_torch_png")) for x in r["rows"]]
    return lines + table(["format", "workers", "stoke img/s", "torch (PNG) img/s",
                          "stoke / torch"], rows)


def other(r):
    return ["```", json.dumps(r, indent=1)[:4000], "```"]


TITLES = {"ops_cpu": ("Ops on the CPU", ops_cpu), "train_cpu": ("Training on the CPU", train_cpu),
          "loader": ("Data loading", loader)}


def machine():
    cpu = "unknown CPU"
    try:
        for line in subprocess.run(["lscpu"], capture_output=True, text=True).stdout.splitlines():
            if line.startswith("Model name:"):
                cpu = line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "%s, %d cores" % (cpu, os.cpu_count() or 0)


def commit():
    try:
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        out = subprocess.run(["git", "-C", root, "rev-parse", "--short=12", "HEAD"],
                             capture_output=True, text=True)
        dirty = subprocess.run(["git", "-C", root, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True).stdout.strip()
        return out.stdout.strip() + (" (with uncommitted changes)" if dirty else "")
    except OSError:
        return "unknown"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("runs", nargs="+")
    a = ap.parse_args()
    lines = ["# Performance", "",
             "Generated by `scripts/perf-tables.py` from the benchmarks' JSON records (do not edit "
             "by hand; `scripts/perf-report.sh BUILD_DIR` reruns the benchmarks and rewrites this "
             "file). Every figure below comes from the runs named here; the history of earlier "
             "passes is in design-notes.md, \"Performance history\".", "",
             "- date: %s" % datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
             "- machine: %s" % machine(),
             "- commit: %s" % commit(), ""]
    for path in a.runs:
        command, r = record_of(path)
        title, render = TITLES.get(r.get("bench"), (str(r.get("bench", "benchmark")), other))
        lines += ["## " + title, ""]
        if command:
            lines += ["`%s`" % command, ""]
        lines += render(r) + [""]
    with open(a.out, "w") as f:
        f.write("\n".join(lines))
    print("perf-tables: wrote %s (%d runs)" % (a.out, len(a.runs)))


if __name__ == "__main__":
    main()
