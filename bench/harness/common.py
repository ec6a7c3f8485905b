"""Shared pieces of the benchmark harness: the run context, connections, statistics, tables."""
from __future__ import annotations

import dataclasses
import math
import os
import re
import shutil
import signal
import subprocess
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
    lib: str = ""

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


def target(case: str, text: str, measured: str, ok: bool, note: str = "", *, value: float,
           better: str = "lower") -> dict:
    """One target's outcome. `value` is its headline figure (the ratio, the latency, the worst
    level's ratio) and `better` says which way it improves ("lower" or "higher"): what
    `bench/run.sh --baseline` compares between two builds (harness/compare.py)."""
    if better not in ("lower", "higher"):
        raise HarnessError(f"target {case} {text!r}: better must be 'lower' or 'higher', not {better!r}")
    return {"case": case, "target": text, "measured": measured, "ok": bool(ok), "note": note,
            "value": float(value), "better": better}


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


# --- perf profiles of a backend -------------------------------------------------------------

SKIP_FRAMES = {"main", "PostmasterMain", "PostgresMain", "__libc_start_call_main", "postmaster_child_launch",
               "PortalRun", "standard_ProcessUtility", "ProcessUtility", "DoCopy", "DoCopyTo",
               "standard_ExecutorRun", "ExecutorRun", "exec_simple_query", "PortalRunUtility",
               "PortalRunMulti", "PortalRunSelect", "BackendMain", "ServerLoop", "BackendStartup",
               "__libc_start_main_impl", "_start", "__libc_start_main", "ExecProcNode", "ExecProcNodeFirst",
               "exec_execute_message", "exec_bind_message"}


def _perf_report(perf: str, data: str, children: bool, unnamed: bool = False) -> list[tuple[float, float, str]]:
    """(inclusive %, self %, "dso: symbol") rows of `perf report`; frames without a symbol only
    when `unnamed`."""
    args = [perf, "report", "-i", data, "--stdio", "--sort", "dso,symbol", "-g", "none",
            "--children" if children else "--no-children"]
    out = subprocess.run(args, capture_output=True, text=True, timeout=180).stdout
    rows = []
    pat = re.compile(r"^\s*([\d.]+)%\s+(?:([\d.]+)%\s+)?(\S+)\s+\[(.)\]\s+(.*?)(?:\s+-\s+-)?\s*$")
    for line in out.splitlines():
        m = pat.match(line)
        if not m or line.startswith("#"):
            continue
        incl, self_, dso, kind, sym = m.groups()
        if not unnamed and (dso == "[unknown]" or sym.startswith("0x") or re.fullmatch(r"[0-9a-f]+", sym)):
            continue
        rows.append((float(incl), float(self_ if self_ is not None else incl),
                     f"{dso}: {sym}" + (" [kernel]" if kind == "k" else "")))
    return rows


def perf_profile(ctx: Ctx, pid: int, workload: Callable[[], object], seconds: float, tag: str) -> dict:
    """Samples backend `pid` with `perf record -e cpu-clock -g` while workload() runs in a loop.
    Returns top inclusive/self symbols, or {"error": ...} when perf is missing or not permitted."""
    perf = shutil.which("perf")
    if not perf:
        return {"error": "perf not installed (Debian package linux-perf); no profile"}
    data = f"{ctx.work}/{tag}.perf.data"
    p = subprocess.Popen([perf, "record", "-q", "-e", "cpu-clock", "-F", "2999", "-g", "-o", data, "-p", str(pid)],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    time.sleep(0.3)
    if p.poll() is not None:
        return {"error": "perf record failed: " + p.stderr.read().decode(errors="replace")[-300:]}
    t, runs = time.perf_counter(), 0
    try:
        while time.perf_counter() - t < seconds:
            workload()
            runs += 1
    finally:
        p.send_signal(signal.SIGINT)
        p.wait(timeout=60)
    incl = [r for r in _perf_report(perf, data, True)
            if r[2].split(": ", 1)[1] not in SKIP_FRAMES and not r[2].endswith("[kernel]")]
    self_rows = _perf_report(perf, data, False)
    by_dso: dict[str, float] = {}
    for pct, _, name in _perf_report(perf, data, False, unnamed=True):
        dso = name.split(":", 1)[0]
        by_dso[dso] = by_dso.get(dso, 0) + pct
    return {"runs": runs, "seconds": seconds, "inclusive": incl[:20], "self": self_rows[:15],
            "self_all": self_rows[:200],
            "by_dso": sorted(by_dso.items(), key=lambda kv: -kv[1])}


def perf_md(p: dict, what: str) -> str:
    if "error" in p:
        return f"Profile of {what}: {p['error']}.\n"
    runs = f" in a loop for {p['seconds']:.0f} s ({p['runs']} runs)" if p.get("runs") else f" for {p['seconds']:.0f} s"
    head = (f"perf (`cpu-clock`, call graphs) of the backend running {what}{runs}. Samples by shared object: "
            + ", ".join(f"{d} {pct:.1f}%" for d, pct in p["by_dso"][:6]) + ".")
    head += "\n"
    incl = md_table(["inclusive %", "self %", "function (entry frames and unnamed frames omitted)"],
                    [[f"{a:.1f}", f"{b:.1f}", f"`{s}`"] for a, b, s in p["inclusive"]])
    slf = md_table(["self %", "function"], [[f"{a:.1f}", f"`{s}`"] for a, _, s in p["self"]])
    return (f"{head}\n<details><summary>inclusive (call-graph) view</summary>\n\n{incl}\n\n</details>\n\n"
            f"Top functions by self time:\n\n{slf}\n")
