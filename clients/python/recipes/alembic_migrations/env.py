"""Alembic's env.py with a migration lock: run `alembic upgrade head` from every pod at start-up;
one migrates, the others wait (holding no snapshot, so a migration that builds an index
CONCURRENTLY is not stalled by them), then find the database at head and do nothing."""

from __future__ import annotations

from logging.config import fileConfig

from alembic import context
from sqlalchemy import engine_from_config, pool

import advlock

config = context.config
if config.config_file_name is not None:
    fileConfig(config.config_file_name)


def run_migrations_online() -> None:
    url = config.get_main_option("sqlalchemy.url")
    assert url is not None
    # The lock on its own connection (session_lock opens it from the URL), the migrations on
    # another: a migration may commit, and `autocommit_block()` for CREATE INDEX CONCURRENTLY
    # ends Alembic's transaction, which must not end the lock.
    with advlock.session_lock(url, "alembic", "migrate", timeout=600, application_name="alembic-migrate"):
        engine = engine_from_config(config.get_section(config.config_ini_section, {}), poolclass=pool.NullPool)
        with engine.connect() as connection:
            context.configure(connection=connection, target_metadata=None)
            with context.begin_transaction():
                context.run_migrations()
        engine.dispose()


run_migrations_online()
