"""Faults: a holder terminated, a waiter's client vanishing, and the grant/timeout race.

(The SIGKILL / crash-restart test is in test_zz_crash.py: it must run last.)
"""
import os
import random
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import psycopg
import pytest

from relsupport import FULL, SMALL, abrupt_close, figure, advisory_locks, backend_alive, connect, wait_for_waiter, wait_until


@pytest.fixture
def pool():
    with ThreadPoolExecutor(max_workers=4) as ex:
        yield ex


@pytest.mark.parametrize("holder_scope", ["session", "xact"])
def test_terminated_holder_releases_and_waiter_proceeds(admin, key, pool, holder_scope):
    holder = connect("rel-holder")
    holder_pid = holder.info.backend_pid
    other_key = key + 1
    if holder_scope == "xact":
        holder.execute("BEGIN")
    assert holder.execute("SELECT advlock_try_with_timeout(%s, 0, %s)", (key, holder_scope)).fetchone()[0]
    assert holder.execute("SELECT advlock_try_with_timeout(%s, 0, %s)", (other_key, holder_scope)).fetchone()[0]
    assert {r.key for r in advisory_locks(admin, holder_pid)} == {key, other_key}

    waiter = connect("rel-waiter")
    waiter_pid = waiter.info.backend_pid
    started = time.monotonic()
    fut = pool.submit(lambda: waiter.execute(
        "SELECT advlock_try_with_timeout(%s, 60000, scope => 'session')", (key,)).fetchone()[0])
    wait_for_waiter(admin, waiter_pid, key)

    assert admin.execute("SELECT pg_terminate_backend(%s)", (holder_pid,)).fetchone()[0] is True
    assert fut.result(timeout=30) is True
    assert time.monotonic() - started < 30
    # The holder's locks are gone from pg_locks and advlock_holders; the waiter now holds `key`.
    wait_until(lambda: not advisory_locks(admin, holder_pid), what="the holder's locks to vanish")
    assert admin.execute("SELECT count(*) FROM advlock_holders WHERE pid = %s", (holder_pid,)).fetchone()[0] == 0
    rows = admin.execute("SELECT pid, key, mode, granted FROM advlock_holders ORDER BY pid").fetchall()
    assert rows == [(waiter_pid, key, "exclusive", True)]
    # The terminated client finds out on its next statement.
    with pytest.raises(psycopg.OperationalError):
        holder.execute("SELECT 1")
    holder.close()
    assert waiter.execute("SELECT advlock_unlock(%s)", (key,)).fetchone()[0] is True
    waiter.close()


@pytest.mark.parametrize("case", ["check_interval", "holder_releases", "timeout_expires"])
def test_client_disconnect_during_wait(admin, key, pool, case):
    """A client blocked in advlock_try_with_timeout(k, 10000) loses its socket: no waiter
    entry (nor, once granted to the dead backend, any lock) may be left behind.

    - check_interval: client_connection_check_interval notices the dead socket during the wait;
    - holder_releases: the dead backend is granted the lock, then exits on writing the result;
    - timeout_expires: (default settings) the wait ends at the timeout, then the backend exits.
    """
    holder = connect("rel-holder")
    assert holder.execute("SELECT advlock_try_with_timeout(%s, 0, 'session')", (key,)).fetchone()[0]
    waiter = connect("rel-waiter")
    waiter_pid = waiter.info.backend_pid
    if case == "check_interval":
        waiter.execute("SET client_connection_check_interval = '100ms'")
    fut = pool.submit(lambda: waiter.execute(
        "SELECT advlock_try_with_timeout(%s, 10000, scope => 'session')", (key,)).fetchone()[0])
    wait_for_waiter(admin, waiter_pid, key)
    disconnected = time.monotonic()
    abrupt_close(waiter)
    with pytest.raises(psycopg.OperationalError):
        fut.result(timeout=30)
    waiter.close()

    if case == "holder_releases":
        assert holder.execute("SELECT advlock_unlock(%s)", (key,)).fetchone()[0] is True
    deadline = {"check_interval": 5, "holder_releases": 5, "timeout_expires": 20}[case]
    wait_until(lambda: not advisory_locks(admin, waiter_pid), timeout=deadline,
               what=f"PID {waiter_pid}'s advisory rows to vanish")
    wait_until(lambda: not backend_alive(admin, waiter_pid), timeout=deadline,
               what=f"PID {waiter_pid} to exit")
    gone_after = time.monotonic() - disconnected
    figure(f"client disconnect during a wait [{case}]: waiter backend gone {gone_after:.2f} s after the socket closed")
    if case != "timeout_expires":
        assert gone_after < 5.0, gone_after
    # (timeout_expires: nothing reads the socket during the wait, so it ends at the 10 s
    # timeout at the latest; the bound is the 20 s deadline above.)

    # The lock is in a sane state: the holder still holds it, or (released) it is free.
    if case == "holder_releases":
        assert admin.execute("SELECT advlock_try_with_timeout(%s, 0, 'session')", (key,)).fetchone()[0]
        assert admin.execute("SELECT advlock_unlock(%s)", (key,)).fetchone()[0]
    else:
        assert [(r.pid, r.granted) for r in advisory_locks(admin, key=key)] == [(holder.info.backend_pid, True)]
        assert holder.execute("SELECT advlock_unlock(%s)", (key,)).fetchone()[0] is True
    holder.close()


