"""ALTER EXTENSION advlock UPDATE from every released version to the current one.

Each released version's install script is archived in sql/archive/advlock--<version>.sql (as
`cargo pgrx install` generated it at release). This test installs that old version into a
fresh database, updates it with the shipped upgrade scripts (sql/advlock--<from>--<to>.sql,
installed by `cargo pgrx install`), and requires the result to be indistinguishable from a
fresh CREATE EXTENSION of the current version: same functions (signatures, bodies, volatility,
parallel safety, strictness, settings), same views, same privileges and comments.
"""
import os
import subprocess
import sys

import psycopg
import pytest
from psycopg import sql

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from pgtestsupport import PGBIN, REPO, Server, archived_scripts_installed, archived_versions  # noqa: E402
from pgtestsupport import current_version as cargo_version  # noqa: E402

PG_CONFIG = os.path.join(PGBIN, "pg_config")
# The instance pg_test/run.sh started; every test names its database.
PG = Server.from_env(5418, "postgres")


def current_version():
    assert "@CARGO_VERSION@" in open(os.path.join(REPO, "advlock.control")).read()
    return cargo_version()


def connect(dbname, **kw):
    return PG.connect("advlock-test/upgrade", dbname=dbname, **kw)


fresh_database = PG.recreate_database


CATALOG = {
    "functions": """
        SELECT p.proname, pg_get_function_identity_arguments(p.oid), pg_get_function_arguments(p.oid),
               pg_get_function_result(p.oid), p.provolatile, p.proparallel, p.proisstrict,
               p.prosecdef, p.proretset, l.lanname, p.prosrc, p.probin, p.proconfig, p.proacl::text,
               obj_description(p.oid, 'pg_proc')
          FROM pg_proc p JOIN pg_language l ON l.oid = p.prolang
          JOIN pg_depend d ON d.classid = 'pg_proc'::regclass AND d.objid = p.oid AND d.deptype = 'e'
          JOIN pg_extension e ON e.oid = d.refobjid AND e.extname = 'advlock'
         ORDER BY 1, 2""",
    "relations": """
        SELECT c.relname, c.relkind, pg_get_viewdef(c.oid), c.relacl::text, obj_description(c.oid, 'pg_class'),
               (SELECT string_agg(a.attname || ' ' || format_type(a.atttypid, a.atttypmod), ', ' ORDER BY a.attnum)
                  FROM pg_attribute a WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped)
          FROM pg_class c
          JOIN pg_depend d ON d.classid = 'pg_class'::regclass AND d.objid = c.oid AND d.deptype = 'e'
          JOIN pg_extension e ON e.oid = d.refobjid AND e.extname = 'advlock'
         ORDER BY 1""",
    # Tables of the extension (advlock_fences): columns' privileges, owner, triggers, and which
    # of them pg_dump dumps (pg_extension_config_dump).
    "tables": """
        SELECT c.relname, pg_get_userbyid(c.relowner),
               (SELECT string_agg(a.attname || ' ' || coalesce(a.attacl::text, '-'), ', ' ORDER BY a.attnum)
                  FROM pg_attribute a WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped),
               (SELECT string_agg(pg_get_triggerdef(t.oid), '; ' ORDER BY t.tgname)
                  FROM pg_trigger t WHERE t.tgrelid = c.oid AND NOT t.tgisinternal),
               (SELECT string_agg(pg_get_constraintdef(k.oid), '; ' ORDER BY k.conname)
                  FROM pg_constraint k WHERE k.conrelid = c.oid)
          FROM pg_class c
          JOIN pg_depend d ON d.classid = 'pg_class'::regclass AND d.objid = c.oid AND d.deptype = 'e'
          JOIN pg_extension e ON e.oid = d.refobjid AND e.extname = 'advlock'
         WHERE c.relkind = 'r'
         ORDER BY 1""",
    "dumped": """
        SELECT extconfig::regclass[]::text, extcondition FROM pg_extension WHERE extname = 'advlock'""",
    "members": """
        SELECT pg_describe_object(d.classid, d.objid, d.objsubid)
          FROM pg_depend d JOIN pg_extension e ON e.oid = d.refobjid AND e.extname = 'advlock'
         WHERE d.deptype = 'e' ORDER BY 1""",
}


def snapshot(dbname):
    with connect(dbname) as c:
        return {name: c.execute(sql).fetchall() for name, sql in CATALOG.items()}


@pytest.fixture(scope="module")
def installed_archives():
    """Puts each archived install script next to the current one in the extension directory."""
    with archived_scripts_installed():
        yield


def test_released_versions_are_archived():
    versions = archived_versions()
    assert versions, "sql/archive must hold the install script of every released version"
    assert "0.1.0" in versions, "0.1.0 is the first released version"


