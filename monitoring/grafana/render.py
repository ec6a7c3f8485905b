#!/usr/bin/env python3
"""Draws the panels of advlock.json from a live Prometheus: each panel's queries, with the
dashboard's variables given concrete values, run through Prometheus's HTTP API
(/api/v1/query_range), and laid out on the dashboard's own grid (gridPos), into a PNG. Series
that stay at 0 (or NaN) all along are left out of a panel, for legibility; a stat panel shows
the last value, as Grafana's does.

    python3 monitoring/grafana/render.py --prometheus http://127.0.0.1:9090 \\
        --start 1764640000 --end 1764640060 --var server=db:9187 --var datname=app \\
        --out monitoring/grafana/advlock.png

monitoring/grafana/advlock.png comes from the end-to-end test, which calls render() on its own
Prometheus (ADVLOCK_DASHBOARD_PNG=<path> pg_test/run.sh monitoring test_dashboard.py).
pg_test/monitoring/test_dashboard.py imports substitute() and PRELOADED_ONLY from here.
Needs matplotlib for drawing only (pg_test/requirements-tools.txt has it).
"""
import argparse
import io
import json
import math
import re
import urllib.parse
import urllib.request
from pathlib import Path

DASHBOARD = Path(__file__).resolve().with_name("advlock.json")
# Said by the description of every panel that has data only with shared_preload_libraries.
PRELOADED_ONLY = "Needs advlock in shared_preload_libraries."
# Values of the dashboard's variables when none is given: every server, database, namespace.
DEFAULTS = {"server": ".*", "datname": ".*", "ns": ".*", "__rate_interval": "1m"}


def load(path=DASHBOARD) -> dict:
    return json.loads(Path(path).read_text())


def panels(dashboard: dict) -> list:
    """The panels that draw data (rows excluded), in the dashboard's order."""
    return [p for p in dashboard["panels"] if p.get("type") != "row"]


def substitute(expr: str, values: dict) -> str:
    """expr with each dashboard variable ($name or ${name}) replaced by values[name] (regex
    values for the =~ matchers; "1m" or so for $__rate_interval); an AssertionError names a
    variable that has no value."""
    values = {**DEFAULTS, **values}

    def one(m):
        name = m.group(1) or m.group(2)
        assert name in values, f"no value for ${name} in {expr!r}"
        return values[name]
    return re.sub(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}|\$([A-Za-z_][A-Za-z0-9_]*)", one, expr)


def legend(fmt: str, labels: dict) -> str:
    """Grafana's legendFormat: {{label}} replaced by the series' label value."""
    text = re.sub(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}", lambda m: labels.get(m.group(1), ""), fmt or "")
    return " ".join(text.split()) or "{" + ",".join(f'{k}="{v}"' for k, v in sorted(labels.items())) + "}"


def _get(url: str, path: str, params: dict) -> dict:
    with urllib.request.urlopen(f"{url}{path}?{urllib.parse.urlencode(params)}", timeout=30) as r:
        body = json.loads(r.read().decode())
    assert body.get("status") == "success", body
    return body["data"]


