"""Leases, leader terms, semaphores and fences under a real Patroni cluster (issue #39, item 6).

pg_test/failover/run.sh starts the cluster (a Raft witness and two Patroni nodes, advlock
preloaded) and runs this module against it; the file is not named test_*.py so that
`pg_test/run.sh failover` (the crash/restart/promotion tests on clusters of their own) does not
collect it. The scenarios share the cluster and run in file order:

1. Two `patronictl switchover`s (there and back) while real clients work through a multi-host
   DSN (`target_session_attrs=read-write`), reconnecting on connection errors: a leader renewing
   its term every TTL/3 (and writing through the term's fence), a holder renewing a lease and
   both slots of a 2-slot semaphore, and contenders for the term, the lease and the semaphore
   trying all along. Checked by (a), (b), (c) below.
2. Node loss: SIGKILL of the leader's Patroni, its postmaster and the postmaster's children, a
   leader renewing through it, a lease nobody renews, contenders. Checked by (d).
3. The killed node rejoins (Patroni, use_pg_rewind) as a streaming replica, and replays the
   primary's leases (a hot standby shows them read-only).

Every invariant is on server time: each grant, renewal and release carries the server's
clock_timestamp() (a lower bound taken before the call for ends and renewals; for grants the
lease's own granted_at), and a monitor samples the primary's advlock_leases every 50 ms. Both
servers run on this machine, so their clocks are one clock. Measured figures are written to
WORK/figures.txt (run.sh prints them).

A crash-restart with leases held is `pg_test/run.sh failover` (test_leases_survive_a_restart).
"""
from __future__ import annotations

import datetime
import json
import os
import pwd
import signal
import subprocess
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from typing import Any

import psycopg
import pytest

CLUSTER_FILE = os.environ.get("ADVLOCK_FAILOVER_CLUSTER", "")
CLUSTER: dict[str, Any] = json.load(open(CLUSTER_FILE)) if CLUSTER_FILE else {}
NODES: dict[str, Any] = CLUSTER.get("nodes", {})
FIGURES = os.path.join(CLUSTER.get("work", "/tmp"), "figures.txt")

TTL_MS = 9000                       # leases and terms of the switchover scenarios
TTL = datetime.timedelta(milliseconds=TTL_MS)
RENEW_EVERY = TTL_MS / 3 / 1000     # s: the documented renewal rhythm, TTL / 3
CONTENDER_WAIT_MS = 500             # each contender attempt waits this long, then tries again
HOLD_MS = 60000                     # what a contender takes once granted: held to the end
STATEMENT_TIMEOUT_MS = 20000
RETRY_PAUSE = 0.1                   # s between reconnection attempts
# Server-time slack for comparing a stamp taken in one statement with one taken in another
# backend: none where the order is causal (a grant after a release); this much where one side
# is observed by polling (the end of recovery seen through pg_is_in_recovery()).
POLL_SLACK = datetime.timedelta(milliseconds=250)

KEY_TERM, KEY_LEASE, KEY_SEM, KEY_PROBE = 39_601, 39_602, 39_603, 39_604
KEY_TERM2, KEY_IDLE, KEY_FRESH, KEY_REPLAY = 39_611, 39_612, 39_613, 39_614
IDLE_TTL_MS = 6000
LEADER2_TTL_MS = 30000              # longer than Patroni's detection (ttl 20 s): the leader's
                                    # renew deadline does not pass while the node is lost


def figure(line: str) -> None:
    with open(FIGURES, "a") as f:
        f.write(line + "\n")


def secs(delta: datetime.timedelta) -> str:
    return f"{delta.total_seconds():.3f} s"


# ------------------------------------------------------------------------------------- the cluster

def rest(node: str, path: str) -> tuple[int, dict[str, Any]]:
    """Patroni's REST API on `node`: (HTTP status, JSON body); (0, {}) when it does not answer."""
    url = f"http://127.0.0.1:{NODES[node]['rest_port']}{path}"
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            return r.status, json.loads(r.read() or b"{}")
    except urllib.error.HTTPError as e:
        try:
            return e.code, json.loads(e.read() or b"{}")
        except ValueError:
            return e.code, {}
    except (OSError, ValueError):
        return 0, {}


def wait_for(predicate: Any, timeout: float, what: str, interval: float = 0.2) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(interval)


def primary() -> str | None:
    for node in NODES:
        if rest(node, "/primary")[0] == 200:
            return node
    return None


def streaming(node: str) -> bool:
    return rest(node, "/patroni")[1].get("replication_state") == "streaming"


def other(node: str) -> str:
    return next(n for n in NODES if n != node)


def conninfo(app: str, port: int | None = None) -> str:
    """Through the multi-host DSN (the primary, wherever it is), or to one node's `port`."""
    ports = [str(n["pg_port"]) for n in NODES.values()]
    hosts = ",".join("127.0.0.1" for _ in ports)
    params: dict[str, Any] = {"host": hosts, "port": ",".join(ports), "target_session_attrs": "read-write"}
    if port is not None:
        params = {"host": "127.0.0.1", "port": port}
    return psycopg.conninfo.make_conninfo(
        dbname=CLUSTER["dbname"], user="postgres", application_name=app, connect_timeout=2,
        options=f"-c statement_timeout={STATEMENT_TIMEOUT_MS}", **params)


