"""Fixtures for the client suite: an admin connection and a check after every test that it left
no advisory lock behind, and a PgBouncer in transaction mode (all three pg_test/pgtestsupport.py's)."""
import os

import pytest

import pgsupport  # first: puts docs/keys (the published advlock_key.py) and pg_test on sys.path
import pgtestsupport

MEASUREMENTS = []


@pytest.fixture
def measure(request):
    """measure(label, value): a number observed on this machine, printed after the run."""
    def record(label, value):
        MEASUREMENTS.append((request.node.name, label, value))
    return record


def pytest_terminal_summary(terminalreporter):
    if MEASUREMENTS:
        terminalreporter.section("advlock client measurements")
        for test, label, value in MEASUREMENTS:
            terminalreporter.write_line(f"{test}: {label} = {value}")


BOUNCER_PORT = int(os.environ.get("ADVLOCK_PGBOUNCER_PORT", "6422"))


# An observer/administrator connection (autocommit) with a 200 ms idle threshold.
admin = pgsupport.PG.admin_fixture("advlock-test/admin", setup=("SET advlock.idle_threshold = '200ms'",))
# Every test must release what it took; leftovers fail it and are terminated so they do not
# disturb the next one.
no_leftover_locks = pgsupport.PG.no_advisory_locks_left_fixture("advlock-test/leak-check", timeout=5, terminate=True)


@pytest.fixture(scope="session")
def pgbouncer():
    """PgBouncer (transaction pooling, pool of 2 server connections) in front of the test
    instance on 127.0.0.1:6422 (pgtestsupport.pgbouncer: run as the postgres OS user, always
    stopped at the end), with its admin console for postgres."""
    settings = {"admin_users": "postgres", "min_pool_size": 0, "server_reset_query": "",
                "ignore_startup_parameters": "extra_float_digits"}
    with pgtestsupport.pgbouncer(pgsupport.PG, "transaction", 2, port=BOUNCER_PORT, settings=settings) as bouncer:
        yield bouncer
