"""SQLAlchemy 2.0: Connection and Session (psycopg), AsyncConnection and AsyncSession (asyncpg
and psycopg), AUTOCOMMIT refused, LockTimeout through SQLAlchemy's exception wrapping."""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
import pytest
from sqlalchemy import create_engine, make_url, text
from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine
from sqlalchemy.orm import Session

import advlock
from conftest import DSN, advisory_locks, connect

URL = make_url(DSN)
KEY42 = advlock.key("account", 42)


def backend_pid(conn: Any) -> int:
    return int(conn.execute(text("SELECT pg_backend_pid()")).scalar_one())


def test_s33_sync_connection_and_session(admin: psycopg.Connection[Any]) -> None:
    engine = create_engine(URL.set(drivername="postgresql+psycopg"))
    with engine.begin() as conn:
        pid = backend_pid(conn)
        with advlock.lock(conn, "account", 42, timeout=1.0):
            assert advisory_locks(admin, pid) == [(pid, True, "ExclusiveLock", KEY42)]
        assert advlock.try_lock(conn, "account", 17)
        assert [e.pid for e in advlock.holders(conn, "account", 17)] == [pid]
    assert advisory_locks(admin, pid) == []
    with Session(engine) as session:
        with session.begin():
            pid = backend_pid(session)
            with advlock.lock_all(session, "account", [1, 2], timeout=1.0):
                assert len(advisory_locks(admin, pid)) == 2
        assert advisory_locks(admin, pid) == []
    engine.dispose()


def test_s04_s33_sync_autocommit_is_refused(admin: psycopg.Connection[Any]) -> None:
    for engine in (
        create_engine(URL.set(drivername="postgresql+psycopg"), isolation_level="AUTOCOMMIT"),
        create_engine(URL.set(drivername="postgresql+psycopg")).execution_options(isolation_level="AUTOCOMMIT"),
    ):
        with engine.connect() as conn:
            with (
                pytest.raises(advlock.NotInTransaction, match="AUTOCOMMIT"),
                advlock.lock(conn, "account", 42, timeout=1),
            ):
                pass
            assert advisory_locks(admin, backend_pid(conn)) == []
        engine.dispose()


def test_s06_s33_sync_lock_timeout_names_the_holder() -> None:
    engine = create_engine(URL.set(drivername="postgresql+psycopg"))
    with connect("holder") as holder, holder.transaction():
        assert advlock.try_lock(holder, "account", 42)
        with engine.begin() as conn:
            with pytest.raises(advlock.LockTimeout) as info, advlock.lock(conn, "account", 42, timeout=0.1):
                pass
            assert (info.value.pid, info.value.application_name) == (holder.info.backend_pid, "holder")
            conn.rollback()
    engine.dispose()


@pytest.mark.parametrize("driver", ["postgresql+asyncpg", "postgresql+psycopg"])
def test_s33_async_connection_and_session(driver: str, admin: psycopg.Connection[Any]) -> None:
    async def main() -> None:
        engine = create_async_engine(URL.set(drivername=driver))
        async with engine.begin() as conn:
            pid = int((await conn.execute(text("SELECT pg_backend_pid()"))).scalar_one())
            async with advlock.lock(conn, "account", 42, timeout=1.0):
                assert advisory_locks(admin, pid) == [(pid, True, "ExclusiveLock", KEY42)]
            assert await advlock.try_lock(conn, "account", 17)
        assert advisory_locks(admin, pid) == []
        async with AsyncSession(engine) as session, session.begin():
            async with advlock.lock_all(session, "account", [1, 2], timeout=1.0):
                pid = int((await session.execute(text("SELECT pg_backend_pid()"))).scalar_one())
                assert len(advisory_locks(admin, pid)) == 2
            with connect("waiter") as waiter, waiter.transaction():
                with pytest.raises(advlock.LockTimeout) as info, advlock.lock(waiter, "account", 1, timeout=0.1):
                    pass
                assert info.value.pid == pid
        async with engine.connect() as conn:
            auto = await conn.execution_options(isolation_level="AUTOCOMMIT")
            with pytest.raises(advlock.NotInTransaction, match="AUTOCOMMIT"):
                await advlock.try_lock(auto, "account", 42)
        await engine.dispose()

    asyncio.run(main())


@pytest.mark.parametrize("driver", ["postgresql+asyncpg", "postgresql+psycopg"])
def test_s06_s33_async_lock_timeout_through_sqlalchemy(driver: str) -> None:
    async def main() -> None:
        engine = create_async_engine(URL.set(drivername=driver))
        with connect("holder") as holder, holder.transaction():
            assert advlock.try_lock(holder, "account", 42)
            async with engine.connect() as conn:
                with pytest.raises(advlock.LockTimeout) as info:
                    async with advlock.lock(conn, "account", 42, timeout=0.1):
                        pass
                assert (info.value.pid, info.value.application_name) == (holder.info.backend_pid, "holder")
                await conn.rollback()
        await engine.dispose()

    asyncio.run(main())
