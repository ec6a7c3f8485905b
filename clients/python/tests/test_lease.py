"""Leases through pools (psycopg_pool, asyncpg, SQLAlchemy engines): taken, renewed on several
pooled backends, released on exit; lost (released by someone else, or expired while renewals
were blocked) sets `lost` and cancels an asyncio body; the next holder's fenced write wins;
timeouts, cancelled waits and bad arguments. Needs advlock in shared_preload_libraries:
run_tests.sh runs this file on its preloaded instance (skipped elsewhere, with the reason)."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Iterator
from typing import Any

import asyncpg
import psycopg
import psycopg_pool
import pytest
from sqlalchemy import create_engine, make_url
from sqlalchemy.ext.asyncio import create_async_engine

import advlock
from conftest import DSN, connect, lease_rows, needs_leases, server_kind, wait_until

leases = needs_leases()


@pytest.fixture(autouse=True)
def _no_lease_left(request: pytest.FixtureRequest) -> Iterator[None]:
    """Every lease test must leave no lease and no waiter behind."""
    yield
    if server_kind() == "preloaded":
        with connect("advlock-test-check") as conn:
            wait_until(lambda: not lease_rows(conn), 5.0, what=f"{request.node.name} to leave no row in advlock_leases")


def pool(size: int = 2, app: str = "lease-pool") -> psycopg_pool.ConnectionPool[Any]:
    p: psycopg_pool.ConnectionPool[Any] = psycopg_pool.ConnectionPool(
        DSN, min_size=size, max_size=size, kwargs={"autocommit": True, "application_name": app}, open=True
    )
    p.wait()
    return p


async def apool(size: int = 2, app: str = "lease-pool") -> psycopg_pool.AsyncConnectionPool[Any]:
    p: psycopg_pool.AsyncConnectionPool[Any] = psycopg_pool.AsyncConnectionPool(
        DSN, min_size=size, max_size=size, kwargs={"autocommit": True, "application_name": app}, open=False
    )
    await p.open(wait=True)
    return p


async def asyncpg_pool(size: int = 2, app: str = "lease-pool") -> asyncpg.Pool:
    return await asyncpg.create_pool(DSN, min_size=size, max_size=size, server_settings={"application_name": app})


def row_of(admin: psycopg.Connection[Any], token: int) -> tuple[Any, ...] | None:
    rows = [r for r in lease_rows(admin) if r[0] == token]
    return rows[0] if rows else None


def renewed_by(admin: psycopg.Connection[Any], token: int, since: float) -> int:
    """The pid of advlock_leases for `token` once a renewal newer than `since` (epoch seconds) shows."""

    def fresh() -> int:
        row = admin.execute(
            "SELECT pid FROM advlock_leases WHERE lease = %s AND renewed_at > to_timestamp(%s)", (token, since)
        ).fetchone()
        return int(row[0]) if row else 0

    return wait_until(fresh, 5.0, what="a renewal")


# ---- take, renew on two backends, release -------------------------------------------------


@leases
def test_s21_psycopg_pool_renews_on_two_backends_and_releases(admin: psycopg.Connection[Any]) -> None:
    """Pool of 2: while the test holds one connection the renewals must use the other; then it
    holds that other one, and the renewals must move to the first: two backends renewed."""
    with pool(2) as p:
        with advlock.lease(p, "report", "daily", ttl=0.6, timeout=1.0) as lease:
            assert lease.token > 0 and lease.lost is None
            row = row_of(admin, lease.token)
            assert row is not None and row[1] is True  # granted
            x = p.getconn()
            first = renewed_by(admin, lease.token, time.time())
            assert first != x.info.backend_pid
            y = p.getconn()  # the only other connection: the one that just renewed
            assert y.info.backend_pid == first
            p.putconn(x)
            second = renewed_by(admin, lease.token, time.time())
            assert second == x.info.backend_pid != first
            p.putconn(y)
            lease.check()
        assert lease.lost is None and lease.renewals >= 2
        assert row_of(admin, lease.token) is None  # released on exit, renewals stopped


@leases
def test_s21_asyncpg_pool_renews_on_two_backends_and_releases(admin: psycopg.Connection[Any]) -> None:
    async def main() -> None:
        p = await asyncpg_pool(2)
        async with advlock.lease(p, "report", "daily", ttl=0.6, timeout=1.0) as lease:
            x = await p.acquire()
            x_pid = x.get_server_pid()
            first = await asyncio.to_thread(renewed_by, admin, lease.token, time.time())
            assert first != x_pid
            y = await p.acquire()
            assert y.get_server_pid() == first
            await p.release(x)
            second = await asyncio.to_thread(renewed_by, admin, lease.token, time.time())
            assert second == x_pid != first
            await p.release(y)
        assert lease.lost is None and lease.renewals >= 2
        assert row_of(admin, lease.token) is None
        await p.close()

    asyncio.run(main())


@leases
def test_s21_s30_sqlalchemy_engines_and_a_psycopg_connection(admin: psycopg.Connection[Any]) -> None:
    engine = create_engine(make_url(DSN).set(drivername="postgresql+psycopg"), pool_size=2)
    with advlock.lease(engine, "report", "sa", ttl=0.6, timeout=1.0) as lease:
        wait_until(lambda: lease.renewals >= 2, 5.0, what="two renewals")
        assert row_of(admin, lease.token) is not None
    assert row_of(admin, lease.token) is None
    engine.dispose()
    # One psycopg connection: psycopg serializes the renewals with the body's statements.
    with connect("one-conn") as conn, advlock.lease(conn, "report", "one", ttl=0.6, timeout=1.0) as lease:
        for _ in range(40):
            conn.execute("SELECT pg_sleep(0.01)")
        assert lease.renewals >= 1 and lease.lost is None

    async def main() -> None:
        aengine = create_async_engine(make_url(DSN).set(drivername="postgresql+asyncpg"))
        async with advlock.lease(aengine, "report", "sa", ttl=0.6, timeout=1.0) as lease:
            await asyncio.to_thread(wait_until, lambda: lease.renewals >= 2, 5.0, what="two renewals")
        assert row_of(admin, lease.token) is None
        await aengine.dispose()

    asyncio.run(main())


@leases
def test_s22_release_on_exit_whatever_happens(admin: psycopg.Connection[Any]) -> None:
    with pool(1) as p:
        with pytest.raises(ZeroDivisionError), advlock.lease(p, "report", "boom", ttl=5.0, timeout=1.0) as lease:
            assert row_of(admin, lease.token) is not None
            _ = 1 / 0
        assert row_of(admin, lease.token) is None

    async def main() -> None:
        p = await asyncpg_pool(1)
        with pytest.raises(KeyError):
            async with advlock.lease(p, "report", "boom", ttl=5.0, timeout=1.0) as lease:
                raise KeyError("body")
        assert row_of(admin, lease.token) is None
        # An outer cancellation of the body releases too.
        entered = asyncio.Event()

        async def body() -> None:
            async with advlock.lease(p, "report", "boom", ttl=5.0, timeout=1.0):
                entered.set()
                await asyncio.sleep(30)

        task = asyncio.create_task(body())
        await entered.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert lease_rows(admin) == []
        await p.close()

    asyncio.run(main())


# ---- lost leases ---------------------------------------------------------------------------


def release_all(admin: psycopg.Connection[Any]) -> None:
    """Another session ends every lease, as an operator would."""
    admin.execute("SELECT advlock_lease_release(lease) FROM advlock_leases WHERE granted")


@leases
def test_s23_lease_released_by_someone_else_cancels_the_async_body(admin: psycopg.Connection[Any]) -> None:
    async def main() -> None:
        p = await asyncpg_pool(2)
        reached_end = False
        started = time.monotonic()
        with pytest.raises(advlock.LeaseLost, match="returned false") as info:
            async with advlock.lease(p, "report", "daily", ttl=0.3, timeout=1.0) as lease:
                await asyncio.to_thread(release_all, admin)
                await asyncio.sleep(30)  # cancelled by the next renewal (within ~0.1 s)
                reached_end = True
        assert not reached_end and time.monotonic() - started < 5
        assert isinstance(info.value, advlock.LockLost)
        assert isinstance(info.value.__cause__, asyncio.CancelledError)
        assert lease.lost is not None
        with pytest.raises(advlock.LeaseLost):
            lease.check()
        # The task is not left "cancelling": later awaits in it work normally.
        task = asyncio.current_task()
        assert task is not None and task.cancelling() == 0
        await asyncio.sleep(0.01)
        await p.close()

    asyncio.run(main())


@leases
def test_s23_a_body_that_swallows_the_cancellation_still_gets_lease_lost(admin: psycopg.Connection[Any]) -> None:
    async def main() -> None:
        p = await asyncpg_pool(1)
        with pytest.raises(advlock.LeaseLost):
            async with advlock.lease(p, "report", "daily", ttl=0.3, timeout=1.0):
                await asyncio.to_thread(release_all, admin)
                with contextlib.suppress(asyncio.CancelledError):
                    await asyncio.sleep(30)
        task = asyncio.current_task()
        assert task is not None and task.cancelling() == 0
        await p.close()

    asyncio.run(main())


@leases
def test_s24_ttl_runs_out_while_renewals_are_blocked(admin: psycopg.Connection[Any]) -> None:
    """A pool of 1 whose only connection the body keeps: no renewal can run, the lease expires
    on the server at its TTL, `lost` is set and the body is cancelled."""

    async def main() -> None:
        p = await apool(1)
        with pytest.raises(advlock.LeaseLost, match="no renewal succeeded before the renew deadline") as info:
            async with advlock.lease(p, "report", "daily", ttl=0.4, timeout=1.0) as lease:
                async with p.connection() as conn:
                    await conn.execute("SELECT 1")
                    await asyncio.sleep(30)
        # The renewals' last error: no connection in time (the pool's timeout or the renewal's own).
        assert "PoolTimeout" in str(info.value) or "TimeoutError" in str(info.value)
        assert lease.lost is not None and lease.renewals == 0
        # Not released early (stopped at the renew deadline): it runs out on the server at its TTL.
        wait_until(lambda: row_of(admin, lease.token) is None, 5.0, what="the lease to expire on the server")
        await p.close()

    asyncio.run(main())


@leases
def test_s23_sync_lost_lease_sets_lost_and_exit_raises(admin: psycopg.Connection[Any]) -> None:
    with pool(2) as p:
        with pytest.raises(advlock.LeaseLost):
            with advlock.lease(p, "report", "daily", ttl=0.3, timeout=1.0) as lease:
                release_all(admin)
                wait_until(lambda: lease.lost is not None, 5.0, what="the renewal thread to notice")
                with pytest.raises(advlock.LeaseLost, match=rf"token {lease.token}\) was lost"):
                    lease.check()


FENCED = "UPDATE report_output SET fence = %s, body = %s WHERE id = 1 AND fence < %s"


@leases
def test_s25_fenced_write_of_the_next_holder_wins_over_the_stale_one(admin: psycopg.Connection[Any]) -> None:
    admin.execute("DROP TABLE IF EXISTS report_output")
    admin.execute("CREATE TABLE report_output (id int PRIMARY KEY, fence bigint NOT NULL, body text)")
    admin.execute("INSERT INTO report_output VALUES (1, 0, NULL)")
    with pool(2, "worker-a") as pa, pool(2, "worker-b") as pb:
        with pytest.raises(advlock.LeaseLost):
            with advlock.lease(pa, "report", "daily", ttl=0.3, timeout=1.0) as stale:
                release_all(admin)  # worker A "paused": its lease ends behind its back
                with advlock.lease(pb, "report", "daily", ttl=2.0, timeout=1.0) as fresh:
                    assert fresh.token > stale.token
                    with pb.connection() as c:
                        assert c.execute(FENCED, (fresh.token, "b", fresh.token)).rowcount == 1
                    # The stale worker's write changes nothing, whatever it believes.
                    with pa.connection() as c:
                        assert c.execute(FENCED, (stale.token, "a", stale.token)).rowcount == 0
                assert fresh.lost is None
    assert admin.execute("SELECT fence, body FROM report_output").fetchone() == (fresh.token, "b")
    admin.execute("DROP TABLE report_output")


# ---- timeouts, semaphores, cancelled waits -------------------------------------------------


@leases
def test_s26_timeout_raises_lease_timeout_naming_the_holder(admin: psycopg.Connection[Any]) -> None:
    with pool(1, "holder") as ph, pool(1, "waiter") as pw:
        with advlock.lease(ph, "report", "daily", ttl=5.0, timeout=0) as held:
            started = time.monotonic()
            held_by = r"within 200 ms: held by PID \d+ \(application_name 'holder'\)"
            with pytest.raises(advlock.LeaseTimeout, match=held_by) as info:
                with advlock.lease(pw, "report", "daily", ttl=5.0, timeout=0.2):
                    raise AssertionError("must not get the lease")
            assert 0.15 < time.monotonic() - started < 2
            assert isinstance(info.value, advlock.LockTimeout)
            row = row_of(admin, held.token)
            assert row is not None and info.value.pid == row[2] and info.value.application_name == "holder"


@leases
def test_s26_semaphore_slots(admin: psycopg.Connection[Any]) -> None:
    with pool(2) as p:
        with advlock.lease(p, "reports", "running", ttl=5.0, timeout=0, slots=2) as one:
            with advlock.lease(p, "reports", "running", ttl=5.0, timeout=0, slots=2) as two:
                assert one.token != two.token
                with pytest.raises(advlock.LeaseTimeout, match=r"\(2 slots\)") as info:
                    with advlock.lease(p, "reports", "running", ttl=5.0, timeout=0, slots=2):
                        pass
                assert len(info.value.holders) == 2


async def _cancel_a_waiting_lease(source: Any, admin: psycopg.Connection[Any]) -> None:
    with pool(1, "holder") as ph, advlock.lease(ph, "report", "daily", ttl=10.0, timeout=0) as held:

        async def wait() -> None:
            async with advlock.lease(source, "report", "daily", ttl=5.0, timeout=30.0):
                raise AssertionError("must not get the lease while it is held")

        task = asyncio.create_task(wait())

        def waiters() -> list[tuple[Any, ...]]:
            return [r for r in lease_rows(admin) if not r[1]]

        deadline = time.monotonic() + 10
        while not waiters():
            assert time.monotonic() < deadline, "the waiter never queued"
            await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        # No waiter left (the server-side wait was cancelled), the holder still holds.
        await asyncio.to_thread(wait_until, lambda: not waiters(), 2.0, what="the waiter row to go")
        assert [r[0] for r in lease_rows(admin)] == [held.token]
    # And the source is still usable: the key is free now.
    async with advlock.lease(source, "report", "daily", ttl=5.0, timeout=1.0) as lease:
        assert lease.token > held.token


@leases
def test_s27_cancelled_wait_leaves_no_waiter_asyncpg(admin: psycopg.Connection[Any]) -> None:
    async def main() -> None:
        p = await asyncpg_pool(1)
        await _cancel_a_waiting_lease(p, admin)
        await p.close()

    asyncio.run(main())


@leases
def test_s27_cancelled_wait_leaves_no_waiter_psycopg_pool(admin: psycopg.Connection[Any]) -> None:
    async def main() -> None:
        p = await apool(1)
        await _cancel_a_waiting_lease(p, admin)
        await p.close()

    asyncio.run(main())


# ---- a lease granted after a long wait ---------------------------------------------------


@contextlib.contextmanager
def held_elsewhere(ns: str, id: str, slots: int, release_after: float) -> Iterator[list[int]]:
    """`slots` leases of (ns, id) taken at once by another session, the first released after
    `release_after` seconds (by a thread), the others when the block ends. Yields the tokens."""
    conn = connect("s40-holder", autocommit=True)
    tokens = [
        int(conn.execute("SELECT advlock_lease(%s, %s, 60000, 0, slots => %s)", (ns, id, slots)).fetchone()[0])  # type: ignore[index]
        for _ in range(slots)
    ]
    released = threading.Event()

    def release_first() -> None:
        time.sleep(release_after)
        with connect("s40-releaser", autocommit=True) as c:
            c.execute("SELECT advlock_lease_release(%s)", (tokens[0],))
        released.set()

    threading.Thread(target=release_first, daemon=True).start()
    try:
        yield tokens
    finally:
        released.wait(release_after + 10)
        for token in tokens[1:]:
            conn.execute("SELECT advlock_lease_release(%s)", (token,))
        conn.close()


# The scenario's numbers: a TTL of 3 s (renew deadline 2 s), granted after 2.5 s, kept 3 TTLs.
TTL, WAIT_BEFORE_GRANT, KEPT_FOR = 3.0, 2.5, 9.0


@leases
def test_s40_a_lease_granted_after_a_long_wait_is_kept(admin: psycopg.Connection[Any]) -> None:
    """0.5.0 counted the renew deadline from when the wait began: granted at 2.5 s, the lease
    was lost at once. Counted from the grant (the server's expires_at minus the TTL), it is
    kept for as long as it renews."""
    with pool(2, "s40-waiter") as p, held_elsewhere("report", "s40", 1, WAIT_BEFORE_GRANT):
        started = time.monotonic()
        with advlock.lease(p, "report", "s40", ttl=TTL, timeout=10.0) as lease:
            waited = time.monotonic() - started
            assert waited > TTL * 2 / 3, f"granted after {waited:.2f} s: longer than the renew deadline is the case"
            until = time.monotonic() + KEPT_FOR
            while time.monotonic() < until:
                lease.check()  # LeaseLost here is the bug
                time.sleep(0.05)
            assert lease.lost is None
            # A renewal every third of the renew deadline (2/3 s): every one of them returned true.
            assert lease.renewals >= KEPT_FOR / (TTL * 2 / 9) - 3, lease.renewals
            token = lease.token
    assert row_of(admin, token) is None


@leases
def test_s40_a_semaphore_slot_granted_after_a_long_wait_is_kept(admin: psycopg.Connection[Any]) -> None:
    """The same with slots=2 on asyncio: both slots held elsewhere, one freed after 2.5 s; the
    waiter gets it and its body, cancelled if the slot were lost, runs three TTLs."""

    async def main() -> tuple[int, int]:
        p = await apool(2, "s40-waiter")
        try:
            started = time.monotonic()
            async with advlock.lease(p, "reports", "s40", ttl=TTL, timeout=10.0, slots=2) as slot:
                waited = time.monotonic() - started
                assert waited > TTL * 2 / 3, f"granted after {waited:.2f} s"
                await asyncio.sleep(KEPT_FOR)  # cancelled (then LeaseLost at exit) if the slot were lost
                assert slot.lost is None
                return slot.token, slot.renewals
        finally:
            await p.close()

    with held_elsewhere("reports", "s40", 2, WAIT_BEFORE_GRANT) as tokens:
        token, renewals = asyncio.run(main())
        assert token > max(tokens)
    assert renewals >= KEPT_FOR / (TTL * 2 / 9) - 3, renewals
    assert row_of(admin, token) is None


# ---- errors before any round trip, wrong sources, servers without leases --------------------

BAD_LEASES = [
    ({"ttl": 0, "timeout": 1}, ValueError, "ttl"),
    ({"ttl": -1, "timeout": 1}, ValueError, "ttl"),
    ({"ttl": float("inf"), "timeout": 1}, ValueError, "ttl"),
    ({"ttl": "30", "timeout": 1}, TypeError, "ttl"),
    ({"ttl": 30, "timeout": -1}, ValueError, "timeout"),
    ({"ttl": 30, "timeout": True}, TypeError, "timeout"),
    ({"ttl": 30, "timeout": 1, "slots": 0}, ValueError, "slots"),
    ({"ttl": 30, "timeout": 1, "slots": True}, TypeError, "slots"),
    ({"ttl": 30, "timeout": 1, "slots": 2.0}, TypeError, "slots"),
    ({"ttl": 30, "timeout": 1, "ns": ""}, ValueError, "ns"),
    ({"ttl": 30, "timeout": 1, "id": True}, TypeError, "id"),
]


@pytest.mark.parametrize(("kwargs", "error", "name"), BAD_LEASES)
def test_s02_bad_arguments_before_any_round_trip(kwargs: dict[str, Any], error: type[Exception], name: str) -> None:
    # A pool that was never opened: any round trip would fail with psycopg_pool's own error.
    p: psycopg_pool.ConnectionPool[Any] = psycopg_pool.ConnectionPool("host=/nonexistent port=1", open=False)
    args = {"ns": "report", "id": "daily", **kwargs}
    with pytest.raises(error, match=rf"^{name}\b"):
        advlock.lease(p, **args)


@pytest.mark.parametrize("bad", [0, -1, -0.5, float("nan")])
def test_s02_a_ttl_not_positive_says_so_whatever_its_sign(bad: float) -> None:
    """0 and -1 get one message ("must be positive"), not ">= 0" for one and "positive" for the other."""
    p: psycopg_pool.ConnectionPool[Any] = psycopg_pool.ConnectionPool("host=/nonexistent port=1", open=False)
    with pytest.raises(ValueError, match=rf"^ttl must be a positive number of seconds, got {bad!r}$"):
        advlock.lease(p, "report", ttl=bad, timeout=1)
    with pytest.raises(ValueError, match=rf"^renew_deadline must be a positive number of seconds, got {bad!r}$"):
        advlock.lease(p, "report", ttl=3, timeout=1, renew_deadline=bad)


@leases
def test_s26_a_holder_without_application_name_is_named_so(admin: psycopg.Connection[Any]) -> None:
    with pool(1, "") as ph, pool(1, "waiter") as pw, advlock.lease(ph, "report", "daily", ttl=5.0, timeout=0):
        with pytest.raises(advlock.LeaseTimeout, match=r"held by PID \d+ \(no application_name\)$") as info:
            with advlock.lease(pw, "report", "daily", ttl=5.0, timeout=0.1):
                raise AssertionError("must not get the lease")
        assert "None" not in str(info.value)
        assert not info.value.application_name


def test_s30_wrong_sources_name_what_to_pass() -> None:
    async def main() -> None:
        conn = await asyncpg.connect(DSN)
        with pytest.raises(TypeError, match=r"^source: pass the asyncpg pool, not a connection"):
            advlock.lease(conn, "report", ttl=30, timeout=1)
        await conn.close()
        aconn = await psycopg.AsyncConnection.connect(DSN, autocommit=True)
        with pytest.raises(TypeError, match="use `async with`"):
            with advlock.lease(aconn, "report", ttl=30, timeout=1):
                pass
        await aconn.close()

    asyncio.run(main())
    with pytest.raises(TypeError, match=r"^source: expected a pool"):
        advlock.lease(DSN, "report", ttl=30, timeout=1)  # type: ignore[arg-type]
    engine = create_engine(make_url(DSN).set(drivername="postgresql+psycopg"))
    with engine.connect() as c, pytest.raises(TypeError, match=r"^source: pass the Engine"):
        advlock.lease(c, "report", ttl=30, timeout=1)
    engine.dispose()


@pytest.mark.skipif(server_kind() != "extension", reason="only on a server with the extension but no preload")
def test_s29_not_preloaded_says_to_add_advlock_to_shared_preload_libraries() -> None:
    with pool(1) as p:
        with pytest.raises(advlock.NotPreloaded, match=r"add advlock to shared_preload_libraries") as info:
            with advlock.lease(p, "report", "daily", ttl=30, timeout=1):
                pass
        assert isinstance(info.value, advlock.LeasesUnavailable)
        assert getattr(info.value.__cause__, "sqlstate", None) == "55000"

    async def main() -> None:
        ap = await asyncpg_pool(1)
        with pytest.raises(advlock.NotPreloaded):
            async with advlock.lease(ap, "report", "daily", ttl=30, timeout=1):
                pass
        await ap.close()

    asyncio.run(main())


@pytest.mark.skipif(server_kind() != "edition", reason="only on the SQL edition")
def test_s29_the_sql_edition_has_no_leases() -> None:
    with pool(1) as p, pytest.raises(advlock.LeasesUnavailable, match="the SQL edition has none"):
        with advlock.lease(p, "report", "daily", ttl=30, timeout=1):
            pass


# ---- the renew deadline: the body stops before the server ends the lease --------------------


@leases
def test_s24_body_stops_before_a_contender_is_granted(admin: psycopg.Connection[Any]) -> None:
    """Renewals blocked (the pool's only connection is taken), a contender waiting: by server
    time (clock_timestamp() of each write), the body's last write comes before the contender's
    grant. 0.4.0 cancelled the body at the TTL itself, ~7 ms after a contender could be granted."""
    admin.execute("DROP TABLE IF EXISTS lease_body_writes")
    admin.execute("CREATE UNLOGGED TABLE lease_body_writes (at timestamptz NOT NULL)")

    async def contender(granted: list[Any]) -> None:
        conn = await asyncpg.connect(DSN, server_settings={"application_name": "contender"})
        try:
            row = await conn.fetchrow(
                "WITH l AS MATERIALIZED (SELECT advlock_lease('report', 'daily', 5000, 10000) AS id)"
                " SELECT id, clock_timestamp() FROM l"
            )
            granted.append(row)
            await conn.execute("SELECT advlock_lease_release($1)", row[0])
        finally:
            await conn.close()

    async def main() -> None:
        p = await apool(1)
        writer = await asyncpg.connect(DSN)
        granted: list[Any] = []
        task = None
        with pytest.raises(advlock.LeaseLost, match="before the renew deadline"):
            async with advlock.lease(p, "report", "daily", ttl=0.6, timeout=1.0) as lease:
                assert lease.renew_deadline_ms == 400
                task = asyncio.create_task(contender(granted))
                async with p.connection():  # renewals now wait for a connection that never comes
                    while True:
                        await writer.execute("INSERT INTO lease_body_writes VALUES (clock_timestamp())")
                        await asyncio.sleep(0.002)
        assert task is not None
        await task
        await writer.close()
        await p.close()
        last_write = admin.execute("SELECT max(at) FROM lease_body_writes").fetchone()
        assert last_write is not None and granted, granted
        assert granted[0][0] > lease.token
        margin = (granted[0][1] - last_write[0]).total_seconds()
        assert margin > 0, f"the body wrote {-margin * 1000:.1f} ms after the contender was granted"

    asyncio.run(main())
    admin.execute("DROP TABLE lease_body_writes")


@leases
def test_s24_sync_check_raises_at_the_renew_deadline_while_renewals_hang() -> None:
    with pool(1) as p:
        with pytest.raises(advlock.LeaseLost):
            with advlock.lease(p, "report", "daily", ttl=0.6, timeout=1.0, renew_deadline=0.3) as lease:
                with p.connection():  # the renewal thread waits for the pool
                    started = time.monotonic()
                    with pytest.raises(advlock.LeaseLost, match=r"before the renew deadline \(300 ms"):
                        while True:
                            lease.check()
                            time.sleep(0.005)
                    # check() says so at the deadline, though the renewal thread is still stuck.
                    assert time.monotonic() - started < 0.6


@pytest.mark.parametrize("renew_deadline", [0, 1.0, 2.0, -1])
def test_s02_s24_renew_deadline_must_be_inside_the_ttl(renew_deadline: float) -> None:
    with pool(1) as p, pytest.raises(ValueError, match="renew_deadline"):
        advlock.lease(p, "report", "daily", ttl=1.0, timeout=1.0, renew_deadline=renew_deadline)
