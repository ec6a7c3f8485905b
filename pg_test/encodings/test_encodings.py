"""advlock in every server encoding: install, update, the SQL edition, and what it says.

PostgreSQL reads an extension script in the database's encoding (advlock.control names none),
and takes the text of an error, hint or detail to be in it too. A UTF-8 character in a script or
a message then breaks: CREATE EXTENSION advlock failed in an EUC_JP database on 0.4.0 (`invalid
byte sequence for encoding "EUC_JP": 0xc3 0x97`, the multiplication sign of a COMMENT), and a
HINT carried the same bytes to clients. Here, in databases of several encodings (template0,
LC_COLLATE/LC_CTYPE C): a fresh CREATE EXTENSION, ALTER EXTENSION UPDATE from every released
version (its archived install script first), and the SQL edition by `psql -f` as a DBA runs it
(client encoding = the database's); every COMMENT reads back as in a UTF8 database; and errors,
hints, details and warnings advlock raises reach a client whose client_encoding is EUC_JP
(the database's own where PostgreSQL has no conversion to EUC_JP) exactly as in a UTF8 database.

Encodings: UTF8; EUC_JP (multi-byte, where 0xc3 0x97 is invalid); LATIN1 and WIN1251 (single
byte: the bytes are valid there but mean other characters, and WIN1251 has no multiplication sign
to convert one to); SQL_ASCII (bytes passed through).
"""
import os
import subprocess
import sys

import psycopg
import pytest
from psycopg import sql

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from pgtestsupport import PGBIN, REPO, Server, archived_scripts_installed, archived_versions, current_version  # noqa: E402

PG = Server.from_env(5418, "postgres")
ENCODINGS = ["UTF8", "EUC_JP", "LATIN1", "WIN1251", "SQL_ASCII"]
# The archived 0.4.0 install script has a UTF-8 multiplication sign in a COMMENT: in an EUC_JP
# database CREATE EXTENSION advlock VERSION '0.4.0' fails, as it did for users of 0.4.0, so no
# EUC_JP database at 0.4.0 exists to update (the scripts PostgreSQL reads now are ASCII).
UNREACHABLE = {("EUC_JP", "0.4.0"): 'invalid byte sequence for encoding "EUC_JP": 0xc3 0x97'}


def connect(dbname, client_encoding="UTF8"):
    return PG.connect("advlock-test/encodings", dbname=dbname, client_encoding=client_encoding,
                      statement_timeout_ms=None)


def euc_jp_or_own(encoding):
    """EUC_JP where the server converts to it (from UTF8 and EUC_JP; SQL_ASCII sends its bytes
    as they are); PostgreSQL has no conversion between EUC_JP and LATIN1 or WIN1251 (the
    connection is refused), so there the client speaks the database's own encoding."""
    return "EUC_JP" if encoding in ("UTF8", "EUC_JP", "SQL_ASCII") else encoding


def dbname(encoding, purpose):
    return f"advlock_enc_{encoding.lower()}_{purpose}".replace(".", "_")


def fresh_database(encoding, purpose):
    name = dbname(encoding, purpose)
    PG.recreate_database(name, sql.SQL("TEMPLATE template0 ENCODING {} LC_COLLATE 'C' LC_CTYPE 'C'").format(
        sql.Literal(encoding)))
    with connect("postgres") as c:
        assert c.execute("SELECT pg_encoding_to_char(encoding) FROM pg_database WHERE datname = %s",
                         (name,)).fetchone()[0] == encoding
    return name


drop_database = PG.drop_database


# Descriptions of the extension's objects, and the functions themselves: read with
# client_encoding UTF8, so a character the script got wrong shows as a difference.
MEMBERS = """
    SELECT pg_describe_object(d.classid, d.objid, d.objsubid),
           obj_description(d.objid, (SELECT c.relname FROM pg_class c WHERE c.oid = d.classid)),
           CASE WHEN d.classid = 'pg_proc'::regclass THEN (SELECT p.prosrc FROM pg_proc p WHERE p.oid = d.objid) END
      FROM pg_depend d JOIN pg_extension e ON e.oid = d.refobjid AND e.extname = 'advlock'
     WHERE d.deptype = 'e' ORDER BY 1"""


def members(name):
    with connect(name, "UTF8") as c:
        return c.execute(MEMBERS).fetchall()


@pytest.fixture(scope="module")
def reference():
    """A fresh install in a UTF8 database: its members and descriptions."""
    name = fresh_database("UTF8", "reference")
    with connect(name) as c:
        c.execute("CREATE EXTENSION advlock")
    yield members(name)
    drop_database(name)


@pytest.fixture(scope="module")
def installed_archives():
    """Each archived install script next to the current one (as pg_test/upgrade does)."""
    with archived_scripts_installed():
        yield


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_create_extension(reference, encoding):
    name = fresh_database(encoding, "fresh")
    with connect(name) as c:
        c.execute("CREATE EXTENSION advlock")
        assert c.execute("SELECT extversion FROM pg_extension WHERE extname = 'advlock'").fetchone()[0] == current_version()
        assert c.execute("SELECT advlock_key('rollup', 'nightly')").fetchone()[0] == 2132624222628149741
    got = members(name)
    assert got == reference, f"{encoding}: objects or descriptions differ from a UTF8 install"
    assert all(row[1] for row in got if row[0].startswith(("function", "view"))), "a function or view without a COMMENT"
    drop_database(name)


