"""Case 5: diagnostics at scale, with many advisory locks held and as many relation locks held
elsewhere: `SELECT * FROM advlock_holders` vs the classic pg_locks ⋈ pg_stat_activity query that
decodes keys; and what monitoring runs every 15-60 s (issue #13): `advlock_leak_count()` vs the
classic filtered leak query, `advlock_metrics` vs the classic unfiltered count, both when nothing
is leaked and when every holder is, plus the backend's memory across repeated calls."""
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
NARROW_COLS = "key, mode, granted, pid, application_name"
MINIMAL = """SELECT (l.classid::bigint << 32) | l.objid::bigint AS key, l.mode, l.granted, l.pid, a.application_name
  FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
 WHERE l.locktype = 'advisory' AND l.objsubid = 1
   AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())"""
PG_LOCKS = "SELECT * FROM pg_locks"
# The view without its per-row computed columns (the planner prunes unreferenced view columns):
# the difference to the full view is what idle_for / is_idle_holder / blocked_by cost.
VIEW_PLAIN = ("SELECT key, key1, key2, mode, granted, pid, application_name, usename, client_addr, backend_state, "
              "state_change, xact_start, query_start, query, waiting_since, label FROM advlock_holders")
VIEW_NARROW = f"SELECT {NARROW_COLS} FROM advlock_holders"
ENTRIES = "SELECT * FROM advlock_lock_entries()"  # the view's feed, when the extension has it
QUERIES = {
    "advlock_holders, all columns": VIEW,
    "advlock_holders minus idle_for, is_idle_holder, blocked_by": VIEW_PLAIN,
    f"advlock_holders, narrow ({NARROW_COLS})": VIEW_NARROW,
    "advlock_lock_entries() alone": ENTRIES,
    "classic join, same columns as the view": CLASSIC,
    f"classic join, narrow ({NARROW_COLS})": MINIMAL,
    "pg_locks alone (every lock type)": PG_LOCKS,
}
NAMES = list(QUERIES)
V, VPLAIN, VNARROW, FEED, C, CNARROW, PGL = NAMES
# Monitoring (issue #13). The threshold decides the scenario: nobody has been idle for an hour
# (healthy: the common case), everybody idle counts at 0 (the four holder sessions all leak).
SCENARIOS = {"nothing leaked": "1h", "every holder leaked": "0"}
LEAK = "SELECT advlock_leak_count(interval '{thr}')"
CLASSIC_LEAK = ("SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a USING (pid) "
                "WHERE l.locktype = 'advisory' AND a.state = 'idle' AND a.state_change < now() - interval '{thr}'")
METRICS = "SELECT * FROM advlock_metrics"
CLASSIC_COUNT = ("SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a USING (pid) "
                 "WHERE l.locktype = 'advisory'")
# The floor: what any one-row statement costs here (parse, plan, COPY, commit), which bounds how
# far below the classic filtered query (itself little more than that) the leak count can go.
FLOOR = "SELECT 1"
MON = {"advlock_leak_count()": LEAK, "classic leak query (filtered)": CLASSIC_LEAK,
       "advlock_metrics": METRICS, "classic count (unfiltered)": CLASSIC_COUNT,
       "statement floor (SELECT 1)": FLOOR}
MEMORY_CALLS = 50
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
    (has_feed,) = admin.execute("SELECT to_regprocedure('advlock_lock_entries()') IS NOT NULL").fetchone()
    (viewdef,) = admin.execute("SELECT pg_get_viewdef('advlock_holders'::regclass, true)").fetchone()
    queries = {k: v for k, v in QUERIES.items() if k != FEED or has_feed}
    res = {"queries": list(queries), "viewdef": viewdef, "levels": levels, "cpu_ms": {}, "wall_ms": {}, "bytes": {}, "setup_s": {}, "plans": {}}
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
            for name, sql in queries.items():  # warm-up
                _copy_ms(measure, sql)
            cp = {name: [] for name in queries}
            ex = {name: [] for name in queries}
            names = list(queries)
            for r in range(reps[n]):
                for name in names[r % len(names):] + names[:r % len(names)]:
                    cpu_ms, wall_ms, nbytes = _copy_ms(measure, QUERIES[name])
                    cp[name].append(cpu_ms)
                    ex[name].append(wall_ms)
                    res["bytes"].setdefault(str(n), {})[name] = nbytes
            res["cpu_ms"][str(n)] = cp
            res["wall_ms"][str(n)] = ex
            res.setdefault("monitoring", {})[str(n)] = _monitoring(measure, reps[n])
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


