"""session_lock(dsn, ...): its own connection, a fencing token, refusal of pooled
connections, the migration singleton across processes, leader election with fenced writes."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
import time
from typing import Any, Literal

import asyncpg
import psycopg
import psycopg_pool
import pytest
from sqlalchemy import create_engine, make_url

import advlock
from conftest import DSN, advisory_locks, connect, wait_until

KEY = advlock.key("migrate")
Driver = Literal["psycopg", "asyncpg"]


def backends(admin: psycopg.Connection[Any], app: str) -> list[int]:
    rows = admin.execute("SELECT pid FROM pg_stat_activity WHERE application_name = %s", (app,)).fetchall()
    return [r[0] for r in rows]


def test_s11_sync_session_lock_holds_until_exit_then_closes(admin: psycopg.Connection[Any]) -> None:
    with advlock.session_lock(DSN, "migrate", timeout=1.0, application_name="migrator") as held:
        assert held.token > 0 and held.key == KEY
        assert backends(admin, "migrator") == [held.pid]
        assert advisory_locks(admin, held.pid) == [(held.pid, True, "ExclusiveLock", KEY)]
        # A session lock: no transaction is open on its connection.
        row = admin.execute("SELECT state FROM pg_stat_activity WHERE pid = %s", (held.pid,)).fetchone()
        assert row == ("idle",)
        assert held.holding() is True
        first = held.token
    assert advisory_locks(admin) == []
    wait_until(lambda: backends(admin, "migrator") == [], what="the dedicated connection to close")
    with advlock.session_lock(DSN, "migrate", timeout=1.0) as again:
        assert again.token > first  # fencing tokens increase across acquisitions


@pytest.mark.parametrize("driver", ["psycopg", "asyncpg"])
def test_s11_async_session_lock(driver: Driver, admin: psycopg.Connection[Any]) -> None:
    async def main() -> None:
        async with advlock.session_lock(DSN, "migrate", timeout=1.0, driver=driver, application_name="m") as held:
            assert held.token > 0
            assert advisory_locks(admin, held.pid) == [(held.pid, True, "ExclusiveLock", KEY)]
            assert await held.holding() is True
        assert advisory_locks(admin) == []
        wait_until(lambda: backends(admin, "m") == [], what="the dedicated connection to close")

    asyncio.run(main())


def test_s13_busy_lock_times_out_naming_the_holder_and_closes(admin: psycopg.Connection[Any]) -> None:
    with advlock.session_lock(DSN, "migrate", timeout=1.0, application_name="first") as held:
        with pytest.raises(advlock.LockTimeout) as info:
            with advlock.session_lock(DSN, "migrate", timeout=0.2, application_name="second"):
                pass
        assert (info.value.pid, info.value.application_name) == (held.pid, "first")
        wait_until(lambda: backends(admin, "second") == [], what="the refused connection to close")
        assert advisory_locks(admin) == [(held.pid, True, "ExclusiveLock", KEY)]


def test_s14_body_error_still_unlocks_and_closes(admin: psycopg.Connection[Any]) -> None:
    with pytest.raises(ZeroDivisionError), advlock.session_lock(DSN, "migrate", timeout=1, application_name="x"):
        _ = 1 / 0
    assert advisory_locks(admin) == []
    wait_until(lambda: backends(admin, "x") == [], what="the dedicated connection to close")


def test_s12_pooled_connections_are_refused() -> None:
    with psycopg_pool.ConnectionPool(DSN, min_size=1, max_size=1) as pool, pool.connection() as conn:
        for thing in (pool, conn):
            with pytest.raises(TypeError, match=r"takes a DSN \(a connection string.*session_lock\(dsn, \.\.\.\)"):
                advlock.session_lock(thing, "migrate", timeout=1)  # type: ignore[arg-type]
    engine = create_engine(make_url(DSN).set(drivername="postgresql+psycopg"))
    with pytest.raises(TypeError, match=r"pooled connection.*for an Engine: session_lock\(engine.url, \.\.\.\)"):
        advlock.session_lock(engine, "migrate", timeout=1)  # type: ignore[arg-type]

    async def main() -> None:
        async with asyncpg.create_pool(DSN, min_size=1, max_size=1) as apool, apool.acquire() as proxy:
            for thing in (apool, proxy):
                with pytest.raises(TypeError, match="pooled connection"):
                    async with advlock.session_lock(thing, "migrate", timeout=1):
                        pass

    asyncio.run(main())


MIGRATE = textwrap.dedent(
    """
    import sys, advlock
    try:
        with advlock.session_lock(sys.argv[1], "migrate", timeout=float(sys.argv[2]), application_name=sys.argv[3]):
            print("migrating", flush=True)
            sys.stdin.readline()        # hold until told to finish
            print("done", flush=True)
    except advlock.LockTimeout as e:
        print("busy", e.pid, e.application_name, flush=True)
    """
)


def migrate(timeout: float, app: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", MIGRATE, DSN, str(timeout), app],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip


def test_s13_migration_singleton_across_processes(admin: psycopg.Connection[Any]) -> None:
    first = migrate(5.0, "migration-1")
    assert first.stdout is not None and first.stdin is not None
    assert first.stdout.readline() == "migrating\n"
    [first_pid] = backends(admin, "migration-1")
    second = migrate(0.3, "migration-2")
    out, _ = second.communicate(timeout=30)
    assert out == f"busy {first_pid} migration-1\n"
    # A third waits in the server's queue and runs as soon as the first is done.
    third = migrate(10.0, "migration-3")
    wait_until(lambda: any(not r[1] for r in advisory_locks(admin)), what="the third to queue")
    out, _ = first.communicate("\n", timeout=30)
    assert out == "done\n"
    out, _ = third.communicate("\n", timeout=30)
    assert out == "migrating\ndone\n"
    assert first.returncode == second.returncode == third.returncode == 0


def setup_fenced(admin: psycopg.Connection[Any]) -> None:
    admin.execute("DROP TABLE IF EXISTS fenced_resource")
    admin.execute("CREATE TABLE fenced_resource (id int PRIMARY KEY, value text, fence bigint NOT NULL)")
    admin.execute("INSERT INTO fenced_resource VALUES (1, 'initial', 0)")


def fenced_write(conn: psycopg.Connection[Any], value: str, token: int) -> int:
    cur = conn.execute(
        "UPDATE fenced_resource SET value = %s, fence = %s WHERE id = 1 AND fence < %s", (value, token, token)
    )
    return cur.rowcount


def test_s15_s16_leader_election_with_fenced_write_after_termination(admin: psycopg.Connection[Any]) -> None:
    setup_fenced(admin)
    with connect("writer-a") as writer_a, connect("writer-b") as writer_b:
        with pytest.raises(advlock.LockLost, match="was lost") as lost:
            with advlock.session_lock(DSN, "leader", "report", timeout=1.0) as leader_a:
                t1 = leader_a.token
                assert fenced_write(writer_a, "a1", t1) == 1
                # The leader's backend is cut off (partition, pooler restart, admin) while its
                # process keeps running.
                assert admin.execute("SELECT pg_terminate_backend(%s, 5000)", (leader_a.pid,)).fetchone() == (True,)
                assert leader_a.holding() is False  # the loss is seen, not an exception here
                # A new leader is elected and writes with a larger token.
                with advlock.session_lock(DSN, "leader", "report", timeout=5.0) as leader_b:
                    assert leader_b.token > t1
                    assert fenced_write(writer_b, "b1", leader_b.token) == 1
                    # The old leader's late write changes nothing.
                    assert fenced_write(writer_a, "a-late", t1) == 0
        assert isinstance(lost.value.__cause__, psycopg.OperationalError)
    assert admin.execute("SELECT value FROM fenced_resource").fetchone() == ("b1",)


@pytest.mark.parametrize("driver", ["psycopg", "asyncpg"])
def test_s15_async_leader_loses_its_connection(driver: Driver, admin: psycopg.Connection[Any]) -> None:
    setup_fenced(admin)

    async def main() -> None:
        with pytest.raises(advlock.LockLost):
            async with advlock.session_lock(DSN, "leader", "report", timeout=1.0, driver=driver) as leader:
                admin.execute("SELECT pg_terminate_backend(%s, 5000)", (leader.pid,))
                assert await leader.holding() is False
                assert leader.lost is not None
        async with advlock.session_lock(DSN, "leader", "report", timeout=1.0, driver=driver) as nxt:
            assert nxt.token > leader.token

    asyncio.run(main())


def test_s15_a_lost_connection_is_reported_even_without_holding(admin: psycopg.Connection[Any]) -> None:
    # The body never asks holding(): the loss is still raised on exit, not swallowed.
    with pytest.raises(advlock.LockLost), advlock.session_lock(DSN, "leader", "x", timeout=1.0) as held:
        admin.execute("SELECT pg_terminate_backend(%s, 5000)", (held.pid,))


@pytest.mark.parametrize("driver", ["psycopg", "asyncpg"])
def test_s19_cancelled_async_session_lock_leaves_no_waiter(driver: Driver, admin: psycopg.Connection[Any]) -> None:
    """A task cancelled while session_lock() waits: the server-side wait ends and the
    dedicated connection is gone, at once (not when the 30 s timeout would have run out)."""

    async def main() -> None:
        with advlock.session_lock(DSN, "migrate", timeout=1.0) as held:

            async def wait() -> None:
                async with advlock.session_lock(DSN, "migrate", timeout=30.0, driver=driver, application_name="w"):
                    raise AssertionError("must not get the lock")

            task = asyncio.create_task(wait())
            deadline = time.monotonic() + 10
            while not any(not r[1] for r in advisory_locks(admin)):
                assert time.monotonic() < deadline, "the waiter never queued"
                await asyncio.sleep(0.01)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            started = time.monotonic()
            wait_until(lambda: backends(admin, "w") == [], 5.0, what="the cancelled waiter's backend to end")
            assert time.monotonic() - started < 5.0
            assert advisory_locks(admin) == [(held.pid, True, "ExclusiveLock", KEY)]

    asyncio.run(main())


# ---- what a DSN may be -------------------------------------------------------------------------


def keywords(dsn: str) -> str:
    """The libpq key=value form of a postgresql:// DSN."""
    info = psycopg.conninfo.conninfo_to_dict(dsn)
    return " ".join(f"{k}='{v}'" for k, v in info.items())


