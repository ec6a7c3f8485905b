"""Leases, terms and semaphore slots across a crash, a clean restart and the promotion of a
streaming standby (src/preload/lease_wal.rs; docs/reliability.md, "Leases across restarts and
failover"). Every check is on real servers this suite crashes, restarts and promotes.

The promise: every lease the server held is held again afterwards with the same id, live until
at least its TTL after the server came back (its expiry pushed, as etcd's lessor.Promote does);
its holder renews it from a new connection; a contender is not granted its key before that
expiry; release and resignation work; tokens drawn afterwards are larger than every one before.
"""
import datetime
import threading
import time

import psycopg
import pytest
from conftest import elapsed_since, now_server, wait_for_replay, wait_until

TTL_MS = 5000
LEASE_KEY, TERM_KEY, SEM_KEY, IDLE_KEY, LATE_KEY = 9001, 9002, 9003, 9004, 9005


def take(conn):
    """A lease, an election term and both slots of a semaphore: their ids by name."""
    one = lambda sql, *args: conn.execute(sql, args).fetchone()[0]  # noqa: E731
    held = {
        "lease": one("SELECT advlock_lease(%s::bigint, %s, 0)", LEASE_KEY, TTL_MS),
        "term": one("SELECT advlock_campaign(%s::bigint, %s, 0, 'node-a pid 1')", TERM_KEY, TTL_MS),
        "slot1": one("SELECT advlock_lease(%s::bigint, %s, 0, slots => 2)", SEM_KEY, TTL_MS),
        "slot2": one("SELECT advlock_lease(%s::bigint, %s, 0, slots => 2)", SEM_KEY, TTL_MS),
    }
    assert all(v is not None for v in held.values()), held
    return held


def leases(conn):
    """(key, lease, slots, candidate, expires_at) of the granted leases, by lease id."""
    rows = conn.execute("SELECT key, lease, slots, candidate, expires_at FROM advlock_leases "
                        "WHERE granted ORDER BY lease").fetchall()
    return {r[1]: r for r in rows}


def check_survived(conn, held, back_at):
    """Every lease of `held` is held with its key, slots and candidate, until at least `back_at`
    (a moment before the server came back: the restart was begun) + its TTL; contenders are refused; the holder renews
    from this (new) connection; tokens drawn now are larger than every id before."""
    rows = leases(conn)
    for name, lease in held.items():
        assert lease in rows, f"{name} {lease} not held after the change: {rows}"
        key, _, slots, candidate, expires_at = rows[lease]
        assert expires_at >= back_at + datetime.timedelta(milliseconds=TTL_MS), (name, expires_at, back_at)
    assert rows[held["term"]][3] == "node-a pid 1"
    assert rows[held["slot1"]][2] == 2
    leader = conn.execute("SELECT term, candidate FROM advlock_leader(%s::bigint)", (TERM_KEY,)).fetchone()
    assert leader == (held["term"], "node-a pid 1")
    # Contenders: the key, the term and the full semaphore are taken.
    assert conn.execute("SELECT advlock_lease(%s::bigint, 1000, 0)", (LEASE_KEY,)).fetchone()[0] is None
    assert conn.execute("SELECT advlock_campaign(%s::bigint, 1000, 0, 'node-b')", (TERM_KEY,)).fetchone()[0] is None
    assert conn.execute("SELECT advlock_lease(%s::bigint, 1000, 0, slots => 2)", (SEM_KEY,)).fetchone()[0] is None
    # No backend of this server took or renewed them yet: pid 0 (a pid of the server that logged
    # them would name a dead or unrelated process here).
    pids = conn.execute("SELECT lease, pid FROM advlock_leases WHERE lease = ANY(%s)", (list(held.values()),))
    assert {pid for _, pid in pids.fetchall()} == {0}
    # The holder renews the same ids from a connection it never used before.
    for name, lease in held.items():
        assert conn.execute("SELECT advlock_lease_renew(%s, %s)", (lease, TTL_MS)).fetchone()[0] is True, name
    assert conn.execute("SELECT pid = pg_backend_pid() FROM advlock_leases WHERE lease = %s",
                        (held["lease"],)).fetchone()[0] is True
    fresh = conn.execute("SELECT advlock_lease(%s::bigint, 1000, 0)", (LATE_KEY,)).fetchone()[0]
    assert fresh is not None and fresh > max(held.values()), (fresh, held)
    assert conn.execute("SELECT advlock_lease_release(%s)", (fresh,)).fetchone()[0] is True


def end_all(conn, held):
    assert conn.execute("SELECT advlock_lease_release(%s)", (held["lease"],)).fetchone()[0] is True
    assert conn.execute("SELECT advlock_resign(%s)", (held["term"],)).fetchone()[0] is True
    for slot in ("slot1", "slot2"):
        assert conn.execute("SELECT advlock_lease_release(%s)", (held[slot],)).fetchone()[0] is True
    assert leases(conn) == {}
    # Released means released: the keys are free again.
    got = conn.execute("SELECT advlock_lease(%s::bigint, 1000, 0)", (LEASE_KEY,)).fetchone()[0]
    assert got is not None
    conn.execute("SELECT advlock_lease_release(%s)", (got,))