def _result(conn):
    """Blocks until the query sent with pgconn.send_query_params completes.
    Returns (value, None) or (None, (sqlstate, message))."""
    pgconn = conn.pgconn
    value, error = None, None
    while True:
        res = pgconn.get_result()
        if res is None:
            break
        if res.status == psycopg.pq.ExecStatus.TUPLES_OK:
            value = res.get_value(0, 0)
        elif res.status != psycopg.pq.ExecStatus.COMMAND_OK:
            error = ((res.error_field(psycopg.pq.DiagnosticField.SQLSTATE) or b"").decode(),
                     (res.error_field(psycopg.pq.DiagnosticField.MESSAGE_PRIMARY) or b"").decode())
    return value, error


LOCKS_OF_ME = ("SELECT array_agg(mode || ':' || granted) FROM pg_locks"
               " WHERE locktype = 'advisory' AND pid = pg_backend_pid()")


def _race(function, key, scope, iterations, seed, figures, violations, escaped):
    """One holder/waiter pair hammering the boundary between grant and timeout.

    The holder holds `key`; the waiter asks with a small timeout T; the holder releases at
    about T after the request went out. A feedback loop keeps the release offset where both
    outcomes happen about equally often, i.e. right at the timeout, with random jitter on top.
    Invariant violations are collected in `violations` (with seed and iteration); errors
    escaping advlock_try_with_timeout (it must only ever return true or false), and errors of
    advlock_lock_with_timeout other than its own timeout error, in `escaped`.

    function 'lock' (advlock_lock_with_timeout): success counts as true, its own 55P03
    "could not obtain ..." error as false.
    """
    name = f"{function}/{scope}"
    rng = random.Random(seed)
    holder = connect(f"rel-race-holder-{function}-{scope}")
    waiter = connect(f"rel-race-waiter-{function}-{scope}")
    # true_fast: true with client-measured elapsed < T; true_late: true with elapsed >= T (granted
    # at about the timeout; the client's clock includes a round trip, so this is an upper bound).
    counts = {"true_fast": 0, "true_late": 0, "false": 0, "error": 0}
    offset = 0.0  # seconds, added to T for the release moment
    query = (b"SELECT advlock_try_with_timeout($1::int8, $2::int4, $3::text)" if function == "try"
             else b"SELECT advlock_lock_with_timeout($1::int8, $2::int4, $3::text)")
    check_session = f"SELECT ({LOCKS_OF_ME}), advlock_unlock(%s), advlock_unlock(%s)"

    def violation(i, what):
        violations.append(f"[{name}] seed {seed} iteration {i}: {what}")

    try:
        for i in range(iterations):
            if len(violations) > 20:
                break
            timeout_ms = rng.randint(5, 20)
            if not holder.execute("SELECT pg_try_advisory_lock(%s)", (key,)).fetchone()[0]:
                violation(i, "holder could not take the lock: the waiter kept it")
                break
            if scope == "xact":
                waiter.execute("BEGIN")
            params = [str(key).encode(), str(timeout_ms).encode(), scope.encode()]
            sent = time.perf_counter()
            waiter.pgconn.send_query_params(query, params)
            release_at = sent + timeout_ms / 1000 + offset + rng.uniform(-0.0005, 0.0005)
            pause = release_at - time.perf_counter()
            if pause > 0:
                time.sleep(pause)
            if holder.execute("SELECT pg_advisory_unlock(%s)", (key,)).fetchone()[0] is not True:
                violation(i, "holder's unlock returned false")
            got, error = _result(waiter)
            elapsed = time.perf_counter() - sent
            if function == "lock":
                if error is None:
                    got = b"t"
                elif error[0] == "55P03" and error[1].startswith("could not obtain"):
                    got, error = b"f", None
                    if scope == "xact":  # the error aborted the transaction: nothing to inspect
                        waiter.execute("ROLLBACK")
                        waiter.execute("BEGIN")
            if error is not None:
                counts["error"] += 1
                held = waiter.execute(LOCKS_OF_ME).fetchone()[0] if scope == "session" else None
                escaped.append(f"[{name}] seed {seed} iteration {i}: T = {timeout_ms} ms, returned after "
                               f"{elapsed * 1000:.2f} ms with ERROR {error[0]} {error[1]!r}; "
                               f"advisory locks held by the waiter afterwards: {held}")
                if scope == "session":
                    while waiter.execute("SELECT pg_advisory_unlock(%s)", (key,)).fetchone()[0]:
                        pass
                else:
                    waiter.execute("ROLLBACK")
                continue
            if got not in (b"t", b"f"):
                violation(i, f"returned {got!r}")
                continue
            if scope == "session":
                held, first, second = waiter.execute(check_session, (key, key)).fetchone()
                if got == b"t" and (held, first, second) != (["ExclusiveLock:true"], True, False):
                    # Exactly one session hold: the first unlock succeeds, the second does not.
                    violation(i, f"true, but locks {held}, unlocks {first}, {second}")
                if got == b"f" and (held, first, second) != (None, False, False):
                    # Nothing held, nothing queued; advlock_unlock says so (false + WARNING).
                    violation(i, f"false, but locks {held}, unlocks {first}, {second}")
            else:
                held = waiter.execute(LOCKS_OF_ME).fetchone()[0]
                if held != (["ExclusiveLock:true"] if got == b"t" else None):
                    violation(i, f"returned {got!r} inside the transaction, but locks {held}")
                waiter.execute("COMMIT")
                if waiter.execute(LOCKS_OF_ME).fetchone()[0] is not None:
                    violation(i, "xact lock survived COMMIT")
            if got == b"t":
                late = elapsed * 1000 >= timeout_ms
                counts["true_late" if late else "true_fast"] += 1
                offset += 0.0001
            else:
                if elapsed * 1000 < timeout_ms:
                    violation(i, f"false after {elapsed * 1000:.2f} ms < T = {timeout_ms} ms")
                counts["false"] += 1
                offset -= 0.0001
    finally:
        figures[name] = dict(counts, iterations=sum(counts.values()), final_offset_ms=round(offset * 1000, 2))
        holder.close()
        waiter.close()