def _monitoring(measure, reps: int) -> dict:
    """Backend CPU ms of the monitoring queries per scenario, rotated like the main loop, and the
    backend's memory (all its contexts) before and after MEMORY_CALLS more calls of each."""
    out = {}
    (has_metrics,) = measure.execute("SELECT to_regclass('advlock_metrics') IS NOT NULL").fetchone()
    if not has_metrics:
        return out
    for scenario, thr in SCENARIOS.items():
        measure.execute(f"SET advlock.idle_threshold = '{thr}'")
        (leaks,) = measure.execute(LEAK.format(thr=thr)).fetchone()
        check((leaks == 0) == (thr != "0"), f"{scenario}: advlock_leak_count() = {leaks}")
        names = list(MON)
        for name in names:  # warm-up
            _copy_ms(measure, MON[name].format(thr=thr))
        cpu = {name: [] for name in names}
        for r in range(reps):
            for name in names[r % len(names):] + names[:r % len(names)]:
                cpu[name].append(_copy_ms(measure, MON[name].format(thr=thr))[0])
        out[scenario] = {"cpu_ms": cpu, "leak_count": leaks}
    measure.execute("RESET advlock.idle_threshold")
    memory = "SELECT sum(total_bytes) FROM pg_backend_memory_contexts"
    (before,) = measure.execute(memory).fetchone()
    for _ in range(MEMORY_CALLS):
        measure.execute(METRICS).fetchall()
        measure.execute(LEAK.format(thr="0")).fetchone()
    (after,) = measure.execute(memory).fetchone()
    out["memory_bytes"] = [int(before), int(after)]
    return out


def monitoring_md(res: dict) -> tuple[str, list[dict]]:
    mon = res.get("monitoring", {})
    levels = [n for n in res["levels"] if mon.get(str(n))]
    if not levels:
        return "", []
    rows, targets, ok_leak, ok_metrics, worst_leak, worst_metrics = [], [], True, True, 0.0, 0.0
    for n in levels:
        for scenario in SCENARIOS:
            cpu = {q: median(v) for q, v in mon[str(n)][scenario]["cpu_ms"].items()}
            leak = cpu["advlock_leak_count()"] / cpu["classic leak query (filtered)"]
            leak_u = cpu["advlock_leak_count()"] / cpu["classic count (unfiltered)"]
            metrics = cpu["advlock_metrics"] / cpu["classic count (unfiltered)"]
            metrics_f = cpu["advlock_metrics"] / cpu["classic leak query (filtered)"]
            worst_leak, worst_metrics = max(worst_leak, leak), max(worst_metrics, metrics)
            ok_leak &= leak <= 0.2
            ok_metrics &= metrics <= 0.2
            floor = cpu["statement floor (SELECT 1)"]
            net = (cpu["advlock_leak_count()"] - floor) / max(cpu["classic leak query (filtered)"] - floor, 1e-9)
            rows.append([f"{n:,}", scenario] + [fmt_ms(cpu[q], 2) for q in MON]
                        + [fmt_ratio(leak), fmt_ratio(net), fmt_ratio(leak_u), fmt_ratio(metrics), fmt_ratio(metrics_f)])
    targets.append(target("5", "advlock_leak_count() ≤ 0.2× the classic filtered leak query, at every level, "
                               "nothing leaked and every holder leaked", f"worst {fmt_ratio(worst_leak)}", ok_leak))
    targets.append(target("5", "advlock_metrics ≤ 0.2× the classic unfiltered count, at every level, "
                               "nothing leaked and every holder leaked", f"worst {fmt_ratio(worst_metrics)}", ok_metrics))
    mem = [(n, mon[str(n)]["memory_bytes"]) for n in levels]
    growth = max(after - before for _, (before, after) in mem)
    targets.append(target("5", f"memory bounded: the backend's memory contexts do not grow over {MEMORY_CALLS} "
                               "calls each of advlock_metrics and advlock_leak_count", f"largest growth {growth:,} bytes",
                          growth <= 64 * 1024))
    table = md_table(["locks", "scenario"] + [f"{q} ms" for q in MON]
                     + ["leak ÷ filtered", "leak ÷ filtered, above the floor", "leak ÷ unfiltered",
                        "metrics ÷ unfiltered", "metrics ÷ filtered"], rows)
    md = f"""#### Monitoring queries (issue #13)

What an exporter runs every 15–60 s, on the same locks: backend CPU medians, rotated runs. Scenarios: *nothing
leaked* (threshold 1h: no backend has been idle that long) and *every holder leaked* (threshold 0: the four
holder sessions are idle). The classic queries:

```sql
{CLASSIC_LEAK.format(thr='1 minute')}
{CLASSIC_COUNT}
```

{table}

Targets: `advlock_leak_count()` against the filtered query (the same question), `advlock_metrics` against the
unfiltered count (both must read every advisory lock: the filtered query, when nobody qualifies, builds an empty
hash table from `pg_stat_activity` and never scans `pg_locks`, which no per-namespace gauge can do). The other two
ratios are shown for completeness. The statement floor (`SELECT 1` the same way) is what any
one-row statement costs here; "above the floor" compares what the two leak queries add to it.
Memory of the measuring backend (sum of `pg_backend_memory_contexts`) before and
after {MEMORY_CALLS} calls of each: {", ".join(f"{n:,} locks: {b:,} → {a:,} bytes" for n, (b, a) in mem)}.
"""
    return md, targets


