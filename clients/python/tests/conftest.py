"""Shared fixtures: a real PostgreSQL with the advlock extension, named by ADVLOCK_PY_DSN
(set by clients/python/run_tests.sh). Every assertion about locks reads pg_locks."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import psycopg
import pytest

DSN = os.environ.get("ADVLOCK_PY_DSN", "postgresql://postgres@127.0.0.1:5433/advlock_python")
T = TypeVar("T")


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


def wait_until(predicate: Callable[[], T], timeout: float = 10.0, what: str = "condition") -> T:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.01)


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
        wait_until(lambda: not advisory_locks(conn), 5.0, f"{request.node.name} to leave no advisory lock")
