"""Scenarios 1 and 2 through real drivers (asyncpg and psycopg 3): a race for one key, and
bounded waits (timing, lock_timeout left alone, the lock_not_available error and its DETAIL)."""
import asyncio
import re
import threading
import time

import asyncpg
import psycopg
import pytest

from pgsupport import apg, key_for, psy, wait_for_waiter

TRY_ACCOUNT_42 = "SELECT advlock_try_with_timeout('account', 42, 0)"


# --- Scenario 1: two workers race for account 42 -------------------------------------------

def test_race_for_account_42_asyncpg():
    async def main():
        a = await apg("advlock-test/race/asyncpg-a")
        b = await apg("advlock-test/race/asyncpg-b")
        try:
            txa, txb = a.transaction(), b.transaction()
            await txa.start()
            await txb.start()
            # Both try at the same time; neither commits before both have answered.
            got = await asyncio.gather(a.fetchval(TRY_ACCOUNT_42), b.fetchval(TRY_ACCOUNT_42))
            assert sorted(got) == [False, True], got
            (winner, wtx), (loser, ltx) = ((a, txa), (b, txb)) if got[0] else ((b, txb), (a, txa))
            assert await loser.fetchval(TRY_ACCOUNT_42) is False  # still held
            await wtx.commit()
            assert await loser.fetchval(TRY_ACCOUNT_42) is True   # freed by the winner's commit
            await ltx.commit()
        finally:
            await a.close()
            await b.close()

    asyncio.run(main())


