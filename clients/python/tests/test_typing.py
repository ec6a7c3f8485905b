"""The overloads type a blocking connection's calls as plain values and an asyncio one's as
awaitables (checked by mypy --strict over this file; run for real here too)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any, assert_type

import psycopg
from sqlalchemy import create_engine, make_url
from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine
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
