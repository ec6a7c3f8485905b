"""Lease stress: 16 clients, 4 keys (1, 2 or 3 slots each), random TTLs of 5-50 ms, random
waits (0-50 ms, some cancelled by statement_timeout), and random fates for each lease granted:
released, renewed a few times, or abandoned to expire.

Checked independently of advlock's own views, on the server's clock (clock_timestamp() around
each call):
* no over-grant: at no instant do more leases of a key hold than its slots. Each lease's
  interval is what its client could rely on -- from the grant's return to the earliest the
  lease can have ended (release call start, or the last successful renewal's start + TTL) -- a
  sub-interval of its real life, so overlapping intervals beyond the slots are real over-grants;
* fencing: on 1-slot keys, tokens grow in grant order;
* never NULL (or an error) while granted: after a call returns NULL or is cancelled, this
  client holds no lease it does not know of.
"""
import os
import random
import threading
from collections import defaultdict

import psycopg

from conftest import needs_preload
from pgsupport import psy

CLIENTS = 16
OPS = int(os.environ.get("ADVLOCK_LEASE_STRESS_OPS", "120"))
KEYS = {7101: 1, 7102: 1, 7103: 2, 7104: 3}


def client(n, seed, intervals, violations, counts):
    rng = random.Random(seed + n)
    known = set()        # leases this client was given (held or abandoned to expire)
    with psy(f"advlock-test/lease-stress-{n}") as conn:
        for _ in range(OPS):
            key = rng.choice(list(KEYS))
            ttl = rng.randint(5, 50)
            wait = rng.choice([0, rng.randint(1, 50)])
            cancel_ms = rng.randint(1, 20) if rng.random() < 0.15 else 0
            try:
                conn.execute(f"SET statement_timeout = {cancel_ms}")
                t0, lease, t1 = conn.execute(
                    "SELECT clock_timestamp(), advlock_lease(%s, %s, %s, slots => %s), clock_timestamp()",
                    (key, ttl, wait, KEYS[key])).fetchone()
            except psycopg.errors.QueryCanceled:
                lease, counts["cancelled"] = None, counts["cancelled"] + 1
            finally:
                conn.execute("SET statement_timeout = 0")
            if lease is None:
                unknown = conn.execute(
                    "SELECT array_agg(lease) FROM advlock_leases WHERE granted AND pid = pg_backend_pid() "
                    "AND NOT lease = ANY(%s)", (list(known),)).fetchone()[0]
                if unknown:
                    violations.append(f"client {n}: NULL or cancelled on key {key}, yet holds {unknown}")
                counts["none"] += 1
                continue
            known.add(lease)
            counts["granted"] += 1
            relied_until = t0.timestamp() + ttl / 1000
            fate = rng.random()
            if fate < 0.5:                 # work a little, renewing, then release
                for _ in range(rng.randint(0, 3)):
                    threading.Event().wait(rng.uniform(0, ttl / 2000))
                    t_renew, ok = conn.execute("SELECT clock_timestamp(), advlock_lease_renew(%s, %s)",
                                               (lease, ttl)).fetchone()
                    if not ok:
                        counts["lost"] += 1
                        break
                    relied_until = max(relied_until, t_renew.timestamp() + ttl / 1000)
                t_release, released = conn.execute("SELECT clock_timestamp(), advlock_lease_release(%s)",
                                                    (lease,)).fetchone()
                if released:
                    relied_until = min(relied_until, t_release.timestamp())
                    counts["released"] += 1
            else:                          # abandon it: it must expire by itself
                counts["abandoned"] += 1
            intervals[key].append((t1.timestamp(), relied_until, lease))


@needs_preload
def test_lease_stress_no_overgrant_no_null_while_granted_tokens_in_order(admin, measure):
    seed = int(os.environ.get("ADVLOCK_STRESS_SEED", random.randrange(10**8)))
    intervals, violations = defaultdict(list), []
    counts = defaultdict(int)
    threads = [threading.Thread(target=client, args=(n, seed, intervals, violations, counts)) for n in range(CLIENTS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    assert not any(t.is_alive() for t in threads), "a client did not finish"
    for key, slots in KEYS.items():
        events = sorted([(a, 1) for a, b, _ in intervals[key] if b > a] +
                        [(b, -1) for a, b, _ in intervals[key] if b > a])
        live = 0
        for _, step in events:
            live += step
            if live > slots:
                violations.append(f"key {key}: {live} leases relied on at once, {slots} slots (seed {seed})")
                break
        if slots == 1:
            tokens = [lease for _, _, lease in sorted(intervals[key])]
            if tokens != sorted(tokens):
                violations.append(f"key {key}: tokens out of grant order (seed {seed})")
    measure("seed", seed)
    for name in ("granted", "released", "abandoned", "lost", "none", "cancelled"):
        measure(name, counts[name])
    assert not violations, violations[:10]
    assert counts["granted"] > CLIENTS and counts["none"] > 0 and counts["abandoned"] > 0
    # Every abandoned lease expires on its own; nothing stays queued.
    admin.execute("SELECT pg_sleep(0.06)")
    assert admin.execute("SELECT count(*) FROM advlock_leases").fetchone()[0] == 0
