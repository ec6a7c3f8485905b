"""Case 5: `SELECT * FROM advlock_holders` with many advisory locks held, and as many relation
locks held elsewhere, vs the classic pg_locks ⋈ pg_stat_activity query that decodes keys."""
from __future__ import annotations

import math
import time

from . import svg
from .common import Ctx, backend_cpu_ns, check, fmt_ms, fmt_ratio, log, md_table, median, perf_md, perf_profile, target

VIEW = "SELECT * FROM advlock_holders"
# What people write without the extension (PostgreSQL wiki "Lock Monitoring" / GoodJob style),
# with the same pg_stat_activity columns the view returns, so both ship comparable rows.
CLASSIC = """SELECT (l.classid::bigint << 32) | l.objid::bigint AS key, l.mode, l.granted, l.pid,
       a.application_name, a.usename, a.client_addr, a.state, a.state_change, a.xact_start,
       a.query_start, a.query, l.waitstart
  FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
 WHERE l.locktype = 'advisory' AND l.objsubid = 1
   AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())"""
MINIMAL = """SELECT (l.classid::bigint << 32) | l.objid::bigint AS key, l.pid, l.granted, a.application_name
  FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
 WHERE l.locktype = 'advisory' AND l.objsubid = 1
   AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())"""
PG_LOCKS = "SELECT * FROM pg_locks"
# The view without its per-row computed columns (the planner prunes unreferenced view columns):
# the difference to the full view is what idle_for / is_idle_holder / blocked_by cost.
VIEW_PLAIN = ("SELECT key, key1, key2, mode, granted, pid, application_name, usename, client_addr, backend_state, "
              "state_change, xact_start, query_start, query, waiting_since, label FROM advlock_holders")
QUERIES = {
    "advlock_holders view": VIEW,
    "view minus idle_for, is_idle_holder, blocked_by": VIEW_PLAIN,
    "classic join (same columns)": CLASSIC,
    "classic join (key, pid, granted, app only)": MINIMAL,
    "pg_locks alone (all lock types)": PG_LOCKS,
}
V, C = "advlock_holders view", "classic join (same columns)"
HOLDER_SESSIONS = 4
BATCH = 5000


def _copy_ms(conn, sql: str) -> tuple[float, float, int]:
    """(backend CPU ms, client wall ms, bytes) of COPY (sql) TO STDOUT."""
    pid = conn.info.backend_pid
    c0 = backend_cpu_ns(pid)[0]
    t = time.perf_counter()
    n = 0
    with conn.cursor() as cur:
        with cur.copy(f"COPY ({sql}) TO STDOUT") as cp:
            for block in cp:
                n += len(block)
    wall = (time.perf_counter() - t) * 1000
    return (backend_cpu_ns(pid)[0] - c0) / 1e6, wall, n


