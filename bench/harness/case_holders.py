"""Case 5: diagnostics at scale (issue #25), with many advisory locks held, a few sessions waiting
behind them (so blocked_by is computed) and as many relation locks held elsewhere, on the bench
instance (advlock not preloaded) and on a second instance with shared_preload_libraries =
'advlock' (labels recorded). Measured side by side in one rotated loop per level: the
advlock_holders view (SELECT *, count(*), a key filter, NOT granted, narrow), advlock_idle_holders()
with nothing idle long enough and with every holder idle, advlock_lock_table, each against the
pg_locks ⋈ pg_stat_activity (or pg_locks) query a DBA writes for the same question; and an output
floor, the view's own rows printed from a temp table, which bounds how far below a same-columns
join SELECT * can go. Then what monitoring runs every 15-60 s (issue #13): advlock_leak_count() vs
the classic filtered leak query, advlock_metrics vs the classic unfiltered count, plus the
backend's memory across repeated calls."""
from __future__ import annotations

import dataclasses
import hashlib
import math
import os
import subprocess
import time

import psycopg

from . import svg
from .common import (Ctx, Worker, backend_cpu_ns, check, fmt_ms, fmt_ratio, is_waiting, log, md_table, median,
                     perf_md, perf_profile, target, wait_until)

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NS = "bench-holders"
KEY_ID = 77
KEY_EXPR = f"advlock_key('{NS}', {KEY_ID})"
# Sessions queued behind held keys: two on key 77 (so the key filter returns a holder and its
# waiters), one on key 500 (another holder's).
WAITER_IDS = (KEY_ID, KEY_ID, 500)
HOLDER_SESSIONS = 4
BATCH = 5000
PRE, NOT = "preloaded", "not preloaded"
AT = 20_000  # the level of the plans and profiles

# What people write without the extension (PostgreSQL wiki "Lock Monitoring" / GoodJob style).
DECODED = "(l.classid::bigint << 32) | l.objid::bigint"
CLASSIC_FROM = """  FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
 WHERE l.locktype = 'advisory' AND l.objsubid = 1
   AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())"""
# The same pg_stat_activity columns the view returns, so both ship comparable rows.
CLASSIC = f"""SELECT {DECODED} AS key, l.mode, l.granted, l.pid,
       a.application_name, a.usename, a.client_addr, a.state, a.state_change, a.xact_start,
       a.query_start, a.query, l.waitstart
{CLASSIC_FROM}"""
NARROW_COLS = "key, mode, granted, pid, application_name"
CLASSIC_NARROW = f"SELECT {DECODED} AS key, l.mode, l.granted, l.pid, a.application_name\n{CLASSIC_FROM}"
# The minimal decoded join users copy from blogs (issue #25).
MINIMAL = f"SELECT l.pid, a.application_name, a.state, l.mode, l.granted, {DECODED} AS key, a.query\n{CLASSIC_FROM}"
CLASSIC_COUNT_Q = f"SELECT count(*)\n{CLASSIC_FROM}"
CLASSIC_KEY = f"{CLASSIC}\n   AND {DECODED} = {KEY_EXPR}"
CLASSIC_WAIT = f"{CLASSIC}\n   AND NOT l.granted"
# The classic leak join: granted, idle (outside any transaction) for at least the threshold;
# without and with the function's order (idle_for DESC = state_change ASC, pid, key).
CLASSIC_IDLE = (CLASSIC + "\n   AND l.granted AND a.state = 'idle'"
                "\n   AND clock_timestamp() - a.state_change >= interval '{thr}'")
CLASSIC_IDLE_SORTED = CLASSIC_IDLE + "\n ORDER BY a.state_change, l.pid, key"
# The headroom query a DBA writes: entries of the shared lock table are what is not fast-path;
# capacity max_locks_per_transaction × (MaxBackends + max_prepared_transactions).
CLASSIC_HEADROOM = """SELECT d.datname, count(*) AS lock_entries,
       count(*) FILTER (WHERE l.locktype = 'advisory') AS advisory_entries,
       current_setting('max_locks_per_transaction')::bigint
       * (current_setting('max_connections')::int + current_setting('autovacuum_max_workers')::int + 1
          + current_setting('max_worker_processes')::int + current_setting('max_wal_senders')::int
          + current_setting('max_prepared_transactions')::int) AS capacity
  FROM pg_locks l LEFT JOIN pg_database d ON d.oid = l.database
 WHERE NOT l.fastpath
 GROUP BY d.datname"""
FLOOR_TABLE = "bench_holders_floor"
SCENARIOS_IDLE = {"nothing idle for 1 hour": "1 hour", "every holder idle": "0"}

