"""Session locks done right: on a dedicated connection that the lock owns.

A session lock outlives transactions, so on a pooled connection it outlives your code too: the
pool hands the connection, lock included, to the next borrower. session_lock() therefore takes
a DSN, never a connection, opens its own connection, and unlocks and closes it on exit.
"""

from __future__ import annotations

import asyncio
from types import TracebackType
from typing import Any, Literal

from ._api import mode_of, timeout_ms
from ._drivers import call_sql
from ._errors import Holder, LockLost, LockTimeout
from ._key import check_ns, id_text, key

_ACQUIRE = call_sql("advlock_try_with_token", "text", "text", "int4")  # default scope: session
_HOLDING = call_sql("advlock_holding", "text", "text", "text", mode=False)  # (ns, id, mode)
_UNLOCK = call_sql("advlock_unlock", "text", "text", "text", mode=False)
# Who held it when try_with_token gave up: advlock_try_with_token returns NULL, not an error
# with a DETAIL, so LockTimeout's holders come from advlock_holders (best effort).
_WHO = (
    "SELECT pid, application_name, backend_state FROM advlock_holders"
    " WHERE key = CAST({} AS int8) AND granted ORDER BY pid"
)


def _is_connection_loss(exc: BaseException, conn_dead: bool) -> bool:
    # Class 08 (connection exception) and 57P01-57P03 (admin shutdown, crash shutdown, cannot
    # connect now), or the driver reporting the connection closed: the lock is gone with it.
    state = str(getattr(exc, "sqlstate", "") or "")
    return conn_dead or state.startswith("08") or state in ("57P01", "57P02", "57P03")


class _Base:
    def __init__(
        self, dsn: object, ns: str, id: str | int, timeout: float, shared: bool, application_name: str | None
    ) -> None:
        if not isinstance(dsn, str):
            raise TypeError(
                "session_lock() takes a DSN string and opens its own connection; got "
                f"{type(dsn).__module__}.{type(dsn).__qualname__}. A session lock on a pooled connection "
                "outlives your code (the pool hands it, lock included, to the next borrower): use "
                "session_lock(dsn, ...), or advlock.lock() in a transaction on the pooled connection"
            )
        if application_name is not None and not isinstance(application_name, str):
            raise TypeError("application_name must be a str")
        self.dsn = dsn
        self.ns = check_ns(ns)
        self.id = id_text(id)
        self.key = key(ns, id)
        self.mode = mode_of(shared)
        self.timeout_ms = timeout_ms(timeout)
        self.application_name = application_name
        self.token: int = 0
        self.pid: int = 0
        self.lost: BaseException | None = None  # why the lock was lost, once it was

    def _timeout(self, rows: list[tuple[Any, ...]]) -> LockTimeout:
        e = LockTimeout(
            f"could not obtain {self.mode} session lock on key {self.key} = advlock_key('{self.ns}', '{self.id}')"
            f" within {self.timeout_ms} ms"
        )
        e.holders = tuple(Holder(int(r[0]), r[1], r[2]) for r in rows)
        return e

    def _lost(self) -> LockLost:
        return LockLost(
            f"the session lock on advlock_key('{self.ns}', '{self.id}') (token {self.token}) was lost: {self.lost}"
        )


class HeldLock(_Base):
    """A session lock on its own blocking (psycopg) connection: `with session_lock(...) as held`."""

    def __enter__(self) -> HeldLock:
        import psycopg

        kwargs: dict[str, Any] = {"autocommit": True}
        if self.application_name is not None:
            kwargs["application_name"] = self.application_name
        self._conn = psycopg.connect(self.dsn, **kwargs)
        try:
            self.pid = self._conn.info.backend_pid
            args = [self.ns, self.id, self.timeout_ms, self.mode]
            token = self._value(_ACQUIRE, args)
            if token is None:
                raise self._timeout(self._rows(_WHO, [self.key]))
            self.token = int(token)
        except BaseException:
            self._conn.close()
            raise
        return self

    def _rows(self, sql: str, args: list[object]) -> list[tuple[Any, ...]]:
        from psycopg.rows import tuple_row

        with self._conn.cursor(row_factory=tuple_row) as cur:
            cur.execute(sql.format(*["%s"] * len(args)), args)
            return list(cur.fetchall())

    def _value(self, sql: str, args: list[object]) -> Any:
        return self._rows(sql, args)[0][0]

    def holding(self) -> bool:
        """Whether this connection still holds the lock (advlock_holding). False, not an
        error, once the connection is lost; leaving the block then raises LockLost."""
        if self.lost is not None:
            return False
        try:
            return bool(self._value(_HOLDING, [self.ns, self.id, self.mode]))
        except Exception as e:
            if not _is_connection_loss(e, self._conn.closed or self._conn.broken):
                raise
            self.lost = e
            return False

    def __exit__(self, t: type[BaseException] | None, v: BaseException | None, tb: TracebackType | None) -> None:
        try:
            if self.lost is None:
                try:
                    if not self._value(_UNLOCK, [self.ns, self.id, self.mode]):
                        self.lost = RuntimeError("advlock_unlock found the lock not held")
                except Exception as e:
                    if not _is_connection_loss(e, self._conn.closed or self._conn.broken):
                        raise
                    self.lost = e
        finally:
            self._conn.close()  # releases anything left, whatever happened above
        if self.lost is not None:
            raise self._lost() from self.lost


