"""A Celery-beat-style singleton: every replica runs `run_as_leader`; one at a time is the
leader and ticks, the others wait for the lease on the server (no polling). A leader whose
renewals fail stops at the renew deadline, before the lease can pass to another replica, and
each tick carries the lease's token so the work it schedules can be fenced."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import advlock


def run_as_leader(
    pool: Any, name: str, tick: Callable[[int], None], stop: threading.Event, *, ttl: float = 30.0, every: float = 1.0
) -> None:
    """Campaign for ("beat", name) on `pool` (psycopg_pool.ConnectionPool or a SQLAlchemy
    Engine) until `stop` is set; while leader, call tick(token) every `every` seconds."""
    while not stop.is_set():
        try:
            with advlock.lease(pool, "beat", name, ttl=ttl, timeout=min(ttl, 5.0)) as lease:
                while not stop.is_set():
                    lease.check()  # LeaseLost at the renew deadline: stop acting as leader
                    tick(lease.token)
                    stop.wait(every)
        except (advlock.LeaseTimeout, advlock.LeaseLost):
            continue  # not (or no longer) the leader: campaign again
