#!/usr/bin/env python3
"""Plots bus bandwidth against message size from the perf tools' JSON output (-J).

    perf/plot_busbw.py -o out.svg --title "allreduce, 4 ranks" ring=ring.json tree=tree.json ...

Each argument LABEL=FILE becomes one line (out-of-place busbw; --in-place for the other
column).  The x axis is log2 of the size in bytes.  The output is a self-contained SVG
written with the standard library only, so it works on any machine with Python 3.
"""
import argparse
import json
import math
import sys

COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#17becf"]


def load(path, column):
    with open(path) as f:
        doc = json.load(f)
    pts = []
    for r in doc.get("results", []):
        if r["size"] > 0:
            pts.append((r["size"], r[column]["busbw"]))
    return doc, pts


def size_label(b):
    for unit, div in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if b >= div and b % div == 0:
            return f"{b // div}{unit}"
    return str(b)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-o", "--output", required=True)
    ap.add_argument("--title", default="")
    ap.add_argument("--in-place", action="store_true")
    ap.add_argument("series", nargs="+", help="LABEL=FILE.json")
    args = ap.parse_args()
    column = "ip" if args.in_place else "oop"
    series = []
    for s in args.series:
        if "=" not in s:
            sys.exit(f"plot_busbw: '{s}' is not LABEL=FILE")
        label, path = s.split("=", 1)
        _, pts = load(path, column)
        if pts:
            series.append((label, pts))
    if not series:
        sys.exit("plot_busbw: no data")
    W, H, L, R, T, B = 720, 420, 60, 140, 40, 50
    xs = [math.log2(p[0]) for _, pts in series for p in pts]
    ymax = max(p[1] for _, pts in series for p in pts) * 1.1 or 1.0
    x0, x1 = min(xs), max(xs)
    if x1 == x0:
        x1 = x0 + 1

    def px(x):
        return L + (math.log2(x) - x0) / (x1 - x0) * (W - L - R)

    def py(y):
        return H - B - y / ymax * (H - T - B)

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="12">',
           f'<rect width="{W}" height="{H}" fill="white"/>',
           f'<text x="{W / 2}" y="20" text-anchor="middle" font-size="14">{args.title}</text>',
           f'<line x1="{L}" y1="{H - B}" x2="{W - R}" y2="{H - B}" stroke="black"/>',
           f'<line x1="{L}" y1="{T}" x2="{L}" y2="{H - B}" stroke="black"/>',
           f'<text x="{(L + W - R) / 2}" y="{H - 10}" text-anchor="middle">message size (bytes)</text>',
           f'<text x="15" y="{(T + H - B) / 2}" transform="rotate(-90 15 {(T + H - B) / 2})" text-anchor="middle">busbw (GB/s)</text>']
    for e in range(int(math.ceil(x0)), int(x1) + 1, 2):
        x = L + (e - x0) / (x1 - x0) * (W - L - R)
        out.append(f'<line x1="{x}" y1="{H - B}" x2="{x}" y2="{H - B + 4}" stroke="black"/>')
        out.append(f'<text x="{x}" y="{H - B + 16}" text-anchor="middle">{size_label(1 << e)}</text>')
    for i in range(6):
        y = ymax * i / 5
        out.append(f'<line x1="{L - 4}" y1="{py(y)}" x2="{W - R}" y2="{py(y)}" stroke="#ddd"/>')
        out.append(f'<text x="{L - 6}" y="{py(y) + 4}" text-anchor="end">{y:.2f}</text>')
    for k, (label, pts) in enumerate(series):
        c = COLORS[k % len(COLORS)]
        path = " ".join(f"{px(s):.1f},{py(b):.1f}" for s, b in sorted(pts))
        out.append(f'<polyline points="{path}" fill="none" stroke="{c}" stroke-width="2"/>')
        ly = T + 10 + 18 * k
        out.append(f'<line x1="{W - R + 10}" y1="{ly}" x2="{W - R + 30}" y2="{ly}" stroke="{c}" stroke-width="2"/>')
        out.append(f'<text x="{W - R + 35}" y="{ly + 4}">{label}</text>')
    out.append("</svg>")
    with open(args.output, "w") as f:
        f.write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
