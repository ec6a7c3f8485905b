"""Case 5: `SELECT * FROM advlock_holders` with many advisory locks held, and as many relation
locks held elsewhere, vs the classic pg_locks ⋈ pg_stat_activity query that decodes keys."""
from __future__ import annotations

import math
import os
import shutil
import signal
import subprocess
import time

from . import svg
from .common import Ctx, check, fmt_ms, fmt_ratio, log, md_table, median, target

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
QUERIES = {
    "advlock_holders view": VIEW,
    "classic join (same columns)": CLASSIC,
    "classic join (key, pid, granted, app only)": MINIMAL,
    "pg_locks alone (all lock types)": PG_LOCKS,
}
V, C = "advlock_holders view", "classic join (same columns)"
HOLDER_SESSIONS = 4
BATCH = 5000
SKIP_FRAMES = {"main", "PostmasterMain", "PostgresMain", "__libc_start_call_main", "postmaster_child_launch",
               "PortalRun", "standard_ProcessUtility", "ProcessUtility", "DoCopy", "DoCopyTo",
               "standard_ExecutorRun", "ExecutorRun", "exec_simple_query", "PortalRunUtility",
               "PortalRunMulti", "BackendMain", "ServerLoop", "BackendStartup", "__libc_start_main_impl",
               "_start", "__libc_start_main", "ExecProcNode", "ExecProcNodeFirst"}


def _copy_ms(conn, sql: str) -> tuple[float, int]:
    t = time.perf_counter()
    n = 0
    with conn.cursor() as cur:
        with cur.copy(f"COPY ({sql}) TO STDOUT") as cp:
            for block in cp:
                n += len(block)
    return (time.perf_counter() - t) * 1000, n


def _explain_ms(conn, sql: str) -> float:
    (plan,) = conn.execute("EXPLAIN (ANALYZE, TIMING OFF, FORMAT JSON) " + sql).fetchone()
    return plan[0]["Execution Time"]