def run(ctx: Ctx) -> dict:
    levels = ctx.size([1_000, 10_000, 100_000], [1_000])
    reps = ctx.size({1_000: 9, 10_000: 7, 100_000: 5}, {1_000: 3})
    admin = ctx.connect(app="bench-admin")
    measure = ctx.connect(app="bench-measure")
    rel = ctx.connect(autocommit=False, app="bench-relation-locks")  # stays idle in transaction
    holders = [ctx.connect(app=f"bench-holder-{i}") for i in range(HOLDER_SESSIONS)]
    res = {"levels": levels, "cpu_ms": {}, "wall_ms": {}, "bytes": {}, "setup_s": {}, "plans": {}}
    made = 0
    try:
        for n in levels:
            t = time.perf_counter()
            while made < n:  # relation locks: N small tables, ACCESS SHARE held by one open transaction
                hi = min(made + BATCH, n)
                admin.execute(f"DO $$ BEGIN FOR i IN {made + 1}..{hi} LOOP "
                              "EXECUTE format('CREATE TABLE bench_rel_%s ()', i); END LOOP; END $$")
                rel.execute(f"DO $$ BEGIN FOR i IN {made + 1}..{hi} LOOP "
                            "EXECUTE format('LOCK TABLE bench_rel_%s IN ACCESS SHARE MODE', i); END LOOP; END $$")
                made = hi
            prev = 0 if n == levels[0] else levels[levels.index(n) - 1]
            per = (n - prev) // HOLDER_SESSIONS
            for j, h in enumerate(holders):  # advisory locks: session locks spread over 4 sessions
                lo = prev + j * per + 1
                hi = prev + (j + 1) * per if j < HOLDER_SESSIONS - 1 else n
                h.execute("SELECT count(pg_advisory_lock(advlock_key('bench-holders', g))) "
                          "FROM generate_series(%s::bigint, %s::bigint) g", (lo, hi))
            res["setup_s"][str(n)] = time.perf_counter() - t
            counts = dict(admin.execute("SELECT locktype, count(*) FROM pg_locks GROUP BY 1").fetchall())
            check(counts.get("advisory") == n, f"expected {n} advisory locks, pg_locks has {counts}")
            check(counts.get("relation", 0) >= n, f"expected ≥ {n} relation locks, pg_locks has {counts}")
            (rows,) = measure.execute(f"SELECT count(*) FROM ({VIEW}) s").fetchone()
            check(rows == n, f"advlock_holders returned {rows} rows, expected {n}")
            (rows,) = measure.execute(f"SELECT count(*) FROM ({CLASSIC}) s").fetchone()
            check(rows == n, f"classic query returned {rows} rows, expected {n}")
            res["locks"] = counts
            for name, sql in QUERIES.items():  # warm-up
                _copy_ms(measure, sql)
            cp = {name: [] for name in QUERIES}
            ex = {name: [] for name in QUERIES}
            names = list(QUERIES)
            for r in range(reps[n]):
                for name in names[r % len(names):] + names[:r % len(names)]:
                    cpu_ms, wall_ms, nbytes = _copy_ms(measure, QUERIES[name])
                    cp[name].append(cpu_ms)
                    ex[name].append(wall_ms)
                    res["bytes"].setdefault(str(n), {})[name] = nbytes
            res["cpu_ms"][str(n)] = cp
            res["wall_ms"][str(n)] = ex
            log(f"case 5: {n} locks: backend CPU view {median(cp[V]):.1f} ms, classic {median(cp[C]):.1f} ms "
                f"(setup {res['setup_s'][str(n)]:.1f} s)")
            if n == 10_000 or (n == levels[-1] and 10_000 not in levels):
                for name in (V, C):
                    res["plans"][name] = "\n".join(
                        r[0] for r in measure.execute("EXPLAIN (ANALYZE, COSTS OFF) " + QUERIES[name]))
                res["profile_level"] = n
                if not ctx.quick:
                    res["perf"] = {name: perf_profile(ctx, measure.info.backend_pid, lambda q=QUERIES[name]: _copy_ms(measure, q), 4.0, "holders") for name in (V, C)}
    finally:
        for c in holders + [rel, measure, admin]:
            c.close()
    return res


def _slope(levels, ts) -> list[float]:
    return [math.log(ts[i + 1] / ts[i]) / math.log(levels[i + 1] / levels[i]) for i in range(len(levels) - 1)]


def render(res: dict, ctx: Ctx) -> tuple[str, list[dict]]:
    levels = res["levels"]
    names = list(QUERIES)
    rows = []
    for n in levels:
        cp, ex = res["cpu_ms"][str(n)], res["wall_ms"][str(n)]
        rows.append([f"{n:,}"] + [f"{fmt_ms(median(cp[q]), 2)} / {fmt_ms(median(ex[q]), 2)}" for q in names]
                    + [fmt_ratio(median(cp[V]) / median(cp[C])), fmt_ratio(median(ex[V]) / median(ex[C]))])
    table = md_table(["advisory locks (+ as many relation locks)"] + [f"{q}: CPU / wall ms" for q in names]
                     + ["view ÷ classic (CPU)", "view ÷ classic (wall)"], rows)
    brows = [[f"{n:,}"] + [f"{res['bytes'][str(n)][q] / 1e6:.2f}" for q in names] for n in levels]
    btable = md_table(["locks"] + [f"{q} MB" for q in names], brows)

    at = 10_000 if 10_000 in levels else levels[-1]
    ratio = median(res["cpu_ms"][str(at)][V]) / median(res["cpu_ms"][str(at)][C])
    ratio_w = median(res["wall_ms"][str(at)][V]) / median(res["wall_ms"][str(at)][C])
    targets = [target("5", "advlock_holders ≤ 0.5× the classic join's time at 10k advisory locks",
                      f"{fmt_ratio(ratio)} (backend CPU), {fmt_ratio(ratio_w)} (wall)"
                      + ("" if at == 10_000 else f" at {at:,} locks"), ratio <= 0.5)]
    slope_txt = "n/a (one level)"
    if len(levels) > 1:
        sv = _slope(levels, [median(res["cpu_ms"][str(n)][V]) for n in levels])
        sc = _slope(levels, [median(res["cpu_ms"][str(n)][C]) for n in levels])
        slope_txt = ", ".join(f"{levels[i]:,}→{levels[i + 1]:,}: {s:.2f}" for i, s in enumerate(sv))
        targets.append(target("5", "advlock_holders grows near-linearly with the number of locks "
                                   "(log-log slope ≤ 1.2 between levels)",
                              f"slopes {slope_txt} (classic: {', '.join(f'{s:.2f}' for s in sc)})",
                              all(s <= 1.2 for s in sv)))
        svg.lines(f"{ctx.out}/holders_scaling.svg", "Diagnostics at scale: backend CPU to produce all rows (COPY)",
                  [(q, levels, [median(res["cpu_ms"][str(n)][q]) for n in levels]) for q in names],
                  "advisory locks held (+ as many relation locks), log scale", "backend CPU ms, log scale",
                  dashed=[names[1], names[4]])
    md = [f"""{HOLDER_SESSIONS} sessions hold *N* session-level advisory locks between them (keys `advlock_key('bench-holders', g)`);
one more session sits idle in a transaction holding `ACCESS SHARE` on *N* tables (`bench_rel_*`, created for the
purpose: what a long `pg_dump` or a many-partition query holds). The server is sized for it
(`max_locks_per_transaction = 4096`, 100 connections). Each query runs as `COPY (query) TO STDOUT` (execution,
text output and transfer, without client-side row parsing), the queries alternating in rotated order, medians of
{', '.join(str(len(res['cpu_ms'][str(n)][V])) for n in levels)} runs per level. **CPU** = the executing backend's CPU time
for the statement (its CPU-time clock before/after: robust to other load on the machine; the target uses it);
**wall** = client wall time.

The classic query:

```sql
{CLASSIC}
```

{table}

Bytes shipped per run (COPY text):

{btable}
"""]
    if len(levels) > 1:
        md.append("![holders scaling](holders_scaling.svg)\n")
    md.append(f"Growth of the view's backend CPU time (log-log slope; 1.0 = linear): {slope_txt}.\n")
    md.append(analysis(res, at))
    md.append(profile_md(res))
    return "\n".join(md), targets


