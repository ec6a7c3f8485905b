"""Scenario 4: PgBouncer in transaction pooling mode (pool of 2 server connections).

Transaction-scoped advlock locks serialise correctly through it. A session-scoped lock taken
through it stays on whichever server connection ran the statement: the client can neither
rely on it nor release it reliably, and advlock_holders flags that server connection as an
idle holder."""
import asyncio
import threading
import time

import asyncpg
import psycopg
import pytest

import pgsupport
from pgsupport import holders_of, key_for, psy, wait_until

CLIENTS = 8
ITERATIONS = 25


@pytest.fixture
def counter_table():
    with psy("advlock-test/bouncer/setup") as conn:
        conn.execute("DROP TABLE IF EXISTS advlock_test_counter")
        conn.execute("CREATE TABLE advlock_test_counter (id int PRIMARY KEY, v int NOT NULL)")
        conn.execute("INSERT INTO advlock_test_counter VALUES (1, 0)")
    yield
    with psy("advlock-test/bouncer/setup") as conn:
        conn.execute("DROP TABLE advlock_test_counter")


def run_counter_clients(pgbouncer, key, use_lock: bool):
    """CLIENTS threads, each with its own PgBouncer connection, each doing ITERATIONS
    read-then-write increments. Returns (final value, server pids seen, errors)."""
    server_pids, errors = set(), []
    barrier = threading.Barrier(CLIENTS, timeout=15)

    def client(i):
        try:
            with pgbouncer.connect(f"advlock-test/bouncer/counter-{i}") as conn:
                barrier.wait()
                for _ in range(ITERATIONS):
                    with conn.transaction():
                        if use_lock:
                            got = conn.execute("SELECT advlock_try_with_timeout(%s, 5000)", (key,)).fetchone()[0]
                            assert got is True, "lock not obtained within 5 s"
                        pid, v = conn.execute(
                            "SELECT pg_backend_pid(), v FROM advlock_test_counter WHERE id = 1").fetchone()
                        server_pids.add(pid)
                        conn.execute("UPDATE advlock_test_counter SET v = %s WHERE id = 1", (v + 1,))
        except Exception as e:  # reported by the caller
            errors.append(repr(e))

    threads = [threading.Thread(target=client, args=(i,)) for i in range(CLIENTS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not any(t.is_alive() for t in threads), "a client hung"
    with psy("advlock-test/bouncer/check") as conn:
        final = conn.execute("SELECT v FROM advlock_test_counter WHERE id = 1").fetchone()[0]
        conn.execute("UPDATE advlock_test_counter SET v = 0 WHERE id = 1")
    return final, server_pids, errors


def test_xact_locks_serialise_through_pgbouncer(pgbouncer, counter_table, measure):
    key = key_for("bouncer-counter")
    started = time.monotonic()
    final, server_pids, errors = run_counter_clients(pgbouncer, key, use_lock=True)
    elapsed = time.monotonic() - started
    assert not errors, errors
    assert final == CLIENTS * ITERATIONS
    # Eight clients really shared PgBouncer's two server connections.
    assert 1 <= len(server_pids) <= 2, server_pids
    measure(f"{CLIENTS}x{ITERATIONS} locked increments through PgBouncer (s)", round(elapsed, 3))
    measure("server connections used", len(server_pids))

    # The same workload without the lock, for contrast (not asserted: lost updates are likely,
    # not certain).
    final_unlocked, _, errors = run_counter_clients(pgbouncer, key, use_lock=False)
    assert not errors, errors
    measure(f"counter without the lock (expected {CLIENTS * ITERATIONS})", final_unlocked)


def test_session_lock_leaks_onto_pgbouncer_server_connection(pgbouncer, admin, measure):
    key = key_for("bouncer-session-leak")
    leaky_app = "advlock-test/bouncer/leaky-client"
    leaky = pgbouncer.connect(leaky_app)
    try:
        server_pid, got = leaky.execute(
            "SELECT pg_backend_pid(), advlock_try_with_timeout(%s, 0, scope => 'session')", (key,)).fetchone()
        assert got is True
        # The statement is over, so PgBouncer gave the server connection back to its pool, lock
        # and all, while the client stays connected and believes it holds the lock.
        servers = pgbouncer.show("SERVERS")
        assert server_pid in {s["remote_pid"] for s in servers}, servers
        assert {s["state"] for s in servers if s["remote_pid"] == server_pid} == {"idle"}, servers

        # Two other clients occupy both server connections of the pool (size 2), so one of them
        # runs on the leaking one: there advlock sees its own backend's lock and grants it again.
        a = pgbouncer.connect("advlock-test/bouncer/client-a")
        b = pgbouncer.connect("advlock-test/bouncer/client-b")
        try:
            with a.transaction(), b.transaction():
                pa = a.execute("SELECT pg_backend_pid()").fetchone()[0]
                pb = b.execute("SELECT pg_backend_pid()").fetchone()[0]
                assert server_pid in (pa, pb) and pa != pb
                ra = a.execute("SELECT advlock_try_with_timeout(%s, 0)", (key,)).fetchone()[0]
                rb = b.execute("SELECT advlock_try_with_timeout(%s, 0)", (key,)).fetchone()[0]
                # Mutual exclusion is gone: the client on the leaking server connection "gets" a
                # lock that leaky-client still believes it holds.
                assert (ra, rb) == ((True, False) if pa == server_pid else (False, True))
            on_leaking = "advlock-test/bouncer/client-a" if pa == server_pid else "advlock-test/bouncer/client-b"
        finally:
            a.close()
            b.close()

        # advlock_holders flags the server connection as an idle holder; its application_name
        # is whatever client PgBouncer last linked to it, not the one that took the lock.
        def flagged():
            rows = [r for r in holders_of(admin, key) if r["is_idle_holder"]]
            return rows[0] if rows else None

        row = wait_until(flagged, timeout=5, what="the PgBouncer server connection to be flagged")
        measure("application_name of the leaking server connection", row["application_name"])
        assert row["pid"] == server_pid
        assert row["granted"] and row["backend_state"] == "idle"
        assert row["application_name"] == on_leaking
        assert str(row["client_addr"]) == "127.0.0.1"
        # Nor does `query` show the statement that took the lock: it is the last client's.
        assert row["query"] == "COMMIT", row["query"]
        server_row = [s for s in pgbouncer.show("SERVERS") if s["remote_pid"] == server_pid]
        assert server_row, "the holder is one of PgBouncer's server connections"
        measure("SHOW SERVERS application_name of that connection", server_row[0].get("application_name"))
        # The server connection's client port ties it to PgBouncer's side of the socket.
        port = admin.execute("SELECT client_port FROM pg_stat_activity WHERE pid = %s", (server_pid,)).fetchone()[0]
        assert port == server_row[0]["local_port"]

        # The remedy on the server side: terminate it. PgBouncer opens a fresh server connection.
        done = admin.execute(
            "SELECT pid, keys, terminated FROM advlock_terminate_idle_holders('200ms', dry_run => false)").fetchall()
        assert done == [(server_pid, [key], True)]
    finally:
        leaky.close()
    wait_until(lambda: holders_of(admin, key) == [], timeout=5, what="the leaked lock to go")

    def bouncer_works():
        try:
            with pgbouncer.connect("advlock-test/bouncer/after") as c:
                return c.execute("SELECT pg_backend_pid()").fetchone()[0] != server_pid
        except psycopg.OperationalError:
            return False

    wait_until(bouncer_works, timeout=10, interval=0.1, what="PgBouncer to serve again")


def test_asyncpg_xact_locks_through_pgbouncer(pgbouncer, counter_table):
    """asyncpg through transaction pooling: statement_cache_size=0, everything inside explicit
    transactions (each unnamed statement then stays on one server connection)."""
    key = key_for("bouncer-counter-asyncpg")
    clients, iterations = 4, 25

    async def client(i):
        conn = await asyncpg.connect(host="127.0.0.1", port=pgbouncer.port, user="postgres",
                                     database=pgsupport.DATABASE, statement_cache_size=0, timeout=10,
                                     server_settings={"application_name": f"advlock-test/bouncer/asyncpg-{i}"})
        try:
            for _ in range(iterations):
                async with conn.transaction():
                    assert await conn.fetchval("SELECT advlock_try_with_timeout($1::bigint, 5000)", key) is True
                    v = await conn.fetchval("SELECT v FROM advlock_test_counter WHERE id = 1")
                    await conn.execute("UPDATE advlock_test_counter SET v = $1 WHERE id = 1", v + 1)
        finally:
            await conn.close()

    async def main():
        await asyncio.wait_for(asyncio.gather(*(client(i) for i in range(clients))), 60)

    asyncio.run(main())
    with psy("advlock-test/bouncer/check") as conn:
        assert conn.execute("SELECT v FROM advlock_test_counter WHERE id = 1").fetchone()[0] == clients * iterations
