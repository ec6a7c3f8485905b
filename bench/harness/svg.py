"""Hand-written SVG charts (no plotting dependency): grouped bars, horizontal bars, ECDF,
strip plot and line chart, with linear or log axes."""
from __future__ import annotations

import math
import random
from html import escape
from typing import Sequence

from .common import percentile

PALETTE = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#17becf", "#7f7f7f"]
W, H = 760, 420
ML, MR, MT, MB = 78, 20, 48, 70  # margins; the legend sits under the title


def _nice_step(span: float, n: int = 5) -> float:
    raw = span / max(n, 1)
    mag = 10 ** math.floor(math.log10(raw)) if raw > 0 else 1
    for m in (1, 2, 2.5, 5, 10):
        if raw <= m * mag:
            return m * mag
    return 10 * mag


def _fmt(v: float) -> str:
    if v == 0:
        return "0"
    a = abs(v)
    if a >= 1e6:
        return f"{v / 1e6:g}M"
    if a >= 1e4:
        return f"{v / 1e3:g}k"
    if a >= 1:
        return f"{v:g}"
    return f"{v:.3g}"


class Axis:
    def __init__(self, lo: float, hi: float, px0: float, px1: float, log: bool = False):
        self.log = log
        if log:
            lo = max(lo, 1e-9)
            self.lo = 10 ** math.floor(math.log10(lo))
            self.hi = 10 ** math.ceil(math.log10(max(hi, lo * 10)))
        else:
            if hi <= lo:
                hi = lo + 1
            step = _nice_step(hi - lo)
            self.lo = math.floor(lo / step) * step
            self.hi = math.ceil(hi / step) * step
        self.px0, self.px1 = px0, px1

    def __call__(self, v: float) -> float:
        if self.log:
            v = max(v, self.lo)
            f = (math.log10(v) - math.log10(self.lo)) / (math.log10(self.hi) - math.log10(self.lo))
        else:
            f = (v - self.lo) / (self.hi - self.lo)
        return self.px0 + f * (self.px1 - self.px0)

    def ticks(self) -> list[float]:
        if self.log:
            out, e = [], math.floor(math.log10(self.lo))
            while 10 ** e <= self.hi * 1.0001:
                out.append(10 ** e)
                e += 1
            return out
        step = _nice_step(self.hi - self.lo)
        n = int(round((self.hi - self.lo) / step))
        return [self.lo + i * step for i in range(n + 1)]


