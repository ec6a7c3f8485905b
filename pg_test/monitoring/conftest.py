"""Fixtures for the monitoring suite: the exporter's roles, real postgres_exporter processes.

pg_test/run.sh creates the database advlock_monitoring with the extension; the suite runs
preloaded or not, as ADVLOCK_TEST_CONF configured the instance, and expects the namespace label
accordingly ("reports" preloaded, "" otherwise).
"""
import pytest

from monsupport import BLIND_ROLE, EXPORTER_ROLE, IDLE_THRESHOLD_S, PG, Exporter

admin = PG.admin_fixture("monitoring-admin", scope="session")


@pytest.fixture(scope="session")
def preloaded(admin) -> bool:
    return admin.execute(
        "SELECT 'advlock' = ANY (string_to_array(replace(current_setting('shared_preload_libraries'), ' ', ''), ','))"
    ).fetchone()[0]


@pytest.fixture(scope="session")
def metrics_view(admin):
    """advlock_metrics must be the extension's own (this suite never creates a stand-in)."""
    row = admin.execute(
        "SELECT to_regclass('advlock_metrics') IS NOT NULL, e.extversion,"
        "       (SELECT d.refobjid IS NOT NULL FROM pg_depend d"
        "         WHERE d.classid = 'pg_class'::regclass AND d.objid = to_regclass('advlock_metrics')"
        "           AND d.refclassid = 'pg_extension'::regclass AND d.refobjid = e.oid AND d.deptype = 'e')"
        "  FROM pg_extension e WHERE e.extname = 'advlock'").fetchone()
    assert row is not None, "the advlock extension is not created in this database"
    assert row[0], f"advlock {row[1]} has no advlock_metrics view (installed extension too old?)"
    assert row[2], "advlock_metrics is not a member of the advlock extension"
    return row[1]


@pytest.fixture(scope="session")
def roles(admin):
    """The exporter's role (pg_monitor) and a blind one (no pg_monitor), both with a 2 s
    advlock.idle_threshold set per role, as the README advises (advlock loaded first, so the
    value is checked rather than stored as a placeholder)."""
    admin.execute("LOAD 'advlock'")
    for role, monitor in ((EXPORTER_ROLE, True), (BLIND_ROLE, False)):
        exists = admin.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (role,)).fetchone()
        if not exists:
            admin.execute(f"CREATE ROLE {role} LOGIN")
        if monitor:
            admin.execute(f"GRANT pg_monitor TO {role}")
        admin.execute(f"ALTER ROLE {role} SET advlock.idle_threshold = '{int(IDLE_THRESHOLD_S)}s'")
    return EXPORTER_ROLE, BLIND_ROLE


@pytest.fixture(scope="session")
def exporter(roles, metrics_view):
    """postgres_exporter connecting as the pg_monitor role."""
    exp = Exporter(EXPORTER_ROLE, "monitor").start()
    yield exp
    exp.stop()


@pytest.fixture(scope="session")
def blind_exporter(roles, metrics_view):
    """postgres_exporter connecting as a role without pg_monitor."""
    exp = Exporter(BLIND_ROLE, "blind").start()
    yield exp
    exp.stop()
