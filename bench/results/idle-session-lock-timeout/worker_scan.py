"""What a background worker would pay per poll to find the backends idle (outside a
transaction) holding advisory locks: 100 idle sessions holding 10 session locks each and 50
idle sessions holding none, scanned 300 times by advlock_leak_count('0') and by the
pg_locks / pg_stat_activity join a worker written in SQL would run.

    pg_test/.venv/bin/python worker_scan.py "host=... port=... dbname=..."   (max_connections >= 160)
"""
import statistics
import sys
import time

import psycopg

dsn = sys.argv[1]
holders = []
for i in range(100):
    c = psycopg.connect(dsn, autocommit=True, application_name=f"holder{i}")
    c.execute("SELECT pg_advisory_lock(k) FROM generate_series(%s::int8, %s::int8) k", (i * 10, i * 10 + 9))
    holders.append(c)
others = [psycopg.connect(dsn, autocommit=True) for _ in range(50)]
m = psycopg.connect(dsn, autocommit=True)
m.execute("SET advlock.idle_threshold = 0")
queries = {
 "advlock_leak_count(0) (Rust, candidates' lock lists only)": "SELECT advlock_leak_count('0')",
 "pg_locks JOIN pg_stat_activity (what a worker written in SQL runs)":
   "SELECT count(DISTINCT l.pid) FROM pg_locks l JOIN pg_stat_activity a USING (pid) "
   "WHERE l.locktype = 'advisory' AND l.granted AND a.state = 'idle' AND a.state_change < now() - interval '0'",
}
for name, q in queries.items():
    for _ in range(20):
        m.execute(q)
    times = []
    for _ in range(300):
        t = time.perf_counter()
        r = m.execute(q).fetchone()[0]
        times.append((time.perf_counter() - t) * 1000)
    print(f"{name}: result {r}; median {statistics.median(times):.3f} ms, p90 {sorted(times)[270]:.3f} ms per poll")
