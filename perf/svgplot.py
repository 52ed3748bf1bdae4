"""Line charts as self-contained SVG, with the standard library only, for the perf
scripts (plot_busbw.py, plot_loss.py), so the plots render on any machine with
Python 3.

    svgplot.write(path, title, xlabel, ylabel, series, px, py, xticks, yticks, dashed)

series is [(label, [(x, y), ...]), ...]; px and py map data to the plot area given
as svgplot.AREA; xticks and yticks are [(value, text), ...]; with dashed, every line
after the first is dashed, so curves lying on top of each other stay visible.
"""

COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#17becf"]

# Width, height, and the left, right (legend), top and bottom margins.
W, H, L, R, T, B = 720, 420, 60, 140, 40, 50


def x_span(x0, x1):
    """Maps [x0, x1] onto the plot's width."""
    x1 = x1 if x1 != x0 else x0 + 1
    return lambda x: L + (x - x0) / (x1 - x0) * (W - L - R)


def y_span(y0, y1):
    """Maps [y0, y1] onto the plot's height, upwards."""
    y1 = y1 if y1 != y0 else y0 + 1
    return lambda y: H - B - (y - y0) / (y1 - y0) * (H - T - B)


def write(path, title, xlabel, ylabel, series, px, py, xticks, yticks, dashed=False):
    mid_y = (T + H - B) / 2
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" '
           f'font-family="sans-serif" font-size="12">',
           f'<rect width="{W}" height="{H}" fill="white"/>',
           f'<text x="{W / 2}" y="20" text-anchor="middle" font-size="14">{title}</text>',
           f'<line x1="{L}" y1="{H - B}" x2="{W - R}" y2="{H - B}" stroke="black"/>',
           f'<line x1="{L}" y1="{T}" x2="{L}" y2="{H - B}" stroke="black"/>',
           f'<text x="{(L + W - R) / 2}" y="{H - 10}" text-anchor="middle">{xlabel}</text>',
           f'<text x="15" y="{mid_y}" transform="rotate(-90 15 {mid_y})" '
           f'text-anchor="middle">{ylabel}</text>']
    for v, text in xticks:
        x = px(v)
        out.append(f'<line x1="{x:.1f}" y1="{H - B}" x2="{x:.1f}" y2="{H - B + 4}" stroke="black"/>')
        out.append(f'<text x="{x:.1f}" y="{H - B + 16}" text-anchor="middle">{text}</text>')
    for v, text in yticks:
        y = py(v)
        out.append(f'<line x1="{L - 4}" y1="{y:.1f}" x2="{W - R}" y2="{y:.1f}" stroke="#ddd"/>')
        out.append(f'<text x="{L - 6}" y="{y + 4:.1f}" text-anchor="end">{text}</text>')
    for k, (label, pts) in enumerate(series):
        c = COLORS[k % len(COLORS)]
        dash = ' stroke-dasharray="6 4"' if dashed and k > 0 else ""
        line = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in sorted(pts))
        out.append(f'<polyline points="{line}" fill="none" stroke="{c}" stroke-width="2"{dash}/>')
        ly = T + 10 + 18 * k
        out.append(f'<line x1="{W - R + 10}" y1="{ly}" x2="{W - R + 30}" y2="{ly}" '
                   f'stroke="{c}" stroke-width="2"{dash}/>')
        out.append(f'<text x="{W - R + 35}" y="{ly + 4}">{label}</text>')
    out.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(out) + "\n")
