"""Shared fixtures: a real PostgreSQL with the advlock extension, named by ADVLOCK_PY_DSN
(set by clients/python/run_tests.sh). Every assertion about locks reads pg_locks."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

# The repository's one bounded poll (pg_test/polling.py), shared with the server's suites.
sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "pg_test"))
from polling import wait_until

__all__ = ["wait_until"]

DSN = os.environ.get("ADVLOCK_PY_DSN", "postgresql://postgres@127.0.0.1:5433/advlock_python")


def connect(app: str = "advlock-test", **kw: Any) -> psycopg.Connection[Any]:
    # statement_timeout guards the suite against a hang; advlock never relies on it.
    return psycopg.connect(DSN, autocommit=True, application_name=app, options="-c statement_timeout=20000", **kw)


def advisory_locks(admin: psycopg.Connection[Any], pid: int | None = None) -> list[tuple[Any, ...]]:
    """(pid, granted, mode, key) of every advisory lock entry in this database, optionally of one pid."""
    rows = admin.execute(
        "SELECT pid, granted, mode, (classid::int8 << 32) | objid::int8 FROM pg_locks"
        " WHERE locktype = 'advisory' AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
        " AND (%s::int IS NULL OR pid = %s::int) ORDER BY pid",
        (pid, pid),
    ).fetchall()
    return [tuple(r) for r in rows]


def waiting(admin: psycopg.Connection[Any], pid: int) -> bool:
    return any(not granted for p, granted, _, _ in advisory_locks(admin, pid))


@pytest.fixture
def dsn() -> str:
    return DSN


@pytest.fixture
def admin() -> Iterator[psycopg.Connection[Any]]:
    with connect("advlock-test-admin") as conn:
        yield conn


@pytest.fixture(autouse=True)
def _nothing_left(request: pytest.FixtureRequest) -> Iterator[None]:
    """Every test must leave no advisory lock behind (a leak would be a bug in the package)."""
    yield
    with connect("advlock-test-check") as conn:
        wait_until(lambda: not advisory_locks(conn), 5.0, what=f"{request.node.name} to leave no advisory lock")


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
