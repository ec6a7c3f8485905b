"""Transaction-scope locks and diagnostics on a connection the caller already has."""

from __future__ import annotations

import math
import re
import warnings
from collections.abc import Awaitable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from types import TracebackType
from typing import TYPE_CHECKING, Any, NoReturn, Protocol, TypeAlias, overload

from ._drivers import SCHEMA, AsyncAdapter, SyncAdapter, adapt, call_sql, check_schema
from ._errors import Error, FenceRefused, LeaseNotHeld, NotInTransaction, as_lock_timeout, find_sqlstate, server_text
from ._key import check_ns, id_text, key


# The connection types, structurally: a blocking connection's commit() returns None (psycopg
# Connection, SQLAlchemy Connection and Session), an asyncio one's returns an awaitable
# (psycopg AsyncConnection, SQLAlchemy AsyncConnection and AsyncSession). Protocols rather than
# the drivers' classes, so the overloads stay right for a user who has only some drivers
# installed (a missing import would be Any and swallow every call into the first overload).
class SyncConnection(Protocol):
    def commit(self) -> None: ...


class _AwaitableCommit(Protocol):
    def commit(self) -> Awaitable[None]: ...


class _AsyncpgConnection(Protocol):
    # asyncpg Connection and pool proxies (asyncpg ships no types: to mypy they are Any,
    # which matches any protocol; naming asyncpg's classes here would make this union Any).
    def is_in_transaction(self) -> bool: ...


AsyncConnection: TypeAlias = _AwaitableCommit | _AsyncpgConnection

_INT4_MAX = 2**31 - 1


def timeout_ms(timeout: object, name: str = "timeout") -> int:
    """Seconds (int or float) to the server's timeout_ms, checked before any round trip."""
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
        raise TypeError(f"{name} must be a number of seconds, got {type(timeout).__name__}")
    if not math.isfinite(timeout) or timeout < 0:
        raise ValueError(f"{name} must be a finite number of seconds >= 0, got {timeout!r}")
    ms = round(timeout * 1000)
    if timeout > 0:
        ms = max(ms, 1)  # a positive timeout must not silently become a pure try
    if ms > _INT4_MAX:
        raise ValueError(f"{name} must be at most {_INT4_MAX / 1000:.0f} seconds, got {timeout!r}")
    return ms


def positive_ms(seconds: object, name: str) -> int:
    """A duration that must be more than 0 (a TTL, a wait's bound), in ms: one message for 0
    and for a negative number alike."""
    if isinstance(seconds, (int, float)) and not isinstance(seconds, bool) and not seconds > 0:
        raise ValueError(f"{name} must be a positive number of seconds, got {seconds!r}")
    return timeout_ms(seconds, name)


def mode_of(shared: object) -> str:
    if not isinstance(shared, bool):
        raise TypeError(f"shared must be a bool, got {type(shared).__name__}")
    return "shared" if shared else "exclusive"


_NEEDS_XACT = {
    "fence": "records its token with the write transaction",
    "lease_check": "checks the lease for the write transaction",
}


def _needs_xact(what: str) -> str:
    return _NEEDS_XACT.get(what, "takes a transaction-scope lock")


def _check_sync(adapter: SyncAdapter, what: str) -> None:
    problem = adapter.xact_problem()
    if problem is not None:
        raise NotInTransaction(f"advlock.{what}() {_needs_xact(what)}, but {problem}")


async def _check_async(adapter: AsyncAdapter, what: str) -> None:
    problem = await adapter.xact_problem()
    if problem is not None:
        raise NotInTransaction(f"advlock.{what}() {_needs_xact(what)}, but {problem}")


class _XactBase:
    def __init__(
        self,
        adapter: SyncAdapter | AsyncAdapter,
        what: str,
        sql: str,
        args: Sequence[object],
        ns: str,
        ids: Sequence[str],
    ) -> None:
        self._adapter = adapter
        self._what, self._sql, self._args = what, sql, args
        self.ns = ns
        self.ids = tuple(ids)
        self.keys = tuple(key(ns, i) for i in ids)
        self._entered = False

    def __del__(self) -> None:
        # `advlock.lock(conn, ...)` alone, without `with`, takes no lock: say so, as Python
        # does for a coroutine that is never awaited.
        if not getattr(self, "_entered", True):
            how = "async with" if isinstance(self._adapter, AsyncAdapter) else "with"
            warnings.warn(
                f"advlock.{self._what}() was never entered, so no lock was taken:"
                f" use `{how} advlock.{self._what}(...):`",
                RuntimeWarning,
                stacklevel=1,
            )


