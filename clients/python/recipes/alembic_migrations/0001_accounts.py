"""A migration that builds an index concurrently (the test's migration: it waits until another
pod is queued on the migration lock, so the two overlap for sure)."""

from __future__ import annotations

import os

from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("CREATE TABLE accounts (id bigint PRIMARY KEY, email text NOT NULL)")
    if os.environ.get("RECIPE_WAIT_FOR_OTHER_POD"):
        # Test only: hold on until the other pod waits for the migration lock.
        op.execute(
            "DO $$ BEGIN"
            " FOR i IN 1..2000 LOOP"
            "  EXIT WHEN EXISTS (SELECT FROM pg_locks WHERE locktype = 'advisory' AND NOT granted);"
            "  PERFORM pg_sleep(0.01);"
            " END LOOP; END $$"
        )
    with op.get_context().autocommit_block():
        op.create_index("accounts_email", "accounts", ["email"], postgresql_concurrently=True)
