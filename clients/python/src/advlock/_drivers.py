"""One small adapter per driver: how to run a query and whether a transaction block is open,
and the schema advlock lives in (every advlock name in the SQL is qualified with it).

No driver is imported here unless the caller's connection came from it: a connection object
can only exist if its module is in sys.modules, so the core needs no driver installed.
"""

from __future__ import annotations

import contextlib
import sys
import weakref
from collections.abc import Iterator, Sequence
from typing import Any

from ._errors import NotInstalled

Row = tuple[Any, ...]

# SQL templates write every advlock object as `@.advlock_name`: `@.` becomes the schema advlock
# lives in ("advlock".), so a schema off search_path works. Parameters are written {} and each
# adapter fills in its own placeholder style. Parameters are always sent with CAST(... AS type),
# so no driver has to guess a type (and SQLAlchemy's text() would read `:p::text` as no
# parameter at all).
SCHEMA = "@."

# The schema of the advlock extension, or else of the SQL edition (the schema of advlock_key()
# that comes first on search_path, then by name); NULL when neither is installed.
LOOKUP_SQL = (
    "SELECT coalesce("
    "(SELECT n.nspname FROM pg_catalog.pg_extension e JOIN pg_catalog.pg_namespace n ON n.oid = e.extnamespace"
    " WHERE e.extname = 'advlock'),"
    " (SELECT n.nspname FROM pg_catalog.pg_proc p JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace"
    " WHERE p.proname = 'advlock_key'"
    " ORDER BY pg_catalog.array_position(pg_catalog.current_schemas(false), n.nspname) NULLS LAST, n.nspname"
    " LIMIT 1)), pg_catalog.current_database()"
)


def quote_ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def check_schema(schema: object) -> str | None:
    """schema=: None (find it) or a schema name, checked before any round trip."""
    if schema is None:
        return None
    if not isinstance(schema, str):
        raise TypeError(f"schema must be a str (a schema name) or None, got {type(schema).__name__}")
    if schema == "" or "\x00" in schema:
        raise ValueError(f"schema must be a schema name, got {schema!r}")
    return schema


def schema_prefix(found: Row) -> str:
    """The `"schema".` prefix from LOOKUP_SQL's row, or NotInstalled naming the fix."""
    schema, database = found
    if schema is None:
        raise NotInstalled(
            f"advlock is not installed in database {database!r}: run CREATE EXTENSION advlock there (or install "
            "the SQL edition, edition/advlock_sql.sql), or pass schema= naming the schema it is installed in"
        )
    return quote_ident(str(schema)) + "."


# The prefix found for a driver connection, kept as long as the connection lives: pools hand
# out the same driver connections again, so the lookup costs one round trip per connection.
_FOUND: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()


def cached_prefix(raw: object) -> str | None:
    try:
        return _FOUND.get(raw)
    except TypeError:  # not weak-referenceable: looked up every time
        return None


def remember_prefix(raw: object, prefix: str) -> None:
    with contextlib.suppress(TypeError):
        _FOUND[raw] = prefix


def qualify(sql: str, prefix: str) -> str:
    return sql.replace(SCHEMA, prefix)


class SyncAdapter:
    """A blocking connection: psycopg.Connection, SQLAlchemy Connection or Session."""

    schema: str | None = None

    def execute(self, sql: str, args: Sequence[object]) -> list[Row]:
        """Run sql as written (placeholders filled in, no schema)."""
        raise NotImplementedError

    def raw(self) -> object:
        """The driver's own connection (what the schema is remembered for)."""
        raise NotImplementedError

    def prefix(self) -> str:
        if self.schema is not None:
            return quote_ident(self.schema) + "."
        raw = self.raw()
        found = cached_prefix(raw)
        if found is None:
            found = schema_prefix(self.execute(LOOKUP_SQL, [])[0])
            remember_prefix(raw, found)
        return found

    def query(self, sql: str, args: Sequence[object]) -> list[Row]:
        return self.execute(qualify(sql, self.prefix()), args)

    def xact_problem(self) -> str | None:
        """Why an xact-scope lock taken now would protect nothing, or None when it is fine."""
        raise NotImplementedError