def test_release_commits_carry_their_versions():
    """sql/archive/RELEASES names the commit each release was cut from (bench/run.sh --baseline
    builds the last one, pg_test/release/upgrade.sh the 0.3.0 one): each commit exists, says
    that version in its Cargo.toml, and has the version's install script archived."""
    lines = [line.split() for line in open(os.path.join(REPO, "sql", "archive", "RELEASES"))
             if line.strip() and not line.startswith("#")]
    assert lines, "sql/archive/RELEASES names no release"
    for version, commit in lines:
        cargo = subprocess.run(["git", "-C", REPO, "show", f"{commit}:Cargo.toml"], capture_output=True,
                               text=True, check=True).stdout
        assert f'\nversion = "{version}"\n' in cargo, f"{commit} is not version {version}"
        assert version in archived_versions(), f"{version} is in RELEASES but not archived"
    assert [v for v, _ in lines] == sorted((v for v, _ in lines), key=lambda v: tuple(map(int, v.split(".")))), \
        "RELEASES lists releases oldest first (its last line is the previous release)"
    assert lines[-1][0] == archived_versions()[-1], "the last release archived must be the last line of RELEASES"


def test_every_old_version_has_an_update_path():
    current = current_version()
    with connect("postgres") as c:
        c.execute("CREATE EXTENSION IF NOT EXISTS advlock")  # loads the control file
        for version in archived_versions():
            if version == current:
                continue
            path = c.execute(
                "SELECT path FROM pg_extension_update_paths('advlock') WHERE source = %s AND target = %s",
                (version, current)).fetchone()
            assert path and path[0], f"no update path from {version} to {current}"


@pytest.mark.parametrize("old", [v for v in archived_versions()])
def test_update_equals_fresh_install(installed_archives, old):
    current = current_version()
    if old == current:
        pytest.skip(f"{old} is the current version: nothing to update")
    fresh_database("advlock_up_fresh")
    fresh_database("advlock_up_old")
    with connect("advlock_up_fresh") as c:
        c.execute("CREATE EXTENSION advlock")
    with connect("advlock_up_old") as c:
        c.execute(sql.SQL("CREATE EXTENSION advlock VERSION {}").format(sql.Literal(old)))
        assert c.execute("SELECT extversion FROM pg_extension WHERE extname = 'advlock'").fetchone()[0] == old
        # Something that uses the extension while it is updated, as in production.
        c.execute("CREATE TABLE jobs (ns text, id bigint, k bigint GENERATED ALWAYS AS (advlock_key(ns, id)) STORED)")
        c.execute("INSERT INTO jobs VALUES ('account', 42)")
        c.execute("ALTER EXTENSION advlock UPDATE")
        assert c.execute("SELECT extversion FROM pg_extension WHERE extname = 'advlock'").fetchone()[0] == current
        assert c.execute("SELECT k FROM jobs").fetchone()[0] == 7700915891107303510
    fresh, updated = snapshot("advlock_up_fresh"), snapshot("advlock_up_old")
    for part in CATALOG:
        assert updated[part] == fresh[part], f"{part} differ after updating from {old}"


def test_updated_extension_works(installed_archives):
    current = current_version()
    olds = [v for v in archived_versions() if v != current]
    if not olds:
        pytest.skip("no older version")
    fresh_database("advlock_up_use")
    with connect("advlock_up_use") as c:
        c.execute(sql.SQL("CREATE EXTENSION advlock VERSION {}").format(sql.Literal(olds[0])))
        c.execute("ALTER EXTENSION advlock UPDATE")
        with c.transaction():
            assert c.execute("SELECT advlock_try_with_timeout('rollup', 'nightly', 100)").fetchone()[0] is True
            row = c.execute("SELECT mode, granted FROM advlock_holders WHERE key = advlock_key('rollup', 'nightly')").fetchone()
            assert row == ("exclusive", True)
        # Fences, new in 0.5.0: passed, then refused for a smaller token.
        c.execute("SELECT advlock_fence('rollup', 'nightly', 2)")
        with pytest.raises(psycopg.Error) as refused:
            c.execute("SELECT advlock_fence('rollup', 'nightly', 1)")
        assert refused.value.sqlstate == "LK001"


def test_archived_scripts_match_what_is_installed():
    """An archived script of a version that is also installed must be that version's script:
    a released version's install script never changes."""
    sharedir = subprocess.check_output([PG_CONFIG, "--sharedir"], text=True).strip()
    current = current_version()
    if current not in archived_versions():
        pytest.skip(f"{current} is not released yet")
    installed = open(os.path.join(sharedir, "extension", f"advlock--{current}.sql")).read()
    archived = open(os.path.join(REPO, "sql", "archive", f"advlock--{current}.sql")).read()
    assert archived == installed, f"sql/archive/advlock--{current}.sql differs from the generated script"
