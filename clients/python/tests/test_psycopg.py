"""psycopg 3 (sync): the seeds' scenarios through advlock.lock / try_lock / lock_all."""

from __future__ import annotations

import gc
import threading
import time
from typing import Any

import psycopg
import pytest

import advlock
from conftest import DSN, advisory_locks, connect, wait_until, waiting

KEY42 = advlock.key("account", 42)


def test_s03_lock_is_held_until_commit_and_released_after(admin: psycopg.Connection[Any]) -> None:
    with connect() as conn:
        pid = conn.info.backend_pid
        with conn.transaction():
            with advlock.lock(conn, "account", 42, timeout=2.0) as held:
                assert held.keys == (KEY42,)
                assert advisory_locks(admin, pid) == [(pid, True, "ExclusiveLock", KEY42)]
            # Leaving the block releases nothing: PostgreSQL ends xact locks at COMMIT.
            assert advisory_locks(admin, pid) == [(pid, True, "ExclusiveLock", KEY42)]
        assert advisory_locks(admin, pid) == []


def test_s03_shared_mode(admin: psycopg.Connection[Any]) -> None:
    with connect() as a, connect() as b, a.transaction(), b.transaction():
        with (
            advlock.lock(a, "report", "q3", timeout=1, shared=True),
            advlock.lock(b, "report", "q3", timeout=1, shared=True),
        ):
            assert (
                sorted(r[1:] for r in advisory_locks(admin)) == [(True, "ShareLock", advlock.key("report", "q3"))] * 2
            )
            with connect() as c, c.transaction():
                assert advlock.try_lock(c, "report", "q3") is False  # exclusive conflicts with shared


def test_s06_s07_two_workers_race_for_account_42(admin: psycopg.Connection[Any]) -> None:
    """Both start together; exactly one gets the lock, the other gets False (try_lock) and,
    with lock(), a LockTimeout naming the winner."""
    barrier = threading.Barrier(2)
    release = threading.Event()
    results: dict[str, Any] = {}

    def worker(name: str) -> None:
        with connect(name) as conn, conn.transaction():
            barrier.wait()
            got = advlock.try_lock(conn, "account", 42)
            results[name] = (got, conn.info.backend_pid)
            if got:
                release.wait(10)

    threads = [threading.Thread(target=worker, args=(f"worker-{i}",)) for i in (1, 2)]
    for t in threads:
        t.start()
    wait_until(lambda: len(results) == 2, what="both workers to try")
    winners = [name for name, (got, _) in results.items() if got]
    assert len(winners) == 1, results
    winner_pid = results[winners[0]][1]
    assert advisory_locks(admin) == [(winner_pid, True, "ExclusiveLock", KEY42)]
    # A third worker that waits instead is told who holds it, by the server's DETAIL.
    with connect("worker-3") as conn, conn.transaction():
        with pytest.raises(advlock.LockTimeout) as info, advlock.lock(conn, "account", 42, timeout=0.1):
            pass
    assert info.value.pid == winner_pid
    assert info.value.application_name == winners[0]
    assert info.value.holders[0].state == "idle in transaction"
    release.set()
    for t in threads:
        t.join()


def test_s05_bounded_wait_of_200_ms_leaves_lock_timeout_unchanged(admin: psycopg.Connection[Any]) -> None:
    with connect("holder") as holder, connect("waiter") as conn:
        holder.execute("SET lock_timeout = '7s'")
        conn.execute("SET lock_timeout = '3s'")
        with holder.transaction():
            assert advlock.try_lock(holder, "account", 42)
            with conn.transaction():
                start = time.monotonic()
                with (
                    pytest.raises(advlock.LockTimeout, match="within 200 ms"),
                    advlock.lock(conn, "account", 42, timeout=0.2),
                ):
                    pass
                elapsed = time.monotonic() - start
                # The server waited (≈200 ms), not the client: generous upper bound on a busy machine.
                assert 0.19 <= elapsed < 5.0, elapsed
        # Nothing queued or held by the waiter, and its setting is what it was.
        assert advisory_locks(admin, conn.info.backend_pid) == []
        assert conn.execute("SHOW lock_timeout").fetchone() == ("3s",)
        assert holder.execute("SHOW lock_timeout").fetchone() == ("7s",)