class AsyncAdapter:
    """An asyncio connection: psycopg.AsyncConnection, asyncpg (pool proxies too), SQLAlchemy
    AsyncConnection or AsyncSession."""

    schema: str | None = None

    async def execute(self, sql: str, args: Sequence[object]) -> list[Row]:
        raise NotImplementedError

    async def raw(self) -> object:
        raise NotImplementedError

    async def prefix(self) -> str:
        if self.schema is not None:
            return quote_ident(self.schema) + "."
        raw = await self.raw()
        found = cached_prefix(raw)
        if found is None:
            found = schema_prefix((await self.execute(LOOKUP_SQL, []))[0])
            remember_prefix(raw, found)
        return found

    async def query(self, sql: str, args: Sequence[object]) -> list[Row]:
        return await self.execute(qualify(sql, await self.prefix()), args)

    async def xact_problem(self) -> str | None:
        raise NotImplementedError


def call_sql(function: str, *types: str, mode: bool = True) -> str:
    """SELECT @.function(CAST({} AS type), ..., mode => CAST({} AS text))."""
    args = [f"CAST({{}} AS {t})" for t in types] + (["mode => CAST({} AS text)"] if mode else [])
    return f"SELECT {SCHEMA}{function}({', '.join(args)})"


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
    def __init__(self, conn: Any, schema: str | None) -> None:
        self.conn = conn
        self.schema = schema

    def raw(self) -> object:
        return self.conn

    def execute(self, sql: str, args: Sequence[object]) -> list[Row]:
        from psycopg.rows import tuple_row

        # An explicit row factory: the caller's (dict_row, ...) must not change what we read.
        # prepare=False: psycopg prepares a statement run 5 times on a connection, by name, which
        # a transaction-mode pooler (PgBouncer before 1.21) loses or hands to another client.
        with self.conn.cursor(row_factory=tuple_row) as cur:
            cur.execute(sql.format(*["%s"] * len(args)), list(args), prepare=False)
            return list(cur.fetchall())

    def xact_problem(self) -> str | None:
        return _psycopg_problem(self.conn, "with conn.transaction():")


class _PsycopgAsync(AsyncAdapter):
    def __init__(self, conn: Any, schema: str | None) -> None:
        self.conn = conn
        self.schema = schema

    async def raw(self) -> object:
        return self.conn

    async def execute(self, sql: str, args: Sequence[object]) -> list[Row]:
        from psycopg.rows import tuple_row

        # On asyncio cancellation psycopg sends a cancel request and waits for the server to
        # end the statement, so a cancelled wait leaves no waiter behind (tested).
        async with self.conn.cursor(row_factory=tuple_row) as cur:
            await cur.execute(sql.format(*["%s"] * len(args)), list(args), prepare=False)
            return list(await cur.fetchall())

    async def xact_problem(self) -> str | None:
        return _psycopg_problem(self.conn, "async with conn.transaction():")


class _Asyncpg(AsyncAdapter):
    def __init__(self, conn: Any, schema: str | None) -> None:
        self.conn = conn
        self.schema = schema

    async def raw(self) -> object:
        # A pool's proxy is new at every acquire; the connection behind it is not.
        return getattr(self.conn, "_con", None) or self.conn

    async def execute(self, sql: str, args: Sequence[object]) -> list[Row]:
        # When the awaiting task is cancelled, asyncpg sends the server a cancel request and
        # makes the connection's next command (the enclosing transaction's ROLLBACK) wait for
        # it: the wait ends on the server, and the rollback drops anything granted meanwhile.
        #
        # The unnamed statement (name=""), never asyncpg's statement cache: the cache prepares
        # every query by name (statement_cache_size, default 100), which a transaction-mode
        # pooler (PgBouncer before 1.21) loses when the next transaction runs on another server
        # connection. asyncpg sends the unnamed statement's Parse and its Bind/Execute without a
        # Sync between them, so a pooler keeps them on one server connection.
        placeholders = [f"${i}" for i in range(1, len(args) + 1)]
        statement = await self.conn.prepare(sql.format(*placeholders), name="")
        return [tuple(r) for r in await statement.fetch(*args)]

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


