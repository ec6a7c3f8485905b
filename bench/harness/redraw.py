"""Redraws the charts of bench results directories from their results.json, without running
anything, e.g. after a change to svg.py:

    pg_test/.venv/bin/python -m bench.harness.redraw bench/results bench/results/case5-6-rerun

Only the charts (*.svg) the directory already has are replaced; REPORT.md and results.json stay."""
from __future__ import annotations

import glob
import json
import os
import shutil
import sys
import tempfile

from .common import Ctx
from .main import CASES


def redraw(directory: str) -> list[str]:
    with open(os.path.join(directory, "results.json")) as f:
        data = json.load(f)
    drawn = []
    with tempfile.TemporaryDirectory(prefix="advlock-redraw.") as tmp:
        ctx = Ctx(0, "", tmp, tmp, "", data.get("quick", False), "", "")
        for num, _title, mod in CASES:
            if num in data["results"]:
                try:
                    mod.render(data["results"][num], ctx)
                except Exception as e:  # noqa: BLE001  an older results.json: keep what was drawn
                    print(f"redraw: {directory}: case {num}'s report stopped ({type(e).__name__}: {e}); "
                          "charts drawn before that are kept")
        for chart in sorted(glob.glob(os.path.join(tmp, "*.svg"))):
            target = os.path.join(directory, os.path.basename(chart))
            if os.path.exists(target):
                shutil.copyfile(chart, target)
                drawn.append(target)
    for old in sorted(glob.glob(os.path.join(directory, "*.svg"))):
        if old not in drawn:
            print(f"redraw: {old}: not redrawn (its data is not in results.json)")
    return drawn


if __name__ == "__main__":
    for d in sys.argv[1:]:
        for path in redraw(d):
            print(f"redraw: {path}")
