"""Session locks done right: on a dedicated connection that the lock owns, to one server session.

A session lock outlives transactions, so on a pooled connection it outlives your code too: the
pool hands the connection, lock included, to the next borrower. session_lock() therefore takes
a DSN, never a connection, opens its own connection, and unlocks and closes it on exit.

A DSN can still lead to a pooler. In transaction or statement mode (PgBouncer's default for
most deployments) the server session behind the connection is handed to other clients between
transactions: a session lock taken through it is shared with whoever gets that session next,
and two clients "hold" it at once. So before locking, the connection proves it is one server
session: the backend pid of the protocol (BackendKeyData) equals pg_backend_pid(), or, behind a
pooler (which sends its own pid), a second connection opened at the same moment reaches a
different backend (a transaction-mode pooler hands it the idle one), and the backend reached
holds no advisory lock it was never asked for. Every later statement re-checks that it reaches
the same backend.

No probe is conclusive: a busy transaction-mode pool can hand the probe another backend and our
next transaction to anyone. A lock taken between transactions there could be stranded on a
server session we can no longer reach (and the pool would hand it to every later client). So
behind a pooler the lock lives inside one open transaction block, from the try to the unlock:
in every pooling mode an open transaction keeps its server session, so the lock is only ever
taken on the pinned backend and released there. The block's first statement greets again: the
backend it reached (maybe not the first one: that is harmless now) is the one pinned, unless it
already holds advisory locks. Between statements (read committed) the block holds no snapshot.

The wait itself goes through CALL advlock_wait_lock, which commits first and waits holding no
snapshot, so a holder that builds an index concurrently is not stalled by the waiters
(CREATE INDEX CONCURRENTLY waits for every older snapshot). A CALL cannot commit inside a
transaction block, so behind a pooler, and in the SQL edition (which has no such procedure),
the wait runs inside the statement.
"""

from __future__ import annotations

import asyncio
import selectors
import socket
import threading
from types import TracebackType
from typing import Any, Literal, Protocol, TypeAlias

from ._api import mode_of, timeout_ms
from ._drivers import LOOKUP_SQL, SCHEMA, check_schema, qualify, schema_prefix
from ._dsn import normalize
from ._errors import Holder, LockLost, LockTimeout, UnsafePooler, holder_text
from ._key import check_ns, id_text, key

Row = tuple[Any, ...]

# Each statement reports the backend it ran on and that backend's local transaction counter
# (the lxid of its virtual transaction id, which every transaction of a backend advances by
# one): with autocommit, each of our statements is one transaction, so on a backend nobody else
# uses the counter goes up by exactly one from one statement of ours to the next. A gap means
# another client ran something there in between: a pooler shares the server session.
_BACKEND = (
    "(SELECT pg_catalog.pg_backend_pid() AS pid,"
    " (SELECT CAST(pg_catalog.split_part(l.virtualtransaction, '/', 2) AS int8) FROM pg_catalog.pg_locks l"
    " WHERE l.locktype = 'virtualxid' AND l.pid = pg_catalog.pg_backend_pid()) AS lxid) b"
)
# Lock or unlock only on the pinned backend, at the expected point of its counter.
_ON_OURS = "b.pid = CAST({} AS int4) AND b.lxid = CAST({} AS int8)"
# CALL advlock_wait_lock consumes two transactions (the CALL's, and the one it starts by
# committing first), and its arguments cannot hold a subquery: the pid alone guards it, and the
# next statement checks the counter.
_CALL_LXIDS = 2

