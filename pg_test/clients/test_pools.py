"""Scenario 3: session locks and client-side pools.

asyncpg's pool resets a connection on release (its reset query includes
pg_advisory_unlock_all()), so a forgotten session lock does not outlive the checkout.
psycopg_pool does not: the lock stays with the idle pooled connection, which advlock_holders
flags as an idle holder once advlock.idle_threshold passes, and
advlock_terminate_idle_holders() frees it for a waiter."""
import asyncio
import threading
import time

import asyncpg
import psycopg
import pytest
from psycopg_pool import ConnectionPool

import docexamples
from pgsupport import apg_pool_kwargs, conninfo, holders_of, key_for, psy, wait_for_waiter, wait_until

TAKE_SESSION = "SELECT advlock_try_with_timeout(%s, 0, scope => 'session')"


def test_asyncpg_pool_release_drops_session_lock(admin, measure):
    key = key_for("asyncpg-pool")
    app = "advlock-test/pool/asyncpg-service"

    async def main():
        pool = await asyncpg.create_pool(min_size=1, max_size=1, **apg_pool_kwargs(app))
        try:
            async with pool.acquire() as conn:
                pid = conn.get_server_pid()
                assert await conn.fetchval(
                    "SELECT advlock_try_with_timeout($1::bigint, 0, scope => 'session')", key) is True
                rows = holders_of(admin, key)
                assert [(r["pid"], r["application_name"], r["granted"]) for r in rows] == [(pid, app, True)]
                assert rows[0]["backend_state"] == "idle"
            released = time.monotonic()
            # Released to the pool: asyncpg ran its reset query on this very connection.
            wait_until(lambda: holders_of(admin, key) == [], timeout=5, what="the lock to be released")
            measure("lock gone after pool release (s)", round(time.monotonic() - released, 4))
            async with pool.acquire() as conn:
                assert conn.get_server_pid() == pid, "the pool kept the same backend"
                # The reset query asyncpg uses for this server.
                measure("asyncpg reset query", " ".join(conn.get_reset_query().split()))
                assert "pg_advisory_unlock_all" in conn.get_reset_query()
            alive = admin.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = %s", (pid,)).fetchone()[0]
            assert alive == 1, "released by the reset, not by a disconnect"
        finally:
            await pool.close()

    asyncio.run(main())


def test_psycopg_pool_keeps_session_lock_until_terminated(admin, measure):
    key = key_for("psycopg-pool")
    app = "advlock-test/pool/psycopg-service"
    pool = ConnectionPool(conninfo(app), min_size=1, max_size=1, kwargs={"autocommit": True}, open=True)
    try:
        with pool.connection() as conn:
            pid = conn.info.backend_pid
            assert conn.execute(TAKE_SESSION, (key,)).fetchone()[0] is True
        returned = time.monotonic()

        # Still held by the idle pooled connection; flagged once idle for the threshold (200 ms).
        def flagged():
            rows = holders_of(admin, key)
            assert len(rows) == 1 and rows[0]["pid"] == pid and rows[0]["granted"], rows
            row = rows[0]
            # is_idle_holder means "idle for at least the threshold" (the view reads the clock
            # separately for idle_for and is_idle_holder, so allow a few milliseconds).
            idle = row["idle_for"].total_seconds()
            assert (idle >= 0.19) if row["is_idle_holder"] else (idle < 0.21), row
            return row if row["is_idle_holder"] else None

        row = wait_until(flagged, timeout=5, interval=0.02, what="the pooled connection to be flagged")
        measure("flagged as idle holder after return to pool (s)", round(time.monotonic() - returned, 3))
        assert row["application_name"] == app
        assert row["backend_state"] == "idle"
        assert admin.execute("SELECT advlock_leak_count()").fetchone()[0] == 1
        idle = admin.execute("SELECT pid, application_name FROM advlock_idle_holders()").fetchall()
        assert idle == [(pid, app)]

        # A waiter blocks on the leaked lock ...
        with psy("advlock-test/pool/waiter") as waiter:
            result = {}

            def wait_long():
                with waiter.transaction():
                    result["got"] = waiter.execute(
                        "SELECT advlock_try_with_timeout(%s, 15000)", (key,)).fetchone()[0]
                    result["at"] = time.monotonic()

            t = threading.Thread(target=wait_long)
            t.start()
            try:
                wait_for_waiter(admin, waiter.info.backend_pid)
                # ... a dry run lists the holder and terminates nothing ...
                dry = admin.execute("SELECT * FROM advlock_terminate_idle_holders('200ms')").fetchall()
                assert dry == [(pid, app, [key], False)]
                assert waiter.info.backend_pid in {r[0] for r in admin.execute(
                    "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND NOT granted").fetchall()}
                # ... and the real run frees the lock: the waiter proceeds.
                terminated_at = time.monotonic()
                done = admin.execute(
                    "SELECT * FROM advlock_terminate_idle_holders('200ms', dry_run => false)").fetchall()
                assert done == [(pid, app, [key], True)]
            finally:
                t.join(20)
            assert result.get("got") is True
            measure("waiter got the lock after terminate_idle_holders (s)", round(result["at"] - terminated_at, 4))
            assert result["at"] - terminated_at < 2
        wait_until(lambda: admin.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = %s",
                                         (pid,)).fetchone()[0] == 0, what="the pooled backend to exit")
    finally:
        pool.close()


