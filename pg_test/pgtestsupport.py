"""The one test-support module of advlock's Python suites: pg_test's pytest suites (clients,
leases, monitoring, reliability, upgrade, encodings) and the Python client's tests
(clients/python/tests). It holds what they share: where the instance is and how to connect to
it, the admin connection, the advisory locks a test left behind, waiters in the lock queue, the
archived install scripts, the bounded poll, and PgBouncer in front of an instance (started by
pgbouncer_launcher.py beside it, the one launcher the Ruby and Node clients' tests run too). Each
suite's own support file keeps what only it needs (the exporter and Prometheus, crash helpers, ...).

Typed (mypy --strict checks it with the Python client's tests) and standard library, psycopg
and pytest only, the three things every suite's venv has.

Waits here guard against hangs only; behaviour between sessions is asserted on what the server
reports, not on how long something took.
"""
from __future__ import annotations

import glob
import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal, NamedTuple, TypeVar

import psycopg
import pytest
from psycopg import sql
from psycopg.rows import dict_row

import pgbouncer_launcher
from pgbouncer_launcher import free_port as free_port  # re-exported: pg_test/monitoring uses it

T = TypeVar("T")

REPO = Path(__file__).resolve().parent.parent
# The PostgreSQL binaries of the instance (pg_test/run.sh sets PGBIN to its major's).
PGBIN = os.environ.get("PGBIN", "/usr/lib/postgresql/17/bin")
USER = "postgres"
# Server.connect's statement_timeout_ms when not given: the suite's own (Server.statement_timeout_ms).
SUITE_DEFAULT = -1
NO_OPTIONS = sql.SQL("")