# One round trip after connecting: the backend, where advlock lives (the extension's schema, or
# the edition's; or the schema= given), whether it has the snapshot-free wait, and whether this
# backend already holds an advisory lock (a new session never does, unless a pooler shares it).
_SCHEMA_EXPR = "(" + LOOKUP_SQL.replace(", pg_catalog.current_database()", "") + ")"
#
# It also opts this connection out of advlock.idle_session_lock_timeout: the lock sits on it,
# idle, on purpose, while the body works elsewhere, exactly what the setting terminates. Only
# where the setting exists (the advlock library loaded in this backend, or a value set for it in
# postgresql.conf, ALTER ROLE/DATABASE: then it is a placeholder the library takes on when it
# loads), so nothing is set on a server without advlock, and only on a direct connection (the
# backend is the one the protocol announced): behind a pooler a session-level setting would stay
# on a server session other clients get, and the lock lives in a transaction block there, which
# the timeout never touches.
_HELLO = (
    "WITH s AS (SELECT {} AS nspname)"
    " SELECT b.pid, b.lxid, s.nspname, pg_catalog.current_database(),"
    " EXISTS (SELECT FROM pg_catalog.pg_proc p JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace"
    " WHERE n.nspname = s.nspname AND p.proname = 'advlock_wait_lock' AND p.prokind = 'p'),"
    " EXISTS (SELECT FROM pg_catalog.pg_locks l WHERE l.locktype = 'advisory' AND l.pid = b.pid),"
    " CASE WHEN b.pid = CAST({} AS int4)"
    " AND pg_catalog.current_setting('advlock.idle_session_lock_timeout', true) IS NOT NULL"
    " THEN pg_catalog.set_config('advlock.idle_session_lock_timeout', '0', false) END"
    " FROM s, " + _BACKEND
)
_PID = "SELECT pg_catalog.pg_backend_pid()"
_TRY = (
    "SELECT b.pid, b.lxid, CASE WHEN " + _ON_OURS + " THEN"
    " " + SCHEMA + "advlock_try_with_token(CAST({} AS text), CAST({} AS text), CAST({} AS int4),"
    " mode => CAST({} AS text)) END FROM " + _BACKEND
)
_WAIT = (
    "CALL " + SCHEMA + "advlock_wait_lock(CASE WHEN pg_catalog.pg_backend_pid() = CAST({} AS int4)"
    " THEN CAST({} AS int8) END, CAST({} AS int4), CAST({} AS text))"
)
_HOLDING = (
    "SELECT b.pid, b.lxid, CASE WHEN " + _ON_OURS + " THEN"
    " " + SCHEMA + "advlock_holding(CAST({} AS text), CAST({} AS text), CAST({} AS text)) END FROM " + _BACKEND
)
# The unlock runs on the pinned backend even when the counter moved: the lock is there.
_UNLOCK = (
    "SELECT b.pid, b.lxid, CASE WHEN b.pid = CAST({} AS int4) THEN"
    " " + SCHEMA + "advlock_unlock(CAST({} AS text), CAST({} AS text), CAST({} AS text)) END FROM " + _BACKEND
)
# Behind a pooler: the block that pins the server session for the life of the lock.
_PIN = "BEGIN"
_UNPIN = "COMMIT"
# Who held it when the wait ran out (the try returns NULL, the CALL false: no DETAIL to parse).
_WHO = (
    "SELECT pid, application_name, backend_state FROM " + SCHEMA + "advlock_holders"
    " WHERE key = CAST({} AS int8) AND granted ORDER BY pid"
)
# How long a second connection may take to answer pg_backend_pid() when looking for a pooler:
# a session-mode pool with no free server connection makes it wait (inconclusive, not refused).
_PROBE_WAIT = 2.0

class _URL(Protocol):
    # sqlalchemy.engine.URL (engine.url), structurally: the core imports no SQLAlchemy.
    @property
    def drivername(self) -> str: ...
    def render_as_string(self, hide_password: bool = True) -> str: ...


DSN: TypeAlias = str | _URL

_INSTEAD = (
    "use a DSN that reaches PostgreSQL itself (not the pooler), a pooler in session mode, advlock.lease() (which any "
    "pool can carry), or advlock.lock() in a transaction"
)


def _is_connection_loss(exc: BaseException, conn_dead: bool) -> bool:
    # Class 08 (connection exception) and 57P01-57P03 (admin shutdown, crash shutdown, cannot
    # connect now), or the driver reporting the connection closed: the lock is gone with it.
    state = str(getattr(exc, "sqlstate", "") or "")
    return conn_dead or state.startswith("08") or state in ("57P01", "57P02", "57P03")


