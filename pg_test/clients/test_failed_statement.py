"""The failed-statement rule in the extended protocol, through real drivers.

A session lock taken by a client statement that then fails is released with it. In the extended
protocol a client statement is one Execute, and every Execute up to the next Sync while they run
in one implicit transaction (asyncpg's executemany, a psycopg pipeline in autocommit): the batch
is all or nothing and the client gets one error for it. Inside a transaction block each Execute
stands alone, exactly as if the statements were sent one by one: a completed Execute's hold
survives the failure of a later one, the failed COMMIT included.

Each failure happens at run time and only while the lock is held (FAIL_HOLDING divides by zero
only then), so the error itself proves advlock ran and granted the lock first.
"""
import asyncio

import asyncpg
import psycopg
import pytest

from pgsupport import apg, psy

HOLDS = ("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid() "
         "AND granted AND ((classid::int8 << 32) | objid::int8) = $1")
FAIL_HOLDING = f"1 / (({HOLDS}) = 0)::int"


def psy_holds(conn: psycopg.Connection, key: int) -> int:
    return conn.execute(HOLDS.replace("$1", "%s"), (key,)).fetchone()[0]


def test_asyncpg_prepared_statement_that_fails_releases_its_lock():
    async def run():
        conn = await apg("failed-prepared")
        try:
            stmt = await conn.prepare(
                f"SELECT advlock_try_with_timeout($1::bigint, 0, scope => 'session'), {FAIL_HOLDING}")
            with pytest.raises(asyncpg.exceptions.DivisionByZeroError):
                await stmt.fetch(7101)
            assert await conn.fetchval(HOLDS, 7101) == 0
            # The same prepared statement completing keeps its lock (no failure: a key never held).
            ok = await conn.prepare("SELECT advlock_try_with_timeout($1::bigint, 0, scope => 'session')")
            assert await ok.fetchval(7102) is True
            assert await conn.fetchval(HOLDS, 7102) == 1
            assert await conn.fetchval("SELECT advlock_unlock(7102)") is True
        finally:
            await conn.close()
    asyncio.run(run())


def test_asyncpg_executemany_with_a_failing_row_releases_every_row_lock():
    async def run():
        conn = await apg("failed-executemany")
        try:
            # Row 1 takes 7111, row 2 takes 7112 and fails while holding it: one batch, one error.
            query = (f"SELECT advlock_try_with_timeout($1::bigint, 0, scope => 'session'), "
                     f"CASE WHEN $2 THEN {FAIL_HOLDING.replace('$1', '$1::bigint')} END")
            with pytest.raises(asyncpg.exceptions.DivisionByZeroError):
                await conn.executemany(query, [(7111, False), (7112, True)])
            assert await conn.fetchval(HOLDS, 7111) == 0
            assert await conn.fetchval(HOLDS, 7112) == 0
            # A batch that completes keeps every row's lock.
            await conn.executemany(query, [(7113, False), (7114, False)])
            assert [await conn.fetchval(HOLDS, k) for k in (7113, 7114)] == [1, 1]
            assert await conn.fetchval("SELECT advlock_unlock(7113) AND advlock_unlock(7114)") is True
        finally:
            await conn.close()
    asyncio.run(run())


def test_asyncpg_transaction_keeps_a_completed_statements_lock():
    async def run():
        conn = await apg("failed-asyncpg-tx")
        try:
            with pytest.raises(asyncpg.exceptions.DivisionByZeroError):
                async with conn.transaction():
                    assert await conn.fetchval(
                        "SELECT advlock_try_with_timeout(7121, 0, scope => 'session')") is True
                    await conn.fetchval(f"SELECT {FAIL_HOLDING}", 7121)
            assert await conn.fetchval(HOLDS, 7121) == 1
            assert await conn.fetchval("SELECT advlock_unlock(7121)") is True
        finally:
            await conn.close()
    asyncio.run(run())


def test_psycopg_autocommit_pipeline_that_fails_releases_its_lock():
    with psy("failed-pipeline-autocommit") as conn:
        with pytest.raises(psycopg.errors.DivisionByZero):
            with conn.pipeline():
                conn.execute("SELECT advlock_try_with_timeout(7131, 0, scope => 'session')")
                conn.execute(f"SELECT {FAIL_HOLDING.replace('$1', '%s')}", (7131,))
        assert psy_holds(conn, 7131) == 0


def test_psycopg_pipeline_in_a_transaction_whose_commit_fails_keeps_the_completed_lock():
    with psy("failed-pipeline-commit", autocommit=False) as conn:
        conn.execute("CREATE TEMP TABLE deferred_unique (x int UNIQUE DEFERRABLE INITIALLY DEFERRED)")
        conn.commit()
        with pytest.raises(psycopg.errors.UniqueViolation):
            with conn.pipeline():
                conn.execute("INSERT INTO deferred_unique VALUES (1), (1)")
                got = conn.execute("SELECT advlock_try_with_timeout(7141, 0, scope => 'session')")
                conn.commit()   # the deferred check fails here, in the same pipeline
        conn.rollback()
        assert got.fetchone() == (True,)   # the client was given the lock ...
        assert psy_holds(conn, 7141) == 1  # ... and keeps it, as when sent statement by statement
        assert conn.execute("SELECT advlock_unlock(7141)").fetchone() == (True,)
        conn.commit()
