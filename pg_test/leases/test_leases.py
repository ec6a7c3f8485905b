"""Leases between real sessions: hand-off on release and on expiry, first come first served
across slots, leases that outlive the backend that took them, privileges, cancellation and
termination of a waiter, the capacity limit, and PgBouncer in transaction mode.

Waiting for a lease is not a lock-manager wait (pg_isolation_regress cannot see it, so these
run here): a waiter is observed through advlock_leases (its row, granted = false), and every
wait below is bounded.
"""
import threading
import time

import psycopg
import pytest

import pgsupport
from conftest import PRELOADED, needs_preload
from pgsupport import psy


def waiting_pids(admin, key):
    return [r[0] for r in admin.execute(
        "SELECT pid FROM advlock_leases WHERE key = %s AND NOT granted ORDER BY waiting_since",
        (key,)).fetchall()]


def wait_for_waiters(admin, key, n):
    return pgsupport.wait_until(lambda: len(waiting_pids(admin, key)) >= n and waiting_pids(admin, key),
                                what=f"{n} waiter(s) for lease key {key}")


class Waiter(threading.Thread):
    """One session asking for a lease in the background; `.result` is the lease id or None."""

    def __init__(self, app, key, ttl_ms=60000, timeout_ms=10000, slots=1):
        super().__init__(daemon=True)
        self.conn = psy(app)
        self.pid = self.conn.info.backend_pid
        self.args = (key, ttl_ms, timeout_ms, slots)
        self.result = self.error = self.got_at = None
        self.start()

    def run(self):
        try:
            self.result = self.conn.execute("SELECT advlock_lease(%s, %s, %s, slots => %s)",
                                            self.args).fetchone()[0]
            self.got_at = time.monotonic()
        except psycopg.Error as e:
            self.error = e

    def finish(self, timeout=15):
        self.join(timeout)
        assert not self.is_alive(), "the waiter did not return"
        return self.result

    def close(self):
        self.conn.close()


def release(conn, lease):
    return conn.execute("SELECT advlock_lease_release(%s)", (lease,)).fetchone()[0]


@pytest.mark.skipif(PRELOADED, reason="checks the behaviour without preload")
def test_without_preload_every_lease_function_raises_55000(admin):
    for sql in ("SELECT advlock_lease(1, 1000, 0)", "SELECT advlock_lease('ns', 'id', 1000, 0)",
                "SELECT advlock_lease_renew(1, 1000)", "SELECT advlock_lease_release(1)",
                "SELECT * FROM advlock_lease_stats"):
        with pytest.raises(psycopg.errors.ObjectNotInPrerequisiteState, match="shared_preload_libraries"):
            admin.execute(sql)
    assert admin.execute("SELECT count(*) FROM advlock_leases").fetchone()[0] == 0


@needs_preload
def test_release_hands_the_lease_to_the_oldest_waiter_with_a_larger_token(admin):
    first = admin.execute("SELECT advlock_lease(7001, 60000, 0)").fetchone()[0]
    b = Waiter("advlock-test/lease-b", 7001)
    wait_for_waiters(admin, 7001, 1)
    c = Waiter("advlock-test/lease-c", 7001)
    assert wait_for_waiters(admin, 7001, 2) == [b.pid, c.pid]
    released_at = time.monotonic()
    assert release(admin, first) is True
    second = b.finish()
    assert second > first
    assert waiting_pids(admin, 7001) == [c.pid]          # c keeps waiting, behind b
    assert release(admin, second) is True
    third = c.finish()
    assert third > second
    assert b.got_at - released_at < 1.0                   # woken, not polled (bench measures it)
    assert release(admin, third) is True
    b.close(), c.close()


@needs_preload
def test_expiry_hands_the_lease_to_the_waiter_and_the_late_renewal_fails(admin):
    first = admin.execute("SELECT advlock_lease(7002, 300, 0)").fetchone()[0]
    started = time.monotonic()
    b = Waiter("advlock-test/lease-expiry", 7002, timeout_ms=5000)
    second = b.finish()
    waited = time.monotonic() - started
    assert second is not None and second > first
    assert waited >= 0.25, waited                          # not before the TTL ran out
    assert admin.execute("SELECT advlock_lease_renew(%s, 1000)", (first,)).fetchone()[0] is False
    assert release(admin, first) is False
    assert release(admin, second) is True
    b.close()


