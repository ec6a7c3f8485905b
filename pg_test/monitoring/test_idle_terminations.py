"""advlock_metrics.idle_terminations and advlock_idle_terminations_total: a session that
advlock.idle_session_lock_timeout terminates while it holds a lock of namespace "idle-count" is
counted under that namespace (preloaded: the counter lives in shared memory); without preload
the column is NULL and the series NaN, like the other counters."""
import math

import psycopg

from monsupport import conninfo, wait_until

NS = "idle-count"


def terminations(admin, ns):
    row = admin.execute("SELECT idle_terminations FROM advlock_metrics WHERE ns IS NOT DISTINCT FROM %s",
                        (ns,)).fetchone()
    return None if row is None else row[0]


def terminate_one_holder(admin):
    """A session holding (NS, 1) goes idle with a 300 ms timeout; returns once it is gone."""
    dsn = psycopg.conninfo.make_conninfo(conninfo("monitoring-idle-leak"),
                                         options="-c advlock.idle_session_lock_timeout=300")
    conn = psycopg.connect(dsn, autocommit=True)
    pid = conn.info.backend_pid
    assert conn.execute("SELECT advlock_try_with_timeout(%s, 1, 0, 'session')", (NS,)).fetchone()[0]
    wait_until(lambda: admin.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = %s",
                                     (pid,)).fetchone()[0] == 0,
               timeout=10, what=f"PID {pid} to be terminated")
    conn.close()


def test_idle_terminations_counted(admin, exporter, preloaded, metrics_view):
    before_view = terminations(admin, NS if preloaded else None)
    before = exporter.scrape().series("advlock_idle_terminations_total", ns=NS if preloaded else "")
    terminate_one_holder(admin)
    after_view = terminations(admin, NS if preloaded else None)
    after = exporter.scrape().series("advlock_idle_terminations_total", ns=NS if preloaded else "")
    if preloaded:
        assert after_view == (before_view or 0) + 1, (before_view, after_view)
        assert len(after) == 1, after
        assert after[0][1] == (before[0][1] if before else 0) + 1, (before, after)
    else:
        assert before_view is None and after_view is None
        assert len(after) == 1 and math.isnan(after[0][1]), after