def wait_until(predicate: Callable[[], T], timeout: float = 10.0, interval: float = 0.01, what: str = "condition") -> T:
    """Polls predicate() until it returns a truthy value, which it returns; fails after
    `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


# ---------------------------------------------------------------------------- the instance

class Server:
    """A suite's PostgreSQL instance and database, as a base conninfo (host, port, dbname,
    user), with the statement_timeout its connections carry by default so that a bug cannot
    hang the suite (None: none)."""

    def __init__(self, conninfo: str, statement_timeout_ms: int | None = None) -> None:
        self.base = conninfo
        self.statement_timeout_ms = statement_timeout_ms
        params = psycopg.conninfo.conninfo_to_dict(conninfo)
        self.host = str(params.get("host", "127.0.0.1"))
        self.port = int(str(params.get("port", 5432)))
        self.dbname = str(params.get("dbname", ""))
        self.user = str(params.get("user", USER))

    @classmethod
    def from_env(cls, default_port: int, default_dbname: str, statement_timeout_ms: int | None = None) -> Server:
        """The instance pg_test/run.sh describes: ADVLOCK_PGHOST (default 127.0.0.1),
        ADVLOCK_PGPORT (else ADVLOCK_TEST_PORT, else the suite's default port) and
        ADVLOCK_PGDATABASE (else the suite's database), as the postgres user."""
        port = os.environ.get("ADVLOCK_PGPORT", os.environ.get("ADVLOCK_TEST_PORT", str(default_port)))
        return cls(psycopg.conninfo.make_conninfo(
            host=os.environ.get("ADVLOCK_PGHOST", "127.0.0.1"), port=int(port),
            dbname=os.environ.get("ADVLOCK_PGDATABASE", default_dbname), user=USER), statement_timeout_ms)

    def conninfo(self, app: str, **params: Any) -> str:
        """The conninfo of a connection named `app` (application_name, so holders are
        identifiable) with a 10 s connect_timeout; `params` add or override (port, dbname,
        options, ...; None keeps the base value)."""
        merged: dict[str, Any] = {"application_name": app, "connect_timeout": 10}
        merged.update({k: v for k, v in params.items() if v is not None})
        return psycopg.conninfo.make_conninfo(self.base, **merged)

    def connect(self, app: str, autocommit: bool = True, statement_timeout_ms: int | None = SUITE_DEFAULT,
                **params: Any) -> psycopg.Connection[Any]:
        """A psycopg 3 connection (autocommit by default) with the suite's statement_timeout
        (statement_timeout_ms: another one, None for none). `params`: conninfo parameters as
        for conninfo(), and psycopg.connect's own (prepare_threshold, row_factory, ...)."""
        timeout = self.statement_timeout_ms if statement_timeout_ms == SUITE_DEFAULT else statement_timeout_ms
        if timeout and "options" not in params:
            params["options"] = f"-c statement_timeout={timeout}"
        own = {k: params.pop(k) for k in ("prepare_threshold", "row_factory", "cursor_factory", "context")
               if k in params}
        return psycopg.connect(self.conninfo(app, **params), autocommit=autocommit, **own)

    def recreate_database(self, name: str, options: sql.Composable = NO_OPTIONS) -> None:
        """Drops database `name` if it exists (WITH (FORCE): a session an earlier failure left
        does not block it) and creates it anew, with `options` (TEMPLATE, ENCODING, ...)."""
        self.drop_database(name)
        with self.connect("advlock-test/create-database", dbname="postgres") as conn:
            conn.execute(sql.SQL("CREATE DATABASE {} {}").format(sql.Identifier(name), options))

    def drop_database(self, name: str) -> None:
        with self.connect("advlock-test/drop-database", dbname="postgres") as conn:
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))

    def admin_fixture(self, app: str, scope: Literal["session", "function"] = "function",
                      setup: tuple[str, ...] = ()) -> Any:
        """A pytest fixture `admin`: an observer/administrator connection named `app` running
        the `setup` statements first, closed after its scope."""
        def admin() -> Iterator[psycopg.Connection[Any]]:
            with self.connect(app) as conn:
                for statement in setup:
                    conn.execute(statement)
                yield conn
        return pytest.fixture(admin, scope=scope, name="admin")

    def no_advisory_locks_left_fixture(self, app: str, timeout: float, interval: float = 0.02,
                                       terminate: bool = False) -> Any:
        """An autouse pytest fixture: after every test no advisory lock (held or awaited) remains
        in the database; else the test fails (and, with `terminate`, the holders are
        terminated so they do not disturb the next test). A connection closed a moment ago
        ends its backend a moment later, and a server restarting (a crash test) refuses
        connections for a while: the check polls for `timeout` seconds."""
        def no_advisory_locks_left(request: pytest.FixtureRequest) -> Iterator[None]:
            yield
            left = self.advisory_locks_left(app, timeout, interval)
            if left:
                if terminate:
                    with self.connect(app) as conn:
                        for pid in {row.pid for row in left}:
                            conn.execute("SELECT pg_terminate_backend(%s)", (pid,))
                pytest.fail(f"{request.node.nodeid} left advisory locks behind: {left}")
        return pytest.fixture(no_advisory_locks_left, autouse=True)

    def advisory_locks_left(self, app: str, timeout: float, interval: float = 0.02) -> list[Any]:
        """The advisory locks of the database (with the holders' application_name) once none
        remains ([]) or once `timeout` seconds have passed; a fresh connection each time."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                with self.connect(app) as conn:
                    rows: list[Any] = advisory_locks(conn)
                    if rows:
                        rows = [(row, application_name(conn, row.pid)) for row in rows]
            except psycopg.Error as e:   # e.g. a crash test's restart still under way
                rows = [f"(could not connect: {e})"]
            if not rows or time.monotonic() > deadline:
                return rows
            time.sleep(interval)


# ---------------------------------------------------------------------------- advisory locks

class AdvisoryLock(NamedTuple):
    """One advisory lock entry of pg_locks (a tuple: compares equal to (pid, granted, mode, key))."""
    pid: int
    granted: bool
    mode: str
    key: int


def advisory_locks(conn: psycopg.Connection[Any], pid: int | None = None, key: int | None = None) -> list[AdvisoryLock]:
    """Every advisory lock entry (held or awaited) in conn's database, optionally of one pid or
    one key (a bigint key: classid and objid), ordered by pid, key and mode."""
    rows = conn.execute(
        "SELECT pid, granted, mode, (classid::int8 << 32) | objid::int8 AS key FROM pg_locks"
        " WHERE locktype = 'advisory' AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
        "   AND (%(pid)s::int IS NULL OR pid = %(pid)s::int)"
        "   AND (%(key)s::int8 IS NULL OR (classid::int8 << 32) | objid::int8 = %(key)s::int8)"
        " ORDER BY pid, key, mode",
        {"pid": pid, "key": key},
    ).fetchall()
    return [AdvisoryLock(*row) for row in rows]


def waiting_pids(conn: psycopg.Connection[Any], key: int | None = None) -> set[int]:
    """The backends waiting (granted = false) for an advisory lock (for `key`, if given) in
    conn's database."""
    return {row.pid for row in advisory_locks(conn, key=key) if not row.granted}


def wait_for_waiter(conn: psycopg.Connection[Any], pid: int, key: int | None = None, timeout: float = 10.0) -> None:
    """Returns once backend `pid` waits in the lock queue for an advisory lock (`key`, if given)."""
    what = f"PID {pid} to wait for " + (f"advisory lock {key}" if key is not None else "an advisory lock")
    wait_until(lambda: pid in waiting_pids(conn, key), timeout, what=what)


def application_name(conn: psycopg.Connection[Any], pid: int) -> str | None:
    row = conn.execute("SELECT application_name FROM pg_stat_activity WHERE pid = %s", (pid,)).fetchone()
    return None if row is None else str(row[0])


# ---------------------------------------------------------------------------- install scripts

