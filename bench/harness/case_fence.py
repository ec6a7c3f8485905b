"""Case 11: the cost of a fence (advlock_fence, issue #31).

As an application calls it: one statement per transaction (autocommit), prepared, over TCP,
one client; the measure is the serving backend's CPU time per call (as case 6: the client's and
the shared machine's timing noise cannot move it), with the wall time per call beside it.
Many short rounds in rotated order, median. All in one run, so the ratios are side by side:

* `SELECT advlock_fence(:k, :t)` and `SELECT advlock_fence('bench', :k, :t)` against the
  single-row upsert they replace, into a table of the same shape as advlock_fences
  (`INSERT … ON CONFLICT (key) DO UPDATE SET token = excluded.token, …`). Target: the key form
  ≤ 1.3× the plain upsert. Beside them, to say where the difference goes: the hand-written fence
  (the same upsert `WHERE f.token <= excluded.token`), that upsert straight into advlock_fences
  (its guard trigger, without the function around it), and the PL/pgSQL the Rust advlock_fence
  calls when it does not pass a token itself, advlock_fence_checked (the SQL edition's
  advlock_fence, here behind the extension's guard), called directly.
* a write transaction: `BEGIN; UPDATE one row; [fence;] COMMIT;` with and without the fence
  (reported, no target).

Keys are drawn from 1,000 rows that exist (a fence in use is updated, not inserted); one token
per round, larger each round (equal tokens pass).
"""
from __future__ import annotations

import random
import time

from .common import Ctx, backend_cpu_ns, check, log, md_table, median, target

SETUP = """
DROP TABLE IF EXISTS bench_fence_plain, bench_fence_data;
CREATE TABLE bench_fence_plain (
    key bigint PRIMARY KEY, token bigint NOT NULL, ns text, id text,
    passed_at timestamptz NOT NULL DEFAULT statement_timestamp(),
    passed_by text NOT NULL DEFAULT current_user);
INSERT INTO bench_fence_plain (key, token) SELECT g, 1 FROM generate_series(0, 999) g;
CREATE TABLE bench_fence_data (id int PRIMARY KEY, v bigint NOT NULL);
INSERT INTO bench_fence_data SELECT g, 0 FROM generate_series(0, 999) g;
DELETE FROM advlock_fences;
SELECT advlock_fence(g, 1) FROM generate_series(0, 999) g;
SELECT advlock_fence('bench', g, 1) FROM generate_series(0, 999) g;
"""
SET = "SET token = excluded.token, passed_at = excluded.passed_at, passed_by = excluded.passed_by"
PLAIN, FENCE, FENCE_NS = "single-row upsert (plain)", "advlock_fence(key, token)", "advlock_fence(ns, id, token)"
CHECKED = "advlock_fence_checked(key, token): the PL/pgSQL alone"
CALLS = {
    PLAIN: f"INSERT INTO bench_fence_plain AS f (key, token) VALUES (%s, %s) ON CONFLICT (key) DO UPDATE {SET}",
    "hand-written fence (upsert WHERE token <=)":
        f"INSERT INTO bench_fence_plain AS f (key, token) VALUES (%s, %s) ON CONFLICT (key) DO UPDATE {SET} "
        "WHERE f.token <= excluded.token",
    "the same upsert straight into advlock_fences (guard trigger)":
        f"INSERT INTO advlock_fences AS f (key, token) VALUES (%s, %s) ON CONFLICT (key) DO UPDATE {SET} "
        "WHERE f.token <= excluded.token",
    FENCE: "SELECT advlock_fence(%s::bigint, %s::bigint)",
    FENCE_NS: "SELECT advlock_fence('bench', %s::bigint, %s::bigint)",
    CHECKED: "SELECT advlock_fence_checked(%s::bigint, %s::bigint)",
}
UNFENCED, FENCED = "write transaction, unfenced", "write transaction + advlock_fence(key, token)"
WRITE = "UPDATE bench_fence_data SET v = v + 1 WHERE id = %s"


def _calls(conn, pid: int, sql: str, keys: list[int], token: int) -> tuple[float, float]:
    """(backend CPU ns, wall ns) per call of `sql`, one per autocommit transaction."""
    cpu0, wall0 = backend_cpu_ns(pid)[0], time.perf_counter_ns()
    for k in keys:
        conn.execute(sql, (k, token), prepare=True)
    return (backend_cpu_ns(pid)[0] - cpu0) / len(keys), (time.perf_counter_ns() - wall0) / len(keys)