V = "advlock_holders: SELECT *"
VCOUNT = "advlock_holders: count(*)"
VKEY = f"advlock_holders WHERE key = advlock_key('{NS}', {KEY_ID})"
VWAIT = "advlock_holders WHERE NOT granted"
IDLE1, IDLE0 = "advlock_idle_holders('1 hour')", "advlock_idle_holders('0')"
VPLAIN = "advlock_holders minus idle_for, is_idle_holder, blocked_by"
VNARROW = f"advlock_holders, narrow ({NARROW_COLS})"
VMIN = "advlock_holders, the minimal join's columns"
FEED = "advlock_holder_entries() alone (the view's feed)"
FEED_OLD = "advlock_lock_entries() alone (the former feed)"
LT = "advlock_lock_table"
FLOOR = "output floor: the view's rows from a temp table"
C = "classic join, same columns as the view"
CNARROW = f"classic join, narrow ({NARROW_COLS})"
CMIN = "minimal decoded join (pid, application_name, state, mode, granted, key, query)"
CCOUNT = "classic join: count(*)"
CKEY = "classic join WHERE decoded key = advlock_key(…)"
CWAIT = "classic join WHERE NOT granted"
CIDLE1, CIDLE0 = "classic idle join, 1 hour", "classic idle join, 0"
CIDLE1S, CIDLE0S = "classic idle join, 1 hour, same ORDER BY", "classic idle join, 0, same ORDER BY"
CLT = "classic headroom (pg_locks WHERE NOT fastpath, by database)"
PGL = "pg_locks alone (every lock type)"
QUERIES = {
    V: "SELECT * FROM advlock_holders",
    VCOUNT: "SELECT count(*) FROM advlock_holders",
    VKEY: f"SELECT * FROM advlock_holders WHERE key = {KEY_EXPR}",
    VWAIT: "SELECT * FROM advlock_holders WHERE NOT granted",
    IDLE1: "SELECT * FROM advlock_idle_holders('1 hour')",
    IDLE0: "SELECT * FROM advlock_idle_holders('0')",
    VPLAIN: ("SELECT key, key1, key2, mode, granted, pid, application_name, usename, client_addr, backend_state, "
             "state_change, xact_start, query_start, query, waiting_since, label FROM advlock_holders"),
    VNARROW: f"SELECT {NARROW_COLS} FROM advlock_holders",
    VMIN: "SELECT pid, application_name, backend_state, mode, granted, key, query FROM advlock_holders",
    FEED: "SELECT * FROM advlock_holder_entries()",
    FEED_OLD: "SELECT * FROM advlock_lock_entries()",
    LT: "SELECT * FROM advlock_lock_table",
    FLOOR: f"SELECT * FROM {FLOOR_TABLE}",
    C: CLASSIC,
    CNARROW: CLASSIC_NARROW,
    CMIN: MINIMAL,
    CCOUNT: CLASSIC_COUNT_Q,
    CKEY: CLASSIC_KEY,
    CWAIT: CLASSIC_WAIT,
    CIDLE1: CLASSIC_IDLE.format(thr="1 hour"),
    CIDLE0: CLASSIC_IDLE.format(thr="0"),
    CIDLE1S: CLASSIC_IDLE_SORTED.format(thr="1 hour"),
    CIDLE0S: CLASSIC_IDLE_SORTED.format(thr="0"),
    CLT: CLASSIC_HEADROOM,
    PGL: "SELECT * FROM pg_locks",
}
# (advlock query, its classic equivalent, target ratio or None): the comparisons of the report.
PAIRS = [
    (V, C, 0.5), (V, CMIN, 1.0), (VCOUNT, CCOUNT, 0.5), (VKEY, CKEY, 0.5), (VWAIT, CWAIT, 0.5),
    (IDLE1, CIDLE1S, 0.5), (IDLE1, CIDLE1, None), (IDLE0, CIDLE0S, 0.5), (IDLE0, CIDLE0, None),
    (LT, CLT, 0.2), (VNARROW, CNARROW, None), (VMIN, CMIN, None), (FLOOR, C, None), (FLOOR, V, None),
]
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
STMT_FLOOR = "SELECT 1"
MON = {"advlock_leak_count()": LEAK, "classic leak query (filtered)": CLASSIC_LEAK,
       "advlock_metrics": METRICS, "classic count (unfiltered)": CLASSIC_COUNT,
       "statement floor (SELECT 1)": STMT_FLOOR}
MEMORY_CALLS = 50
# The bench instance's settings (bench/run.sh), repeated for the preloaded instance.
INSTANCE_CONF = ["max_connections = 100", "max_locks_per_transaction = 4096", "shared_buffers = 256MB",
                 "jit = off", "max_parallel_workers_per_gather = 0", "autovacuum = off",
                 "synchronous_commit = off", "log_min_messages = warning", "log_lock_waits = off"]
