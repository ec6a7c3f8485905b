"""Fixtures for the lease suite: the client suite's helpers (pgsupport) and its PgBouncer, a
skip of everything but the 55000 check when advlock is not preloaded, and a check after every
test that it left no lease or waiter behind."""
import importlib.util
import sys
import time
from pathlib import Path

import pytest

CLIENTS = Path(__file__).resolve().parent.parent / "clients"
sys.path.insert(0, str(CLIENTS))

from pgsupport import PG, psy  # noqa: E402

_spec = importlib.util.spec_from_file_location("clients_conftest", CLIENTS / "conftest.py")
_clients = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_clients)
pgbouncer = _clients.pgbouncer   # PgBouncer in transaction mode in front of the test instance
measure = _clients.measure       # numbers seen, printed after the run
pytest_terminal_summary = _clients.pytest_terminal_summary


def preloaded() -> bool:
    with psy("advlock-test/leases-probe") as conn:
        return "advlock" in conn.execute("SHOW shared_preload_libraries").fetchone()[0]


PRELOADED = preloaded()
needs_preload = pytest.mark.skipif(not PRELOADED, reason="leases need advlock preloaded: "
                                   "scripts/test.sh runs this suite preloaded too")


admin = PG.admin_fixture("advlock-test/leases-admin")


@pytest.fixture(autouse=True)
def no_leftover_leases():
    """Every test ends its leases and waits; leftovers fail it (and are released). A waiter that
    was cancelled or terminated leaves a moment later, hence the bounded wait."""
    yield
    if not PRELOADED:
        return
    with psy("advlock-test/leases-check") as conn:
        def left():
            return conn.execute("SELECT key, granted, pid FROM advlock_leases").fetchall()
        deadline = time.monotonic() + 5
        while left() and time.monotonic() < deadline:
            time.sleep(0.02)
        rows = left()
        if rows:
            conn.execute("SELECT advlock_lease_release(lease) FROM advlock_leases WHERE granted")
            pytest.fail(f"test left leases or waiters behind: {rows}")