class XactLock(_XactBase):
    """What lock() and lock_all() return for a blocking connection: use it with `with`. The
    lock is taken on entry with a server-side bounded wait and released by the server at
    COMMIT/ROLLBACK of the enclosing transaction; PostgreSQL cannot release a
    transaction-scope lock earlier, so leaving the block releases nothing."""

    def __enter__(self) -> XactLock:
        self._entered = True
        assert isinstance(self._adapter, SyncAdapter)
        _check_sync(self._adapter, self._what)
        try:
            self._adapter.query(self._sql, self._args)
        except Exception as e:
            timeout = as_lock_timeout(e)
            if timeout is None:
                raise
            raise timeout from e
        return self

    def __exit__(self, t: type[BaseException] | None, v: BaseException | None, tb: TracebackType | None) -> None:
        return None

    if not TYPE_CHECKING:  # a clear error at run time; to the type checker there is no `async with`

        async def __aenter__(self) -> NoReturn:
            self._entered = True
            raise TypeError(f"advlock.{self._what}() on a blocking connection: use `with`, not `async with`")

        async def __aexit__(self, *exc: object) -> None:
            return None


class AsyncXactLock(_XactBase):
    """What lock() and lock_all() return for an asyncio connection: use it with `async with`
    (the same lock as XactLock, taken with an awaited statement)."""

    async def __aenter__(self) -> AsyncXactLock:
        self._entered = True
        assert isinstance(self._adapter, AsyncAdapter)
        await _check_async(self._adapter, self._what)
        try:
            await self._adapter.query(self._sql, self._args)
        except Exception as e:
            timeout = as_lock_timeout(e)
            if timeout is None:
                raise
            raise timeout from e
        return self

    async def __aexit__(self, t: type[BaseException] | None, v: BaseException | None, tb: TracebackType | None) -> None:
        return None

    if not TYPE_CHECKING:

        def __enter__(self) -> NoReturn:
            self._entered = True
            raise TypeError(f"advlock.{self._what}() on an asyncio connection: use `async with`")

        def __exit__(self, *exc: object) -> None:
            return None


def _xact_lock(
    conn: object, schema: str | None, what: str, sql: str, args: Sequence[object], ns: str, ids: Sequence[str]
) -> XactLock | AsyncXactLock:
    adapter = adapt(conn, check_schema(schema))
    cls = XactLock if isinstance(adapter, SyncAdapter) else AsyncXactLock
    return cls(adapter, what, sql, args, ns, ids)


@overload
def lock(
    conn: SyncConnection,
    ns: str,
    id: str | int = "",
    *,
    timeout: float,
    shared: bool = False,
    schema: str | None = None,
) -> XactLock: ...
@overload
def lock(
    conn: AsyncConnection,
    ns: str,
    id: str | int = "",
    *,
    timeout: float,
    shared: bool = False,
    schema: str | None = None,
) -> AsyncXactLock: ...
def lock(
    conn: SyncConnection | AsyncConnection,
    ns: str,
    id: str | int = "",
    *,
    timeout: float,
    shared: bool = False,
    schema: str | None = None,
) -> XactLock | AsyncXactLock:
    """Lock (ns, id) for the rest of the current transaction, waiting at most `timeout`
    seconds in the server's lock queue (advlock_lock_with_timeout); LockTimeout names the
    holder. The timeout is required: an unbounded wait is the trap advlock removes.
    `with` on a blocking connection, `async with` on an asyncio one."""
    text = id_text(id)
    args = [check_ns(ns), text, timeout_ms(timeout), mode_of(shared)]
    sql = call_sql("advlock_lock_with_timeout", "text", "text", "int4")
    return _xact_lock(conn, schema, "lock", sql, args, ns, [text])


