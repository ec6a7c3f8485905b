"""Leader election between real sessions: an observer (advlock_observe_leader, CALL
advlock_wait_leader) sleeping on its latch is woken by a resignation, by a grant to a waiting
candidate (it reports the new term, not a gap), by an expiry nobody else notices, and by the
first term of a key nobody led; the wake latency by server time; the snapshot-free CALL form;
NOTIFY advlock_leader; cancellation; PgBouncer in transaction mode.

An observer's wait is a latch wait, not a lock-manager wait (pg_isolation_regress cannot see it
as waiting, so these run here): a sleeping observer is recognised by its backend's
wait_event_type 'Extension' in pg_stat_activity, and every wait below is bounded.
"""
import json
import statistics
import threading
import time

import psycopg
import pytest

import pgsupport
from conftest import needs_preload
from pgsupport import psy

OBSERVE = ("SELECT changed, term, candidate, clock_timestamp() FROM advlock_observe_leader(%s, %s, %s)")


class Observer(threading.Thread):
    """One session observing key `key` from `known` in the background; `.result` is the row
    (changed, term, candidate, server time when it returned)."""

    def __init__(self, app, key, known, timeout_ms=10000, conn=None):
        super().__init__(daemon=True)
        self.conn = conn or psy(app)
        self.pid = self.conn.info.backend_pid
        self.args = (key, timeout_ms, known)
        self.result = self.error = None
        self.start()

    def run(self):
        try:
            self.result = self.conn.execute(OBSERVE, self.args).fetchone()
        except psycopg.Error as e:
            self.error = e

    def finish(self, timeout=15):
        self.join(timeout)
        assert not self.is_alive(), "the observer did not return"
        assert self.error is None, self.error
        return self.result

    def close(self):
        self.conn.close()


def sleeping(admin, pid):
    """Whether backend `pid` sleeps on its latch in an advlock wait."""
    row = admin.execute("SELECT state, wait_event_type FROM pg_stat_activity WHERE pid = %s", (pid,)).fetchone()
    return row is not None and row[0] == "active" and row[1] == "Extension"


def wait_sleeping(admin, pid):
    pgsupport.wait_until(lambda: sleeping(admin, pid), what=f"backend {pid} sleeping in an advlock wait")


def campaign(conn, key, candidate, ttl_ms=60000, timeout_ms=0):
    return conn.execute("SELECT advlock_campaign(%s, %s, %s, %s)", (key, ttl_ms, timeout_ms, candidate)).fetchone()[0]


def resign_at(conn, term):
    """Resigns; returns the server time just before the resignation."""
    at, ok = conn.execute("SELECT clock_timestamp(), advlock_resign(%s)", (term,)).fetchone()
    assert ok is True
    return at


def term_stats(admin):
    return admin.execute("SELECT terms_started, terms_expired, terms_resigned FROM advlock_lease_stats").fetchone()


@needs_preload
def test_observer_is_woken_by_a_resignation(admin, measure):
    term = campaign(admin, 7101, "pod-a")
    o = Observer("advlock-test/observe-resign", 7101, term)
    try:
        wait_sleeping(admin, o.pid)
        before = term_stats(admin)
        resigned_at = resign_at(admin, term)
        changed, new_term, candidate, returned_at = o.finish()
        assert (changed, new_term, candidate) == (True, None, None)
        latency_ms = (returned_at - resigned_at).total_seconds() * 1000
        measure("resign -> observer returned (ms, server time)", round(latency_ms, 3))
        assert latency_ms < 500                              # woken, not polled (bench: p50/p99)
        after = term_stats(admin)
        assert (after[0] - before[0], after[1] - before[1], after[2] - before[2]) == (0, 0, 1)
    finally:
        o.close()


@needs_preload
def test_observer_is_woken_by_the_grant_and_reports_the_new_term_not_a_gap(admin):
    """A candidate waits in advlock_campaign; the leader resigns; the key goes to the candidate,
    and the observer returns the candidate's term (the moment between the grant and the token
    draw is not reported as "no leader")."""
    term = campaign(admin, 7102, "pod-a")
    candidate_conn = psy("advlock-test/observe-candidate")
    o = Observer("advlock-test/observe-grant", 7102, term)
    result = {}
    t = threading.Thread(target=lambda: result.update(term=campaign(candidate_conn, 7102, "pod-b", timeout_ms=10000)))
    t.start()
    try:
        wait_sleeping(admin, o.pid)
        wait_sleeping(admin, candidate_conn.info.backend_pid)
        resign_at(admin, term)
        changed, new_term, candidate, _ = o.finish()
        t.join(15)
        assert changed is True and candidate == "pod-b"
        assert new_term == result["term"] and new_term > term
        # The next observer from that term sleeps again (nothing changed).
        again = admin.execute(OBSERVE, (7102, 50, new_term)).fetchone()
        assert again[:3] == (False, new_term, "pod-b")
        assert admin.execute("SELECT advlock_resign(%s)", (new_term,)).fetchone()[0] is True
    finally:
        o.close()
        candidate_conn.close()