# Labels for every lock at 100k (the default 4096 would drop most of them). Every scan of the
# label table visits all its slots, so this also sets a fixed per-query cost.
PRELOAD_CONF = ["shared_preload_libraries = 'advlock'", "advlock.max_labels = 131072"]


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


def _sha(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def _instance_start(ctx: Ctx, port: int) -> str:
    work = os.path.join(ctx.work, "case5-preloaded")
    lines = " ".join("'" + line.replace("'", "'\\''") + "'" for line in INSTANCE_CONF + PRELOAD_CONF)
    script = f". '{REPO}/pg_test/instance.sh'; PGBIN='{ctx.pgbin}'; instance_start '{work}' {port} {lines}"
    subprocess.run(["bash", "-c", script], check=True, capture_output=True, text=True)
    return work


def _instance_stop(work: str, pgbin: str) -> None:
    subprocess.run(["bash", "-c", f". '{REPO}/pg_test/instance.sh'; PGBIN='{pgbin}'; instance_stop '{work}'"],
                   capture_output=True)


def run(ctx: Ctx) -> dict:
    """Both modes: the bench instance (not preloaded, the pinned library copy), then a second
    instance with advlock preloaded ($libdir/advlock.so: hooks and functions from one library)."""
    res = {"modes": {}, "order": [NOT, PRE]}
    res["modes"][NOT] = _run_mode(ctx, NOT, profile=False)
    port = ctx.port + 13
    work = None
    try:
        work = _instance_start(ctx, port)
        pctx = dataclasses.replace(ctx, port=port, dbname="postgres")
        with pctx.connect() as c:
            c.execute("CREATE DATABASE bench")
        pctx = dataclasses.replace(pctx, dbname="bench")
        with pctx.connect() as c:
            c.execute("CREATE EXTENSION advlock")
            (libdir,) = c.execute("SELECT setting FROM pg_config WHERE name = 'PKGLIBDIR'").fetchone()
        lib = os.path.join(libdir, "advlock.so")
        res["preloaded_lib"] = {"path": lib, "sha256": _sha(lib), "same_as_pinned": _sha(lib) == _sha(ctx.lib)}
        res["modes"][PRE] = _run_mode(pctx, PRE, profile=True)
    finally:
        if work:
            _instance_stop(work, ctx.pgbin)
    return res


def _run_mode(ctx: Ctx, mode: str, profile: bool) -> dict:
    levels = ctx.size([1_000, 20_000, 100_000], [1_000])
    reps = ctx.size({1_000: 7, 20_000: 5, 100_000: 5}, {1_000: 3})
    admin = ctx.connect(app="bench-admin")
    measure = ctx.connect(app="bench-measure")
    measure.execute("SET temp_buffers = '512MB'")  # the floor's temp table stays in memory
    rel = ctx.connect(autocommit=False, app="bench-relation-locks")  # stays idle in transaction
    holders = [ctx.connect(app=f"bench-holder-{i}") for i in range(HOLDER_SESSIONS)]
    waiters: list[tuple[Worker, object]] = []
    (has_old_feed,) = admin.execute("SELECT to_regprocedure('advlock_lock_entries()') IS NOT NULL").fetchone()
    (viewdef,) = admin.execute("SELECT pg_get_viewdef('advlock_holders'::regclass, true)").fetchone()
    (preloaded,) = admin.execute("SELECT current_setting('shared_preload_libraries') ~ 'advlock'").fetchone()
    check(preloaded == (mode == PRE), f"{mode}: shared_preload_libraries = "
          + admin.execute("SHOW shared_preload_libraries").fetchone()[0])
    queries = {k: v for k, v in QUERIES.items() if k != FEED_OLD or has_old_feed}
    res = {"queries": list(queries), "viewdef": viewdef, "levels": levels, "waiters": len(WAITER_IDS),
           "cpu_ms": {}, "wall_ms": {}, "bytes": {}, "rows": {}, "setup_s": {}, "plans": {}, "labels": {},
           "lock_table": {}, "classic_headroom": {}}
    made = 0
    try:
        for n in levels:
            t = time.perf_counter()
            while made < n:  # relation locks: N small tables, ACCESS SHARE held by one open transaction
                hi = min(made + BATCH, n)
                admin.execute(f"DO $$ BEGIN FOR i IN {made + 1}..{hi} LOOP "
                              "EXECUTE format('CREATE TABLE IF NOT EXISTS bench_rel_%s ()', i); END LOOP; END $$")
                rel.execute(f"DO $$ BEGIN FOR i IN {made + 1}..{hi} LOOP "
                            "EXECUTE format('LOCK TABLE bench_rel_%s IN ACCESS SHARE MODE', i); END LOOP; END $$")
                made = hi
            prev = 0 if n == levels[0] else levels[levels.index(n) - 1]
            per = (n - prev) // HOLDER_SESSIONS
            for j, h in enumerate(holders):  # advisory session locks through advlock (labelled when preloaded)
                lo = prev + j * per + 1
                hi = prev + (j + 1) * per if j < HOLDER_SESSIONS - 1 else n
                (got,) = h.execute("SELECT count(*) FILTER (WHERE advlock_try_with_timeout(%s, g, 0, scope => 'session')) "
                                   "FROM generate_series(%s::bigint, %s::bigint) g", (NS, lo, hi)).fetchone()
                check(got == hi - lo + 1, f"holder {j} got {got} of {hi - lo + 1} locks")
            if not waiters:  # queued behind held keys for the whole case
                for i, kid in enumerate(WAITER_IDS):
                    w = Worker(ctx, f"bench-waiter-{i}")
                    fut = w.submit(lambda c, k=kid: c.execute(f"SELECT pg_advisory_lock(advlock_key('{NS}', {k}))"))
                    waiters.append((w, fut))
                    (key,) = admin.execute(f"SELECT advlock_key('{NS}', {kid})").fetchone()
                    wait_until(lambda: is_waiting(admin, w.pid, key), 10, f"waiter {i} queued on key {kid}")
            res["setup_s"][str(n)] = time.perf_counter() - t
            nw = len(WAITER_IDS)
            counts = dict(admin.execute("SELECT locktype, count(*) FROM pg_locks GROUP BY 1").fetchall())
            check(counts.get("advisory") == n + nw, f"expected {n} + {nw} advisory locks, pg_locks has {counts}")
            check(counts.get("relation", 0) >= n, f"expected ≥ {n} relation locks, pg_locks has {counts}")
            res["locks"] = counts
            measure.execute(f"DROP TABLE IF EXISTS {FLOOR_TABLE}")
            measure.execute(f"CREATE TEMP TABLE {FLOOR_TABLE} AS SELECT * FROM advlock_holders")
            rows = {name: measure.execute(f"SELECT count(*) FROM ({sql}) s").fetchone()[0] for name, sql in queries.items()}
            res["rows"][str(n)] = rows
            on_key = 1 + WAITER_IDS.count(KEY_ID)
            for name, want in {V: n + nw, C: n + nw, CMIN: n + nw, FLOOR: n + nw, VKEY: on_key, CKEY: on_key,
                               VWAIT: nw, CWAIT: nw, IDLE1: 0, CIDLE1: 0, IDLE0: n, CIDLE0: n, CIDLE0S: n}.items():
                check(rows[name] == want, f"{mode}, {n} locks: {name} returned {rows[name]} rows, expected {want}")
            for name, sql in ((VCOUNT, QUERIES[VCOUNT]), (CCOUNT, CLASSIC_COUNT_Q)):
                (cnt,) = measure.execute(sql).fetchone()
                check(cnt == n + nw, f"{mode}, {n} locks: {name} = {cnt}, expected {n + nw}")
            (blocked,) = measure.execute("SELECT count(*) FROM advlock_holders WHERE NOT granted "
                                         "AND cardinality(blocked_by) > 0").fetchone()
            check(blocked == nw, f"{mode}: {blocked} of {nw} waiters have blocked_by")
            (labels,) = measure.execute("SELECT count(label) FROM advlock_holders").fetchone()
            check((labels == n) if mode == PRE else (labels == 0), f"{mode}: {labels} labelled locks of {n}")
            res["labels"][str(n)] = labels
            res["lock_table"][str(n)] = [list(r) for r in measure.execute(
                "SELECT datname, lock_entries, advisory_entries, capacity FROM advlock_lock_table ORDER BY 1")]
            res["classic_headroom"][str(n)] = [list(r) for r in measure.execute(CLASSIC_HEADROOM + " ORDER BY 1")]
            names = list(queries)
            for name in names:  # warm-up
                _copy_ms(measure, queries[name])
            cp = {name: [] for name in names}
            ex = {name: [] for name in names}
            for r in range(reps[n]):
                for name in names[r % len(names):] + names[:r % len(names)]:
                    cpu_ms, wall_ms, nbytes = _copy_ms(measure, queries[name])
                    cp[name].append(cpu_ms)
                    ex[name].append(wall_ms)
                    res["bytes"].setdefault(str(n), {})[name] = nbytes
            res["cpu_ms"][str(n)] = cp
            res["wall_ms"][str(n)] = ex
            res.setdefault("monitoring", {})[str(n)] = _monitoring(measure, reps[n])
            log(f"case 5 ({mode}): {n} locks: backend CPU view {median(cp[V]):.1f} ms, classic {median(cp[C]):.1f} ms, "
                f"minimal {median(cp[CMIN]):.1f} ms, floor {median(cp[FLOOR]):.1f} ms "
                f"(setup {res['setup_s'][str(n)]:.1f} s)")
            if n == AT or (n == levels[-1] and AT not in levels):
                for name in (V, C, IDLE0, CIDLE0S):
                    res["plans"][name] = "\n".join(
                        r[0] for r in measure.execute("EXPLAIN (ANALYZE, COSTS OFF) " + queries[name]))
                res["profile_level"] = n
                if profile and not ctx.quick:
                    res["perf"] = {name: perf_profile(ctx, measure.info.backend_pid,
                                                      lambda q=queries[name]: _copy_ms(measure, q), 4.0,
                                                      f"holders-{i}")
                                   for i, name in enumerate((V, C, FLOOR))}
    finally:
        for w, fut in waiters:
            admin.execute("SELECT pg_cancel_backend(%s)", (w.pid,))
            try:
                fut.result(timeout=10)
            except psycopg.errors.QueryCanceled:
                pass
            w.close()
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


def monitoring_md(res: dict, mode: str = "") -> tuple[str, list[dict]]:
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
    targets.append(target("5", f"[{mode}] advlock_leak_count() ≤ 0.2× the classic filtered leak query, at every level, "
                               "nothing leaked and every holder leaked", f"worst {fmt_ratio(worst_leak)}", ok_leak,
                          value=worst_leak))
    targets.append(target("5", f"[{mode}] advlock_metrics ≤ 0.2× the classic unfiltered count, at every level, "
                               "nothing leaked and every holder leaked", f"worst {fmt_ratio(worst_metrics)}", ok_metrics,
                          value=worst_metrics))
    mem = [(n, mon[str(n)]["memory_bytes"]) for n in levels]
    growth = max(after - before for _, (before, after) in mem)
    targets.append(target("5", f"[{mode}] memory bounded: the backend's memory contexts do not grow over {MEMORY_CALLS} "
                               "calls each of advlock_metrics and advlock_leak_count", f"largest growth {growth:,} bytes",
                          growth <= 64 * 1024, value=growth))
    table = md_table(["locks", "scenario"] + [f"{q} ms" for q in MON]
                     + ["leak ÷ filtered", "leak ÷ filtered, above the floor", "leak ÷ unfiltered",
                        "metrics ÷ unfiltered", "metrics ÷ filtered"], rows)
    md = f"""#### Monitoring queries (issue #13), {mode}

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


def _k(n: int) -> str:
    return f"{n // 1000}k" if n % 1000 == 0 else f"{n:,}"


def _sort_method(plan: str) -> str:
    lines = [ln.strip() for ln in (plan or "").splitlines() if "Sort Method" in ln]
    return lines[0] if lines else ""


def render(res: dict, ctx: Ctx) -> tuple[str, list[dict]]:
    if "modes" not in res:  # a results.json from before issue #25
        raise ValueError("case 5 results without modes (older harness)")
    mode0 = res["modes"][res["order"][0]]
    levels = mode0["levels"]
    md = [f"""{HOLDER_SESSIONS} sessions hold *N* session-level advisory locks between them, taken with
`advlock_try_with_timeout('{NS}', g, 0, scope => 'session')` (so labelled when preloaded);
{len(WAITER_IDS)} more sessions wait in `pg_advisory_lock` on held keys (ids {', '.join(map(str, WAITER_IDS))}: the
key filter finds a holder and two waiters; `blocked_by` is computed for each waiter); one more session sits idle in
a transaction holding `ACCESS SHARE` on *N* tables (`bench_rel_*`, created for the purpose: what a long `pg_dump` or
a many-partition query holds). Two instances, same build and settings (`max_locks_per_transaction = 4096`, 100
connections): the bench instance (advlock **not preloaded**) and a second one started by this case with
`shared_preload_libraries = 'advlock'`, `advlock.max_labels = 131072` (**preloaded**: every lock has its recorded
label)""" + (f"; the preloaded instance loads `$libdir/advlock.so`, "
             f"{'the same file as' if res.get('preloaded_lib', {}).get('same_as_pinned') else '**not** the same file as'} "
             "the pinned copy" if res.get("preloaded_lib") else "") + f""". Each query runs as `COPY (query) TO STDOUT`
(execution, text output and transfer, without client-side row parsing), every query of a level alternating in
rotated order, medians of {', '.join(str(len(mode0['cpu_ms'][str(n)][V])) for n in levels)} runs per level.
**CPU** = the executing backend's CPU time for the statement (its CPU-time clock before/after: robust to other load
on the machine; the targets use it); wall = client wall time.