def _slope(levels, ts) -> list[float]:
    return [math.log(ts[i + 1] / ts[i]) / math.log(levels[i + 1] / levels[i]) for i in range(len(levels) - 1)]


def render(res: dict, ctx: Ctx) -> tuple[str, list[dict]]:
    levels = res["levels"]
    names = res["queries"]
    at = 10_000 if 10_000 in levels else levels[-1]
    cpu = {n: {q: median(v) for q, v in res["cpu_ms"][str(n)].items()} for n in levels}
    wall = {n: {q: median(v) for q, v in res["wall_ms"][str(n)].items()} for n in levels}
    rows = []
    for q in names:
        rows.append([q] + [f"{fmt_ms(cpu[n][q], 1)} ({fmt_ms(wall[n][q], 1)})" for n in levels]
                    + [fmt_ratio(cpu[at][q] / cpu[at][C]), f"{res['bytes'][str(at)][q] / 1e6:.2f}"])
    table = md_table(["query (COPY … TO STDOUT)"] + [f"{n:,} locks: CPU ms (wall ms)" for n in levels]
                     + [f"÷ classic at {at:,} (CPU)", f"MB shipped at {at:,}"], rows)

    ratio = cpu[at][V] / cpu[at][C]
    ratio_w = wall[at][V] / wall[at][C]
    targets = [target("5", "advlock_holders ≤ 0.5× the classic join's time at 10k advisory locks",
                      f"{fmt_ratio(ratio)} (backend CPU; fastest runs "
                      f"{fmt_ratio(min(res['cpu_ms'][str(at)][V]) / min(res['cpu_ms'][str(at)][C]))}), "
                      f"{fmt_ratio(ratio_w)} (wall)"
                      + ("" if at == 10_000 else f" at {at:,} locks"), ratio <= 0.5)]
    slope_txt = "n/a (one level)"
    if len(levels) > 1:
        sv = _slope(levels, [cpu[n][V] for n in levels])
        sc = _slope(levels, [cpu[n][C] for n in levels])
        slope_txt = ", ".join(f"{levels[i]:,}→{levels[i + 1]:,}: {s:.2f}" for i, s in enumerate(sv))
        targets.append(target("5", "advlock_holders grows near-linearly with the number of locks "
                                   "(log-log slope ≤ 1.2 between levels)",
                              f"slopes {slope_txt} (classic: {', '.join(f'{s:.2f}' for s in sc)})",
                              all(s <= 1.2 for s in sv)))
        shown = [q for q in (V, VNARROW, C, CNARROW, PGL) if q in names]
        svg.lines(f"{ctx.out}/holders_scaling.svg", "Diagnostics at scale: backend CPU to produce all rows (COPY)",
                  [(q, levels, [cpu[n][q] for n in levels]) for q in shown],
                  "advisory locks held (+ as many relation locks), log scale", "backend CPU ms, log scale",
                  dashed=[VNARROW, CNARROW, PGL])
    md = [f"""{HOLDER_SESSIONS} sessions hold *N* session-level advisory locks between them (keys `advlock_key('bench-holders', g)`);
one more session sits idle in a transaction holding `ACCESS SHARE` on *N* tables (`bench_rel_*`, created for the
purpose: what a long `pg_dump` or a many-partition query holds). The server is sized for it
(`max_locks_per_transaction = 4096`, 100 connections). Each query runs as `COPY (query) TO STDOUT` (execution,
text output and transfer, without client-side row parsing), all queries of a level alternating in rotated order,
medians of {', '.join(str(len(res['cpu_ms'][str(n)][V])) for n in levels)} runs per level. **CPU** = the executing
backend's CPU time for the statement (its CPU-time clock before/after: robust to other load on the machine; the
target uses it); wall = client wall time. Besides the two compared queries, variants show where the cost sits:
the view without its computed columns, the view with five columns, the view's feed `advlock_lock_entries()`
(when the extension has it), the classic join with the same five columns, and `pg_locks` alone.

The classic query (same columns as the view, so both ship comparable rows):

```sql
{CLASSIC}
```

{table}
"""]
    if len(levels) > 1:
        md.append("![holders scaling](holders_scaling.svg)\n")
    md.append(f"Growth of the view's backend CPU time (log-log slope; 1.0 = linear): {slope_txt}.\n")
    md.append(analysis(res, at, cpu[at]))
    md.append(profile_md(res))
    mon_md, mon_targets = monitoring_md(res)
    md.append(mon_md)
    return "\n".join(md), targets + mon_targets


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
            out.append(perf_md(perf[name], f"the COPY of “{name}”"))
    return "\n".join(out)


