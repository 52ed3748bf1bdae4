#!/usr/bin/env python3
"""Plots dp_trainer's training loss against the step from perf/trainer_bench.sh's CSV.

    perf/plot_loss.py -o docs/img/trainer_loss.svg --title "..." trainer_loss.csv

The CSV has a column `step` (the step that ended the epoch) and one column per series
named `<label>_loss` (ddp_loss, ps_loss): the mean training loss of the epoch's steps.
Each becomes one line, the later ones dashed so that curves lying on top of each other
(ddp and ps compute the same maths) stay visible.  The y axis is logarithmic, as the
loss falls by orders of magnitude.  The SVG is written by perf/svgplot.py.
"""
import argparse
import csv
import math
import sys

import svgplot


def load(path):
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    if not rows or "step" not in rows[0]:
        sys.exit(f"plot_loss: {path}: no 'step' column")
    series = []
    for col in rows[0]:
        if col.endswith("_loss"):
            pts = [(float(r["step"]), float(r[col])) for r in rows
                   if r.get(col) not in (None, "") and float(r[col]) > 0]
            if pts:
                series.append((col[: -len("_loss")], pts))
    return series


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-o", "--output", required=True)
    ap.add_argument("--title", default="")
    ap.add_argument("csv")
    args = ap.parse_args()
    series = load(args.csv)
    if not series:
        sys.exit("plot_loss: no data")
    xs = [p[0] for _, pts in series for p in pts]
    ys = [math.log10(p[1]) for _, pts in series for p in pts]
    x0, x1 = 0, max(xs)
    y0, y1 = math.floor(min(ys)), math.ceil(max(ys))
    step = 10 ** max(0, int(math.log10(max(x1, 1) / 5)))
    while x1 / step > 10:
        step *= 2
    xticks = [(x, f"{x:g}") for x in range(0, int(x1) + 1, step)]
    yticks = [(m * 10.0 ** d, f"{m * 10.0 ** d:g}") for d in range(y0, y1 + 1) for m in (1, 2, 5)
              if y0 <= math.log10(m * 10.0 ** d) <= y1]
    to_y = svgplot.y_span(y0, y1)
    svgplot.write(args.output, args.title, "step", "training loss (log scale)", series,
                  svgplot.x_span(x0, x1), lambda y: to_y(math.log10(y)), xticks, yticks,
                  dashed=True)


if __name__ == "__main__":
    main()