def test_race_for_account_42_psycopg_threads():
    conns = [psy(f"advlock-test/race/psycopg-{i}", autocommit=False) for i in range(2)]
    try:
        barrier = threading.Barrier(2, timeout=10)
        results = [None, None]

        def worker(i):
            barrier.wait()
            results[i] = conns[i].execute(TRY_ACCOUNT_42).fetchone()[0]

        threads = [threading.Thread(target=worker, args=(i,)) for i in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(15)
        assert sorted(results) == [False, True], results
        winner, loser = (conns[0], conns[1]) if results[0] else (conns[1], conns[0])
        assert loser.execute(TRY_ACCOUNT_42).fetchone()[0] is False
        winner.commit()
        assert loser.execute(TRY_ACCOUNT_42).fetchone()[0] is True
        loser.commit()
    finally:
        for c in conns:
            c.close()


# --- Scenario 2: bounded wait -----------------------------------------------------------------

def test_bounded_wait_psycopg(admin, measure):
    key = key_for("bounded-wait-psycopg")
    with psy("advlock-test/bounded/holder") as holder, psy("advlock-test/bounded/waiter") as waiter:
        holder_pid = holder.info.backend_pid
        assert holder.execute("SELECT advlock_try_with_timeout(%s, 0, scope => 'session')", (key,)).fetchone()[0]

        for session_timeout in (None, "7s"):
            if session_timeout:
                waiter.execute(f"SET lock_timeout = '{session_timeout}'")
            before = waiter.execute("SHOW lock_timeout").fetchone()[0]
            assert before == (session_timeout or "0")
            with waiter.transaction():
                started = time.monotonic()
                got = waiter.execute("SELECT advlock_try_with_timeout(%s, 200)", (key,)).fetchone()[0]
                elapsed = time.monotonic() - started
                assert got is False
                assert 0.200 <= elapsed < 5, elapsed
                measure(f"try_with_timeout(k, 200) returned false after (s), lock_timeout={before}",
                        round(elapsed, 4))
                assert waiter.execute("SHOW lock_timeout").fetchone()[0] == before  # inside the xact
                # A SET LOCAL value survives the call too.
                waiter.execute("SET LOCAL lock_timeout = '3s'")
                assert waiter.execute("SELECT advlock_try_with_timeout(%s, 50)", (key,)).fetchone()[0] is False
                assert waiter.execute("SHOW lock_timeout").fetchone()[0] == "3s"
            assert waiter.execute("SHOW lock_timeout").fetchone()[0] == before

        # advlock_lock_with_timeout: 55P03, the DETAIL names the holder.
        with pytest.raises(psycopg.errors.LockNotAvailable) as excinfo:
            with waiter.transaction():
                waiter.execute("SELECT advlock_lock_with_timeout(%s, 200)", (key,))
        diag = excinfo.value.diag
        assert diag.sqlstate == "55P03"
        measure("lock_with_timeout error (psycopg)", f"{diag.message_primary} DETAIL: {diag.message_detail}")
        waited = int(re.search(r"\(waited (\d+) ms\)", diag.message_primary).group(1))
        assert 200 <= waited < 5000
        assert f"PID {holder_pid} (application_name 'advlock-test/bounded/holder'" in diag.message_detail
        assert waiter.execute("SHOW lock_timeout").fetchone()[0] == "7s"

        # A waiter really queues: it shows as a waiter blocked by the holder, and gets the lock
        # as soon as the holder lets go.
        result = {}

        def wait_long():
            with waiter.transaction():
                result["got"] = waiter.execute("SELECT advlock_try_with_timeout(%s, 15000)", (key,)).fetchone()[0]
                result["at"] = time.monotonic()

        t = threading.Thread(target=wait_long)
        t.start()
        wait_for_waiter(admin, waiter.info.backend_pid)
        row = admin.execute("SELECT granted, blocked_by, application_name FROM advlock_holders"
                            " WHERE key = %s AND pid = %s", (key, waiter.info.backend_pid)).fetchone()
        assert row == (False, [holder_pid], "advlock-test/bounded/waiter")
        released = time.monotonic()
        assert holder.execute("SELECT advlock_unlock(%s)", (key,)).fetchone()[0] is True
        t.join(10)
        assert result["got"] is True
        assert result["at"] - released < 2
        measure("queued waiter got the lock after advlock_unlock (s)", round(result["at"] - released, 4))


def test_bounded_wait_asyncpg(measure):
    key = key_for("bounded-wait-asyncpg")

    async def main():
        holder = await apg("advlock-test/bounded/asyncpg-holder")
        waiter = await apg("advlock-test/bounded/asyncpg-waiter", server_settings={"lock_timeout": "9s"})
        try:
            holder_pid = holder.get_server_pid()
            assert await holder.fetchval("SELECT advlock_try_with_timeout($1::bigint, 0, scope => 'session')", key)
            assert await waiter.fetchval("SHOW lock_timeout") == "9s"
            async with waiter.transaction():
                started = time.monotonic()
                got = await waiter.fetchval("SELECT advlock_try_with_timeout($1::bigint, 200)", key)
                elapsed = time.monotonic() - started
                assert got is False
                assert 0.200 <= elapsed < 5, elapsed
                measure("asyncpg try_with_timeout(k, 200) returned false after (s)", round(elapsed, 4))
                assert await waiter.fetchval("SHOW lock_timeout") == "9s"

            with pytest.raises(asyncpg.exceptions.LockNotAvailableError) as excinfo:
                async with waiter.transaction():
                    await waiter.execute(f"SELECT advlock_lock_with_timeout({key}::bigint, 200)")
            err = excinfo.value
            assert err.sqlstate == "55P03"
            measure("lock_with_timeout error (asyncpg)", f"{type(err).__name__}: {err.message} DETAIL: {err.detail}")
            assert "within 200 ms" in err.message
            assert f"PID {holder_pid} (application_name 'advlock-test/bounded/asyncpg-holder'" in err.detail
            assert await waiter.fetchval("SHOW lock_timeout") == "9s"
            assert await holder.fetchval("SELECT advlock_unlock($1::bigint)", key) is True
        finally:
            await holder.close()
            await waiter.close()

    asyncio.run(main())


# --- Autocommit: an xact-scoped lock lasts one statement, and the drivers show the WARNING -------

def test_xact_scope_in_autocommit_warns_in_both_drivers(admin):
    key = key_for("autocommit-warning")
    notices = []
    with psy("advlock-test/autocommit/psycopg") as conn:
        conn.add_notice_handler(lambda d: notices.append((d.severity_nonlocalized, d.message_primary, d.message_hint)))
        assert conn.execute("SELECT advlock_try_with_timeout(%s, 0)", (key,)).fetchone()[0] is True
        assert admin.execute("SELECT count(*) FROM advlock_holders WHERE key = %s", (key,)).fetchone()[0] == 0
        # Inside a transaction block there is nothing to warn about.
        with conn.transaction():
            conn.execute("SELECT advlock_try_with_timeout(%s, 0)", (key,))
    assert len(notices) == 1, notices
    severity, message, hint = notices[0]
    assert severity == "WARNING"
    assert "scope 'xact' outside a transaction block" in message
    assert "scope => 'session'" in hint

    async def with_asyncpg():
        conn = await apg("advlock-test/autocommit/asyncpg")
        messages = []
        conn.add_log_listener(lambda c, m: messages.append((m.severity_en, m.message)))
        try:
            assert await conn.fetchval("SELECT advlock_try_with_timeout($1::bigint, 0)", key) is True
            await conn.fetchval("SELECT 1")  # log messages are delivered asynchronously
            return messages
        finally:
            await conn.close()

    messages = asyncio.run(with_asyncpg())
    assert [m[0] for m in messages] == ["WARNING"], messages
    assert "outside a transaction block" in messages[0][1]
