"""Case 7: the SQL edition (edition/advlock_sql.sql) against the extension, side by side on one
server: key derivation and the uncontended acquire. No target: the point is the ratio, so users
of managed PostgreSQL know what the edition costs them (README, "Managed PostgreSQL")."""
from __future__ import annotations

import dataclasses
import os
import subprocess

from .case_acquire import pgbench
from .common import Ctx, HarnessError, backend_cpu_ns, check, fmt_ratio, log, md_table, median

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EDITION_DB = "bench_edition"
KEYS = "SELECT bit_xor(advlock_key(ns, id)) FROM edition_pairs"
BASE = "SELECT bit_xor((ns IS NULL OR id IS NULL)::int) FROM edition_pairs"
# A pure try in xact scope inside one transaction, re-entrant on one key: the function's own cost.
LOOP = ("DO $$ BEGIN FOR i IN 1..{m} LOOP PERFORM advlock_try_with_timeout(42::bigint, 0); "
        "END LOOP; END $$")
CLIENT = "\\set k random(1, 1000000000000000)\nBEGIN;\nSELECT advlock_try_with_timeout(:k, 0);\nCOMMIT;\n"


def _install_edition(ctx: Ctx) -> None:
    with ctx.connect() as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {EDITION_DB}")
        conn.execute(f"CREATE DATABASE {EDITION_DB}")
    p = subprocess.run([f"{ctx.pgbin}/psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", "-h", "127.0.0.1",
                        "-p", str(ctx.port), "-U", "postgres", "-d", EDITION_DB,
                        "-f", f"{REPO}/edition/advlock_sql.sql"],
                       env=dict(os.environ, PGOPTIONS="-c search_path=public"), capture_output=True, text=True)
    if p.returncode != 0:
        raise HarnessError(f"installing the SQL edition failed:\n{p.stderr[-2000:]}")


def _cpu(conn, pid: int, sql: str) -> float:
    c0 = backend_cpu_ns(pid)[0]
    conn.execute(sql)
    return (backend_cpu_ns(pid)[0] - c0) / 1e9


def run(ctx: Ctx) -> dict:
    _install_edition(ctx)
    impls = {"extension": ctx, "SQL edition": dataclasses.replace(ctx, dbname=EDITION_DB)}
    # The edition hashes ~500x slower: fewer rows and calls for it, the same per-key arithmetic.
    rows = {"extension": ctx.size(1_000_000, 20_000), "SQL edition": ctx.size(50_000, 2_000)}
    calls = {"extension": ctx.size(200_000, 2_000), "SQL edition": ctx.size(50_000, 1_000)}
    reps, seconds = ctx.size(5, 2), ctx.size(5, 1)
    conns, pids = {}, {}
    for name, c in impls.items():
        conn = c.connect()
        conn.execute("DROP TABLE IF EXISTS edition_pairs")
        conn.execute("CREATE UNLOGGED TABLE edition_pairs AS SELECT 'ns' || (g % 100) AS ns, g::text AS id "
                     f"FROM generate_series(1, {rows[name]}) g")
        conn.execute("VACUUM ANALYZE edition_pairs")
        conns[name], pids[name] = conn, conn.info.backend_pid
    # Same keys from both, on the rows both have.
    n = min(rows.values())
    same = [conns[name].execute(f"SELECT bit_xor(advlock_key(ns, id)) FROM edition_pairs WHERE id::int <= {n}")
            .fetchone()[0] for name in impls]
    check(same[0] == same[1], f"case 9: the edition's keys differ from the extension's ({same})")
    script = f"{ctx.work}/edition_acquire.pgbench"
    with open(script, "w") as f:
        f.write(CLIENT)
    key_ns = {name: [] for name in impls}
    call_us = {name: [] for name in impls}
    tps = {name: [] for name in impls}
    for name in impls:  # warm-up: caches, plpgsql compilation
        conns[name].execute(BASE)
        conns[name].execute(KEYS.replace("FROM edition_pairs", "FROM edition_pairs WHERE id::int <= 100"))
    for rep in range(reps):
        order = list(impls) if rep % 2 == 0 else list(reversed(impls))
        for name in order:
            conn, pid = conns[name], pids[name]
            base = _cpu(conn, pid, BASE)
            keys = _cpu(conn, pid, KEYS)
            key_ns[name].append((keys - base) / rows[name] * 1e9)
            with conn.transaction():
                call_us[name].append(_cpu(conn, pid, LOOP.format(m=calls[name])) / calls[name] * 1e6)
            tps[name].append(pgbench(impls[name], script, 1, seconds, "simple"))
    for conn in conns.values():
        conn.close()
    log("case 9: key ns " + ", ".join(f"{k}={median(v):.0f}" for k, v in key_ns.items())
        + "; call us " + ", ".join(f"{k}={median(v):.2f}" for k, v in call_us.items())
        + "; tps " + ", ".join(f"{k}={median(v):.0f}" for k, v in tps.items()))
    return {"rows": rows, "calls": calls, "reps": reps, "seconds": seconds,
            "key_ns": key_ns, "call_us": call_us, "tps": tps}


def render(res: dict, ctx: Ctx) -> tuple[str, list[dict]]:
    ext, sql = "extension", "SQL edition"
    k, c, t = res["key_ns"], res["call_us"], res["tps"]

    def rng(xs, fmt):
        return f"{fmt(median(xs))} ({fmt(min(xs))}–{fmt(max(xs))})"

    ns = lambda v: f"{v:,.0f} ns"  # noqa: E731
    us = lambda v: f"{v:.2f} µs"  # noqa: E731
    tp = lambda v: f"{v:,.0f} tps"  # noqa: E731
    table = md_table(
        ["what", "extension: median (min–max)", "SQL edition: median (min–max)", "edition slower by (medians)"],
        [["`advlock_key(ns, id)`, backend CPU per key, net of the scan", rng(k[ext], ns), rng(k[sql], ns),
          fmt_ratio(median(k[sql]) / median(k[ext]))],
         ["`advlock_try_with_timeout(key, 0)` in a transaction, backend CPU per call", rng(c[ext], us), rng(c[sql], us),
          fmt_ratio(median(c[sql]) / median(c[ext]))],
         ["client `BEGIN; SELECT advlock_try_with_timeout(k, 0); COMMIT`, pgbench 1 client, simple protocol",
          rng(t[ext], tp), rng(t[sql], tp), fmt_ratio(median(t[ext]) / median(t[sql]))]])
    md = f"""The SQL edition installed with `psql -f edition/advlock_sql.sql` into a second database of the same
server (`{EDITION_DB}`), measured against the extension in `bench`, {res['reps']} interleaved rounds. Keys:
`{KEYS}` minus `{BASE}`, over {res['rows'][ext]:,} (extension) and {res['rows'][sql]:,} (edition) generated
pairs, as the executing backend's CPU time. Server-side acquire: `{LOOP.format(m='M')}` in one transaction, M =
{res['calls'][ext]:,} / {res['calls'][sql]:,}. Client: pgbench, {res['seconds']} s per round, random keys.

{table}
"""
    return md, []
