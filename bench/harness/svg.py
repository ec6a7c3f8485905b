"""The bench's SVG charts, drawn with matplotlib: grouped bars, horizontal bars, ECDF, strip plot
and line chart, with linear or log axes. Text stays text in the SVG, and the files are
reproducible (no date, fixed element ids), so a redrawn chart only differs where its data does."""
from __future__ import annotations

import math
import random
import textwrap
from typing import Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (after choosing the non-interactive backend)
from matplotlib.ticker import FuncFormatter  # noqa: E402

from .common import percentile  # noqa: E402

PALETTE = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#17becf", "#7f7f7f"]
SIZE = (7.6, 4.2)  # inches at 100 dpi: the 760 x 420 of the earlier hand-drawn charts

plt.rcParams.update({
    "svg.fonttype": "none",        # text as <text>, not paths
    "svg.hashsalt": "advlock",     # stable element ids
    "font.family": "sans-serif",
    "font.sans-serif": ["DejaVu Sans"],  # matplotlib's own font, so text is measured right
    "font.size": 9,
    "axes.titlesize": 11,
    "axes.titleweight": "bold",
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.grid": True,
    "grid.color": "#dddddd",
    "grid.linewidth": 0.6,
    "legend.frameon": False,
    "legend.fontsize": 8,
})


def _fmt(v: float, _pos=None) -> str:
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


def _figure(title: str, height: float = SIZE[1]):
    fig, ax = plt.subplots(figsize=(SIZE[0], height), dpi=100, layout="constrained")
    fig.suptitle(textwrap.fill(title, 90), fontsize=11, fontweight="bold")
    ax.set_axisbelow(True)
    return fig, ax


