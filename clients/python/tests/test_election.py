"""advlock.leader() and advlock.observe() on the extension's election (preloaded only):
campaign, renew, resign on exit, the next candidate takes over at once, and an observer sees
every term in order, and no leader after a resignation."""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
import psycopg_pool
import pytest

import advlock
from conftest import DSN, needs_leases

pytestmark = needs_leases()


async def apool(size: int = 3) -> psycopg_pool.AsyncConnectionPool[Any]:
    p: psycopg_pool.AsyncConnectionPool[Any] = psycopg_pool.AsyncConnectionPool(
        DSN, min_size=1, max_size=size, kwargs={"autocommit": True}, open=False
    )
    await p.open(wait=True)
    return p


def test_two_candidates_take_turns_and_an_observer_sees_every_term(admin: psycopg.Connection[Any]) -> None:
    async def main() -> None:
        p = await apool(6)
        seen: list[advlock.Leader | None] = []
        first_seen = asyncio.Event()

        async def watch() -> None:
            async for now in advlock.observe(p, "beat", "nightly", wait=5.0):
                seen.append(now)
                first_seen.set()
                if len(seen) == 4:
                    return

        watcher = asyncio.create_task(watch())
        await asyncio.wait([watcher, asyncio.create_task(first_seen.wait())], return_when=asyncio.FIRST_COMPLETED)
        if watcher.done():
            watcher.result()  # the observer failed: say why
        assert seen == [None]  # no leader yet
        async with advlock.leader(p, "beat", "nightly", candidate="pod-a", ttl=5.0, timeout=1.0) as a:
            row = admin.execute("SELECT term, candidate FROM advlock_leader('beat', 'nightly')").fetchone()
            assert row == (a.term, "pod-a")

            async def b_campaign() -> int:
                async with advlock.leader(p, "beat", "nightly", candidate="pod-b", ttl=5.0, timeout=5.0) as b:
                    return b.term

            b_task = asyncio.create_task(b_campaign())
            await asyncio.sleep(0.2)  # pod-b waits (CALL advlock_wait_campaign)
        # a resigned on exit: b is elected at once, then resigns too.
        b_term = await asyncio.wait_for(b_task, 5)
        await asyncio.wait_for(watcher, 10)
        assert seen[0] is None
        assert [(x.term, x.candidate) if x else None for x in seen[1:]] == [(a.term, "pod-a"), (b_term, "pod-b"), None]
        assert b_term > a.term
        await p.close()

    asyncio.run(main())


def test_leader_arguments_are_checked_before_a_round_trip() -> None:
    with psycopg_pool.ConnectionPool(DSN, min_size=1, max_size=1) as p:
        for bad, error in (("", ValueError), ("x" * 129, ValueError), ("a\nb", ValueError), (7, TypeError)):
            with pytest.raises(error, match=r"^candidate"):
                advlock.leader(p, "beat", candidate=bad, ttl=1, timeout=0)  # type: ignore[arg-type]
