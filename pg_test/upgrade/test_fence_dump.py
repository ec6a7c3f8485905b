"""Fences outlive pg_dump / pg_restore (docs/fences.md, "Durable"): advlock_fences is an
extension configuration table (pg_extension_config_dump), so its rows are in a dump of a
database with advlock, as is advlock_token_seq's position; a restore into a fresh database
(CREATE EXTENSION from the dump, then the rows) keeps every fence, its guard, and privileges the
owner changed. After the restore a token smaller than a restored fence is still refused (LK001),
and tokens drawn in the restored database are larger than every token drawn before the dump.
"""
import os
import subprocess
import sys

import psycopg
import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from pgtestsupport import PGBIN, Server  # noqa: E402

PG = Server.from_env(5418, "postgres")
SOURCE, TARGET, ROLE = "advlock_fence_dump_src", "advlock_fence_dump_dst", "fence_dump_writer"


def connect(dbname):
    return PG.connect("advlock-test/fence-dump", dbname=dbname)


recreate = PG.recreate_database


FENCES = "SELECT key, token, ns, id, passed_at, passed_by FROM advlock_fences ORDER BY key"


@pytest.fixture
def databases():
    recreate(SOURCE)
    recreate(TARGET)
    with connect("postgres") as c:
        c.execute(f"DROP ROLE IF EXISTS {ROLE}")
        c.execute(f"CREATE ROLE {ROLE}")
    yield
    for name in (SOURCE, TARGET):
        PG.drop_database(name)
    with connect("postgres") as c:
        c.execute(f"DROP ROLE IF EXISTS {ROLE}")


@pytest.mark.parametrize("fmt", ["custom", "plain"])
def test_fences_survive_dump_and_restore(databases, tmp_path, fmt):
    with connect(SOURCE) as c:
        c.execute("CREATE EXTENSION advlock")
        tokens = [c.execute("SELECT advlock_try_with_token('dump', 'job', 0, 'xact')").fetchone()[0] for _ in range(3)]
        c.execute("SELECT advlock_fence('invoices', 'march', %s)", (tokens[1],))
        c.execute("SELECT advlock_fence('invoices', 7, %s)", (tokens[2],))
        c.execute("SELECT advlock_fence(12345, 41)")
        # The owner lets only one role pass fences: a privilege change the dump must carry.
        c.execute("REVOKE INSERT, UPDATE ON advlock_fences FROM PUBLIC")
        c.execute(f"GRANT INSERT (key, token, ns, id), UPDATE (token, passed_at, passed_by) ON advlock_fences TO {ROLE}")
        before = c.execute(FENCES).fetchall()
        acl = c.execute("SELECT relacl::text FROM pg_class WHERE oid = 'advlock_fences'::regclass").fetchone()[0]
    assert len(before) == 3

    dump = tmp_path / "dump"
    os.chmod(tmp_path, 0o777)
    args = ["-h", PG.host, "-p", str(PG.port), "-U", PG.user]
    if fmt == "custom":
        subprocess.run([f"{PGBIN}/pg_dump", *args, "-Fc", "-f", str(dump), SOURCE], check=True)
        subprocess.run([f"{PGBIN}/pg_restore", *args, "--exit-on-error", "-d", TARGET, str(dump)], check=True)
    else:
        subprocess.run([f"{PGBIN}/pg_dump", *args, "-f", str(dump), SOURCE], check=True)
        subprocess.run([f"{PGBIN}/psql", *args, "-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", TARGET, "-f", str(dump)],
                       check=True, capture_output=True)

    with connect(TARGET) as c:
        # Every fence, as it was (token, names, who and when).
        assert c.execute(FENCES).fetchall() == before
        assert c.execute("SELECT relacl::text FROM pg_class WHERE oid = 'advlock_fences'::regclass").fetchone()[0] == acl
        assert c.execute("SELECT count(*) FROM pg_trigger WHERE tgrelid = 'advlock_fences'::regclass "
                         "AND tgname = 'advlock_fences_guard'").fetchone()[0] == 1
        # Still a fence: the older token is refused, the current one passes again.
        with pytest.raises(psycopg.Error) as refused:
            c.execute("SELECT advlock_fence('invoices', 'march', %s)", (tokens[0],))
        assert refused.value.sqlstate == "LK001"
        assert f"token {tokens[1]} has passed it" in refused.value.diag.message_primary
        c.execute("SELECT advlock_fence('invoices', 'march', %s)", (tokens[1],))
        # The guard came along: no lowering by hand.
        with pytest.raises(psycopg.Error) as lowered:
            c.execute("UPDATE advlock_fences SET token = 1 WHERE key = 12345")
        assert lowered.value.sqlstate == "LK001"
        # Tokens go on above every token drawn before the dump.
        after = c.execute("SELECT advlock_try_with_token('dump', 'job', 0, 'xact')").fetchone()[0]
        assert after > max(tokens)
        c.execute("SELECT advlock_fence('invoices', 'march', %s)", (after,))
    # The restored privileges hold: only the granted role passes fences.
    with connect(TARGET) as c:
        c.execute(f"SET ROLE {ROLE}")
        c.execute("SELECT advlock_fence('invoices', 'april', 1)")
        c.execute("RESET ROLE")
        c.execute("CREATE ROLE fence_dump_other")
        try:
            c.execute("SET ROLE fence_dump_other")
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                c.execute("SELECT advlock_fence('invoices', 'may', 1)")
        finally:
            c.execute("RESET ROLE")
            c.execute("DROP ROLE fence_dump_other")