The **output floor** is the view's own rows (`CREATE TEMP TABLE {FLOOR_TABLE} AS SELECT * FROM advlock_holders`,
outside the timed loop; `temp_buffers = 512MB` so it stays in memory) printed with `SELECT * FROM {FLOOR_TABLE}`:
what producing the text of those rows costs with no lock-table or `pg_stat_activity` work at all. No
implementation of `SELECT * FROM advlock_holders` can go below it.

The classic queries:

```sql
-- same columns as the view (and, with ORDER BY a.state_change, l.pid, key and the idle conditions,
-- the idle-holder join)
{CLASSIC}
-- minimal decoded join (issue #25)
{MINIMAL}
-- idle join (threshold '1 hour' or '0'; separately with the function's ORDER BY)
... AND l.granted AND a.state = 'idle' AND clock_timestamp() - a.state_change >= interval '{{thr}}'
 ORDER BY a.state_change, l.pid, key
-- headroom
{CLASSIC_HEADROOM}
```
"""]
    targets: list[dict] = []
    for mode in res["order"]:
        if mode in res["modes"]:
            mmd, mt = _render_mode(res["modes"][mode], mode, ctx)
            md.append(mmd)
            targets += mt
    md.append(_modes_md(res))
    for mode in res["order"]:
        if res["modes"].get(mode, {}).get("perf") or (mode == PRE and res["modes"].get(mode, {}).get("plans")):
            md.append(profile_md(res["modes"][mode], mode))
    for mode in res["order"]:
        if mode in res["modes"]:
            mon_md, mon_targets = monitoring_md(res["modes"][mode], mode)
            md.append(mon_md)
            targets += mon_targets
    return "\n".join(md), targets


def _modes_md(res: dict) -> str:
    """The same queries on both instances: what preloading (labels recorded for every lock) adds."""
    if not all(mode in res["modes"] for mode in (NOT, PRE)):
        return ""
    a, b = res["modes"][NOT], res["modes"][PRE]
    levels = [n for n in a["levels"] if n in b["levels"]]
    rows = []
    for q in (V, VCOUNT, VWAIT, IDLE1, FEED, FEED_OLD, FLOOR, C, CCOUNT):
        if q not in a["queries"] or q not in b["queries"]:
            continue
        cells = []
        for n in levels:
            x, y = median(a["cpu_ms"][str(n)][q]), median(b["cpu_ms"][str(n)][q])
            cells.append(f"{x:.1f} → {y:.1f} ({fmt_ratio(y / x)})")
        rows.append([q] + cells)
    table = md_table(["query"] + [f"{n:,}: {NOT} → {PRE} ms" for n in levels], rows)
    return f"""### Preloaded vs not

