"""Side measurement for NOTES.md: what recorded labels cost advlock_holder_entries(), per
advlock.max_labels value. Not part of bench/run.sh. Run as root from anywhere:

    pg_test/.venv/bin/python bench/results/case5-holders-at-scale/labels_experiment.py 4096 131072 262144 1000000

One preloaded instance per value (port 5440, bench settings), 4 sessions holding 20,000 then
100,000 session locks through advlock; backend CPU of COPY (q) TO STDOUT, median of 5."""
from __future__ import annotations

import os
import statistics
import subprocess
import sys

import psycopg

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
sys.path.insert(0, os.path.join(REPO, "bench"))
from harness.case_holders import INSTANCE_CONF, _copy_ms  # noqa: E402

PORT = 5440
QUERIES = {
    "count": "SELECT count(*) FROM advlock_holders",
    "feed": "SELECT * FROM advlock_holder_entries()",
    "view": "SELECT * FROM advlock_holders",
    "classic count": ("SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a USING (pid) "
                      "WHERE l.locktype = 'advisory'"),
}


def sh(script: str, check: bool = True) -> None:
    subprocess.run(["bash", "-c", f". '{REPO}/pg_test/instance.sh'; {script}"], check=check, capture_output=True)


def one(max_labels: str) -> None:
    work = f"/tmp/labexp-{max_labels}"
    conf = INSTANCE_CONF + ["shared_preload_libraries = 'advlock'", f"advlock.max_labels = {max_labels}"]
    lines = " ".join("'" + line.replace("'", "'\\''") + "'" for line in conf)
    sh(f"rm -rf {work}; instance_start {work} {PORT} {lines}")
    try:
        dsn = f"host=127.0.0.1 port={PORT} user=postgres dbname=postgres"
        m = psycopg.connect(dsn, autocommit=True)
        m.execute("CREATE EXTENSION advlock")
        holders = [psycopg.connect(dsn, autocommit=True) for _ in range(4)]
        made = 0
        for n in (20_000, 100_000):
            per = (n - made) // 4
            for j, h in enumerate(holders):
                h.execute("SELECT count(*) FILTER (WHERE advlock_try_with_timeout('x', g, 0, scope => 'session')) "
                          "FROM generate_series(%s::bigint, %s::bigint) g", (made + j * per + 1, made + (j + 1) * per))
            made = n
            (labels,) = m.execute("SELECT count(label) FROM advlock_holders").fetchone()
            for q in QUERIES.values():
                _copy_ms(m, q)
            cpu: dict[str, list[float]] = {k: [] for k in QUERIES}
            for _ in range(5):
                for k, q in QUERIES.items():
                    cpu[k].append(_copy_ms(m, q)[0])
            print(f"max_labels={max_labels} n={n} labels={labels}: "
                  + ", ".join(f"{k} {statistics.median(v):.1f} ms" for k, v in cpu.items()), flush=True)
        for c in holders + [m]:
            c.close()
    finally:
        sh(f"instance_stop {work}; rm -rf {work}", check=False)


if __name__ == "__main__":
    for value in sys.argv[1:]:
        one(value)