def _transactions(conn, pid: int, fenced: bool, keys: list[int], token: int) -> tuple[float, float]:
    conn.autocommit = False
    try:
        cpu0, wall0 = backend_cpu_ns(pid)[0], time.perf_counter_ns()
        for k in keys:
            if fenced:
                conn.execute(CALLS[FENCE], (k, token), prepare=True)
            conn.execute(WRITE, (k,), prepare=True)
            conn.commit()
        return (backend_cpu_ns(pid)[0] - cpu0) / len(keys), (time.perf_counter_ns() - wall0) / len(keys)
    finally:
        conn.autocommit = True


def run(ctx: Ctx) -> dict:
    # Many short rounds in rotated order, so that a burst of other work on a shared machine
    # lands in a few samples of every variant, not in all samples of one.
    n = ctx.size(2_000, 200)
    rounds = ctx.size(25, 2)
    rng = random.Random(11)
    with ctx.connect(app="bench-fence") as conn:
        conn.execute(SETUP)
        # advlock_fence_checked came in 0.6.0: a baseline build (bench/run.sh --baseline) lacks it.
        (has_checked,) = conn.execute("SELECT EXISTS (SELECT FROM pg_proc WHERE proname = 'advlock_fence_checked')").fetchone()
        names = [n for n in CALLS if n != CHECKED or has_checked] + [UNFENCED, FENCED]
        cpu = {name: [] for name in names}
        wall = {name: [] for name in names}
        pid = conn.info.backend_pid
        for r in range(rounds):
            token = r + 2
            keys = [rng.randrange(1000) for _ in range(n)]
            order = names[r % len(names):] + names[:r % len(names)]
            order = order if r % 2 == 0 else order[::-1]
            for name in order:
                if name in CALLS:
                    c, w = _calls(conn, pid, CALLS[name], keys, token)
                else:
                    c, w = _transactions(conn, pid, name == FENCED, keys, token)
                cpu[name].append(c)
                wall[name].append(w)
            if (r + 1) % 5 == 0:
                log(f"case 11: {r + 1} rounds: median plain {median(cpu[PLAIN]) / 1000:.1f} µs, "
                    f"fence {median(cpu[FENCE]) / 1000:.1f} µs CPU per call")
        fences = conn.execute("SELECT count(*), max(token) FROM advlock_fences").fetchone()
        check(fences[0] == 2000 and fences[1] == rounds + 1, f"advlock_fences ended with {fences}")
        conn.execute("DROP TABLE bench_fence_plain, bench_fence_data")
        conn.execute("DELETE FROM advlock_fences")
    return {"cpu": cpu, "wall": wall, "n": n, "rounds": rounds}


def render(res: dict, ctx: Ctx) -> tuple[str, list[dict]]:
    cpu = {name: median(v) / 1000 for name, v in res["cpu"].items()}
    wall = {name: median(v) / 1000 for name, v in res["wall"].items()}
    calls = [[name, f"{cpu[name]:.1f}", f"{cpu[name] / cpu[PLAIN]:.2f}×", f"{wall[name]:.1f}",
              f"{wall[name] / wall[PLAIN]:.2f}×"] for name in CALLS if name in cpu]
    txns = [[name, f"{cpu[name]:.1f}", f"{cpu[name] / cpu[UNFENCED]:.2f}×", f"{wall[name]:.1f}",
             f"{wall[name] / wall[UNFENCED]:.2f}×"] for name in (UNFENCED, FENCED)]
    ratio = cpu[FENCE] / cpu[PLAIN]
    targets = [target("11", "an advlock_fence call costs ≤ 1.3× the single-row upsert it replaces "
                            "(backend CPU per call, 1 client, prepared)",
                      f"{ratio:.2f}× ({cpu[PLAIN]:.1f} → {cpu[FENCE]:.1f} µs; wall {wall[FENCE] / wall[PLAIN]:.2f}×)",
                      ratio <= 1.3, value=ratio)]
    md = "\n".join([
        f"One statement per autocommit transaction, prepared, over TCP, 1 client; {res['n']:,} calls per round "
        f"on keys drawn from 1,000 existing rows, {res['rounds']} rounds in rotated order, median; the serving backend's "
        "CPU time per call, and the client's wall time beside it. synchronous_commit off (the bench instance's).",
        "",
        md_table(["call", "backend CPU µs", "vs plain upsert", "wall µs", "vs plain upsert"], calls, align="lrrrr"),
        "",
        md_table(["transaction", "backend CPU µs", "vs unfenced", "wall µs", "vs unfenced"], txns, align="lrrrr"),
    ])
    return md, targets
