"""The client suite's helpers: its instance (pg_test/pgtestsupport.py's Server), psycopg and
asyncpg connections with a statement_timeout guard, keys private to a test.

The instance is described by ADVLOCK_PGHOST / ADVLOCK_PGPORT / ADVLOCK_PGDATABASE (set by
pg_test/run.sh). Every connection carries an application_name so holders are identifiable.
"""
import sys
from pathlib import Path

import asyncpg
import psycopg

# The published pure-Python key reference (docs/keys/advlock_key.py), imported as users do.
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "docs" / "keys"))
from advlock_key import advlock_key  # noqa: E402
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
# The suites' shared helpers, re-exported for the tests of this suite and of pg_test/leases.
from pgtestsupport import Server, wait_for_waiter, wait_until, waiting_pids  # noqa: E402,F401

# Every direct connection gets this statement_timeout so a bug cannot hang the suite.
STATEMENT_TIMEOUT_MS = 20000
PG = Server.from_env(5422, "advlock_clients", STATEMENT_TIMEOUT_MS)
HOST, PORT, DATABASE, USER = PG.host, PG.port, PG.dbname, PG.user


def conninfo(app: str, port: int = PORT, host: str = HOST, dbname: str = DATABASE, **extra) -> str:
    return PG.conninfo(app, port=port, host=host, dbname=dbname, **extra)


def psy(app: str, autocommit: bool = True, **kw) -> psycopg.Connection:
    """A direct psycopg 3 connection with a statement_timeout guard."""
    return PG.connect(app, autocommit=autocommit, **kw)


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


def holders_of(admin: psycopg.Connection, key: int) -> list:
    """advlock_holders rows for one key, as dicts."""
    cur = admin.cursor(row_factory=psycopg.rows.dict_row)
    return cur.execute("SELECT * FROM advlock_holders WHERE key = %s ORDER BY pid", (key,)).fetchall()


def key_for(name: str) -> int:
    """A key private to one test, computed client side (the same as advlock_key('advlock-test', name))."""
    return advlock_key("advlock-test", name)
