"""asyncpg (connections and pool proxies) and psycopg's AsyncConnection, including asyncio
cancellation of a waiting lock(): the server-side wait must end with it."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

import asyncpg
import psycopg
import pytest
from sqlalchemy import make_url, text
from sqlalchemy.ext.asyncio import AsyncConnection, create_async_engine

import advlock
from conftest import DSN, advisory_locks, connect, wait_until, waiting

KEY42 = advlock.key("account", 42)


async def apg(app: str = "advlock-test") -> asyncpg.Connection:
    return await asyncpg.connect(DSN, server_settings={"application_name": app, "statement_timeout": "20000"})


async def apsy(app: str = "advlock-test") -> psycopg.AsyncConnection[Any]:
    return await psycopg.AsyncConnection.connect(DSN, autocommit=True, application_name=app)


async def poll(predicate: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + 10
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.01)


def test_s03_s07_s08_s09_asyncpg_lock_try_lock_lock_all(admin: psycopg.Connection[Any]) -> None:
    async def main() -> None:
        conn = await apg()
        pid = conn.get_server_pid()
        async with conn.transaction():
            async with advlock.lock(conn, "account", 42, timeout=2.0):
                assert advisory_locks(admin, pid) == [(pid, True, "ExclusiveLock", KEY42)]
            assert await advlock.try_lock(conn, "account", 17) is True
            async with advlock.lock_all(conn, "account", [5, 6], timeout=1.0):
                assert len(advisory_locks(admin, pid)) == 4
            entries = await advlock.holders(conn, "account", 42)
            assert [(e.pid, e.granted) for e in entries] == [(pid, True)]
        assert advisory_locks(admin, pid) == []
        await conn.close()

    asyncio.run(main())


def test_s04_asyncpg_outside_a_transaction_names_the_fix(admin: psycopg.Connection[Any]) -> None:
    async def main() -> None:
        conn = await apg()
        with pytest.raises(advlock.NotInTransaction, match=r"`async with conn\.transaction\(\):`"):
            async with advlock.lock(conn, "account", 42, timeout=1):
                pass
        with pytest.raises(advlock.NotInTransaction):
            await advlock.try_lock(conn, "account", 42)
        assert advisory_locks(admin, conn.get_server_pid()) == []
        await conn.close()

    asyncio.run(main())


def test_s06_s07_asyncpg_pool_proxy_and_race_for_account_42(admin: psycopg.Connection[Any]) -> None:
    """Two workers on one asyncpg pool race for account 42: one wins, the other waits 200 ms
    and gets LockTimeout naming the winner's pid."""

    async def main() -> None:
        pool = await asyncpg.create_pool(DSN, min_size=2, max_size=2, server_settings={"application_name": "pool"})
        winner: list[int] = []
        release = asyncio.Event()

        async def worker() -> str:
            async with pool.acquire() as conn, conn.transaction():
                try:
                    async with advlock.lock(conn, "account", 42, timeout=0.2):
                        winner.append(conn.get_server_pid())
                        await asyncio.wait_for(release.wait(), 10)
                        return "won"
                except advlock.LockTimeout as e:
                    assert winner and e.pid == winner[0] and e.application_name == "pool"
                    release.set()
                    return "timed out"

        assert sorted(await asyncio.gather(worker(), worker())) == ["timed out", "won"]
        await pool.close()

    asyncio.run(main())