def contender_waits_for_pushed_expiry(conn, idle_lease):
    """A contender for the key of a lease nobody renews after the change is granted at its
    pushed expiry, not before (server time)."""
    expires_at = leases(conn)[idle_lease][4]
    granted = conn.execute("SELECT advlock_lease(%s::bigint, 1000, %s)", (IDLE_KEY, TTL_MS * 3)).fetchone()[0]
    granted_at = now_server(conn)
    assert granted is not None and granted > idle_lease
    assert granted_at >= expires_at, (granted_at, expires_at)
    conn.execute("SELECT advlock_lease_release(%s)", (granted,))


@pytest.mark.parametrize("how", ["crash", "immediate", "clean"])
def test_leases_survive_a_restart(primary, how):
    """A crash (a backend SIGKILLed: the postmaster reinitialises and recovery replays the WAL
    into an empty table), pg_ctl stop -m immediate + start (recovery replays the WAL), or -m
    fast + start (a clean shutdown: no WAL is replayed, the postmaster saved the table)."""
    with primary.connect("failover-holder") as conn:
        held = take(conn)
        idle = conn.execute("SELECT advlock_lease(%s::bigint, %s, 0)", (IDLE_KEY, TTL_MS)).fetchone()[0]
    started = datetime.datetime.now(datetime.timezone.utc)
    if how == "crash":
        primary.crash()
    else:
        if how == "immediate":
            primary.stop_immediately()
        else:
            primary.ctl("-m", "fast", "stop")
        primary.start()
    with primary.connect("failover-holder-again") as conn:
        check_survived(conn, held, started)
        contender_waits_for_pushed_expiry(conn, idle)
        end_all(conn, held)


def test_a_checkpoint_does_not_lose_leases_granted_before_it(primary):
    """Crash recovery starts at the last checkpoint: a lease granted before it survives because
    the next lease operation after the checkpoint logged a snapshot of the table."""
    with primary.connect("failover-holder") as conn:
        held = take(conn)
        conn.execute("CHECKPOINT")
        # Any lease operation after the checkpoint (here a renewal) logs the snapshot.
        assert conn.execute("SELECT advlock_lease_renew(%s, %s)", (held["lease"], TTL_MS)).fetchone()[0]
        idle = conn.execute("SELECT advlock_lease(%s::bigint, %s, 0)", (IDLE_KEY, TTL_MS)).fetchone()[0]
        conn.execute("CHECKPOINT")
        # Released after the second checkpoint: replay must not bring it back.
        gone = conn.execute("SELECT advlock_lease(%s::bigint, %s, 0)", (LATE_KEY, TTL_MS)).fetchone()[0]
        assert conn.execute("SELECT advlock_lease_release(%s)", (gone,)).fetchone()[0] is True
        # An end is flushed by the WAL writer within wal_writer_delay (200 ms), not waited for.
        time.sleep(1)
    started = datetime.datetime.now(datetime.timezone.utc)
    primary.crash()
    with primary.connect("failover-holder-again") as conn:
        assert gone not in leases(conn)
        check_survived(conn, held, started)
        contender_waits_for_pushed_expiry(conn, idle)
        end_all(conn, held)


def test_the_snapshot_worker_covers_a_checkpoint_without_lease_operations(primary):
    """No lease operation at all after a checkpoint: the snapshot worker (a background worker
    that looks at the redo pointer every second) logs the table, so a crash a few seconds later
    still finds every lease."""
    with primary.connect("failover-holder") as conn:
        held = take(conn)
        conn.execute("CHECKPOINT")
    time.sleep(2.5)
    started = datetime.datetime.now(datetime.timezone.utc)
    primary.crash()
    with primary.connect("failover-holder-again") as conn:
        check_survived(conn, held, started)
        end_all(conn, held)


