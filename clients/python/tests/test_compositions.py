"""Where two features meet (clients/SCENARIOS.md, S41-S44): the idle-lock timeout and a session
lock, the lock connection dying mid-body, nothing prepared behind a transaction-mode pooler,
and a statement_timeout shorter than a lock's wait."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Literal

import asyncpg
import psycopg
import psycopg_pool
import pytest
from pgtestsupport import pgbouncer
from sqlalchemy import create_engine, make_url

import advlock
from conftest import DSN, PG, advisory_locks, connect, needs_leases, server_kind, wait_until

Driver = Literal["sync", "psycopg", "asyncpg"]
DRIVERS: list[Driver] = ["sync", "psycopg", "asyncpg"]
RECIPES = Path(__file__).resolve().parents[1] / "recipes"

# ---- S41: the idle-lock timeout does not steal a client's session lock ----------------------

IDLE_TIMEOUT = 1.0


def idle_timeout_of_a_new_session() -> str:
    with connect("s41-show") as c:
        row = c.execute("SELECT current_setting('advlock.idle_session_lock_timeout', true)").fetchone()
    return str(row[0]) if row else ""


@pytest.fixture
def idle_lock_timeout() -> Iterator[None]:
    """advlock.idle_session_lock_timeout = 1s server-wide (ALTER SYSTEM and a reload), reset
    after the test whatever happens."""
    if server_kind() != "preloaded":
        pytest.skip("the idle-lock timeout acts where the advlock library is loaded in every session: run_tests.sh's"
                    " preloaded instance")  # fmt: skip
    with connect("s41-setting", autocommit=True) as c:
        c.execute(f"ALTER SYSTEM SET advlock.idle_session_lock_timeout = '{IDLE_TIMEOUT:g}s'")
        c.execute("SELECT pg_reload_conf()")
    try:
        wait_until(lambda: idle_timeout_of_a_new_session() == "1s", 10.0, what="the reloaded setting")
        yield
    finally:
        with connect("s41-setting", autocommit=True) as c:
            c.execute("ALTER SYSTEM RESET advlock.idle_session_lock_timeout")
            c.execute("SELECT pg_reload_conf()")
        wait_until(lambda: idle_timeout_of_a_new_session() == "0", 10.0, what="the setting reset")


def hold_session_lock(driver: Driver, seconds: float) -> tuple[bool, bool]:
    """Hold session_lock(DSN, "s41") for `seconds` idle; (holding() at the end, lost is None)."""
    if driver == "sync":
        with advlock.session_lock(DSN, "s41", timeout=1.0, application_name="s41-holder") as held:
            time.sleep(seconds)
            return held.holding(), held.lost is None

    async def main() -> tuple[bool, bool]:
        async with advlock.session_lock(DSN, "s41", timeout=1.0, driver=driver, application_name="s41-holder") as h:
            await asyncio.sleep(seconds)
            return await h.holding(), h.lost is None

    return asyncio.run(main())


@pytest.mark.parametrize("driver", DRIVERS)
def test_s41_a_session_lock_outlives_the_idle_lock_timeout(
    driver: Driver, idle_lock_timeout: None, admin: psycopg.Connection[Any]
) -> None:
    # The control: a connection holding a session lock idle is terminated at the timeout.
    with connect("s41-leaky", autocommit=True) as leaky:
        leaky.execute("SELECT pg_advisory_lock(41)")
        pid = leaky.info.backend_pid
        wait_until(
            lambda: not admin.execute("SELECT FROM pg_stat_activity WHERE pid = %s", (pid,)).fetchall(),
            IDLE_TIMEOUT + 5.0, what="the idle holder to be terminated (the setting is in force)",
        )  # fmt: skip
    # session_lock's connection opted out for itself: held twice the timeout and more.
    assert hold_session_lock(driver, IDLE_TIMEOUT * 2.5) == (True, True)


MIGRATION = '''"""S41's migration: prints when it starts and ends by the server's clock, and takes longer
than the idle-lock timeout while the lock connection sits idle."""
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def now() -> str:
    return str(op.get_bind().exec_driver_sql("SELECT clock_timestamp()").scalar())


def upgrade() -> None:
    print("migration starts", now(), flush=True)
    op.execute("CREATE TABLE s41_accounts (id bigint PRIMARY KEY)")
    # Until the other pod waits for the migration lock (both pods run at once for sure).
    op.execute(
        "DO $$ BEGIN FOR i IN 1..1000 LOOP"
        " EXIT WHEN EXISTS (SELECT FROM pg_locks WHERE locktype = 'advisory' AND NOT granted);"
        " PERFORM pg_sleep(0.01); END LOOP; END $$"
    )
    op.execute("SELECT pg_sleep(2.5)")
    print("migration ends", now(), flush=True)
'''


def test_s41_two_pods_running_the_alembic_recipe_never_overlap(
    idle_lock_timeout: None, admin: psycopg.Connection[Any]
) -> None:
    """clients/python/recipes/alembic_migrations/env.py in two pods, with the idle-lock timeout
    at 1 s and a migration of 2.5 s: 0.5.0's pod-b got the lock at 1 s (pod-a's idle lock
    connection terminated) and migrated at the same time. Now one migrates, the other waits,
    then finds the database at head; both end well."""
    admin.execute("DROP TABLE IF EXISTS s41_accounts, alembic_version")
    with tempfile.TemporaryDirectory() as work:
        (Path(work) / "versions").mkdir()
        shutil.copy(RECIPES / "alembic_migrations" / "env.py", Path(work) / "env.py")
        (Path(work) / "versions" / "0001_s41.py").write_text(MIGRATION)
        url = make_url(DSN).set(drivername="postgresql+psycopg").render_as_string(hide_password=False)
        (Path(work) / "alembic.ini").write_text(
            f"[alembic]\nscript_location = {work}\nsqlalchemy.url = {url}\n"
            "[loggers]\nkeys = root\n[handlers]\nkeys = console\n[formatters]\nkeys = generic\n"
            "[logger_root]\nlevel = WARNING\nhandlers = console\n"
            "[handler_console]\nclass = StreamHandler\nargs = (sys.stderr,)\nlevel = NOTSET\nformatter = generic\n"
            "[formatter_generic]\nformat = %(message)s\n"
        )
        cmd = [sys.executable, "-m", "alembic", "-c", str(Path(work) / "alembic.ini"), "upgrade", "head"]
        pods = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for _ in "ab"]
        outputs = [p.communicate(timeout=60)[0] for p in pods]
    try:
        assert [p.returncode for p in pods] == [0, 0], outputs  # no LockLost, no second CREATE TABLE
        runs: list[tuple[datetime, datetime]] = []
        for out in outputs:
            stamps = {
                line.split(" ", 2)[1]: datetime.fromisoformat(line.split(" ", 2)[2])
                for line in out.splitlines()
                if line.startswith("migration ")
            }
            if stamps:
                runs.append((stamps["starts"], stamps["ends"]))
        assert len(runs) == 1, outputs  # the second pod found the database at head
        assert runs[0][1] - runs[0][0] > timedelta(seconds=2 * IDLE_TIMEOUT)  # the lock sat idle that long
    finally:
        admin.execute("DROP TABLE IF EXISTS s41_accounts, alembic_version")


# ---- S42: the body learns when its lock connection dies -------------------------------------

NOTICED_WITHIN = 2.0


def terminate(admin: psycopg.Connection[Any], pid: int) -> float:
    """pg_terminate_backend(pid), waiting for it to exit; the time.monotonic() it was gone."""
    assert admin.execute("SELECT pg_terminate_backend(%s, 5000)", (pid,)).fetchone() == (True,)
    return time.monotonic()


def test_s42_a_blocking_body_learns_of_its_lock_connection_dying(admin: psycopg.Connection[Any]) -> None:
    with pytest.raises(advlock.LockLost, match="was lost: terminating connection due to administrator") as raised:
        with advlock.session_lock(DSN, "s42", timeout=1.0) as held:
            gone = terminate(admin, held.pid)
            with pytest.raises(advlock.LockLost):
                while time.monotonic() - gone < 10:  # a body at work, checking between steps
                    held.check()
                    time.sleep(0.01)
            noticed = time.monotonic() - gone
            assert held.lost is not None
    assert noticed < NOTICED_WITHIN, noticed
    # The cause is the connection error, with the server's reason.
    assert isinstance(raised.value.__cause__, psycopg.errors.AdminShutdown)
    assert raised.value.__cause__.sqlstate == "57P01"


@pytest.mark.parametrize("driver", ["psycopg", "asyncpg"])
def test_s42_an_async_body_is_cancelled_when_its_lock_connection_dies(
    driver: Literal["psycopg", "asyncpg"], admin: psycopg.Connection[Any]
) -> None:
    async def main() -> tuple[float, BaseException]:
        gone = 0.0
        try:
            async with advlock.session_lock(DSN, "s42", timeout=1.0, driver=driver) as held:
                gone = terminate(admin, held.pid)
                await asyncio.sleep(10)  # cancelled when the watchdog sees the connection die
                raise AssertionError("the body ran on without its lock")
        except advlock.LockLost as e:
            return time.monotonic() - gone, e
        raise AssertionError("LockLost was not raised")

    noticed, error = asyncio.run(main())
    assert noticed < NOTICED_WITHIN, noticed
    cause = error.__cause__
    if driver == "psycopg":
        assert isinstance(cause, psycopg.errors.AdminShutdown) and cause.sqlstate == "57P01"
    else:
        # asyncpg reads the server's FATAL but keeps no reason: the connection is closed.
        assert isinstance(cause, ConnectionError) and "closed the lock's connection" in str(cause)


def test_s42_the_watchdog_does_not_mistake_answers_for_a_death(admin: psycopg.Connection[Any]) -> None:
    """Statements of the body on the lock connection (holding()) from two threads at once, while
    the watchdog waits on the same socket: never a false loss."""
    with advlock.session_lock(DSN, "s42", timeout=1.0) as held:
        answers: list[bool] = []

        def ask() -> None:
            for _ in range(50):
                answers.append(held.holding())

        threads = [threading.Thread(target=ask) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert answers == [True] * 100 and held.lost is None
        held.check()


# ---- S43: nothing prepared behind a transaction-mode pooler ---------------------------------

# PgBouncer before 1.21 does not track prepared statements: a named statement prepared on one
# server connection is missing on the next, or there already from another client. With
# server_round_robin the pool hands out its two server connections in turn (by default it
# reuses the last one, which hides this from a single client but not from a busy pool).
POOLER_SETTINGS = {
    "min_pool_size": 2, "server_round_robin": 1, "ignore_startup_parameters": "extra_float_digits,options"
}  # fmt: skip
CALLS = 100


@pytest.fixture(scope="module")
def transaction_pooler() -> Iterator[str]:
    with pgbouncer(PG, "transaction", 2, settings=POOLER_SETTINGS, prefix="advlock-pgbouncer-s43.") as bouncer:
        # Both server connections open (two transactions at once).
        with bouncer.connect("s43-warm-up") as a, bouncer.connect("s43-warm-up") as b:
            a.execute("BEGIN")
            b.execute("BEGIN")
            pids = {a.execute("SELECT pg_backend_pid()").fetchone(), b.execute("SELECT pg_backend_pid()").fetchone()}
            assert len(pids) == 2
            a.execute("COMMIT")
            b.execute("COMMIT")
        yield bouncer.url


def server_pid(rows: Any) -> int:
    return int(rows[0][0])


def test_s43_psycopg_100_calls_on_one_connection_through_pgbouncer(
    transaction_pooler: str, admin: psycopg.Connection[Any]
) -> None:
    # psycopg's defaults: prepare_threshold=5 (the 6th run of a statement is prepared, by name).
    with psycopg.connect(transaction_pooler, autocommit=True) as conn:
        assert conn.prepare_threshold == 5
        servers = set()
        for i in range(CALLS):
            with conn.transaction(), advlock.lock(conn, "s43", i % 7, timeout=1.0):
                servers.add(server_pid(conn.execute("SELECT pg_backend_pid()", prepare=False).fetchall()))
            with conn.transaction():
                assert advlock.try_lock(conn, "s43", i % 7) is True
            assert advlock.holders(conn, "s43", i % 7) == []
        assert len(servers) == 2  # the calls moved between the pooler's server connections
    assert advisory_locks(admin) == []


def test_s43_psycopg_async_100_calls_on_one_connection_through_pgbouncer(transaction_pooler: str) -> None:
    async def main() -> set[int]:
        servers = set()
        conn = await psycopg.AsyncConnection.connect(transaction_pooler, autocommit=True)
        try:
            for i in range(CALLS):
                async with conn.transaction(), advlock.lock(conn, "s43", i % 7, timeout=1.0):
                    cur = await conn.execute("SELECT pg_backend_pid()", prepare=False)
                    servers.add(server_pid(await cur.fetchall()))
                async with conn.transaction():
                    assert await advlock.try_lock(conn, "s43", i % 7) is True
                assert await advlock.holders(conn, "s43", i % 7) == []
        finally:
            await conn.close()
        return servers

    assert len(asyncio.run(main())) == 2


def test_s43_asyncpg_100_calls_on_one_connection_through_pgbouncer(transaction_pooler: str) -> None:
    async def main() -> set[int]:
        servers = set()
        conn = await asyncpg.connect(transaction_pooler)  # statement_cache_size=100, its default
        try:
            for i in range(CALLS):
                async with conn.transaction(), advlock.lock(conn, "s43", i % 7, timeout=1.0):
                    # (The test's own statement unnamed too: asyncpg's cache would prepare it by name.)
                    servers.add(server_pid(await (await conn.prepare("SELECT pg_backend_pid()", name="")).fetch()))
                async with conn.transaction():
                    assert await advlock.try_lock(conn, "s43", i % 7) is True
                assert await advlock.holders(conn, "s43", i % 7) == []
        finally:
            await conn.close()
        return servers

    assert len(asyncio.run(main())) == 2


def test_s43_sqlalchemy_psycopg_100_calls_on_one_connection_through_pgbouncer(transaction_pooler: str) -> None:
    """SQLAlchemy runs advlock's statements as its own (no prepare=False to pass): the client
    turns psycopg's prepare_threshold off for them, and back to the engine's after."""
    engine = create_engine(make_url(transaction_pooler).set(drivername="postgresql+psycopg"))
    try:
        with engine.connect() as conn:
            servers = set()
            for i in range(CALLS):
                with conn.begin(), advlock.lock(conn, "s43", i % 7, timeout=1.0):
                    raw: Any = conn.connection.driver_connection
                    servers.add(server_pid(raw.execute("SELECT pg_backend_pid()", prepare=False).fetchall()))
                with conn.begin():
                    assert advlock.try_lock(conn, "s43", i % 7) is True
                assert advlock.holders(conn, "s43", i % 7) == []
                conn.commit()
            assert raw.prepare_threshold == 5  # the engine's setting, unchanged
            assert len(servers) == 2
    finally:
        engine.dispose()


@needs_leases()
def test_s43_a_lease_renewed_100_times_through_pgbouncer(transaction_pooler: str) -> None:
    """On a psycopg pool and an asyncpg pool (their defaults) at once, through the pooler."""
    ttl, renew_deadline = 1.5, 0.6  # a renewal every 0.2 s

    def psycopg_lease() -> int:
        with psycopg_pool.ConnectionPool(transaction_pooler, min_size=1, max_size=2, kwargs={"autocommit": True}) as p:
            with advlock.lease(p, "s43", "psycopg", ttl=ttl, timeout=1.0, renew_deadline=renew_deadline) as lease:
                while lease.renewals < CALLS:
                    lease.check()
                    time.sleep(0.05)
                return lease.renewals

    async def asyncpg_lease() -> int:
        p = await asyncpg.create_pool(transaction_pooler, min_size=1, max_size=2)
        try:
            async with advlock.lease(p, "s43", "asyncpg", ttl=ttl, timeout=1.0, renew_deadline=renew_deadline) as lease:
                while lease.renewals < CALLS:
                    lease.check()
                    await asyncio.sleep(0.05)
                return lease.renewals
        finally:
            await p.close()

    async def both() -> tuple[int, int]:
        from_thread = asyncio.create_task(asyncio.to_thread(psycopg_lease))
        return await from_thread, await asyncpg_lease()

    assert asyncio.run(both()) >= (CALLS, CALLS)


# ---- S44: statement_timeout shorter than the wait ------------------------------------------


def test_s44_statement_timeout_ends_the_wait_with_the_servers_error(admin: psycopg.Connection[Any]) -> None:
    """advlock does not override the DBA's limit: the wait ends at the statement_timeout with the
    server's 57014, not advlock's LockTimeout, and leaves nothing behind."""
    with connect("s44-holder") as holder, connect("s44-waiter", statement_timeout_ms=300) as waiter:
        lock_timeout = waiter.execute("SHOW lock_timeout").fetchone()
        with holder.transaction(), advlock.lock(holder, "s44", timeout=1.0):
            started = time.monotonic()
            with pytest.raises(psycopg.errors.QueryCanceled) as raised:
                with waiter.transaction(), advlock.lock(waiter, "s44", timeout=5.0):
                    raise AssertionError("the lock must not be granted")
            ended = time.monotonic() - started
            assert raised.value.sqlstate == "57014" and "statement timeout" in str(raised.value)
            assert not isinstance(raised.value, advlock.Error)  # passed through, not made a LockTimeout
            assert 0.25 < ended < 2.0, ended
            assert advisory_locks(admin, waiter.info.backend_pid) == []  # nothing held, nothing queued
            assert waiter.execute("SHOW lock_timeout").fetchone() == lock_timeout
            assert waiter.execute("SHOW statement_timeout").fetchone() == ("300ms",)


@needs_leases()
def test_s44_a_lease_renews_under_a_short_statement_timeout() -> None:
    options = {"autocommit": True, "options": "-c statement_timeout=300ms"}
    with psycopg_pool.ConnectionPool(DSN, min_size=1, max_size=2, kwargs=options) as p:
        with advlock.lease(p, "s44", "lease", ttl=0.9, timeout=1.0) as lease:
            until = time.monotonic() + 2.0
            while time.monotonic() < until:
                lease.check()
                time.sleep(0.05)
            assert lease.renewals >= 5 and lease.lost is None