def connect_node(node: str, app: str) -> psycopg.Connection[Any]:
    return psycopg.connect(conninfo(app, NODES[node]["pg_port"]), autocommit=True)


def port_node(port: int) -> str:
    return next(n for n, v in NODES.items() if v["pg_port"] == port)


# ------------------------------------------------------------------------------------- the clients

class Session:
    """One client connection through the multi-host DSN that, on a connection error (the server
    shut down, restarted as a standby, died), reconnects and runs the statement again, as issue
    #39 item 5 asks of the clients: only for statements that may run twice (a renewal of the
    same id, a read, a try whose grant the caller looks up on the server)."""

    def __init__(self, app: str, stop: threading.Event) -> None:
        self.app = app
        self.stop = stop
        self.conn: psycopg.Connection[Any] | None = None
        self.errors = 0                 # connection errors ridden through
        self.failure: str | None = None  # any other error: the client stopped on it

    def run(self, query: str, params: Any = ()) -> tuple[Any, int] | None:
        """(the first row, the server port), or None once `stop` is set, or after an error that
        is not a connection error (kept in `failure`)."""
        while not self.stop.is_set():
            try:
                if self.conn is None or self.conn.closed:
                    self.conn = psycopg.connect(conninfo(self.app), autocommit=True)
                row = self.conn.execute(query, params).fetchone()
                return row, int(self.conn.info.port)
            except (psycopg.OperationalError, psycopg.errors.ReadOnlySqlTransaction, psycopg.InterfaceError):
                # AdminShutdown (the switchover's fast shutdown) is an OperationalError; a
                # connection made just before a demotion may meet a read-only server.
                self.errors += 1
                self.close()
                time.sleep(RETRY_PAUSE)
            except psycopg.Error as e:
                self.failure = f"{self.app}: {e.sqlstate} {e}"
                return None
        return None

    def close(self) -> None:
        if self.conn is not None:
            try:
                self.conn.close()
            except psycopg.Error:
                pass
        self.conn = None


@dataclass
class Renewal:
    name: str
    lease: int
    before: datetime.datetime      # server time just before the renewal (its lower bound)
    ok: bool
    port: int


@dataclass
class Holder:
    """Holds leases (name -> id) and renews each every `every` seconds through the multi-host
    DSN, reconnecting on connection errors and renewing the same ids. A renewal that returns
    false ends that lease for the holder (it steps down, as documented). With `fence_key`, each
    round also writes through advlock_fence(fence_key, the first lease) in one transaction."""
    name: str
    leases: dict[str, int]
    ttl_ms: int
    every: float
    fence_key: int | None = None
    renewals: list[Renewal] = field(default_factory=list)
    fenced_writes: list[tuple[datetime.datetime, int]] = field(default_factory=list)
    fence_refusals: list[str] = field(default_factory=list)
    lost: dict[str, datetime.datetime] = field(default_factory=dict)   # name -> when false came back

    def start(self) -> None:
        self.stop = threading.Event()
        self.session = Session(f"failover/{self.name}", self.stop)
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()

    def _loop(self) -> None:
        while not self.stop.is_set():
            round_started = time.monotonic()
            for name, lease in self.leases.items():
                if name in self.lost:
                    continue
                got = self.session.run("SELECT clock_timestamp(), advlock_lease_renew(%s, %s), clock_timestamp()",
                                       (lease, self.ttl_ms))
                if got is None:
                    return
                (before, ok, after), port = got
                self.renewals.append(Renewal(name, lease, before, ok, port))
                if not ok:
                    self.lost[name] = after
            if self.fence_key is not None and not self.lost:
                self._fenced_write()
            self.stop.wait(max(0.0, self.every - (time.monotonic() - round_started)))

    def _fenced_write(self) -> None:
        token = next(iter(self.leases.values()))
        conn = self.session.conn
        if conn is None:
            return
        try:
            with conn.transaction():
                conn.execute("SELECT advlock_fence(%s::bigint, %s::bigint)", (self.fence_key, token))
                at = conn.execute(
                    "INSERT INTO fenced_writes AS w VALUES (%s, %s, 1) ON CONFLICT (key) DO UPDATE"
                    " SET token = excluded.token, n = w.n + 1 RETURNING clock_timestamp()",
                    (self.fence_key, token)).fetchone()[0]
            self.fenced_writes.append((at, int(conn.info.port)))
        except psycopg.Error as e:
            if e.sqlstate == "LK001":
                self.fence_refusals.append(str(e))
            else:
                self.session.close()   # the next renewal reconnects

    def end(self, release: list[str]) -> dict[str, datetime.datetime]:
        """Stops renewing, then ends the leases `release` (advlock_resign for a term is the same
        as advlock_lease_release): name -> server time just before the end."""
        self.stop.set()
        self.thread.join(30)
        ended = {}
        with psycopg.connect(conninfo(f"failover/{self.name}-end"), autocommit=True) as conn:
            for name in release:
                if name in self.lost:
                    continue
                at, ok = conn.execute("SELECT clock_timestamp(), advlock_lease_release(%s)",
                                      (self.leases[name],)).fetchone()
                assert ok, f"{self.name}: releasing {name} {self.leases[name]} returned false"
                ended[name] = at
        return ended

    def belief_end(self, name: str, resigned: datetime.datetime | None) -> datetime.datetime:
        """Until when this holder believed it held `name` (server time): its release, or the
        moment a renewal came back false, or its renew deadline (the last renewal that succeeded
        + TTL) when a gap between renewals went past it."""
        ok = [r.before for r in self.renewals if r.name == name and r.ok]
        end = self.lost.get(name, resigned)
        for a, b in zip(ok, ok[1:] + ([end] if end else [])):
            if b - a > datetime.timedelta(milliseconds=self.ttl_ms):
                return a + datetime.timedelta(milliseconds=self.ttl_ms)
        assert end is not None
        return end


