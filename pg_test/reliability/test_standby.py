"""Hot standby: a real streaming replica of the test instance (pg_basebackup -R -X stream).

On a standby, advisory locks coordinate only that standby's sessions, so the acquisition
functions refuse (25006, with a HINT naming advlock.allow_on_standby) unless the caller opts
in; opted in they work, standby-local; the diagnostics work there too.
"""
import os
import shutil
import threading
import time

import psycopg
import pytest

from relsupport import (PGBIN, PORT, STANDBY_PORT, WORKDIR, as_postgres, connect,
                        wait_until)

ACQUIRE_CALLS = [
    ("advlock_try_with_timeout", "advlock_try_with_timeout(1::bigint, 0)"),
    ("advlock_try_with_timeout", "advlock_try_with_timeout('standby', 'x', 0)"),
    ("advlock_try_with_timeout", "advlock_try_with_timeout('standby', 42::bigint, 0, scope => 'session')"),
    ("advlock_lock_with_timeout", "advlock_lock_with_timeout(1::bigint, 0)"),
    ("advlock_lock_with_timeout", "advlock_lock_with_timeout('standby', 'x', 100)"),
    ("advlock_lock_with_timeout", "advlock_lock_with_timeout('standby', 42::bigint, 0, mode => 'shared')"),
]


@pytest.fixture(scope="module")
def standby():
    if not WORKDIR:
        pytest.skip("ADVLOCK_WORKDIR not set (run through pg_test/run.sh)")
    datadir = os.path.join(WORKDIR, "standby")
    log = os.path.join(WORKDIR, "standby.log")
    if os.path.exists(datadir):
        shutil.rmtree(datadir)
    as_postgres(f"{PGBIN}/pg_basebackup", "-h", WORKDIR, "-p", str(PORT), "-U", "postgres",
                "-D", datadir, "-R", "-X", "stream", "-c", "fast")
    conf = (f"\n# reliability suite standby\nport = {STANDBY_PORT}\n"
            f"unix_socket_directories = '{WORKDIR}'\nhot_standby = on\n")
    as_postgres("sh", "-c", f"cat >> '{datadir}/postgresql.conf'", input=conf)
    started = False
    try:
        as_postgres(f"{PGBIN}/pg_ctl", "-D", datadir, "-l", log, "-w", "-t", "60", "start")
        started = True

        def ready():
            try:
                with connect("rel-standby-probe", port=STANDBY_PORT) as c:
                    return c.execute("SELECT pg_is_in_recovery()").fetchone()[0]
            except psycopg.OperationalError:
                return False
        wait_until(ready, timeout=60, interval=0.2, what="the standby to accept connections in recovery")
        yield STANDBY_PORT
    finally:
        if started or os.path.exists(os.path.join(datadir, "postmaster.pid")):
            r = as_postgres(f"{PGBIN}/pg_ctl", "-D", datadir, "-m", "fast", "-w", "-t", "30", "stop", check=False)
            if r.returncode != 0:
                as_postgres(f"{PGBIN}/pg_ctl", "-D", datadir, "-m", "immediate", "-w", "stop", check=False)


def standby_conn(port, app="rel-standby"):
    return connect(app, port=port)


@pytest.mark.parametrize("function,call", ACQUIRE_CALLS, ids=[c for _, c in ACQUIRE_CALLS])
def test_acquisition_refused_on_standby(standby, function, call):
    with standby_conn(standby) as conn:
        assert conn.execute("SELECT pg_is_in_recovery()").fetchone()[0] is True
        with pytest.raises(psycopg.Error) as info:
            conn.execute(f"SELECT {call}")
        diag = info.value.diag
        assert diag.sqlstate == "25006", (diag.sqlstate, diag.message_primary)
        assert diag.message_primary == f"{function} cannot run on a hot standby"
        assert "advlock.allow_on_standby" in (diag.message_hint or "")
        # Nothing was locked on the way.
        assert conn.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'").fetchone()[0] == 0


def test_allowed_calls_work_on_standby(standby):
    with standby_conn(standby) as conn:
        conn.execute("SET advlock.allow_on_standby = on")
        conn.execute("BEGIN")
        for _, call in ACQUIRE_CALLS:
            conn.execute(f"SELECT {call}")
        held = conn.execute("SELECT count(*) FROM advlock_holders WHERE pid = pg_backend_pid() AND granted"
                            ).fetchone()[0]
        assert held == 4  # key 1, ('standby','x') and ('standby', 42) exclusive, ('standby', 42) shared
        conn.execute("ROLLBACK")
        # Only the session lock survives the transaction.
        assert conn.execute("SELECT key FROM advlock_holders WHERE pid = pg_backend_pid()").fetchall() == \
            [(conn.execute("SELECT advlock_key('standby', 42)").fetchone()[0],)]
        assert conn.execute("SELECT advlock_unlock('standby', 42::bigint)").fetchone()[0] is True