class AsyncHeldLock(_Base):
    """A session lock on its own asyncio connection (psycopg or asyncpg):
    `async with session_lock(...) as held`."""

    def __init__(self, *args: Any, driver: str) -> None:
        super().__init__(*args)
        if driver not in ("psycopg", "asyncpg"):
            raise ValueError(f"driver must be 'psycopg' or 'asyncpg', got {driver!r}")
        self.driver = driver
        self._conn: Any = None

    async def __aenter__(self) -> AsyncHeldLock:
        if self.driver == "asyncpg":
            import asyncpg

            settings = {} if self.application_name is None else {"application_name": self.application_name}
            self._conn = await asyncpg.connect(self.dsn, server_settings=settings)
            self.pid = self._conn.get_server_pid()
        else:
            import psycopg

            kwargs: dict[str, Any] = {"autocommit": True}
            if self.application_name is not None:
                kwargs["application_name"] = self.application_name
            self._conn = await psycopg.AsyncConnection.connect(self.dsn, **kwargs)
            self.pid = self._conn.info.backend_pid
        try:
            token = await self._value(_ACQUIRE, [self.ns, self.id, self.timeout_ms, self.mode])
            if token is None:
                raise self._timeout(await self._rows(_WHO, [self.key]))
            self.token = int(token)
        except BaseException:
            await self._close()
            raise
        return self

    async def _rows(self, sql: str, args: list[object]) -> list[tuple[Any, ...]]:
        if self.driver == "asyncpg":
            return [
                tuple(r) for r in await self._conn.fetch(sql.format(*[f"${i + 1}" for i in range(len(args))]), *args)
            ]
        from psycopg.rows import tuple_row

        async with self._conn.cursor(row_factory=tuple_row) as cur:
            await cur.execute(sql.format(*["%s"] * len(args)), args)
            return list(await cur.fetchall())

    async def _value(self, sql: str, args: list[object]) -> Any:
        return (await self._rows(sql, args))[0][0]

    def _dead(self) -> bool:
        if self.driver == "asyncpg":
            return bool(self._conn.is_closed())
        return bool(self._conn.closed or self._conn.broken)

    async def _close(self) -> None:
        if self.driver == "psycopg":
            await self._conn.close()  # psycopg already waited for any cancel it sent
            return
        # asyncpg sends the cancel of a cancelled wait in the background; close() sends it
        # before disconnecting (terminate() would drop it, and a backend waiting in the lock
        # queue does not notice a vanished client until its wait ends). Bounded and shielded.
        try:
            await asyncio.shield(self._conn.close(timeout=10))
        except BaseException:
            self._conn.terminate()
            raise

    async def holding(self) -> bool:
        """Whether this connection still holds the lock (advlock_holding). False, not an
        error, once the connection is lost; leaving the block then raises LockLost."""
        if self.lost is not None:
            return False
        try:
            return bool(await self._value(_HOLDING, [self.ns, self.id, self.mode]))
        except Exception as e:
            if not _is_connection_loss(e, self._dead()):
                raise
            self.lost = e
            return False

    async def __aexit__(self, t: type[BaseException] | None, v: BaseException | None, tb: TracebackType | None) -> None:
        try:
            if self.lost is None:
                try:
                    if not await self._value(_UNLOCK, [self.ns, self.id, self.mode]):
                        self.lost = RuntimeError("advlock_unlock found the lock not held")
                except Exception as e:
                    if not _is_connection_loss(e, self._dead()):
                        raise
                    self.lost = e
        finally:
            await self._close()
        if self.lost is not None:
            raise self._lost() from self.lost


class SessionLock:
    """What session_lock() returns: `with` for a blocking psycopg connection, `async with`
    for an asyncio one (psycopg by default, or driver="asyncpg")."""

    def __init__(self, *args: Any, driver: str) -> None:
        self._args = args
        self._driver = driver
        # Validate everything now, before any connection is opened.
        self._sync = HeldLock(*args)
        self._async = AsyncHeldLock(*args, driver=driver)

    def __enter__(self) -> HeldLock:
        if self._driver != "psycopg":
            raise TypeError(f"driver={self._driver!r} is asyncio-only: use `async with session_lock(...)`")
        return self._sync.__enter__()

    def __exit__(self, t: type[BaseException] | None, v: BaseException | None, tb: TracebackType | None) -> None:
        self._sync.__exit__(t, v, tb)

    async def __aenter__(self) -> AsyncHeldLock:
        return await self._async.__aenter__()

    async def __aexit__(self, t: type[BaseException] | None, v: BaseException | None, tb: TracebackType | None) -> None:
        await self._async.__aexit__(t, v, tb)


def session_lock(
    dsn: str,
    ns: str,
    id: str | int = "",
    *,
    timeout: float,
    shared: bool = False,
    driver: Literal["psycopg", "asyncpg"] = "psycopg",
    application_name: str | None = None,
) -> SessionLock:
    """A session lock on (ns, id) held on a dedicated connection opened from `dsn`, for as
    long as the `with` / `async with` block runs: waits at most `timeout` seconds in the
    server's queue (LockTimeout after), `held.token` is its fencing token, `held.holding()`
    asks the server whether it is still held. On exit it unlocks and closes the connection;
    if the connection was lost meanwhile, LockLost is raised instead of passing silently."""
    return SessionLock(dsn, ns, id, timeout, shared, application_name, driver=driver)
