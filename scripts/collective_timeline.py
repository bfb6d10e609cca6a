#!/usr/bin/env python3
"""Draws one collective of a stoke timed trace as an SVG timeline (Python's standard library only).

stoke's collectives built on send/recv (the ring, the tree, halving-doubling) write one JSON object
per line for every send, receive and reduce of a segment when the environment has
STOKE_COLLECTIVE_TIMELINE=<prefix> (dist/collective_options.h): <prefix>.rank<R>.jsonl, one file
per rank. This script reads those files, picks one collective (by name, and by its sequence number
or the last one traced), and draws the ranks as lanes, each with a row of sends, one of receives
and one of reduces; every bar is labelled with its element range and bytes (and carries a tooltip
with all of it), and a thin line joins each send to the receive that got it.

    STOKE_COLLECTIVE_TIMELINE=/tmp/tl mpirun -np 4 build/bench/stoke-bench-allreduce \\
        --algos ring --min-bytes 64K --max-bytes 64K --iters 1 --warmup 0
    python3 scripts/collective_timeline.py /tmp/tl --coll ring_allreduce -o ring.svg

A bar's span: a send from its post (isend) to the wait that found it done; a receive from its post
to its completion; a reduce while it runs. Times are the steady clock (CLOCK_MONOTONIC, shared by
the processes of one machine), drawn from the collective's first event.
"""

import argparse
import glob
import html
import json
import sys

KIND_ROWS = ("send", "recv", "reduce")
COLORS = {"send": "#4c78a8", "recv": "#59a14f", "reduce": "#e15759"}
PHASE_SHADE = {
    "reduce-scatter": 0.0,
    "reduce": 0.0,
    "fold": 0.15,
    "allgather": 0.3,
    "broadcast": 0.3,
    "unfold": 0.45,
}


