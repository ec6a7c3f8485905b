"""Case 13: leader election (advlock_observe_leader) on a preloaded instance: how soon an observer
asleep on its latch learns of a change, by server clock.

* On resignation: the leader's clock_timestamp() right before advlock_resign, the observer's
  right after advlock_observe_leader returned "no leader". Target p50 ≤ 1 ms.
* On a grant (the full hand-off): a candidate waits in advlock_campaign; the leader resigns;
  the observer returns the candidate's new term. From right before advlock_resign to the
  observer's return: the release, the candidate's wake-up and token draw, the observer's
  wake-up. Target p50 ≤ 1 ms.
* On expiry: a 50 ms term nobody renews and no candidate; from its expires_at to the observer's
  return (the observer sleeps until the expiry itself). Targets p50 ≤ 1 ms, p99 ≤ 5 ms.
Each sample starts once the observer (and the candidate) sleep: wait_event_type 'Extension'.
"""
from __future__ import annotations

import dataclasses

import psycopg

from .case_preload import _instance, _stop
from .common import Ctx, Worker, check, md_table, percentile, target, wait_until

OBSERVE = "SELECT changed, term, clock_timestamp() FROM advlock_observe_leader(%s, 10000, %s)"
CAMPAIGN = "SELECT advlock_campaign(%s, %s, %s, %s)"
RESIGN = "SELECT t, advlock_resign(%s) FROM (SELECT clock_timestamp() AS t OFFSET 0) s"


def _sleeping(admin, pid: int) -> bool:
    return admin.execute("SELECT wait_event_type = 'Extension' AND state = 'active' FROM pg_stat_activity "
                         "WHERE pid = %s", (pid,)).fetchone()[0] is True


def _samples(lctx: Ctx, samples: int) -> dict:
    admin = lctx.connect(app="bench-election-admin")
    leader = lctx.connect(app="bench-election-leader")
    observer = Worker(lctx, "bench-election-observer")
    candidate = Worker(lctx, "bench-election-candidate")
    resign_ms, grant_ms, expiry_ms = [], [], []
    try:
        for i in range(samples):
            key = 0x0E1E_0000_0000 + i
            # Resignation, nobody waiting to lead.
            term = leader.execute(CAMPAIGN, (key, 30000, 0, "bench-a")).fetchone()[0]
            fut = observer.submit(lambda c, k=key, t=term: c.execute(OBSERVE, (k, t)).fetchone())
            wait_until(lambda: _sleeping(admin, observer.pid), 10, "the observer to sleep")
            t_res, ok = leader.execute(RESIGN, (term,)).fetchone()
            changed, new, t_obs = fut.result(timeout=15)
            check(ok and changed and new is None, "resignation not observed")
            resign_ms.append((t_obs - t_res).total_seconds() * 1000)
            # Grant: a candidate waits; the observer sees its term.
            key += 1 << 20
            term = leader.execute(CAMPAIGN, (key, 30000, 0, "bench-a")).fetchone()[0]
            won = candidate.submit(lambda c, k=key: c.execute(CAMPAIGN, (k, 30000, 10000, "bench-b")).fetchone()[0])
            fut = observer.submit(lambda c, k=key, t=term: c.execute(OBSERVE, (k, t)).fetchone())
            wait_until(lambda: _sleeping(admin, observer.pid) and _sleeping(admin, candidate.pid), 10,
                       "the observer and the candidate to sleep")
            t_res, ok = leader.execute(RESIGN, (term,)).fetchone()
            changed, new, t_obs = fut.result(timeout=15)
            next_term = won.result(timeout=15)
            check(ok and changed and new == next_term and next_term > term, "grant not observed")
            grant_ms.append((t_obs - t_res).total_seconds() * 1000)
            leader.execute("SELECT advlock_resign(%s)", (next_term,))
            # Expiry: a 50 ms term nobody renews.
            key += 1 << 20
            term = leader.execute(CAMPAIGN, (key, 50, 0, "bench-a")).fetchone()[0]
            (expires,) = leader.execute("SELECT expires_at FROM advlock_leader(%s)", (key,)).fetchone()
            changed, new, t_obs = observer.submit(lambda c, k=key, t=term: c.execute(OBSERVE, (k, t)).fetchone()
                                                  ).result(timeout=15)
            check(changed and new is None, "expiry not observed")
            expiry_ms.append((t_obs - expires).total_seconds() * 1000)
    finally:
        candidate.close()
        observer.close()
        leader.close()
        admin.close()
    return {"resign_ms": resign_ms, "grant_ms": grant_ms, "expiry_ms": expiry_ms}


def run(ctx: Ctx) -> dict:
    samples = ctx.size(300, 5)
    port = ctx.port + 16
    work = None
    try:
        work = _instance(ctx, "election", port, ["shared_preload_libraries = 'advlock'"])
        lctx = dataclasses.replace(ctx, port=port, dbname="postgres")
        with psycopg.connect(lctx.dsn, autocommit=True) as c:
            c.execute("CREATE EXTENSION IF NOT EXISTS advlock")
        res = _samples(lctx, samples)
    finally:
        if work:
            _stop(work, ctx.pgbin)
    return {"samples": samples, **res}


def render(res: dict, ctx: Ctx) -> tuple[str, list[dict]]:
    series = [("on resignation", res["resign_ms"]), ("on a grant (resign → candidate's term seen)", res["grant_ms"]),
              ("on expiry (late after expires_at)", res["expiry_ms"])]
    rows = [[name, len(v), f"{percentile(v, 50):.3f}", f"{percentile(v, 99):.3f}", f"{max(v):.3f}"]
            for name, v in series]
    rs, gr, ex = res["resign_ms"], res["grant_ms"], res["expiry_ms"]
    targets = [
        target("13", "observer woken by a resignation: p50 ≤ 1 ms", f"{percentile(rs, 50):.3f} ms", percentile(rs, 50) <= 1.0,
               value=percentile(rs, 50)),
        target("13", "observer sees the next term after a resignation: p50 ≤ 1 ms", f"{percentile(gr, 50):.3f} ms",
               percentile(gr, 50) <= 1.0, value=percentile(gr, 50)),
        target("13", "observer woken by an expiry: p50 ≤ 1 ms", f"{percentile(ex, 50):.3f} ms", percentile(ex, 50) <= 1.0,
               value=percentile(ex, 50)),
        target("13", "observer woken by an expiry: p99 ≤ 5 ms late", f"{percentile(ex, 99):.3f} ms",
               percentile(ex, 99) <= 5.0, value=percentile(ex, 99)),
    ]
    md = "\n".join([
        f"Preloaded instance; an observer asleep in advlock_observe_leader, {res['samples']} samples each; "
        "latency by the server's clock (ms):",
        "",
        md_table(["observer woken", "n", "p50", "p99", "max"], rows, align="lrrrr"),
    ])
    return md, targets
