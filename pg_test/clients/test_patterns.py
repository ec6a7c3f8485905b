"""Scenarios 5, 6 and 7: the application patterns the README recommends, with real drivers.

5. Leader election on a session lock; failover when the leader's backend dies.
6. Migration coordination among 8 pods: exactly one migrates.
7. Idempotency keys: duplicates are told "busy" at once, distinct keys never block."""
import asyncio
import threading
import time

import psycopg
import pytest

from pgsupport import apg, psy, wait_for_waiter, waiting_pids

# --- Scenario 5: leader election ---------------------------------------------------------------

LEADER_TRY = "SELECT advlock_try_with_timeout('leader', 'rollup', %s, scope => 'session')"


@pytest.mark.parametrize("follower_timeout_ms", [0, 5000], ids=["poll-every-50ms", "wait-5s"])
def test_leader_failover_after_terminate(admin, measure, follower_timeout_ms):
    leader = psy("advlock-test/leader/leader")
    follower = psy("advlock-test/leader/follower")
    try:
        leader_pid = leader.info.backend_pid
        assert leader.execute(LEADER_TRY, (0,)).fetchone()[0] is True
        refused_once = threading.Event()
        result = {"polls": 0}

        def follow():
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                result["polls"] += 1
                if follower.execute(LEADER_TRY, (follower_timeout_ms,)).fetchone()[0]:
                    result["leader_at"] = time.monotonic()
                    return
                refused_once.set()
                if follower_timeout_ms == 0:
                    time.sleep(0.05)

        t = threading.Thread(target=follow)
        t.start()
        try:
            if follower_timeout_ms == 0:
                assert refused_once.wait(5), "the follower never polled"
            else:
                wait_for_waiter(admin, follower.info.backend_pid)
            row = admin.execute("SELECT pid, application_name, is_idle_holder FROM advlock_holders"
                                " WHERE key = advlock_key('leader', 'rollup') AND granted").fetchone()
            assert row[:2] == (leader_pid, "advlock-test/leader/leader")
            terminated_at = time.monotonic()
            assert admin.execute("SELECT pg_terminate_backend(%s)", (leader_pid,)).fetchone()[0] is True
        finally:
            t.join(15)
        assert "leader_at" in result, "the follower never became leader"
        failover = result["leader_at"] - terminated_at
        measure(f"failover after pg_terminate_backend (s), follower timeout_ms={follower_timeout_ms}",
                round(failover, 4))
        assert failover < 1.0
        # The old leader finds out on its next statement.
        with pytest.raises(psycopg.OperationalError):
            leader.execute("SELECT 1")
        row = admin.execute("SELECT pid, application_name FROM advlock_holders"
                            " WHERE key = advlock_key('leader', 'rollup') AND granted").fetchone()
        assert row == (follower.info.backend_pid, "advlock-test/leader/follower")
        assert follower.execute("SELECT advlock_unlock('leader', 'rollup')").fetchone()[0] is True
    finally:
        leader.close()
        follower.close()


# --- Scenario 6: migration coordination --------------------------------------------------------

PODS = 8


@pytest.fixture
def migration_tables():
    with psy("advlock-test/migrate/setup") as conn:
        conn.execute("DROP TABLE IF EXISTS advlock_test_migrations, advlock_test_migrated")
        conn.execute("CREATE TABLE advlock_test_migrations (version int PRIMARY KEY, pod text NOT NULL)")
    yield
    with psy("advlock-test/migrate/setup") as conn:
        conn.execute("DROP TABLE IF EXISTS advlock_test_migrations, advlock_test_migrated")


def test_migration_runs_once_lock_and_marker(admin, migration_tables):
    """Every pod waits its turn (advlock_lock_with_timeout) and checks the marker table; the
    migrator finishes only once the 7 others are seen queued behind it."""

    async def main():
        conns = [await apg(f"advlock-test/migrate/pod-{i}") for i in range(PODS)]
        go = asyncio.Event()
        others_queued = asyncio.Event()
        try:
            async def pod(i, conn):
                await go.wait()
                async with conn.transaction():
                    await conn.execute("SELECT advlock_lock_with_timeout('migrate', 'schema-v2', 15000)")
                    if await conn.fetchval("SELECT EXISTS (SELECT FROM advlock_test_migrations WHERE version = 2)"):
                        return "skipped"
                    # A migration that would fail if it ran twice.
                    await conn.execute("CREATE TABLE advlock_test_migrated (id int PRIMARY KEY)")
                    await asyncio.wait_for(others_queued.wait(), 15)
                    await conn.execute("INSERT INTO advlock_test_migrations VALUES (2, $1)", f"pod-{i}")
                    return "migrated"

            async def watch():
                pids = {c.get_server_pid() for c in conns}
                deadline = time.monotonic() + 10
                while len(waiting_pids(admin) & pids) < PODS - 1:
                    assert time.monotonic() < deadline, "the other pods never queued"
                    await asyncio.sleep(0.01)
                others_queued.set()

            tasks = [asyncio.create_task(pod(i, c)) for i, c in enumerate(conns)]
            watcher = asyncio.create_task(watch())
            go.set()
            results = await asyncio.gather(*tasks)
            await watcher
            return results
        finally:
            for c in conns:
                await c.close()

    results = asyncio.run(main())
    assert sorted(results) == ["migrated"] + ["skipped"] * (PODS - 1)
    with psy("advlock-test/migrate/check") as conn:
        assert conn.execute("SELECT count(*) FROM advlock_test_migrations").fetchone()[0] == 1
        assert conn.execute("SELECT to_regclass('advlock_test_migrated') IS NOT NULL").fetchone()[0]


