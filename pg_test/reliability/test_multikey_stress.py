"""All-or-nothing multi-key acquisition under stress: 16 clients, random subsets of 12 keys.

Each client (its own connection and backend) calls advlock_try_all_with_timeout (and, now and
then, advlock_lock_all_with_timeout) with a random subset of 1-8 of 12 keys in random order
(sometimes with a duplicate), in all three forms ((keys bigint[]), (ns, ids text[]),
(ns, ids bigint[]) -- the same 12 keys, since an integer id hashes as its decimal text), both
scopes, mostly exclusive and some shared, with random timeouts of 0-50 ms; at least 20,000
calls in all. The deadlock detector is made to run within those waits (deadlock_timeout =
10 ms, and a control test shows it then reports a cycle of single-key waits as 40P01), so a
cycle among the array calls would surface as an error. Proven:

* 0 deadlock errors (40P01) and 0 errors of any other kind (55P03 only from the lock form,
  where it is that form's "busy" answer);
* 0 mutual-exclusion violations: a Python registry (under a threading.Lock) records every
  granted set, entered after the call returns true and left before the keys are released, and
  no key is ever in it exclusively for two clients, or exclusively and shared at once;
* true means every key of the call is held by this backend in the requested mode (advlock_holding
  and pg_locks agree, one granted pg_locks row per distinct key, nothing else);
* false (or 55P03) means none of the call's keys is held by this backend (advlock_holding for
  each key in either mode, and no advisory pg_locks row of the backend at all), checked in the
  same transaction for xact scope -- never false while holding a key the call took;
* false comes within the one overall deadline (server-side time of the call; figure);
* at the end no advisory lock is held or awaited by anyone.
"""
import os
import random
import threading
import time
from collections import Counter

import psycopg
import pytest

from relsupport import FULL, SMALL, advisory_locks, advlock_key, connect, figure, wait_for_waiter

NS = "stress"
IDS = list(range(12))
KEY_OF = {i: advlock_key(NS, i) for i in IDS}
CLIENTS = 16
CALLS = 100000 if FULL else 5000 if SMALL else 20000
DEADLOCK_TIMEOUT = "10ms"

# One statement per call; the server-side duration of the call (clock_timestamp() is evaluated
# after the acquisition, statement_timestamp() is the statement's start) checks the deadline.
ARGS = {
    "keys": "%(keys)s::bigint[]",
    "text": f"'{NS}', %(text_ids)s::text[]",
    "int": f"'{NS}', %(int_ids)s::bigint[]",
}
TRY_SQL = {form: f"SELECT advlock_try_all_with_timeout({a}, %(timeout)s, %(scope)s, %(mode)s), "
                 "extract(epoch FROM clock_timestamp() - statement_timestamp())"
           for form, a in ARGS.items()}
LOCK_SQL = {form: f"SELECT advlock_lock_all_with_timeout({a}, %(timeout)s, %(scope)s, %(mode)s)"
            for form, a in ARGS.items()}
UNLOCK_SQL = {form: f"SELECT advlock_unlock_all({a}, %(mode)s)" for form, a in ARGS.items()}
# Which of the call's keys this backend holds (either mode, and in the requested mode), and
# how many advisory locks it holds or awaits in all.
CHECK_SQL = """
SELECT coalesce(array_agg(k ORDER BY k) FILTER (WHERE advlock_holding(k, 'exclusive')
                                                   OR advlock_holding(k, 'shared')), '{}'),
       coalesce(array_agg(k ORDER BY k) FILTER (WHERE advlock_holding(k, %(mode)s)), '{}'),
       (SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid())
  FROM unnest(%(distinct)s::bigint[]) AS k"""