@pytest.mark.parametrize("old", [v for v in archived_versions() if v != current_version()])
@pytest.mark.parametrize("encoding", ENCODINGS)
def test_update_from_released_version(reference, installed_archives, encoding, old):
    name = fresh_database(encoding, "from_" + old)
    with connect(name) as c:
        create = sql.SQL("CREATE EXTENSION advlock VERSION {}").format(sql.Literal(old))
        if (encoding, old) in UNREACHABLE:
            with pytest.raises(psycopg.errors.CharacterNotInRepertoire) as error:
                c.execute(create)
            assert UNREACHABLE[encoding, old] in str(error.value)
            drop_database(name)
            return
        c.execute(create)
        c.execute("CREATE TABLE jobs (ns text, id bigint, k bigint GENERATED ALWAYS AS (advlock_key(ns, id)) STORED)")
        c.execute("INSERT INTO jobs VALUES ('account', 42)")
        c.execute("ALTER EXTENSION advlock UPDATE")
        assert c.execute("SELECT extversion FROM pg_extension WHERE extname = 'advlock'").fetchone()[0] == current_version()
        assert c.execute("SELECT k FROM jobs").fetchone()[0] == 7700915891107303510
    assert members(name) == reference, f"{encoding}: updated from {old}, objects or descriptions differ from a fresh install"
    drop_database(name)


# Statements that raise (or warn), each with what a UTF8 database says: advlock's own
# validation, a NULL, the key-set error whose HINT explains the lock table's size, an unlock
# WARNING. Compared field by field (SQLSTATE, message, detail, hint).
RAISING = [
    ("negative timeout", "SELECT advlock_try_with_timeout('ns', 'id', -1)"),
    ("bad mode", "SELECT advlock_try_with_timeout(1, 0, mode => 'bogus')"),
    ("scope given a mode", "SELECT advlock_try_with_timeout(1, 0, 'shared')"),
    ("NULL key part", "SELECT advlock_key(NULL, 'x')"),
    ("empty namespace", "SELECT advlock_try_all_with_timeout('', ARRAY['a'], 0)"),
    ("lock table full (key-set hint)",
     "SELECT advlock_try_all_with_timeout(ARRAY(SELECT generate_series(1, 100000)::bigint), 0, scope => 'session')"),
]


def raised(conn, statement):
    try:
        conn.execute(statement)
    except psycopg.Error as e:
        d = e.diag
        return (d.sqlstate, d.message_primary, d.message_detail, d.message_hint)
    return None


def warnings_of(conn, statement):
    seen = []
    conn.add_notice_handler(lambda d: seen.append((d.severity_nonlocalized, d.sqlstate, d.message_primary, d.message_detail, d.message_hint)))
    conn.execute(statement)
    return seen


@pytest.fixture(scope="module")
def reference_messages():
    name = fresh_database("UTF8", "messages")
    with connect(name, "UTF8") as c:
        c.execute("CREATE EXTENSION advlock")
        said = {label: raised(c, stmt) for label, stmt in RAISING}
        said["unlock warning"] = warnings_of(c, "SELECT advlock_unlock('ns', 'id')")
    yield said
    drop_database(name)


def test_reference_messages_are_errors(reference_messages):
    """The statements do raise (or warn) in a UTF8 database, and say it in ASCII."""
    for label, said in reference_messages.items():
        assert said, f"{label}: raised nothing"
        texts = [t for row in (said if isinstance(said, list) else [said]) for t in row if t]
        assert all(t.isascii() for t in texts), f"{label}: not ASCII: {said}"
    assert reference_messages["lock table full (key-set hint)"][0] == "53200"
    assert "max_locks_per_transaction" in reference_messages["lock table full (key-set hint)"][3]


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_messages_reach_the_client_intact(reference_messages, encoding):
    name = fresh_database(encoding, "messages")
    with connect(name) as c:
        c.execute("CREATE EXTENSION advlock")
    client = euc_jp_or_own(encoding)
    with connect(name, client) as c:
        assert c.execute("SHOW client_encoding").fetchone()[0] == client
        for label, statement in RAISING:
            assert raised(c, statement) == reference_messages[label], f"{encoding}: {label}"
        assert warnings_of(c, "SELECT advlock_unlock('ns', 'id')") == reference_messages["unlock warning"]
    drop_database(name)