@needs_preload
def test_observer_is_woken_by_an_expiry_that_nobody_else_notices(admin, measure):
    """No candidate waits and nobody touches the key: the observer wakes at the leader's
    expires_at itself, ends the term (counted as expired) and returns "no leader"."""
    term = campaign(admin, 7103, "pod-a", ttl_ms=400)
    expires_at = admin.execute("SELECT expires_at FROM advlock_leader(7103)").fetchone()[0]
    before = term_stats(admin)
    o = Observer("advlock-test/observe-expiry", 7103, term)
    try:
        changed, new_term, candidate, returned_at = o.finish()
        assert (changed, new_term, candidate) == (True, None, None)
        late_ms = (returned_at - expires_at).total_seconds() * 1000
        measure("expires_at -> observer returned (ms, server time)", round(late_ms, 3))
        assert 0 <= late_ms < 500
        after = term_stats(admin)
        assert after[1] - before[1] == 1                     # terms_expired
        assert admin.execute("SELECT advlock_lease_renew(%s, 1000)", (term,)).fetchone()[0] is False
    finally:
        o.close()


@needs_preload
def test_an_expiry_hands_the_key_to_the_waiting_candidate_and_the_observer_sees_its_term(admin):
    term = campaign(admin, 7104, "pod-a", ttl_ms=300)
    candidate_conn = psy("advlock-test/observe-expiry-candidate")
    result = {}
    t = threading.Thread(target=lambda: result.update(term=campaign(candidate_conn, 7104, "pod-b", timeout_ms=10000)))
    t.start()
    o = Observer("advlock-test/observe-expiry-grant", 7104, term)
    try:
        changed, new_term, candidate, _ = o.finish()
        t.join(15)
        assert changed is True and candidate == "pod-b" and new_term == result["term"] > term
        assert admin.execute("SELECT advlock_resign(%s)", (new_term,)).fetchone()[0] is True
    finally:
        o.close()
        candidate_conn.close()


@needs_preload
def test_observer_of_a_key_nobody_leads_is_woken_by_the_first_term(admin):
    o = Observer("advlock-test/observe-first", 7105, None)
    try:
        wait_sleeping(admin, o.pid)
        term = campaign(admin, 7105, "pod-a")
        changed, new_term, candidate, _ = o.finish()
        assert (changed, new_term, candidate) == (True, term, "pod-a")
    finally:
        admin.execute("SELECT advlock_resign(%s)", (term,))
        o.close()


@needs_preload
def test_observers_of_other_keys_and_renewals_do_not_end_the_wait(admin):
    """A renewal (expiry moved later) and a change of another key wake nobody's wait into a
    return: the observer returns only at its timeout, with changed false."""
    term = campaign(admin, 7106, "pod-a", ttl_ms=600)
    o = Observer("advlock-test/observe-quiet", 7106, term, timeout_ms=1500)
    try:
        wait_sleeping(admin, o.pid)
        other = campaign(admin, 7107, "pod-x")
        admin.execute("SELECT advlock_resign(%s)", (other,))
        deadline = time.monotonic() + 5
        while o.is_alive() and time.monotonic() < deadline:  # renewed past the 600 ms TTL
            assert admin.execute("SELECT advlock_lease_renew(%s, 600)", (term,)).fetchone()[0] is True
            time.sleep(0.2)
        changed, new_term, candidate, _ = o.finish()
        assert (changed, new_term, candidate) == (False, term, "pod-a")
    finally:
        admin.execute("SELECT advlock_resign(%s)", (term,))
        o.close()


@needs_preload
def test_wake_latency_by_server_time(admin, measure):
    """50 resignations each with an observer asleep: the time from just before advlock_resign to
    the observer's return, both read from the server's clock."""
    conn = psy("advlock-test/observe-latency")
    pid = conn.info.backend_pid
    samples = []
    try:
        for _ in range(50):
            term = campaign(admin, 7108, "pod-a")
            o = Observer(None, 7108, term, conn=conn)
            wait_sleeping(admin, pid)
            resigned_at = resign_at(admin, term)
            returned_at = o.finish()[3]
            samples.append((returned_at - resigned_at).total_seconds() * 1000)
    finally:
        conn.close()
    samples.sort()
    p50, p99 = statistics.median(samples), samples[int(len(samples) * 0.99) - 1]
    measure("observe wake latency p50 (ms, server time)", round(p50, 3))
    measure("observe wake latency p99 (ms, server time)", round(p99, 3))
    assert p50 < 20, samples                                 # target <= 1 ms: bench/ measures it


