"""A backend killed with SIGKILL: the postmaster terminates every backend and reinitialises
shared memory (crash restart); afterwards no advisory lock survives and advlock works.

Marked `crash`: conftest.py runs it after everything else (it drops every connection).
"""
import os
import signal
import threading
import time

import psycopg
import pytest

from relsupport import WORKDIR, figure, advisory_locks, connect, wait_for_waiter, wait_until


def _connect_when_back():
    def attempt():
        try:
            conn = connect("rel-after-crash")
            conn.execute("SELECT 1")
            return conn
        except psycopg.OperationalError:
            return None
    return wait_until(attempt, timeout=90, interval=0.2, what="the server to accept connections after the crash")


@pytest.mark.crash
def test_sigkill_backend_crash_restart(key):
    admin = connect("rel-crash-admin")
    holder = connect("rel-crash-holder")
    waiter = connect("rel-crash-waiter")
    bystander = connect("rel-crash-bystander")
    holder_pid = holder.execute("SELECT pg_backend_pid()").fetchone()[0]
    assert holder.execute("SELECT advlock_try_with_timeout(%s, 0, 'session')", (key,)).fetchone()[0]
    holder.execute("BEGIN")
    assert holder.execute("SELECT advlock_try_with_timeout(%s, 0)", (key + 1,)).fetchone()[0]
    assert bystander.execute("SELECT advlock_try_with_timeout(%s, 0, 'session', 'shared')", (key + 2,)).fetchone()[0]
    result = {}

    def wait():
        try:
            result["value"] = waiter.execute("SELECT advlock_try_with_timeout(%s, 60000, 'session')",
                                             (key,)).fetchone()[0]
        except Exception as e:  # noqa: BLE001
            result["error"] = e
    t = threading.Thread(target=wait)
    t.start()
    wait_for_waiter(admin, waiter.info.backend_pid, key)
    assert len(advisory_locks(admin)) == 4
    log_size = os.path.getsize(os.path.join(WORKDIR, "postgres.log")) if WORKDIR else 0

    os.kill(holder_pid, signal.SIGKILL)
    killed_at = time.monotonic()

    # Every connection is dropped, the waiter's included (it never gets the lock).
    t.join(timeout=60)
    assert not t.is_alive()
    assert isinstance(result.get("error"), psycopg.OperationalError), result
    for conn in (admin, holder, bystander):
        with pytest.raises(psycopg.OperationalError):
            conn.execute("SELECT 1")
        conn.close()
    waiter.close()

    after = _connect_when_back()
    figure(f"SIGKILL of a backend: server accepting connections again {time.monotonic() - killed_at:.1f} s later")
    try:
        if WORKDIR:
            with open(os.path.join(WORKDIR, "postgres.log"), errors="replace") as f:
                f.seek(log_size)
                log = f.read()
            assert "was terminated by signal 9" in log
            assert "all server processes terminated; reinitializing" in log
        # No advisory lock survives (shared memory was reinitialised), in any database.
        assert after.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'").fetchone()[0] == 0
        assert after.execute("SELECT count(*) FROM advlock_holders").fetchone()[0] == 0
        # And advlock works as before.
        assert after.execute("SELECT advlock_try_with_timeout(%s, 0, 'session')", (key,)).fetchone()[0] is True
        with connect("rel-after-crash-2") as other:
            assert other.execute("SELECT advlock_try_with_timeout(%s, 50, 'session')", (key,)).fetchone()[0] is False
        assert after.execute("SELECT advlock_unlock(%s)", (key,)).fetchone()[0] is True
        assert not advisory_locks(after)
    finally:
        after.close()