async def _cancel_a_waiting_lock(
    open_conn: Callable[[], Awaitable[Any]],
    pid_of: Callable[[Any], Awaitable[int]],
    query: Callable[[Any, str], Awaitable[Any]],
    transaction: Callable[[Any], Any],
    admin: psycopg.Connection[Any],
    reconnects: bool = False,
) -> None:
    """`reconnects`: SQLAlchemy invalidates a connection whose statement was interrupted by
    a BaseException (CancelledError) and closes the DBAPI connection: the backend is gone
    rather than idle, and the AsyncConnection goes on with a new one."""
    with connect("holder") as holder, holder.transaction():
        assert advlock.try_lock(holder, "account", 42)
        conn = await open_conn()
        pid = await pid_of(conn)

        async def wait_for_lock() -> None:
            async with transaction(conn), advlock.lock(conn, "account", 42, timeout=30.0):
                raise AssertionError("must not get the lock while the holder holds it")

        task = asyncio.create_task(wait_for_lock())
        await poll(lambda: waiting(admin, pid), "the task to queue in the server")
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        # Nothing held or queued for that backend, at once, while the holder still holds.
        assert advisory_locks(admin, pid) == []
        assert advisory_locks(admin, holder.info.backend_pid) == [
            (holder.info.backend_pid, True, "ExclusiveLock", KEY42)
        ]
        # The backend is idle (or gone), not still running the wait, and the connection works.
        if reconnects:
            wait_until(
                lambda: backend_state(admin, pid) is None, 5.0, what="the invalidated connection's backend to end"
            )
        else:
            assert backend_state(admin, pid) == "idle"
        assert await query(conn, "SELECT 41 + 1") == 42
        if reconnects:
            pid = await pid_of(conn)
    # And it can take the lock once it is free.
    async with transaction(conn), advlock.lock(conn, "account", 42, timeout=1.0):
        assert advisory_locks(admin, pid) == [(pid, True, "ExclusiveLock", KEY42)]
    await conn.close()


def backend_state(admin: psycopg.Connection[Any], pid: int) -> str | None:
    row = admin.execute("SELECT state FROM pg_stat_activity WHERE pid = %s", (pid,)).fetchone()
    return None if row is None else str(row[0])


async def fetchval_pid(conn: asyncpg.Connection) -> int:
    return int(await conn.fetchval("SELECT pg_backend_pid()"))


def test_s10_asyncpg_cancellation_leaves_nothing_held_or_queued(admin: psycopg.Connection[Any]) -> None:
    async def fetchval(conn: asyncpg.Connection, sql: str) -> Any:
        return await conn.fetchval(sql)

    asyncio.run(_cancel_a_waiting_lock(apg, fetchval_pid, fetchval, lambda c: c.transaction(), admin))


def test_s10_psycopg_async_cancellation_leaves_nothing_held_or_queued(admin: psycopg.Connection[Any]) -> None:
    async def fetchval(conn: psycopg.AsyncConnection[Any], sql: str) -> Any:
        cur = await conn.execute(sql)
        row = await cur.fetchone()
        return row[0] if row else None

    async def pid(conn: psycopg.AsyncConnection[Any]) -> int:
        return int(await fetchval(conn, "SELECT pg_backend_pid()"))

    asyncio.run(_cancel_a_waiting_lock(apsy, pid, fetchval, lambda c: c.transaction(), admin))


@pytest.mark.parametrize("driver", ["postgresql+asyncpg", "postgresql+psycopg"])
def test_s10_s33_sqlalchemy_async_cancellation(driver: str, admin: psycopg.Connection[Any]) -> None:
    async def main() -> None:
        engine = create_async_engine(make_url(DSN).set(drivername=driver))

        async def fetchval(conn: AsyncConnection, sql: str) -> Any:
            return (await conn.execute(text(sql))).scalar()

        async def pid(conn: AsyncConnection) -> int:
            value = int(await fetchval(conn, "SELECT pg_backend_pid()"))
            await conn.commit()  # the pid query began a transaction: start the test from none
            return value

        await _cancel_a_waiting_lock(engine.connect, pid, fetchval, lambda c: c.begin(), admin, reconnects=True)
        await engine.dispose()

    asyncio.run(main())


def test_s04_s06_psycopg_async_lock_timeout_and_fix_message(admin: psycopg.Connection[Any]) -> None:
    async def main() -> None:
        conn = await apsy("waiter")
        with pytest.raises(advlock.NotInTransaction, match=r"`async with conn\.transaction\(\):`"):
            async with advlock.lock(conn, "account", 42, timeout=1):
                pass
        with connect("holder") as holder, holder.transaction():
            assert advlock.try_lock(holder, "account", 42)
            async with conn.transaction():
                assert await advlock.try_lock(conn, "account", 42) is False
            with pytest.raises(advlock.LockTimeout) as info:
                async with conn.transaction(), advlock.lock(conn, "account", 42, timeout=0.2):
                    pass
            assert (info.value.pid, info.value.application_name) == (holder.info.backend_pid, "holder")
        await conn.close()

    asyncio.run(main())
