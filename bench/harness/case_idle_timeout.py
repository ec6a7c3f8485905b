"""Case 14: what advlock.idle_session_lock_timeout costs an uncontended transaction.

The setting's work happens at every transaction end of every session (a transaction callback
arms or disarms the session's timer: docs/idle-session-locks.md), so its cost is paid by
transactions that have nothing to do with it. One preloaded instance, two connections that
differ only in the setting (0, off, and 60 s, set with the connection's options); each runs
client transactions, prepared, over TCP: `SELECT 1`, and the uncontended acquire
`advlock_try_with_timeout('bench', k, 0)` (transaction scope). The measure is the serving
backend's CPU time per transaction (as cases 6 and 11: the client's timing noise cannot move
it); rounds alternate the two connections, median. Target: the setting on costs ≤ 1.05× off for
the acquire (CONTRIBUTING.md measured no difference above the noise when it was designed).
"""
from __future__ import annotations

import psycopg

from .case_preload import _instance, _stop
from .common import Ctx, backend_cpu_ns, check, log, md_table, median, target

OFF, ON = "0 (off)", "60s"
STATEMENTS = {
    "SELECT 1": "SELECT 1",
    "uncontended acquire: advlock_try_with_timeout('bench', k, 0)": "SELECT advlock_try_with_timeout('bench', %s::bigint, 0)",
}
ACQUIRE = list(STATEMENTS)[1]


def run(ctx: Ctx) -> dict:
    n, rounds = ctx.size(10_000, 300), ctx.size(9, 2)
    port = ctx.port + 17
    work = _instance(ctx, "idle-timeout", port, ["shared_preload_libraries = 'advlock'"])
    res = {"n": n, "rounds": rounds, "ns": {s: {OFF: [], ON: []} for s in STATEMENTS}}
    conns = {}
    try:
        dsn = f"host=127.0.0.1 port={port} user=postgres dbname=postgres"
        with psycopg.connect(dsn, autocommit=True) as c:
            c.execute("CREATE EXTENSION IF NOT EXISTS advlock")
        for setting in (OFF, ON):
            value = setting.split()[0]
            c = psycopg.connect(dsn, application_name="bench-case14",
                                options=f"-c advlock.idle_session_lock_timeout={value}")
            (shown,) = c.execute("SHOW advlock.idle_session_lock_timeout").fetchone()
            c.commit()
            check(shown == ("0" if value == "0" else "1min"), f"the setting reads {shown!r}, not {value}")
            conns[setting] = (c, c.execute("SELECT pg_backend_pid()").fetchone()[0])
            c.commit()
        for name, sql in STATEMENTS.items():
            for r in range(rounds):
                for setting in ((OFF, ON) if r % 2 == 0 else (ON, OFF)):
                    c, pid = conns[setting]
                    before, _ = backend_cpu_ns(pid)
                    for k in range(n):
                        c.execute(sql, (k,) if "%s" in sql else None, prepare=True)
                        c.commit()
                    after, _ = backend_cpu_ns(pid)
                    res["ns"][name][setting].append((after - before) / n)
            log(f"case 14: {name}: off {median(res['ns'][name][OFF]):.0f} ns, "
                f"on {median(res['ns'][name][ON]):.0f} ns per transaction")
    finally:
        for c, _ in conns.values():
            c.close()
        _stop(work, ctx.pgbin)
    return res


def render(res: dict, ctx: Ctx) -> tuple[str, list[dict]]:
    rows = []
    for name, by in res["ns"].items():
        off, on = median(by[OFF]), median(by[ON])
        rows.append([name, f"{off / 1000:.2f}", f"{on / 1000:.2f}", f"{on / off:.3f}×",
                     f"{min(by[OFF]) / 1000:.2f}–{max(by[OFF]) / 1000:.2f}", f"{min(by[ON]) / 1000:.2f}–{max(by[ON]) / 1000:.2f}"])
    by = res["ns"][ACQUIRE]
    ratio = median(by[ON]) / median(by[OFF])
    targets = [target("14", "advlock.idle_session_lock_timeout set (60 s) costs ≤ 1.05× off on an uncontended "
                            "acquisition (backend CPU per client transaction)",
                      f"{ratio:.3f}× ({median(by[OFF]) / 1000:.2f} → {median(by[ON]) / 1000:.2f} µs)", ratio <= 1.05,
                      value=ratio)]
    md = "\n".join([
        f"Preloaded instance; two connections, the setting 0 and 60 s; {res['n']:,} client transactions per round "
        f"(prepared, TCP), {res['rounds']} rounds alternating the two connections; backend CPU per transaction "
        "(µs, median; min–max over the rounds beside it).",
        "",
        md_table(["transaction", "off µs", "60 s µs", "60 s ÷ off", "off range", "60 s range"], rows,
                 align="lrrrrr"),
    ])
    return md, targets