def test_allow_on_standby_locks_are_standby_local(standby, key):
    a = standby_conn(standby, "rel-standby-a")
    b = standby_conn(standby, "rel-standby-b")
    primary = connect("rel-primary")
    try:
        # SET before the library is loaded in the session (a placeholder), as a user would.
        a.execute("SET advlock.allow_on_standby = on")
        assert a.execute("SHOW advlock.allow_on_standby").fetchone()[0] == "on"
        assert a.execute("SELECT advlock_try_with_timeout(%s, 0, scope => 'session')", (key,)).fetchone()[0] is True
        assert a.execute("SELECT advlock_try_with_timeout('standby', 'x', 1000, scope => 'session')").fetchone()[0] is True

        # The lock does not exist for the primary: the same key is free there.
        assert primary.execute("SELECT advlock_try_with_timeout(%s, 0, scope => 'session')", (key,)).fetchone()[0] is True
        assert primary.execute("SELECT count(*) FROM advlock_holders WHERE pid <> pg_backend_pid()").fetchone()[0] == 0
        assert primary.execute("SELECT advlock_unlock(%s)", (key,)).fetchone()[0] is True

        # On the standby it coordinates standby sessions, waits included (subtransaction, timer).
        b.execute("SET advlock.allow_on_standby = on")
        t0 = time.monotonic()
        assert b.execute("SELECT advlock_try_with_timeout(%s, 200, scope => 'session')", (key,)).fetchone()[0] is False
        assert time.monotonic() - t0 >= 0.2
        with pytest.raises(psycopg.errors.LockNotAvailable) as info:
            b.execute("SELECT advlock_lock_with_timeout(%s, 100)", (key,))
        assert f"PID {a.info.backend_pid}" in (info.value.diag.message_detail or "")

        # advlock_holders and friends work on the standby (pg_locks, pg_stat_activity only).
        rows = b.execute("SELECT pid, key, mode, granted, application_name FROM advlock_holders "
                         "ORDER BY key").fetchall()
        expected = sorted([(a.info.backend_pid, key, "exclusive", True, "rel-standby-a"),
                           (a.info.backend_pid, b.execute("SELECT advlock_key('standby', 'x')").fetchone()[0],
                            "exclusive", True, "rel-standby-a")], key=lambda r: r[1])
        assert rows == expected
        assert b.execute("SELECT advlock_leak_count('0')").fetchone()[0] == 1
        assert b.execute("SELECT count(DISTINCT pid) FROM advlock_idle_holders('0')").fetchone()[0] == 1
        dry = b.execute("SELECT pid, terminated FROM advlock_terminate_idle_holders('0')").fetchall()
        assert dry == [(a.info.backend_pid, False)]

        # A waiter on the standby is granted when the standby holder releases.
        fut_conn = standby_conn(standby, "rel-standby-c")
        fut_conn.execute("SET advlock.allow_on_standby = on")
        result = {}
        t = threading.Thread(target=lambda: result.setdefault("got", fut_conn.execute(
            "SELECT advlock_try_with_timeout(%s, 20000, scope => 'session')", (key,)).fetchone()[0]))
        t.start()
        wait_until(lambda: b.execute("SELECT count(*) FROM advlock_holders WHERE key = %s AND NOT granted",
                                     (key,)).fetchone()[0] == 1, what="a waiter on the standby")
        assert b.execute("SELECT blocked_by FROM advlock_holders WHERE key = %s AND NOT granted",
                         (key,)).fetchone()[0] == [a.info.backend_pid]
        assert a.execute("SELECT advlock_unlock(%s)", (key,)).fetchone()[0] is True
        t.join(timeout=20)
        assert result.get("got") is True
        assert fut_conn.execute("SELECT advlock_unlock(%s)", (key,)).fetchone()[0] is True
        fut_conn.close()
        assert a.execute("SELECT advlock_unlock('standby', 'x')").fetchone()[0] is True
        # Turning it back off refuses again.
        a.execute("RESET advlock.allow_on_standby")
        with pytest.raises(psycopg.errors.ReadOnlySqlTransaction):
            a.execute("SELECT advlock_try_with_timeout(%s, 0)", (key,))
    finally:
        a.close()
        b.close()
        primary.close()


def test_fences_are_replicated_and_passed_only_on_the_primary(standby):
    """A fence is a row of advlock_fences (docs/fences.md, "Durable"): passed on the primary, it
    reaches the standby with the WAL, so a promoted standby refuses the same stale tokens; on the
    standby itself nothing can pass a fence (a read-only transaction: 25006)."""
    with connect("rel-fence-primary") as primary:
        primary.execute("SELECT advlock_fence('standby-fence', 'ledger', 7)")
        lsn = primary.execute("SELECT pg_current_wal_lsn()").fetchone()[0]
        try:
            with standby_conn(standby, "rel-fence-standby") as conn:
                wait_until(lambda: conn.execute("SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn", (lsn,)).fetchone()[0],
                           timeout=30, interval=0.05, what="the standby to replay the fence")
                assert conn.execute("SELECT token FROM advlock_fences WHERE key = advlock_key('standby-fence', 'ledger')"
                                    ).fetchone() == (7,)
                with pytest.raises(psycopg.Error) as info:
                    conn.execute("SELECT advlock_fence('standby-fence', 'ledger', 8)")
                assert info.value.sqlstate == "25006", info.value.diag.message_primary
        finally:
            assert primary.execute("SELECT advlock_fence_reset('standby-fence', 'ledger')").fetchone()[0] == 7