def _perf_profile(ctx: Ctx, conn, sql: str, seconds: float) -> dict | None:
    """Samples the measuring backend with perf (cpu-clock, call graphs) while it runs sql in a loop."""
    perf = shutil.which("perf")
    if not perf:
        return {"error": "perf not installed (Debian package linux-perf)"}
    data = f"{ctx.work}/holders.perf.data"
    pid = conn.info.backend_pid
    p = subprocess.Popen([perf, "record", "-q", "-e", "cpu-clock", "-F", "2999", "-g", "-o", data, "-p", str(pid)],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    time.sleep(0.3)
    if p.poll() is not None:
        return {"error": "perf record failed: " + p.stderr.read().decode()[-300:]}
    t, runs = time.perf_counter(), 0
    while time.perf_counter() - t < seconds:
        _copy_ms(conn, sql)
        runs += 1
    p.send_signal(signal.SIGINT)
    p.wait(timeout=30)

    def report(children: bool) -> list[tuple[float, float, str]]:
        args = [perf, "report", "-i", data, "--stdio", "--sort", "dso,symbol", "-g", "none",
                "--children" if children else "--no-children"]
        out = subprocess.run(args, capture_output=True, text=True, timeout=120).stdout
        rows = []
        for line in out.splitlines():
            if not line.strip() or line.startswith("#"):
                continue
            parts = line.split()
            try:
                if children:
                    incl, self_, dso, sym = float(parts[0][:-1]), float(parts[1][:-1]), parts[2], " ".join(parts[4:])
                else:
                    incl, dso, sym = float(parts[0][:-1]), parts[1], " ".join(parts[3:])
                    self_ = incl
            except (ValueError, IndexError):
                continue
            sym = sym.split("  ")[0].strip()
            rows.append((incl, self_, f"{dso}: {sym}"))
        return rows

    incl = [r for r in report(True) if not r[2].split(": ", 1)[1].startswith("0x")
            and r[2].split(": ", 1)[1] not in SKIP_FRAMES and "[k]" not in r[2]]
    self_rows = report(False)
    by_dso: dict[str, float] = {}
    for pct, _, name in self_rows:
        dso = name.split(":", 1)[0]
        by_dso[dso] = by_dso.get(dso, 0) + pct
    return {"runs": runs, "seconds": seconds, "inclusive": incl[:22], "self": self_rows[:15],
            "by_dso": sorted(by_dso.items(), key=lambda kv: -kv[1])[:6]}


def run(ctx: Ctx) -> dict:
    levels = ctx.size([1_000, 10_000, 100_000], [1_000])
    reps = ctx.size({1_000: 9, 10_000: 7, 100_000: 5}, {1_000: 3})
    admin = ctx.connect(app="bench-admin")
    measure = ctx.connect(app="bench-measure")
    rel = ctx.connect(autocommit=False, app="bench-relation-locks")  # stays idle in transaction
    holders = [ctx.connect(app=f"bench-holder-{i}") for i in range(HOLDER_SESSIONS)]
    res = {"levels": levels, "copy_ms": {}, "explain_ms": {}, "bytes": {}, "setup_s": {}, "plans": {}}
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
                    ms, nbytes = _copy_ms(measure, QUERIES[name])
                    cp[name].append(ms)
                    res["bytes"].setdefault(str(n), {})[name] = nbytes
                    ex[name].append(_explain_ms(measure, QUERIES[name]))
            res["copy_ms"][str(n)] = cp
            res["explain_ms"][str(n)] = ex
            log(f"case 5: {n} locks: view {median(cp[V]):.1f} ms, classic {median(cp[C]):.1f} ms "
                f"(setup {res['setup_s'][str(n)]:.1f} s)")
            if n == 10_000 or (n == levels[-1] and 10_000 not in levels):
                for name in (V, C):
                    res["plans"][name] = "\n".join(
                        r[0] for r in measure.execute("EXPLAIN (ANALYZE, COSTS OFF) " + QUERIES[name]))
                res["profile_level"] = n
                if not ctx.quick:
                    res["perf"] = {name: _perf_profile(ctx, measure, QUERIES[name], 4.0) for name in (V, C)}
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
        cp, ex = res["copy_ms"][str(n)], res["explain_ms"][str(n)]
        rows.append([f"{n:,}"] + [f"{fmt_ms(median(cp[q]), 2)} / {fmt_ms(median(ex[q]), 2)}" for q in names]
                    + [fmt_ratio(median(cp[V]) / median(cp[C])), fmt_ratio(median(ex[V]) / median(ex[C]))])
    table = md_table(["advisory locks (+ as many relation locks)"] + [f"{q}: COPY / exec ms" for q in names]
                     + ["view ÷ classic (COPY)", "view ÷ classic (exec)"], rows)
    brows = [[f"{n:,}"] + [f"{res['bytes'][str(n)][q] / 1e6:.2f}" for q in names] for n in levels]
    btable = md_table(["locks"] + [f"{q} MB" for q in names], brows)

    at = 10_000 if 10_000 in levels else levels[-1]
    ratio = median(res["copy_ms"][str(at)][V]) / median(res["copy_ms"][str(at)][C])
    ratio_ex = median(res["explain_ms"][str(at)][V]) / median(res["explain_ms"][str(at)][C])
    targets = [target("5", "advlock_holders ≤ 0.5× the classic join's time at 10k advisory locks",
                      f"{fmt_ratio(ratio)} (COPY wall), {fmt_ratio(ratio_ex)} (server execution)"
                      + ("" if at == 10_000 else f" at {at:,} locks"), ratio <= 0.5 and ratio_ex <= 0.5)]
    slope_txt = "n/a (one level)"
    if len(levels) > 1:
        sv = _slope(levels, [median(res["copy_ms"][str(n)][V]) for n in levels])
        sc = _slope(levels, [median(res["copy_ms"][str(n)][C]) for n in levels])
        slope_txt = ", ".join(f"{levels[i]:,}→{levels[i + 1]:,}: {s:.2f}" for i, s in enumerate(sv))
        targets.append(target("5", "advlock_holders grows near-linearly with the number of locks "
                                   "(log-log slope ≤ 1.2 between levels)",
                              f"slopes {slope_txt} (classic: {', '.join(f'{s:.2f}' for s in sc)})",
                              all(s <= 1.2 for s in sv)))
        svg.lines(f"{ctx.out}/holders_scaling.svg", "Diagnostics at scale: time to fetch all advisory-lock rows (COPY)",
                  [(q, levels, [median(res["copy_ms"][str(n)][q]) for n in levels]) for q in names],
                  "advisory locks held (+ as many relation locks), log scale", "milliseconds, log scale",
                  dashed=[names[3]])
    md = [f"""{HOLDER_SESSIONS} sessions hold *N* session-level advisory locks between them (keys `advlock_key('bench-holders', g)`);
one more session sits idle in a transaction holding `ACCESS SHARE` on *N* tables (`bench_rel_*`, created for the
purpose: what a long `pg_dump` or a many-partition query holds). The server is sized for it
(`max_locks_per_transaction = 4096`, 100 connections). Each query is timed two ways, alternating, medians of
{', '.join(f"{res['copy_ms'][str(n)][V].__len__()}" for n in levels)} runs per level:
**COPY** = client wall time of `COPY (query) TO STDOUT` (execution + text output + transfer, without client
row parsing); **exec** = `EXPLAIN (ANALYZE, TIMING OFF)` execution time (no output conversion).

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
    md.append(f"Growth of the view's COPY time (log-log slope; 1.0 = linear): {slope_txt}.\n")
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
            p = perf[name]
            if "error" in p:
                out.append(f"perf for {name}: {p['error']}\n")
                continue
            out.append(f"perf (`cpu-clock`, call graphs) of the backend running `COPY ({name})` in a loop for "
                       f"{p['seconds']:.0f} s ({p['runs']} runs). Share of samples by shared object: "
                       + ", ".join(f"{d} {pct:.1f}%" for d, pct in p["by_dso"]) + ".\n")
            out.append(md_table(["inclusive %", "self %", "function (frames with symbols, entry frames omitted)"],
                                [[f"{a:.1f}", f"{b:.1f}", f"`{s}`"] for a, b, s in p["inclusive"]]))
            out.append("")
    return "\n".join(out)
