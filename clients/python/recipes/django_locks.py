"""Django: a transaction-scope lock inside `transaction.atomic()`, and a management-command
singleton on a session lock of its own connection.

Django (4.2+ with psycopg 3) keeps one connection per thread; `connection.connection` is the
psycopg connection under it once `ensure_connection()` has run. advlock.lock() takes it like
any psycopg connection, inside the atomic block, so the lock ends with the block's COMMIT or
ROLLBACK."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.core.management.base import BaseCommand
from django.db import connection, connections, transaction

import advlock


def with_account_lock(account_id: int, work: Callable[[], Any], timeout: float = 2.0) -> Any:
    """Run `work` in a transaction holding the account's lock (LockTimeout after `timeout` s)."""
    with transaction.atomic():
        connection.ensure_connection()
        with advlock.lock(connection.connection, "account", account_id, timeout=timeout):
            return work()


def django_dsn(alias: str = "default") -> str:
    """A libpq key=value DSN for a database of settings.DATABASES: session_lock() opens its own
    connection with it (never Django's, which a session lock would outlive)."""
    settings = connections[alias].settings_dict
    pairs = {
        "host": settings.get("HOST") or "",
        "port": str(settings.get("PORT") or ""),
        "dbname": settings.get("NAME") or "",
        "user": settings.get("USER") or "",
        "password": settings.get("PASSWORD") or "",
    }
    return " ".join("{}='{}'".format(k, v.replace("\\", "\\\\").replace("'", "\\'")) for k, v in pairs.items() if v)


class SingletonCommand(BaseCommand):  # type: ignore[misc]  # Django has no types
    """A management command that runs once at a time across every host: a second run while one
    is going exits at once saying who holds it. Subclasses implement run()."""

    lock_name = "singleton"

    def run(self, *args: Any, **options: Any) -> None:
        raise NotImplementedError

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            name = self.lock_name
            with advlock.session_lock(django_dsn(), "command", name, timeout=0, application_name=name):
                self.run(*args, **options)
        except advlock.LockTimeout as e:
            self.stderr.write(f"{self.lock_name} is already running (PID {e.pid}, {e.application_name}); not started")
