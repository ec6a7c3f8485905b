"""Case 7: ten keys in one transaction, three ways, with pgbench (issue #12).

- advlock_try_all_with_timeout: one call, all or nothing, one deadline, deadlock-free order;
- ten advlock_try_with_timeout calls in one statement (each with its own timeout);
- the idiom `SELECT pg_advisory_xact_lock(k) FROM unnest(…) k ORDER BY k` (no deadline, and the
  planner may lock before it sorts).
Distinct random key ranges per transaction (uncontended), 4 clients, prepared protocol; the
patterns alternate over several rounds and the median tps counts. Target: the array call at
least as fast as the idiom.
"""
from __future__ import annotations

import os

from .case_acquire import pgbench
from .common import Ctx, md_table, median, target

KEY = r"\set k random(1, 100000000000000)"
TEN = ", ".join(f":k::bigint + {i}" for i in range(10))
PATTERNS = {
    "advlock_try_all_with_timeout (one call)": f"SELECT advlock_try_all_with_timeout(ARRAY[{TEN}]::bigint[], 1000);",
    "ten advlock_try_with_timeout calls": "SELECT " + ", ".join(
        f"advlock_try_with_timeout(:k::bigint + {i}, 1000)" for i in range(10)) + ";",
    "unnest … ORDER BY idiom": f"SELECT pg_advisory_xact_lock(k) FROM unnest(ARRAY[{TEN}]::bigint[]) k ORDER BY k;",
}
ARRAY, IDIOM = "advlock_try_all_with_timeout (one call)", "unnest … ORDER BY idiom"


def run(ctx: Ctx) -> dict:
    seconds = ctx.size(8, 1)
    rounds = ctx.size(3, 1)
    clients = 4
    scripts = {}
    for name, sql in PATTERNS.items():
        path = os.path.join(ctx.work, f"case7-{abs(hash(name))}.sql")
        with open(path, "w") as f:
            f.write("\n".join([KEY, "BEGIN;", sql, "COMMIT;"]) + "\n")
        scripts[name] = path
    tps = {name: [] for name in PATTERNS}
    for _ in range(rounds):
        for name, path in scripts.items():
            tps[name].append(pgbench(ctx, path, clients, seconds, "prepared"))
    return {"tps": tps, "seconds": seconds, "rounds": rounds, "clients": clients}


def render(res: dict, ctx: Ctx) -> tuple[str, list[dict]]:
    med = {name: median(v) for name, v in res["tps"].items()}
    rows = [[name, f"{med[name]:,.0f}", f"{med[name] / med[IDIOM]:.2f}×"] for name in PATTERNS]
    ratio = med[ARRAY] / med[IDIOM]
    targets = [target("7", "ten keys in one advlock_try_all_with_timeout call ≥ 1.0× the "
                           "`unnest … ORDER BY` idiom's throughput",
                      f"{ratio:.2f}× ({med[ARRAY]:,.0f} vs {med[IDIOM]:,.0f} tps)", ratio >= 1.0,
                      value=ratio, better="higher")]
    md = "\n".join([
        f"Transactions taking ten uncontended transaction-scoped locks: `BEGIN; <pattern>; COMMIT;`, "
        f"pgbench, {res['clients']} clients, prepared protocol, {res['seconds']} s per run, "
        f"{res['rounds']} alternating rounds, median tps.",
        "",
        md_table(["pattern", "tps", "vs idiom"], rows, align="lrr"),
        "",
        "Only the array call gives all-or-nothing, one deadline for the whole set and a "
        "deadlock-free order; the idiom has none of the three.",
    ])
    return md, targets