def _probe_pid(dsn: str, driver: str, kwargs: dict[str, Any]) -> int | None:
    """pg_backend_pid() on a second connection opened now, or None when none answered within
    _PROBE_WAIT seconds. Runs in a thread of its own, which a pool that never answers may keep
    waiting (it ends with the pool's query_wait_timeout) without keeping the caller."""
    answer: list[object] = []

    def probe() -> None:
        try:
            if driver == "asyncpg":
                import asyncpg

                async def run() -> int:
                    conn = await asyncpg.connect(dsn, **kwargs)
                    try:
                        return int(await conn.fetchval(_PID))
                    finally:
                        await conn.close()

                answer.append(asyncio.run(run()))
            else:
                import psycopg

                with psycopg.connect(dsn, **kwargs) as conn:
                    row = conn.execute(_PID, prepare=False).fetchone()
                    answer.append(int(row[0]) if row else None)
        except Exception as e:
            answer.append(e)

    thread = threading.Thread(target=probe, name="advlock session_lock pooler probe", daemon=True)
    thread.start()
    thread.join(_PROBE_WAIT)
    if not answer:
        return None
    if isinstance(answer[0], BaseException):
        raise answer[0]
    return answer[0] if isinstance(answer[0], int) else None


class _Base:
    """What the blocking and the asyncio session lock share: arguments, SQL, and the reading
    of every answer (the drivers only run statements)."""

    def __init__(
        self,
        dsn: object,
        ns: str,
        id: str | int,
        timeout: float,
        shared: bool,
        application_name: str | None,
        schema: str | None,
        *,
        driver: str,
    ) -> None:
        if driver not in ("psycopg", "asyncpg"):
            raise ValueError(f"driver must be 'psycopg' or 'asyncpg', got {driver!r}")
        if application_name is not None and not isinstance(application_name, str):
            raise TypeError("application_name must be a str")
        self.driver = driver
        self.dsn = normalize(dsn, driver)
        self.ns = check_ns(ns)
        self.id = id_text(id)
        self.key = key(ns, id)
        self.mode = mode_of(shared)
        self.timeout_ms = timeout_ms(timeout)
        self.application_name = application_name
        self.schema = check_schema(schema)
        self.token: int = 0
        self.pid: int = 0  # the server backend holding the lock (pg_backend_pid(), not a pooler's)
        self.lost: BaseException | None = None  # why the lock was lost, once it was
        self._prefix = ""
        self._snapshot_free_wait = False
        self._next_lxid = 0  # the backend's transaction counter at our next statement
        self._pinned = False  # behind a pooler: inside the transaction block that pins the backend

    # ---- statements and what their answers mean ----

    def _hello(self, protocol_pid: int) -> tuple[str, list[object]]:
        if self.schema is None:
            return _HELLO.format(_SCHEMA_EXPR, "{}"), [protocol_pid]
        return _HELLO.format("CAST({} AS text)", "{}"), [self.schema, protocol_pid]

    def _greeted(self, row: Row, protocol_pid: int) -> bool:
        """Take in the hello row; True when a pooler stands between us and the server (its
        BackendKeyData pid is not the backend's), so the probe must look further."""
        pid, lxid, schema, database, has_wait, holds_advisory, _opted_out = row
        self._prefix = schema_prefix((schema, database))
        self._snapshot_free_wait = bool(has_wait)
        self.pid = int(pid)
        self._next_lxid = int(lxid) + (0 if self._pinned else 1)
        if pid == protocol_pid:
            return False
        if holds_advisory:
            raise UnsafePooler(
                f"session_lock(): the server session behind this new connection (backend {pid}, reached through a "
                f"pooler: the protocol announced pid {protocol_pid}) already holds advisory locks this connection "
                f"never took, so the pooler shares it with other clients (transaction or statement pooling): {_INSTEAD}"
            )
        return True

    def _probed(self, probe_pid: int | None) -> None:
        if probe_pid == self.pid:
            raise UnsafePooler(
                f"session_lock(): the DSN leads to a pooler in transaction or statement mode: two connections opened "
                f"at once were both served by backend {self.pid} (a session lock taken there would be shared with "
                f"every client the pooler hands that backend to): {_INSTEAD}"
            )

    def _on_ours(self, pid: object, lxid: object) -> None:
        """Check that a statement ran on the pinned backend with nobody else's transaction in
        between."""
        if pid != self.pid:
            raise UnsafePooler(
                f"session_lock(): this connection's statements reached backend {pid} after backend {self.pid}: a "
                f"pooler is moving it between server sessions (transaction or statement pooling): {_INSTEAD}"
            )
        expected = self._next_lxid % 2**32
        if lxid != expected:
            raise UnsafePooler(
                f"session_lock(): another client ran transactions on backend {pid} between two statements of this "
                f"connection (its transaction counter went from {expected - 1} to {lxid}): a pooler shares the server "
                f"session (transaction or statement pooling): {_INSTEAD}"
            )
        # Inside the pinning block every statement is part of one transaction.
        self._next_lxid = int(lxid) + (0 if self._pinned else 1)

    def _pinning(self, e: BaseException | None = None) -> UnsafePooler:
        """Opening the pinning block failed (a statement-mode pooler refuses transaction blocks)."""
        return UnsafePooler(
            f"session_lock(): the pooler refused a transaction block ({e}), so it would not keep one server session "
            f"for this connection (statement pooling): {_INSTEAD}"
        )

    def _sql(self, sql: str) -> str:
        return qualify(sql, self._prefix)

    def _try(self, wait_ms: int) -> tuple[str, list[object]]:
        return self._sql(_TRY), [self.pid, self._next_lxid, self.ns, self.id, wait_ms, self.mode]

    def _calls(self) -> bool:
        # CALL commits first, which it cannot do inside the pinning block.
        return self._snapshot_free_wait and not self._pinned

    def _first_wait_ms(self) -> int:
        # With the snapshot-free wait: a try without waiting first (one round trip when free),
        # then CALL for the wait. Without it (the SQL edition, or pinned behind a pooler): the
        # whole wait in the statement.
        return 0 if self._calls() else self.timeout_ms

    def _needs_call(self, token: object) -> bool:
        return token is None and self._calls() and self.timeout_ms > 0

    def _wait(self) -> tuple[str, list[object]]:
        return self._sql(_WAIT), [self.pid, self.key, self.timeout_ms, self.mode]

    def _wait_refused(self, e: BaseException) -> UnsafePooler | None:
        """The CALL's key is NULL when it runs on another backend than ours, which it refuses
        with 22004: the pooler moved the connection."""
        if getattr(e, "sqlstate", None) != "22004":
            return None
        return UnsafePooler(
            f"session_lock(): the wait reached another backend than {self.pid}: a pooler is moving this connection "
            f"between server sessions (transaction or statement pooling): {_INSTEAD}"
        )

    def _waited(self) -> None:
        # The CALL ran (on the pinned backend: its key is NULL elsewhere, which it refuses).
        self._next_lxid += _CALL_LXIDS

    def _holding(self) -> tuple[str, list[object]]:
        return self._sql(_HOLDING), [self.pid, self._next_lxid, self.ns, self.id, self.mode]

    def _unlock(self) -> tuple[str, list[object]]:
        return self._sql(_UNLOCK), [self.pid, self.ns, self.id, self.mode]

    def _unlocked(self, row: Row) -> None:
        """Read the unlock's answer: the lock must have been there, on a session nobody shared."""
        pid, lxid, released = row
        try:
            self._on_ours(pid, lxid)
        except UnsafePooler as e:
            self.lost = e
            return
        if not released:
            self.lost = RuntimeError("advlock_unlock found the lock not held")

    def _who(self) -> tuple[str, list[object]]:
        return self._sql(_WHO), [self.key]

    def _timeout(self, rows: list[Row]) -> LockTimeout:
        held_by = "; ".join(holder_text(r[0], r[1], r[2]) for r in rows)
        e = LockTimeout(
            f"could not obtain {self.mode} session lock on key {self.key} = advlock_key('{self.ns}', '{self.id}')"
            f" within {self.timeout_ms} ms" + (f": held by {held_by}" if held_by else "")
        )
        e.holders = tuple(Holder(int(r[0]), r[1], r[2]) for r in rows)
        return e

    def check(self) -> None:
        """Raise LockLost if the lock is known to be lost (no round trip): its connection died,
        which the watchdog notices within moments (the server closing it: a terminated backend,
        a restart, the idle-lock timeout), or holding() found it gone. Call it before a write
        that must not run without the lock (and fence the write with `token` anyway)."""
        if self.lost is not None:
            raise self._lost()

    def _lost(self) -> LockLost:
        return LockLost(
            f"the session lock on advlock_key('{self.ns}', '{self.id}') (token {self.token}) was lost: {self.lost}"
        )

    def _connect_kwargs(self) -> dict[str, Any]:
        if self.driver == "asyncpg":
            app = self.application_name
            # No named prepared statements: a transaction-mode pooler would lose them before
            # this connection can tell it is one (and these few statements gain nothing).
            return {"server_settings": {} if app is None else {"application_name": app}, "statement_cache_size": 0}
        kwargs: dict[str, Any] = {"autocommit": True}
        if self.application_name is not None:
            kwargs["application_name"] = self.application_name
        return kwargs


