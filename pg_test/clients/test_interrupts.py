"""Bounded waits interrupted from the client side: a driver's command timeout (a cancel
request), statement_timeout, a deadlock; and what a wait leaves behind in each scope.
After every interruption the caller's lock_timeout is intact and nothing stays queued."""
import asyncio
import threading
import time

import psycopg
import pytest

from pgsupport import apg, key_for, psy, wait_for_waiter, waiting_pids


def test_asyncpg_command_timeout_cancels_the_wait(admin, measure):
    key = key_for("asyncpg-cancel")

    async def main():
        holder = await apg("advlock-test/cancel/holder")
        waiter = await apg("advlock-test/cancel/asyncpg-waiter", server_settings={"lock_timeout": "4s"})
        try:
            assert await holder.fetchval("SELECT advlock_try_with_timeout($1::bigint, 0, scope => 'session')", key)
            started = time.monotonic()
            with pytest.raises(asyncio.TimeoutError):
                async with waiter.transaction():
                    # asyncpg sends a cancel request when its timeout expires.
                    await waiter.fetchval("SELECT advlock_try_with_timeout($1::bigint, 10000)", key, timeout=0.3)
            measure("asyncpg timeout=0.3 interrupted a 10 s wait after (s)", round(time.monotonic() - started, 3))
            assert waiter.get_server_pid() not in waiting_pids(admin)
            assert await waiter.fetchval("SHOW lock_timeout") == "4s"
            assert await waiter.fetchval("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'"
                                         " AND pid = pg_backend_pid()") == 0
            # The connection is still usable and can take the lock once it is free.
            assert await holder.fetchval("SELECT advlock_unlock($1::bigint)", key) is True
            async with waiter.transaction():
                assert await waiter.fetchval("SELECT advlock_try_with_timeout($1::bigint, 1000)", key) is True
        finally:
            await holder.close()
            await waiter.close()

    asyncio.run(main())


def test_statement_timeout_ends_the_wait(admin):
    key = key_for("statement-timeout")
    with psy("advlock-test/cancel/holder") as holder, psy("advlock-test/cancel/psycopg-waiter") as waiter:
        assert holder.execute("SELECT advlock_try_with_timeout(%s, 0, scope => 'session')", (key,)).fetchone()[0]
        waiter.execute("SET lock_timeout = '6s'")
        waiter.execute("SET statement_timeout = '300ms'")
        started = time.monotonic()
        with pytest.raises(psycopg.errors.QueryCanceled):
            with waiter.transaction():
                waiter.execute("SELECT advlock_try_with_timeout(%s, 10000)", (key,))
        assert 0.3 <= time.monotonic() - started < 5
        assert waiter.info.backend_pid not in waiting_pids(admin)
        assert waiter.execute("SHOW lock_timeout").fetchone()[0] == "6s"
        assert waiter.execute("SHOW statement_timeout").fetchone()[0] == "300ms"
        assert holder.execute("SELECT advlock_unlock(%s)", (key,)).fetchone()[0] is True


def test_deadlock_between_two_waits_is_reported(admin):
    k1, k2 = key_for("deadlock-1"), key_for("deadlock-2")
    a = psy("advlock-test/deadlock/a", autocommit=False)
    b = psy("advlock-test/deadlock/b", autocommit=False)
    try:
        for c in (a, b):
            c.execute("SET deadlock_timeout = '100ms'")
            c.execute("SET lock_timeout = '8s'")
            c.commit()
        assert a.execute("SELECT advlock_try_with_timeout(%s, 0)", (k1,)).fetchone()[0]
        assert b.execute("SELECT advlock_try_with_timeout(%s, 0)", (k2,)).fetchone()[0]
        outcome = {}

        def wait(name, conn, key):
            try:
                outcome[name] = conn.execute("SELECT advlock_try_with_timeout(%s, 5000)", (key,)).fetchone()[0]
                outcome[name + "_lock_timeout"] = conn.execute("SHOW lock_timeout").fetchone()[0]
                conn.commit()
            except psycopg.errors.DeadlockDetected:
                outcome[name] = "deadlock"
                conn.rollback()

        ta = threading.Thread(target=wait, args=("a", a, k2))
        ta.start()
        wait_for_waiter(admin, a.info.backend_pid)
        tb = threading.Thread(target=wait, args=("b", b, k1))
        tb.start()
        ta.join(10)
        tb.join(10)
        assert sorted(map(str, (outcome["a"], outcome["b"]))) == ["True", "deadlock"], outcome
        winner = "a" if outcome["a"] is True else "b"
        assert outcome[winner + "_lock_timeout"] == "8s"
        for c in (a, b):
            assert c.execute("SHOW lock_timeout").fetchone()[0] == "8s"
            c.rollback()
    finally:
        a.close()
        b.close()


def test_what_a_wait_leaves_after_rollback(admin):
    """A session lock obtained after waiting survives ROLLBACK (like pg_advisory_lock);
    an xact lock obtained after waiting goes with it."""
    ks, kx = key_for("wait-then-rollback-session"), key_for("wait-then-rollback-xact")
    with psy("advlock-test/rollback/holder") as holder, \
            psy("advlock-test/rollback/waiter", autocommit=False) as waiter:
        pid = waiter.info.backend_pid
        for key in (ks, kx):
            assert holder.execute("SELECT advlock_try_with_timeout(%s, 0, scope => 'session')", (key,)).fetchone()[0]
        result = {}

        def wait():
            result["s"] = waiter.execute(
                "SELECT advlock_try_with_timeout(%s, 10000, scope => 'session')", (ks,)).fetchone()[0]
            result["x"] = waiter.execute("SELECT advlock_try_with_timeout(%s, 10000)", (kx,)).fetchone()[0]

        t = threading.Thread(target=wait)
        t.start()
        wait_for_waiter(admin, pid)
        holder.execute("SELECT advlock_unlock(%s)", (ks,))
        deadline = time.monotonic() + 5
        while "s" not in result and time.monotonic() < deadline:
            time.sleep(0.005)
        wait_for_waiter(admin, pid)
        holder.execute("SELECT advlock_unlock(%s)", (kx,))
        t.join(10)
        assert result == {"s": True, "x": True}

        def held():
            return set(r[0] for r in admin.execute(
                "SELECT key FROM advlock_holders WHERE pid = %s AND granted", (pid,)).fetchall())

        assert held() == {ks, kx}
        waiter.rollback()
        assert held() == {ks}
        assert waiter.execute("SELECT advlock_unlock(%s)", (ks,)).fetchone()[0] is True
        waiter.commit()
        assert held() == set()
