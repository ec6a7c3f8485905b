"""Shared pieces of the benchmark harness: the run context, connections, statistics, tables."""
from __future__ import annotations

import dataclasses
import math
import os
import statistics
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Callable, Sequence

import psycopg


@dataclasses.dataclass
class Ctx:
    port: int
    dbname: str
    out: str
    work: str
    pgbin: str
    quick: bool
    profile: str

    @property
    def dsn(self) -> str:
        # TCP over loopback, as applications connect (not the unix socket).
        return f"host=127.0.0.1 port={self.port} user=postgres dbname={self.dbname}"

    def connect(self, autocommit: bool = True, app: str = "advlock-bench") -> psycopg.Connection:
        return psycopg.connect(self.dsn, autocommit=autocommit, application_name=app)

    def size(self, full, quick):
        return quick if self.quick else full


class HarnessError(RuntimeError):
    """The harness itself broke (not a missed target)."""


def check(condition: bool, message: str) -> None:
    if not condition:
        raise HarnessError(message)


def median(xs: Sequence[float]) -> float:
    return statistics.median(xs) if xs else math.nan


def percentile(xs: Sequence[float], p: float) -> float:
    """Linear interpolation between closest ranks (numpy's default), p in [0, 100]."""
    if not xs:
        return math.nan
    s = sorted(xs)
    if len(s) == 1:
        return s[0]
    pos = (len(s) - 1) * p / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def wait_until(predicate: Callable[[], bool], timeout: float, what: str, interval: float = 0.0005) -> None:
    """Polls predicate until true; a bounded deadline so a broken case fails instead of hanging."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise HarnessError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


def is_waiting(admin: psycopg.Connection, pid: int, key: int) -> bool:
    """True when backend `pid` sits in the lock queue for advisory int8 key `key`."""
    classid, objid = (key >> 32) & 0xFFFFFFFF, key & 0xFFFFFFFF
    row = admin.execute(
        "SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND pid = %s AND NOT granted"
        " AND waitstart IS NOT NULL"
        " AND classid = %s AND objid = %s AND objsubid = 1",
        (pid, classid, objid),
    ).fetchone()
    return row is not None


class Worker:
    """One connection driven from its own thread, so it can block server-side while the
    coordinator goes on. submit(fn) runs fn(conn) on that thread and returns a Future."""

    def __init__(self, ctx: Ctx, app: str):
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix=app)
        self.conn: psycopg.Connection = self._pool.submit(ctx.connect, True, app).result()
        self.pid: int = self.conn.info.backend_pid

    def submit(self, fn: Callable[[psycopg.Connection], object]) -> Future:
        return self._pool.submit(fn, self.conn)

    def close(self) -> None:
        try:
            self._pool.submit(self.conn.close).result(timeout=10)
        finally:
            self._pool.shutdown(wait=False)


def fmt_ms(x: float, digits: int = 2) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "–"
    return f"{x:.{digits}f}"


def fmt_ratio(x: float) -> str:
    return "–" if x is None or math.isnan(x) else f"{x:.2f}×"


def md_table(headers: Sequence[str], rows: Sequence[Sequence[object]], align: str | None = None) -> str:
    align = align or ("l" + "r" * (len(headers) - 1))
    sep = ["---:" if a == "r" else ":---:" if a == "c" else "---" for a in align]
    lines = ["| " + " | ".join(headers) + " |", "| " + " | ".join(sep) + " |"]
    for r in rows:
        lines.append("| " + " | ".join(str(c) for c in r) + " |")
    return "\n".join(lines)


def target(case: str, text: str, measured: str, ok: bool, note: str = "") -> dict:
    return {"case": case, "target": text, "measured": measured, "ok": bool(ok), "note": note}


def backend_cpu_ns(pid: int) -> tuple[int, int]:
    """CPU time of another process: (ns from its CPU-time clock, ms from /proc/<pid>/stat
    utime+stime, which only has clock-tick resolution). The harness runs on the server machine."""
    clock = ((~pid) << 3) | 2  # MAKE_PROCESS_CPUCLOCK(pid, CPUCLOCK_SCHED)
    ns = time.clock_gettime_ns(clock)
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    ticks = int(fields[11]) + int(fields[12])  # utime, stime (fields 14, 15 of the whole line)
    return ns, ticks * 1000 // os.sysconf("SC_CLK_TCK")


_lock = threading.Lock()


def log(msg: str) -> None:
    with _lock:
        print(f"bench: {msg}", flush=True)