def _legend(fig, names: Sequence[str]) -> None:
    """Under the plot, in as many columns as the longest name leaves room for (at most 3)."""
    width = max((len(n) for n in names), default=1) + 6
    fig.legend(loc="outside lower center", ncol=max(1, min(len(names), 3, 120 // width)), markerscale=2)


def _save(fig, path: str) -> None:
    fig.savefig(path, format="svg", metadata={"Date": None})
    plt.close(fig)


def _nan(v: float) -> bool:
    return v != v


def grouped_bars(path, title, groups: Sequence[str], series: Sequence[tuple[str, Sequence[float]]],
                 ylabel: str, xlabel: str = "", annotate: bool = True, spread=None):
    """Vertical bars: one cluster per group, one bar per series. spread[i][j] = (lo, hi) whisker."""
    fig, ax = _figure(title)
    n = max(len(series), 1)
    width = 0.8 / n
    for si, (name, vs) in enumerate(series):
        xs = [gi - 0.4 + width * (si + 0.5) for gi in range(len(groups))]
        pts = [(x, v) for x, v in zip(xs, vs) if not _nan(v)]
        ax.bar([x for x, _ in pts], [v for _, v in pts], width * 0.92, label=name,
               color=PALETTE[si % len(PALETTE)])
        tops = {x: v for x, v in pts}
        if spread:
            whiskers = [(x, lo, hi) for x, (lo, hi), v in zip(xs, spread[si], vs)
                        if not (_nan(v) or _nan(lo) or _nan(hi))]
            ax.errorbar([x for x, _, _ in whiskers], [(lo + hi) / 2 for _, lo, hi in whiskers],
                        yerr=[(hi - lo) / 2 for _, lo, hi in whiskers], fmt="none", ecolor="#111111",
                        elinewidth=1, capsize=3)
            tops.update({x: max(tops[x], hi) for x, _, hi in whiskers})
        if annotate and width * SIZE[0] * 100 / max(len(groups), 1) >= 22:
            for x, v in pts:  # the value above the bar or its whisker
                ax.annotate(_fmt(round(v, 3 - int(math.log10(max(v, 1))))), (x, tops[x]), xytext=(0, 3),
                            textcoords="offset points", ha="center", va="bottom", rotation=90, fontsize=7)
    ax.set_xticks(range(len(groups)), groups)
    ax.tick_params(axis="x", length=0)
    ax.grid(axis="x", visible=False)
    ax.yaxis.set_major_formatter(FuncFormatter(_fmt))
    ax.set_ylim(bottom=0)
    ax.margins(y=0.18 if annotate else 0.08)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    _legend(fig, [s[0] for s in series])
    _save(fig, path)


def hbars(path, title, labels: Sequence[str], values: Sequence[float], xlabel: str, value_fmt=None):
    fig, ax = _figure(title, height=max(1.5 + 0.46 * len(labels), 2.2))
    ys = range(len(labels))
    bars = ax.barh(ys, values, 0.7, color=[PALETTE[i % len(PALETTE)] for i in ys])
    ax.bar_label(bars, labels=[value_fmt(v) if value_fmt else _fmt(v) for v in values], padding=4, fontsize=8)
    ax.set_yticks(list(ys), labels)
    ax.invert_yaxis()
    ax.tick_params(axis="y", length=0)
    ax.grid(axis="y", visible=False)
    ax.xaxis.set_major_formatter(FuncFormatter(_fmt))
    ax.set_xlim(0, max(values) * 1.15)
    ax.set_xlabel(xlabel)
    _save(fig, path)


def ecdf(path, title, series: Sequence[tuple[str, Sequence[float]]], xlabel: str, log_x: bool = True,
         marks: Sequence[tuple[float, str]] = ()):
    fig, ax = _figure(title)
    for si, (name, vs) in enumerate(series):
        s = sorted(v for v in vs if v > 0)
        if not s:
            continue
        ax.ecdf(s, label=name, color=PALETTE[si % len(PALETTE)], linewidth=1.8)
    if log_x:
        ax.set_xscale("log")
    for v, label in marks:
        ax.axvline(v, color="#888888", linestyle=(0, (4, 3)), linewidth=1)
        ax.annotate(label, (v, 1), xytext=(3, -10), textcoords="offset points", fontsize=7, color="#555555")
    ax.xaxis.set_major_formatter(FuncFormatter(_fmt))
    ax.set_ylim(0, 1.02)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("fraction of hand-offs ≤ x")
    _legend(fig, [s[0] for s in series])
    _save(fig, path)


def strip(path, title, categories: Sequence[str], series: Sequence[tuple[str, Sequence[Sequence[float]]]],
          ylabel: str, xlabel: str, hline: tuple[float, str] | None = None, log_y: bool = False):
    """Dots per (category, series) with jitter and a bar at the median and p99."""
    fig, ax = _figure(title)
    n = max(len(series), 1)
    width = 0.8 / n
    rnd = random.Random(1)
    for si, (name, per) in enumerate(series):
        color = PALETTE[si % len(PALETTE)]
        for ci, vs in enumerate(per):
            cx = ci - 0.4 + width * (si + 0.5)
            ax.scatter([cx + (rnd.random() - 0.5) * width * 0.6 for _ in vs], vs, s=7, color=color, alpha=0.45,
                       linewidths=0, label=name if ci == 0 else None)
            if vs:
                for p, lw in ((50, 2.5), (99, 1.2)):
                    y = percentile(vs, p)
                    ax.plot([cx - width * 0.4, cx + width * 0.4], [y, y], color="#111111", linewidth=lw)
    if hline:
        ax.axhline(hline[0], color="#d62728", linestyle=(0, (5, 4)), linewidth=1)
        ax.annotate(hline[1], (1, hline[0]), xycoords=("axes fraction", "data"), xytext=(-4, 4),
                    textcoords="offset points", ha="right", fontsize=7, color="#d62728")
    if log_y:
        ax.set_yscale("log")
    ax.set_xticks(range(len(categories)), categories)
    ax.tick_params(axis="x", length=0)
    ax.grid(axis="x", visible=False)
    ax.yaxis.set_major_formatter(FuncFormatter(_fmt))
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.annotate("thick bar: p50, thin bar: p99", (1, 0), xycoords="axes fraction", xytext=(0, -28),
                textcoords="offset points", ha="right", fontsize=7, color="#555555")
    _legend(fig, [s[0] for s in series])
    _save(fig, path)


def lines(path, title, series: Sequence[tuple[str, Sequence[float], Sequence[float]]], xlabel: str,
          ylabel: str, log_x: bool = True, log_y: bool = True, dashed: Sequence[str] = ()):
    fig, ax = _figure(title)
    for si, (name, xv, yv) in enumerate(series):
        pts = [(x, y) for x, y in zip(xv, yv) if y > 0]
        ax.plot([x for x, _ in pts], [y for _, y in pts], marker="o", markersize=4, linewidth=2,
                linestyle=(0, (6, 4)) if name in dashed else "-", color=PALETTE[si % len(PALETTE)], label=name)
    if log_x:
        ax.set_xscale("log")
    if log_y:
        ax.set_yscale("log")
    ax.xaxis.set_major_formatter(FuncFormatter(_fmt))
    ax.yaxis.set_major_formatter(FuncFormatter(_fmt))
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    _legend(fig, [s[0] for s in series])
    _save(fig, path)