class Registry:
    """Who holds which key, as the clients themselves see it (entered after true, left before
    the release, so its intervals lie inside the server's)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.exclusive = {}  # key -> client
        self.shared = {}     # key -> set of clients
        self.violations = []
        self.shared_overlaps = 0  # grants of a shared key another client held shared

    def enter(self, client, keys, mode, call):
        with self.lock:
            for k in keys:
                other = self.exclusive.get(k)
                if other is not None:
                    self.violations.append(f"client {client} got {k} {mode} while client {other} "
                                           f"holds it exclusive ({call})")
                sharers = self.shared.get(k, set()) - {client}
                if mode == "exclusive" and sharers:
                    self.violations.append(f"client {client} got {k} exclusive while clients "
                                           f"{sorted(sharers)} hold it shared ({call})")
                if mode == "shared" and sharers:
                    self.shared_overlaps += 1
            for k in keys:
                if mode == "exclusive":
                    self.exclusive[k] = client
                else:
                    self.shared.setdefault(k, set()).add(client)

    def leave(self, client, keys, mode):
        with self.lock:
            for k in keys:
                if mode == "exclusive":
                    assert self.exclusive.pop(k) == client
                else:
                    self.shared[k].remove(client)


def _call(rng):
    ids = rng.sample(IDS, rng.randint(1, 8))
    if rng.random() < 0.1:  # a duplicate collapses
        ids.insert(rng.randrange(len(ids) + 1), ids[0])
    return dict(
        ids=ids,
        form=rng.choice(["keys", "text", "int"]),
        scope=rng.choice(["xact", "session"]),
        mode="shared" if rng.random() < 0.25 else "exclusive",
        timeout=rng.randint(0, 50),
        function="lock" if rng.random() < 0.15 else "try",
    )


def _client(n, calls, seed, registry, counts, overruns, problems):
    rng = random.Random(seed + n)
    conn = connect(f"rel-stress-{n}")
    conn.execute(f"SET deadlock_timeout = '{DEADLOCK_TIMEOUT}'")
    try:
        for i in range(calls):
            c = _call(rng)
            distinct = sorted({KEY_OF[x] for x in c["ids"]})
            params = dict(keys=[KEY_OF[x] for x in c["ids"]], text_ids=[str(x) for x in c["ids"]],
                          int_ids=c["ids"], timeout=c["timeout"], scope=c["scope"], mode=c["mode"],
                          distinct=distinct)
            what = f"client {n} call {i}: {c}"
            in_xact = c["scope"] == "xact"
            if in_xact:
                conn.execute("BEGIN")
            outcome, aborted = None, False
            try:
                if c["function"] == "try":
                    got, seconds = conn.execute(TRY_SQL[c["form"]], params).fetchone()
                    outcome = "true" if got else "false"
                    if not got:
                        overruns.append(float(seconds) * 1000 - c["timeout"])
                else:
                    conn.execute(LOCK_SQL[c["form"]], params)
                    outcome = "true"
            except psycopg.errors.LockNotAvailable as e:
                if c["function"] != "lock":
                    problems.append(f"{what}: 55P03 from the try form: {e}")
                outcome, aborted = "55P03", True
            except psycopg.errors.DeadlockDetected as e:
                counts["deadlocks"] += 1
                problems.append(f"{what}: deadlock: {e}")
                outcome, aborted = "error", True
            except psycopg.Error as e:
                problems.append(f"{what}: {type(e).__name__} {e.sqlstate}: {e}")
                outcome, aborted = "error", True
                if conn.closed:
                    raise
            counts[outcome] += 1
            counts[f"{c['form']}/{c['scope']}/{c['mode']}"] += 1
            if aborted and in_xact:
                conn.execute("ROLLBACK")  # the call's xact locks go with it
                in_xact = False
            if outcome == "true":
                registry.enter(n, distinct, c["mode"], what)
            held_any, held_mode, rows = conn.execute(CHECK_SQL, params).fetchone()
            if outcome == "true":
                if held_any != distinct or held_mode != distinct or rows != len(distinct):
                    registry.violations.append(
                        f"{what}: true but holding {held_any} ({c['mode']}: {held_mode}), "
                        f"{rows} pg_locks rows, of {distinct}")
                registry.leave(n, distinct, c["mode"])  # before anything is released
                if c["scope"] == "session":
                    if conn.execute(UNLOCK_SQL[c["form"]], params).fetchone()[0] is not True:
                        problems.append(f"{what}: advlock_unlock_all did not return true")
            elif held_any or rows:
                registry.violations.append(
                    f"{what}: {outcome} while holding {held_any} of the call's keys, "
                    f"{rows} advisory pg_locks rows of the backend")
            if conn.notices:  # e.g. a WARNING from a release that found nothing to release
                problems.append(f"{what} ({outcome}): notices {list(conn.notices)}")
                conn.notices.clear()
            if in_xact:
                conn.execute("COMMIT")
        left = conn.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' "
                            "AND pid = pg_backend_pid()").fetchone()[0]
        if left:
            problems.append(f"client {n}: {left} advisory locks left after its last call")
    finally:
        conn.close()


def _stats():
    s = Counter()
    s["deadlocks"] = 0
    return s


def test_control_deadlock_detected_within_the_stress_waits(key):
    """The 0-deadlock result below means something: with deadlock_timeout = 10 ms a cycle of
    waits (here single-key calls taking two keys in opposite orders) is reported as 40P01
    within a 50 ms wait, the longest of the stress test."""
    a = connect("rel-stress-control-a")
    b = connect("rel-stress-control-b")
    result = {}
    try:
        # A's own check must not run first (it would find the cycle once B waits, and abort A).
        a.execute("SET deadlock_timeout = '30s'")
        b.execute(f"SET deadlock_timeout = '{DEADLOCK_TIMEOUT}'")
        for conn in (a, b):
            conn.execute("BEGIN")
        assert a.execute("SELECT advlock_try_with_timeout(%s, 0)", (key,)).fetchone()[0] is True
        assert b.execute("SELECT advlock_try_with_timeout(%s, 0)", (key + 1,)).fetchone()[0] is True

        def a_waits():
            try:
                result["a"] = a.execute("SELECT advlock_try_with_timeout(%s, 5000)", (key + 1,)).fetchone()[0]
            except psycopg.Error as e:
                result["a"] = e
        t = threading.Thread(target=a_waits)
        t.start()
        with connect("rel-stress-control-admin") as admin:
            wait_for_waiter(admin, a.info.backend_pid, key + 1)
        with pytest.raises(psycopg.errors.DeadlockDetected):
            b.execute("SELECT advlock_try_with_timeout(%s, 50)", (key,))
        b.execute("ROLLBACK")
        t.join(10)
        assert result.get("a") is True  # B's abort released key + 1
    finally:
        for conn in (a, b):
            if not conn.closed:
                conn.execute("ROLLBACK")
                conn.close()


@pytest.mark.parametrize("function", ["try", "lock"])
@pytest.mark.parametrize("scope", ["xact", "session"])
def test_timeout_gives_back_a_key_it_waited_for(key, scope, function):
    """The stress test's "false while holding" case made deterministic: the call waits for
    its first key (granted when its holder lets go 100 ms in), then runs out of time on the
    second. Everything the call took must be given back, the key it got after waiting
    included, without a WARNING, inside the caller's transaction."""
    first, second = key, key + 1
    holder1, holder2, caller = connect("rel-giveback-1"), connect("rel-giveback-2"), connect("rel-giveback")
    try:
        assert holder1.execute("SELECT advlock_try_with_timeout(%s, 0, 'session')", (first,)).fetchone()[0]
        assert holder2.execute("SELECT advlock_try_with_timeout(%s, 0, 'session')", (second,)).fetchone()[0]
        release = threading.Timer(0.1, lambda: holder1.execute("SELECT advlock_unlock(%s)", (first,)))
        release.start()
        caller.execute("BEGIN")
        call = ("SELECT advlock_try_all_with_timeout(ARRAY[%s, %s]::bigint[], 600, %s)" if function == "try"
                else "SELECT advlock_lock_all_with_timeout(ARRAY[%s, %s]::bigint[], 600, %s)")
        if function == "try":
            assert caller.execute(call, (first, second, scope)).fetchone()[0] is False
        else:
            caller.execute("SAVEPOINT s")
            with pytest.raises(psycopg.errors.LockNotAvailable):
                caller.execute(call, (first, second, scope))
            caller.execute("ROLLBACK TO SAVEPOINT s")
        release.join()
        held = caller.execute("SELECT advlock_holding(%s::bigint), advlock_holding(%s::bigint), "
                              "(SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid())",
                              (first, second)).fetchone()
        notices = list(caller.notices)
        caller.execute("COMMIT")
        assert held == (False, False, 0), f"after the timeout the caller still holds (first, second, rows) = {held}"
        assert not notices, notices
    finally:
        for conn in (holder1, holder2, caller):
            if not conn.closed:
                conn.execute("ROLLBACK")
                conn.execute("SELECT pg_advisory_unlock_all()")
                conn.close()


