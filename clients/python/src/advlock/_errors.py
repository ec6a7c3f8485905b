"""advlock's exceptions, and the mapping from the server's 55P03 lock-timeout error."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass


class Error(Exception):
    """Base class of every advlock error."""


class NotInTransaction(Error):
    """An xact-scope lock was asked for outside a transaction block: it would end with the
    statement, protecting nothing."""


class LockTimeout(Error):
    """The lock stayed busy for the whole bounded wait (SQLSTATE 55P03).

    `holders` lists who held it when the wait ended, parsed from the server's DETAIL
    ("Held by PID 365 (application_name 'worker', state 'idle')."); it is empty when the holder
    let go just after the wait ended."""

    def __init__(self, message: str, detail: str | None = None) -> None:
        super().__init__(message if not detail else f"{message}\nDETAIL: {detail}")
        self.detail = detail
        self.holders: tuple[Holder, ...] = parse_holders(detail)

    @property
    def pid(self) -> int | None:
        """The (first) holder's backend pid, if the server named one."""
        return self.holders[0].pid if self.holders else None

    @property
    def application_name(self) -> str | None:
        """The (first) holder's application_name, if the server named one."""
        return self.holders[0].application_name if self.holders else None


class LockLost(Error):
    """A session lock's connection was lost (or the lock was gone at unlock time): whatever
    the body did after that was not protected. Never swallowed: raised on exit."""


class LeaseTimeout(LockTimeout):
    """advlock_lease waited its whole bounded wait without getting the key (it returned NULL):
    `holders` lists the holders' pid and application_name from advlock_leases (state None)."""


class LeaseLost(LockLost):
    """A lease ended while its block ran: a renewal returned false (it expired, or someone
    released it), no renewal succeeded within the TTL, or the release found it already gone.
    Raised on exit (an asyncio body is cancelled first), never swallowed."""


class LeasesUnavailable(Error):
    """This database has no leases: the SQL edition (or an extension version before them)."""


class NotPreloaded(LeasesUnavailable):
    """advlock is not in shared_preload_libraries, so every lease function raises 55000: add
    `shared_preload_libraries = 'advlock'` to postgresql.conf and restart PostgreSQL."""


class FenceRefused(Error):
    """advlock_fence refused this writer's token (SQLSTATE LK001): a larger token has already
    passed the fence, so a newer holder has taken over. The transaction is aborted: roll it
    back and stop writing. `token` is the refused token, `passed` the one that had passed."""

    def __init__(self, message: str, token: int, passed: int | None, detail: str | None = None) -> None:
        super().__init__(message if not detail else f"{message}\nDETAIL: {detail}")
        self.token = token
        self.passed = passed
        self.detail = detail


class LeaseNotHeld(LeaseLost):
    """advlock_lease_check found the lease no longer held (SQLSTATE LK002) inside the writer's
    transaction: it expired or was released. The transaction is aborted: roll it back."""


class NotInstalled(Error):
    """Neither the advlock extension nor the SQL edition is installed in the database (and no
    schema= named where it is)."""


class UnsafePooler(Error):
    """session_lock() found that its connection is not one server session for its whole life:
    a pooler in transaction or statement mode (PgBouncer, ...) hands the server session to other
    clients between transactions, so a session lock taken through it would be shared with them
    (two holders at once) or left behind. Use a DSN that reaches PostgreSQL directly, a pooler
    in session mode, advlock.lease() (which any pool can carry), or advlock.lock() in a
    transaction."""


@dataclass(frozen=True)
class Holder:
    """One holder named in a lock-timeout DETAIL."""

    pid: int
    application_name: str | None
    state: str | None


def holder_text(pid: object, application_name: object, state: object = None) -> str:
    """How a message names a holder: "PID 365 (application_name 'worker', state 'idle')", with
    "no application_name" when it has none (NULL or empty), never "application_name None"."""
    app = f"application_name {application_name!r}" if application_name else "no application_name"
    return f"PID {pid} ({app}" + (f", state {state!r})" if state is not None else ")")


# The DETAIL is built with format('PID %s (application_name %s, state %s)', pid,
# quote_literal(app), quote_literal(state)); quote_literal gives '' for a quote, an E'' string
# when a backslash is present, and NULL (printed as nothing) for NULL.
_LITERAL = r"(E?'(?:[^']|'')*'|)"
_HOLDER = re.compile(rf"PID (\d+) \(application_name {_LITERAL}, state {_LITERAL}\)")


def _unquote(literal: str) -> str | None:
    if literal == "":
        return None
    body = literal[2:-1] if literal.startswith("E") else literal[1:-1]
    body = body.replace("''", "'")
    return body.replace("\\\\", "\\") if literal.startswith("E") else body


def parse_holders(detail: str | None) -> tuple[Holder, ...]:
    if not detail:
        return ()
    return tuple(Holder(int(pid), _unquote(app), _unquote(state)) for pid, app, state in _HOLDER.findall(detail))


def as_lock_timeout(exc: BaseException) -> LockTimeout | None:
    """The LockTimeout for a driver error that is (or wraps) SQLSTATE 55P03, else None (psycopg
    has .diag.message_detail, asyncpg .detail)."""
    found: LockTimeout | None = None
    for e in chain(exc):
        if getattr(e, "sqlstate", None) == "55P03":
            candidate = LockTimeout(*server_text(e))
            if candidate.detail:
                return candidate
            found = found or candidate  # a wrapper without the DETAIL: keep looking for the original
    return found


def chain(exc: BaseException) -> Iterator[BaseException]:
    """exc and every error behind it: drivers differ (psycopg and asyncpg raise their own,
    SQLAlchemy wraps either in .orig, and its asyncpg adapter chains the original as
    __cause__), so walk them all instead of importing any driver."""
    seen: set[int] = set()
    todo: list[BaseException | None] = [exc]
    while todo:
        e = todo.pop()
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        yield e
        orig = getattr(e, "orig", None)
        todo += [orig if isinstance(orig, BaseException) else None, e.__cause__, e.__context__]


def find_sqlstate(exc: BaseException, sqlstate: str) -> BaseException | None:
    """The driver error with that SQLSTATE in exc's chain, or None."""
    return next((e for e in chain(exc) if getattr(e, "sqlstate", None) == sqlstate), None)


def server_text(e: BaseException) -> tuple[str, str | None]:
    """(message, detail) of a psycopg or asyncpg error."""
    diag = getattr(e, "diag", None)
    if diag is not None:
        return str(getattr(diag, "message_primary", None) or e), getattr(diag, "message_detail", None)
    detail = getattr(e, "detail", None)
    return str(getattr(e, "message", None) or e), detail if isinstance(detail, str) else None
