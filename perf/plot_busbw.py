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

import svgplot


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
    xs = [math.log2(p[0]) for _, pts in series for p in pts]
    ymax = max(p[1] for _, pts in series for p in pts) * 1.1 or 1.0
    x0, x1 = min(xs), max(xs)
    to_x = svgplot.x_span(x0, x1)
    xticks = [(1 << e, size_label(1 << e)) for e in range(int(math.ceil(x0)), int(x1) + 1, 2)]
    yticks = [(ymax * i / 5, f"{ymax * i / 5:.2f}") for i in range(6)]
    svgplot.write(args.output, args.title, "message size (bytes)", "busbw (GB/s)", series,
                  lambda s: to_x(math.log2(s)), svgplot.y_span(0, ymax), xticks, yticks)


if __name__ == "__main__":
    main()