The same queries on the two instances (backend CPU medians; each instance measured in its own rotated loop, so
cross-instance ratios carry more noise than the ratios within one loop). Preloaded, `advlock_holder_entries()`
also looks up the recorded label, scope, hold start and token of every lock row, whether or not the query reads
those columns. The classic queries show the machine's drift between the two loops; the floor also prints the
label column, filled only when preloaded.

{table}
"""


def _render_mode(m: dict, mode: str, ctx: Ctx) -> tuple[str, list[dict]]:
    levels = m["levels"]
    names = m["queries"]
    cpu = {n: {q: median(v) for q, v in m["cpu_ms"][str(n)].items()} for n in levels}
    wall = {n: {q: median(v) for q, v in m["wall_ms"][str(n)].items()} for n in levels}
    at = AT if AT in levels else levels[-1]
    rows = [[q] + [f"{fmt_ms(cpu[n][q], 1)} ({fmt_ms(wall[n][q], 1)})" for n in levels]
            + [f"{m['rows'][str(at)][q]:,}", f"{m['bytes'][str(at)][q] / 1e6:.2f}"] for q in names]
    table = md_table(["query (COPY … TO STDOUT)"] + [f"{n:,} locks: CPU ms (wall ms)" for n in levels]
                     + [f"rows at {at:,}", f"MB at {at:,}"], rows)
    ratio = {n: {(a, b): cpu[n][a] / cpu[n][b] for a, b, _ in PAIRS if a in cpu[n] and b in cpu[n]} for n in levels}
    prow = []
    for a, b, goal in PAIRS:
        if (a, b) not in ratio[levels[0]]:
            continue
        prow.append([a, b] + [fmt_ratio(ratio[n][(a, b)]) for n in levels] + [f"≤ {goal}×" if goal else "–"])
    pairs = md_table(["advlock (or floor)", "÷ compared with"] + [f"{n:,}" for n in levels] + ["target"], prow,
                     align="llrrrl"[:2] + "r" * len(levels) + "l")
    label = f"[{mode}] "
    stmt = {n: median(m["monitoring"][str(n)]["nothing leaked"]["cpu_ms"]["statement floor (SELECT 1)"])
            for n in levels if m.get("monitoring", {}).get(str(n))}
    stmt_txt = ("; statement floor (`SELECT 1`) " + ", ".join(f"{_k(n)} {s:.2f} ms" for n, s in stmt.items())) if stmt else ""

    def per_level(a, b):
        return ", ".join(f"{_k(n)} {fmt_ratio(ratio[n][(a, b)])}" for n in levels)

    def ok_all(a, b, goal):
        return all(ratio[n][(a, b)] <= goal for n in levels)

    def worst(a, b):
        return max(ratio[n][(a, b)] for n in levels)

    targets = []
    floor_c = {n: cpu[n][FLOOR] / cpu[n][C] for n in levels}
    note = ""
    if not ok_all(V, C, 0.5):
        note = ("output floor (the view's rows printed from a temp table) ÷ classic: "
                + ", ".join(f"{_k(n)} {fmt_ratio(floor_c[n])} ({cpu[n][FLOOR]:.1f} of {cpu[n][C]:.1f} ms)" for n in levels)
                + (": printing the view's rows alone exceeds the 0.5× budget, so 0.5× is out of reach for SELECT * "
                   "whatever the feed costs" if all(f > 0.5 for f in floor_c.values()) else
                   ": 0.5× would leave " + ", ".join(f"{_k(n)} {max(0.5 * cpu[n][C] - cpu[n][FLOOR], 0):.1f} ms"
                                                     for n in levels)
                   + " for all the lock-table work")
                + "; the view spends above the floor " + ", ".join(f"{_k(n)} {cpu[n][V] - cpu[n][FLOOR]:.1f} ms" for n in levels))
    targets.append(target("5", label + "advlock_holders (SELECT *) ≤ 0.5× the same-columns classic join, every level",
                          per_level(V, C), ok_all(V, C, 0.5), note, value=worst(V, C)))
    targets.append(target("5", label + "advlock_holders (SELECT *) ≤ 1.0× the minimal decoded join, every level",
                          per_level(V, CMIN), ok_all(V, CMIN, 1.0),
                          "" if ok_all(V, CMIN, 1.0) else
                          "the view prints 22 columns, the minimal join 7; output floor ÷ minimal join: "
                          + ", ".join(f"{_k(n)} {fmt_ratio(cpu[n][FLOOR] / cpu[n][CMIN])}" for n in levels)
                          + "; the view's minimal-join columns ÷ minimal join: " + per_level(VMIN, CMIN),
                          value=worst(V, CMIN)))
    for a, b, what in ((VCOUNT, CCOUNT, "count(*) over advlock_holders ≤ 0.5× count(*) over the classic join"),
                       (VKEY, CKEY, "advlock_holders WHERE key = advlock_key(…) ≤ 0.5× the classic join with the decoded-key filter"),
                       (VWAIT, CWAIT, "advlock_holders WHERE NOT granted ≤ 0.5× the classic join WHERE NOT granted")):
        ok = ok_all(a, b, 0.5)
        targets.append(target("5", label + what + ", every level", per_level(a, b) + " ("
                              + ", ".join(f"{_k(n)} {cpu[n][a]:.2f} vs {cpu[n][b]:.2f} ms" for n in levels) + ")", ok,
                              "" if ok else "both sides are close to the cost of any statement" + stmt_txt,
                              value=worst(a, b)))
    for fn, sorted_c, plain_c, scen in ((IDLE1, CIDLE1S, CIDLE1, "nothing idle for 1 hour"),
                                        (IDLE0, CIDLE0S, CIDLE0, "every holder idle")):
        ok = ok_all(fn, sorted_c, 0.5)
        note = ""
        if not ok:
            note = ", ".join(f"{_k(n)} {cpu[n][fn]:.2f} vs {cpu[n][sorted_c]:.2f} ms" for n in levels)
            sm = _sort_method(m["plans"].get(IDLE0, "")) if fn == IDLE0 else ""
            if sm:
                note += f"; the function's sort at {at:,}: `{sm}`"
            if fn == IDLE1:
                note += stmt_txt
        targets.append(target("5", label + f"advlock_idle_holders() ≤ 0.5× the classic idle join with the same ORDER BY "
                                           f"({scen}), every level",
                              per_level(fn, sorted_c) + f"; without ORDER BY on the classic side: {per_level(fn, plain_c)}",
                              ok, note, value=worst(fn, sorted_c)))
    slope_txt = "n/a (one level)"
    if len(levels) > 1:
        sv = _slope(levels, [cpu[n][V] for n in levels])
        sc = _slope(levels, [cpu[n][C] for n in levels])
        slope_txt = ", ".join(f"{levels[i]:,}→{levels[i + 1]:,}: {s:.2f}" for i, s in enumerate(sv))
        targets.append(target("5", label + "advlock_holders grows near-linearly with the number of locks "
                                           "(log-log slope ≤ 1.2 between levels)",
                              f"slopes {slope_txt} (classic: {', '.join(f'{s:.2f}' for s in sc)})",
                              all(s <= 1.2 for s in sv), value=max(sv)))
        shown = [q for q in (V, C, CMIN, FLOOR, VCOUNT, CCOUNT, IDLE0, CIDLE0S, LT, CLT) if q in names]
        chart = "holders_scaling.svg" if mode == NOT else "holders_scaling_preloaded.svg"
        svg.lines(f"{ctx.out}/{chart}", f"Diagnostics at scale ({mode}): backend CPU per query (COPY)",
                  [(q, levels, [cpu[n][q] for n in levels]) for q in shown],
                  "advisory locks held (+ as many relation locks), log scale", "backend CPU ms, log scale",
                  dashed=[C, CMIN, CCOUNT, CIDLE0S, CLT, FLOOR])
    top = levels[-1]
    ok = ratio[top][(LT, CLT)] <= 0.2
    targets.append(target("5", label + f"advlock_lock_table cheap enough to scrape every 15 s at {top:,} locks "
                                       "(≤ 0.2× the classic headroom query)",
                          f"{fmt_ratio(ratio[top][(LT, CLT)])}: {cpu[top][LT]:.2f} ms vs {cpu[top][CLT]:.2f} ms "
                          f"(every level: {per_level(LT, CLT)})", ok, value=ratio[top][(LT, CLT)]))
    lt = m["lock_table"].get(str(top), [])
    ch = m["classic_headroom"].get(str(top), [])
    out = [f"### {mode}\n", table, "", "Ratios (backend CPU medians):", "", pairs, ""]
    if len(levels) > 1:
        out.append(f"![holders scaling, {mode}]({chart})\n")
    out.append(f"Growth of the view's backend CPU time (log-log slope; 1.0 = linear): {slope_txt}.\n")
    left = {n: 0.5 * cpu[n][C] - cpu[n][FLOOR] for n in levels}
    out.append("**The output floor.** Printing the view's rows from a temp table costs "
               + ", ".join(f"{cpu[n][FLOOR]:.1f} ms at {n:,} ({fmt_ratio(floor_c[n])} of the classic join, "
                           f"{fmt_ratio(cpu[n][FLOOR] / cpu[n][V])} of the view)" for n in levels)
               + ". " + ("The floor alone is above 0.5× the same-columns classic join at every level: "
                         "0.5× is unreachable for `SELECT *` by construction (the view ships the backend columns on "
                         "every lock row, as the classic join does, plus its own computed and label columns). "
                         if all(f > 0.5 for f in floor_c.values()) else "")
               + "What 0.5× of the classic join leaves for everything but printing (lock-table snapshot, "
               "blocked_by, labels, the `pg_stat_activity` join): "
               + ", ".join((f"{left[n]:.1f} ms" if left[n] > 0 else "nothing (the floor is above it)") + f" at {n:,}"
                           for n in levels)
               + "; what the view spends above the floor now: "
               + ", ".join(f"{cpu[n][V] - cpu[n][FLOOR]:.1f} ms" for n in levels)
               + "; the classic join above the same floor: "
               + ", ".join(f"{cpu[n][C] - cpu[n][FLOOR]:.1f} ms" for n in levels) + ".\n")
    if lt:
        out.append(f"Lock table at {top:,} locks, `advlock_lock_table` (datname, lock_entries, advisory_entries, capacity): "
                   + "; ".join(str(tuple(r)) for r in lt) + ". The classic headroom query: "
                   + "; ".join(str(tuple(r)) for r in ch) + " (it counts `pg_locks` rows, one per holder or waiter "
                   "of an entry, not entries).\n")
    return "\n".join(out), targets


def profile_md(m: dict, mode: str) -> str:
    lvl = m.get("profile_level")
    if not lvl:
        return ""
    out = [f"#### Where the time goes ({mode}, {lvl:,} advisory + {lvl:,} relation locks)\n",
           "`EXPLAIN (ANALYZE, COSTS OFF)` of the view:\n", "```", m["plans"][V], "```\n",
           "of the classic join:\n", "```", m["plans"][C], "```\n",
           "of `advlock_idle_holders('0')`:\n", "```", m["plans"][IDLE0], "```\n",
           "and of the classic idle join with the same ORDER BY:\n", "```", m["plans"][CIDLE0S], "```\n"]
    perf = m.get("perf")
    if perf:
        for name in perf:
            out.append(perf_md(perf[name], f"the COPY of “{name}”"))
    return "\n".join(out)