def test_multikey_stress(admin):
    seed = int(os.environ.get("ADVLOCK_SEED", random.randrange(1 << 30)))
    per_client = -(-CALLS // CLIENTS)
    print(f"\nmulti-key stress: seed {seed} (ADVLOCK_SEED), {CLIENTS} clients x {per_client} calls")
    registry = Registry()
    stats = [_stats() for _ in range(CLIENTS)]
    overrun_lists = [[] for _ in range(CLIENTS)]
    problems, crashed = [], []

    def run(n):
        try:
            _client(n, per_client, seed, registry, stats[n], overrun_lists[n], problems)
        except BaseException as e:  # noqa: BLE001 - reported below with the seed
            crashed.append(f"client {n} (seed {seed}): {e!r}")

    started = time.monotonic()
    threads = [threading.Thread(target=run, args=(n,)) for n in range(CLIENTS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.monotonic() - started

    total = _stats()
    for s in stats:
        total.update(s)
    overruns = sorted(x for lst in overrun_lists for x in lst)
    calls = sum(total[o] for o in ("true", "false", "55P03", "error"))
    p99 = overruns[int(len(overruns) * 0.99)] if overruns else 0.0
    left = advisory_locks(admin)

    figure(f"multi-key stress: seed {seed}, {CLIENTS} clients, {calls} calls in {elapsed:.1f} s "
           f"({calls / elapsed:.0f} calls/s)")
    figure(f"multi-key stress: true {total['true']}, false {total['false']}, 55P03 (lock form) {total['55P03']}, "
           f"deadlocks {total['deadlocks']}, other errors {total['error'] - total['deadlocks']}, "
           f"exclusion violations {len(registry.violations)}, shared grants overlapping another sharer "
           f"{registry.shared_overlaps}, advisory locks left {len(left)}, other problems (e.g. WARNINGs) {len(problems)}")
    mix = Counter()
    for name, count in total.items():
        if "/" in name:
            form, scope, mode = name.split("/")
            mix[form] += count
            mix[scope] += count
            mix[mode] += count
    figure("multi-key stress: calls by form, scope, mode: " + ", ".join(f"{k} {v}" for k, v in sorted(mix.items())))
    figure(f"multi-key stress: false returned after the deadline by p99 {p99:.1f} ms, "
           f"max {overruns[-1] if overruns else 0:.1f} ms (server-side, {len(overruns)} false answers)")

    assert not crashed, crashed
    assert total["deadlocks"] == 0, problems[:10]
    assert not registry.violations, f"{len(registry.violations)} violations; first: {registry.violations[:10]}"
    assert not problems, f"{len(problems)} problems; first: {problems[:10]}"
    assert not left, left
    assert calls == per_client * CLIENTS >= CALLS
    # Both answers and the shared path were exercised.
    assert total["true"] > calls // 10 and total["false"] + total["55P03"] > calls // 20, dict(total)
    assert registry.shared_overlaps > 0
    # One overall deadline: an N-key call must not wait up to N x timeout_ms.
    assert p99 < 50, f"false later than the deadline: p99 {p99:.1f} ms"
