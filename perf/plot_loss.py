#!/usr/bin/env python3
"""Plots dp_trainer's training loss per epoch from perf/trainer_bench.sh's CSV.

    perf/plot_loss.py -o docs/img/trainer_loss.svg --title "..." trainer_loss.csv

The CSV has a column `epoch` and one column per series named `<label>_loss` (ddp_loss,
ps_loss); each becomes one line, the later ones dashed so that curves lying on top of
each other (ddp and ps compute the same maths) stay visible.  The y axis is
logarithmic, as the loss falls by orders of magnitude.  Like perf/plot_busbw.py, the
output is a self-contained SVG written with the standard library only.
"""
import argparse
import csv
import math
import sys

COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#17becf"]


def load(path):
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    if not rows or "epoch" not in rows[0]:
        sys.exit(f"plot_loss: {path}: no 'epoch' column")
    series = []
    for col in rows[0]:
        if col.endswith("_loss"):
            pts = [(float(r["epoch"]), float(r[col])) for r in rows
                   if r.get(col) not in (None, "") and float(r[col]) > 0]
            if pts:
                series.append((col[: -len("_loss")], pts))
    return series


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-o", "--output", required=True)
    ap.add_argument("--title", default="")
    ap.add_argument("csv")
    args = ap.parse_args()
    series = load(args.csv)
    if not series:
        sys.exit("plot_loss: no data")
    W, H, L, R, T, B = 720, 420, 60, 140, 40, 50
    xs = [p[0] for _, pts in series for p in pts]
    ys = [math.log10(p[1]) for _, pts in series for p in pts]
    x0, x1 = min(xs), max(xs)
    if x1 == x0:
        x1 = x0 + 1
    y0, y1 = math.floor(min(ys)), math.ceil(max(ys))
    if y1 == y0:
        y1 = y0 + 1

    def px(x):
        return L + (x - x0) / (x1 - x0) * (W - L - R)

    def py(y):
        return H - B - (math.log10(y) - y0) / (y1 - y0) * (H - T - B)

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="12">',
           f'<rect width="{W}" height="{H}" fill="white"/>',
           f'<text x="{W / 2}" y="20" text-anchor="middle" font-size="14">{args.title}</text>',
           f'<line x1="{L}" y1="{H - B}" x2="{W - R}" y2="{H - B}" stroke="black"/>',
           f'<line x1="{L}" y1="{T}" x2="{L}" y2="{H - B}" stroke="black"/>',
           f'<text x="{(L + W - R) / 2}" y="{H - 10}" text-anchor="middle">epoch</text>',
           f'<text x="15" y="{(T + H - B) / 2}" transform="rotate(-90 15 {(T + H - B) / 2})" text-anchor="middle">training loss (log scale)</text>']
    step = max(1, int(math.ceil((x1 - x0) / 10)))
    for e in range(int(math.ceil(x0)), int(x1) + 1, step):
        out.append(f'<line x1="{px(e)}" y1="{H - B}" x2="{px(e)}" y2="{H - B + 4}" stroke="black"/>')
        out.append(f'<text x="{px(e)}" y="{H - B + 16}" text-anchor="middle">{e}</text>')
    for d in range(y0, y1 + 1):
        for m in (1, 2, 5):
            y = m * 10.0 ** d
            if not (y0 <= math.log10(y) <= y1):
                continue
            out.append(f'<line x1="{L - 4}" y1="{py(y):.1f}" x2="{W - R}" y2="{py(y):.1f}" stroke="#ddd"/>')
            out.append(f'<text x="{L - 6}" y="{py(y) + 4:.1f}" text-anchor="end">{y:g}</text>')
    for k, (label, pts) in enumerate(series):
        c = COLORS[k % len(COLORS)]
        dash = ' stroke-dasharray="6 4"' if k > 0 else ""
        path = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in sorted(pts))
        out.append(f'<polyline points="{path}" fill="none" stroke="{c}" stroke-width="2"{dash}/>')
        ly = T + 10 + 18 * k
        out.append(f'<line x1="{W - R + 10}" y1="{ly}" x2="{W - R + 30}" y2="{ly}" stroke="{c}" stroke-width="2"{dash}/>')
        out.append(f'<text x="{W - R + 35}" y="{ly + 4}">{label}</text>')
    out.append("</svg>")
    with open(args.output, "w") as f:
        f.write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
