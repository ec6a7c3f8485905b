"""advlock: safe PostgreSQL advisory locks from Python (psycopg 3, asyncpg, SQLAlchemy 2.0).

Thin wrappers over the advlock extension's SQL functions: every wait is bounded on the
server, keys follow advlock's key spec v1, and the scope rules are enforced, not documented.
"""

from ._api import AsyncXactLock, LockEntry, XactLock, fence, holders, lease_check, lock, lock_all, try_lock
from ._election import Leader, Leadership, leader, observe
from ._errors import (
    Error,
    FenceRefused,
    Holder,
    LeaseLost,
    LeaseNotHeld,
    LeasesUnavailable,
    LeaseTimeout,
    LockLost,
    LockTimeout,
    NotInstalled,
    NotInTransaction,
    NotPreloaded,
    UnsafePooler,
)
from ._key import key
from ._lease import Lease, lease
from ._session import AsyncHeldLock, HeldLock, SessionLock, session_lock
from ._version import __version__

__all__ = [
    "AsyncHeldLock",
    "AsyncXactLock",
    "Error",
    "FenceRefused",
    "HeldLock",
    "Holder",
    "Leader",
    "Leadership",
    "Lease",
    "LeaseLost",
    "LeaseNotHeld",
    "LeaseTimeout",
    "LeasesUnavailable",
    "LockEntry",
    "LockLost",
    "LockTimeout",
    "NotInTransaction",
    "NotInstalled",
    "NotPreloaded",
    "SessionLock",
    "UnsafePooler",
    "XactLock",
    "__version__",
    "fence",
    "holders",
    "key",
    "leader",
    "lease",
    "lease_check",
    "lock",
    "lock_all",
    "observe",
    "session_lock",
    "try_lock",
]
