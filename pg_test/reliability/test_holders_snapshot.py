"""advlock_holders under churn: every waiting row names a blocker from the same snapshot.

Clients race for a few keys (exclusive and shared, xact and session scope, holds of a few
milliseconds, bounded waits), while a sampler reads advlock_holders over and over. In every
sample, each waiting row must have a non-empty blocked_by, and each pid in it must appear in
that same sample as a holder of the same key in a conflicting mode, or as a waiter of the same
key for a conflicting mode (queued ahead). 0.2.0 computed blocked_by with pg_blocking_pids(), a
second snapshot of the lock table, and showed about 7 % of waiters blocked by nobody.
"""
import random
import threading
import time


from relsupport import FULL, advlock_key, connect, figure

CLIENTS = 12
SECONDS = 20 if FULL else 6
KEYS = [advlock_key("reliability-snapshot", str(i)) for i in range(3)]


def conflicts(a, b):
    return a == "exclusive" or b == "exclusive"


def test_every_waiter_names_a_blocker_from_the_same_snapshot():
    stop = threading.Event()
    errors = []

    def client(n):
        rng = random.Random(n)
        conn = connect(f"rel-snapshot-{n}")
        try:
            while not stop.is_set():
                k = rng.choice(KEYS)
                mode = "shared" if rng.random() < 0.3 else "exclusive"
                if rng.random() < 0.5:
                    conn.execute("BEGIN")
                    got = conn.execute("SELECT advlock_try_with_timeout(%s, %s, 'xact', %s)",
                                       (k, rng.randint(1, 30), mode)).fetchone()[0]
                    if got:
                        time.sleep(rng.uniform(0, 0.005))
                    conn.execute("COMMIT")
                else:
                    got = conn.execute("SELECT advlock_try_with_timeout(%s, %s, 'session', %s)",
                                       (k, rng.randint(1, 30), mode)).fetchone()[0]
                    if got:
                        time.sleep(rng.uniform(0, 0.005))
                        conn.execute("SELECT advlock_unlock(%s, %s)", (k, mode))
        except Exception as e:  # surfaced below
            errors.append(repr(e))
        finally:
            conn.close()

    threads = [threading.Thread(target=client, args=(n,)) for n in range(CLIENTS)]
    for t in threads:
        t.start()
    sampler = connect("rel-snapshot-sampler")
    samples = waiter_rows = 0
    bad = []
    deadline = time.monotonic() + SECONDS
    try:
        while time.monotonic() < deadline:
            rows = sampler.execute(
                "SELECT pid, key, mode, granted, blocked_by FROM advlock_holders WHERE key = ANY(%s)",
                (KEYS,)).fetchall()
            samples += 1
            for pid, k, mode, granted, blocked_by in rows:
                if granted:
                    continue
                waiter_rows += 1
                same_key = [r for r in rows if r[1] == k and r[0] != pid]
                ok = bool(blocked_by) and all(
                    any(r[0] == b and conflicts(r[2], mode) for r in same_key) for b in blocked_by)
                if not ok:
                    bad.append((pid, k, mode, blocked_by, rows))
    finally:
        stop.set()
        for t in threads:
            t.join(30)
        sampler.close()
    figure(f"advlock_holders snapshot: {samples} samples, {waiter_rows} waiter rows, "
           f"{len(bad)} without a blocker from the same snapshot")
    assert not errors, errors[:3]
    assert waiter_rows >= 100, f"too little contention to test anything ({waiter_rows} waiter rows)"
    assert not bad, bad[:3]
