"""What a lease waiter shows in pg_stat_activity, seen from another session: on PostgreSQL 17
and later wait_event_type 'Extension' and wait_event 'AdvlockLeaseWait' (src/wait_events.rs,
WaitEventExtensionNew), for advlock_lease with a timeout and for CALL advlock_wait_lease; on 15
and 16 'Extension' / 'Extension'. A lock wait is the lock manager's: 'Lock' / 'advisory'."""
import threading

import psycopg
import pgsupport
from conftest import needs_preload
from pgsupport import psy


def server_major(conn):
    return int(conn.execute("SHOW server_version_num").fetchone()[0]) // 10000


def expected_lease_wait(conn):
    return "AdvlockLeaseWait" if server_major(conn) >= 17 else "Extension"


def wait_event_of(admin, pid):
    """(wait_event_type, wait_event) of pid once it waits (polled until it does)."""
    def seen():
        row = admin.execute("SELECT wait_event_type, wait_event FROM pg_stat_activity WHERE pid = %s",
                            (pid,)).fetchone()
        return row if row and row[0] in ("Extension", "Lock") else None
    return pgsupport.wait_until(seen, what=f"backend {pid} waiting")


def in_background(conn, sql, params=()):
    result = {}

    def run():
        try:
            result["value"] = conn.execute(sql, params).fetchone()
        except psycopg.Error as e:
            result["error"] = e
    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t, result


@needs_preload
def test_a_lease_waiter_shows_its_named_wait(admin):
    held = admin.execute("SELECT advlock_lease(7301, 60000, 0)").fetchone()[0]
    waiter = psy("advlock-test/lease-wait-event")
    t, result = in_background(waiter, "SELECT advlock_lease(7301, 60000, 10000)")
    try:
        assert wait_event_of(admin, waiter.info.backend_pid) == ("Extension", expected_lease_wait(admin))
    finally:
        assert admin.execute("SELECT advlock_lease_release(%s)", (held,)).fetchone()[0] is True
        t.join(15)
        waiter.close()
    assert not t.is_alive() and "error" not in result, result
    assert admin.execute("SELECT advlock_lease_release(%s)", (result["value"][0],)).fetchone()[0] is True


@needs_preload
def test_a_snapshot_free_lease_wait_shows_the_same_name(admin):
    held = admin.execute("SELECT advlock_lease(7302, 60000, 0)").fetchone()[0]
    waiter = psy("advlock-test/lease-wait-event-call")
    t, result = in_background(waiter, "CALL advlock_wait_lease(7302, 60000, 10000, 1, NULL)")
    try:
        assert wait_event_of(admin, waiter.info.backend_pid) == ("Extension", expected_lease_wait(admin))
    finally:
        assert admin.execute("SELECT advlock_lease_release(%s)", (held,)).fetchone()[0] is True
        t.join(15)
        waiter.close()
    assert not t.is_alive() and "error" not in result, result
    assert admin.execute("SELECT advlock_lease_release(%s)", (result["value"][0],)).fetchone()[0] is True


@needs_preload
def test_the_name_is_listed_by_pg_wait_events(admin):
    if server_major(admin) < 17:
        assert admin.execute("SELECT to_regclass('pg_catalog.pg_wait_events')").fetchone()[0] is None
        return
    # Registered by the first backend of the server that waits for a lease: one that times out.
    held = admin.execute("SELECT advlock_lease(7304, 60000, 0)").fetchone()[0]
    try:
        with psy("advlock-test/lease-wait-event-timeout") as waiter:
            assert waiter.execute("SELECT advlock_lease(7304, 60000, 50)").fetchone()[0] is None
    finally:
        assert admin.execute("SELECT advlock_lease_release(%s)", (held,)).fetchone()[0] is True
    assert admin.execute("SELECT type, description FROM pg_wait_events WHERE name = 'AdvlockLeaseWait'").fetchall() == [
        ("Extension", "Waiting for custom wait event \"AdvlockLeaseWait\" defined by extension module")]


def test_a_lock_waiter_shows_the_lock_managers_wait(admin):
    """advlock's lock waits (advlock_lock_with_timeout, CALL advlock_wait_lock) are the lock
    manager's, which pg_locks and advlock_holders show too."""
    holder = psy("advlock-test/lock-wait-event-holder")
    waiter = psy("advlock-test/lock-wait-event")
    try:
        assert holder.execute("SELECT advlock_try_with_timeout(7303, 0, scope => 'session')").fetchone()[0] is True
        t, result = in_background(waiter, "CALL advlock_wait_lock(7303, 10000, 'exclusive', NULL)")
        assert wait_event_of(admin, waiter.info.backend_pid) == ("Lock", "advisory")
        assert holder.execute("SELECT advlock_unlock(7303)").fetchone()[0] is True
        t.join(15)
        assert not t.is_alive() and result.get("value") == (True,), result
        assert waiter.execute("SELECT advlock_unlock(7303)").fetchone()[0] is True
    finally:
        holder.close()
        waiter.close()
