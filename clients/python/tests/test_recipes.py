"""The recipes of clients/python/recipes, run as a user would run them, against the real server."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import psycopg
import pytest
from sqlalchemy import make_url

from conftest import DSN, advisory_locks, server_kind

RECIPES = Path(__file__).resolve().parents[1] / "recipes"


@pytest.mark.skipif(server_kind() == "edition", reason="the SQL edition has no snapshot-free wait")
def test_alembic_two_pods_upgrade_at_once(admin: psycopg.Connection[Any]) -> None:
    """Two `alembic upgrade head` at once: one migrates (building an index CONCURRENTLY while the
    other waits for the migration lock), the other waits without stalling it, then finds the
    database at head and runs nothing; nobody sees 40P01."""
    admin.execute("DROP TABLE IF EXISTS accounts, alembic_version")
    with tempfile.TemporaryDirectory() as work:
        (Path(work) / "versions").mkdir()
        shutil.copy(RECIPES / "alembic_migrations" / "env.py", Path(work) / "env.py")
        shutil.copy(RECIPES / "alembic_migrations" / "0001_accounts.py", Path(work) / "versions" / "0001_accounts.py")
        url = make_url(DSN).set(drivername="postgresql+psycopg").render_as_string(hide_password=False)
        (Path(work) / "alembic.ini").write_text(
            f"[alembic]\nscript_location = {work}\nsqlalchemy.url = {url}\n"
            "[loggers]\nkeys = root,alembic\n[handlers]\nkeys = console\n[formatters]\nkeys = generic\n"
            "[logger_root]\nlevel = WARNING\nhandlers = console\n"
            "[logger_alembic]\nlevel = INFO\nhandlers =\nqualname = alembic\n"
            "[handler_console]\nclass = StreamHandler\nargs = (sys.stderr,)\nlevel = NOTSET\nformatter = generic\n"
            "[formatter_generic]\nformat = %(message)s\n"
        )
        env = {**os.environ, "RECIPE_WAIT_FOR_OTHER_POD": "1"}
        cmd = [sys.executable, "-m", "alembic", "-c", str(Path(work) / "alembic.ini"), "upgrade", "head"]
        pods = [subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)]
        pods.append(subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
        outputs = [p.communicate(timeout=60)[0] for p in pods]
    assert [p.returncode for p in pods] == [0, 0], outputs
    ran = [("Running upgrade  -> 0001" in out) for out in outputs]
    assert sorted(ran) == [False, True], outputs  # exactly one pod migrated
    assert not any("deadlock" in out for out in outputs), outputs
    row = admin.execute(
        "SELECT (SELECT version_num FROM alembic_version), i.indisvalid FROM pg_index i"
        " WHERE i.indexrelid = 'accounts_email'::regclass"
    ).fetchone()
    assert row == ("0001", True)
    admin.execute("DROP TABLE accounts, alembic_version")


def _django() -> None:
    import django
    from django.conf import settings

    if not settings.configured:
        url = make_url(DSN)
        settings.configure(
            DATABASES={
                "default": {
                    "ENGINE": "django.db.backends.postgresql",
                    "NAME": url.database,
                    "USER": url.username or "",
                    "PASSWORD": url.password or "",
                    "HOST": url.host or "",
                    "PORT": str(url.port or ""),
                    "OPTIONS": {"application_name": "django-recipe"},
                }
            },
            USE_TZ=True,
        )
        django.setup()


def test_django_atomic_lock_and_singleton_command(admin: psycopg.Connection[Any]) -> None:
    _django()
    import io
    import threading

    from django.db import connection
    from recipes.django_locks import SingletonCommand, with_account_lock

    import advlock

    inside = threading.Event()
    leave = threading.Event()
    seen: list[Any] = []

    def holder() -> None:
        def work() -> None:
            seen.append(advisory_locks(admin, connection.connection.info.backend_pid))
            inside.set()
            leave.wait(10)

        with_account_lock(42, work)
        connection.close()

    t = threading.Thread(target=holder)
    t.start()
    assert inside.wait(10)
    with pytest.raises(advlock.LockTimeout, match="django-recipe"):
        with_account_lock(42, lambda: None, timeout=0.2)
    leave.set()
    t.join(10)
    assert seen == [[(seen[0][0][0], True, "ExclusiveLock", advlock.key("account", 42))]]
    assert with_account_lock(42, lambda: "free again") == "free again"  # released at COMMIT

    ran: list[str] = []

    class Nightly(SingletonCommand):
        lock_name = "nightly"

        def run(self, *args: Any, **options: Any) -> None:
            err = io.StringIO()
            Nightly(stderr=err).handle()  # a second run meanwhile (another host, in effect)
            ran.append(err.getvalue())

    Nightly().handle()
    assert len(ran) == 1 and "nightly is already running (PID" in ran[0], ran
    connection.close()


@pytest.mark.skipif(server_kind() != "preloaded", reason="leases need advlock preloaded (run_tests.sh's preloaded run)")
def test_beat_leader_one_replica_ticks_at_a_time() -> None:
    import threading

    import psycopg_pool
    from recipes.beat_leader import run_as_leader

    ticks: list[tuple[str, int]] = []
    stops = {name: threading.Event() for name in ("a", "b", "c")}
    with psycopg_pool.ConnectionPool(DSN, min_size=1, max_size=6, kwargs={"autocommit": True}) as pool:
        threads = {
            name: threading.Thread(
                target=run_as_leader,
                args=(pool, "nightly", lambda token, n=name: ticks.append((n, token)), stop),
                kwargs={"ttl": 2.0, "every": 0.02},
            )
            for name, stop in stops.items()
        }
        for t in threads.values():
            t.start()
        wait = threading.Event()
        wait.wait(0.5)
        first = ticks[0][0]
        stops[first].set()  # the leader steps down: another replica takes over
        threads[first].join(10)
        wait.wait(1.0)
        for stop in stops.values():
            stop.set()
        for t in threads.values():
            t.join(10)
    # One leader per term: each token ticked from one replica only, terms in order, two terms.
    terms: dict[int, set[str]] = {}
    for name, token in ticks:
        terms.setdefault(token, set()).add(name)
    assert all(len(names) == 1 for names in terms.values()), terms
    assert [token for _, token in ticks] == sorted(token for _, token in ticks)
    assert len(terms) >= 2 and first not in terms[max(terms)]
