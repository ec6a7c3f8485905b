"""Leases: locks owned by their id, not by a connection (advlock_lease; needs advlock preloaded).

A lease is taken with one statement on any connection and renewed and released with others, so
unlike a session lock it belongs on a pool: every statement here borrows a pooled connection for
just that statement. lease() renews in the background every ttl/3 (an asyncio task, or a thread
for blocking sources), cancels an asyncio body when the lease is lost, and releases it on exit.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import sys
import threading
import time
from collections.abc import Sequence
from types import TracebackType
from typing import Any, Protocol, TypeAlias, TypeVar

from ._api import AsyncConnection, SyncConnection, positive_ms, timeout_ms
from ._drivers import AsyncAdapter, Row, SyncAdapter, adapt, check_schema
from ._errors import Holder, LeaseLost, LeasesUnavailable, LeaseTimeout, NotPreloaded, chain, holder_text
from ._key import check_ns, id_text, key

_INT4_MAX = 2**31 - 1

_ACQUIRE = (
    "SELECT @.advlock_lease(CAST({} AS text), CAST({} AS text), CAST({} AS int4), CAST({} AS int4),"
    " slots => CAST({} AS int4))"
)
# The wait, when the key is busy: commits first and holds no snapshot while it waits, so a holder
# building an index concurrently is not stalled by the waiters (needs a connection outside a
# transaction block: where the source cannot give one, the wait runs in _ACQUIRE instead).
_WAIT = "CALL @.advlock_wait_lease(CAST({} AS int8), CAST({} AS int4), CAST({} AS int4), CAST({} AS int4))"
_RENEW = "SELECT @.advlock_lease_renew(CAST({} AS int8), CAST({} AS int4))"
_RELEASE = "SELECT @.advlock_lease_release(CAST({} AS int8))"
# How long ago, by the server's clock, the TTL of a lease granted after a wait started: the seconds
# since its expires_at (negative while it runs) plus the TTL (advlock_leases shows the expiry of
# leases held; none when it has already ended).
_SINCE_EXPIRY = (
    "SELECT CAST(extract(epoch FROM pg_catalog.clock_timestamp() - expires_at) AS float8) FROM @.advlock_leases"
    " WHERE lease = CAST({} AS int8) AND granted"
)
# Who held the key when the wait ran out (advlock_lease returns NULL, not an error with a DETAIL).
_WHO = "SELECT pid, application_name FROM @.advlock_leases WHERE key = CAST({} AS int8) AND granted ORDER BY lease"


# Where a lease's statements run, structurally (see _api's connection protocols for why not the
# drivers' classes): a pool or engine that lends a connection per statement, or one psycopg
# connection (psycopg serializes its statements, so the renewals can share it with the body).
class _PsycopgPool(Protocol):
    def getconn(self, timeout: float | None = None) -> Any: ...


class _AsyncpgPool(Protocol):
    # asyncpg ships no types: asyncpg.Pool is Any to mypy and matches any protocol.
    def get_max_size(self) -> int: ...


class _Engine(Protocol):
    def raw_connection(self) -> Any: ...


class _AsyncEngine(Protocol):
    @property
    def sync_engine(self) -> Any: ...


LeaseSource: TypeAlias = _PsycopgPool | _AsyncpgPool | _Engine | _AsyncEngine | SyncConnection | AsyncConnection


_LEASE_FUNCTIONS = re.compile(
    r"advlock_(lease\w*|wait_lease|campaign|wait_campaign|leader|observe_leader|wait_leader|resign)\b"
)


def _unavailable(exc: BaseException) -> LeasesUnavailable | None:
    """NotPreloaded for 55000 (advlock not in shared_preload_libraries), LeasesUnavailable for
    42883 on a lease or election function (the SQL edition, or an extension older than them:
    leases came in 0.4.0, elections in 0.5.0), else None."""
    for e in chain(exc):
        state = getattr(e, "sqlstate", None)
        if state == "55000" and "shared_preload_libraries" in str(e):
            return NotPreloaded(
                "leases need the advlock library preloaded: add advlock to shared_preload_libraries in "
                f"postgresql.conf (shared_preload_libraries = 'advlock') and restart PostgreSQL (server: {e})"
            )
        missing = _LEASE_FUNCTIONS.search(str(e)) if state == "42883" else None
        if missing is not None:
            return LeasesUnavailable(
                f"this database has no {missing.group(0)}(): leases (and elections) need the advlock extension "
                "(the SQL edition has none) in a version that has them (leases: 0.4.0, elections: 0.5.0), preloaded "
                f"via shared_preload_libraries (server: {e})"
            )
    return None


class _SyncRunner:
    """Runs one statement on a connection borrowed for it (or on the one connection)."""

    def __init__(self, source: object, schema: str | None) -> None:
        self.source = source
        self.schema = schema

    def query(self, sql: str, args: Sequence[object], timeout: float | None = None) -> list[Row]:
        src: Any = self.source
        if _is_psycopg_pool(src, sync=True):
            with src.connection(timeout=timeout) as conn:
                return self._adapter(conn).query(sql, args)
        if _is_sa_engine(src):
            with src.begin() as conn:
                return self._adapter(conn).query(sql, args)
        return self._adapter(src).query(sql, args)

    def call(self, sql: str, args: Sequence[object]) -> list[Row] | None:
        """Run a CALL outside any transaction block, or None where the source has none to give
        (one psycopg connection inside a transaction)."""
        src: Any = self.source
        if _is_psycopg_pool(src, sync=True):
            with src.connection() as conn:
                return _autocommit_call(self._adapter(conn), conn, sql, args)
        if _is_sa_engine(src):
            with src.connect() as conn:
                return self._adapter(conn.execution_options(isolation_level="AUTOCOMMIT")).query(sql, args)
        if getattr(src, "autocommit", False) and _psycopg_idle(src):
            return self._adapter(src).query(sql, args)
        return None

    def _adapter(self, conn: object) -> SyncAdapter:
        a = adapt(conn, self.schema)
        assert isinstance(a, SyncAdapter)
        return a


class _AsyncRunner:
    def __init__(self, source: object, schema: str | None) -> None:
        self.source = source
        self.schema = schema

    async def query(self, sql: str, args: Sequence[object], timeout: float | None = None) -> list[Row]:
        src: Any = self.source
        if _is_psycopg_pool(src, sync=False):
            async with src.connection(timeout=timeout) as conn:
                return await self._adapter(conn).query(sql, args)
        if _is_asyncpg_pool(src):
            async with src.acquire(timeout=timeout) as conn:
                return await self._adapter(conn).query(sql, args)
        if _is_sa_async_engine(src):
            async with src.begin() as conn:
                return await self._adapter(conn).query(sql, args)
        return await self._adapter(src).query(sql, args)

    async def call(self, sql: str, args: Sequence[object]) -> list[Row] | None:
        src: Any = self.source
        if _is_psycopg_pool(src, sync=False):
            async with src.connection() as conn:
                adapter = self._adapter(conn)
                if conn.autocommit:
                    return await adapter.query(sql, args)
                await conn.set_autocommit(True)
                try:
                    return await adapter.query(sql, args)
                finally:
                    await conn.set_autocommit(False)
        if _is_asyncpg_pool(src):
            async with src.acquire() as conn:  # asyncpg runs outside a transaction unless asked
                return await self._adapter(conn).query(sql, args)
        if _is_sa_async_engine(src):
            async with src.connect() as conn:
                conn = await conn.execution_options(isolation_level="AUTOCOMMIT")
                return await self._adapter(conn).query(sql, args)
        if getattr(src, "autocommit", False) and _psycopg_idle(src):
            return await self._adapter(src).query(sql, args)
        return None

    def _adapter(self, conn: object) -> AsyncAdapter:
        a = adapt(conn, self.schema)
        assert isinstance(a, AsyncAdapter)
        return a


def _psycopg_idle(conn: Any) -> bool:
    from psycopg.pq import TransactionStatus

    return bool(conn.info.transaction_status == TransactionStatus.IDLE)


def _autocommit_call(adapter: SyncAdapter, conn: Any, sql: str, args: Sequence[object]) -> list[Row]:
    if conn.autocommit:
        return adapter.query(sql, args)
    conn.autocommit = True  # a pooled connection is idle when lent; given back as it came
    try:
        return adapter.query(sql, args)
    finally:
        conn.autocommit = False


def _is_psycopg_pool(src: object, sync: bool) -> bool:
    if "psycopg_pool" not in sys.modules:
        return False
    import psycopg_pool

    return isinstance(src, psycopg_pool.ConnectionPool if sync else psycopg_pool.AsyncConnectionPool)


def _is_asyncpg_pool(src: object) -> bool:
    if "asyncpg" not in sys.modules:
        return False
    import asyncpg

    return isinstance(src, asyncpg.Pool)


def _is_sa_engine(src: object) -> bool:
    if "sqlalchemy" not in sys.modules:
        return False
    from sqlalchemy.engine import Engine

    return isinstance(src, Engine)


def _is_sa_async_engine(src: object) -> bool:
    if "sqlalchemy.ext.asyncio" not in sys.modules:
        return False
    from sqlalchemy.ext.asyncio import AsyncEngine

    return isinstance(src, AsyncEngine)


def _runner(source: object, schema: str | None) -> _SyncRunner | _AsyncRunner:
    """The runner for a pool, an engine or a psycopg connection, or TypeError naming what to pass."""
    if _is_psycopg_pool(source, sync=True) or _is_sa_engine(source):
        return _SyncRunner(source, schema)
    if _is_psycopg_pool(source, sync=False) or _is_asyncpg_pool(source) or _is_sa_async_engine(source):
        return _AsyncRunner(source, schema)
    if "psycopg" in sys.modules:
        import psycopg

        if isinstance(source, psycopg.Connection):
            return _SyncRunner(source, schema)
        if isinstance(source, psycopg.AsyncConnection):
            return _AsyncRunner(source, schema)
    if "asyncpg" in sys.modules:
        import asyncpg
        from asyncpg.pool import PoolConnectionProxy

        if isinstance(source, (asyncpg.Connection, PoolConnectionProxy)):
            raise TypeError(
                "source: pass the asyncpg pool, not a connection: an asyncpg connection runs one query at a "
                "time, so the background renewals would collide with your queries (a lease is fine on a pool)"
            )
    if "sqlalchemy" in sys.modules:
        from sqlalchemy.engine import Connection
        from sqlalchemy.orm import Session

        async_types: tuple[type, ...] = ()
        if "sqlalchemy.ext.asyncio" in sys.modules:
            from sqlalchemy.ext.asyncio import AsyncConnection as SAAsyncConnection
            from sqlalchemy.ext.asyncio import AsyncSession

            async_types = (SAAsyncConnection, AsyncSession)
        if isinstance(source, (Connection, Session, *async_types)):
            raise TypeError(
                "source: pass the Engine (or AsyncEngine), not a connection or session: the background "
                "renewals borrow their own pooled connection (SQLAlchemy connections are not shared across tasks)"
            )
    raise TypeError(
        "source: expected a pool (psycopg_pool, asyncpg), a SQLAlchemy Engine/AsyncEngine or a psycopg "
        f"connection, got {type(source).__module__}.{type(source).__qualname__}"
    )


def _slots(slots: object) -> int:
    if isinstance(slots, bool) or not isinstance(slots, int):
        raise TypeError(f"slots must be an int, got {type(slots).__name__}")
    if not 1 <= slots <= _INT4_MAX:
        raise ValueError(f"slots must be at least 1 (1: a lock; N: up to N holders at once), got {slots}")
    return slots


_L = TypeVar("_L", bound="Lease")


class Lease:
    """What lease() returns: `async with` on an asyncio source, `with` on a blocking one.

    `token` is the lease id, also its fencing token (larger for every later lease). `lost` is
    None while the lease is held and the reason once a renewal returned false (it expired or
    someone released it) or no renewal succeeded before the renew deadline; an asyncio body is
    cancelled then, and leaving the block raises LeaseLost. `check()` raises LeaseLost if it is
    lost or the renew deadline has passed. `renewals` counts the successful renewals.

    The renew deadline (`renew_deadline` seconds after the last successful renewal was sent,
    or after the grant, default two thirds of the TTL, as Kubernetes' leader election) comes
    before the TTL runs out on the server, because the server counts the TTL from when it
    granted or renewed, which is after the client sent the statement: stopping at the deadline
    leaves the margin for the body's cancellation to land before anyone else can be granted the
    key. A lease granted after a wait counts from its grant, read from the server's clock
    (advlock_leases.expires_at minus the TTL), however long the wait was.

    On one psycopg connection (rather than a pool) the renewals share it with the body: psycopg
    runs them one at a time, inside the body's transaction if one is open (an aborted
    transaction makes them fail until the TTL runs out, and the lease is lost). Prefer a pool."""

    # The statements of a lease (an election term overrides them: advlock.leader()).
    _acquire_sql = _ACQUIRE
    _wait_sql = _WAIT
    _release_sql = _RELEASE
    _what = "lease"

    def __init__(
        self,
        source: object,
        ns: str,
        id: str | int,
        ttl: float,
        timeout: float,
        slots: int,
        renew_deadline: float | None = None,
        schema: str | None = None,
    ) -> None:
        self.ns = check_ns(ns)
        self.id = id_text(id)
        self.key = key(ns, id)
        self.ttl_ms = positive_ms(ttl, "ttl")
        self.timeout_ms = timeout_ms(timeout)
        self.slots = _slots(slots)
        if renew_deadline is None:
            self.renew_deadline_ms = self.ttl_ms * 2 // 3
        else:
            self.renew_deadline_ms = positive_ms(renew_deadline, "renew_deadline")
            if not self.renew_deadline_ms < self.ttl_ms:
                raise ValueError(
                    f"renew_deadline must be more than 0 and less than ttl ({ttl!r} s): the body must stop before the "
                    f"server ends the lease, got {renew_deadline!r}"
                )
        self._runner = _runner(source, check_schema(schema))
        self.token: int = 0
        self.lost: BaseException | None = None
        self.renewals = 0  # successful renewals so far
        # Renew every third of the renew deadline: two retries after a failure before it passes.
        self._interval = self.renew_deadline_ms / 3000
        self._deadline = 0.0  # time.monotonic() at which the body must stop without a renewal
        # Stopped at the renew deadline: the lease is left to run out on the server at its TTL
        # rather than released, so a statement the body still had in flight (a cancelled
        # asyncio task's, or a blocking body's last one) ends before anyone else is granted it.
        self._stopped_at_deadline = False
        self._last_error: BaseException | None = None
        self._entered = False
        self._closing = False
        # asyncio
        self._body: asyncio.Task[Any] | None = None
        self._renewer: asyncio.Task[None] | None = None
        self._cancelled_body = False
        # threads
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __repr__(self) -> str:
        state = "lost" if self.lost else ("held" if self.token else "not taken")
        return f"<advlock.Lease advlock_key({self.ns!r}, {self.id!r}) token={self.token} {state}>"

    def check(self) -> None:
        """Raise LeaseLost if the lease is lost or its renew deadline has passed: call it before
        a write that must not run late (and fence the write with `token` anyway: the lease can
        end between check and write)."""
        if self.lost is None and self.token and not self._closing:
            self._past_deadline()
        if self.lost is not None:
            raise self._lost_error()

    def _label(self) -> str:
        return f"advlock_key('{self.ns}', '{self.id}')"

    def _lost_error(self) -> LeaseLost:
        return LeaseLost(f"the {self._what} on {self._label()} (token {self.token}) was lost: {self.lost}")

    def _timeout(self, rows: list[Row]) -> LeaseTimeout:
        held_by = "; ".join(holder_text(r[0], r[1]) for r in rows)
        e = LeaseTimeout(
            f"could not obtain a {self._what} on key {self.key} = {self._label()} within {self.timeout_ms} ms"
            + (f" ({self.slots} slots)" if self.slots > 1 else "")
            + (f": held by {held_by}" if held_by else "")
        )
        e.holders = tuple(Holder(int(r[0]), r[1], None) for r in rows)
        return e

    def _acquire_args(self, wait_ms: int) -> list[object]:
        return [self.ns, self.id, self.ttl_ms, wait_ms, self.slots]

    def _wait_args(self) -> list[object]:
        return [self.key, self.ttl_ms, self.timeout_ms, self.slots]

    def _mark_lost(self, reason: BaseException) -> None:
        if self.lost is None:
            self.lost = reason

    def _renewed(self, ok: object, sent_at: float) -> bool:
        """Record a renewal's answer; False when it says the lease is gone."""
        if not ok:
            self._mark_lost(
                RuntimeError("advlock_lease_renew returned false: the lease expired or was released by someone else")
            )
            return False
        self.renewals += 1
        self._ttl_started(sent_at)
        self._last_error = None
        return True

    def _ttl_started(self, at: float) -> None:
        """The one place the renew deadline is set: `at` (time.monotonic()) is no later than the
        moment the server started the lease's TTL, at its grant or at a renewal."""
        self._deadline = at + self.renew_deadline_ms / 1000

    def _granted_after_wait(self, asked_at: float, rows: list[Row]) -> None:
        """Start the deadline of a lease granted after a wait from its grant, by the server's
        clock, never from when the wait began (a waiter granted after more than the renew
        deadline would be lost at once). `rows`: _SINCE_EXPIRY's answer to a query sent at
        `asked_at`, whose clock_timestamp() is no earlier than that."""
        if not rows or rows[0][0] is None:
            self._mark_lost(RuntimeError("the lease had already ended when its grant was read (released or expired)"))
            self._ttl_started(asked_at - self.renew_deadline_ms / 1000)
            return
        ttl_running_for = float(rows[0][0]) + self.ttl_ms / 1000
        self._ttl_started(asked_at - max(0.0, ttl_running_for))

    def _past_deadline(self) -> bool:
        if time.monotonic() < self._deadline:
            return False
        why = (
            f"no renewal succeeded before the renew deadline ({self.renew_deadline_ms} ms of the ttl of"
            f" {self.ttl_ms} ms)"
        )
        self._mark_lost(RuntimeError(f"{why}; last error: {self._last_error!r}" if self._last_error else why))
        self._stopped_at_deadline = True
        return True

    def _next_delay(self) -> float:
        # Never past the deadline; after a failed renewal, retry sooner (not in a busy loop).
        remaining = max(0.0, self._deadline - time.monotonic())
        if self._last_error is None:
            return min(self._interval, remaining)
        return min(remaining, max(0.01, min(self._interval, remaining / 4)))

    def _granted(self, rows: list[Row] | None) -> int | None:
        return None if not rows or rows[0][0] is None else int(rows[0][0])

    # ---- asyncio -------------------------------------------------------------------------

    async def __aenter__(self: _L) -> _L:
        self._enter_once()
        if not isinstance(self._runner, _AsyncRunner):
            raise TypeError("advlock.lease() on a blocking source: use `with`, not `async with`")
        runner = self._runner
        sent_at = time.monotonic()
        waited = False
        try:
            token = self._granted(await runner.query(self._acquire_sql, self._acquire_args(0)))
            if token is None and self.timeout_ms > 0:
                waited = True
                called = await runner.call(self._wait_sql, self._wait_args())
                if called is None:  # no connection outside a transaction: wait in the statement
                    called = await runner.query(self._acquire_sql, self._acquire_args(self.timeout_ms))
                token = self._granted(called)
            if token is None:
                raise self._timeout(await runner.query(_WHO, [self.key]))
        except Exception as e:
            unavailable = _unavailable(e)
            if unavailable is None:
                raise
            raise unavailable from e
        self.token = token
        if not waited:
            self._ttl_started(sent_at)  # granted by the statement sent then
        else:
            asked_at = time.monotonic()
            try:
                self._granted_after_wait(asked_at, await runner.query(_SINCE_EXPIRY, [token]))
            except BaseException:
                with contextlib.suppress(Exception):  # not left to run out while nobody renews it
                    await asyncio.shield(runner.query(self._release_sql, [token]))
                raise
        self._body = asyncio.current_task()
        self._renewer = asyncio.create_task(self._renew_async(runner), name=f"advlock lease {self.token} renewals")
        return self

    async def _renew_async(self, runner: _AsyncRunner) -> None:
        while True:
            await asyncio.sleep(self._next_delay())
            if self._past_deadline():
                break
            sent_at = time.monotonic()
            remaining = self._deadline - sent_at
            try:
                rows = await asyncio.wait_for(runner.query(_RENEW, [self.token, self.ttl_ms], remaining), remaining)
            except Exception as e:
                # Not yet renewed, not lost: a pool timeout, or a connection error of a server
                # restarting or failing over (refused, reset, 57P01, 57P03, 25006 on a standby);
                # the lease survives on the server, and the pool lends a fresh connection for the
                # retry, until the renew deadline.
                self._last_error = e
                continue
            if not self._renewed(rows[0][0], sent_at):
                break
        if not self._closing and self._body is not None:
            self._cancelled_body = True
            self._body.cancel(f"advlock: the lease on {self._label()} (token {self.token}) was lost")

    async def _close_async(self) -> None:
        if self._renewer is not None:
            self._renewer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._renewer
        assert isinstance(self._runner, _AsyncRunner)
        if self._stopped_at_deadline:
            return
        released = (await self._runner.query(self._release_sql, [self.token]))[0][0]
        if not released:
            self._mark_lost(RuntimeError("advlock_lease_release found the lease already ended"))

    async def __aexit__(self, t: type[BaseException] | None, v: BaseException | None, tb: TracebackType | None) -> None:
        self._closing = True
        # Shielded: a cancellation of this task while releasing still lets the release finish.
        await asyncio.shield(self._close_async())
        if self._cancelled_body:
            # Take back our own cancellation request (Python 3.11+ counts them); a cancellation
            # from elsewhere that arrived too still propagates as CancelledError.
            uncancel = getattr(self._body, "uncancel", None)
            if uncancel is not None and uncancel() > 0 and isinstance(v, asyncio.CancelledError):
                return
        if self.lost is not None:
            raise self._lost_error() from v

    # ---- threads -------------------------------------------------------------------------

    def __enter__(self: _L) -> _L:
        self._enter_once()
        if not isinstance(self._runner, _SyncRunner):
            raise TypeError("advlock.lease() on an asyncio source: use `async with`")
        runner = self._runner
        sent_at = time.monotonic()
        waited = False
        try:
            token = self._granted(runner.query(self._acquire_sql, self._acquire_args(0)))
            if token is None and self.timeout_ms > 0:
                waited = True
                called = runner.call(self._wait_sql, self._wait_args())
                if called is None:  # no connection outside a transaction: wait in the statement
                    called = runner.query(self._acquire_sql, self._acquire_args(self.timeout_ms))
                token = self._granted(called)
            if token is None:
                raise self._timeout(runner.query(_WHO, [self.key]))
        except Exception as e:
            unavailable = _unavailable(e)
            if unavailable is None:
                raise
            raise unavailable from e
        self.token = token
        if not waited:
            self._ttl_started(sent_at)  # granted by the statement sent then
        else:
            asked_at = time.monotonic()
            try:
                self._granted_after_wait(asked_at, runner.query(_SINCE_EXPIRY, [token]))
            except BaseException:
                with contextlib.suppress(Exception):  # not left to run out while nobody renews it
                    runner.query(self._release_sql, [token])
                raise
        self._thread = threading.Thread(
            target=self._renew_thread, args=(runner,), name=f"advlock lease {self.token} renewals", daemon=True
        )
        self._thread.start()
        return self

    def _renew_thread(self, runner: _SyncRunner) -> None:
        while not self._stop.wait(self._next_delay()):
            if self._past_deadline():
                return
            sent_at = time.monotonic()
            try:
                rows = runner.query(_RENEW, [self.token, self.ttl_ms], self._deadline - sent_at)
            except Exception as e:  # not yet renewed: as in _renew_async
                self._last_error = e
                continue
            if self._stop.is_set():
                if rows[0][0]:
                    self._renewed(True, sent_at)  # it did renew; whether it still holds, the release decides
                return
            if not self._renewed(rows[0][0], sent_at):
                return

    def __exit__(self, t: type[BaseException] | None, v: BaseException | None, tb: TracebackType | None) -> None:
        self._closing = True
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        assert isinstance(self._runner, _SyncRunner)
        if not self._stopped_at_deadline and not self._runner.query(self._release_sql, [self.token])[0][0]:
            self._mark_lost(RuntimeError("advlock_lease_release found the lease already ended"))
        if self.lost is not None:
            raise self._lost_error() from v

    def _enter_once(self) -> None:
        if self._entered:
            raise RuntimeError("an advlock.lease() object is entered once: call advlock.lease() again")
        self._entered = True


def lease(
    source: LeaseSource,
    ns: str,
    id: str | int = "",
    *,
    ttl: float,
    timeout: float,
    slots: int = 1,
    renew_deadline: float | None = None,
    schema: str | None = None,
) -> Lease:
    """A lease on (ns, id) for the `with` / `async with` block: taken with a server-side bounded
    wait of at most `timeout` seconds that holds no snapshot where the source can lend a
    connection outside a transaction (CALL advlock_wait_lease; LeaseTimeout after, naming the
    holders), renewed in the background on any connection of `source` (a pool, an engine, or
    one psycopg connection), released on exit whatever happens. The body stops (asyncio: it is
    cancelled; blocking: `lost` is set and `check()` raises) at the renew deadline,
    `renew_deadline` seconds (default 2/3 of ttl) after the grant or the last renewal, before the
    server's TTL runs out. `slots=N` lets N leases hold the key at once. Needs advlock in
    shared_preload_libraries (NotPreloaded otherwise)."""
    return Lease(source, ns, id, ttl, timeout, slots, renew_deadline, schema)