@needs_preload
def test_slots_are_first_come_first_served(admin):
    held = [admin.execute("SELECT advlock_lease(7003, 60000, 0, slots => 2)").fetchone()[0] for _ in range(2)]
    assert admin.execute("SELECT advlock_lease(7003, 60000, 0, slots => 2)").fetchone()[0] is None
    waiters = []
    for i in range(3):
        waiters.append(Waiter(f"advlock-test/slot-{i}", 7003, slots=2))
        wait_for_waiters(admin, 7003, i + 1)
    assert waiting_pids(admin, 7003) == [w.pid for w in waiters]
    assert release(admin, held[0]) is True
    got0 = waiters[0].finish()
    assert waiting_pids(admin, 7003) == [waiters[1].pid, waiters[2].pid]
    assert release(admin, held[1]) is True
    got1 = waiters[1].finish()
    assert waiting_pids(admin, 7003) == [waiters[2].pid]
    assert release(admin, got0) is True
    got2 = waiters[2].finish()
    assert got0 < got1 < got2
    # A different slot count for a key in use is an error naming both counts.
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="3 slots .* with 2"):
        admin.execute("SELECT advlock_lease(7003, 60000, 0, slots => 3)")
    for lease in (got1, got2):
        assert release(admin, lease) is True
    for w in waiters:
        w.close()


@needs_preload
def test_a_lease_outlives_the_backend_that_took_it(admin):
    with psy("advlock-test/lease-taker") as taker:
        lease = taker.execute("SELECT advlock_lease('report', 'daily', 60000, 0)").fetchone()[0]
        taker_pid = taker.info.backend_pid
    pgsupport.wait_until(lambda: not admin.execute(
        "SELECT count(*) FROM pg_stat_activity WHERE pid = %s", (taker_pid,)).fetchone()[0], what="taker gone")
    row = admin.execute("SELECT label, granted, pid, application_name, expires_at > now() "
                        "FROM advlock_leases WHERE lease = %s", (lease,)).fetchone()
    assert row == ("report:daily", True, taker_pid, "advlock-test/lease-taker", True)
    assert admin.execute("SELECT advlock_lease('report', 'daily', 60000, 0)").fetchone()[0] is None
    assert admin.execute("SELECT advlock_lease_renew(%s, 60000)", (lease,)).fetchone()[0] is True
    assert admin.execute("SELECT pid FROM advlock_leases WHERE lease = %s", (lease,)).fetchone()[0] == \
        admin.info.backend_pid                             # the last renewal is shown
    assert release(admin, lease) is True


@needs_preload
def test_only_the_leases_role_and_its_members_may_renew_or_release(admin):
    admin.execute("DROP ROLE IF EXISTS lease_owner, lease_member, lease_other")
    admin.execute("CREATE ROLE lease_owner LOGIN; CREATE ROLE lease_other LOGIN; "
                  "CREATE ROLE lease_member LOGIN IN ROLE lease_owner")
    try:
        def as_role(role):
            return psycopg.connect(pgsupport.conninfo(f"advlock-test/{role}", user=role), autocommit=True)
        with as_role("lease_owner") as owner, as_role("lease_other") as other, as_role("lease_member") as member:
            lease = owner.execute("SELECT advlock_lease(7004, 60000, 0)").fetchone()[0]
            for sql in ("SELECT advlock_lease_renew(%s, 1000)", "SELECT advlock_lease_release(%s)"):
                with pytest.raises(psycopg.errors.InsufficientPrivilege, match=f"lease {lease}") as e:
                    other.execute(sql, (lease,))
                assert 'belongs to role "lease_owner"' in e.value.diag.message_detail
            assert member.execute("SELECT advlock_lease_renew(%s, 60000)", (lease,)).fetchone()[0] is True
            assert member.execute("SELECT advlock_lease_release(%s)", (lease,)).fetchone()[0] is True
            # An id that is not a live lease is simply false, for anyone.
            assert other.execute("SELECT advlock_lease_release(%s)", (lease,)).fetchone()[0] is False
    finally:
        admin.execute("DROP ROLE IF EXISTS lease_owner, lease_member, lease_other")


