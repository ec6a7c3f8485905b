"""advlock in a schema that is not on search_path, as the SQL edition's docs install it: the
client finds the schema once per connection (or takes schema=) and qualifies every function
and view; a database without advlock is a clear error naming the fix. Run for the extension
(CREATE EXTENSION advlock SCHEMA advlock) and the SQL edition (installed into schema advlock),
in databases of their own on the suite's server."""

from __future__ import annotations

import asyncio
import os
import re
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import psycopg
import psycopg_pool
import pytest
from sqlalchemy import create_engine, make_url, text
from sqlalchemy.ext.asyncio import create_async_engine

import advlock
from conftest import connect, server_kind

EDITION = Path(__file__).resolve().parents[3] / "edition" / "advlock_sql.sql"
Kind = Literal["extension", "edition", "none"]


def dsn_of(database: str) -> str:
    parts = urlsplit(os.environ.get("ADVLOCK_PY_DSN", "postgresql://postgres@127.0.0.1:5433/advlock_python"))
    return urlunsplit((parts.scheme, parts.netloc, "/" + database, "", ""))


def fresh_database(kind: Kind) -> str:
    name = f"advlock_python_schema_{kind}"
    with connect("schema-setup") as admin:
        admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        admin.execute(f"CREATE DATABASE {name}")
    with psycopg.connect(dsn_of(name), autocommit=True) as c:
        if kind == "extension":
            c.execute("CREATE SCHEMA advlock")
            c.execute("CREATE EXTENSION advlock SCHEMA advlock")
        elif kind == "edition":
            c.execute("CREATE SCHEMA advlock")
            c.execute("SET search_path = advlock")
            c.execute(EDITION.read_text().encode())
    return dsn_of(name)


@pytest.fixture(scope="module", params=["extension", "edition"])
def off_path(request: pytest.FixtureRequest) -> Iterator[str]:
    dsn = fresh_database(request.param)
    with psycopg.connect(dsn, autocommit=True) as c:
        # Not on search_path: a bare advlock_key() is unknown here.
        assert c.execute("SELECT to_regproc('advlock_key') IS NULL").fetchone() == (True,)
    yield dsn
    with connect("schema-teardown") as admin:
        admin.execute(f"DROP DATABASE {urlsplit(dsn).path.lstrip('/')} WITH (FORCE)")


def test_s31_every_helper_works_with_advlock_off_search_path(off_path: str) -> None:
    with psycopg.connect(off_path) as conn, conn.transaction():
        with advlock.lock(conn, "account", 42, timeout=1):
            assert [r.key for r in advlock.holders(conn)] == [advlock.key("account", 42)]
        assert advlock.try_lock(conn, "account", 43) is True
        with advlock.lock_all(conn, "account", [1, 2], timeout=1):
            pass
        assert len(advlock.holders(conn, "account", 43)) == 1
    with advlock.session_lock(off_path, "migrate", timeout=1) as held:
        assert held.token > 0 and held.holding()

    async def main() -> None:
        aconn = await asyncpg.connect(off_path)
        try:
            async with aconn.transaction(), advlock.lock(aconn, "account", 42, timeout=1):
                assert len(await advlock.holders(aconn)) == 1
        finally:
            await aconn.close()
        async with advlock.session_lock(off_path, "migrate", timeout=1, driver="asyncpg") as aheld:
            assert await aheld.holding()
        engine = create_async_engine(make_url(off_path).set(drivername="postgresql+psycopg"))
        async with engine.begin() as sa:
            assert await advlock.try_lock(sa, "account", 44) is True
        await engine.dispose()

    asyncio.run(main())
    engine = create_engine(make_url(off_path).set(drivername="postgresql+psycopg"))
    with engine.begin() as sa:
        assert advlock.try_lock(sa, "account", 45) is True
        assert sa.execute(text("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'")).scalar() == 1
    engine.dispose()


def test_s31_schema_argument_and_the_lookup_once_per_connection(off_path: str) -> None:
    with psycopg.connect(off_path) as conn, conn.transaction():
        assert advlock.try_lock(conn, "account", 1, schema="advlock") is True
        with pytest.raises(psycopg.errors.InvalidSchemaName):
            advlock.try_lock(conn, "account", 2, schema="no_such_schema")
    with psycopg_pool.ConnectionPool(off_path, min_size=1, max_size=1) as pool:
        sent = []
        for i in range(3):
            with pool.connection() as conn:
                sent.append(statements(conn, lambda: advlock.try_lock(conn, "account", i)))  # noqa: B023
        # BEGIN and the lock's SELECT each time, and the schema lookup at the first use of the
        # pooled connection only.
        assert sent == [3, 2, 2]


def statements(conn: psycopg.Connection[Any], run: Callable[[], object]) -> int:
    """How many statements `run` sent on conn, read from libpq's protocol trace."""
    with tempfile.TemporaryFile("w+") as trace:
        conn.pgconn.trace(trace.fileno())
        try:
            run()
        finally:
            conn.pgconn.untrace()
        trace.seek(0)
        return sum(1 for line in trace if re.search(r"\bF\b.*\b(Parse|Query)\b", line))


@pytest.mark.skipif(server_kind() != "preloaded", reason="leases need advlock preloaded (run_tests.sh's preloaded run)")
def test_s31_lease_off_search_path() -> None:
    dsn = fresh_database("extension")
    with psycopg_pool.ConnectionPool(dsn, min_size=1, max_size=2) as pool:
        with advlock.lease(pool, "report", "daily", ttl=5, timeout=1) as lease:
            assert lease.token > 0
        with advlock.lease(pool, "report", "daily", ttl=5, timeout=1, schema="advlock") as lease:
            assert lease.token > 0


def test_s32_a_database_without_advlock_names_the_fix() -> None:
    dsn = fresh_database("none")
    with psycopg.connect(dsn) as conn, conn.transaction():
        with pytest.raises(advlock.NotInstalled, match=r"CREATE EXTENSION advlock.*or pass schema="):
            advlock.try_lock(conn, "account", 1)
    with pytest.raises(advlock.NotInstalled, match="advlock_python_schema_none"):
        with advlock.session_lock(dsn, "migrate", timeout=1):
            pass