@dataclass
class Contender:
    """Tries to take `key` (a campaign, or a lease with `slots`) all along, each attempt waiting
    CONTENDER_WAIT_MS, through the multi-host DSN; once granted it holds what it got and stops.
    The grant's time is the lease's own granted_at, read on the server in the same statement."""
    name: str
    key: int
    slots: int = 1
    campaign: bool = False
    ttl_ms: int = HOLD_MS
    granted: tuple[int, datetime.datetime, int] | None = None   # (id, granted_at, port)
    tries: list[tuple[datetime.datetime, int]] = field(default_factory=list)   # (when one ended, port)

    def start(self) -> None:
        self.stop = threading.Event()
        self.session = Session(f"failover/{self.name}", self.stop)
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()

    def _loop(self) -> None:
        if self.campaign:
            take = "advlock_campaign(%s::bigint, %s, %s, %s)"
            args: tuple[Any, ...] = (self.key, self.ttl_ms, CONTENDER_WAIT_MS, self.name)
        else:
            take = "advlock_lease(%s::bigint, %s, %s, slots => %s)"
            args = (self.key, self.ttl_ms, CONTENDER_WAIT_MS, self.slots)
        while not self.stop.is_set():
            got = self.session.run(
                f"SELECT l, (SELECT granted_at FROM advlock_leases WHERE lease = l), clock_timestamp()"
                f" FROM {take} AS l", args)
            if got is None:
                return
            (lease, granted_at, ended), port = got
            self.tries.append((ended, port))
            if lease is not None:
                self.granted = (lease, granted_at, port)
                return

    def tried_on(self, node: str, since: datetime.datetime) -> bool:
        """Whether an attempt ended on `node` after `since` (this contender was really trying there)."""
        return any(port == NODES[node]["pg_port"] and at >= since for at, port in self.tries)

    def granted_before(self, moment: datetime.datetime) -> bool:
        return self.granted is not None and self.granted[1] < moment

    def wait_granted(self, timeout: float) -> tuple[int, datetime.datetime, int]:
        self.thread.join(timeout)
        assert self.granted is not None, f"{self.name} was not granted key {self.key} within {timeout} s"
        return self.granted

    def end(self) -> None:
        self.stop.set()
        self.thread.join(30)
        self.session.close()
        if self.granted is not None:
            release_quietly([self.granted[0]])


class Monitor:
    """Samples the primary's granted leases of `keys` every 50 ms (server time, port, key -> ids)."""

    def __init__(self, keys: list[int]) -> None:
        self.keys = keys
        self.samples: list[tuple[datetime.datetime, int, dict[int, list[int]]]] = []
        self.stop = threading.Event()
        self.session = Session("failover/monitor", self.stop)
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()

    def _loop(self) -> None:
        while not self.stop.is_set():
            got = self.session.run(
                "SELECT clock_timestamp(), coalesce(json_agg(json_build_array(key, lease) ORDER BY key, lease), '[]')"
                " FROM advlock_leases WHERE granted AND key = ANY(%s::bigint[])", (self.keys,))
            if got is None:
                return
            (at, pairs), port = got
            held: dict[int, list[int]] = {}
            for key, lease in pairs:
                held.setdefault(key, []).append(lease)
            self.samples.append((at, port, held))
            self.stop.wait(0.05)

    def end(self) -> None:
        self.stop.set()
        self.thread.join(10)
        self.session.close()

    def foreign(self, key: int, allowed: set[int], until: datetime.datetime, most: int) -> list[str]:
        """Samples before `until` in which `key` was held by a lease not in `allowed`, or by
        more than `most` leases."""
        return [f"{at.time()} on {port_node(port)}: {held.get(key)}" for at, port, held in self.samples
                if at < until and (not set(held.get(key, [])) <= allowed or len(held.get(key, [])) > most)]


class RecoveryWatch:
    """Polls pg_is_in_recovery() on one node every 20 ms: the last server time it was true and
    the first it was false bracket the end of recovery (the promotion)."""

    def __init__(self, node: str) -> None:
        self.node = node
        self.last_true: datetime.datetime | None = None
        self.first_false: datetime.datetime | None = None
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()

    def _loop(self) -> None:
        conn = None
        while not self.stop.is_set() and self.first_false is None:
            try:
                if conn is None:
                    conn = connect_node(self.node, "failover/recovery-watch")
                at, recovering = conn.execute("SELECT clock_timestamp(), pg_is_in_recovery()").fetchone()
                if recovering:
                    self.last_true = at
                else:
                    self.first_false = at
            except psycopg.Error:
                conn = None
            time.sleep(0.02)
        if conn is not None:
            conn.close()


def one(conn: psycopg.Connection[Any], query: str, *args: Any) -> Any:
    return conn.execute(query, args).fetchone()[0]