def analysis(res: dict, at: int, cpu: dict) -> str:
    view, classic = cpu[V], cpu[C]
    budget = 0.5 * classic
    on_pg_locks = "pg_locks" in res["viewdef"]
    out = [f"**Where the view's time goes at {at:,} locks** (backend CPU medians; the 0.5× budget is "
           f"{budget:.1f} ms, the view takes {view:.1f} ms).", ""]
    if on_pg_locks:
        feed = ("`pg_locks`: every lock of every type is materialised by `pg_lock_status()`, then filtered; "
                f"`pg_locks` alone costs {cpu[PGL]:.1f} ms.")
    elif FEED in cpu:
        feed = ("`advlock_lock_entries()`, which keeps only this database's advisory locks before building tuples: "
                f"{cpu[FEED]:.1f} ms alone, against {cpu[PGL]:.1f} ms for `pg_locks` alone.")
    else:
        feed = f"its own source (`pg_locks` alone: {cpu[PGL]:.1f} ms)."
    out.append("- Feed: the view reads " + feed)
    out.append(f"- Five columns ({NARROW_COLS}): view {cpu[VNARROW]:.1f} ms vs classic {cpu[CNARROW]:.1f} ms "
               f"(**{cpu[VNARROW] / cpu[CNARROW]:.2f}×**).")
    out.append(f"- All columns: the backend columns per lock row (application_name … query, four timestamps, inet, "
               f"query text) add {view - cpu[VNARROW]:.1f} ms to the view ({(view - cpu[VNARROW]) / view * 100:.0f}% "
               f"of it) and {classic - cpu[CNARROW]:.1f} ms to the classic join; of the view's, the computed "
               f"`idle_for`, `is_idle_holder`, `blocked_by` are {view - cpu[VPLAIN]:.1f} ms.")
    if view - cpu[VNARROW] >= budget:
        out.append(f"- The per-row backend columns alone ({view - cpu[VNARROW]:.1f} ms) exceed the whole 0.5× budget: "
                   "as long as `SELECT *` ships every backend column on every lock row, the view cannot reach "
                   "0.5× of a classic join that ships the same columns, however cheap its feed.")
    out.append("")
    if on_pg_locks:
        out.append("**Suggestion.** Replace the view's source with a Rust set-returning function that calls "
                   "`GetLockStatusData()` once and keeps only `LOCKTAG_ADVISORY` entries of `MyDatabaseId` before "
                   "building tuples; materialise the backends once instead of joining `pg_stat_activity` per lock row; "
                   "evaluate the threshold once per query.")
    else:
        out.append("**Suggestion.** The feed is already cheap; the remaining cost is producing and printing the "
                   "backend columns for every lock row. Options: a per-backend summary (one row per holder pid with "
                   "`keys bigint[]`), which prints the backend columns once per backend instead of once per lock; or "
                   "keep `advlock_holders` narrow by default and put query/timestamps in a companion view; or accept "
                   "the ratio and restate the target against the narrow query (the five-column comparison above).")
    return "\n".join(out) + "\n"
