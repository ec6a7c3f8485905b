"""session_lock() through real PgBouncers: refused in transaction mode (where a session lock
would be shared with other clients: two holders at once), working in session mode, for the
blocking and both asyncio drivers. A lease, owned by its id, goes through either."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from typing import Any, Literal

import psycopg
import pytest

import advlock
from bouncer import pgbouncer
from conftest import DSN, advisory_locks, wait_until

Driver = Literal["psycopg", "asyncpg"]
KEY = advlock.key("migrate")


@pytest.fixture(scope="module")
def transaction_pooler() -> Iterator[str]:
    with pgbouncer(DSN, "transaction") as dsn:
        yield dsn


@pytest.fixture(scope="module")
def statement_pooler() -> Iterator[str]:
    with pgbouncer(DSN, "statement") as dsn:
        yield dsn


@pytest.fixture(scope="module")
def session_pooler() -> Iterator[str]:
    with pgbouncer(DSN, "session") as dsn:
        yield dsn


def enter(dsn: str, driver: Driver | Literal["sync"], timeout: float = 1.0) -> int:
    """Take and release session_lock(dsn, "migrate") with the driver; the backend that held it."""
    if driver == "sync":
        with advlock.session_lock(dsn, "migrate", timeout=timeout) as held:
            assert held.holding()
            return held.pid

    async def main() -> int:
        async with advlock.session_lock(dsn, "migrate", timeout=timeout, driver=driver) as held:
            assert await held.holding()
            return held.pid

    return asyncio.run(main())


@pytest.mark.parametrize("driver", ["sync", "psycopg", "asyncpg"])
@pytest.mark.parametrize("mode", ["transaction", "statement"])
def test_s17_transaction_and_statement_poolers_are_refused(
    driver: Driver | Literal["sync"], mode: str, request: pytest.FixtureRequest, admin: psycopg.Connection[Any]
) -> None:
    dsn = request.getfixturevalue(f"{mode}_pooler")
    with pytest.raises(advlock.UnsafePooler, match=r"transaction or statement mode.*a pooler in session mode"):
        enter(dsn, driver)
    assert advisory_locks(admin) == []


def test_s17_two_holders_never_at_once_through_a_transaction_pooler(
    transaction_pooler: str, admin: psycopg.Connection[Any]
) -> None:
    """The bug of 0.4.0's client: two threads both entered the block. Now, with threads racing
    through the pooler, no two are ever inside at once; the pooler is refused (whoever is not
    refused got the lock on the server, alone) and nothing is left locked."""
    inside = 0
    most_inside = 0
    outcomes: list[str] = []
    guard = threading.Lock()
    barrier = threading.Barrier(4)

    def worker() -> None:
        nonlocal inside, most_inside
        barrier.wait()
        for _ in range(3):
            try:
                with advlock.session_lock(transaction_pooler, "migrate", timeout=2.0) as held:
                    with guard:
                        inside += 1
                        most_inside = max(most_inside, inside)
                    time.sleep(0.02)
                    with guard:
                        inside -= 1
                outcomes.append(f"held by {held.pid}")
            except advlock.UnsafePooler:
                outcomes.append("refused")
            except advlock.LockLost as e:
                assert isinstance(e.__cause__, advlock.UnsafePooler), e
                outcomes.append("lost")

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert len(outcomes) == 12 and most_inside <= 1, outcomes
    assert "refused" in outcomes, outcomes
    wait_until(lambda: advisory_locks(admin) == [], what="no advisory lock left behind")


@pytest.mark.parametrize("driver", ["sync", "psycopg", "asyncpg"])
def test_s18_session_pooler_works_and_reports_the_server_backend(
    driver: Driver | Literal["sync"], session_pooler: str, admin: psycopg.Connection[Any]
) -> None:
    seen: list[list[tuple[Any, ...]]] = []

    async def main() -> int:
        async with advlock.session_lock(session_pooler, "migrate", timeout=1.0, driver=driver) as held:  # type: ignore[arg-type]
            seen.append(advisory_locks(admin, held.pid))
            return held.pid

    if driver == "sync":
        with advlock.session_lock(session_pooler, "migrate", timeout=1.0) as held:
            seen.append(advisory_locks(admin, held.pid))
            pid = held.pid
    else:
        pid = asyncio.run(main())
    # held.pid is the server backend (pg_backend_pid()), not the pooler's made-up pid.
    assert seen == [[(pid, True, "ExclusiveLock", KEY)]]
    assert advisory_locks(admin) == []


def test_s18_session_pooler_keeps_mutual_exclusion(session_pooler: str, admin: psycopg.Connection[Any]) -> None:
    with advlock.session_lock(session_pooler, "migrate", timeout=1.0, application_name="first") as first:
        with pytest.raises(advlock.LockTimeout, match=r"within 300 ms: held by PID \d+") as info:
            with advlock.session_lock(session_pooler, "migrate", timeout=0.3):
                raise AssertionError("two holders at once")
        assert info.value.pid == first.pid
    wait_until(lambda: advisory_locks(admin) == [], what="the lock to be released")