def test_grant_timeout_race(admin, key):
    """Releases landing right at the timeout, thousands of times, in three pairs at once:
    advlock_try_with_timeout in session and xact scope, advlock_lock_with_timeout in session
    scope. A try must return true (holding exactly one lock) or false (holding nothing), never
    raise; a lock call must succeed (holding one) or raise its own timeout error (holding none)."""
    iterations = 20000 if FULL else 500 if SMALL else 2000
    seed = int(os.environ.get("ADVLOCK_SEED", random.randrange(1 << 30)))
    print(f"\ngrant/timeout race: seed {seed} (ADVLOCK_SEED), {iterations} iterations per pair")
    figures, violations, escaped, errors = {}, [], [], []
    pairs = [("try", "session"), ("try", "xact"), ("lock", "session")]

    def run(n, function, scope):
        try:
            _race(function, key + n, scope, iterations, seed + n, figures, violations, escaped)
        except BaseException as e:  # noqa: BLE001 - reported below with the seed
            errors.append(f"[{function}/{scope}] seed {seed + n}: {e!r}")

    started = time.monotonic()
    threads = [threading.Thread(target=run, args=(n, f, s)) for n, (f, s) in enumerate(pairs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.monotonic() - started
    for name, f in figures.items():
        figure(f"grant/timeout race [{name}]: {f}")
    figure(f"grant/timeout race: seed {seed}, {len(pairs)} pairs x {iterations} iterations in {elapsed:.1f} s")
    for line in escaped:
        figure(f"grant/timeout race: escaped error: {line}")
    assert not errors, errors
    assert not violations, "\n".join(violations)
    for function, scope in pairs:
        f = figures[f"{function}/{scope}"]
        assert f["iterations"] == iterations
        # The feedback loop must actually have exercised both outcomes.
        assert f["false"] > iterations // 20, f
        assert f["true_fast"] + f["true_late"] > iterations // 20, f
    # The grant can race the timer (LockAcquire succeeds with the timeout's cancel pending):
    # advlock must take that cancel inside its protected block, never let it escape.
    assert not escaped, f"a lock-timeout cancel escaped the protected wait {len(escaped)} times; first: {escaped[0]}"