def test_s04_lock_outside_a_transaction_names_the_fix(admin: psycopg.Connection[Any]) -> None:
    with connect() as conn:
        with pytest.raises(advlock.NotInTransaction, match=r"use `with conn\.transaction\(\):`"):
            with advlock.lock(conn, "account", 42, timeout=1):
                pass
        with pytest.raises(advlock.NotInTransaction):
            advlock.try_lock(conn, "account", 42)
        assert advisory_locks(admin, conn.info.backend_pid) == []


def test_s03_non_autocommit_connection_is_in_a_transaction(admin: psycopg.Connection[Any]) -> None:
    # psycopg without autocommit opens the transaction with the first statement: the lock
    # then lasts until conn.commit(), which is what a transaction-scope lock means.
    with psycopg.connect(DSN, autocommit=False) as conn:
        assert advlock.try_lock(conn, "account", 42)
        assert advisory_locks(admin, conn.info.backend_pid) == [(conn.info.backend_pid, True, "ExclusiveLock", KEY42)]
        conn.commit()
        assert advisory_locks(admin, conn.info.backend_pid) == []


def test_s04_aborted_transaction_is_reported(admin: psycopg.Connection[Any]) -> None:
    with connect() as conn:
        with pytest.raises(advlock.NotInTransaction, match="aborted"), conn.transaction():
            with pytest.raises(psycopg.errors.DivisionByZero):
                conn.execute("SELECT 1/0")
            advlock.try_lock(conn, "account", 42)


def test_s08_lock_all_takes_every_key_or_none(admin: psycopg.Connection[Any]) -> None:
    with connect("a") as a, connect("b") as b:
        with a.transaction(), advlock.lock_all(a, "account", [42, 17], timeout=1.0) as held:
            assert set(held.keys) == {advlock.key("account", 42), advlock.key("account", 17)}
            assert {r[3] for r in advisory_locks(admin, a.info.backend_pid)} == set(held.keys)
            with b.transaction():
                with pytest.raises(advlock.LockTimeout) as info, advlock.lock_all(b, "account", [99, 17], timeout=0.1):
                    pass
                assert info.value.pid == a.info.backend_pid
            # b gave back key 99 it had taken: all or nothing.
            assert advisory_locks(admin, b.info.backend_pid) == []


def test_s09_holders(admin: psycopg.Connection[Any]) -> None:
    with connect("holder") as conn, connect("waiter") as waiter:
        t = threading.Thread(target=lambda: _wait_briefly(waiter))
        with conn.transaction():
            assert advlock.try_lock(conn, "account", 42)
            t.start()
            wait_until(lambda: waiting(admin, waiter.info.backend_pid), what="the waiter to queue")
            rows = advlock.holders(admin, "account", 42)
            assert [(r.pid, r.granted, r.mode, r.key) for r in rows] == [
                (conn.info.backend_pid, True, "exclusive", KEY42),
                (waiter.info.backend_pid, False, "exclusive", KEY42),
            ]
            assert rows[0].application_name == "holder" and rows[1].blocked_by == [conn.info.backend_pid]
            assert advlock.holders(admin, "account", 43) == []
            assert len(advlock.holders(admin)) == 2
        t.join()  # the waiter got it at our COMMIT


def _wait_briefly(conn: psycopg.Connection[Any]) -> None:
    with conn.transaction(), advlock.lock(conn, "account", 42, timeout=10):
        pass


def test_lock_without_with_warns_that_nothing_was_taken(admin: psycopg.Connection[Any]) -> None:
    with connect() as conn, conn.transaction():
        with pytest.warns(RuntimeWarning, match="never entered, so no lock was taken"):
            advlock.lock(conn, "account", 42, timeout=1)  # the trap: no `with`
            gc.collect()
        assert advisory_locks(admin, conn.info.backend_pid) == []