class HeldLock(_Base):
    """A session lock on its own blocking (psycopg) connection: `with session_lock(...) as held`.
    Nothing can interrupt a blocking body: when the connection dies, `lost` is set and `check()`
    raises LockLost; call it between steps."""

    def __enter__(self) -> HeldLock:
        import psycopg

        self._using = threading.RLock()
        self._conn = psycopg.connect(self.dsn, **self._connect_kwargs())
        try:
            if self._greeted(self._row(*self._hello(self._conn.info.backend_pid)), self._conn.info.backend_pid):
                self._probed(_probe_pid(self.dsn, self.driver, self._connect_kwargs()))
                self._pin(self._conn.info.backend_pid)
            self._acquire()
        except BaseException:
            self._conn.close()
            raise
        self._watch()
        return self

    def _acquire(self) -> None:
        pid, lxid, token = self._row(*self._try(self._first_wait_ms()))
        self._on_ours(pid, lxid)
        if self._needs_call(token):
            try:
                (acquired,) = self._row(*self._wait())
            except Exception as e:
                moved = self._wait_refused(e)
                if moved is None:
                    raise
                raise moved from e
            self._waited()
            if acquired:
                # Held once by the CALL; a second hold returns the fencing token, then give it back.
                pid, lxid, token = self._row(*self._try(0))
                self._on_ours(pid, lxid)
                self._unlocked(self._row(*self._unlock()))
                if self.lost is not None:
                    raise self.lost
        if token is None:
            raise self._timeout(self._rows(*self._who()))
        self.token = int(token)

    def _pin(self, protocol_pid: int) -> None:
        try:
            self._conn.execute(_PIN, prepare=False)
        except Exception as e:
            raise self._pinning(e) from e
        self._pinned = True
        self._greeted(self._row(*self._hello(protocol_pid)), protocol_pid)

    def _unpin(self) -> None:
        if self._pinned and not self._dead():
            self._conn.execute(_UNPIN, prepare=False)

    def _rows(self, sql: str, args: list[object]) -> list[Row]:
        from psycopg.rows import tuple_row

        with self._using, self._conn.cursor(row_factory=tuple_row) as cur:
            cur.execute(sql.format(*["%s"] * len(args)), args, prepare=False)
            return list(cur.fetchall())

    # ---- the watchdog: the body learns that the connection died, without a query per second ----

    _using: Any  # a threading.RLock: one statement (and the reading of its answer) at a time
    _watchdog: threading.Thread | None = None

    def _watch(self) -> None:
        """Start the thread that waits for the connection's socket to become readable while
        no statement of ours is running: the server sent something unasked, which on an idle
        connection means it is closing it (a FATAL, then EOF). holding() then reads it, and the
        loss is recorded (`lost`, `check()` raises): within moments of the server closing it."""
        # A socket pair to stop it (selectable everywhere, unlike a pipe on Windows).
        self._stop_r, self._stop_w = socket.socketpair()
        self._selector = selectors.DefaultSelector()
        self._selector.register(self._conn.fileno(), selectors.EVENT_READ, "connection")
        self._selector.register(self._stop_r, selectors.EVENT_READ, "stop")
        self._watchdog = threading.Thread(
            target=self._watchdog_loop, name=f"advlock session_lock {self.key} watchdog", daemon=True
        )
        self._watchdog.start()

    def _watchdog_loop(self) -> None:
        while self.lost is None:
            if "stop" in {key.data for key, _ in self._selector.select()}:
                return
            with self._using:
                ready = {key.data for key, _ in self._selector.select(0)}
                if "stop" in ready:
                    return
                if "connection" not in ready:
                    continue  # it was the answer to a statement of ours, read meanwhile
                self._read_unasked()

    def _read_unasked(self) -> None:
        try:
            if not self.holding() and self.lost is None:
                self.lost = RuntimeError("advlock_holding says this connection no longer holds the lock")
        except Exception as e:  # whatever the server sent, the lock can no longer be vouched for
            self.lost = e

    def _unwatch(self) -> None:
        if self._watchdog is None:
            return
        self._stop_w.send(b"x")
        self._watchdog.join()
        self._watchdog = None
        self._selector.close()
        self._stop_r.close()
        self._stop_w.close()

    def _row(self, sql: str, args: list[object]) -> Row:
        return self._rows(sql, args)[0]

    def _dead(self) -> bool:
        return bool(self._conn.closed or self._conn.broken)

    def holding(self) -> bool:
        """Whether this connection still holds the lock (advlock_holding). False, not an
        error, once the connection is lost (or found shared by a pooler); leaving the block
        then raises LockLost."""
        with self._using:
            if self.lost is not None:
                return False
            try:
                pid, lxid, holding = self._row(*self._holding())
                self._on_ours(pid, lxid)
                return bool(holding)
            except UnsafePooler as e:
                self.lost = e
                return False
            except Exception as e:
                if not _is_connection_loss(e, self._dead()):
                    raise
                self.lost = e
                return False

    def __exit__(self, t: type[BaseException] | None, v: BaseException | None, tb: TracebackType | None) -> None:
        try:
            self._unwatch()
            if self.lost is None:
                try:
                    self._unlocked(self._row(*self._unlock()))
                    self._unpin()
                except Exception as e:
                    if not _is_connection_loss(e, self._dead()):
                        raise
                    self.lost = e
        finally:
            self._conn.close()  # releases anything left, whatever happened above
        if self.lost is not None:
            raise self._lost() from self.lost