@needs_preload
@pytest.mark.parametrize("how", ["cancel", "terminate"])
def test_a_cancelled_or_terminated_waiter_leaves_nothing_queued(admin, how):
    lease = admin.execute("SELECT advlock_lease(7005, 60000, 0)").fetchone()[0]
    w = Waiter(f"advlock-test/lease-{how}", 7005)
    wait_for_waiters(admin, 7005, 1)
    admin.execute(f"SELECT pg_{how}_backend(%s)", (w.pid,))
    w.finish()
    assert w.result is None and w.error is not None
    pgsupport.wait_until(lambda: not waiting_pids(admin, 7005), what="the waiter to leave the queue")
    if how == "cancel":
        assert isinstance(w.error, psycopg.errors.QueryCanceled)
        # The connection stays usable and holds nothing.
        assert w.conn.execute("SELECT count(*) FROM advlock_leases WHERE pid = pg_backend_pid()").fetchone()[0] == 0
    # The release goes to nobody: nothing was left reserved for the waiter.
    assert release(admin, lease) is True
    assert admin.execute("SELECT count(*) FROM advlock_leases WHERE key = 7005").fetchone()[0] == 0
    w.close()


@needs_preload
def test_a_full_lease_table_is_a_clear_error_and_takes_nothing(admin):
    # Leases that expired unnoticed (other tests' abandoned ones) do not count against it.
    capacity = admin.execute("SELECT capacity - held - waiting FROM advlock_lease_stats").fetchone()[0]
    leases = admin.execute("SELECT array_agg(advlock_lease(k, 60000, 0)) FROM generate_series(1, %s) k",
                           (capacity,)).fetchone()[0]
    try:
        assert len(leases) == capacity and None not in leases
        with pytest.raises(psycopg.errors.OutOfMemory, match="all .* lease entries are in use") as e:
            admin.execute("SELECT advlock_lease('full', 'x', 60000, 0)")
        assert "advlock.max_leases" in e.value.diag.message_hint
        assert admin.execute("SELECT count(*) FROM advlock_leases WHERE NOT granted").fetchone()[0] == 0
    finally:
        admin.execute("SELECT advlock_lease_release(l) FROM unnest(%s::bigint[]) l", (leases,))


@needs_preload
def test_leases_through_pgbouncer_transaction_mode_and_the_fenced_write(admin, pgbouncer):
    """Take, renew and release through a transaction-mode pooler (each statement may run on
    another server connection); a worker that stops renewing loses the lease to the next one,
    whose fenced write wins and whose stale write is refused."""
    admin.execute("DROP TABLE IF EXISTS lease_resource")
    admin.execute("CREATE TABLE lease_resource (id int PRIMARY KEY, fence bigint NOT NULL, written_by text)")
    admin.execute("INSERT INTO lease_resource VALUES (1, 0, NULL)")
    fenced = ("UPDATE lease_resource SET fence = %s, written_by = %s WHERE id = 1 AND fence < %s")
    try:
        with pgbouncer.connect("advlock-test/bouncer-a") as a, pgbouncer.connect("advlock-test/bouncer-b") as b, \
                pgbouncer.connect("advlock-test/bouncer-x") as x:
            # Taken inside a transaction that pins one server connection; renewed meanwhile
            # through another client, which therefore runs on the other server connection.
            a.execute("BEGIN")
            taken_on = a.execute("SELECT pg_backend_pid()").fetchone()[0]
            lease_a = a.execute("SELECT advlock_lease('job', 'nightly', 300, 0)").fetchone()[0]
            renewed_on = x.execute("SELECT pg_backend_pid()").fetchone()[0]
            assert renewed_on != taken_on
            assert x.execute("SELECT advlock_lease_renew(%s, 300)", (lease_a,)).fetchone()[0] is True
            a.execute("COMMIT")
            assert a.execute(fenced, (lease_a, "a", lease_a)).rowcount == 1
            # a stops renewing (it is "paused"); b waits and gets the lease when a's expires.
            lease_b = b.execute("SELECT advlock_lease('job', 'nightly', 60000, 5000)").fetchone()[0]
            assert lease_b > lease_a
            assert b.execute(fenced, (lease_b, "b", lease_b)).rowcount == 1
            # a wakes up: its renewal says it lost the lease, and its fenced write is refused.
            assert a.execute("SELECT advlock_lease_renew(%s, 300)", (lease_a,)).fetchone()[0] is False
            assert a.execute(fenced, (lease_a, "a-stale", lease_a)).rowcount == 0
            assert b.execute("SELECT advlock_lease_release(%s)", (lease_b,)).fetchone()[0] is True
        assert admin.execute("SELECT fence, written_by FROM lease_resource").fetchone() == (lease_b, "b")
    finally:
        admin.execute("DROP TABLE IF EXISTS lease_resource")


