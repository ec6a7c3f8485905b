"""Leader election on leases (advlock_campaign; needs advlock preloaded): leader() campaigns and
holds the term like a lease (renewed in the background, the body stopped at the renew deadline,
resigned on exit), observe() follows the leader of a key as it changes, without polling."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ._api import positive_ms
from ._drivers import SCHEMA, check_schema
from ._key import check_ns, id_text, key
from ._lease import Lease, LeaseSource, _AsyncRunner, _runner, _unavailable

_CAMPAIGN = (
    "SELECT " + SCHEMA + "advlock_campaign(CAST({} AS text), CAST({} AS text), CAST({} AS int4), CAST({} AS int4),"
    " CAST({} AS text))"
)
# Campaigning when the key is taken: commit first and wait holding no snapshot.
_WAIT_CAMPAIGN = (
    "CALL " + SCHEMA + "advlock_wait_campaign(CAST({} AS int8), CAST({} AS int4), CAST({} AS int4), CAST({} AS text))"
)
_RESIGN = "SELECT " + SCHEMA + "advlock_resign(CAST({} AS int8))"
_LEADER = (
    "SELECT term, candidate, since, expires_at, pid, application_name FROM "
    + SCHEMA
    + "advlock_leader(CAST({} AS text), CAST({} AS text))"
)
# The observer's wait, snapshot-free where the source lends a connection outside a transaction.
_WAIT_LEADER = "CALL " + SCHEMA + "advlock_wait_leader(CAST({} AS int8), CAST({} AS int4), CAST({} AS int8))"
_OBSERVE = (
    "SELECT changed, term, candidate, since, expires_at, pid, application_name FROM "
    + SCHEMA
    + "advlock_observe_leader(CAST({} AS text), CAST({} AS text), CAST({} AS int4), CAST({} AS int8))"
)
_CANDIDATE_BYTES = 128


def _candidate(candidate: object) -> str:
    if not isinstance(candidate, str):
        raise TypeError(f"candidate must be a str (e.g. host or pod name), got {type(candidate).__name__}")
    size = len(candidate.encode("utf-8"))
    if not 1 <= size <= _CANDIDATE_BYTES or any(ord(c) < 32 or ord(c) == 127 for c in candidate):
        raise ValueError(
            f"candidate must be 1 to {_CANDIDATE_BYTES} bytes without control characters (observers see it as the "
            f"leader's name), got {candidate!r}"
        )
    return candidate


class Leadership(Lease):
    """What leader() returns: a term of leadership, held like a lease (`async with` on an
    asyncio source, `with` on a blocking one). `term` is the term, a fencing token larger than
    every earlier term of the key; `lost`, `check()` and the renew deadline as for a lease.
    On exit the term is resigned (advlock_resign), handing the key to the next candidate at
    once, unless it was stopped at the renew deadline (then it runs out at its TTL)."""

    _acquire_sql = _CAMPAIGN
    _wait_sql = _WAIT_CAMPAIGN
    _release_sql = _RESIGN
    _what = "term of leadership"

    def __init__(self, source: object, ns: str, id: str | int, candidate: str, **kwargs: Any) -> None:
        self.candidate = _candidate(candidate)
        super().__init__(source, ns, id, slots=1, **kwargs)

    @property
    def term(self) -> int:
        return self.token

    def _acquire_args(self, wait_ms: int) -> list[object]:
        return [self.ns, self.id, self.ttl_ms, wait_ms, self.candidate]

    def _wait_args(self) -> list[object]:
        return [self.key, self.ttl_ms, self.timeout_ms, self.candidate]


def leader(
    source: LeaseSource,
    ns: str,
    id: str | int = "",
    *,
    candidate: str,
    ttl: float,
    timeout: float,
    renew_deadline: float | None = None,
    schema: str | None = None,
) -> Leadership:
    """Campaign for the leadership of (ns, id) as `candidate`: wait at most `timeout` seconds
    (LeaseTimeout naming the leader), then hold the term for the block, renewed in the
    background on `source` (a pool, an engine, one psycopg connection); the body is stopped at
    the renew deadline (asyncio: cancelled; blocking: `check()` raises LeaseLost) and the term
    is resigned on exit. Needs advlock in shared_preload_libraries."""
    return Leadership(
        source, ns, id, candidate, ttl=ttl, timeout=timeout, renew_deadline=renew_deadline, schema=schema
    )


@dataclass(frozen=True)
class Leader:
    """The leader of a key as the server reports it (advlock_leader): its term (a fencing
    token), candidate, when the term started and when it expires unless renewed, and the
    backend that last renewed it. An observer gets None when there is no leader."""

    term: int
    candidate: str | None
    since: datetime | None = None
    expires_at: datetime | None = None
    pid: int | None = None
    application_name: str | None = None


async def observe(
    source: LeaseSource,
    ns: str,
    id: str | int = "",
    *,
    known_term: int | None = None,
    wait: float = 30.0,
    schema: str | None = None,
) -> AsyncIterator[Leader | None]:
    """Follow the leader of (ns, id) on an asyncio source (a pool or async engine): yields the
    leader (a Leader) or None (no leader: after an expiry or a resignation) every time it
    differs from the last one yielded, starting with the current one (unless its term is
    `known_term`, a term the caller already knows). Each wait lasts at most `wait` seconds on the server, woken
    by a grant, a resignation or an expiry, and holds no snapshot where the source lends a
    connection outside a transaction; then it waits again. Stop by leaving the loop."""
    k_ns, k_id = check_ns(ns), id_text(id)
    k = key(k_ns, k_id)
    wait_ms = positive_ms(wait, "wait")
    if known_term is not None and (isinstance(known_term, bool) or not isinstance(known_term, int)):
        raise TypeError(f"known_term must be an int (a term) or None, got {type(known_term).__name__}")
    runner = _runner(source, check_schema(schema))
    if not isinstance(runner, _AsyncRunner):
        raise TypeError("advlock.observe() is an async iterator: pass an asyncio source (a pool or an AsyncEngine)")
    known = known_term
    # First the leader now (the server's observe only reports a change from known_term: "no
    # leader" included, so a first None is read here, not waited for).
    try:
        rows = await runner.query(_LEADER, [k_ns, k_id])
    except Exception as e:
        unavailable = _unavailable(e)
        if unavailable is None:
            raise
        raise unavailable from e
    now: Leader | None = Leader(*rows[0]) if rows else None
    if known_term is None or now is None or now.term != known_term:
        known = None if now is None else now.term
        yield now
    while True:
        try:
            called = await runner.call(_WAIT_LEADER, [k, wait_ms, known])
            if called is not None:
                term, changed, candidate = called[0]
                if not changed:
                    continue
                current: Leader | None = None
                if term is not None:
                    rows = await runner.query(_LEADER, [k_ns, k_id])
                    details = [r for r in rows if r[0] == term]
                    current = Leader(*details[0]) if details else Leader(int(term), candidate)
            else:
                (row,) = await runner.query(_OBSERVE, [k_ns, k_id, wait_ms, known])
                if not row[0]:
                    continue
                current = None if row[1] is None else Leader(*row[1:])
        except Exception as e:
            unavailable = _unavailable(e)
            if unavailable is None:
                raise
            raise unavailable from e
        known = None if current is None else current.term
        yield current