def release_quietly(leases: list[int]) -> None:
    """Cleanup: releases `leases` (already ended or not); errors are not the test's subject."""
    try:
        with psycopg.connect(conninfo("failover/cleanup"), autocommit=True) as c:
            for lease in leases:
                c.execute("SELECT advlock_lease_release(%s)", (lease,))
    except psycopg.Error:
        pass


def fence_refusal(conn: psycopg.Connection[Any], token: int) -> str | None:
    """Whether `token` passes the fence of KEY_TERM now (in a transaction rolled back either
    way): None when it passes, LK001's message when it is refused."""
    try:
        with conn.transaction():
            conn.execute("SELECT advlock_fence(%s::bigint, %s::bigint)", (KEY_TERM, token))
            raise psycopg.Rollback()
    except psycopg.Error as e:
        if e.sqlstate != "LK001":
            raise
        return str(e)
    return None


# ------------------------------------------------------------------------------ 1. two switchovers

@dataclass
class Switchover:
    old: str
    new: str
    started: datetime.datetime
    writable: datetime.datetime                     # the new primary first answered out of recovery
    seconds: float                                  # patronictl switchover's run time
    max_id_before: int
    probe: int                                      # a lease taken on the new primary
    probe_granted: datetime.datetime
    leases_after: dict[int, tuple[int, int]]        # id -> (key, slots) on the new primary
    fence_token_after: int | None
    stale_refused: str | None                       # the LK001 message for the stale term
    current_passes: bool


@dataclass
class SwitchoverRun:
    stale_term: int
    leader: Holder
    holder: Holder
    contenders: dict[str, Contender]
    switchovers: list[Switchover]
    ended: dict[str, datetime.datetime]             # term, lease, slot1 -> server time of the end
    monitor: Monitor
    sem_count_after: int
    third_slot: int | None


def switch(old: str, new: str, leader: Holder, stale_term: int, ids: list[int]) -> Switchover:
    watch = RecoveryWatch(new)
    wait_for(lambda: watch.last_true, 10, f"{new} to answer as a standby", interval=0.05)
    started = datetime.datetime.now(datetime.timezone.utc)
    t0 = time.monotonic()
    done = subprocess.run([*CLUSTER["patronictl"], "switchover", CLUSTER["scope"], "--leader", old,
                           "--candidate", new, "--force"], capture_output=True, text=True, timeout=120)
    seconds = time.monotonic() - t0
    assert done.returncode == 0, f"patronictl switchover failed: {done.stdout}\n{done.stderr}"
    wait_for(lambda: primary() == new, 60, f"{new} to lead")
    writable_at = wait_for(lambda: watch.first_false, 30, f"{new} to leave recovery", interval=0.05)
    watch.stop.set()
    with connect_node(new, "failover/probe") as c:
        # A new lease on the new primary (waiting out a lock-delay, if the server has one).
        probe = one(c, "SELECT advlock_lease(%s::bigint, 1000, 15000)", KEY_PROBE)
        assert probe is not None, f"no lease granted on {new} within 15 s"
        probe_granted = one(c, "SELECT granted_at FROM advlock_leases WHERE lease = %s", probe)
        one(c, "SELECT advlock_lease_release(%s)", probe)
        leases_after = {r[0]: (r[1], r[2]) for r in c.execute(
            "SELECT lease, key, slots FROM advlock_leases WHERE granted AND key = ANY(%s::bigint[])",
            ([KEY_TERM, KEY_LEASE, KEY_SEM],)).fetchall()}
        fence_token = one(c, "SELECT max(token) FROM advlock_fences WHERE key = %s::bigint", KEY_TERM)
        stale_refused = fence_refusal(c, stale_term)
        current_passes = fence_refusal(c, leader.leases["term"]) is None
    return Switchover(old, new, started, writable_at, seconds, max(ids), probe, probe_granted, leases_after,
                      fence_token, stale_refused, current_passes)


