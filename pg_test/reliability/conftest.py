"""Fixtures for the reliability suite (faults, load, hot standby, bad input, security).

Tests marked `late` run after the others (e.g. to give a background computation time), and
tests marked `crash` (a SIGKILLed backend makes the postmaster restart and drops every
connection) always run last, whatever the file order.
"""
import subprocess
import sys
import time

import pytest

from relsupport import FIGURES, FULL, SMALL, HERE, PG, advlock_key

HUGE_ID_BYTES = 100 * 1024 * 1024
_huge_reference = {}


def pytest_configure(config):
    config.addinivalue_line("markers", "late: runs after the unmarked tests")
    config.addinivalue_line("markers", "crash: kills a backend with SIGKILL (postmaster restart); runs last")


def pytest_collection_modifyitems(session, config, items):
    def rank(item):
        if item.get_closest_marker("crash"):
            return 2
        return 1 if item.get_closest_marker("late") else 0
    items.sort(key=rank)  # stable: file order within each rank


def pytest_sessionstart(session):
    # The pure-Python reference key of a 100 MB id takes ~40 s of one core: start it now, at
    # low priority, so it overlaps the rest of the suite (test_bad_input.py::test_100mb_id, marked late,
    # collects it).
    script = (
        "import os, sys; os.nice(19); sys.path.insert(0, sys.argv[1]);"
        "from advlock_key import advlock_key;"
        "print(advlock_key('huge', 'x' * int(sys.argv[2])))")
    _huge_reference["proc"] = subprocess.Popen(
        [sys.executable, "-c", script, str(HERE.parents[1] / "docs" / "keys"), str(HUGE_ID_BYTES)],
        stdout=subprocess.PIPE, text=True)
    _huge_reference["started"] = time.monotonic()


def pytest_sessionfinish(session, exitstatus):
    proc = _huge_reference.get("proc")
    if proc is not None and proc.poll() is None:
        proc.kill()
        proc.wait()


def pytest_terminal_summary(terminalreporter):
    if FIGURES:
        terminalreporter.section(f"advlock reliability figures ({'ADVLOCK_FULL=1' if FULL else 'ADVLOCK_SMALL=1' if SMALL else 'default sizes'})")
        for line in FIGURES:
            terminalreporter.write_line(line)


@pytest.fixture(scope="session")
def huge_id_reference():
    """advlock_key('huge', 'x' * 100 MiB) per the pure-Python reference (computed in background)."""
    proc = _huge_reference["proc"]
    out, _ = proc.communicate(timeout=600)
    assert proc.returncode == 0
    return HUGE_ID_BYTES, int(out)


admin = PG.admin_fixture("rel-admin")


@pytest.fixture
def key(request):
    """A key of this test's own, so tests never share locks by accident."""
    return advlock_key("reliability", request.node.nodeid)


# After every test: no advisory lock (held or awaited) remains in the test database. Backends of
# connections closed abruptly take a moment to exit, and the crash test's restart refuses
# connections for a while: 15 s.
no_advisory_locks_left = PG.no_advisory_locks_left_fixture("rel-leakcheck", timeout=15, interval=0.05)
