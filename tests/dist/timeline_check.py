#!/usr/bin/env python3
"""scripts/collective_timeline.py on real traces: stoke-bench-allreduce under mpirun -np 3 with
STOKE_COLLECTIVE_TIMELINE writes every rank's events of the ring, the tree and halving-doubling;
for each, the script's SVG must be well-formed XML with one bar (a rect with a tooltip) per traced
event of the chosen call, every tooltip naming its rank, kind, element range and bytes as the event
has them, and one line per send (each send reached its receive).

    timeline_check.py MPIEXEC STOKE_BENCH_ALLREDUCE COLLECTIVE_TIMELINE_PY
"""

import glob
import json
import os
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET

SVG = "{http://www.w3.org/2000/svg}"


def main():
    mpiexec, bench, script = sys.argv[1:4]
    with tempfile.TemporaryDirectory() as d:
        prefix = os.path.join(d, "tl")
        env = dict(os.environ, STOKE_COLLECTIVE_TIMELINE=prefix)
        # 1 KiB in 64-byte segments: several segments per message, 3 ranks (uneven chunks).
        subprocess.run(
            [mpiexec, "--allow-run-as-root", "--oversubscribe", "-np", "3", bench,
             "--algos", "ring,tree,rhd", "--min-bytes", "1K", "--max-bytes", "1K",
             "--iters", "1", "--warmup", "0", "--segment-bytes", "64"],
            env=env, check=True, stdout=subprocess.DEVNULL)
        files = sorted(glob.glob(prefix + ".rank*.jsonl"))
        assert len(files) == 3, f"expected a trace file per rank, got {files}"
        events = [json.loads(l) for f in files for l in open(f, encoding="utf-8") if l.strip()]
        for coll in ("ring_allreduce", "tree_allreduce", "rhd_allreduce"):
            mine = [e for e in events if e["coll"] == coll]
            assert mine, f"no {coll} events"
            last = max(e["seq"] for e in mine)
            chosen = [e for e in mine if e["seq"] == last]
            out = os.path.join(d, coll + ".svg")
            subprocess.run([sys.executable, script, prefix, "--coll", coll, "-o", out], check=True)
            root = ET.parse(out).getroot()
            assert root.tag == SVG + "svg", root.tag
            bars = [r for r in root.iter(SVG + "rect") if r.find(SVG + "title") is not None]
            assert len(bars) == len(chosen), f"{coll}: {len(bars)} bars for {len(chosen)} events"
            tips = sorted(r.find(SVG + "title").text for r in bars)
            for e in chosen:
                want = f'rank {e["rank"]} {e["kind"]}'
                rng = f'elements [{e["begin"]}, {e["end"]})'
                assert any(t.startswith(want) and rng in t for t in tips), f"{coll}: no bar for {e}"
            sends = sum(e["kind"] == "send" for e in chosen)
            lines = [l for l in root.iter(SVG + "line") if l.get("stroke") == "#999"]
            assert len(lines) == sends, f"{coll}: {len(lines)} message lines for {sends} sends"
            print(f"{coll} #{last}: {len(chosen)} events, {sends} messages drawn")
    print("ok")


if __name__ == "__main__":
    main()
