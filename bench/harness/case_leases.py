"""Case 10: leases (advlock_lease) on a preloaded instance.

* Cost: uncontended `advlock_lease_release(advlock_lease(:k, 30000, 0))` against a session lock
  taken and released with `advlock_try_with_timeout(:k, 0, 'session'), advlock_unlock(:k)`,
  pgbench, 1 client, prepared protocol, alternating rounds, median. Target ≤ 1.5× (a lease draws
  a WAL-logged fencing token; the lock does not).
* Hand-off on release: holder's clock_timestamp() right before advlock_lease_release, waiter's
  right after advlock_lease returned (one server clock), the waiter confirmed queued in
  advlock_leases first. Target p50 ≤ 1 ms.
* Hand-off on expiry: a lease of 50 ms that nobody renews; latency = the waiter's
  clock_timestamp() after it got the key − the old lease's expires_at. Targets p50 ≤ 1 ms,
  p99 ≤ 5 ms (the bounded wait's precision).
* WAL: bytes of WAL per lease granted and released, per renewal, and per session lock taken and
  released (pg_current_wal_insert_lsn() around a loop of calls from one connection, autocommit;
  the instance is otherwise idle). Since 0.6.0 a grant and a release are WAL records (leases
  survive restarts and failover: docs/reliability.md); a renewal is not logged.
* Memory: shared memory of the lease table (pg_shmem_allocations) on two instances that differ
  only in advlock.max_leases: bytes per lease entry.
"""
from __future__ import annotations

import dataclasses
import os

import psycopg

from .case_acquire import pgbench
from .case_preload import _instance, _stop
from .common import Ctx, Worker, check, md_table, median, percentile, target, wait_until

PATTERNS = {
    "session lock: advlock_try_with_timeout + advlock_unlock":
        "SELECT advlock_try_with_timeout(:k, 0, 'session'), advlock_unlock(:k);",
    "lease: advlock_lease + advlock_lease_release":
        "SELECT advlock_lease_release(advlock_lease(:k, 30000, 0));",
}
LOCK, LEASE = list(PATTERNS)
KEY = r"\set k random(1, 100000000000000)"
WAIT = ("SELECT l, clock_timestamp() FROM (SELECT advlock_lease(%s, 30000, 10000) AS l OFFSET 0) s")
RELEASE = "SELECT t, advlock_lease_release(%s) FROM (SELECT clock_timestamp() AS t OFFSET 0) s"


def _waiting(admin, key: int) -> bool:
    return admin.execute("SELECT count(*) FROM advlock_leases WHERE key = %s AND NOT granted",
                         (key,)).fetchone()[0] == 1


def _handoffs(lctx: Ctx, samples: int) -> dict:
    admin = lctx.connect(app="bench-lease-admin")
    holder = lctx.connect(app="bench-lease-holder")
    waiter = Worker(lctx, "bench-lease-waiter")
    release_ms, expiry_ms = [], []
    try:
        for i in range(samples):
            key = 0x0C0D_0000_0000 + i
            lease = holder.execute("SELECT advlock_lease(%s, 30000, 0)", (key,)).fetchone()[0]
            fut = waiter.submit(lambda c: c.execute(WAIT, (key,)).fetchone())
            wait_until(lambda: _waiting(admin, key), 10, "the lease waiter to queue")
            t_rel, released = holder.execute(RELEASE, (lease,)).fetchone()
            got, t_acq = fut.result(timeout=15)
            check(released and got and got > lease, "release hand-off failed")
            release_ms.append((t_acq - t_rel).total_seconds() * 1000)
            waiter.submit(lambda c: c.execute("SELECT advlock_lease_release(%s)", (got,))).result(10)
            # Expiry: a 50 ms lease nobody renews.
            key += 1 << 20
            holder.execute("SELECT advlock_lease(%s, 50, 0)", (key,))
            (expires,) = holder.execute("SELECT expires_at FROM advlock_leases WHERE key = %s AND granted",
                                        (key,)).fetchone()
            fut = waiter.submit(lambda c: c.execute(WAIT, (key,)).fetchone())
            got, t_acq = fut.result(timeout=15)
            check(got is not None, "expiry hand-off failed")
            expiry_ms.append((t_acq - expires).total_seconds() * 1000)
            waiter.submit(lambda c: c.execute("SELECT advlock_lease_release(%s)", (got,))).result(10)
    finally:
        waiter.close()
        holder.close()
        admin.close()
    return {"release_ms": release_ms, "expiry_ms": expiry_ms}


def _wal_bytes(lctx: Ctx, calls: int) -> dict[str, float]:
    """WAL bytes per call of each pattern, one autocommit statement per call."""
    key = 0x0C0E_0000_0000
    loops = {
        "lease granted and released": lambda c, i: c.execute(
            "SELECT advlock_lease_release(advlock_lease(%s, 30000, 0))", (key + i,)),
        "session lock taken and released": lambda c, i: c.execute(
            "SELECT advlock_try_with_timeout(%s, 0, 'session'), advlock_unlock(%s)", (key + i, key + i)),
    }
    out = {}
    with lctx.connect(app="bench-lease-wal") as c:
        (lease,) = c.execute("SELECT advlock_lease(%s, 30000, 0)", (key - 1,)).fetchone()
        loops["lease renewed"] = lambda c, i: c.execute("SELECT advlock_lease_renew(%s, 30000)", (lease,))
        for name, call in loops.items():
            call(c, 0)  # warm: the first call of a backend may log more (a token batch, a catalog read)
            (start,) = c.execute("SELECT pg_current_wal_insert_lsn()").fetchone()
            for i in range(1, calls + 1):
                call(c, i)
            (end,) = c.execute("SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), %s)", (start,)).fetchone()
            out[name] = float(end) / calls
        c.execute("SELECT advlock_lease_release(%s)", (lease,))
    return out


