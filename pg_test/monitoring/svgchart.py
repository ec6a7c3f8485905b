"""A small self-contained SVG step chart of scraped gauges with vertical event markers
(no dependencies, no external fonts or scripts)."""
from html import escape


def step_chart(path, title, subtitles, series, events, x_label="seconds"):
    """series: [(name, colour, [(t, value), ...])], the first drawn as a filled area, the others
    as lines on top; events: [(t, text)], dashed lines labelled one per row under the axis.

    Values are drawn as steps (a gauge holds its value until the next scrape)."""
    width = 820
    left, right, top = 56, 24, 44 + 16 * len(subtitles)
    plot_h = 190
    bottom = 60 + 18 * len(events)
    height = top + plot_h + bottom
    plot_w = width - left - right
    ts = [t for _, _, pts in series for t, _ in pts] + [t for t, _ in events]
    t0, t1 = min(ts), max(ts)
    if t1 <= t0:
        t1 = t0 + 1
    vmax = max([v for _, _, pts in series for _, v in pts] + [1])
    ymax = int(vmax) + 1

    def x(t):
        return left + (t - t0) / (t1 - t0) * plot_w

    def y(v):
        return top + plot_h - v / ymax * plot_h

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}" font-family="DejaVu Sans, Verdana, sans-serif" font-size="12">',
           f'<rect width="{width}" height="{height}" fill="#ffffff"/>',
           f'<text x="{left}" y="24" font-size="15" font-weight="bold">{escape(title)}</text>',
           *[f'<text x="{left}" y="{46 + 16 * i}" fill="#555555">{escape(line)}</text>'
             for i, line in enumerate(subtitles)]]
    # grid and axes
    for v in range(ymax + 1):
        out.append(f'<line x1="{left}" y1="{y(v):.1f}" x2="{left + plot_w}" y2="{y(v):.1f}" stroke="#e5e5e5"/>')
        out.append(f'<text x="{left - 8}" y="{y(v) + 4:.1f}" text-anchor="end">{v}</text>')
    span = t1 - t0
    step = next(s for s in (1, 2, 5, 10, 20, 30, 60, 120, 300) if span / s <= 12)
    tick = 0.0
    while tick <= span + 1e-9:
        xt = x(t0 + tick)
        out.append(f'<line x1="{xt:.1f}" y1="{top + plot_h}" x2="{xt:.1f}" y2="{top + plot_h + 4}" stroke="#333333"/>')
        out.append(f'<text x="{xt:.1f}" y="{top + plot_h + 17}" text-anchor="middle">{tick:g}</text>')
        tick += step
    out.append(f'<text x="{left + plot_w}" y="{top + plot_h + 32}" text-anchor="end" fill="#555555">{escape(x_label)}</text>')
    # event markers, one label row each below the axis
    for i, (t, text) in enumerate(sorted(events)):
        xe = x(t)
        ly = top + plot_h + 54 + i * 18
        anchor = "start" if xe < left + plot_w * 0.6 else "end"
        dx = 4 if anchor == "start" else -4
        out.append(f'<line x1="{xe:.1f}" y1="{top}" x2="{xe:.1f}" y2="{ly - 4}" stroke="#888888" stroke-dasharray="4 3"/>')
        out.append(f'<text x="{xe + dx:.1f}" y="{ly}" text-anchor="{anchor}" fill="#333333">{escape(text)}</text>')
    # series as steps (the first as an area), legend at the top left of the plot
    for k, (name, colour, pts) in enumerate(series):
        pts = sorted(pts)
        if pts:
            d = [f"M{x(pts[0][0]):.1f},{y(pts[0][1]):.1f}"]
            for (ta, va), (tb, vb) in zip(pts, pts[1:]):
                d.append(f"H{x(tb):.1f}V{y(vb):.1f}")
            if k == 0:
                area = d + [f"V{y(0):.1f}H{x(pts[0][0]):.1f}Z"]
                out.append(f'<path d="{" ".join(area)}" fill="{colour}" fill-opacity="0.25" stroke="{colour}" stroke-width="1.5"/>')
            else:
                out.append(f'<path d="{" ".join(d)}" fill="none" stroke="{colour}" stroke-width="3"/>')
        ly = top + 16 + k * 18
        if k == 0:
            out.append(f'<rect x="{left + 10}" y="{ly - 9}" width="18" height="10" fill="{colour}" fill-opacity="0.25" stroke="{colour}"/>')
        else:
            out.append(f'<line x1="{left + 10}" y1="{ly - 4}" x2="{left + 28}" y2="{ly - 4}" stroke="{colour}" stroke-width="3"/>')
        out.append(f'<text x="{left + 34}" y="{ly}">{escape(name)}</text>')
    out.append(f'<rect x="{left}" y="{top}" width="{plot_w}" height="{plot_h}" fill="none" stroke="#333333"/>')
    out.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(out) + "\n")