def read_events(paths):
    events = []
    for path in paths:
        with open(path, encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                line = line.strip()
                if not line:
                    continue
                try:
                    events.append(json.loads(line))
                except json.JSONDecodeError as e:
                    sys.exit(f"{path}:{n}: not JSON: {e}")
    return events


def files_of(args):
    paths = []
    for a in args:
        matches = sorted(glob.glob(a + ".rank*.jsonl")) or sorted(glob.glob(a))
        if not matches:
            sys.exit(f"no trace files match {a!r} (nor {a + '.rank*.jsonl'!r})")
        paths.extend(matches)
    return paths


def span(events):
    return max(e["t1_ns"] for e in events) - min(e["t0_ns"] for e in events)


def pick(events, coll, seq, occurrence, fastest=False):
    """The events of one collective: (coll, seq) chosen, all ranks."""
    colls = sorted({e["coll"] for e in events})
    if coll is None:
        if len(colls) != 1:
            sys.exit(f"several collectives in the trace ({', '.join(colls)}): choose one with --coll")
        coll = colls[0]
    mine = [e for e in events if e["coll"] == coll]
    if not mine:
        sys.exit(f"no {coll} in the trace (it has {', '.join(colls)})")
    seqs = sorted({e["seq"] for e in mine})
    if seq is None and fastest:
        by_seq = {}
        for e in mine:
            by_seq.setdefault(e["seq"], []).append(e)
        seq = min(seqs, key=lambda s: span(by_seq[s]))
    if seq is None:
        try:
            seq = seqs[occurrence]
        except IndexError:
            sys.exit(f"{coll} was traced {len(seqs)} times; --occurrence {occurrence} is out of range")
    chosen = [e for e in mine if e["seq"] == seq]
    if not chosen:
        sys.exit(f"no {coll} #{seq} in the trace (numbers: {seqs})")
    return coll, seq, chosen


def pack(bars):
    """Greedy interval packing: bar -> sub-row, so that bars in one sub-row never overlap."""
    ends = []
    rows = []
    for b in sorted(bars, key=lambda e: (e["t0_ns"], e["t1_ns"])):
        for i, end in enumerate(ends):
            if b["t0_ns"] >= end:
                ends[i] = b["t1_ns"]
                rows.append((b, i))
                break
        else:
            ends.append(b["t1_ns"])
            rows.append((b, len(ends) - 1))
    return rows, max(1, len(ends))


def nice_step(span):
    """A tick step of 1, 2 or 5 times a power of ten giving 4 to 10 ticks over span."""
    step = 10 ** int(f"{span:e}".split("e")[1])
    for m in (0.1, 0.2, 0.5, 1, 2, 5):
        if span / (step * m) <= 10:
            return step * m
    return step * 10


def human_bytes(b):
    if b >= 1 << 20 and b % (1 << 20) == 0:
        return f"{b >> 20} MiB"
    if b >= 1024 and b % 1024 == 0:
        return f"{b >> 10} KiB"
    return f"{b} B"


def shade(hex_color, amount):
    """Mixes a color with white: amount 0 is the color, 1 is white."""
    r, g, b = (int(hex_color[i : i + 2], 16) for i in (1, 3, 5))
    mix = lambda c: int(c + (255 - c) * amount)  # noqa: E731
    return f"#{mix(r):02x}{mix(g):02x}{mix(b):02x}"


def draw(coll, seq, events, title, width):
    ranks = max(e["ranks"] for e in events)
    t_start = min(e["t0_ns"] for e in events)
    t_end = max(e["t1_ns"] for e in events)
    span_us = max((t_end - t_start) / 1e3, 1e-3)
    left, right, top = 96, 24, 70
    sub_h, gap = 13, 5
    plot_w = width - left - right
    x_of = lambda t: left + (t - t_start) / 1e3 / span_us * plot_w  # noqa: E731

    # Layout: per rank, per kind, as many sub-rows as overlapping bars need.
    layout = {}
    y = top
    lanes = []
    for r in range(ranks):
        lane_top = y
        for kind in KIND_ROWS:
            bars = [e for e in events if e["rank"] == r and e["kind"] == kind]
            rows, n = pack(bars)
            layout[(r, kind)] = (y, rows, n)
            y += n * sub_h + gap
        lanes.append((r, lane_top, y))
        y += 10
    height = y + 40

    out = []
    add = out.append
    add(
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" font-family="Helvetica, Arial, sans-serif" font-size="11">'
    )
    add(f'<rect x="0" y="0" width="{width}" height="{height}" fill="white"/>')
    sized = [e for e in events if e["end"] > e["begin"]]
    elem = sized[0]["bytes"] // (sized[0]["end"] - sized[0]["begin"]) if sized else 4
    total = max(e["end"] for e in events)
    head = title or f"{coll} #{seq}: {ranks} ranks, {total} elements ({human_bytes(total * elem)})"
    add(f'<text x="{left}" y="20" font-size="14" font-weight="bold">{html.escape(head)}</text>')
    add(
        f'<text x="{left}" y="38" fill="#555">{span_us:.1f} us from the first event to the last; '
        "bars: send (post to completion), recv (post to arrival), reduce; lines join a send to its "
        "receive; lighter shades are later phases</text>"
    )
    lx = left
    for kind in KIND_ROWS:
        add(f'<rect x="{lx}" y="48" width="12" height="10" fill="{COLORS[kind]}"/>')
        add(f'<text x="{lx + 16}" y="57">{kind}</text>')
        lx += 70

    # Time axis.
    step = nice_step(span_us)
    t = 0.0
    while t <= span_us + 1e-9:
        x = left + t / span_us * plot_w
        add(f'<line x1="{x:.1f}" y1="{top - 6}" x2="{x:.1f}" y2="{height - 36}" stroke="#eee"/>')
        add(f'<text x="{x:.1f}" y="{height - 22}" text-anchor="middle" fill="#555">{t:g}</text>')
        t += step
    add(f'<text x="{left + plot_w / 2}" y="{height - 6}" text-anchor="middle" fill="#555">time (us)</text>')

    # Lanes.
    for r, y0, y1 in lanes:
        add(f'<rect x="4" y="{y0 - 3}" width="{width - 8}" height="{y1 - y0 + 1}" fill="#f7f7f7" rx="3"/>')
        add(f'<text x="10" y="{(y0 + y1) / 2 + 4:.1f}" font-weight="bold">rank {r}</text>')
        for kind in KIND_ROWS:
            ky, _, n = layout[(r, kind)]
            add(f'<text x="{left - 6}" y="{ky + n * sub_h / 2 + 4:.1f}" text-anchor="end" fill="#777" font-size="9">{kind}</text>')

    # Message lines first, under the bars.
    position = {}
    for (r, kind), (ky, rows, _) in layout.items():
        for b, i in rows:
            position[id(b)] = ky + i * sub_h + (sub_h - 2) / 2
    sends = {}
    for e in events:
        if e["kind"] == "send":
            sends.setdefault((e["rank"], e["peer"], e["phase"], e["step"], e["begin"], e["end"]), []).append(e)
    for e in events:
        if e["kind"] != "recv":
            continue
        match = sends.get((e["peer"], e["rank"], e["phase"], e["step"], e["begin"], e["end"]))
        if not match:
            continue
        s = match.pop(0)
        add(
            f'<line x1="{x_of(s["t0_ns"]):.1f}" y1="{position[id(s)]:.1f}" x2="{x_of(e["t1_ns"]):.1f}" '
            f'y2="{position[id(e)]:.1f}" stroke="#999" stroke-width="0.6" opacity="0.7"/>'
        )

    # Bars.
    for (r, kind), (ky, rows, _) in layout.items():
        for b, i in rows:
            x0, x1 = x_of(b["t0_ns"]), x_of(b["t1_ns"])
            w = max(x1 - x0, 1.0)
            yb = ky + i * sub_h
            fill = shade(COLORS[kind], PHASE_SHADE.get(b["phase"], 0.0))
            rng = f'[{b["begin"]}, {b["end"]})'
            who = {"send": f' to rank {b["peer"]}', "recv": f' from rank {b["peer"]}'}.get(kind, "")
            tip = (
                f'rank {r} {kind}{who}: {b["phase"]} step {b["step"]}, elements {rng}, '
                f'{human_bytes(b["bytes"])}, {(b["t0_ns"] - t_start) / 1e3:.2f} to '
                f'{(b["t1_ns"] - t_start) / 1e3:.2f} us'
            )
            add(
                f'<rect x="{x0:.1f}" y="{yb:.1f}" width="{w:.1f}" height="{sub_h - 2}" fill="{fill}" '
                f'stroke="white" stroke-width="0.5"><title>{html.escape(tip)}</title></rect>'
            )
            label = f'{rng} {human_bytes(b["bytes"])}'
            if w > 6.2 * len(label) + 4:
                add(
                    f'<text x="{x0 + 3:.1f}" y="{yb + sub_h - 4:.1f}" fill="white" font-size="9" '
                    f'pointer-events="none">{html.escape(label)}</text>'
                )
    add("</svg>")
    return "\n".join(out) + "\n"


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("traces", nargs="+", help="a STOKE_COLLECTIVE_TIMELINE prefix, or .jsonl files")
    p.add_argument("--coll", help="the collective: ring_allreduce, tree_allreduce, rhd_allreduce, ...")
    p.add_argument("--seq", type=int, help="its sequence number on the communicator")
    p.add_argument(
        "--occurrence", type=int, default=-1, help="without --seq: which call of it, 0 first, -1 last (default)"
    )
    p.add_argument(
        "--fastest",
        action="store_true",
        help="without --seq: the call with the shortest span from first to last event (the least disturbed)",
    )
    p.add_argument("--title", help="the heading (default: the collective, ranks and size)")
    p.add_argument("--width", type=int, default=1100)
    p.add_argument("-o", "--output", default="-", help="the SVG file (default: stdout)")
    a = p.parse_args()
    coll, seq, events = pick(read_events(files_of(a.traces)), a.coll, a.seq, a.occurrence, a.fastest)
    svg = draw(coll, seq, events, a.title, a.width)
    if a.output == "-":
        sys.stdout.write(svg)
    else:
        with open(a.output, "w", encoding="utf-8") as f:
            f.write(svg)
        print(f"{a.output}: {coll} #{seq}, {len(events)} events", file=sys.stderr)


if __name__ == "__main__":
    main()