def profile_md(res: dict) -> str:
    lvl = res.get("profile_level")
    if not lvl:
        return ""
    out = [f"#### Where the time goes ({lvl:,} advisory + {lvl:,} relation locks)\n",
           "`EXPLAIN (ANALYZE, COSTS OFF)` of the view:\n", "```", res["plans"][V], "```\n",
           "and of the classic join:\n", "```", res["plans"][C], "```\n"]
    perf = res.get("perf")
    if perf:
        for name in (V, C):
            out.append(perf_md(perf[name], f"`COPY ({name})`"))
    return "\n".join(out)


def analysis(res: dict, at: int) -> str:
    cpu = {q: median(v) for q, v in res["cpu_ms"][str(at)].items()}
    names = list(QUERIES)
    view, plain, classic, pgl = cpu[names[0]], cpu[names[1]], cpu[names[2]], cpu[names[4]]
    floor = pgl / classic
    return f"""**Where the view's time goes at {at:,} locks** (backend CPU medians): `SELECT * FROM pg_locks` alone —
materialising every lock of every type through `pg_lock_status()` and printing it — costs {pgl:.1f} ms,
**{floor:.2f}×** the classic join ({classic:.1f} ms). The view without its per-row computed columns costs {plain:.1f} ms
({plain / classic:.2f}× classic: same join, `LEFT JOIN`, more CASE columns); `idle_for`, `is_idle_holder` and
`blocked_by` add {view - plain:.1f} ms ({(view - plain) / view * 100:.0f}% of the view: `advlock_idle_threshold()` and
`clock_timestamp()` are evaluated per row). Anything built on `pg_locks` starts from `pg_lock_status()`, which builds a
row for every lock in the server, advisory or not, with text conversions, then filters; at 0.5× of the classic join
the budget ({0.5 * classic:.1f} ms) is {"below" if 0.5 * classic < pgl else "close to"} what `pg_locks` alone costs.

**Suggestion.** Replace the view's source with a Rust set-returning function that calls `GetLockStatusData()` once,
keeps only `LOCKTAG_ADVISORY` entries of `MyDatabaseId`, decodes the key in Rust and emits only those rows; fetch the
backend columns once per distinct pid (`pgstat_get_local_beentry_by_proc_number()` / `pg_stat_get_activity(pid)`)
instead of joining the whole `pg_stat_activity` view (whose `pg_authid` lookup runs per lock row in these plans);
and evaluate the threshold and `clock_timestamp()` once per query (an InitPlan such as
`(SELECT advlock_idle_threshold())`) rather than per row. The shipped `query` text per lock row is a large part of the
output ({res['bytes'][str(at)][names[0]] / 1e6:.1f} MB at {at:,} locks); a per-backend summary view (keys as an array)
would cut the output by the number of locks per backend.
"""