def test_leases_are_replayed_on_a_standby_and_kept_by_its_promotion(clusters):
    """A hot standby shows the primary's leases and leader (read-only: taking, renewing,
    releasing raise 25006); an observer there sees a term end; then the primary dies, the
    standby is promoted (pg_ctl promote) and every lease is held there: the holder renews the
    same ids, contenders are refused, tokens are larger; no new key is granted during
    advlock.lease_lock_delay (1.5 s)."""
    primary, standby = clusters
    with primary.connect("failover-holder") as p:
        held = take(p)
        before_max = max(held.values())
        short = p.execute("SELECT advlock_campaign(%s::bigint, %s, 0, 'short')", (IDLE_KEY, TTL_MS)).fetchone()[0]
        wait_for_replay(primary, standby)
        with standby.connect("failover-reader") as s:
            rows = leases(s)
            assert set(held.values()) | {short} == set(rows), rows
            assert s.execute("SELECT DISTINCT pid FROM advlock_leases").fetchall() == [(0,)]
            assert s.execute("SELECT term, candidate FROM advlock_leader(%s::bigint)",
                             (TERM_KEY,)).fetchone() == (held["term"], "node-a pid 1")
            for sql in ("SELECT advlock_lease_renew(%s, 1000)" % held["lease"],
                        "SELECT advlock_lease_release(%s)" % held["lease"],
                        "SELECT advlock_resign(%s)" % held["term"],
                        "SELECT advlock_lease(77::bigint, 1000, 0)",
                        "SELECT advlock_campaign(77::bigint, 1000, 0, 'x')"):
                with pytest.raises(psycopg.errors.ReadOnlySqlTransaction):
                    s.execute(sql)
            # An observer on the standby: the known term holds, then ends by the primary's
            # resignation, replayed.
            observed = {}

            def observe():
                with standby.connect("failover-observer") as o:
                    observed["row"] = o.execute(
                        "SELECT changed, term FROM advlock_observe_leader(%s::bigint, 20000, %s)",
                        (IDLE_KEY, short)).fetchone()
            t = threading.Thread(target=observe)
            t.start()
            time.sleep(0.5)
            assert "row" not in observed
            assert p.execute("SELECT advlock_resign(%s)", (short,)).fetchone()[0] is True
            t.join(20)
            assert observed["row"] == (True, None)
            # A renewal on the primary moves the standby's expiry too.
            p.execute("SELECT advlock_lease_renew(%s, %s)", (held["lease"], TTL_MS * 2))
            renewed_expiry = p.execute("SELECT expires_at FROM advlock_leases WHERE lease = %s",
                                       (held["lease"],)).fetchone()[0]
            wait_for_replay(primary, standby)
            assert leases(s)[held["lease"]][4] == renewed_expiry
    # Failover: the primary dies; the standby is promoted.
    primary.stop_immediately()
    with standby.connect("failover-clock") as s:
        promote_started = now_server(s)
    t0 = time.monotonic()
    standby.ctl("promote")
    with standby.connect("failover-new-primary") as n:
        assert n.execute("SELECT pg_is_in_recovery()").fetchone()[0] is False
        # The lock delay: a key nobody held is not granted until 1.5 s after the promotion.
        fresh = n.execute("SELECT advlock_lease(%s::bigint, 1000, 10000)", (LATE_KEY,)).fetchone()[0]
        waited = elapsed_since(t0)
        assert fresh is not None and waited >= 1.5 - 0.05, waited
        # Tokens of the new timeline: larger than every one before.
        assert fresh > before_max
        n.execute("SELECT advlock_lease_release(%s)", (fresh,))
        check_survived(n, held, promote_started)
        end_all(n, held)
    # The promoted server's leases survive its own crash too (its first operations logged a
    # snapshot on the new timeline).
    with standby.connect("failover-new-primary") as n:
        again = take(n)
    started = datetime.datetime.now(datetime.timezone.utc)
    standby.crash()
    with standby.connect("failover-new-primary") as n:
        check_survived(n, again, started)
        end_all(n, again)


def test_a_grant_waits_for_the_synchronous_standby(clusters):
    """With synchronous_standby_names, advlock_lease returns once the grant's WAL is on the
    synchronous standby: with the standby down it waits (a cancel ends the wait with
    PostgreSQL's WARNING, as for a commit, and the lease stays granted); with
    synchronous_commit = off it does not wait."""
    primary, standby = clusters
    with primary.connect("failover-sync") as p:
        p.execute("ALTER SYSTEM SET synchronous_standby_names = '*'")
        p.execute("SELECT pg_reload_conf()")
        wait_until(lambda: p.execute("SELECT count(*) FROM pg_stat_replication WHERE sync_state = 'sync'")
                   .fetchone()[0] == 1, timeout=30, interval=0.1, what="the standby to be synchronous")
        first = p.execute("SELECT advlock_lease(%s::bigint, %s, 0)", (LEASE_KEY, TTL_MS)).fetchone()[0]
        assert first is not None
        standby.stop()
        notices = []
        p.add_notice_handler(lambda d: notices.append(d.message_primary))
        p.execute("SET statement_timeout = 1500")
        t0 = time.monotonic()
        second = p.execute("SELECT advlock_lease(%s::bigint, %s, 0)", (TERM_KEY, TTL_MS)).fetchone()[0]
        waited = elapsed_since(t0)
        p.execute("RESET statement_timeout")
        assert waited >= 1.4, waited
        assert any("synchronous replication" in n for n in notices), notices
        assert second is not None and second > first
        # synchronous_commit = off: a grant is as durable as such a commit, and does not wait.
        p.execute("SET synchronous_commit = off")
        t0 = time.monotonic()
        third = p.execute("SELECT advlock_lease(%s::bigint, %s, 0)", (SEM_KEY, TTL_MS)).fetchone()[0]
        assert elapsed_since(t0) < 1.0 and third is not None
        p.execute("RESET synchronous_commit")
        assert set(leases(p)) == {first, second, third}
        p.execute("ALTER SYSTEM RESET synchronous_standby_names")
        p.execute("SELECT pg_reload_conf()")
        for lease in (first, second, third):
            assert p.execute("SELECT advlock_lease_release(%s)", (lease,)).fetchone()[0] is True