def test_migration_runs_once_try_and_skip(migration_tables, measure):
    """advlock_try_with_timeout('migrate', ..., 0): whoever loses skips at once; the winner
    keeps the lock until every loser has answered."""

    async def main():
        conns = [await apg(f"advlock-test/migrate/try-pod-{i}") for i in range(PODS)]
        go = asyncio.Event()
        answered = []
        all_answered = asyncio.Event()
        try:
            async def pod(i, conn):
                await go.wait()
                async with conn.transaction():
                    started = time.monotonic()
                    won = await conn.fetchval("SELECT advlock_try_with_timeout('migrate', 'schema-v3', 0)")
                    elapsed = time.monotonic() - started
                    answered.append(i)
                    if len(answered) == PODS:
                        all_answered.set()
                    if not won:
                        return ("skipped", elapsed)
                    await asyncio.wait_for(all_answered.wait(), 15)
                    await conn.execute("CREATE TABLE advlock_test_migrated (id int PRIMARY KEY)")
                    await conn.execute("INSERT INTO advlock_test_migrations VALUES (3, $1)", f"try-pod-{i}")
                    return ("migrated", elapsed)

            tasks = [asyncio.create_task(pod(i, c)) for i, c in enumerate(conns)]
            go.set()
            return await asyncio.gather(*tasks)
        finally:
            for c in conns:
                await c.close()

    results = asyncio.run(main())
    assert sorted(r[0] for r in results) == ["migrated"] + ["skipped"] * (PODS - 1)
    measure("slowest try (timeout 0) among 8 pods (s)", round(max(r[1] for r in results), 4))
    with psy("advlock-test/migrate/check") as conn:
        assert conn.execute("SELECT count(*) FROM advlock_test_migrations").fetchone()[0] == 1


# --- Scenario 7: idempotency keys ----------------------------------------------------------------

REQUESTS = 8


def test_duplicate_requests_are_busy_at_once(measure):
    """REQUESTS concurrent requests with one idempotency key race for it; the winner keeps
    "processing" until every duplicate has been answered."""
    barrier = threading.Barrier(REQUESTS, timeout=10)
    checked = threading.Event()
    outcomes, timings, errors = [], [], []
    lock = threading.Lock()

    def request(i):
        try:
            with psy(f"advlock-test/idem/request-{i}") as conn, conn.transaction():
                barrier.wait()
                started = time.monotonic()
                got = conn.execute("SELECT advlock_try_with_timeout('idempotency', 'req-7f3a', 0)").fetchone()[0]
                elapsed = time.monotonic() - started
                with lock:
                    timings.append(elapsed)
                    outcomes.append("processed" if got else "busy")
                    if len(outcomes) == REQUESTS:
                        checked.set()
                if got:
                    assert checked.wait(10)
        except Exception as e:
            errors.append(repr(e))

    threads = [threading.Thread(target=request, args=(i,)) for i in range(REQUESTS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    assert not errors, errors
    assert sorted(outcomes) == ["busy"] * (REQUESTS - 1) + ["processed"]
    measure("slowest answer to a duplicate request (s)", round(max(timings), 4))
    assert max(timings) < 0.1, timings
    # Once the first request is done, a retry of the same key is processed.
    with psy("advlock-test/idem/retry") as conn, conn.transaction():
        assert conn.execute("SELECT advlock_try_with_timeout('idempotency', 'req-7f3a', 0)").fetchone()[0] is True


def test_distinct_requests_never_block_each_other(measure):
    barrier = threading.Barrier(REQUESTS, timeout=10)
    results, timings, errors = {}, [], []

    def request(i):
        try:
            with psy(f"advlock-test/idem/distinct-{i}") as conn, conn.transaction():
                started = time.monotonic()
                got = conn.execute("SELECT advlock_try_with_timeout('idempotency', %s, 1000)",
                                   (f"req-{i}",)).fetchone()[0]
                timings.append(time.monotonic() - started)
                results[i] = got
                # Everyone holds their own key at the same time.
                barrier.wait()
        except Exception as e:
            errors.append(repr(e))

    threads = [threading.Thread(target=request, args=(i,)) for i in range(REQUESTS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    assert not errors, errors
    assert results == {i: True for i in range(REQUESTS)}
    measure("slowest acquisition of a distinct key (s)", round(max(timings), 4))
    assert max(timings) < 0.5