@overload
def lock_all(
    conn: SyncConnection,
    ns: str,
    ids: Iterable[str | int],
    *,
    timeout: float,
    shared: bool = False,
    schema: str | None = None,
) -> XactLock: ...
@overload
def lock_all(
    conn: AsyncConnection,
    ns: str,
    ids: Iterable[str | int],
    *,
    timeout: float,
    shared: bool = False,
    schema: str | None = None,
) -> AsyncXactLock: ...
def lock_all(
    conn: SyncConnection | AsyncConnection,
    ns: str,
    ids: Iterable[str | int],
    *,
    timeout: float,
    shared: bool = False,
    schema: str | None = None,
) -> XactLock | AsyncXactLock:
    """Lock every (ns, id) or none, within one overall deadline of `timeout` seconds
    (advlock_lock_all_with_timeout: ascending key order, so callers never deadlock each other)."""
    if isinstance(ids, (str, bytes)):
        raise TypeError("ids must be a list of ids, not a single str")
    texts = [id_text(i, "ids element") for i in ids]
    if not texts:
        raise ValueError("ids must not be empty")
    args: list[object] = [check_ns(ns), texts, timeout_ms(timeout), mode_of(shared)]
    sql = call_sql("advlock_lock_all_with_timeout", "text", "text[]", "int4")
    return _xact_lock(conn, schema, "lock_all", sql, args, ns, texts)


@overload
def try_lock(
    conn: SyncConnection,
    ns: str,
    id: str | int = "",
    *,
    timeout: float = 0,
    shared: bool = False,
    schema: str | None = None,
) -> bool: ...
@overload
def try_lock(
    conn: AsyncConnection,
    ns: str,
    id: str | int = "",
    *,
    timeout: float = 0,
    shared: bool = False,
    schema: str | None = None,
) -> Awaitable[bool]: ...
def try_lock(
    conn: SyncConnection | AsyncConnection,
    ns: str,
    id: str | int = "",
    *,
    timeout: float = 0,
    shared: bool = False,
    schema: str | None = None,
) -> bool | Awaitable[bool]:
    """Take (ns, id) for the rest of the transaction if it is free (or frees up within
    `timeout` seconds, default 0: no wait): True when held, False when not. Await the result
    on an asyncio connection."""
    args = [check_ns(ns), id_text(id), timeout_ms(timeout), mode_of(shared)]
    sql = call_sql("advlock_try_with_timeout", "text", "text", "int4")
    adapter = adapt(conn, check_schema(schema))
    if isinstance(adapter, SyncAdapter):
        _check_sync(adapter, "try_lock")
        return bool(adapter.query(sql, args)[0][0])

    async def run(a: AsyncAdapter) -> bool:
        await _check_async(a, "try_lock")
        return bool((await a.query(sql, args))[0][0])

    return run(adapter)


@dataclass(frozen=True)
class LockEntry:
    """One row of advlock_holders: a holder (granted) or a waiter of an advisory lock."""

    key: int | None
    mode: str
    granted: bool
    pid: int
    application_name: str | None
    backend_state: str | None
    idle_for: timedelta | None
    is_idle_holder: bool | None
    waiting_since: datetime | None
    blocked_by: list[int] | None
    label: str | None  # ns:id, preloaded mode only
    scope: str | None  # preloaded mode only
    held_since: datetime | None  # preloaded mode only


# blocked_by (int4[]) is read as text: asyncpg looks an array type up in the catalog at its first
# use on a connection, with statements of its own between ours, which a transaction-mode pooler
# may send to another server connection (and asyncpg prepares them by name).
_HOLDERS_SQL = (
    "SELECT key, mode, granted, pid, application_name, backend_state, idle_for, is_idle_holder,"
    " waiting_since, pg_catalog.array_to_string(blocked_by, ','), label, scope, held_since FROM @.advlock_holders"
)


def _entry(row: tuple[Any, ...]) -> LockEntry:
    key, mode, granted, pid, app, state, idle_for, idle_holder, waiting, blocked_by, label, scope, since = row
    pids = None if blocked_by is None else [int(p) for p in str(blocked_by).split(",") if p]
    return LockEntry(key, mode, granted, pid, app, state, idle_for, idle_holder, waiting, pids, label, scope, since)


