"""advlock: safe PostgreSQL advisory locks from Python (psycopg 3, asyncpg, SQLAlchemy 2.0).

Thin wrappers over the advlock extension's SQL functions: every wait is bounded on the
server, keys follow advlock's key spec v1, and the scope rules are enforced, not documented.
"""

from ._api import LockEntry, XactLock, holders, lock, lock_all, try_lock
from ._errors import (
    Error,
    Holder,
    LeaseLost,
    LeasesUnavailable,
    LeaseTimeout,
    LockLost,
    LockTimeout,
    NotInTransaction,
    NotPreloaded,
)
from ._key import key
from ._lease import Lease, lease
from ._session import AsyncHeldLock, HeldLock, SessionLock, session_lock

__version__ = "0.1.0"

__all__ = [
    "AsyncHeldLock",
    "Error",
    "HeldLock",
    "Holder",
    "Lease",
    "LeaseLost",
    "LeaseTimeout",
    "LeasesUnavailable",
    "LockEntry",
    "LockLost",
    "LockTimeout",
    "NotInTransaction",
    "NotPreloaded",
    "SessionLock",
    "XactLock",
    "holders",
    "key",
    "lease",
    "lock",
    "lock_all",
    "session_lock",
    "try_lock",
]
