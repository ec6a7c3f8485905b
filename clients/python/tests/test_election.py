"""advlock.leader() and advlock.observe() on the extension's election (preloaded only):
campaign, renew, resign on exit, the next candidate takes over at once, and an observer sees
every term in order, and no leader after a resignation."""

from __future__ import annotations

import asyncio
import time
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


# The scenarios' numbers: a TTL of 3 s (renew deadline 2 s); the sitting leader stays 2.5 s.
TTL, SITTING, LEADS_FOR = 3.0, 2.5, 9.0


def leader_now(admin: psycopg.Connection[Any], id: str) -> tuple[int, str] | None:
    row = admin.execute("SELECT term, candidate FROM advlock_leader('beat', %s)", (id,)).fetchone()
    return None if row is None else (int(row[0]), str(row[1]))


def test_s36_elected_after_a_long_campaign_wait_leads_while_it_renews(admin: psycopg.Connection[Any]) -> None:
    """docs/leader-election.md's advice, campaign with a long timeout, livelocked in 0.5.0: the
    follower, elected 2.5 s into its wait, was lost at once (its renew deadline counted from the
    start of the wait), again and again. Now it leads for three TTLs, in one term."""

    async def main() -> None:
        p = await apool(4)
        entered = 0

        async def follower() -> tuple[int, float, set[tuple[int, str] | None], BaseException | None, int]:
            nonlocal entered
            started = time.monotonic()
            async with advlock.leader(p, "beat", "s36", candidate="pod-b", ttl=TTL, timeout=30.0) as b:
                entered += 1
                waited = time.monotonic() - started
                seen: set[tuple[int, str] | None] = set()
                until = time.monotonic() + LEADS_FOR
                while time.monotonic() < until:
                    seen.add(leader_now(admin, "s36"))
                    b.check()
                    await asyncio.sleep(0.25)
                return b.term, waited, seen, b.lost, b.renewals

        async with advlock.leader(p, "beat", "s36", candidate="pod-a", ttl=TTL, timeout=1.0) as a:
            campaign = asyncio.create_task(follower())
            await asyncio.sleep(SITTING)
        term, waited, seen, lost, renewals = await asyncio.wait_for(campaign, LEADS_FOR + 10)
        await p.close()
        assert waited > TTL * 2 / 3, f"elected after {waited:.2f} s: longer than the renew deadline is the case"
        assert term > a.term
        assert seen == {(term, "pod-b")}, seen  # one term all along, never lost and re-elected
        assert lost is None and entered == 1
        assert renewals >= LEADS_FOR / (TTL * 2 / 9) - 3, renewals

    asyncio.run(main())


def test_s37_observe_wakes_on_every_change_and_yields_none_while_nobody_leads() -> None:
    """Each wait of the observer may last 30 s on the server: a value arriving within 2 s of
    the change it reports was woken by it, not by a polling period."""

    async def main() -> None:
        p = await apool(6)
        values: asyncio.Queue[tuple[float, tuple[int, str | None] | None]] = asyncio.Queue()

        async def watch() -> None:
            yielded = 0
            async for now in advlock.observe(p, "beat", "s37", wait=30.0):
                values.put_nowait((time.monotonic(), None if now is None else (now.term, now.candidate)))
                yielded += 1
                if yielded == 4:
                    return

        async def next_value() -> tuple[float, tuple[int, str | None] | None]:
            return await values.get()

        watcher = asyncio.create_task(watch())
        started = time.monotonic()
        at, value = await asyncio.wait_for(next_value(), 2.0)
        assert value is None and at - started < 2.0  # nobody leads yet: None at once
        async with advlock.leader(p, "beat", "s37", candidate="pod-a", ttl=5.0, timeout=1.0) as a:
            elected = time.monotonic()
            at, value = await asyncio.wait_for(next_value(), 5.0)
            assert value == (a.term, "pod-a") and at - elected < 2.0, (value, at - elected)
            await asyncio.sleep(0.5)
        resigned = time.monotonic()
        at, value = await asyncio.wait_for(next_value(), 5.0)
        assert value is None and at - resigned < 2.0, (value, at - resigned)  # nobody leads after a resignation
        async with advlock.leader(p, "beat", "s37", candidate="pod-b", ttl=5.0, timeout=1.0) as b:
            elected = time.monotonic()
            at, value = await asyncio.wait_for(next_value(), 5.0)
            assert value == (b.term, "pod-b") and at - elected < 2.0, (value, at - elected)
        await asyncio.wait_for(watcher, 5.0)
        await p.close()

    asyncio.run(main())


def test_s38_resign_hands_over_at_once_with_a_larger_term(admin: psycopg.Connection[Any]) -> None:
    """A leader leaving its block resigns on the server: the waiting candidate is elected
    within 1 s (not at the end of the TTL), with a larger term; the old leader, having
    resigned, is not reported lost (its block exits without LeaseLost)."""

    async def main() -> None:
        p = await apool(4)
        elected_at: list[float] = []

        async def follower() -> int:
            async with advlock.leader(p, "beat", "s38", candidate="pod-b", ttl=30.0, timeout=30.0) as b:
                elected_at.append(time.monotonic())
                return b.term

        async with advlock.leader(p, "beat", "s38", candidate="pod-a", ttl=30.0, timeout=1.0) as a:
            campaign = asyncio.create_task(follower())
            await asyncio.sleep(0.5)  # pod-b waits in its campaign
            assert not campaign.done()
        resigned = time.monotonic()
        assert a.lost is None  # it resigned: not lost
        b_term = await asyncio.wait_for(campaign, 5.0)
        await p.close()
        assert elected_at[0] - resigned < 1.0, elected_at[0] - resigned
        assert b_term > a.term

    asyncio.run(main())
    assert leader_now(admin, "s38") is None  # pod-b resigned too


def test_leader_arguments_are_checked_before_a_round_trip() -> None:
    with psycopg_pool.ConnectionPool(DSN, min_size=1, max_size=1) as p:
        for bad, error in (("", ValueError), ("x" * 129, ValueError), ("a\nb", ValueError), (7, TypeError)):
            with pytest.raises(error, match=r"^candidate"):
                advlock.leader(p, "beat", candidate=bad, ttl=1, timeout=0)  # type: ignore[arg-type]
