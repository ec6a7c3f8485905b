"""Case 8: the cost of a fencing token (issue #12).

Uncontended `BEGIN; SELECT <acquire>(:k, 0, 'xact'); COMMIT;` with pgbench, one client (latency
is what a leader pays per acquisition), prepared protocol: advlock_try_with_token against
advlock_try_with_timeout, alternating rounds, median tps. Twice: with fsync = on (durable: a
token draw WAL-logs the sequence once per 32 tokens, advlock flushes that WAL before the token is
returned, and that transaction's commit flushes again because the draw assigned it an ID), and
with fsync = off (the CPU cost alone; the bench instance's own setting). Target: ≤ 1.25× the
plain acquisition's cost, judged on the durable configuration.
"""
from __future__ import annotations

import os

from .case_acquire import pgbench
from .common import Ctx, md_table, median, target

KEY = r"\set k random(1, 100000000000000)"
PATTERNS = {
    "advlock_try_with_timeout": "SELECT advlock_try_with_timeout(:k, 0, 'xact');",
    "advlock_try_with_token": "SELECT advlock_try_with_token(:k, 0, 'xact');",
}
PLAIN, TOKEN = "advlock_try_with_timeout", "advlock_try_with_token"


def _fsync(ctx: Ctx, on: bool) -> None:
    with ctx.connect(app="bench-admin") as admin:
        admin.execute(f"ALTER SYSTEM SET fsync = {'on' if on else 'off'}")
        admin.execute("SELECT pg_reload_conf()")


def run(ctx: Ctx) -> dict:
    seconds = ctx.size(8, 1)
    rounds = ctx.size(3, 1)
    scripts = {}
    for name, sql in PATTERNS.items():
        path = os.path.join(ctx.work, f"case8-{name}.sql")
        with open(path, "w") as f:
            f.write("\n".join([KEY, "BEGIN;", sql, "COMMIT;"]) + "\n")
        scripts[name] = path
    tps = {fsync: {name: [] for name in PATTERNS} for fsync in ("on", "off")}
    try:
        for fsync in ("on", "off"):
            _fsync(ctx, fsync == "on")
            for _ in range(rounds):
                for name, path in scripts.items():
                    tps[fsync][name].append(pgbench(ctx, path, 1, seconds, "prepared"))
    finally:
        _fsync(ctx, False)
    return {"tps": tps, "seconds": seconds, "rounds": rounds}


def render(res: dict, ctx: Ctx) -> tuple[str, list[dict]]:
    rows = []
    for fsync, by in res["tps"].items():
        us = {name: 1e6 / median(v) for name, v in by.items()}
        rows += [[f"fsync {fsync}", name, f"{median(by[name]):,.0f}", f"{us[name]:.1f}", f"{us[name] / us[PLAIN]:.2f}×"]
                 for name in PATTERNS]
    us = {name: 1e6 / median(v) for name, v in res["tps"]["on"].items()}
    ratio = us[TOKEN] / us[PLAIN]
    targets = [target("8", "a token acquisition costs ≤ 1.25× a plain acquisition (uncontended, "
                           "1 client, fsync on)",
                      f"{ratio:.2f}× ({us[PLAIN]:.1f} → {us[TOKEN]:.1f} µs per transaction)", ratio <= 1.25, value=ratio)]
    md = "\n".join([
        f"`BEGIN; <acquire>(:k, 0, 'xact'); COMMIT;`, pgbench, 1 client, prepared protocol, "
        f"{res['seconds']} s per run, {res['rounds']} alternating rounds, median; synchronous_commit on.",
        "",
        md_table(["configuration", "acquisition", "tps", "µs per transaction", "vs plain"], rows, align="llrrr"),
        "",
        "Every 32nd token WAL-logs the sequence: advlock flushes that WAL before returning the token "
        "and, because the draw assigned a transaction ID, the commit waits for its own flush too.",
    ])
    return md, targets