@pytest.fixture(scope="module")
def switchovers() -> SwitchoverRun:
    """Runs the clients through a switchover to the replica and one back; returns the record."""
    if not CLUSTER:
        pytest.fail("ADVLOCK_FAILOVER_CLUSTER is not set: run pg_test/failover/run.sh", pytrace=False)
    first = wait_for(primary, 30, "a primary")
    wait_for(lambda: streaming(other(first)), 60, "the replica to stream")
    with psycopg.connect(conninfo("failover/setup"), autocommit=True) as c:
        c.execute("CREATE TABLE IF NOT EXISTS fenced_writes (key bigint PRIMARY KEY, token bigint, n int)")
        # A term that ended before the leader's: its token is the stale one the fence must refuse.
        stale = one(c, "SELECT advlock_campaign(%s::bigint, %s, 0, 'stale leader')", KEY_TERM, TTL_MS)
        with c.transaction():
            c.execute("SELECT advlock_fence(%s::bigint, %s::bigint)", (KEY_TERM, stale))
        assert one(c, "SELECT advlock_resign(%s)", stale) is True
        term = one(c, "SELECT advlock_campaign(%s::bigint, %s, 0, 'leader')", KEY_TERM, TTL_MS)
        lease = one(c, "SELECT advlock_lease(%s::bigint, %s, 0)", KEY_LEASE, TTL_MS)
        slots = [one(c, "SELECT advlock_lease(%s::bigint, %s, 0, slots => 2)", KEY_SEM, TTL_MS) for _ in range(2)]
    assert None not in (stale, term, lease, *slots)
    leader = Holder("leader", {"term": term}, TTL_MS, RENEW_EVERY, fence_key=KEY_TERM)
    holder = Holder("holder", {"lease": lease, "slot1": slots[0], "slot2": slots[1]}, TTL_MS, RENEW_EVERY)
    contenders = {"term": Contender("contender-term", KEY_TERM, campaign=True),
                  "lease": Contender("contender-lease", KEY_LEASE),
                  "sem": Contender("contender-sem", KEY_SEM, slots=2)}
    monitor = Monitor([KEY_TERM, KEY_LEASE, KEY_SEM])
    done: list[Switchover] = []
    ended: dict[str, datetime.datetime] = {}
    for x in (leader, holder, *contenders.values()):
        x.start()
    try:
        time.sleep(RENEW_EVERY + 1)
        ids = [stale, term, lease, *slots]
        for old, new in ((first, other(first)), (other(first), first)):
            s = switch(old, new, leader, stale, ids)
            done.append(s)
            ids.append(s.probe)
            figure(f"switchover {old} -> {new}: patronictl ran {s.seconds:.1f} s; the new primary took writes "
                   f"{secs(s.writable - s.started)} after it began; its first new lease was granted "
                   f"{secs(s.probe_granted - s.writable)} after that")
            wait_for(lambda: streaming(old), 90, f"{old} to rejoin as a streaming replica")
            # Keep working until a full TTL has passed since the new primary took writes: a lease
            # neither renewed nor kept would have ended by then.
            while datetime.datetime.now(datetime.timezone.utc) < s.writable + TTL + datetime.timedelta(seconds=1):
                time.sleep(0.2)
        ended |= leader.end(["term"])
        ended |= holder.end(["lease", "slot1"])
        for c in contenders.values():
            c.thread.join(5)
        with psycopg.connect(conninfo("failover/check"), autocommit=True) as c:
            sem_count = one(c, "SELECT count(*) FROM advlock_leases WHERE granted AND key = %s::bigint", KEY_SEM)
            third = one(c, "SELECT advlock_lease(%s::bigint, 1000, 0, slots => 2)", KEY_SEM)
            if third is not None:
                one(c, "SELECT advlock_lease_release(%s)", third)
    finally:
        monitor.end()
        leader.stop.set()
        holder.stop.set()
        for c in contenders.values():
            c.end()
        release_quietly([*holder.leases.values(), term])
    return SwitchoverRun(stale, leader, holder, contenders, done, ended, monitor, sem_count, third)


def outage(renewals: list[Renewal]) -> datetime.timedelta:
    """The longest gap between two successful renewals."""
    ok = [r.before for r in renewals if r.ok]
    return max((b - a for a, b in zip(ok, ok[1:])), default=datetime.timedelta(0))


def client_failures(*clients: Any) -> list[str]:
    return [c.session.failure for c in clients if c.session.failure]


def test_switchover_a_leader_keeps_its_term(switchovers: SwitchoverRun) -> None:
    """(a) A leader renewing its term every TTL/3 through the multi-host DSN keeps the same term
    through both switchovers: every renewal returns true, on each new primary too, no renew
    deadline passes, its fenced writes go on there, and the contender campaigning all along is
    granted only after the leader resigns (no two leaders at any instant, by server time)."""
    run = switchovers
    term = run.leader.leases["term"]
    renewals = run.leader.renewals
    false = [r for r in renewals if not r.ok]
    belief_end = run.leader.belief_end("term", run.ended.get("term"))
    contender = run.contenders["term"].granted
    figure(f"(a) leader term {term}: {sum(r.ok for r in renewals)} renewals true, {len(false)} false, "
           f"{run.leader.session.errors} connection errors ridden through; longest gap between renewals "
           f"{secs(outage(renewals))}; {len(run.leader.fenced_writes)} fenced writes")
    problems = client_failures(run.leader, run.contenders["term"])
    for s in run.switchovers:
        port = NODES[s.new]["pg_port"]
        if not [r for r in renewals if r.ok and r.port == port and r.before >= s.writable]:
            problems.append(f"no renewal of term {term} returned true on {s.new} after the switchover {s.old} -> {s.new}")
        if not [w for w in run.leader.fenced_writes if w[1] == port and w[0] >= s.writable]:
            problems.append(f"the leader wrote nothing through the fence on {s.new} after the switchover")
        c = run.contenders["term"]
        if not c.tried_on(s.new, s.writable) and not c.granted_before(s.writable):
            problems.append(f"the contender never tried on {s.new} after the switchover {s.old} -> {s.new}")
    if false:
        problems.append(f"the renewal of term {term} returned false on {port_node(false[0].port)} at "
                        f"{false[0].before.time()}: the term ended at the switchover")
    if run.leader.fence_refusals:
        problems.append(f"the fence refused the leader's term: {run.leader.fence_refusals[0]}")
    resigned = run.ended.get("term")
    if contender is not None and (resigned is None or contender[1] < resigned):
        s = max((s for s in run.switchovers if s.started <= contender[1]), key=lambda s: s.started,
                default=run.switchovers[0])
        last_ok = max((r.before for r in renewals if r.ok and r.before <= contender[1]), default=None)
        left = (f", {secs(last_ok + TTL - contender[1])} before the expiry of the leader's last renewal"
                if last_ok else "")
        both = (f"; the leader believed it led until {belief_end.time()}: two leaders for "
                f"{secs(belief_end - contender[1])}" if contender[1] < belief_end else
                f"; the leader had learned at {belief_end.time()} that its term was gone")
        problems.append(
            f"the contender was granted term {contender[0]} on {port_node(contender[2])} at {contender[1].time()}, "
            f"{secs(contender[1] - s.started)} after `patronictl switchover` {s.old} -> {s.new} began "
            f"({secs(contender[1] - s.writable)} after the new primary took writes){left}{both}")
    foreign = run.monitor.foreign(KEY_TERM, {term}, run.ended.get("term", belief_end), 1)
    if foreign:
        problems.append(f"the primary showed another term for the key while the leader held it: {foreign[:3]}")
    assert not problems, "\n".join(problems)
    assert contender is not None, "the contender was never granted the term, even after the resignation"
    assert contender[1] >= run.ended["term"] and contender[0] > term
    figure(f"(a) the contender was granted the term {secs(contender[1] - run.ended['term'])} after the leader resigned")


