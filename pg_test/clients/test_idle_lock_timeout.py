"""advlock.idle_session_lock_timeout against real sessions (docs/idle-session-locks.md).

A session idle outside a transaction past the setting while it holds a session-level advisory
lock is terminated (FATAL 57P05, which psycopg raises as IdleSessionTimeout), and the waiter
gets the lock; an active holder, an idle-in-transaction holder, a session that set it to 0 and
a session holding nothing are left alone; ALTER ROLE ... SET and a reload change the value.

The suite's instance is not preloaded: a session has the setting once it has loaded advlock,
by calling one of its functions or through session_preload_libraries (both are used here)."""
import os
import re
import time

import psycopg
import pytest
from psycopg import errors
from psycopg_pool import ConnectionPool

from pgsupport import STATEMENT_TIMEOUT_MS, conninfo, psy, wait_until

TIMEOUT_MS = 400
SETTING = "advlock.idle_session_lock_timeout"


def options(timeout_ms=TIMEOUT_MS, preload=False):
    opts = f"-c statement_timeout={STATEMENT_TIMEOUT_MS} -c {SETTING}={timeout_ms}"
    return opts + (" -c session_preload_libraries=advlock" if preload else "")


def alive(admin, pid):
    return admin.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = %s", (pid,)).fetchone()[0] == 1


def server_log():
    workdir = os.environ.get("ADVLOCK_WORKDIR")
    if not workdir:
        pytest.fail("ADVLOCK_WORKDIR is not set: run this file through pg_test/run.sh clients")
    with open(os.path.join(workdir, "postgres.log"), encoding="utf-8", errors="replace") as f:
        return f.read()


def preloaded(admin):
    return "advlock" in admin.execute("SHOW shared_preload_libraries").fetchone()[0]


def test_pooled_connection_lock_is_cleared_and_the_waiter_gets_it(admin):
    """psycopg_pool keeps a connection returned with a session lock; the setting ends it."""
    app = "advlock-test/idle-pool"
    # The log names a labelled key as ns:id when advlock records labels (preloaded), else
    # by its bigint key.
    key = "idle-jobs:1" if preloaded(admin) else str(
        admin.execute("SELECT advlock_key('idle-jobs', 1)").fetchone()[0])
    pool = ConnectionPool(conninfo(app, options=options()), min_size=1, max_size=1,
                          kwargs={"autocommit": True}, check=ConnectionPool.check_connection, open=True)
    try:
        with pool.connection() as conn:
            pid = conn.info.backend_pid
            assert conn.execute("SELECT advlock_try_with_timeout('idle-jobs', 1, 0, 'session')").fetchone()[0]
        returned = time.monotonic()   # back in the pool, idle, still holding the lock
        with psy("advlock-test/idle-waiter") as waiter:
            # Raises 55P03 if the lock is still held after 10 s.
            waiter.execute("SELECT advlock_lock_with_timeout('idle-jobs', 1, 10000, 'session')")
            waited = time.monotonic() - returned
            assert waiter.execute("SELECT advlock_holding('idle-jobs', 1)").fetchone()[0] is True
            assert waited < TIMEOUT_MS / 1000 + 1, f"lock cleared after {waited:.3f} s"
            assert waited >= TIMEOUT_MS / 1000 * 0.9, f"cleared too early: {waited:.3f} s"
            waiter.execute("SELECT advlock_unlock('idle-jobs', 1)")
        assert not alive(admin, pid)
        # The pool's check replaces the terminated connection at the next checkout.
        with pool.connection() as conn:
            assert conn.execute("SELECT 1").fetchone()[0] == 1
            assert conn.info.backend_pid != pid
        log = server_log()
        line = next((ln for ln in log.splitlines() if f"pid {pid} " in ln and "idle_session_lock_timeout" in ln), None)
        assert line is not None, "no log line for the terminated session"
        assert re.search(r"FATAL:  terminating connection due to advlock\.idle_session_lock_timeout: "
                         rf"pid {pid} \(application_name \"{re.escape(app)}\"\) idle for \d+\.\d{{3}} s "
                         rf"holding session advisory lock {re.escape(key)}$", line), line
    finally:
        pool.close()


def test_client_gets_fatal_57p05_naming_pid_app_keys_and_idle_time(admin):
    app = "advlock-test/idle-client"
    conn = psycopg.connect(conninfo(app, options=options(preload=True)), autocommit=True)
    pid = conn.info.backend_pid
    conn.execute("SELECT pg_advisory_lock(424242)")      # a plain built-in lock
    conn.execute("SELECT pg_advisory_lock_shared(7, 8)")
    time.sleep(TIMEOUT_MS / 1000 + 0.6)
    with pytest.raises(errors.IdleSessionTimeout) as caught:
        conn.execute("SELECT 1")
    e = caught.value
    assert e.sqlstate == "57P05"
    assert f"pid {pid} (application_name \"{app}\")" in str(e)
    assert "holding session advisory locks (7,8) (shared), 424242" in str(e)
    idle = re.search(r"idle for (\d+\.\d{3} s)", str(e))
    assert idle, str(e)
    assert TIMEOUT_MS / 1000 <= float(idle.group(1)[:-2]) < TIMEOUT_MS / 1000 + 1
    assert e.diag.message_detail == (
        "2 session-level advisory locks held while idle outside a transaction for "
        f"{idle.group(1)}; {SETTING} is {TIMEOUT_MS} ms. Exiting releases them.")
    assert "SET advlock.idle_session_lock_timeout = 0" in e.diag.message_hint
    conn.close()
    wait_until(lambda: not alive(admin, pid), what=f"PID {pid} to exit")