@contextlib.contextmanager
def _unprepared(driver_connection: object) -> Iterator[None]:
    """psycopg prepares a statement by name from its fifth run on a connection
    (prepare_threshold), and SQLAlchemy passes no prepare=False: advlock's statements run with
    it off, then it is put back (the application's own statements keep its setting)."""
    psycopg = sys.modules.get("psycopg")
    if psycopg is None or not isinstance(driver_connection, (psycopg.Connection, psycopg.AsyncConnection)):
        yield
        return
    saved = driver_connection.prepare_threshold
    driver_connection.prepare_threshold = None
    try:
        yield
    finally:
        driver_connection.prepare_threshold = saved


class _SASync(SyncAdapter):
    def __init__(self, conn: Any, is_session: bool, schema: str | None) -> None:
        self.conn = conn
        self.is_session = is_session
        self.schema = schema

    def raw(self) -> object:
        connection = self.conn.connection() if self.is_session else self.conn
        return connection.connection.driver_connection

    def execute(self, sql: str, args: Sequence[object]) -> list[Row]:
        stmt, params = _sa_bind(sql, args)
        with _unprepared(self.raw()):
            return [tuple(r) for r in self.conn.execute(stmt, params).all()]

    def xact_problem(self) -> str | None:
        # SQLAlchemy 2.0 begins a transaction on first execute, so only AUTOCOMMIT is a problem.
        connection = self.conn.connection() if self.is_session else self.conn
        return _SA_FIX if _sa_autocommit(connection, connection.connection) else None


class _SAAsync(AsyncAdapter):
    def __init__(self, conn: Any, is_session: bool, schema: str | None) -> None:
        self.conn = conn
        self.is_session = is_session
        self.schema = schema

    async def raw(self) -> object:
        connection = await self.conn.connection() if self.is_session else self.conn
        return (await connection.get_raw_connection()).driver_connection

    async def execute(self, sql: str, args: Sequence[object]) -> list[Row]:
        stmt, params = _sa_bind(sql, args)
        with _unprepared(await self.raw()):
            result = await self.conn.execute(stmt, params)
        return [tuple(r) for r in result.all()]

    async def xact_problem(self) -> str | None:
        connection = await self.conn.connection() if self.is_session else self.conn
        raw = await connection.get_raw_connection()  # starts the connection: sync_connection is set
        return _SA_FIX if _sa_autocommit(connection.sync_connection, raw) else None


Adapter = SyncAdapter | AsyncAdapter


def adapt(conn: object, schema: str | None = None) -> Adapter:
    """The adapter for a driver connection, or TypeError naming what to pass instead. schema:
    the schema advlock lives in (None: found once per connection)."""
    mods = sys.modules
    if "psycopg" in mods:
        import psycopg

        if isinstance(conn, psycopg.Connection):
            return _PsycopgSync(conn, schema)
        if isinstance(conn, psycopg.AsyncConnection):
            return _PsycopgAsync(conn, schema)
    if "asyncpg" in mods:
        import asyncpg
        from asyncpg.pool import PoolConnectionProxy

        if isinstance(conn, (asyncpg.Connection, PoolConnectionProxy)):
            return _Asyncpg(conn, schema)
        if isinstance(conn, asyncpg.Pool):
            raise TypeError("conn: pass a connection, not a pool: `async with pool.acquire() as conn:`")
    if "sqlalchemy" in mods:
        from sqlalchemy.engine import Connection, Engine
        from sqlalchemy.orm import Session

        if isinstance(conn, Connection):
            return _SASync(conn, False, schema)
        if isinstance(conn, Session):
            return _SASync(conn, True, schema)
        if isinstance(conn, Engine):
            raise TypeError("conn: pass a Connection or Session, not an Engine: `with engine.begin() as conn:`")
        if "sqlalchemy.ext.asyncio" in mods:
            from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession

            if isinstance(conn, AsyncConnection):
                return _SAAsync(conn, False, schema)
            if isinstance(conn, AsyncSession):
                return _SAAsync(conn, True, schema)
    if "psycopg_pool" in mods:
        import psycopg_pool

        if isinstance(conn, (psycopg_pool.ConnectionPool, psycopg_pool.AsyncConnectionPool)):
            raise TypeError("conn: pass a connection, not a pool: `with pool.connection() as conn:`")
    raise TypeError(
        "conn: expected a psycopg, asyncpg or SQLAlchemy connection, "
        f"got {type(conn).__module__}.{type(conn).__qualname__}"
    )