@needs_preload
def test_create_index_concurrently_does_not_wait_for_a_snapshot_free_lease_waiter(admin):
    """The holder builds an index concurrently while another session waits for its lease. A
    waiter inside a statement (SELECT advlock_lease) holds that statement's snapshot: CIC waits
    for it until its wait times out. CALL advlock_wait_lease commits first and holds none: CIC
    completes while it still waits, and it gets the lease when the holder releases."""
    admin.execute("DROP TABLE IF EXISTS cic_target")
    admin.execute("CREATE TABLE cic_target AS SELECT generate_series(1, 100) AS x")
    try:
        lease = admin.execute("SELECT advlock_lease(7010, 60000, 0)").fetchone()[0]
        # In a statement: CIC cannot finish before the waiter gives up (timeout 1 s).
        w = Waiter("advlock-test/cic-select", 7010, timeout_ms=1000)
        wait_for_waiters(admin, 7010, 1)
        admin.execute("CREATE INDEX CONCURRENTLY cic_a ON cic_target (x)")
        assert waiting_pids(admin, 7010) == []            # CIC returned only after the wait ended,
        assert w.finish() is None                         # by timing out
        w.close()
        # With CALL: CIC returns while the waiter still waits.
        with psy("advlock-test/cic-call") as caller:
            result = {}
            t = threading.Thread(target=lambda: result.update(
                lease=caller.execute("CALL advlock_wait_lease(7010, 60000, 20000)").fetchone()[0]), daemon=True)
            t.start()
            wait_for_waiters(admin, 7010, 1)
            admin.execute("CREATE INDEX CONCURRENTLY cic_b ON cic_target (x)")
            assert t.is_alive() and waiting_pids(admin, 7010) == [caller.info.backend_pid]
            assert release(admin, lease) is True
            t.join(15)
            assert result["lease"] > lease
            assert release(admin, result["lease"]) is True
    finally:
        admin.execute("DROP TABLE IF EXISTS cic_target")


@needs_preload
def test_wait_procedures_refuse_inside_a_transaction_block(admin):
    admin.execute("BEGIN")
    try:
        with pytest.raises(psycopg.errors.ActiveSqlTransaction, match="outside a transaction block"):
            admin.execute("CALL advlock_wait_lease(7011, 1000, 0)")
    finally:
        admin.execute("ROLLBACK")


@pytest.mark.parametrize("call", [
    "CALL advlock_wait_lock(NULL, 0)", "CALL advlock_wait_lock(1, NULL)", "CALL advlock_wait_lock(1, 0, NULL)",
    "CALL advlock_wait_lease(NULL, 1000, 0)", "CALL advlock_wait_lease(1, NULL, 0)",
    "CALL advlock_wait_lease(1, 1000, NULL)", "CALL advlock_wait_lease(1, 1000, 0, NULL)"])
def test_wait_procedures_name_a_null_argument_before_committing(admin, call):
    """Checked before the procedure commits anything, preloaded or not: 22004 naming it."""
    with pytest.raises(psycopg.errors.NullValueNotAllowed) as e:
        admin.execute(call)
    assert "must not be null" in e.value.diag.message_primary and e.value.diag.message_hint
