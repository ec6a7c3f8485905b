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
from pgtestsupport import pgbouncer

import advlock
from conftest import PG, AdvisoryLock, advisory_locks, wait_until

# Each pooler's [pgbouncer] settings beyond pgtestsupport.pgbouncer's (a pool of 2 is passed
# with the mode). Session mode keeps PgBouncer's default server_reset_query (DISCARD ALL), as a
# deployment would.
POOLER_SETTINGS = {"min_pool_size": 0, "ignore_startup_parameters": "extra_float_digits,options"}

Driver = Literal["psycopg", "asyncpg"]
KEY = advlock.key("migrate")


@pytest.fixture(scope="module")
def transaction_pooler() -> Iterator[str]:
    with pgbouncer(PG, "transaction", 2, settings=POOLER_SETTINGS, prefix="advlock-pgbouncer-transaction.") as bouncer:
        yield bouncer.url


@pytest.fixture(scope="module")
def statement_pooler() -> Iterator[str]:
    with pgbouncer(PG, "statement", 2, settings=POOLER_SETTINGS, prefix="advlock-pgbouncer-statement.") as bouncer:
        yield bouncer.url


@pytest.fixture(scope="module")
def session_pooler() -> Iterator[str]:
    with pgbouncer(PG, "session", 2, settings=POOLER_SETTINGS, prefix="advlock-pgbouncer-session.") as bouncer:
        yield bouncer.url


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


def race(dsn: str, rounds: int, timeout: float, hold: float, check_holding: bool) -> tuple[list[str], int]:
    """Four threads released together, each taking session_lock(dsn, "migrate") `rounds` times
    and staying inside `hold` seconds: each round's outcome ("held", "refused" for UnsafePooler,
    or the repr of any other error) and the most threads ever inside at once. With
    `check_holding`, every holder asks holding() first ("held" only when it said True)."""
    inside = 0
    most_inside = 0
    outcomes: list[str] = []
    guard = threading.Lock()
    barrier = threading.Barrier(4)

    def worker() -> None:
        nonlocal inside, most_inside
        barrier.wait()
        for _ in range(rounds):
            try:
                with advlock.session_lock(dsn, "migrate", timeout=timeout) as held:
                    holding = held.holding() if check_holding else True
                    with guard:
                        inside += 1
                        most_inside = max(most_inside, inside)
                    time.sleep(hold)
                    with guard:
                        inside -= 1
                outcomes.append("held" if holding else "held, but holding() said False")
            except advlock.UnsafePooler:
                outcomes.append("refused")
            except Exception as e:  # recorded, and asserted on by the caller
                outcomes.append(repr(e))

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    return outcomes, most_inside


def test_s17_two_holders_never_at_once_through_a_transaction_pooler(
    transaction_pooler: str, admin: psycopg.Connection[Any]
) -> None:
    """The bug of 0.4.0's client: two threads both entered the block. Now, with threads racing
    through the pooler, no two are ever inside at once; the pooler is refused (whoever is not
    refused got the lock on the server, alone) and nothing is left locked."""
    outcomes, most_inside = race(transaction_pooler, rounds=3, timeout=2.0, hold=0.02, check_holding=False)
    assert len(outcomes) == 12 and set(outcomes) <= {"held", "refused"} and most_inside <= 1, outcomes
    assert "refused" in outcomes, outcomes
    wait_until(lambda: advisory_locks(admin) == [], what="no advisory lock left behind")


def test_s35_a_probe_that_misses_the_pooler_strands_no_lock(
    transaction_pooler: str, admin: psycopg.Connection[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """No probe is conclusive (a busy pool hands it another backend). Here the probe never
    answers, as when the pool is exhausted, so nothing refuses up front: threads take the lock
    through a transaction pooler, wait for it and release it. The lock lives in the block that
    pins the server session (whichever backend the block reached), so every round gets it, none
    is ever inside with another, none loses its lock, and none is stranded on a server session
    the pool hands to the next client (0.5.0's first client left it there when a statement
    landed on another backend: every later session_lock timed out on a lock held by an idle
    server connection)."""
    import advlock._session

    monkeypatch.setattr(advlock._session, "_probe_pid", lambda *args: None)
    outcomes, most_inside = race(transaction_pooler, rounds=5, timeout=5.0, hold=0.01, check_holding=True)
    # Every round held: the block's backend never holds another client's lock (a pinned lock
    # keeps its server session out of the pool), so nothing refuses, and none is lost.
    assert outcomes == ["held"] * 20 and most_inside == 1, outcomes
    wait_until(lambda: advisory_locks(admin) == [], 5.0, what="no advisory lock stranded on a pooled server session")


@pytest.mark.parametrize("driver", ["sync", "psycopg", "asyncpg"])
def test_s18_session_pooler_works_and_reports_the_server_backend(
    driver: Driver | Literal["sync"], session_pooler: str, admin: psycopg.Connection[Any]
) -> None:
    seen: list[list[AdvisoryLock]] = []

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