def _table_bytes(dsn: str) -> int:
    with psycopg.connect(dsn, autocommit=True) as c:
        return c.execute("SELECT allocated_size FROM pg_shmem_allocations WHERE name = 'advlock leases'").fetchone()[0]


def run(ctx: Ctx) -> dict:
    seconds, rounds, samples = ctx.size(8, 1), ctx.size(3, 1), ctx.size(200, 5)
    port = ctx.port + 13
    works = []
    try:
        work = _instance(ctx, "leases", port, ["shared_preload_libraries = 'advlock'"])
        works.append(work)
        lctx = dataclasses.replace(ctx, port=port, dbname="postgres")
        dsn = lctx.dsn
        with psycopg.connect(dsn, autocommit=True) as c:
            c.execute("CREATE EXTENSION IF NOT EXISTS advlock")
        scripts = {}
        for name, sql in PATTERNS.items():
            path = os.path.join(ctx.work, f"case10-{len(scripts)}.sql")
            with open(path, "w") as f:
                f.write("\n".join([KEY, sql]) + "\n")
            scripts[name] = path
        tps = {name: [] for name in PATTERNS}
        for _ in range(rounds):
            for name, path in scripts.items():
                tps[name].append(pgbench(lctx, path, 1, seconds, "prepared"))
        handoffs = _handoffs(lctx, samples)
        wal = _wal_bytes(lctx, ctx.size(2000, 50))
        small = _table_bytes(dsn)
        work2 = _instance(ctx, "leases-2x", port + 1, ["shared_preload_libraries = 'advlock'",
                                                       "advlock.max_leases = 2048"])
        works.append(work2)
        large = _table_bytes(f"host=127.0.0.1 port={port + 1} user=postgres dbname=postgres")
    finally:
        for w in works:
            _stop(w, ctx.pgbin)
    return {"tps": tps, "seconds": seconds, "rounds": rounds, "samples": samples, **handoffs, "wal_bytes": wal,
            "table_bytes_1024": small, "bytes_per_lease": (large - small) / 1024}


def render(res: dict, ctx: Ctx) -> tuple[str, list[dict]]:
    us = {name: 1e6 / median(v) for name, v in res["tps"].items()}
    ratio = us[LEASE] / us[LOCK]
    rel, exp = res["release_ms"], res["expiry_ms"]
    rows = [[name, f"{median(res['tps'][name]):,.0f}", f"{us[name]:.1f}", f"{us[name] / us[LOCK]:.2f}×"]
            for name in PATTERNS]
    hand = [["on release", len(rel), f"{percentile(rel, 50):.2f}", f"{percentile(rel, 99):.2f}", f"{max(rel):.2f}"],
            ["on expiry", len(exp), f"{percentile(exp, 50):.2f}", f"{percentile(exp, 99):.2f}", f"{max(exp):.2f}"]]
    targets = [
        target("10", "a lease (acquire + release, uncontended) costs ≤ 1.5× a session lock",
               f"{ratio:.2f}× ({us[LOCK]:.1f} → {us[LEASE]:.1f} µs)", ratio <= 1.5, value=ratio),
        target("10", "hand-off on release: p50 ≤ 1 ms", f"{percentile(rel, 50):.2f} ms", percentile(rel, 50) <= 1.0,
               value=percentile(rel, 50)),
        target("10", "hand-off on expiry: p50 ≤ 1 ms", f"{percentile(exp, 50):.2f} ms", percentile(exp, 50) <= 1.0,
               value=percentile(exp, 50)),
        target("10", "hand-off on expiry: p99 ≤ 5 ms late", f"{percentile(exp, 99):.2f} ms", percentile(exp, 99) <= 5.0,
               value=percentile(exp, 99)),
    ]
    md = "\n".join([
        f"Preloaded instance. Cost: pgbench, 1 client, prepared, {res['seconds']} s per run, "
        f"{res['rounds']} alternating rounds, median.",
        "",
        md_table(["pattern", "tps", "µs per call", "vs session lock"], rows, align="lrrr"),
        "",
        f"Hand-off latency, server clock, {res['samples']} samples each (ms):",
        "",
        md_table(["hand-off", "n", "p50", "p99", "max"], hand, align="lrrrr"),
        "",
        *([f"WAL per call (bytes; pg_current_wal_insert_lsn() around {ctx.size(2000, 50):,} calls, one connection, "
            "autocommit; the instance's fsync and synchronous_commit are off, so the costs above include writing "
            "these records but not waiting for a disk):", "",
            md_table(["call", "WAL bytes per call"], [[n, f"{b:.0f}"] for n, b in res["wal_bytes"].items()],
                     align="lr"), ""] if "wal_bytes" in res else []),
        f"Shared memory: the lease table takes {res['table_bytes_1024']:,} bytes at advlock.max_leases = 1024 "
        f"(with one waiter entry per backend); each lease entry adds {res['bytes_per_lease']:.0f} bytes.",
    ])
    return md, targets