# A non-ASCII argument named in a message: verbatim where the message can carry it (UTF8, and
# SQL_ASCII, which passes bytes), as \\uXXXX escapes in other encodings; never broken bytes.
NON_ASCII_MODE = {"UTF8": "\u30ed\u30c3\u30af", "EUC_JP": "\u30ed\u30c3\u30af", "LATIN1": "\u00e9t\u00e9",
                  "WIN1251": "\u0436", "SQL_ASCII": "\u00e9t\u00e9"}


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_non_ascii_argument_in_a_message(encoding):
    name = fresh_database(encoding, "argument")
    value = NON_ASCII_MODE[encoding]
    with connect(name) as c:
        c.execute("CREATE EXTENSION advlock")
    client = "UTF8" if encoding in ("UTF8", "SQL_ASCII") else encoding
    with connect(name, client) as c:
        said = raised(c, sql.SQL("SELECT advlock_try_with_timeout(1, 0, mode => {})").format(sql.Literal(value)))
    shown = value if encoding in ("UTF8", "SQL_ASCII") else "".join(
        ch if ch.isascii() else f"\\u{ord(ch):04X}" for ch in value)
    assert said[0] == "22023"
    assert said[1] == f'invalid value for argument "mode" of advlock_try_with_timeout: "{shown}"', said
    drop_database(name)


def psql_file(name, path):
    """psql -f as a DBA runs it: no PGCLIENTENCODING, so the client encoding is the database's."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
    env["PGOPTIONS"] = "-c search_path=public"
    return subprocess.run([os.path.join(PGBIN, "psql"), "-X", "-q", "-v", "ON_ERROR_STOP=1", "-h", PG.host, "-p", str(PG.port),
                           "-U", "postgres", "-d", name, "-f", path], env=env, capture_output=True, text=True,
                          errors="replace")


@pytest.fixture(scope="module")
def edition_reference():
    name = fresh_database("UTF8", "edition_ref")
    run = psql_file(name, os.path.join(REPO, "edition", "advlock_sql.sql"))
    assert run.returncode == 0, run.stderr
    with connect(name, "UTF8") as c:
        said = {
            "descriptions": c.execute("""
                SELECT p.oid::regprocedure::text, obj_description(p.oid, 'pg_proc'), p.prosrc
                  FROM pg_proc p WHERE p.pronamespace = 'public'::regnamespace AND p.proname LIKE 'advlock%' ORDER BY 1""").fetchall(),
            "errors": {label: raised(c, stmt) for label, stmt in RAISING},
        }
    yield said
    drop_database(name)


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_sql_edition(edition_reference, encoding):
    name = fresh_database(encoding, "edition")
    run = psql_file(name, os.path.join(REPO, "edition", "advlock_sql.sql"))
    assert run.returncode == 0, f"psql -f edition/advlock_sql.sql in {encoding}: {run.stderr[-2000:]}"
    with connect(name, "UTF8") as c:
        assert c.execute("SELECT advlock_key('rollup', 'nightly')").fetchone()[0] == 2132624222628149741
        got = c.execute("""
            SELECT p.oid::regprocedure::text, obj_description(p.oid, 'pg_proc'), p.prosrc
              FROM pg_proc p WHERE p.pronamespace = 'public'::regnamespace AND p.proname LIKE 'advlock%' ORDER BY 1""").fetchall()
    assert got == edition_reference["descriptions"], f"{encoding}: the edition's functions or descriptions differ"
    with connect(name, euc_jp_or_own(encoding)) as c:
        for label, statement in RAISING:
            assert raised(c, statement) == edition_reference["errors"][label], f"{encoding} edition: {label}"
    drop_database(name)


# A role name quoted by a message (advlock_leak_count's hidden-holder error names the caller):
# converted from the database encoding, then verbatim (UTF8, SQL_ASCII) or as \\uXXXX escapes.
ROLE_NAME = {"UTF8": "\u30ed\u30fc\u30eb", "EUC_JP": "\u30ed\u30fc\u30eb", "LATIN1": "r\u00f4le",
             "WIN1251": "\u0440\u043e\u043b\u044c", "SQL_ASCII": "r\u00f4le"}


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_role_name_in_a_message(encoding):
    name = fresh_database(encoding, "role")
    role = f"{ROLE_NAME[encoding]}_{encoding.lower()}"
    client = "UTF8" if encoding in ("UTF8", "SQL_ASCII") else encoding
    # Created from this database: the catalog holds the name in its encoding (a client cannot
    # log in by such a name, so the test session takes the role with SET ROLE).
    with connect(name, client) as admin, connect(name) as holder:
        admin.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(role)))
        admin.execute(sql.SQL("CREATE ROLE {}").format(sql.Identifier(role)))
        try:
            admin.execute("CREATE EXTENSION advlock")
            assert holder.execute("SELECT advlock_try_with_timeout(4242, 0, scope => 'session')").fetchone()[0] is True
            admin.execute(sql.SQL("SET ROLE {}").format(sql.Identifier(role)))
            said = raised(admin, "SELECT advlock_leak_count()")
            admin.execute("RESET ROLE")
        finally:
            holder.close()
            admin.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(role)))
    shown = role if encoding in ("UTF8", "SQL_ASCII") else "".join(
        ch if ch.isascii() else f"\\u{ord(ch):04X}" for ch in role)
    assert said is not None and said[0] == "42501", said
    assert said[2] == f"pg_stat_activity hides their state from role {shown}, so a leak among them could not be counted.", said
    assert said[3] == f'Monitoring needs pg_read_all_stats (or pg_monitor): GRANT pg_monitor TO "{shown}";', said
    drop_database(name)
