"""Backend CPU (ns on CPU, /proc/<pid>/schedstat) per client transaction with
advlock.idle_session_lock_timeout 0 (off) vs 60s (on: armed at every transaction end), rounds
interleaved. Statements: SELECT 1, and the uncontended acquire path
advlock_try_with_timeout(42, 0, 'xact') (one transaction each, autocommit). Run as root on the
server's machine (it reads the backends' /proc entries), against a database with advlock:

    pg_test/.venv/bin/python cpu_per_transaction.py "host=... port=... dbname=..." 10000 15
"""
import statistics
import sys

import psycopg

dsn = sys.argv[1]
N = int(sys.argv[2]) if len(sys.argv) > 2 else 10000
ROUNDS = int(sys.argv[3]) if len(sys.argv) > 3 else 15


def oncpu(pid):
    with open(f"/proc/{pid}/schedstat") as f:
        return int(f.read().split()[0])


conns = {}
for v in ("0", "60s"):
    c = psycopg.connect(dsn, autocommit=True, options=f"-c advlock.idle_session_lock_timeout={v}")
    assert c.execute("SHOW advlock.idle_session_lock_timeout").fetchone()[0] == ("0" if v == "0" else "1min")
    conns[v] = c
stmts = {"SELECT 1": "SELECT 1", "acquire xact": "SELECT advlock_try_with_timeout(42, 0, 'xact')"}
res = {(s, v): [] for s in stmts for v in conns}
for rnd in range(ROUNDS):
    for s, q in stmts.items():
        for v, c in (conns.items() if rnd % 2 == 0 else reversed(list(conns.items()))):
            pid = c.info.backend_pid
            for _ in range(500):
                c.execute(q)
            t0 = oncpu(pid)
            for _ in range(N):
                c.execute(q)
            res[(s, v)].append((oncpu(pid) - t0) / N)
for s in stmts:
    off, on = res[(s, "0")], res[(s, "60s")]
    print(f"{s}: backend CPU per transaction over {ROUNDS} interleaved rounds of {N}: "
          f"min off {min(off)/1000:.2f} us, on {min(on)/1000:.2f} us (on/off {min(on)/min(off):.3f}); "
          f"median off {statistics.median(off)/1000:.2f} us, on {statistics.median(on)/1000:.2f} us (on/off {statistics.median(on)/statistics.median(off):.3f})")
