"""Case 11: the cost of a fence (advlock_fence, issue #31).

pgbench, 1 client (latency is what a writer pays), prepared protocol, alternating rounds,
median tps, all in one run so the ratios are side by side:

* the call alone: `SELECT advlock_fence(:k, :t)` and `SELECT advlock_fence('bench', :k, :t)`
  against the single-row upsert it replaces, into a table of the same shape as advlock_fences
  (`INSERT … ON CONFLICT (key) DO UPDATE SET token = excluded.token, …`), and against the
  hand-written fence (the same upsert with `WHERE f.token <= excluded.token`). Target: the key
  form ≤ 1.3× the plain upsert.
* in a write transaction: `BEGIN; UPDATE one row; [fence;] COMMIT;` with and without the
  fence: what fencing adds to a small write (reported, no target).

Keys are drawn from 1,000 (so almost every call updates an existing row, as a fence in use
does); every transaction of one pgbench run uses the same token (equal tokens pass), and each
run a larger one than the last.
"""
from __future__ import annotations

import os

from .case_acquire import pgbench
from .common import Ctx, md_table, median, target

KEY = r"\set k random(1, 1000)"
SETUP = """
DROP TABLE IF EXISTS bench_fence_plain, bench_fence_data;
CREATE TABLE bench_fence_plain (
    key bigint PRIMARY KEY, token bigint NOT NULL, ns text, id text,
    passed_at timestamptz NOT NULL DEFAULT statement_timestamp(),
    passed_by text NOT NULL DEFAULT current_user);
CREATE TABLE bench_fence_data (id int PRIMARY KEY, v bigint NOT NULL);
INSERT INTO bench_fence_data SELECT g, 0 FROM generate_series(1, 1000) g;
DELETE FROM advlock_fences;
"""
UPSERT = ("INSERT INTO bench_fence_plain AS f (key, token) VALUES (:k, {t}) ON CONFLICT (key) DO UPDATE "
          "SET token = excluded.token, passed_at = excluded.passed_at, passed_by = excluded.passed_by")
CALLS = {
    "single-row upsert (plain)": UPSERT + ";",
    "hand-written fence (upsert WHERE token <=)": UPSERT + " WHERE f.token <= excluded.token;",
    "advlock_fence(key, token)": "SELECT advlock_fence(:k, {t});",
    "advlock_fence(ns, id, token)": "SELECT advlock_fence('bench', :k, {t});",
}
PLAIN, FENCE = "single-row upsert (plain)", "advlock_fence(key, token)"
WRITE = "UPDATE bench_fence_data SET v = v + 1 WHERE id = :k;"
TXNS = {
    "write transaction, unfenced": ["BEGIN;", WRITE, "COMMIT;"],
    "write transaction + advlock_fence": ["BEGIN;", WRITE, "SELECT advlock_fence(:k, {t});", "COMMIT;"],
}
UNFENCED, FENCED = list(TXNS)


def run(ctx: Ctx) -> dict:
    seconds = ctx.size(6, 1)
    rounds = ctx.size(5, 1)
    with ctx.connect(app="bench-admin") as admin:
        admin.execute(SETUP)
    patterns = {name: [KEY, sql] for name, sql in CALLS.items()} | {name: [KEY, *lines] for name, lines in TXNS.items()}
    tps = {name: [] for name in patterns}
    token = 0
    for _ in range(rounds):
        for name, lines in patterns.items():
            token += 1
            path = os.path.join(ctx.work, f"case11-{len(tps[name])}-{abs(hash(name))}.sql")
            with open(path, "w") as f:
                f.write("\n".join(line.replace("{t}", str(token)) for line in lines) + "\n")
            tps[name].append(pgbench(ctx, path, 1, seconds, "prepared"))
    with ctx.connect(app="bench-admin") as admin:
        fences = admin.execute("SELECT count(*), max(token) FROM advlock_fences").fetchone()
        admin.execute("DROP TABLE bench_fence_plain, bench_fence_data")
        admin.execute("DELETE FROM advlock_fences")
    return {"tps": tps, "seconds": seconds, "rounds": rounds, "fences": list(fences)}


def render(res: dict, ctx: Ctx) -> tuple[str, list[dict]]:
    us = {name: 1e6 / median(v) for name, v in res["tps"].items()}
    calls = [[name, f"{median(res['tps'][name]):,.0f}", f"{us[name]:.1f}", f"{us[name] / us[PLAIN]:.2f}×"]
             for name in CALLS]
    txns = [[name, f"{median(res['tps'][name]):,.0f}", f"{us[name]:.1f}", f"{us[name] / us[UNFENCED]:.2f}×"]
            for name in TXNS]
    ratio = us[FENCE] / us[PLAIN]
    targets = [target("11", "an advlock_fence call costs ≤ 1.3× the single-row upsert it replaces "
                            "(1 client, prepared)",
                      f"{ratio:.2f}× ({us[PLAIN]:.1f} → {us[FENCE]:.1f} µs per call)", ratio <= 1.3)]
    md = "\n".join([
        f"pgbench, 1 client, prepared protocol, {res['seconds']} s per run, {res['rounds']} alternating rounds, "
        "median; keys from 1,000 (updates of existing rows); synchronous_commit off (the bench instance's).",
        "",
        md_table(["call (one statement per transaction)", "tps", "µs per call", "vs plain upsert"], calls, align="lrrr"),
        "",
        md_table(["transaction", "tps", "µs per transaction", "vs unfenced"], txns, align="lrrr"),
        "",
        f"After the runs advlock_fences held {res['fences'][0]} fences (largest token {res['fences'][1]}).",
    ])
    return md, targets
