"""Shared helpers for the reliability suite: connections, bounded polling, abrupt disconnects.

The instance is described by ADVLOCK_PGHOST / ADVLOCK_PGPORT / ADVLOCK_PGDATABASE /
ADVLOCK_WORKDIR / ADVLOCK_PGDATA / PGBIN (set by pg_test/run.sh). Every connection carries an
application_name so holders are identifiable, and a statement_timeout so no bug hangs the suite.
"""
import os
import socket
import subprocess
import sys
from pathlib import Path

import psycopg

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1] / "docs" / "keys"))
from advlock_key import advlock_key  # noqa: E402  (the published pure-Python reference)
sys.path.insert(0, str(HERE.parent))
# The suites' shared helpers, re-exported for the tests.
from pgtestsupport import PGBIN, Server, advisory_locks, wait_for_waiter, wait_until  # noqa: E402

STATEMENT_TIMEOUT_MS = 60000
PG = Server.from_env(5427, "advlock_reliability", STATEMENT_TIMEOUT_MS)
HOST, PORT, DATABASE = PG.host, PG.port, PG.dbname
WORKDIR = os.environ.get("ADVLOCK_WORKDIR", "")
PGDATA = os.environ.get("ADVLOCK_PGDATA", "")
STANDBY_PORT = int(os.environ.get("ADVLOCK_STANDBY_PORT", "5428"))
FULL = os.environ.get("ADVLOCK_FULL", "") == "1"
# ADVLOCK_SMALL=1: the stresses at a quarter of their default sizes (the test command runs the SQL
# edition's on the majors other than the default so: the same PL/pgSQL, on each server).
SMALL = not FULL and os.environ.get("ADVLOCK_SMALL", "") == "1"

FIGURES = []  # lines shown at the end of the run (conftest.pytest_terminal_summary)


def figure(line):
    """Records a measured figure for the end-of-run summary (and prints it)."""
    FIGURES.append(line)
    print(line)


__all__ = ["figure", "FIGURES", "advlock_key", "HOST", "PORT", "DATABASE", "WORKDIR", "PGDATA", "PGBIN", "STANDBY_PORT",
           "FULL", "SMALL", "connect", "wait_until", "advisory_locks", "wait_for_waiter", "abrupt_close",
           "as_postgres", "Notices", "backend_alive"]


class Notice:
    """A copy of a notice's fields (psycopg's Diagnostic is only valid inside the handler)."""

    def __init__(self, diag):
        self.severity = diag.severity
        self.sqlstate = diag.sqlstate
        self.message_primary = diag.message_primary or ""
        self.message_detail = diag.message_detail
        self.message_hint = diag.message_hint

    def __repr__(self):
        return f"{self.severity}: {self.message_primary}"


class Notices(list):
    """Collects a connection's notices and warnings (as Notice copies)."""

    def __call__(self, diag):
        self.append(Notice(diag))

    def messages(self, severity=None):
        return [d.message_primary for d in self if severity is None or d.severity == severity]


def connect(app="advlock-reliability", statement_timeout=STATEMENT_TIMEOUT_MS, **kw) -> psycopg.Connection:
    """A psycopg 3 connection (dbname, user, port, host, autocommit...: None or absent for the
    suite's); `conn.notices` collects its notices and warnings."""
    conn = PG.connect(app, statement_timeout_ms=statement_timeout, **kw)
    conn.notices = Notices()
    conn.add_notice_handler(conn.notices)
    return conn


def backend_alive(admin, pid) -> bool:
    return admin.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = %s", (pid,)).fetchone()[0] > 0


def abrupt_close(conn):
    """Shuts the client's socket down under libpq's feet (FIN, no Terminate message), as a
    crashed client or a dropped network would; then discards the connection object."""
    fd = conn.pgconn.socket
    sock = socket.socket(fileno=os.dup(fd))
    try:
        sock.shutdown(socket.SHUT_RDWR)
    finally:
        sock.close()


def as_postgres(*cmd, check=True, timeout=120, **kw):
    """Runs a command as the postgres OS user (servers refuse to run as root)."""
    import pwd
    me = pwd.getpwuid(os.geteuid()).pw_name
    full = list(cmd) if me == "postgres" else ["sudo", "-u", "postgres", "--", *cmd]
    return subprocess.run(full, check=check, timeout=timeout, capture_output=True, text=True, **kw)
