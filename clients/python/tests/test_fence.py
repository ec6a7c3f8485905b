"""advlock.fence() and advlock.lease_check() in a write transaction: the fence refuses a
stale holder's token inside the writer's own transaction (FenceRefused, LK001), and the write
rolls back with it; lease_check raises LeaseNotHeld (LK002) once the lease has ended."""

from __future__ import annotations

import asyncio
import re
from typing import Any

import asyncpg
import psycopg
import pytest

import advlock
from conftest import DSN, connect, needs_leases


@pytest.fixture
def fenced(admin: psycopg.Connection[Any]) -> Any:
    admin.execute("DROP TABLE IF EXISTS fenced_report")
    admin.execute("CREATE TABLE fenced_report (id int PRIMARY KEY, body text)")
    admin.execute("INSERT INTO fenced_report VALUES (1, 'initial')")
    admin.execute("SELECT advlock_fence_reset('report', 'daily')")
    yield
    admin.execute("DROP TABLE fenced_report")
    admin.execute("SELECT advlock_fence_reset('report', 'daily')")


def write(conn: psycopg.Connection[Any], token: int, body: str) -> None:
    with conn.transaction():
        advlock.fence(conn, "report", "daily", token=token)
        conn.execute("UPDATE fenced_report SET body = %s WHERE id = 1", (body,))


def test_s39_a_stale_token_is_refused_and_its_write_rolls_back(fenced: None, admin: psycopg.Connection[Any]) -> None:
    with connect("writer") as conn:
        write(conn, 41, "by 41")
        write(conn, 42, "by 42")
        write(conn, 42, "by 42 again")  # the same token passes again (a retry)
        named = re.escape(f"fence of key {advlock.key('report', 'daily')} = advlock_key('report', 'daily')")
        with pytest.raises(advlock.FenceRefused, match=named + " refused token 41: token 42 has passed it") as info:
            write(conn, 41, "stale")
        assert info.value.token == 41 and info.value.passed == 42
    assert admin.execute("SELECT body FROM fenced_report").fetchone() == ("by 42 again",)


def test_fence_needs_a_transaction_and_checks_its_arguments(fenced: None) -> None:
    with connect() as conn:
        with pytest.raises(advlock.NotInTransaction, match="records its token with the write transaction"):
            advlock.fence(conn, "report", "daily", token=1)
        for bad, error in ((0, ValueError), (True, TypeError), ("7", TypeError), (2**63, ValueError)):
            with pytest.raises(error, match=r"^token"):
                advlock.fence(conn, "report", "daily", token=bad)  # type: ignore[arg-type]


def test_s39_async_fence_on_asyncpg(fenced: None, admin: psycopg.Connection[Any]) -> None:
    async def main() -> None:
        conn = await asyncpg.connect(DSN)
        try:
            async with conn.transaction():
                await advlock.fence(conn, "report", "daily", token=7)
                await conn.execute("UPDATE fenced_report SET body = 'by 7' WHERE id = 1")
            with pytest.raises(advlock.FenceRefused):
                async with conn.transaction():
                    await advlock.fence(conn, "report", "daily", token=6)
                    await conn.execute("UPDATE fenced_report SET body = 'stale' WHERE id = 1")
        finally:
            await conn.close()

    asyncio.run(main())
    assert admin.execute("SELECT body FROM fenced_report").fetchone() == ("by 7",)


@needs_leases()
def test_s39_lease_check_passes_while_held_and_raises_after(fenced: None, admin: psycopg.Connection[Any]) -> None:
    import psycopg_pool

    with psycopg_pool.ConnectionPool(DSN, min_size=1, max_size=2, kwargs={"autocommit": True}) as pool:
        with advlock.lease(pool, "report", "daily", ttl=5.0, timeout=1.0) as lease, pool.connection() as conn:
            with conn.transaction():
                advlock.lease_check(conn, lease.token)
                advlock.fence(conn, "report", "daily", token=lease.token)
                conn.execute("UPDATE fenced_report SET body = 'leased' WHERE id = 1")
            token = lease.token
        with pool.connection() as conn:
            with pytest.raises(advlock.LeaseNotHeld, match=f"lease {token} is not held"):
                with conn.transaction():
                    conn.execute("UPDATE fenced_report SET body = 'late' WHERE id = 1")
                    advlock.lease_check(conn, token)  # ends the transaction: the write rolls back
    assert admin.execute("SELECT body FROM fenced_report").fetchone() == ("leased",)
