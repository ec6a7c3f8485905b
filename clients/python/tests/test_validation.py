"""Bad arguments fail with ValueError/TypeError naming the argument before any round trip:
proven on a closed connection, where any round trip would raise the driver's own error."""

from __future__ import annotations

import asyncio
from typing import Any

import asyncpg
import psycopg
import psycopg_pool
import pytest

import advlock
from conftest import DSN, connect

BAD_CALLS = [
    (lambda c: advlock.lock(c, "account", 42, timeout=-1), ValueError, "timeout"),
    (lambda c: advlock.lock(c, "account", 42, timeout=float("nan")), ValueError, "timeout"),
    (lambda c: advlock.lock(c, "account", 42, timeout=True), TypeError, "timeout"),
    (lambda c: advlock.lock(c, "account", 42, timeout="2"), TypeError, "timeout"),  # type: ignore[call-overload]
    (lambda c: advlock.lock(c, "account", 42, timeout=3e6), ValueError, "timeout"),
    (lambda c: advlock.lock(c, "", 42, timeout=1), ValueError, "ns"),
    (lambda c: advlock.lock(c, "account", True, timeout=1), TypeError, "id"),
    (lambda c: advlock.lock(c, "account", 42, timeout=1, shared="yes"), TypeError, "shared"),  # type: ignore[call-overload]
    (lambda c: advlock.try_lock(c, "account", None), TypeError, "id"),  # type: ignore[call-overload]
    (lambda c: advlock.try_lock(c, "account", 1, timeout=-0.5), ValueError, "timeout"),
    (lambda c: advlock.lock_all(c, "account", [], timeout=1), ValueError, "ids"),
    (lambda c: advlock.lock_all(c, "account", "42", timeout=1), TypeError, "ids"),
    (lambda c: advlock.lock_all(c, "account", [42, False], timeout=1), TypeError, "ids element"),
    (lambda c: advlock.holders(c, "", 1), ValueError, "ns"),
]


@pytest.mark.parametrize(("call", "error", "name"), BAD_CALLS)
def test_s02_psycopg_bad_arguments_before_any_round_trip(call: Any, error: type[Exception], name: str) -> None:
    conn = connect()
    conn.close()
    with pytest.raises(error, match=rf"^{name}\b"):
        call(conn)


@pytest.mark.parametrize(("call", "error", "name"), BAD_CALLS)
def test_s02_asyncpg_bad_arguments_before_any_round_trip(call: Any, error: type[Exception], name: str) -> None:
    async def main() -> None:
        conn = await asyncpg.connect(DSN)
        await conn.close()
        with pytest.raises(error, match=rf"^{name}\b"):
            result = call(conn)
            if asyncio.iscoroutine(result):
                await result

    asyncio.run(main())


@pytest.mark.parametrize(
    ("kwargs", "error", "name"),
    [
        ({"timeout": -1}, ValueError, "timeout"),
        ({"timeout": 1, "id": True}, TypeError, "id"),
        ({"timeout": 1, "ns": ""}, ValueError, "ns"),
        ({"timeout": 1, "driver": "pg8000"}, ValueError, "driver"),
    ],
)
def test_s02_session_lock_bad_arguments_before_connecting(
    kwargs: dict[str, Any], error: type[Exception], name: str
) -> None:
    args = {"ns": "migrate", **kwargs}
    with pytest.raises(error, match=rf"^{name}\b"):
        advlock.session_lock("host=/nonexistent port=1", **args)


def test_s02_not_a_connection() -> None:
    with pytest.raises(TypeError, match=r"^conn: expected a psycopg, asyncpg or SQLAlchemy connection"):
        advlock.lock(DSN, "account", 42, timeout=1)  # type: ignore[call-overload]
    with psycopg_pool.ConnectionPool(DSN, min_size=1, max_size=1, open=True) as pool:
        with pytest.raises(TypeError, match=r"not a pool: `with pool.connection\(\) as conn:`"):
            advlock.try_lock(pool, "account", 42)  # type: ignore[call-overload]


def test_s02_wrong_with_for_the_connection_kind() -> None:
    async def main() -> None:
        aconn = await psycopg.AsyncConnection.connect(DSN, autocommit=True)
        async with aconn:
            # mypy --strict rejects this (the ignore would be unused otherwise); at run time a TypeError.
            with pytest.raises(TypeError, match="use `async with`"), advlock.lock(aconn, "account", 42, timeout=1):  # type: ignore[attr-defined]
                pass
        with connect() as conn, conn.transaction():
            with pytest.raises(TypeError, match="use `with`, not `async with`"):
                async with advlock.lock(conn, "account", 42, timeout=1):  # type: ignore[attr-defined]
                    pass

    asyncio.run(main())