def test_psycopg_pool_reset_callback_releases_session_lock(admin):
    """The remedy on the client side: a reset callback that unlocks everything on return."""
    key = key_for("psycopg-pool-reset")
    app = "advlock-test/pool/psycopg-reset-service"

    def reset(conn):
        conn.execute("SELECT pg_advisory_unlock_all()")

    pool = ConnectionPool(conninfo(app), min_size=1, max_size=1, kwargs={"autocommit": True},
                          reset=reset, open=True)
    try:
        with pool.connection() as conn:
            pid = conn.info.backend_pid
            assert conn.execute(TAKE_SESSION, (key,)).fetchone()[0] is True
            assert [r["pid"] for r in holders_of(admin, key)] == [pid]
        wait_until(lambda: holders_of(admin, key) == [], timeout=5, what="the reset callback to unlock")
        with pool.connection() as conn:
            assert conn.info.backend_pid == pid
    finally:
        pool.close()


# --- The README's psycopg_pool advice (Pools and poolers), run as written ---------------------

def readme_pool(app, extra=""):
    """The pool snippet of docs/reference.md (linked from the README), executed with DSN pointing
    at the test instance (min_size and max_size given here so the backend count is exact; the
    snippet's own arguments are kept)."""
    code = docexamples.block_with("def unlock_all(conn):").text
    assert "check=ConnectionPool.check_connection" in code, "the README no longer recommends check="
    code = code.replace("ConnectionPool(DSN,", f"ConnectionPool(DSN, min_size=1, max_size=1,{extra}")
    scope = {"DSN": conninfo(app)}
    exec(code, scope)
    return scope["pool"]


def backends_of(admin, app):
    return {r[0] for r in admin.execute(
        "SELECT pid FROM pg_stat_activity WHERE application_name = %s", (app,)).fetchall()}


def checkouts(pool, key, n=5):
    """n checkouts, each leaving a session lock behind on a default (non-autocommit)
    connection; returns the backend pid of each."""
    pids = []
    for _ in range(n):
        with pool.connection() as conn:
            pids.append(conn.info.backend_pid)
            assert conn.execute(TAKE_SESSION, (key,)).fetchone()[0] is True
    return pids


def test_psycopg_pool_reset_from_readme_keeps_pooling(admin, measure):
    """The README's reset ends the transaction its SELECT opened: five checkouts on default
    (non-autocommit) connections use one backend, and the session lock each leaves behind is
    released on return."""
    key = key_for("psycopg-pool-readme-reset")
    app = "advlock-test/pool/readme-reset"
    pool = readme_pool(app)
    try:
        pids = checkouts(pool, key)
        wait_until(lambda: holders_of(admin, key) == [], timeout=5, what="the reset to unlock")
        measure("README reset: distinct backends over 5 checkouts", len(set(pids)))
        assert len(set(pids)) == 1, pids
        assert backends_of(admin, app) == set(pids), "the pool opened other backends"
    finally:
        pool.close()