def test_switchover_a_lease_and_a_semaphore_keep_their_holders(switchovers: SwitchoverRun) -> None:
    """(b) A lease and both slots of a 2-slot semaphore renewed through both switchovers: every
    renewal returns true, each new primary holds the same ids (the semaphore still has its 2
    slots), the contenders trying all along are granted only after a release, and after it
    the semaphore still counts 2 (a third attempt is refused: no over-grant)."""
    run, h = switchovers, switchovers.holder
    false = [r for r in h.renewals if not r.ok]
    figure(f"(b) holder: {sum(r.ok for r in h.renewals)} renewals true, {len(false)} false; longest gap between "
           f"renewals of the lease {secs(outage([r for r in h.renewals if r.name == 'lease']))}")
    problems = client_failures(h, run.contenders["lease"], run.contenders["sem"])
    for r in false:
        problems.append(f"renewing {r.name} {r.lease} returned false on {port_node(r.port)} at {r.before.time()}")
    expected = {h.leases["lease"]: (KEY_LEASE, 1), h.leases["slot1"]: (KEY_SEM, 2), h.leases["slot2"]: (KEY_SEM, 2)}
    for s in run.switchovers:
        for name in ("lease", "sem"):
            c = run.contenders[name]
            if not c.tried_on(s.new, s.writable) and not c.granted_before(s.writable):
                problems.append(f"contender-{name} never tried on {s.new} after the switchover {s.old} -> {s.new}")
        held = {i: v for i, v in s.leases_after.items() if v[0] in (KEY_LEASE, KEY_SEM)}
        if held != expected:
            problems.append(f"after the switchover {s.old} -> {s.new} the new primary held {held} "
                            f"(id: (key, slots)) on the lease's and the semaphore's keys, not {expected}")
    for name, key, allowed, most, release in (("lease", KEY_LEASE, {h.leases["lease"]}, 1, "lease"),
                                              ("sem", KEY_SEM, {h.leases["slot1"], h.leases["slot2"]}, 2, "slot1")):
        got = run.contenders[name].granted
        released = run.ended.get(release)
        if got is not None and (released is None or got[1] < released):
            s = max((s for s in run.switchovers if s.started <= got[1]), key=lambda s: s.started,
                    default=run.switchovers[0])
            problems.append(f"contender-{name} was granted {got[0]} on {port_node(got[2])} at {got[1].time()}, "
                            f"{secs(got[1] - s.started)} after the switchover {s.old} -> {s.new} began, while "
                            f"{release} {h.leases[release]} was held and renewed")
        foreign = run.monitor.foreign(key, allowed, released or run.monitor.samples[-1][0], most)
        if foreign:
            problems.append(f"key {key} held beyond {sorted(allowed)}: {foreign[:3]}")
    assert not problems, "\n".join(problems)
    for name in ("lease", "sem"):
        assert run.contenders[name].granted is not None, f"contender-{name} was never granted, even after the release"
    assert run.sem_count_after == 2 and run.third_slot is None, (run.sem_count_after, run.third_slot)


def test_switchover_tokens_grow_and_fences_refuse_the_stale_token(switchovers: SwitchoverRun) -> None:
    """(c) Lease ids (fencing tokens) issued on each new primary are larger than every id issued
    before the switchover; the fence row is replicated (the leader's term passed it, the new
    primary has it) and refuses the stale term with LK001 there, while the current term passes."""
    run = switchovers
    term = run.leader.leases["term"]
    for s in run.switchovers:
        figure(f"(c) {s.old} -> {s.new}: first lease id on {s.new} {s.probe} = the largest before + "
               f"{s.probe - s.max_id_before}")
        assert s.probe > s.max_id_before, (s.probe, s.max_id_before)
        assert s.fence_token_after is not None and s.fence_token_after >= term, (s.fence_token_after, term)
        assert s.stale_refused is not None, f"the stale token {run.stale_term} passed the fence on {s.new}"
        assert s.current_passes, f"the current term {term} was refused by the fence on {s.new}"
    # Every contender's grant made after a switchover is larger than every id before it.
    for c in run.contenders.values():
        if c.granted is not None:
            for s in run.switchovers:
                if s.writable <= c.granted[1]:
                    assert c.granted[0] > s.max_id_before, (c.name, c.granted, s.max_id_before)


