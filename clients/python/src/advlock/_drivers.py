"""One small adapter per driver: how to run a query and whether a transaction block is open.

No driver is imported here unless the caller's connection came from it: a connection object
can only exist if its module is in sys.modules, so the core needs no driver installed.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

Row = tuple[Any, ...]


class SyncAdapter:
    """A blocking connection: psycopg.Connection, SQLAlchemy Connection or Session."""

    def query(self, sql: str, args: Sequence[object]) -> list[Row]:
        raise NotImplementedError

    def xact_problem(self) -> str | None:
        """Why an xact-scope lock taken now would protect nothing, or None when it is fine."""
        raise NotImplementedError


class AsyncAdapter:
    """An asyncio connection: psycopg.AsyncConnection, asyncpg (pool proxies too), SQLAlchemy
    AsyncConnection or AsyncSession."""

    async def query(self, sql: str, args: Sequence[object]) -> list[Row]:
        raise NotImplementedError

    async def xact_problem(self) -> str | None:
        raise NotImplementedError


# SQL templates use {} for parameters; each adapter fills in its own placeholder style.
# Parameters are always sent with CAST(... AS type), so no driver has to guess a type (and
# SQLAlchemy's text() would read `:p::text` as no parameter at all).


def call_sql(function: str, *types: str, mode: bool = True) -> str:
    """SELECT function(CAST({} AS type), ..., mode => CAST({} AS text))."""
    args = [f"CAST({{}} AS {t})" for t in types] + (["mode => CAST({} AS text)"] if mode else [])
    return f"SELECT {function}({', '.join(args)})"


def _psycopg_problem(conn: Any, fix: str) -> str | None:
    from psycopg.pq import TransactionStatus

    status = conn.info.transaction_status
    if status == TransactionStatus.INTRANS:
        return None
    if status == TransactionStatus.IDLE and not conn.autocommit:
        return None  # psycopg opens the transaction block with this very statement
    if status == TransactionStatus.INERROR:
        return "the transaction is aborted (a previous statement failed): roll it back first"
    if status == TransactionStatus.IDLE:
        return f"the connection is in autocommit mode and no transaction is open: use `{fix}` around it"
    return f"the connection is busy (transaction status {status.name})"


class _PsycopgSync(SyncAdapter):
    def __init__(self, conn: Any) -> None:
        self.conn = conn

    def query(self, sql: str, args: Sequence[object]) -> list[Row]:
        from psycopg.rows import tuple_row

        # An explicit row factory: the caller's (dict_row, ...) must not change what we read.
        with self.conn.cursor(row_factory=tuple_row) as cur:
            cur.execute(sql.format(*["%s"] * len(args)), list(args))
            return list(cur.fetchall())

    def xact_problem(self) -> str | None:
        return _psycopg_problem(self.conn, "with conn.transaction():")


class _PsycopgAsync(AsyncAdapter):
    def __init__(self, conn: Any) -> None:
        self.conn = conn

    async def query(self, sql: str, args: Sequence[object]) -> list[Row]:
        from psycopg.rows import tuple_row

        # On asyncio cancellation psycopg sends a cancel request and waits for the server to
        # end the statement, so a cancelled wait leaves no waiter behind (tested).
        async with self.conn.cursor(row_factory=tuple_row) as cur:
            await cur.execute(sql.format(*["%s"] * len(args)), list(args))
            return list(await cur.fetchall())

    async def xact_problem(self) -> str | None:
        return _psycopg_problem(self.conn, "async with conn.transaction():")


class _Asyncpg(AsyncAdapter):
    def __init__(self, conn: Any) -> None:
        self.conn = conn

    async def query(self, sql: str, args: Sequence[object]) -> list[Row]:
        # When the awaiting task is cancelled, asyncpg sends the server a cancel request and
        # makes the connection's next command (the enclosing transaction's ROLLBACK) wait for
        # it: the wait ends on the server, and the rollback drops anything granted meanwhile.
        placeholders = [f"${i}" for i in range(1, len(args) + 1)]
        return [tuple(r) for r in await self.conn.fetch(sql.format(*placeholders), *args)]

    async def xact_problem(self) -> str | None:
        if self.conn.is_in_transaction():
            return None
        return "no transaction is open: use `async with conn.transaction():` around it"


def _sa_bind(sql: str, args: Sequence[object]) -> tuple[Any, dict[str, object]]:
    from sqlalchemy import text

    names = [f"advlock_p{i}" for i in range(len(args))]
    return text(sql.format(*[":" + n for n in names])), dict(zip(names, args, strict=True))


_SA_FIX = (
    "the connection is in AUTOCOMMIT mode, so the lock would end with the statement: use a "
    "connection in a transaction (`with engine.begin() as conn:`, or a Session)"
)


def _sa_autocommit(connection: Any, raw: Any) -> bool:
    # Either the execution option or the DBAPI connection itself (create_engine's
    # isolation_level="AUTOCOMMIT" sets only the latter).
    option = connection.get_execution_options().get("isolation_level")
    return bool(option == "AUTOCOMMIT" or getattr(raw.dbapi_connection, "autocommit", False))


class _SASync(SyncAdapter):
    def __init__(self, conn: Any, is_session: bool) -> None:
        self.conn = conn
        self.is_session = is_session

    def query(self, sql: str, args: Sequence[object]) -> list[Row]:
        stmt, params = _sa_bind(sql, args)
        return [tuple(r) for r in self.conn.execute(stmt, params).all()]

    def xact_problem(self) -> str | None:
        # SQLAlchemy 2.0 begins a transaction on first execute, so only AUTOCOMMIT is a problem.
        connection = self.conn.connection() if self.is_session else self.conn
        return _SA_FIX if _sa_autocommit(connection, connection.connection) else None


class _SAAsync(AsyncAdapter):
    def __init__(self, conn: Any, is_session: bool) -> None:
        self.conn = conn
        self.is_session = is_session

    async def query(self, sql: str, args: Sequence[object]) -> list[Row]:
        stmt, params = _sa_bind(sql, args)
        result = await self.conn.execute(stmt, params)
        return [tuple(r) for r in result.all()]

    async def xact_problem(self) -> str | None:
        connection = await self.conn.connection() if self.is_session else self.conn
        raw = await connection.get_raw_connection()  # starts the connection: sync_connection is set
        return _SA_FIX if _sa_autocommit(connection.sync_connection, raw) else None


Adapter = SyncAdapter | AsyncAdapter


def adapt(conn: object) -> Adapter:
    """The adapter for a driver connection, or TypeError naming what to pass instead."""
    mods = sys.modules
    if "psycopg" in mods:
        import psycopg

        if isinstance(conn, psycopg.Connection):
            return _PsycopgSync(conn)
        if isinstance(conn, psycopg.AsyncConnection):
            return _PsycopgAsync(conn)
    if "asyncpg" in mods:
        import asyncpg
        from asyncpg.pool import PoolConnectionProxy

        if isinstance(conn, (asyncpg.Connection, PoolConnectionProxy)):
            return _Asyncpg(conn)
        if isinstance(conn, asyncpg.Pool):
            raise TypeError("conn: pass a connection, not a pool: `async with pool.acquire() as conn:`")
    if "sqlalchemy" in mods:
        from sqlalchemy.engine import Connection, Engine
        from sqlalchemy.orm import Session

        if isinstance(conn, Connection):
            return _SASync(conn, is_session=False)
        if isinstance(conn, Session):
            return _SASync(conn, is_session=True)
        if isinstance(conn, Engine):
            raise TypeError("conn: pass a Connection or Session, not an Engine: `with engine.begin() as conn:`")
        if "sqlalchemy.ext.asyncio" in mods:
            from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession

            if isinstance(conn, AsyncConnection):
                return _SAAsync(conn, is_session=False)
            if isinstance(conn, AsyncSession):
                return _SAAsync(conn, is_session=True)
    if "psycopg_pool" in mods:
        import psycopg_pool

        if isinstance(conn, (psycopg_pool.ConnectionPool, psycopg_pool.AsyncConnectionPool)):
            raise TypeError("conn: pass a connection, not a pool: `with pool.connection() as conn:`")
    raise TypeError(
        "conn: expected a psycopg, asyncpg or SQLAlchemy connection, "
        f"got {type(conn).__module__}.{type(conn).__qualname__}"
    )