@overload
def holders(
    conn: SyncConnection, ns: str | None = None, id: str | int = "", *, schema: str | None = None
) -> list[LockEntry]: ...
@overload
def holders(
    conn: AsyncConnection, ns: str | None = None, id: str | int = "", *, schema: str | None = None
) -> Awaitable[list[LockEntry]]: ...
def holders(
    conn: SyncConnection | AsyncConnection, ns: str | None = None, id: str | int = "", *, schema: str | None = None
) -> list[LockEntry] | Awaitable[list[LockEntry]]:
    """The rows of advlock_holders (holders first, then waiters, by key and pid); with ns,
    only those of the lock key(ns, id). Await the result on an asyncio connection."""
    if ns is None:
        sql, args = _HOLDERS_SQL, []
    else:
        sql, args = _HOLDERS_SQL + " WHERE key = CAST({} AS int8)", [key(ns, id)]
    sql += " ORDER BY NOT granted, key, pid"
    adapter = adapt(conn, check_schema(schema))
    if isinstance(adapter, SyncAdapter):
        return [_entry(row) for row in adapter.query(sql, args)]

    async def run(a: AsyncAdapter) -> list[LockEntry]:
        return [_entry(row) for row in await a.query(sql, args)]

    return run(adapter)


_FENCE = "SELECT " + SCHEMA + "advlock_fence(CAST({} AS text), CAST({} AS text), CAST({} AS int8))"
_LEASE_CHECK = "SELECT " + SCHEMA + "advlock_lease_check(CAST({} AS int8))"
_PASSED = re.compile(r"token (\d+) has passed it")


def _check_token(token: object, name: str = "token") -> int:
    if isinstance(token, bool) or not isinstance(token, int):
        raise TypeError(f"{name} must be an int (a fencing token), got {type(token).__name__}")
    if not 1 <= token <= 2**63 - 1:
        raise ValueError(f"{name} must be a positive bigint (advlock's tokens are), got {token}")
    return token


def _fence_error(e: BaseException, token: int) -> Error | None:
    refused = find_sqlstate(e, "LK001")
    if refused is not None:
        message, detail = server_text(refused)
        m = _PASSED.search(message)
        return FenceRefused(message, token, int(m.group(1)) if m else None, detail)
    gone = find_sqlstate(e, "LK002")
    if gone is not None:
        message, detail = server_text(gone)
        return LeaseNotHeld(message if not detail else f"{message}\nDETAIL: {detail}")
    return None


@overload
def fence(conn: SyncConnection, ns: str, id: str | int = "", *, token: int, schema: str | None = None) -> None: ...
@overload
def fence(
    conn: AsyncConnection, ns: str, id: str | int = "", *, token: int, schema: str | None = None
) -> Awaitable[None]: ...
def fence(
    conn: SyncConnection | AsyncConnection, ns: str, id: str | int = "", *, token: int, schema: str | None = None
) -> Awaitable[None] | None:
    """Pass the fence of (ns, id) with `token` in the current write transaction
    (advlock_fence): FenceRefused when a larger token has already passed it (a newer holder took
    over: roll back), else the token is recorded with the transaction. Call it first in the
    transaction, before the writes it protects. Await it on an asyncio connection."""
    args = [check_ns(ns), id_text(id), _check_token(token)]
    return _run_checked(conn, schema, "fence", _FENCE, args, token)


@overload
def lease_check(conn: SyncConnection, lease: int, *, schema: str | None = None) -> None: ...
@overload
def lease_check(conn: AsyncConnection, lease: int, *, schema: str | None = None) -> Awaitable[None]: ...
def lease_check(
    conn: SyncConnection | AsyncConnection, lease: int, *, schema: str | None = None
) -> Awaitable[None] | None:
    """Raise LeaseNotHeld (advlock_lease_check, LK002) unless the lease (its token) is still
    held, inside the current transaction. Await it on an asyncio connection."""
    token = _check_token(lease, "lease")
    return _run_checked(conn, schema, "lease_check", _LEASE_CHECK, [token], token)


def _run_checked(
    conn: object, schema: str | None, what: str, sql: str, args: list[object], token: int
) -> Awaitable[None] | None:
    adapter = adapt(conn, check_schema(schema))
    if isinstance(adapter, SyncAdapter):
        _check_sync(adapter, what)
        try:
            adapter.query(sql, args)
        except Exception as e:
            mapped = _fence_error(e, token)
            if mapped is None:
                raise
            raise mapped from e
        return None

    async def run(a: AsyncAdapter) -> None:
        await _check_async(a, what)
        try:
            await a.query(sql, args)
        except Exception as e:
            mapped = _fence_error(e, token)
            if mapped is None:
                raise
            raise mapped from e

    return run(adapter)
