"""Shared helpers for the client suite: connection settings, bounded polling, keys.

The instance is described by ADVLOCK_PGHOST / ADVLOCK_PGPORT / ADVLOCK_PGDATABASE (set by
pg_test/run.sh). Every connection carries an application_name so holders are identifiable.
"""
import os
import sys
from pathlib import Path

import asyncpg
import psycopg

# The published pure-Python key reference (docs/keys/advlock_key.py), imported as users do.
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "docs" / "keys"))
from advlock_key import advlock_key  # noqa: E402
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from polling import wait_until  # noqa: E402,F401  (the suites' one wait_until, re-exported)

HOST = os.environ.get("ADVLOCK_PGHOST", "127.0.0.1")
PORT = int(os.environ.get("ADVLOCK_PGPORT", os.environ.get("ADVLOCK_TEST_PORT", "5422")))
DATABASE = os.environ.get("ADVLOCK_PGDATABASE", "advlock_clients")
USER = "postgres"

# Every direct connection gets this statement_timeout so a bug cannot hang the suite.
STATEMENT_TIMEOUT_MS = 20000


def conninfo(app: str, port: int = PORT, host: str = HOST, dbname: str = DATABASE, **extra) -> str:
    parts = {"host": host, "port": port, "dbname": dbname, "user": USER,
             "application_name": app, "connect_timeout": 10, **extra}
    return psycopg.conninfo.make_conninfo(**parts)


def psy(app: str, autocommit: bool = True, **kw) -> psycopg.Connection:
    """A direct psycopg 3 connection with a statement_timeout guard."""
    return psycopg.connect(
        conninfo(app, options=f"-c statement_timeout={STATEMENT_TIMEOUT_MS}"),
        autocommit=autocommit, **kw)


async def apg(app: str, **kw) -> asyncpg.Connection:
    """A direct asyncpg connection with a statement_timeout guard."""
    settings = {"application_name": app, "statement_timeout": str(STATEMENT_TIMEOUT_MS)}
    settings.update(kw.pop("server_settings", {}))
    return await asyncpg.connect(host=HOST, port=PORT, user=USER, database=DATABASE,
                                 server_settings=settings, timeout=10, **kw)


def apg_pool_kwargs(app: str) -> dict:
    return dict(host=HOST, port=PORT, user=USER, database=DATABASE, timeout=10,
                server_settings={"application_name": app,
                                 "statement_timeout": str(STATEMENT_TIMEOUT_MS)})




def waiting_pids(admin: psycopg.Connection) -> set:
    """Backends waiting (granted = false) for an advisory lock in this database."""
    rows = admin.execute(
        "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
        " AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
    ).fetchall()
    return {r[0] for r in rows}


def wait_for_waiter(admin: psycopg.Connection, pid: int, timeout: float = 5.0):
    """Returns once backend `pid` waits in the lock queue for an advisory lock."""
    wait_until(lambda: pid in waiting_pids(admin), timeout, what=f"PID {pid} to wait for an advisory lock")


def holders_of(admin: psycopg.Connection, key: int) -> list:
    """advlock_holders rows for one key, as dicts."""
    cur = admin.cursor(row_factory=psycopg.rows.dict_row)
    return cur.execute("SELECT * FROM advlock_holders WHERE key = %s ORDER BY pid", (key,)).fetchall()


def key_for(name: str) -> int:
    """A key private to one test, computed client side (the same as advlock_key('advlock-test', name))."""
    return advlock_key("advlock-test", name)
