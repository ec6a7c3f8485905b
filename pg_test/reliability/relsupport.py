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
from polling import wait_until  # noqa: E402,F401  (the suites' one wait_until, re-exported)

HOST = os.environ.get("ADVLOCK_PGHOST", "127.0.0.1")
PORT = int(os.environ.get("ADVLOCK_PGPORT", os.environ.get("ADVLOCK_TEST_PORT", "5427")))
DATABASE = os.environ.get("ADVLOCK_PGDATABASE", "advlock_reliability")
WORKDIR = os.environ.get("ADVLOCK_WORKDIR", "")
PGDATA = os.environ.get("ADVLOCK_PGDATA", "")
PGBIN = os.environ.get("PGBIN", "/usr/lib/postgresql/17/bin")
STANDBY_PORT = int(os.environ.get("ADVLOCK_STANDBY_PORT", "5428"))
FULL = os.environ.get("ADVLOCK_FULL", "") == "1"

STATEMENT_TIMEOUT_MS = 60000

FIGURES = []  # lines shown at the end of the run (conftest.pytest_terminal_summary)


def figure(line):
    """Records a measured figure for the end-of-run summary (and prints it)."""
    FIGURES.append(line)
    print(line)


__all__ = ["figure", "FIGURES", "advlock_key", "HOST", "PORT", "DATABASE", "WORKDIR", "PGDATA", "PGBIN", "STANDBY_PORT",
           "FULL", "connect", "wait_until", "advisory_rows", "wait_for_waiter", "abrupt_close",
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


def connect(app="advlock-reliability", dbname=None, user="postgres", port=None, host=None,
            autocommit=True, statement_timeout=STATEMENT_TIMEOUT_MS, **kw) -> psycopg.Connection:
    """A psycopg 3 connection; `conn.notices` collects its notices and warnings."""
    options = f"-c statement_timeout={statement_timeout}" if statement_timeout else None
    params = dict(host=host or HOST, port=port or PORT, dbname=dbname or DATABASE, user=user,
                  application_name=app, connect_timeout=10)
    if options:
        params["options"] = options
    params.update(kw)
    conn = psycopg.connect(autocommit=autocommit, **params)
    conn.notices = Notices()
    conn.add_notice_handler(conn.notices)
    return conn




def advisory_rows(admin, pid=None, key=None):
    """pg_locks advisory rows (pid, key, mode, granted) in this database, optionally filtered."""
    rows = admin.execute(
        """SELECT pid, (classid::int8 << 32) | objid::int8 AS key, mode, granted
             FROM pg_locks
            WHERE locktype = 'advisory'
              AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
            ORDER BY pid, key, mode""").fetchall()
    return [r for r in rows if (pid is None or r[0] == pid) and (key is None or r[1] == key)]


def wait_for_waiter(admin, pid, key, timeout=10.0):
    """Returns once backend `pid` waits (granted = false) for advisory lock `key`."""
    wait_until(lambda: any(not r[3] for r in advisory_rows(admin, pid, key)), timeout,
               what=f"PID {pid} to wait for advisory lock {key}")


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
