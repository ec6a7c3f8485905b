"""advlock.idle_session_lock_timeout never touches a lease: a session idle past the setting that
holds a lease (and no advisory lock) stays, and so does its lease (docs/idle-session-locks.md).
The same session holding a session lock too is terminated: the setting was in effect."""
import time

import psycopg
from psycopg import errors

import pgsupport
from conftest import needs_preload

TIMEOUT_MS = 300


def connect(app):
    return psycopg.connect(pgsupport.conninfo(app, options=f"-c advlock.idle_session_lock_timeout={TIMEOUT_MS}"),
                           autocommit=True)


def alive(admin, pid):
    return admin.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = %s", (pid,)).fetchone()[0] == 1


@needs_preload
def test_idle_lease_holder_is_left_alone(admin):
    with connect("advlock-test/idle-lease") as conn:
        pid = conn.info.backend_pid
        lease = conn.execute("SELECT advlock_lease(7901, 60000, 0)").fetchone()[0]
        assert lease is not None
        time.sleep(TIMEOUT_MS / 1000 * 3)
        assert alive(admin, pid)
        assert admin.execute("SELECT count(*) FROM advlock_leases WHERE lease = %s AND granted",
                             (lease,)).fetchone()[0] == 1
        assert conn.execute("SELECT advlock_lease_release(%s)", (lease,)).fetchone()[0] is True
        # The setting is in effect in this session: a session lock left idle ends it.
        conn.execute("SELECT pg_advisory_lock(7901)")
        time.sleep(TIMEOUT_MS / 1000 * 3)
        assert not alive(admin, pid)
        try:
            conn.execute("SELECT 1")
            raise AssertionError("the session holding a session lock was not terminated")
        except errors.IdleSessionTimeout:
            pass
