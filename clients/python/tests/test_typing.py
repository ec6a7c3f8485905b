"""The overloads type a blocking connection's calls as plain values and an asyncio one's as
awaitables (checked by mypy --strict over this file; run for real here too)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any, assert_type

import psycopg
import psycopg_pool
from sqlalchemy import Engine, create_engine, make_url
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, create_async_engine
from sqlalchemy.orm import Session

import advlock
from conftest import DSN, connect


def test_blocking_calls_return_values() -> None:
    with connect() as conn, conn.transaction():
        assert assert_type(advlock.try_lock(conn, "typing", 1), bool) is True
        assert assert_type(advlock.holders(conn, "typing", 1), list[advlock.LockEntry])[0].granted
    engine = create_engine(make_url(DSN).set(drivername="postgresql+psycopg"))
    with Session(engine) as session, session.begin():
        assert assert_type(advlock.try_lock(session, "typing", 1), bool) is True
    engine.dispose()


def test_asyncio_calls_return_awaitables() -> None:
    async def main() -> None:
        aconn: psycopg.AsyncConnection[Any] = await psycopg.AsyncConnection.connect(DSN, autocommit=True)
        async with aconn, aconn.transaction():
            assert await assert_type(advlock.try_lock(aconn, "typing", 1), Awaitable[bool]) is True
        engine = create_async_engine(make_url(DSN).set(drivername="postgresql+psycopg"))
        async with AsyncSession(engine) as session, session.begin():
            assert await assert_type(advlock.try_lock(session, "typing", 1), Awaitable[bool]) is True
            rows = await assert_type(advlock.holders(session), Awaitable[list[advlock.LockEntry]])
            assert [r.key for r in rows] == [advlock.key("typing", 1)]
        await engine.dispose()

    asyncio.run(main())


def test_lease_takes_pools_and_engines() -> None:
    # Typed only (mypy --strict over this file): lease() accepts every pool and engine kind and
    # returns a Lease; a DSN string is refused (the `type: ignore` would be unused otherwise).
    def check(
        p: psycopg_pool.ConnectionPool[Any],
        ap: psycopg_pool.AsyncConnectionPool[Any],
        engine: Engine,
        aengine: AsyncEngine,
        conn: psycopg.Connection[Any],
    ) -> None:
        for source in (p, ap, engine, aengine, conn):
            assert_type(advlock.lease(source, "typing", ttl=30, timeout=1), advlock.Lease)
        advlock.lease("postgresql://", "typing", ttl=30, timeout=1)  # type: ignore[arg-type]

    assert callable(check)
