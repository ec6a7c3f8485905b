"""A step chart of scraped gauges with vertical event markers, drawn with matplotlib into a
self-contained SVG (text kept as text, no date, fixed element ids, no external fonts or scripts)."""
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (after choosing the non-interactive backend)
from matplotlib.ticker import MaxNLocator  # noqa: E402


def step_chart(path, title, subtitles, series, events, x_label="seconds"):
    """series: [(name, colour, [(t, value), ...])], the first drawn as a filled area, the others
    as lines on top; events: [(t, text)], dashed lines labelled one per row under the axis.

    Values are drawn as steps (a gauge holds its value until the next scrape)."""
    with plt.rc_context({"svg.fonttype": "none", "svg.hashsalt": "advlock", "font.family": "sans-serif",
                         "font.sans-serif": ["DejaVu Sans"], "font.size": 9}):
        events = sorted(events)
        # Heights in inches: header (title and subtitles), plot, axis, one row per event label.
        head, plot, axis, row = 0.5 + 0.2 * len(subtitles), 1.9, 0.45, 0.2
        height = head + plot + axis + row * len(events) + 0.15
        fig = plt.figure(figsize=(8.2, height), dpi=100)
        ax = fig.add_axes((0.07, (axis + row * len(events) + 0.15) / height, 0.9, plot / height))
        fig.text(0.07, 1 - 0.3 / height, title, fontsize=12, fontweight="bold")
        for i, line in enumerate(subtitles):
            fig.text(0.07, 1 - (0.52 + 0.2 * i) / height, line, color="#555555")

        ts = [t for _, _, pts in series for t, _ in pts] + [t for t, _ in events]
        t0, t1 = min(ts), max(ts)
        if t1 <= t0:
            t1 = t0 + 1
        vmax = max([v for _, _, pts in series for _, v in pts] + [1])
        for k, (name, colour, pts) in enumerate(series):
            pts = sorted(pts)
            if not pts:
                continue
            xs, ys = [t for t, _ in pts], [v for _, v in pts]
            if k == 0:
                ax.fill_between(xs, ys, step="post", color=colour, alpha=0.25, linewidth=0)
                ax.step(xs, ys, where="post", color=colour, linewidth=1.5, label=name)
            else:
                ax.step(xs, ys, where="post", color=colour, linewidth=3, label=name)
        ax.set_xlim(t0, t1)
        ax.set_ylim(0, int(vmax) + 1)
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(axis="y", color="#e5e5e5")
        ax.set_axisbelow(True)
        ax.set_xlabel(x_label, loc="right", color="#555555")
        ax.legend(loc="upper left", frameon=False)

        # Event markers: a dashed line from the plot's top down to its label's row under the axis.
        for i, (t, text) in enumerate(events):
            frac = (t - t0) / (t1 - t0)
            right = frac >= 0.6
            y_label = -(axis + row * (i + 0.7)) / plot  # in axes fractions, below the axis
            ax.plot([t, t], [1, y_label + 0.04], transform=ax.get_xaxis_transform(), clip_on=False,
                    color="#888888", linestyle=(0, (4, 3)), linewidth=1)
            ax.annotate(text, (t, y_label), xycoords=("data", "axes fraction"), xytext=(-4 if right else 4, 0),
                        textcoords="offset points", ha="right" if right else "left", va="center",
                        color="#333333", annotation_clip=False)
        fig.savefig(path, format="svg", metadata={"Date": None})
        plt.close(fig)
