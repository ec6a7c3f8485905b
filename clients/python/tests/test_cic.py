"""The migration scenario: pod 1 holds session_lock(dsn, "migrate") and builds an index with
CREATE INDEX CONCURRENTLY while pod 2 waits for the same lock. The client waits through CALL
advlock_wait_lock, holding no snapshot, so the index build does not wait for pod 2; beside it
the 0.4.0 way (the wait inside a SELECT) shows what the test catches: the build stalls for the
waiter's whole timeout. The SQL edition has no snapshot-free wait (the test says so and skips)."""

from __future__ import annotations

import threading
import time
from typing import Any

import psycopg
import pytest

import advlock
from conftest import DSN, connect, server_kind, wait_until

pytestmark = pytest.mark.skipif(
    server_kind() == "edition", reason="the SQL edition has no snapshot-free wait (CALL advlock_wait_lock)"
)


def waiter_state(admin: psycopg.Connection[Any], app: str) -> tuple[Any, ...] | None:
    """(backend_xmin is null, wait_event_type) of the waiting pod, once it waits."""
    row = admin.execute(
        "SELECT backend_xmin IS NULL, wait_event_type FROM pg_stat_activity"
        " WHERE application_name = %s AND state = 'active'",
        (app,),
    ).fetchone()
    return tuple(row) if row is not None and row[1] is not None else None


def run_cic(admin: psycopg.Connection[Any], wait_sql: str | None) -> tuple[float, list[object]]:
    """Pod 1 holds the lock and builds the index; pod 2 waits (through the client, or with
    wait_sql, the old way). Returns how long the index build took and what pod 2 got."""
    admin.execute("DROP TABLE IF EXISTS cic_target")
    admin.execute("CREATE TABLE cic_target AS SELECT g AS id FROM generate_series(1, 1000) g")
    got: list[object] = []

    def pod2() -> None:
        try:
            if wait_sql is None:
                with advlock.session_lock(DSN, "migrate", timeout=20.0, application_name="pod2") as held:
                    got.append(held.token)
            else:
                with connect("pod2") as c:
                    got.append(c.execute(wait_sql).fetchone())
                    c.execute("SELECT pg_advisory_unlock_all()")
        except Exception as e:
            got.append(e)

    with advlock.session_lock(DSN, "migrate", timeout=1.0, application_name="pod1") as held:
        t = threading.Thread(target=pod2)
        t.start()
        state = wait_until(lambda: waiter_state(admin, "pod2"), what="pod 2 to wait")
        got.append(state)
        with connect("pod1-migration") as migration:
            started = time.monotonic()
            migration.execute("CREATE INDEX CONCURRENTLY cic_target_id ON cic_target (id)")
            took = time.monotonic() - started
        assert held.holding()
    t.join(30)
    admin.execute("DROP TABLE cic_target")
    return took, got


def test_s20_waiting_pod_does_not_stall_create_index_concurrently(admin: psycopg.Connection[Any]) -> None:
    took, got = run_cic(admin, None)
    # While it waited, pod 2 held no snapshot (no xmin): CIC has nothing to wait for.
    assert got[0] == (True, "Lock")
    assert took < 5, f"CREATE INDEX CONCURRENTLY took {took:.1f} s"
    # Then pod 2 got the lock (a token), and nobody saw 40P01.
    assert len(got) == 2 and isinstance(got[1], int) and got[1] > 0, got


def test_s20_the_old_wait_inside_a_statement_stalls_it(admin: psycopg.Connection[Any]) -> None:
    """0.4.0's client waited in SELECT advlock_try_with_token(...): the build stalls until the
    waiter gives up (6 s here), which is what the test above would catch."""
    took, got = run_cic(admin, "SELECT advlock_try_with_token('migrate', '', 6000)")
    assert got[0] == (False, "Lock")  # a waiter with a snapshot
    assert took > 5, f"CREATE INDEX CONCURRENTLY took only {took:.1f} s"
    assert got[1] == (None,)  # and the waiter timed out


@pytest.mark.skipif(server_kind() != "preloaded", reason="leases need advlock preloaded (run_tests.sh's preloaded run)")
def test_s28_waiting_lease_does_not_stall_create_index_concurrently(admin: psycopg.Connection[Any]) -> None:
    """The same with leases: the waiter waits through CALL advlock_wait_lease, with no snapshot."""
    import psycopg_pool

    admin.execute("DROP TABLE IF EXISTS cic_target")
    admin.execute("CREATE TABLE cic_target AS SELECT g AS id FROM generate_series(1, 1000) g")
    got: list[object] = []
    kwargs = {"application_name": "lease-pod2"}
    with psycopg_pool.ConnectionPool(DSN, min_size=1, max_size=2) as p1, psycopg_pool.ConnectionPool(
        DSN, min_size=1, max_size=2, kwargs=kwargs
    ) as p2:

        def pod2() -> None:
            try:
                with advlock.lease(p2, "migrate", ttl=30, timeout=20) as lease:
                    got.append(lease.token)
            except Exception as e:
                got.append(e)

        with advlock.lease(p1, "migrate", ttl=30, timeout=1):
            t = threading.Thread(target=pod2)
            t.start()
            row = wait_until(
                lambda: admin.execute(
                    "SELECT backend_xmin IS NULL FROM pg_stat_activity WHERE application_name = 'lease-pod2'"
                    " AND state = 'active' AND query LIKE 'CALL %advlock_wait_lease%'"
                ).fetchone(),
                what="pod 2 to wait in CALL advlock_wait_lease",
            )
            assert row == (True,)
            with connect("pod1-migration") as migration:
                started = time.monotonic()
                migration.execute("CREATE INDEX CONCURRENTLY cic_target_id ON cic_target (id)")
                took = time.monotonic() - started
        t.join(30)
    admin.execute("DROP TABLE cic_target")
    assert took < 5, f"CREATE INDEX CONCURRENTLY took {took:.1f} s"
    assert len(got) == 1 and isinstance(got[0], int), got