@needs_preload
def test_call_form_waits_without_a_snapshot_and_reports_the_change(admin):
    term = campaign(admin, 7109, "pod-a")
    conn = psy("advlock-test/observe-call")
    result = {}

    def run():
        result["row"] = conn.execute("CALL advlock_wait_leader(7109, 10000, %s)", (term,)).fetchone()

    t = threading.Thread(target=run)
    t.start()
    try:
        wait_sleeping(admin, conn.info.backend_pid)
        xmin, xid = admin.execute("SELECT backend_xmin, backend_xid FROM pg_stat_activity WHERE pid = %s",
                                  (conn.info.backend_pid,)).fetchone()
        assert (xmin, xid) == (None, None)                   # no snapshot: VACUUM and CIC do not wait for it
        resign_at(admin, term)
        t.join(15)
        assert result["row"] == (None, True, None)
    finally:
        conn.close()


@needs_preload
def test_notify_advlock_leader_when_a_term_starts(admin):
    listener = psy("advlock-test/observe-listen")
    try:
        listener.execute("LISTEN advlock_leader")
        term = campaign(admin, 7110, 'pod "a"\\b')
        notes = []
        for note in listener.notifies(timeout=5, stop_after=1):
            notes.append(note)
        assert len(notes) == 1 and notes[0].channel == "advlock_leader"
        assert json.loads(notes[0].payload) == {"key": 7110, "term": term, "candidate": 'pod "a"\\b'}
        # A campaign whose transaction rolls back notifies nobody (its term ended with it).
        with pytest.raises(psycopg.errors.DivisionByZero):
            admin.execute("SELECT advlock_campaign(7111, 60000, 0, 'pod-x'), 1 / 0")
        assert list(listener.notifies(timeout=0.3)) == []
        admin.execute("SELECT advlock_resign(%s)", (term,))
    finally:
        listener.close()


@needs_preload
def test_a_cancelled_observer_raises_57014_and_observes_again(admin):
    term = campaign(admin, 7112, "pod-a")
    o = Observer("advlock-test/observe-cancel", 7112, term)
    try:
        wait_sleeping(admin, o.pid)
        assert admin.execute("SELECT pg_cancel_backend(%s)", (o.pid,)).fetchone()[0] is True
        o.join(10)
        assert isinstance(o.error, psycopg.errors.QueryCanceled)
        assert o.conn.execute(OBSERVE, (7112, 0, None)).fetchone()[:2] == (True, term)
        terminated = Observer("advlock-test/observe-terminate", 7112, term)
        wait_sleeping(admin, terminated.pid)
        admin.execute("SELECT pg_terminate_backend(%s)", (terminated.pid,))
        terminated.join(10)
        assert terminated.error is not None
        # The next resignation still wakes a fresh observer at once.
        fresh = Observer("advlock-test/observe-after", 7112, term)
        wait_sleeping(admin, fresh.pid)
        resign_at(admin, term)
        assert fresh.finish()[:2] == (True, None)
        fresh.close()
    finally:
        admin.execute("SELECT advlock_resign(%s)", (term,))
        o.close()


@needs_preload
def test_election_through_pgbouncer_transaction_mode(admin, pgbouncer):
    """Campaign, renew, observe and resign each on whatever server connection the pooler picks:
    a term belongs to no connection."""
    with pgbouncer.connect("advlock-test/bouncer-leader") as a, pgbouncer.connect("advlock-test/bouncer-follower") as b:
        term = a.execute("SELECT advlock_campaign('jobs', 'beat', 60000, 0, 'pod-a')").fetchone()[0]
        assert b.execute("SELECT advlock_lease_renew(%s, 60000)", (term,)).fetchone()[0] is True
        assert b.execute("SELECT term, candidate FROM advlock_leader('jobs', 'beat')").fetchone() == (term, "pod-a")
        result = {}
        t = threading.Thread(target=lambda: result.update(row=b.execute(
            "SELECT changed, term FROM advlock_observe_leader('jobs', 'beat', 10000, %s)", (term,)).fetchone()))
        t.start()
        pgsupport.wait_until(lambda: admin.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Extension' AND state = 'active'"
            "   AND query LIKE '%%advlock_observe_leader%%' AND pid <> pg_backend_pid()").fetchone()[0] == 1,
            what="the observer behind the pooler asleep")
        assert a.execute("SELECT advlock_resign(%s)", (term,)).fetchone()[0] is True
        t.join(15)
        assert result["row"] == (True, None)


@needs_preload
def test_an_observer_shows_its_own_wait_event(admin):
    """pg_stat_activity names an observer's wait AdvlockLeaderObserve (PostgreSQL 17+; the
    generic Extension before), apart from a campaign's AdvlockLeaseWait."""
    o = Observer("advlock-test/observe-wait-event", 7113, None, timeout_ms=5000)
    try:
        wait_sleeping(admin, o.pid)
        event = admin.execute("SELECT wait_event FROM pg_stat_activity WHERE pid = %s", (o.pid,)).fetchone()[0]
        major = int(admin.execute("SHOW server_version_num").fetchone()[0]) // 10000
        assert event == ("AdvlockLeaderObserve" if major >= 17 else "Extension")
        term = campaign(admin, 7113, "pod-a")
        assert o.finish()[:2] == (True, term)
        admin.execute("SELECT advlock_resign(%s)", (term,))
    finally:
        o.close()
