"""Shared fixtures: a real PostgreSQL with the advlock extension, named by ADVLOCK_PY_DSN
(set by clients/python/run_tests.sh). Every assertion about locks reads pg_locks."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import psycopg
import pytest

# The repository's one test-support module (pg_test/pgtestsupport.py), shared with the server's
# suites: the instance, the admin connection, the leftover-lock check, pg_locks, wait_until.
sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "pg_test"))
from pgtestsupport import AdvisoryLock, Server, advisory_locks, wait_until

__all__ = ["AdvisoryLock", "advisory_locks", "wait_until"]

DSN = os.environ.get("ADVLOCK_PY_DSN", "postgresql://postgres@127.0.0.1:5433/advlock_python")
# statement_timeout guards the suite against a hang; advlock never relies on it.
PG = Server(DSN, statement_timeout_ms=20000)


def connect(app: str = "advlock-test", **kw: Any) -> psycopg.Connection[Any]:
    return PG.connect(app, **kw)


def waiting(admin: psycopg.Connection[Any], pid: int) -> bool:
    return any(not row.granted for row in advisory_locks(admin, pid))


@pytest.fixture
def dsn() -> str:
    return DSN


admin = PG.admin_fixture("advlock-test-admin")
# Every test must leave no advisory lock behind (a leak would be a bug in the package).
_nothing_left = PG.no_advisory_locks_left_fixture("advlock-test-check", timeout=5.0, interval=0.01)


def server_kind() -> str:
    """'preloaded' (leases work), 'extension' (advlock installed, not preloaded: leases raise
    55000) or 'edition' (the SQL edition: no leases at all), read from the server once."""
    global _KIND
    if _KIND is None:
        with connect("advlock-test-kind") as conn:
            row = conn.execute(
                "SELECT EXISTS (SELECT FROM pg_extension WHERE extname = 'advlock'),"
                " 'advlock' = ANY (string_to_array(replace(current_setting('shared_preload_libraries'), ' ', ''), ','))"
            ).fetchone()
        assert row is not None
        _KIND = ("preloaded" if row[1] else "extension") if row[0] else "edition"
    return _KIND


_KIND: str | None = None

LEASES_SKIP_REASON = {
    "extension": "leases need advlock in shared_preload_libraries; this server has the extension without it"
    " (run_tests.sh runs them on its preloaded instance)",
    "edition": "the SQL edition has no leases (they live in advlock's shared memory)",
}


def needs_leases() -> pytest.MarkDecorator:
    kind = server_kind()
    return pytest.mark.skipif(kind != "preloaded", reason=LEASES_SKIP_REASON.get(kind, ""))


def lease_rows(admin: psycopg.Connection[Any]) -> list[tuple[Any, ...]]:
    """(lease, granted, pid) of every row of advlock_leases (held and waiting)."""
    return [tuple(r) for r in admin.execute("SELECT lease, granted, pid FROM advlock_leases ORDER BY lease").fetchall()]
