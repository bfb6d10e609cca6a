#!/usr/bin/env python3
"""stoke-report end to end: a short profiled stoke-train run, then its report page, which must
parse as XML (XHTML with inline SVG), draw every series of the metrics file with the same points,
and show the profile's step breakdown.

usage: report_check.py STOKE_TRAIN STOKE_REPORT
"""
import json
import os
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET

SVG = "{http://www.w3.org/2000/svg}"
XHTML = "{http://www.w3.org/1999/xhtml}"


def require(cond, what):
    if not cond:
        print("FAILED:", what)
        sys.exit(1)


def main():
    train, report = sys.argv[1], sys.argv[2]
    with tempfile.TemporaryDirectory() as d:
        metrics = os.path.join(d, "metrics.jsonl")
        page = os.path.join(d, "report.html")
        run = subprocess.run([train, "--model", "lenet5", "--epochs", "2", "--limit-train", "1024",
                              "--limit-test", "128", "--batch", "64", "--threads", "1",
                              "--no-progress", "--metrics", metrics, "--log-every", "2",
                              "--eval-every", "8", "--profile", os.path.join(d, "trace.json"),
                              "--profile-steps", "2:10"], capture_output=True, text=True)
        require(run.returncode == 0, "stoke-train ran:\n" + run.stdout + run.stderr)
        records = [json.loads(line) for line in open(metrics)]
        out = subprocess.run([report, "--metrics", metrics, "--out", page, "--title", "check"],
                             capture_output=True, text=True)
        require(out.returncode == 0, "stoke-report ran:\n" + out.stdout + out.stderr)
        root = ET.parse(page).getroot()  # raises unless the page is well-formed
        svgs = root.findall(f".//{SVG}svg")
        require(len(svgs) >= 6, f"6 charts (5 line charts and the step breakdown), got {len(svgs)}")
        lines = {p.get("data-name"): p.get("points").split() for p in root.iter(f"{SVG}polyline")}
        steps = [r for r in records if r["type"] == "step"]
        evals = [r for r in records if r["type"] == "eval"]
        epochs = [r for r in records if r["type"] == "epoch"]
        require(len(steps) > 0 and len(evals) > 0 and len(epochs) == 2, "the run logged records")
        require(len(lines["train (step records)"]) == len(steps), "one point per step record")
        require(len(lines["test (evaluations)"]) == len(evals), "one point per evaluation")
        script = [s for s in root.iter(f"{XHTML}script") if s.get("id") == "series"]
        require(len(script) == 1, "the series are embedded as JSON")
        series = json.loads(script[0].text)
        require([p[1] for p in series["step_loss"]] == [r["loss"] for r in steps],
                "the embedded step losses are the metrics file's")
        require([p[1] for p in series["epoch_test_acc"]] == [r["test_acc"] for r in epochs],
                "the embedded test accuracies are the metrics file's")
        phases = [r.get("data-name") for r in root.iter(f"{SVG}rect") if r.get("class") == "phase"]
        for name in ("data wait", "forward", "backward", "optimizer", "(other)"):
            require(name in phases, f"the step breakdown shows {name!r} (has {phases})")
        bad = subprocess.run([report, "--metrics", os.path.join(d, "missing.jsonl"), "--out", page],
                             capture_output=True, text=True)
        require(bad.returncode != 0 and "cannot open" in bad.stderr and "missing.jsonl" in bad.stderr,
                "a missing metrics file is named")
    print("stoke-report: the page parses, draws every series and the step breakdown")


if __name__ == "__main__":
    main()