def hold_then_check(admin, conn, pid, key):
    """Waits well past the timeout, then checks the session is alive and still holds key."""
    time.sleep(TIMEOUT_MS / 1000 * 3)
    assert alive(admin, pid)
    held = admin.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = %s"
                         " AND objid = %s AND granted", (pid, key)).fetchone()[0]
    assert held == 1


def test_active_holder_is_left_alone(admin):
    with psycopg.connect(conninfo("advlock-test/idle-active", options=options(preload=True)),
                         autocommit=True) as conn:
        pid = conn.info.backend_pid
        conn.execute("SELECT pg_advisory_lock(424243)")
        # One statement running three times the timeout, holding the lock throughout; then
        # released in the same statement, before the session goes idle.
        conn.execute(f"SELECT pg_sleep({TIMEOUT_MS / 1000 * 3}), pg_advisory_unlock(424243)")
        assert alive(admin, pid)
        assert conn.execute("SELECT 1").fetchone()[0] == 1


def test_idle_in_transaction_holder_is_left_alone(admin):
    with psycopg.connect(conninfo("advlock-test/idle-in-xact", options=options(preload=True))) as conn:
        pid = conn.info.backend_pid
        conn.execute("SELECT pg_advisory_lock(424244)")   # session lock, taken in a transaction
        hold_then_check(admin, conn, pid, 424244)          # idle in transaction meanwhile
        conn.execute("SELECT pg_advisory_unlock(424244)")
        conn.commit()
        assert alive(admin, pid)


def test_session_that_set_it_to_0_is_left_alone(admin):
    with psycopg.connect(conninfo("advlock-test/idle-leader", options=options(preload=True)),
                         autocommit=True) as conn:
        pid = conn.info.backend_pid
        conn.execute(f"SET {SETTING} = 0")   # a leader's dedicated connection opts out
        conn.execute("SELECT pg_advisory_lock(424245)")
        hold_then_check(admin, conn, pid, 424245)
        conn.execute("SELECT pg_advisory_unlock(424245)")


def test_idle_session_holding_nothing_is_left_alone(admin):
    with psycopg.connect(conninfo("advlock-test/idle-empty", options=options(preload=True)),
                         autocommit=True) as conn:
        pid = conn.info.backend_pid
        conn.execute("SELECT pg_advisory_lock(424246)")
        conn.execute("SELECT pg_advisory_unlock(424246)")
        time.sleep(TIMEOUT_MS / 1000 * 3)
        assert alive(admin, pid)
        assert conn.execute("SELECT 1").fetchone()[0] == 1


def terminated_within(admin, conn, key, limit_s):
    """Takes session lock `key` on conn, goes idle, and waits for the backend to be gone."""
    pid = conn.info.backend_pid
    conn.execute("SELECT pg_advisory_lock(%s)", (key,))
    start = time.monotonic()
    wait_until(lambda: not alive(admin, pid), timeout=limit_s, what=f"PID {pid} to be terminated")
    return time.monotonic() - start


def test_alter_role_set_changes_the_value(admin):
    role = "advlock_idle_role"
    admin.execute(f"DROP ROLE IF EXISTS {role}")
    admin.execute(f"CREATE ROLE {role} LOGIN")
    try:
        admin.execute(f"ALTER ROLE {role} SET {SETTING} = '300ms'")
        admin.execute(f"ALTER ROLE {role} SET session_preload_libraries = 'advlock'")
        dsn = conninfo("advlock-test/idle-role", user=role)
        with psycopg.connect(dsn, autocommit=True) as conn:
            assert conn.execute(f"SHOW {SETTING}").fetchone()[0] == "300ms"
            took = terminated_within(admin, conn, 424247, 1.3)
            assert took >= 0.25
        admin.execute(f"ALTER ROLE {role} SET {SETTING} = 0")
        with psycopg.connect(dsn, autocommit=True) as conn:
            assert conn.execute(f"SHOW {SETTING}").fetchone()[0] == "0"
            pid = conn.info.backend_pid
            conn.execute("SELECT pg_advisory_lock(424247)")
            time.sleep(0.9)
            assert alive(admin, pid)
            conn.execute("SELECT pg_advisory_unlock(424247)")
    finally:
        admin.execute(f"DROP ROLE IF EXISTS {role}")


def test_reload_changes_the_value(admin):
    dsn = conninfo("advlock-test/idle-reload",
                   options=f"-c statement_timeout={STATEMENT_TIMEOUT_MS} -c session_preload_libraries=advlock")
    admin.execute("LOAD 'advlock'")   # ALTER SYSTEM checks the setting exists
    try:
        admin.execute(f"ALTER SYSTEM SET {SETTING} = '300ms'")
        admin.execute("SELECT pg_reload_conf()")
        with psycopg.connect(dsn, autocommit=True) as conn:
            wait_until(lambda: conn.execute(f"SHOW {SETTING}").fetchone()[0] == "300ms",
                       what="the reloaded value")
            terminated_within(admin, conn, 424248, 1.3)
        admin.execute(f"ALTER SYSTEM RESET {SETTING}")
        admin.execute("SELECT pg_reload_conf()")
        with psycopg.connect(dsn, autocommit=True) as conn:
            wait_until(lambda: conn.execute(f"SHOW {SETTING}").fetchone()[0] == "0",
                       what="the reset value")
            pid = conn.info.backend_pid
            conn.execute("SELECT pg_advisory_lock(424248)")
            time.sleep(0.9)
            assert alive(admin, pid)
            conn.execute("SELECT pg_advisory_unlock(424248)")
    finally:
        admin.execute(f"ALTER SYSTEM RESET {SETTING}")
        admin.execute("SELECT pg_reload_conf()")