class Canvas:
    def __init__(self, title: str, width: int = W, height: int = H):
        self.w, self.h = width, height
        self.parts = [
            f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
            f'viewBox="0 0 {width} {height}" font-family="Helvetica, Arial, sans-serif" font-size="12">',
            f'<rect width="{width}" height="{height}" fill="white"/>',
            f'<text x="{width / 2}" y="20" text-anchor="middle" font-size="15" font-weight="bold">{escape(title)}</text>',
        ]

    def add(self, s: str) -> None:
        self.parts.append(s)

    def text(self, x, y, s, anchor="middle", size=12, rotate=None, color="#222", weight="normal"):
        tr = f' transform="rotate({rotate} {x:.1f} {y:.1f})"' if rotate is not None else ""
        self.add(f'<text x="{x:.1f}" y="{y:.1f}" text-anchor="{anchor}" font-size="{size}" fill="{color}" '
                 f'font-weight="{weight}"{tr}>{escape(str(s))}</text>')

    def line(self, x1, y1, x2, y2, color="#444", width=1.0, dash=None, opacity=1.0):
        d = f' stroke-dasharray="{dash}"' if dash else ""
        self.add(f'<line x1="{x1:.1f}" y1="{y1:.1f}" x2="{x2:.1f}" y2="{y2:.1f}" stroke="{color}" '
                 f'stroke-width="{width}" stroke-opacity="{opacity}"{d}/>')

    def rect(self, x, y, w, h, color, opacity=1.0, title=None):
        t = f"<title>{escape(title)}</title>" if title else ""
        self.add(f'<rect x="{x:.1f}" y="{y:.1f}" width="{max(w, 0):.1f}" height="{max(h, 0):.1f}" '
                 f'fill="{color}" fill-opacity="{opacity}">{t}</rect>')

    def circle(self, x, y, r, color, opacity=1.0):
        self.add(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="{r}" fill="{color}" fill-opacity="{opacity}"/>')

    def polyline(self, pts, color, width=2.0, dash=None):
        d = f' stroke-dasharray="{dash}"' if dash else ""
        p = " ".join(f"{x:.1f},{y:.1f}" for x, y in pts)
        self.add(f'<polyline points="{p}" fill="none" stroke="{color}" stroke-width="{width}"{d}/>')

    def legend(self, names: Sequence[str], colors: Sequence[str], y: float = 36):
        # One row, centred; long legends wrap onto a second row.
        items = list(zip(names, colors))
        widths = [18 + 7 * len(n) + 16 for n, _ in items]
        rows, row, acc = [], [], 0
        for it, w in zip(items, widths):
            if row and acc + w > self.w - 40:
                rows.append((row, acc))
                row, acc = [], 0
            row.append((it, w))
            acc += w
        rows.append((row, acc))
        for ri, (row, total) in enumerate(rows):
            x = (self.w - total) / 2
            for (name, color), w in row:
                self.rect(x, y + ri * 16 - 9, 12, 12, color)
                self.text(x + 16, y + ri * 16 + 1, name, anchor="start", size=11)
                x += w

    def axes(self, xa: Axis | None, ya: Axis, xlabel: str, ylabel: str, x0, x1, y0, y1):
        for t in ya.ticks():
            y = ya(t)
            self.line(x0, y, x1, y, color="#ddd")
            self.text(x0 - 6, y + 4, _fmt(t), anchor="end", size=11)
        if xa is not None:
            for t in xa.ticks():
                x = xa(t)
                self.line(x, y0, x, y1, color="#eee")
                self.text(x, y0 + 16, _fmt(t), size=11)
        self.line(x0, y0, x1, y0, color="#333")
        self.line(x0, y0, x0, y1, color="#333")
        self.text((x0 + x1) / 2, self.h - 18, xlabel, size=12)
        self.text(18, (y0 + y1) / 2, ylabel, rotate=-90, size=12)

    def save(self, path: str) -> None:
        self.parts.append("</svg>")
        with open(path, "w") as f:
            f.write("\n".join(self.parts) + "\n")


def _legend_space(n_series: int, names: Sequence[str]) -> int:
    return 16 if sum(18 + 7 * len(n) + 16 for n in names) > W - 40 else 0


def grouped_bars(path, title, groups: Sequence[str], series: Sequence[tuple[str, Sequence[float]]],
                 ylabel: str, xlabel: str = "", annotate: bool = True, spread=None):
    """Vertical bars: one cluster per group, one bar per series. spread[i][j] = (lo, hi) whisker."""
    names = [s[0] for s in series]
    extra = _legend_space(len(series), names)
    c = Canvas(title)
    c.legend(names, PALETTE)
    x0, x1, y0, y1 = ML, W - MR, H - MB, MT + extra + 8
    vmax = max([v for _, vs in series for v in vs if v == v] + [1e-9])
    if spread:
        vmax = max([vmax] + [hi for row in spread for (_, hi) in row if hi == hi])
    ya = Axis(0, vmax * 1.08, y0, y1)
    c.axes(None, ya, xlabel, ylabel, x0, x1, y0, y1)
    gw = (x1 - x0) / max(len(groups), 1)
    bw = gw * 0.8 / max(len(series), 1)
    for gi, g in enumerate(groups):
        gx = x0 + gi * gw + gw * 0.1
        c.text(x0 + gi * gw + gw / 2, y0 + 16, g, size=12)
        for si, (name, vs) in enumerate(series):
            v = vs[gi]
            if v != v:
                continue
            bx = gx + si * bw
            c.rect(bx + 1, ya(v), bw - 2, y0 - ya(v), PALETTE[si % len(PALETTE)], title=f"{name} {g}: {v:,.0f}")
            if spread:
                lo, hi = spread[si][gi]
                if lo == lo and hi == hi:
                    cx = bx + bw / 2
                    c.line(cx, ya(lo), cx, ya(hi), color="#111", width=1)
                    c.line(cx - 3, ya(lo), cx + 3, ya(lo), color="#111")
                    c.line(cx - 3, ya(hi), cx + 3, ya(hi), color="#111")
            if annotate and bw >= 22:
                c.text(bx + bw / 2, ya(v) - 4, _fmt(round(v, 3 - int(math.log10(max(v, 1))))), size=9)
    c.save(path)


def hbars(path, title, labels: Sequence[str], values: Sequence[float], xlabel: str, value_fmt=None):
    c = Canvas(title, height=70 + 46 * len(labels) + 40)
    h = c.h
    lw = max(7 * max(len(s) for s in labels), 80)
    x0, x1, y0, y1 = lw + 20, W - 60, h - 50, 40
    xa = Axis(0, max(values) * 1.1, x0, x1)
    for t in xa.ticks():
        c.line(xa(t), y0, xa(t), y1, color="#eee")
        c.text(xa(t), y0 + 16, _fmt(t), size=11)
    c.line(x0, y0, x1, y0, color="#333")
    c.text((x0 + x1) / 2, h - 14, xlabel)
    bh = (y0 - y1) / len(labels)
    for i, (lab, v) in enumerate(zip(labels, values)):
        y = y1 + i * bh + bh * 0.15
        c.rect(x0, y, xa(v) - x0, bh * 0.7, PALETTE[i % len(PALETTE)])
        c.text(x0 - 8, y + bh * 0.45, lab, anchor="end")
        c.text(xa(v) + 4, y + bh * 0.45, value_fmt(v) if value_fmt else _fmt(v), anchor="start", size=11)
    c.save(path)


def ecdf(path, title, series: Sequence[tuple[str, Sequence[float]]], xlabel: str, log_x: bool = True,
         marks: Sequence[tuple[float, str]] = ()):
    names = [s[0] for s in series]
    extra = _legend_space(len(series), names)
    c = Canvas(title)
    c.legend(names, PALETTE)
    x0, x1, y0, y1 = ML, W - MR, H - MB, MT + extra + 8
    allv = [v for _, vs in series for v in vs if v > 0]
    xa = Axis(min(allv), max(allv), x0, x1, log=log_x)
    ya = Axis(0, 1, y0, y1)
    c.axes(xa, ya, xlabel, "fraction of hand-offs ≤ x", x0, x1, y0, y1)
    for v, label in marks:
        c.line(xa(v), y0, xa(v), y1, color="#888", dash="4 3")
        c.text(xa(v) + 3, y1 + 12, label, anchor="start", size=10, color="#555")
    for si, (name, vs) in enumerate(series):
        s = sorted(v for v in vs if v > 0)
        if not s:
            continue
        pts, n = [], len(s)
        for i, v in enumerate(s):
            pts.append((xa(v), ya(i / n)))
            pts.append((xa(v), ya((i + 1) / n)))
        c.polyline(pts, PALETTE[si % len(PALETTE)])
    c.save(path)


def strip(path, title, categories: Sequence[str], series: Sequence[tuple[str, Sequence[Sequence[float]]]],
          ylabel: str, xlabel: str, hline: tuple[float, str] | None = None, log_y: bool = False):
    """Dots per (category, series) with jitter and a bar at the median and p99."""
    names = [s[0] for s in series]
    extra = _legend_space(len(series), names)
    c = Canvas(title)
    c.legend(names, PALETTE)
    x0, x1, y0, y1 = ML, W - MR, H - MB, MT + extra + 8
    allv = [v for _, per in series for vs in per for v in vs]
    lo, hi = min(allv + [0]), max(allv + [hline[0] if hline else 0])
    ya = Axis(lo, hi * 1.05 if hi > 0 else 1, y0, y1, log=log_y)
    c.axes(None, ya, xlabel, ylabel, x0, x1, y0, y1)
    if hline:
        c.line(x0, ya(hline[0]), x1, ya(hline[0]), color="#d62728", dash="5 4")
        c.text(x1 - 4, ya(hline[0]) - 4, hline[1], anchor="end", size=10, color="#d62728")
    gw = (x1 - x0) / len(categories)
    sw = gw * 0.8 / len(series)
    rnd = random.Random(1)
    for ci, cat in enumerate(categories):
        c.text(x0 + ci * gw + gw / 2, y0 + 16, cat)
        for si, (name, per) in enumerate(series):
            vs = per[ci]
            cx = x0 + ci * gw + gw * 0.1 + si * sw + sw / 2
            col = PALETTE[si % len(PALETTE)]
            for v in vs:
                c.circle(cx + (rnd.random() - 0.5) * sw * 0.6, ya(v), 2.2, col, 0.45)
            if vs:
                for p, wdt in ((50, 2.5), (99, 1.2)):
                    y = ya(percentile(vs, p))
                    c.line(cx - sw * 0.4, y, cx + sw * 0.4, y, color="#111", width=wdt)
    c.text(x1, H - 40, "thick bar: p50, thin bar: p99", anchor="end", size=10, color="#555")
    c.save(path)


def lines(path, title, series: Sequence[tuple[str, Sequence[float], Sequence[float]]], xlabel: str,
          ylabel: str, log_x: bool = True, log_y: bool = True, dashed: Sequence[str] = ()):
    names = [s[0] for s in series]
    extra = _legend_space(len(series), names)
    c = Canvas(title)
    c.legend(names, PALETTE)
    x0, x1, y0, y1 = ML, W - MR, H - MB, MT + extra + 8
    xs = [x for _, xv, _ in series for x in xv]
    ys = [y for _, _, yv in series for y in yv if y > 0]
    xa = Axis(min(xs), max(xs), x0 + 10, x1 - 10, log=log_x)
    ya = Axis(min(ys), max(ys), y0, y1, log=log_y)
    c.axes(xa, ya, xlabel, ylabel, x0, x1, y0, y1)
    for si, (name, xv, yv) in enumerate(series):
        col = PALETTE[si % len(PALETTE)]
        pts = [(xa(x), ya(y)) for x, y in zip(xv, yv) if y > 0]
        c.polyline(pts, col, dash="6 4" if name in dashed else None)
        for x, y in pts:
            c.circle(x, y, 3.5, col)
    c.save(path)