def test_s12_sqlalchemy_urls_and_key_value_dsns_for_every_driver(admin: psycopg.Connection[Any]) -> None:
    engine = create_engine(make_url(DSN).set(drivername="postgresql+psycopg"))
    forms: list[object] = [engine.url, str(make_url(DSN).set(drivername="postgresql+asyncpg")), keywords(DSN)]
    for dsn in forms:
        with advlock.session_lock(dsn, "migrate", timeout=1) as held:  # type: ignore[arg-type]
            assert advisory_locks(admin, held.pid) == [(held.pid, True, "ExclusiveLock", KEY)]

    async def main() -> None:
        for dsn in forms:
            async with advlock.session_lock(dsn, "migrate", timeout=1, driver="asyncpg") as held:  # type: ignore[arg-type]
                assert advisory_locks(admin, held.pid) == [(held.pid, True, "ExclusiveLock", KEY)]

    asyncio.run(main())
    engine.dispose()


@pytest.mark.parametrize(
    ("dsn", "error", "match"),
    [
        ("host=/tmp port", ValueError, "dsn: not a libpq connection string"),
        (make_url("mysql://u@h/db"), ValueError, "needs a PostgreSQL URL, got a 'mysql' URL"),
    ],
)
def test_s02_s12_bad_dsns_are_refused_before_connecting(dsn: object, error: type[Exception], match: str) -> None:
    for driver in ("psycopg", "asyncpg"):
        with pytest.raises(error, match=match):
            advlock.session_lock(dsn, "migrate", timeout=1, driver=driver)  # type: ignore[arg-type]