def query_range(url: str, expr: str, start: float, end: float, step: float) -> list:
    """[(labels, [(t, value), ...])] of a range query."""
    data = _get(url, "/api/v1/query_range",
                {"query": expr, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": f"{step:g}"})
    return [(r["metric"], [(float(t), float(v)) for t, v in r["values"]]) for r in data["result"]]


def fetch(url: str, dashboard: dict, values: dict, start: float, end: float, step: float) -> dict:
    """{panel id: [(legend, [(t, value)])]} for every panel of the dashboard."""
    out = {}
    for p in panels(dashboard):
        lines = []
        for t in p["targets"]:
            for labels, points in query_range(url, substitute(t["expr"], values), start, end, step):
                lines.append((legend(t.get("legendFormat", ""), labels), points))
        out[p["id"]] = lines
    return out


def render(dashboard: dict, data: dict, out, title: str, subtitle: str, t0: float):
    """Draws every panel of `dashboard` with data[panel id] on the dashboard's grid into `out`."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    unit_scale = {"percentunit": (100, " %"), "s": (1, " s"), "ops": (1, " /s"), "short": (1, "")}
    grid = panels(dashboard)
    rows = [p for p in dashboard["panels"] if p.get("type") == "row"]
    bottom = max(p["gridPos"]["y"] + p["gridPos"]["h"] for p in dashboard["panels"])
    unit_h = 0.34                                   # inches per grid row
    width, head = 16.0, 1.05
    height = head + bottom * unit_h
    colours = ["#3274d9", "#e02f44", "#ff9830", "#56a64b", "#8f3bb8", "#19a0a0", "#b877d9"]
    with plt.rc_context({"font.family": "sans-serif", "font.sans-serif": ["DejaVu Sans"], "font.size": 8}):
        fig = plt.figure(figsize=(width, height), dpi=100, facecolor="#f4f5f5")
        fig.text(0.01, 1 - 0.32 / height, title, fontsize=14, fontweight="bold")
        fig.text(0.01, 1 - 0.5 / height, subtitle, color="#555555", fontsize=9, va="top")

        def box(gp, pad_top=0.0):
            x0 = gp["x"] / 24 + 0.004
            w = gp["w"] / 24 - 0.008
            top = head + gp["y"] * unit_h
            h = gp["h"] * unit_h
            return x0, 1 - (top + h - 0.12) / height, w, (h - 0.12 - pad_top) / height

        for r in rows:
            x0, y0, w, h = box(r["gridPos"])
            fig.text(x0, y0 + h / 2, r["title"], fontsize=11, fontweight="bold", va="center")
        for p in grid:
            scale, suffix = unit_scale.get(p.get("fieldConfig", {}).get("defaults", {}).get("unit", "short"), (1, ""))
            lines = data.get(p["id"], [])
            x0, y0, w, h = box(p["gridPos"], pad_top=0.3)
            fig.patches.append(plt.Rectangle((x0, y0), w, h + 0.3 / height, transform=fig.transFigure,
                                             facecolor="white", edgecolor="#d8d9da", zorder=-1))
            fig.text(x0 + 0.004, y0 + h + 0.12 / height, p["title"], fontsize=9.5, fontweight="bold", va="center")
            if p["type"] == "stat":
                values = [pts[-1][1] for _, pts in lines if pts and not math.isnan(pts[-1][1])]
                v = sum(values) if values else float("nan")
                steps = p["fieldConfig"]["defaults"].get("thresholds", {}).get("steps", [])
                colour = "#56a64b"
                for s in steps:
                    if s["value"] is not None and not math.isnan(v) and v >= s["value"]:
                        colour = {"red": "#e02f44", "orange": "#ff9830"}.get(s["color"], "#56a64b")
                fig.patches.append(plt.Rectangle((x0 + 0.006, y0 + 0.01), w - 0.012, h - 0.02,
                                                 transform=fig.transFigure, facecolor=colour, zorder=1))
                fig.text(x0 + w / 2, y0 + h / 2, "no data" if math.isnan(v) else f"{v * scale:.3g}{suffix}",
                         fontsize=26, color="white", ha="center", va="center", fontweight="bold")
                continue
            ax = fig.add_axes((x0 + 0.035 * 24 / max(p["gridPos"]["w"], 1) * w, y0 + 0.3 * h,
                               w * (1 - 0.035 * 24 / max(p["gridPos"]["w"], 1)) - 0.006, 0.66 * h))
            drawn = 0
            for name, pts in lines:
                xs = [t - t0 for t, v in pts]
                ys = [v * scale for t, v in pts]
                if all(math.isnan(y) or y == 0 for y in ys):
                    continue             # a series at 0 (or NaN) all along: not drawn, for legibility
                ax.plot(xs, ys, color=colours[drawn % len(colours)], linewidth=1.6, label=name)
                drawn += 1
            if not drawn:
                ax.text(0.5, 0.5, "0 all along" if lines else "no data", transform=ax.transAxes,
                        ha="center", va="center", color="#888888")
            ax.set_ylim(bottom=0)
            top = ax.get_ylim()[1]
            # A threshold line where the data reaches near it, as Grafana's axis does not stretch to it.
            for s in p["fieldConfig"]["defaults"].get("thresholds", {}).get("steps", [])[1:]:
                if s["value"] * scale <= top * 1.5:
                    ax.axhline(s["value"] * scale, color={"red": "#e02f44"}.get(s["color"], "#ff9830"),
                               linestyle=(0, (4, 3)), linewidth=0.9)
            ax.set_ylabel({"percentunit": "%", "s": "seconds", "ops": "per second"}.get(
                p["fieldConfig"]["defaults"].get("unit"), ""), fontsize=7, color="#555555")
            ax.grid(color="#eeeeee")
            ax.set_axisbelow(True)
            ax.tick_params(labelsize=7, colors="#555555")
            for side in ("top", "right"):
                ax.spines[side].set_visible(False)
            if drawn:
                ax.legend(loc="upper left", bbox_to_anchor=(0, -0.1), ncol=max(1, p["gridPos"]["w"] // 3),
                          frameon=False, fontsize=7, handlelength=1.2, columnspacing=1.0)
        buf = io.BytesIO()
        fig.savefig(buf, format="png", facecolor=fig.get_facecolor())
        plt.close(fig)
    # A 256-colour palette (Pillow comes with matplotlib): a third of the size, the same picture.
    from PIL import Image
    buf.seek(0)
    Image.open(buf).convert("RGB").quantize(256).save(out, format="PNG", optimize=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--prometheus", required=True, help="Prometheus base URL")
    ap.add_argument("--start", type=float, required=True, help="unix time")
    ap.add_argument("--end", type=float, required=True, help="unix time")
    ap.add_argument("--step", type=float, default=1.0)
    ap.add_argument("--var", action="append", default=[], help="NAME=VALUE for a dashboard variable")
    ap.add_argument("--out", default=str(DASHBOARD.with_suffix(".png")))
    args = ap.parse_args()
    values = dict(v.split("=", 1) for v in args.var)
    dash = load()
    data = fetch(args.prometheus, dash, values, args.start, args.end, args.step)
    render(dash, data, args.out, dash["title"], f"from {args.prometheus}", args.start)


if __name__ == "__main__":
    main()