class AsyncHeldLock(_Base):
    """A session lock on its own asyncio connection (psycopg or asyncpg):
    `async with session_lock(...) as held`. When the connection dies while the block runs
    (noticed within moments of the server closing it), `lost` is set and the body is cancelled;
    leaving the block raises LockLost."""

    _conn: Any = None
    _closing = False
    _using: Any = None  # an asyncio.Lock once held: one statement of ours at a time

    async def __aenter__(self) -> AsyncHeldLock:
        self._using = asyncio.Lock()
        protocol_pid = await self._connect()
        try:
            if self._greeted(await self._row(*self._hello(protocol_pid)), protocol_pid):
                self._probed(await asyncio.to_thread(_probe_pid, self.dsn, self.driver, self._connect_kwargs()))
                await self._pin(protocol_pid)
            await self._acquire()
        except BaseException:
            await self._close()
            raise
        self._watch()
        return self

    async def _connect(self) -> int:
        """Open the connection; the pid its protocol announced (BackendKeyData)."""
        if self.driver == "asyncpg":
            import asyncpg

            self._conn = await asyncpg.connect(self.dsn, **self._connect_kwargs())
            return int(self._conn.get_server_pid())
        import psycopg

        self._conn = await psycopg.AsyncConnection.connect(self.dsn, **self._connect_kwargs())
        return int(self._conn.info.backend_pid)

    async def _acquire(self) -> None:
        pid, lxid, token = await self._row(*self._try(self._first_wait_ms()))
        self._on_ours(pid, lxid)
        if self._needs_call(token):
            try:
                (acquired,) = await self._row(*self._wait())
            except Exception as e:
                moved = self._wait_refused(e)
                if moved is None:
                    raise
                raise moved from e
            self._waited()
            if acquired:
                pid, lxid, token = await self._row(*self._try(0))
                self._on_ours(pid, lxid)
                self._unlocked(await self._row(*self._unlock()))
                if self.lost is not None:
                    raise self.lost
        if token is None:
            raise self._timeout(await self._rows(*self._who()))
        self.token = int(token)

    async def _pin(self, protocol_pid: int) -> None:
        # BEGIN and COMMIT run once per connection: never prepared (psycopg prepares from the
        # fifth run of a statement; asyncpg's execute() without arguments is the simple protocol).
        try:
            await self._conn.execute(_PIN)
        except Exception as e:
            raise self._pinning(e) from e
        self._pinned = True
        self._greeted(await self._row(*self._hello(protocol_pid)), protocol_pid)

    async def _unpin(self) -> None:
        if self._pinned and not self._dead():
            await self._conn.execute(_UNPIN)

    async def _rows(self, sql: str, args: list[object]) -> list[Row]:
        if self.driver == "asyncpg":
            # statement_cache_size=0: unnamed statements only.
            placeholders = [f"${i + 1}" for i in range(len(args))]
            return [tuple(r) for r in await self._conn.fetch(sql.format(*placeholders), *args)]
        from psycopg.rows import tuple_row

        self._pause_watch()  # the answer makes the socket readable: not a sign of anything
        try:
            async with self._conn.cursor(row_factory=tuple_row) as cur:
                await cur.execute(sql.format(*["%s"] * len(args)), args, prepare=False)
                return list(await cur.fetchall())
        finally:
            self._resume_watch()

    # ---- the watchdog: the body learns that the connection died, without a query per second ----
    #
    # asyncpg reads its socket all the time and calls its termination listeners when the server
    # closes it. psycopg reads only while a statement runs, so the socket becomes readable
    # between statements only when the server sends something unasked: on an idle connection a
    # FATAL before it closes it. A reader on a duplicate of the socket (the event loop allows one
    # reader per descriptor, and psycopg adds its own while it runs a statement) is removed while
    # a statement of ours runs; when it fires, holding() reads what came and records the loss.
    # Either way the body (the task that entered the block) is cancelled, as a lost lease's is.

    _body: asyncio.Task[Any] | None = None
    _watched_fd = -1
    _watching = False
    _watched: socket.socket
    _cancelled_body = False
    _probe: asyncio.Task[None] | None = None

    def _watch(self) -> None:
        self._body = asyncio.current_task()
        if self.driver == "asyncpg":
            self._conn.add_termination_listener(self._terminated)
            return
        # A duplicate of the socket (socket.fromfd duplicates the descriptor, on Windows too).
        self._watched = socket.fromfd(self._conn.fileno(), socket.AF_INET, socket.SOCK_STREAM)
        self._watched_fd = self._watched.fileno()
        self._watching = True
        self._resume_watch()

    def _resume_watch(self) -> None:
        if self._watching and self.lost is None:
            asyncio.get_running_loop().add_reader(self._watched_fd, self._readable)

    def _pause_watch(self) -> None:
        if self._watched_fd >= 0:
            asyncio.get_running_loop().remove_reader(self._watched_fd)

    def _readable(self) -> None:
        self._pause_watch()
        self._probe = asyncio.get_running_loop().create_task(self._read_unasked())

    async def _read_unasked(self) -> None:
        try:
            if not await self.holding() and self.lost is None:
                self.lost = RuntimeError("advlock_holding says this connection no longer holds the lock")
        except Exception as e:  # whatever the server sent, the lock can no longer be vouched for
            self.lost = e
        if self.lost is not None:
            self._stop_body()

    def _terminated(self, conn: object) -> None:
        if self.lost is None and not self._closing:
            self.lost = ConnectionError(
                "the server closed the lock's connection (asyncpg gives no reason: a terminated backend, a restart, "
                "advlock.idle_session_lock_timeout, or the network)"
            )
            self._stop_body()

    def _stop_body(self) -> None:
        if self._body is not None and not self._closing and not self._cancelled_body:
            self._cancelled_body = True
            self._body.cancel(f"advlock: the session lock on {self.key} (token {self.token}) was lost")

    def _unwatch(self) -> None:
        self._closing = True
        if self.driver == "asyncpg":
            if self._conn is not None and self._body is not None:
                self._conn.remove_termination_listener(self._terminated)
            return
        self._watching = False
        if self._watched_fd >= 0:
            self._pause_watch()
            self._watched.close()
            self._watched_fd = -1

    async def _row(self, sql: str, args: list[object]) -> Row:
        return (await self._rows(sql, args))[0]

    def _dead(self) -> bool:
        if self.driver == "asyncpg":
            return bool(self._conn.is_closed())
        return bool(self._conn.closed or self._conn.broken)

    async def _close(self) -> None:
        if self._conn is None:
            return
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
        error, once the connection is lost (or found shared by a pooler); leaving the block
        then raises LockLost."""
        async with self._using:
            if self.lost is not None:
                return False
            try:
                pid, lxid, holding = await self._row(*self._holding())
                self._on_ours(pid, lxid)
                return bool(holding)
            except UnsafePooler as e:
                self.lost = e
                return False
            except Exception as e:
                if not _is_connection_loss(e, self._dead()):
                    raise
                self.lost = e
                return False

    async def __aexit__(self, t: type[BaseException] | None, v: BaseException | None, tb: TracebackType | None) -> None:
        try:
            self._unwatch()
            if self._probe is not None and not self._probe.done():
                # Shielded: reading the answer must finish even if this task is cancelled again.
                await asyncio.shield(self._probe)
            if self.lost is None:
                try:
                    self._unlocked(await self._row(*self._unlock()))
                    await self._unpin()
                except Exception as e:
                    if not _is_connection_loss(e, self._dead()):
                        raise
                    self.lost = e
        finally:
            await self._close()
        if self._cancelled_body:
            # Take back our own cancellation request (Python 3.11+ counts them); a cancellation
            # from elsewhere that arrived too still propagates as CancelledError.
            uncancel = getattr(self._body, "uncancel", None)
            if uncancel is not None and uncancel() > 0 and isinstance(v, asyncio.CancelledError):
                return
        if self.lost is not None:
            raise self._lost() from self.lost


class SessionLock:
    """What session_lock() returns: `with` for a blocking psycopg connection, `async with`
    for an asyncio one (psycopg by default, or driver="asyncpg")."""

    def __init__(self, *args: Any, driver: str) -> None:
        self._driver = driver
        # Validate everything now, before any connection is opened.
        self._async = AsyncHeldLock(*args, driver=driver)
        self._sync = HeldLock(*args, driver="psycopg") if driver == "psycopg" else None

    def __enter__(self) -> HeldLock:
        if self._sync is None:
            raise TypeError(f"driver={self._driver!r} is asyncio-only: use `async with session_lock(...)`")
        return self._sync.__enter__()

    def __exit__(self, t: type[BaseException] | None, v: BaseException | None, tb: TracebackType | None) -> None:
        assert self._sync is not None
        self._sync.__exit__(t, v, tb)

    async def __aenter__(self) -> AsyncHeldLock:
        return await self._async.__aenter__()

    async def __aexit__(self, t: type[BaseException] | None, v: BaseException | None, tb: TracebackType | None) -> None:
        await self._async.__aexit__(t, v, tb)


def session_lock(
    dsn: DSN,
    ns: str,
    id: str | int = "",
    *,
    timeout: float,
    shared: bool = False,
    driver: Literal["psycopg", "asyncpg"] = "psycopg",
    application_name: str | None = None,
    schema: str | None = None,
) -> SessionLock:
    """A session lock on (ns, id) held on a dedicated connection opened from `dsn` (a libpq
    URI or key=value string, or a SQLAlchemy URL such as engine.url), for as long as the
    `with` / `async with` block runs. The connection must be one server session: a pooler in
    transaction or statement mode is refused (UnsafePooler). Waits at most `timeout` seconds,
    holding no snapshot (CALL advlock_wait_lock), then LockTimeout naming the holder;
    `held.token` is its fencing token, `held.pid` the server backend, `held.holding()` asks
    the server whether it is still held. The connection opts out of
    advlock.idle_session_lock_timeout for itself (it sits idle holding the lock on purpose), and
    a watchdog waiting on its socket notices when the server closes it: `held.lost` is set, an
    asyncio body is cancelled, `held.check()` raises LockLost. On exit it unlocks and closes the
    connection; if the connection was lost meanwhile, LockLost is raised instead of passing
    silently. `schema`: where advlock is installed (default: found on the connection)."""
    return SessionLock(dsn, ns, id, timeout, shared, application_name, schema, driver=driver)