# ---------------------------------------------------------------------------------- 2. node loss

def children(pid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                        found.append(int(entry))
            except (OSError, IndexError, ValueError):
                pass
    return found


def kill_node(node: str) -> None:
    """SIGKILL of the node's Patroni, its postmaster and the postmaster's children (a node lost
    at once: nothing shuts down cleanly, no WAL is sent after)."""
    with open(NODES[node]["pid_file"]) as f:
        patroni = int(f.read().strip())
    with open(os.path.join(NODES[node]["data"], "postmaster.pid")) as f:
        postmaster = int(f.readline().strip())
    backends = children(postmaster)
    for pid in (patroni, postmaster, *backends):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def test_node_loss_keeps_leases_until_their_pushed_expiry() -> None:
    """(d) SIGKILL of the primary's Patroni, postmaster and backends; Patroni promotes the
    replica after its ttl. On the new primary: the leader that retried all along renews the same
    term (true) and its contender is granted only after it resigns; a lease nobody renewed is
    there with its expiry pushed to at least the promotion + its TTL, and its contender is
    granted no earlier; a key nobody held is granted no earlier than the promotion +
    advlock.lease_lock_delay."""
    if not CLUSTER:
        pytest.fail("ADVLOCK_FAILOVER_CLUSTER is not set: run pg_test/failover/run.sh", pytrace=False)
    lost = wait_for(primary, 30, "a primary")
    survivor = other(lost)
    wait_for(lambda: streaming(survivor), 60, f"{survivor} to stream")
    delay = datetime.timedelta(milliseconds=CLUSTER["lock_delay_ms"])
    with psycopg.connect(conninfo("failover/setup"), autocommit=True) as c:
        term = one(c, "SELECT advlock_campaign(%s::bigint, %s, 0, 'leader 2')", KEY_TERM2, LEADER2_TTL_MS)
    leader = Holder("leader2", {"term": term}, LEADER2_TTL_MS, RENEW_EVERY)
    contenders = {"term": Contender("contender-term2", KEY_TERM2, campaign=True),
                  "idle": Contender("contender-idle", KEY_IDLE), "fresh": Contender("contender-fresh", KEY_FRESH)}
    monitor = Monitor([KEY_TERM2, KEY_IDLE, KEY_FRESH])
    watch = RecoveryWatch(survivor)
    leader.start()
    contenders["term"].start()
    survivor_port = NODES[survivor]["pg_port"]
    try:
        time.sleep(RENEW_EVERY + 0.5)
        with psycopg.connect(conninfo("failover/idle"), autocommit=True) as c:
            idle = one(c, "SELECT advlock_lease(%s::bigint, %s, 0)", KEY_IDLE, IDLE_TTL_MS)
            max_before = max(one(c, "SELECT max(lease) FROM advlock_leases"), idle)
            killed_at = one(c, "SELECT clock_timestamp()")
        kill_node(lost)
        contenders["idle"].start()
        contenders["fresh"].start()
        wait_for(lambda: watch.first_false, 90, f"Patroni to promote {survivor}", interval=0.1)
        with connect_node(survivor, "failover/reader") as c:
            after = {r[0]: r[1:] for r in c.execute(
                "SELECT lease, key, expires_at FROM advlock_leases WHERE granted AND key = ANY(%s::bigint[])",
                ([KEY_TERM2, KEY_IDLE],)).fetchall()}
        fresh = contenders["fresh"].wait_granted(30)
        idle_got = contenders["idle"].wait_granted(30)
        wait_for(lambda: leader.lost or any(r.port == survivor_port for r in leader.renewals), 30,
                 "a renewal of leader 2 on the new primary")
        time.sleep(RENEW_EVERY)
        resigned = leader.end(["term"]).get("term")
        term_got = contenders["term"].wait_granted(10) if resigned else contenders["term"].granted
    finally:
        watch.stop.set()
        monitor.end()
        leader.stop.set()
        for c in contenders.values():
            c.end()
    assert watch.last_true is not None and watch.first_false is not None
    promoted = watch.last_true
    figure(f"(d) node loss: {survivor} promoted {secs(watch.first_false - killed_at)} after the SIGKILL "
           f"(end of recovery between {watch.last_true.time()} and {watch.first_false.time()}); leader 2's longest "
           f"gap between renewals {secs(outage(leader.renewals))}")
    figure(f"(d) the idle lease's ({IDLE_TTL_MS} ms) contender was granted {secs(idle_got[1] - promoted)} after the "
           f"promotion, the fresh key's {secs(fresh[1] - promoted)} after it (lock delay {secs(delay)})")
    problems = client_failures(leader, *contenders.values())
    for c in contenders.values():
        if not c.tried_on(survivor, promoted):
            problems.append(f"{c.name} never tried on {survivor} after the promotion")
    if idle not in after:
        problems.append(f"the idle lease {idle} was not on the new primary (its leases there: {after})")
    else:
        pushed = after[idle][1]
        if pushed < promoted + datetime.timedelta(milliseconds=IDLE_TTL_MS) - POLL_SLACK:
            problems.append(f"the idle lease's expiry {pushed.time()} was not pushed to the promotion "
                            f"({promoted.time()}) + its TTL")
        if idle_got[1] < pushed:
            problems.append(f"contender-idle was granted at {idle_got[1].time()}, before the idle lease's "
                            f"expiry {pushed.time()}")
    if idle_got[1] < promoted + datetime.timedelta(milliseconds=IDLE_TTL_MS) - POLL_SLACK:
        problems.append(f"contender-idle was granted {secs(idle_got[1] - promoted)} after the promotion, before the "
                        f"idle lease's TTL ({IDLE_TTL_MS} ms) from it had passed")
    if fresh[1] < promoted + delay - POLL_SLACK:
        problems.append(f"contender-fresh was granted a key nobody held {secs(fresh[1] - promoted)} after the "
                        f"promotion, before advlock.lease_lock_delay ({secs(delay)}) had passed")
    if term not in after:
        problems.append(f"leader 2's term {term} was not on the new primary (its leases there: {after})")
    false = [r for r in leader.renewals if not r.ok]
    if false:
        problems.append(f"leader 2's renewal returned false on {port_node(false[0].port)} at {false[0].before.time()}")
    end = leader.belief_end("term", resigned)
    if term_got is not None and term_got[1] < end:
        problems.append(f"contender-term2 was granted {term_got[0]} at {term_got[1].time()} "
                        f"({secs(term_got[1] - promoted)} after the promotion) while leader 2 believed it led "
                        f"until {end.time()}: two leaders for {secs(end - term_got[1])}")
    for key, allowed, until in ((KEY_TERM2, {term}, end), (KEY_IDLE, {idle}, idle_got[1])):
        foreign = monitor.foreign(key, allowed, until, 1)
        if foreign:
            problems.append(f"key {key} was held by another lease while {sorted(allowed)} held it: {foreign[:3]}")
    assert not problems, "\n".join(problems)
    assert term_got is not None and resigned is not None and term_got[1] >= resigned
    for got in (fresh, idle_got, term_got):
        assert got[0] > max_before, (got, max_before)


def test_the_killed_node_rejoins_as_a_replica() -> None:
    """The node killed in (d) is started again: Patroni rewinds it if its WAL went past the
    promotion (use_pg_rewind) and it streams from the new primary, on its timeline."""
    if not CLUSTER:
        pytest.fail("ADVLOCK_FAILOVER_CLUSTER is not set: run pg_test/failover/run.sh", pytrace=False)
    leader = wait_for(primary, 30, "a primary")
    lost = other(leader)
    cmd = NODES[lost]["start"]
    if pwd.getpwuid(os.geteuid()).pw_name != "postgres":
        cmd = ["sudo", "-u", "postgres", "--", *cmd]
    with open(NODES[lost]["log"], "a") as log:
        subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
    t0 = time.monotonic()
    wait_for(lambda: streaming(lost), 120, f"{lost} to rejoin and stream")
    figure(f"the killed node {lost} streamed again {time.monotonic() - t0:.1f} s after its Patroni was started")
    timeline = rest(leader, "/patroni")[1].get("timeline")
    wait_for(lambda: rest(lost, "/patroni")[1].get("timeline") == timeline, 30, f"{lost} on timeline {timeline}")


def test_the_rejoined_node_replays_leases() -> None:
    """The rejoined node is a hot standby that replays advlock's WAL: a lease taken on the
    primary shows there with the same id, key and expiry, renewing it there is refused (25006),
    and its release on the primary removes it there too."""
    if not CLUSTER:
        pytest.fail("ADVLOCK_FAILOVER_CLUSTER is not set: run pg_test/failover/run.sh", pytrace=False)
    leader = wait_for(primary, 30, "a primary")
    standby = other(leader)
    wait_for(lambda: streaming(standby), 60, f"{standby} to stream")
    replayed = "SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn"
    with connect_node(leader, "failover/replay-holder") as p, connect_node(standby, "failover/replay-reader") as s:
        lease = one(p, "SELECT advlock_lease(%s::bigint, 30000, 0)", KEY_REPLAY)
        expires_at = one(p, "SELECT expires_at FROM advlock_leases WHERE lease = %s", lease)
        lsn = one(p, "SELECT pg_current_wal_insert_lsn()")
        wait_for(lambda: one(s, replayed, lsn), 10, f"{standby} to replay the grant", interval=0.05)
        row = s.execute("SELECT lease, key, expires_at FROM advlock_leases WHERE granted AND key = %s::bigint",
                        (KEY_REPLAY,)).fetchone()
        assert row == (lease, KEY_REPLAY, expires_at), f"{standby} showed {row}, not lease {lease} until {expires_at}"
        with pytest.raises(psycopg.errors.ReadOnlySqlTransaction):
            s.execute("SELECT advlock_lease_renew(%s, 30000)", (lease,))
        assert one(p, "SELECT advlock_lease_release(%s)", lease) is True
        lsn = one(p, "SELECT pg_current_wal_insert_lsn()")
        wait_for(lambda: one(s, replayed, lsn), 10, f"{standby} to replay the release", interval=0.05)
        after = s.execute("SELECT lease FROM advlock_leases WHERE key = %s::bigint", (KEY_REPLAY,)).fetchall()
    assert after == [], f"{standby} still showed {after} after the release"