def archived_versions() -> list[str]:
    """Every released version, by its install script archived in sql/archive (as `cargo pgrx
    install` generated it at release)."""
    found = (re.search(r"advlock--(.+)\.sql$", p) for p in glob.glob(str(REPO / "sql" / "archive" / "advlock--*.sql")))
    return sorted(m.group(1) for m in found if m)


def current_version() -> str:
    """The extension's version now (Cargo.toml's; advlock.control takes it from there)."""
    m = re.search(r'^version = "(.+)"', (REPO / "Cargo.toml").read_text(), re.M)
    assert m, "Cargo.toml names no version"
    return m.group(1)


@contextmanager
def archived_scripts_installed() -> Iterator[None]:
    """Puts each archived install script next to the current one in the extension directory
    of PGBIN's PostgreSQL (where missing), so that CREATE EXTENSION advlock VERSION '<old>'
    works; removes what it put there afterwards."""
    sharedir = subprocess.check_output([os.path.join(PGBIN, "pg_config"), "--sharedir"], text=True).strip()
    placed = []
    try:
        for version in archived_versions():
            target = os.path.join(sharedir, "extension", f"advlock--{version}.sql")
            if not os.path.exists(target):
                shutil.copy(REPO / "sql" / "archive" / f"advlock--{version}.sql", target)
                placed.append(target)
        yield
    finally:
        for path in placed:
            os.remove(path)


# ---------------------------------------------------------------------------- PgBouncer

class Bouncer:
    """A running PgBouncer (pgbouncer() starts it) in front of `target`'s database, listening on
    127.0.0.1:`port`; its ini, userlist, pid file and log are in `directory`."""

    def __init__(self, target: Server, running: pgbouncer_launcher.Running) -> None:
        self.target = target
        self.running = running
        self.port = running.port
        self.directory = running.directory

    @property
    def url(self) -> str:
        """A postgresql:// URL of the target's database through this PgBouncer (asyncpg and
        the Python client take URLs)."""
        return self.running.url

    def conninfo(self, app: str, **params: Any) -> str:
        """The target's conninfo (application_name `app`) through this PgBouncer; `params` as
        for Server.conninfo."""
        return self.target.conninfo(app, **{"host": "127.0.0.1", "port": self.port, **params})

    def connect(self, app: str, autocommit: bool = True, **params: Any) -> psycopg.Connection[Any]:
        """A psycopg 3 connection through this PgBouncer. It never prepares: PgBouncer 1.18
        cannot route server-side prepared statements in transaction pooling. No
        statement_timeout is sent (a startup `options` PgBouncer may refuse); `params` as for
        Server.conninfo (connect_timeout, ...)."""
        return psycopg.connect(self.conninfo(app, **params), autocommit=autocommit, prepare_threshold=None)

    def console(self) -> psycopg.Connection[Any]:
        """The PgBouncer admin console (simple query protocol only; needs admin_users)."""
        return self.connect("advlock-test/console", dbname="pgbouncer")

    def show(self, what: str) -> list[dict[str, Any]]:
        """The rows of the console's SHOW `what` (SERVERS, POOLS, ...), as dicts."""
        with self.console() as con:
            return con.cursor(row_factory=dict_row).execute(f"SHOW {what}").fetchall()

    def log(self) -> str:
        """The end of PgBouncer's log (for failure messages)."""
        return self.running.log()

    def stop(self) -> None:
        self.running.stop()


@contextmanager
def pgbouncer(target: Server, pool_mode: Literal["session", "transaction", "statement"], pool_size: int,
              port: int | None = None, settings: Mapping[str, object] | None = None,
              prefix: str = "pgbouncer.") -> Iterator[Bouncer]:
    """PgBouncer in `pool_mode` with a pool of `pool_size` server connections to `target`'s
    database (as target's user), listening on 127.0.0.1:`port` (default: a free port), trusting
    every client, with the [pgbouncer] `settings` of the caller on top (they override): started
    by pg_test/pgbouncer_launcher.py (the launcher the Ruby and Node clients' tests run too), as
    the postgres OS user. Yields once it serves a query (within 15 s, else the test fails with
    its log), and is always stopped. Its directory (`prefix`...) is made in ADVLOCK_WORKDIR when
    set (pg_test/run.sh's run directory, kept with the run's other logs), else in the temp
    directory, and then removed at the end."""
    workdir = os.environ.get("ADVLOCK_WORKDIR") or None
    directory = tempfile.mkdtemp(prefix=prefix, dir=workdir)
    behind = pgbouncer_launcher.Target(target.host, target.port, target.dbname, target.user)
    try:
        try:
            running = pgbouncer_launcher.start(behind, pool_mode, pool_size, directory, port, settings)
        except pgbouncer_launcher.LaunchError as e:
            pytest.fail(str(e))
        try:
            yield Bouncer(target, running)
        finally:
            running.stop()
    finally:
        if workdir is None:
            shutil.rmtree(directory, ignore_errors=True)
