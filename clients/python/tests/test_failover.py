"""Failover: a lease and a leader term ride through a server restart (S45: a renewal that fails
with a connection error is "not yet renewed", retried on a fresh pooled connection until the
renew deadline), and multi-host DSNs (S46: the first host down, the lock or lease is taken on
the second). S45 restarts run_tests.sh's preloaded instance, whose pg_ctl and data directory
run_tests.sh passes only to that run (ADVLOCK_PY_PG_CTL, ADVLOCK_PY_PGDATA, ADVLOCK_PY_PGLOG)."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import time
from collections.abc import Iterator
from typing import Any, Literal

import asyncpg
import psycopg
import psycopg_pool
import pytest
from sqlalchemy import create_engine, make_url

import advlock
from conftest import DSN, advisory_locks, connect, lease_rows, needs_leases, server_kind, wait_until

leases = needs_leases()
PG_CTL = os.environ.get("ADVLOCK_PY_PG_CTL", "")
PGDATA = os.environ.get("ADVLOCK_PY_PGDATA", "")
PGLOG = os.environ.get("ADVLOCK_PY_PGLOG", "")
restartable = pytest.mark.skipif(
    not (PG_CTL and PGDATA and PGLOG),
    reason="S45 restarts the server: run_tests.sh gives the pg_ctl and data directory of its preloaded"
    " instance (ADVLOCK_PY_PG_CTL, ADVLOCK_PY_PGDATA, ADVLOCK_PY_PGLOG) to that run only",
)
TTL = 6.0
Driver = Literal["psycopg", "asyncpg"]


@pytest.fixture(autouse=True)
def _no_lease_left(request: pytest.FixtureRequest) -> Iterator[None]:
    yield
    if server_kind() == "preloaded":
        with connect("advlock-test-check") as conn:
            wait_until(lambda: not lease_rows(conn), 5.0, what=f"{request.node.name} to leave no row in advlock_leases")


def started_at() -> Any:
    """When the server (postmaster) started: changes with every restart. Retries while the
    server is coming back (the no-lock check after a restart test does the same)."""

    def ask() -> Any:
        try:
            with connect("advlock-test-s45") as conn:
                row = conn.execute("SELECT pg_postmaster_start_time()").fetchone()
                assert row is not None
                return row[0]
        except psycopg.OperationalError:
            return None

    return wait_until(ask, 30.0, what="the server to answer")


def restart_server() -> None:
    """pg_ctl restart -m fast of the instance (as the postgres user: the server refuses root),
    back and answering when this returns. -l keeps the server's output in its log (not in a
    pipe of ours, which the new postmaster would hold open)."""
    before = started_at()
    command = [PG_CTL, "-D", PGDATA, "-l", PGLOG, "-m", "fast", "-w", "-t", "60", "restart"]
    if os.geteuid() == 0:
        command = ["sudo", "-u", "postgres", "--", *command]
    done = subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, timeout=90)
    assert done.returncode == 0, f"pg_ctl restart failed: {done.stderr}"
    assert started_at() != before, "the server did not restart"


def held_ids() -> set[int]:
    """The granted leases (and terms) of advlock_leases, with an expiry still ahead."""
    with connect("advlock-test-s45") as conn:
        rows = conn.execute("SELECT lease FROM advlock_leases WHERE granted AND expires_at > clock_timestamp()")
        return {int(r[0]) for r in rows.fetchall()}


def ride_through_restart(renewals: Any) -> None:
    """Restart the server, then wait past the TTL: had no renewal landed on the restarted
    server, it would have ended the leases. `renewals()`: the renewal counts to see grow."""
    restart_server()
    after_restart = renewals()
    time.sleep(TTL + 1)
    grown = renewals()
    assert all(b >= a + 3 for a, b in zip(after_restart, grown, strict=True)), (
        f"renewals before/after the TTL past the restart: {after_restart} -> {grown}"
    )


@leases
@restartable
def test_s45_async_lease_and_leader_ride_through_a_restart() -> None:
    """asyncpg pool for the lease, psycopg async pool for the term: both pools' connections
    die with the restart; the renewals retry on fresh ones and the body is not cancelled."""

    async def main() -> None:
        lease_pool = await asyncpg.create_pool(DSN, min_size=2, max_size=2, server_settings={"application_name": "s45"})
        term_pool: psycopg_pool.AsyncConnectionPool[Any] = psycopg_pool.AsyncConnectionPool(
            DSN, min_size=2, max_size=2, kwargs={"autocommit": True, "application_name": "s45"}, open=False
        )
        await term_pool.open(wait=True)
        try:
            async with (
                advlock.lease(lease_pool, "s45", "job", ttl=TTL, timeout=1.0) as lease,
                advlock.leader(term_pool, "s45", "leader", candidate="s45-a", ttl=TTL, timeout=1.0) as term,
            ):
                assert held_ids() == {lease.token, term.term}
                await asyncio.to_thread(ride_through_restart, lambda: (lease.renewals, term.renewals))
                assert lease.lost is None and term.lost is None
                lease.check()
                term.check()
                assert held_ids() == {lease.token, term.term}  # the same ids, on the restarted server
        finally:
            await lease_pool.close()
            await term_pool.close()

    asyncio.run(main())


@leases
@restartable
def test_s45_blocking_lease_and_leader_ride_through_a_restart() -> None:
    """psycopg pool for the lease, a SQLAlchemy engine for the term (renewal threads)."""
    lease_pool: psycopg_pool.ConnectionPool[Any] = psycopg_pool.ConnectionPool(
        DSN, min_size=2, max_size=2, kwargs={"autocommit": True, "application_name": "s45"}, open=True
    )
    lease_pool.wait()
    engine = create_engine(make_url(DSN).set(drivername="postgresql+psycopg"), pool_size=2)
    try:
        with (
            advlock.lease(lease_pool, "s45", "job", ttl=TTL, timeout=1.0) as lease,
            advlock.leader(engine, "s45", "leader", candidate="s45-b", ttl=TTL, timeout=1.0) as term,
        ):
            assert held_ids() == {lease.token, term.term}
            ride_through_restart(lambda: (lease.renewals, term.renewals))
            assert lease.lost is None and term.lost is None
            lease.check()
            term.check()
            assert held_ids() == {lease.token, term.term}
    finally:
        lease_pool.close()
        engine.dispose()


# ---- S46: multi-host DSNs --------------------------------------------------------------------


def down_port() -> int:
    """A port nobody listens on (the kernel's pick, closed again before use)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def live() -> tuple[str, int, str, str]:
    url = make_url(DSN)
    assert url.host and url.port and url.database
    return url.host, url.port, url.username or "postgres", url.database


def multi_host_keywords() -> str:
    host, port, user, dbname = live()
    return (
        f"host={host},{host} port={down_port()},{port} user={user} dbname={dbname}"
        " target_session_attrs=read-write"
    )


def multi_host_uri() -> str:
    host, port, user, dbname = live()
    return f"postgresql://{user}@{host}:{down_port()},{host}:{port}/{dbname}?target_session_attrs=read-write"


@pytest.mark.parametrize("form", [multi_host_keywords, multi_host_uri], ids=["keywords", "uri"])
@pytest.mark.parametrize("driver", ["psycopg", "asyncpg"])
def test_s46_session_lock_on_a_multi_host_dsn(form: Any, driver: Driver, admin: psycopg.Connection[Any]) -> None:
    dsn = form()

    async def main() -> None:
        async with advlock.session_lock(dsn, "s46", "lock", timeout=1.0, driver=driver) as held:
            assert [lock.pid for lock in advisory_locks(admin)] == [held.pid]

    if driver == "asyncpg":
        asyncio.run(main())
    else:
        with advlock.session_lock(dsn, "s46", "lock", timeout=1.0) as held:
            assert [lock.pid for lock in advisory_locks(admin)] == [held.pid]


@leases
@pytest.mark.parametrize("form", [multi_host_keywords, multi_host_uri], ids=["keywords", "uri"])
def test_s46_pools_on_a_multi_host_dsn(form: Any, admin: psycopg.Connection[Any]) -> None:
    """psycopg_pool takes either form, asyncpg's pool the URI form (asyncpg has no key=value)."""
    dsn = form()
    with psycopg_pool.ConnectionPool(dsn, min_size=1, max_size=1, kwargs={"autocommit": True}, open=True) as p:
        with advlock.lease(p, "s46", "lease", ttl=2.0, timeout=1.0) as lease:
            assert {r[0] for r in lease_rows(admin)} == {lease.token}

    async def main() -> None:
        if form is multi_host_keywords:
            return
        apool = await asyncpg.create_pool(dsn, min_size=1, max_size=1)
        try:
            async with advlock.lease(apool, "s46", "lease", ttl=2.0, timeout=1.0) as lease:
                assert {r[0] for r in lease_rows(admin)} == {lease.token}
        finally:
            await apool.close()

    asyncio.run(main())


def test_s46_hosts_and_ports_that_do_not_pair_up_are_refused_before_connecting() -> None:
    """asyncpg gets the DSN as a URI (a:p,b:q): three ports for two hosts cannot be written so."""
    with pytest.raises(ValueError, match=r"dsn: 2 hosts but 3 ports \(give one port, or one per host\)"):
        advlock.session_lock("host=a,b port=1,2,3 dbname=x", "s46", timeout=1.0, driver="asyncpg")