def test_psycopg_pool_reset_from_readme_with_autocommit(admin):
    """The note beside the README's pool snippet (docs/reference.md): with
    kwargs={"autocommit": True} the same reset works (its commit() is a no-op) and pooling is
    kept."""
    key = key_for("psycopg-pool-readme-reset-autocommit")
    app = "advlock-test/pool/readme-reset-autocommit"
    assert 'kwargs={"autocommit": True}' in docexamples.section(docexamples.REPO / "docs" / "reference.md",
                                                                "psycopg_pool: a reset that unlocks")
    pool = readme_pool(app, ' kwargs={"autocommit": True},')
    try:
        pids = checkouts(pool, key)
        wait_until(lambda: holders_of(admin, key) == [], timeout=5, what="the reset to unlock")
        assert len(set(pids)) == 1, pids
        assert backends_of(admin, app) == set(pids)
    finally:
        pool.close()


def test_psycopg_pool_reset_without_commit_defeats_pooling(admin, measure):
    """The control: the reset the README used to give (no commit) leaves each connection in a
    transaction, so the pool discards it and opens a new backend at every checkout. The lock is
    released (the backend is gone), but so is pooling; the test above would catch a return to it."""
    key = key_for("psycopg-pool-reset-no-commit")
    app = "advlock-test/pool/reset-no-commit"
    pool = ConnectionPool(conninfo(app), min_size=1, max_size=1, open=True,
                          reset=lambda c: c.execute("SELECT pg_advisory_unlock_all()"))
    try:
        pids = checkouts(pool, key)
        measure("reset without commit: distinct backends over 5 checkouts", len(set(pids)))
        assert len(set(pids)) == 5, pids
    finally:
        pool.close()
    wait_until(lambda: holders_of(admin, key) == [], timeout=5, what="the discarded backends to exit")


def terminate_leaked(admin, pid, app, key):
    def flagged():
        return admin.execute("SELECT advlock_leak_count('200ms')").fetchone()[0] == 1
    wait_until(flagged, timeout=5, interval=0.02, what="the pooled connection to be flagged")
    done = admin.execute("SELECT pid, terminated FROM advlock_terminate_idle_holders('200ms', dry_run => false)").fetchall()
    assert done == [(pid, True)]
    wait_until(lambda: admin.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = %s",
                                     (pid,)).fetchone()[0] == 0, what="the terminated backend to exit")


def test_psycopg_pool_check_replaces_terminated_connection(admin):
    """After advlock_terminate_idle_holders, the README's check= makes the next checkout get a
    live connection (a new backend) instead of the terminated one. The pool has no reset here,
    so the session lock does leak onto the idle connection, as in an application without it."""
    key = key_for("psycopg-pool-check")
    app = "advlock-test/pool/check"
    pool = ConnectionPool(conninfo(app), min_size=1, max_size=1, kwargs={"autocommit": True},
                          check=ConnectionPool.check_connection, open=True)
    try:
        with pool.connection() as conn:
            pid = conn.info.backend_pid
            assert conn.execute(TAKE_SESSION, (key,)).fetchone()[0] is True
        terminate_leaked(admin, pid, app, key)
        with pool.connection() as conn:
            assert conn.execute("SELECT 1").fetchone()[0] == 1
            assert conn.info.backend_pid != pid
    finally:
        pool.close()


def test_psycopg_pool_without_check_hands_out_terminated_connection(admin):
    """The control: without check=, the next checkout gets the terminated connection and the
    application's first statement fails (AdminShutdown / a closed connection)."""
    key = key_for("psycopg-pool-no-check")
    app = "advlock-test/pool/no-check"
    pool = ConnectionPool(conninfo(app), min_size=1, max_size=1, kwargs={"autocommit": True}, open=True)
    try:
        with pool.connection() as conn:
            pid = conn.info.backend_pid
            assert conn.execute(TAKE_SESSION, (key,)).fetchone()[0] is True
        terminate_leaked(admin, pid, app, key)
        with pytest.raises(psycopg.OperationalError):
            with pool.connection() as conn:
                conn.execute("SELECT 1")
    finally:
        pool.close()
