"""Security: search_path hijacking, trusted install by a database owner, no SECURITY DEFINER,
and privilege boundaries between roles (visibility, terminating others' backends)."""
import threading
from datetime import timedelta

import psycopg
import pytest

from relsupport import DATABASE, advisory_locks, advlock_key, connect, wait_for_waiter, wait_until

EVIL = "rel_evil"              # unprivileged role owning the hostile schema
DBOWNER = "rel_dbowner"        # non-superuser database owner (trusted install)
TRUSTED_DB = "advlock_rel_trusted"
ROLES = {  # role: extra grants
    "rel_alice": [], "rel_bob": [], "rel_watcher": ["pg_read_all_stats"],
    "rel_killer": ["pg_read_all_stats", "pg_signal_backend"], "rel_member": ["rel_alice"],
}


def _op(name, sym, left, right, ret, body_expr):
    return f"""
CREATE FUNCTION evil.{name}(a {left}, b {right}) RETURNS {ret} LANGUAGE plpgsql AS $$
BEGIN PERFORM evil.hijacked('{sym}({left},{right})'); RETURN {body_expr}; END $$;
CREATE OPERATOR evil.{sym} (LEFTARG = {left}, RIGHTARG = {right}, FUNCTION = evil.{name});"""


def _fn(name, args, ret, body_expr):
    return f"""
CREATE FUNCTION evil.{name}({args}) RETURNS {ret} LANGUAGE plpgsql AS $$
BEGIN PERFORM evil.hijacked('{name}({args})'); RETURN {body_expr}; END $$;"""


# Every object a careless extension script or query could resolve through the caller's
# search_path, shadowed with a lookalike that records the call (a sequence: non-transactional)
# and raises a WARNING, then behaves like the original so nothing else gives it away.
HOSTILE_SQL = "\n".join([
    """
CREATE SEQUENCE evil.hits;
GRANT USAGE, SELECT, UPDATE ON SEQUENCE evil.hits TO PUBLIC;
CREATE FUNCTION evil.hijacked(what text) RETURNS void LANGUAGE plpgsql AS $$
BEGIN PERFORM pg_catalog.nextval('evil.hits'); RAISE WARNING 'hijacked: %', what; END $$;
CREATE FUNCTION evil.hijacked_bool(what text) RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN PERFORM evil.hijacked(what); RETURN true; END $$;
CREATE VIEW evil.pg_locks AS SELECT * FROM pg_catalog.pg_locks WHERE evil.hijacked_bool('pg_locks');
CREATE VIEW evil.pg_stat_activity AS
    SELECT * FROM pg_catalog.pg_stat_activity WHERE evil.hijacked_bool('pg_stat_activity');
CREATE VIEW evil.pg_database AS SELECT * FROM pg_catalog.pg_database WHERE evil.hijacked_bool('pg_database');
GRANT SELECT ON evil.pg_locks, evil.pg_stat_activity, evil.pg_database TO PUBLIC;
""",
    _fn("pg_blocking_pids", "integer", "integer[]", "pg_catalog.pg_blocking_pids($1)"),
    _fn("clock_timestamp", "", "timestamptz", "pg_catalog.clock_timestamp()"),
    _fn("now", "", "timestamptz", "pg_catalog.now()"),
    _fn("format", "text, integer, text, text", "text", "pg_catalog.format($1, $2, $3, $4)"),
    _fn("format", "text, VARIADIC text[]", "text", "pg_catalog.format($1, VARIADIC $2)"),
    _fn("quote_literal", "text", "text", "pg_catalog.quote_literal($1)"),
    _fn("current_database", "", "name", "pg_catalog.current_database()"),
    _fn("pg_backend_pid", "", "integer", "pg_catalog.pg_backend_pid()"),
    _fn("pg_terminate_backend", "integer", "boolean", "false"),
    _fn("pg_terminate_backend", "integer, bigint", "boolean", "false"),
    _fn("advlock_idle_threshold", "interval", "interval", "interval '0'"),
    _fn("advlock_idle_threshold", "", "interval", "interval '0'"),
    """
CREATE FUNCTION evil.advlock_lock_entries()
RETURNS TABLE(key bigint, key1 integer, key2 integer, mode text, granted boolean, pid integer,
              waiting_since timestamptz) LANGUAGE plpgsql AS $$
BEGIN PERFORM evil.hijacked('advlock_lock_entries()'); RETURN QUERY SELECT * FROM public.advlock_lock_entries(); END $$;""",
    """
CREATE FUNCTION evil.advlock_holder_entries(pids integer[] DEFAULT NULL)
RETURNS TABLE(key bigint, key1 integer, key2 integer, mode text, granted boolean, pid integer,
              waiting_since timestamptz, blocked_by integer[], label text, scope text,
              held_since timestamptz, token bigint) LANGUAGE plpgsql AS $$
BEGIN PERFORM evil.hijacked('advlock_holder_entries(integer[])');
      RETURN QUERY SELECT * FROM public.advlock_holder_entries(pids); END $$;""",
    _fn("string_agg_sfunc", "text, text, text", "text",
        "pg_catalog.concat($1, CASE WHEN $1 IS NULL THEN '' ELSE $3 END, $2)"),
    "CREATE AGGREGATE evil.string_agg(text, text) (SFUNC = evil.string_agg_sfunc, STYPE = text);",
    _fn("count_sfunc", "bigint, integer", "bigint", "$1 OPERATOR(pg_catalog.+) 1"),
    "CREATE AGGREGATE evil.count(integer) (SFUNC = evil.count_sfunc, STYPE = bigint, INITCOND = '0');",
    _fn("array_agg_sfunc", "bigint[], bigint", "bigint[]", "pg_catalog.array_append($1, $2)"),
    "CREATE AGGREGATE evil.array_agg(bigint) (SFUNC = evil.array_agg_sfunc, STYPE = bigint[]);",
    _fn("min_sfunc", "text, text", "text", "$2"),
    "CREATE AGGREGATE evil.min(text) (SFUNC = evil.min_sfunc, STYPE = text);",
    _op("eq_text", "=", "text", "text", "boolean", "a OPERATOR(pg_catalog.=) b"),
    _op("eq_oid", "=", "oid", "oid", "boolean", "a OPERATOR(pg_catalog.=) b"),
    _op("eq_oid_int8", "=", "oid", "bigint", "boolean", "a::pg_catalog.int8 OPERATOR(pg_catalog.=) b"),
    _op("eq_int4", "=", "integer", "integer", "boolean", "a OPERATOR(pg_catalog.=) b"),
    _op("eq_int2_int4", "=", "smallint", "integer", "boolean", "a OPERATOR(pg_catalog.=) b"),
    _op("eq_name", "=", "name", "name", "boolean", "a OPERATOR(pg_catalog.=) b"),
    _op("ne_int4", "<>", "integer", "integer", "boolean", "a OPERATOR(pg_catalog.<>) b"),
    _op("like_text", "~~", "text", "text", "boolean", "a OPERATOR(pg_catalog.~~) b"),
    _op("ge_interval", ">=", "interval", "interval", "boolean", "a OPERATOR(pg_catalog.>=) b"),
    _op("minus_tstz", "-", "timestamptz", "timestamptz", "interval", "a OPERATOR(pg_catalog.-) b"),
    _op("shl_int8", "<<", "bigint", "integer", "bigint", "a OPERATOR(pg_catalog.<<) b"),
    _op("shr_int8", ">>", "bigint", "integer", "bigint", "a OPERATOR(pg_catalog.>>) b"),
    _op("or_int8", "|", "bigint", "bigint", "bigint", "a OPERATOR(pg_catalog.|) b"),
    # what advlock_fence, its table's defaults and its guard trigger use
    _op("lt_int8", "<", "bigint", "bigint", "boolean", "a OPERATOR(pg_catalog.<) b"),
    _op("le_int8", "<=", "bigint", "bigint", "boolean", "a OPERATOR(pg_catalog.<=) b"),
    _op("lt_int8_int4", "<", "bigint", "integer", "boolean", "a OPERATOR(pg_catalog.<) b"),
    _fn("statement_timestamp", "", "timestamptz", "pg_catalog.statement_timestamp()"),
])

HOSTILE_PATHS = ["evil, public, pg_catalog", "evil, pg_catalog, public", "public, evil, pg_catalog", "evil, public"]


def _create_roles(admin):
    for role in [EVIL, DBOWNER, *ROLES]:
        admin.execute(f"CREATE ROLE {role} LOGIN NOSUPERUSER")
    for role, grants in ROLES.items():
        for g in grants:
            admin.execute(f"GRANT {g} TO {role}")


def _cleanup(admin):
    """Drops what this module creates (also what an interrupted earlier run left behind)."""
    admin.execute(f"DROP DATABASE IF EXISTS {TRUSTED_DB} WITH (FORCE)")
    with connect("rel-sec-cleanup") as c:
        c.execute("DROP SCHEMA IF EXISTS evil CASCADE")
        for role in [*ROLES, EVIL, DBOWNER]:
            if c.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (role,)).fetchone():
                c.execute(f"DROP OWNED BY {role} CASCADE")
                admin.execute(f"DROP ROLE {role}")


def _install_hostile_schema(dbname):
    with connect("rel-sec-setup", dbname=dbname) as su:
        su.execute(f"CREATE SCHEMA evil AUTHORIZATION {EVIL}")
    with connect("rel-evil", dbname=dbname, user=EVIL) as evil:
        evil.execute("GRANT USAGE ON SCHEMA evil TO PUBLIC")
        evil.execute(HOSTILE_SQL)


@pytest.fixture(scope="module")
def hostile():
    """Roles, and the schema `evil` full of lookalikes in the test database."""
    with connect("rel-sec-admin", dbname="postgres") as admin:
        _cleanup(admin)
        _create_roles(admin)
        try:
            _install_hostile_schema(DATABASE)
            yield
        finally:
            _cleanup(admin)


def hijack_count(dbname):
    with connect("rel-sec-check", dbname=dbname) as c:
        last_value, is_called = c.execute("SELECT last_value, is_called FROM evil.hits").fetchone()
        return last_value if is_called else 0


def run_victim_calls(dbname, search_path, key):
    """As a superuser with a hostile search_path, uses every part of the extension that runs
    SQL or resolves names: the view (holder and waiter rows), the holder functions, the wait
    and timeout paths (the DETAIL of advlock_lock_with_timeout is built by a query), unlock,
    and a real termination. Returns the victim's notices."""
    holder = connect("rel-sec-holder", dbname=dbname)
    waiter = connect("rel-sec-waiter", dbname=dbname)
    victim = connect("rel-sec-victim", dbname=dbname)
    result = {}
    try:
        assert holder.execute("SELECT advlock_try_with_timeout(%s, 0, 'session')", (key,)).fetchone()[0]
        t = threading.Thread(target=lambda: result.setdefault("waiter", waiter.execute(
            "SELECT advlock_try_with_timeout(%s, 30000, 'session')", (key,)).fetchone()[0]))
        t.start()
        wait_for_waiter(victim, waiter.info.backend_pid, key)

        victim.execute(f"SET search_path = {search_path}")
        hp, wp = holder.info.backend_pid, waiter.info.backend_pid
        rows = victim.execute("SELECT pid, key, granted, blocked_by, backend_state, idle_for IS NOT NULL "
                              "FROM advlock_holders").fetchall()
        assert sorted(rows) == sorted([(hp, key, True, None, "idle", True), (wp, key, False, [hp], "active", False)])
        assert [r[0] for r in victim.execute("SELECT pid FROM advlock_idle_holders('0')").fetchall()] == [hp]
        assert victim.execute("SELECT advlock_leak_count('0'), advlock_leak_count()").fetchone() == (1, 0)
        assert victim.execute("SELECT public.advlock_idle_threshold(), public.advlock_idle_threshold('5 min')").fetchone() \
            == (timedelta(minutes=1), timedelta(minutes=5))
        assert victim.execute("SELECT pid, keys, terminated FROM advlock_terminate_idle_holders('0')").fetchall() \
            == [(hp, [key], False)]
        assert victim.execute("SELECT advlock_try_with_timeout(%s, 30)", (key,)).fetchone()[0] is False
        with pytest.raises(psycopg.errors.LockNotAvailable) as info:
            victim.execute("SELECT advlock_lock_with_timeout(%s, 30, 'session')", (key,))
        assert info.value.diag.message_detail == f"Held by PID {hp} (application_name 'rel-sec-holder', state 'idle')."
        with pytest.raises(psycopg.errors.LockNotAvailable) as info:
            victim.execute("SELECT advlock_lock_with_timeout(%s, 0, mode => 'shared')", (key,))
        assert f"PID {hp}" in info.value.diag.message_detail
        # Fences: passed in each form, refused (LK001), reset -- through no lookalike.
        fence_id = f"sec-{key}"
        victim.execute("SELECT advlock_fence('sec-fence', %s, 5), advlock_fence('sec-fence', %s::bigint, 5), "
                       "advlock_fence(%s::bigint, 5)", (fence_id, key, key))
        with pytest.raises(psycopg.Error) as refused:
            victim.execute("SELECT advlock_fence('sec-fence', %s, 4)", (fence_id,))
        assert refused.value.sqlstate == "LK001"
        assert victim.execute("SELECT advlock_fence_reset('sec-fence', %s), advlock_fence_reset('sec-fence', %s::bigint), "
                              "advlock_fence_reset(%s::bigint)", (fence_id, key, key)).fetchone() == (5, 5, 5)
        assert victim.execute("SELECT advlock_try_with_timeout('sec', 'x', 10, 'session'), "
                              "advlock_try_with_timeout('sec', 7::bigint, 10, 'session'), "
                              "advlock_unlock('sec', 'x'), advlock_unlock('sec', 7::bigint), "
                              "advlock_key('sec', 'x')").fetchone() \
            == (True, True, True, True, advlock_key("sec", "x"))
        # A real termination through the hostile path; the waiter then gets the lock.
        assert victim.execute("SELECT pid, terminated FROM advlock_terminate_idle_holders('0', dry_run => false)"
                              ).fetchall() == [(hp, True)]
        t.join(timeout=30)
        assert result.get("waiter") is True
        assert waiter.execute("SELECT advlock_unlock(%s)", (key,)).fetchone()[0] is True
        return list(victim.notices)
    finally:
        for c in (holder, waiter, victim):
            c.close()


@pytest.mark.parametrize("search_path", HOSTILE_PATHS)
def test_search_path_hijack(hostile, key, search_path):
    before = hijack_count(DATABASE)
    notices = run_victim_calls(DATABASE, search_path, key)
    hijacked = [n.message_primary for n in notices if "hijacked" in (n.message_primary or "")]
    assert not hijacked, hijacked
    assert hijack_count(DATABASE) == before == 0


def test_hostile_objects_do_fire_when_referenced(hostile):
    """Control: the lookalikes are reachable — an unqualified reference from the caller's own
    query does resolve to them — so the test above is not vacuous."""
    with connect("rel-sec-control") as c:
        c.execute("SET search_path = evil, public, pg_catalog")
        c.execute("SELECT count(*) FROM pg_locks WHERE pid = pg_backend_pid() AND clock_timestamp() - now() >= '0'")
        assert len([n for n in c.notices if "hijacked" in n.message_primary]) >= 4
    with connect("rel-sec-control") as c:
        assert c.execute("SELECT is_called FROM evil.hits").fetchone()[0] is True
        c.execute("ALTER SEQUENCE evil.hits RESTART")


# pg_depend rows by which objects in `targets` depend on objects in schema evil.
DEPENDS_ON_EVIL = """
WITH evil_objects AS (
    SELECT 'pg_proc'::regclass AS classid, oid FROM pg_proc WHERE pronamespace = 'evil'::regnamespace
    UNION ALL SELECT 'pg_operator'::regclass, oid FROM pg_operator WHERE oprnamespace = 'evil'::regnamespace
    UNION ALL SELECT 'pg_class'::regclass, oid FROM pg_class WHERE relnamespace = 'evil'::regnamespace
    UNION ALL SELECT 'pg_type'::regclass, oid FROM pg_type WHERE typnamespace = 'evil'::regnamespace),
targets AS ({targets}),
with_rules AS (
    SELECT classid, objid FROM targets
    UNION ALL SELECT 'pg_rewrite'::regclass, r.oid FROM pg_rewrite r
      JOIN targets t ON t.classid = 'pg_class'::regclass AND r.ev_class = t.objid)
SELECT pg_describe_object(d.classid, d.objid, d.objsubid) AS dependent,
       pg_describe_object(d.refclassid, d.refobjid, 0) AS hostile
  FROM pg_depend d
  JOIN with_rules w ON w.classid = d.classid AND w.objid = d.objid
  JOIN evil_objects e ON e.classid = d.refclassid AND e.oid = d.refobjid"""
EXTENSION_MEMBERS = """SELECT classid, objid FROM pg_depend
    WHERE refclassid = 'pg_extension'::regclass AND deptype = 'e'
      AND refobjid = (SELECT oid FROM pg_extension WHERE extname = 'advlock')"""


def test_trusted_install_by_database_owner_with_hostile_schema(hostile, key):
    with connect("rel-sec-admin", dbname="postgres") as admin:
        admin.execute(f"CREATE DATABASE {TRUSTED_DB} OWNER {DBOWNER}")
    try:
        _install_hostile_schema(TRUSTED_DB)
        with connect("rel-dbowner", dbname=TRUSTED_DB, user=DBOWNER) as owner:
            assert owner.execute("SELECT rolsuper FROM pg_roles WHERE rolname = current_user").fetchone()[0] is False
            owner.execute("SET search_path = evil, public, pg_catalog")
            owner.execute("CREATE EXTENSION advlock SCHEMA public")
            assert not [n for n in owner.notices if "hijacked" in n.message_primary]
        with connect("rel-sec-check", dbname=TRUSTED_DB) as su:
            ext = su.execute("SELECT extowner::regrole::text, extnamespace::regnamespace::text FROM pg_extension "
                             "WHERE extname = 'advlock'").fetchone()
            assert ext == (DBOWNER, "public")
            members = dict(su.execute(f"SELECT classid::regclass::text, count(*) FROM ({EXTENSION_MEMBERS}) m "
                                      "GROUP BY 1").fetchall())
            # functions; the views advlock_holders, advlock_stats, advlock_stats_info,
            # advlock_metrics, advlock_leases, advlock_lease_stats, advlock_lock_table, the
            # sequence advlock_token_seq and the table advlock_fences
            assert members["pg_proc"] >= 16 and members["pg_class"] == 9, members
            # The fences' table belongs to the database owner who installed the extension
            # (@extowner@), not to the bootstrap superuser the trusted script ran as: it may
            # reset fences and grant who passes them.
            assert su.execute("SELECT pg_get_userbyid(relowner) FROM pg_class WHERE oid = 'advlock_fences'::regclass"
                              ).fetchone()[0] == DBOWNER
            # No member (nor the view's rewrite rule) depends on anything in the hostile schema.
            assert su.execute(DEPENDS_ON_EVIL.format(targets=EXTENSION_MEMBERS)).fetchall() == []
            # Control: the same query does see such a dependency when one exists.
            su.execute("CREATE VIEW public.control_view AS SELECT evil.clock_timestamp() AS t")
            control = su.execute(DEPENDS_ON_EVIL.format(
                targets="SELECT 'pg_class'::regclass AS classid, 'public.control_view'::regclass::oid AS objid"
            )).fetchall()
            assert control == [("rule _RETURN on view control_view", "function evil.clock_timestamp()")]
            su.execute("DROP VIEW public.control_view")
            # Nothing was called during installation.
            assert su.execute("SELECT is_called FROM evil.hits").fetchone()[0] is False
        # ... and it does: it resets a fence another role passed, and decides who passes them.
        with connect("rel-bob", dbname=TRUSTED_DB, user="rel_bob") as bob:
            bob.execute("SELECT advlock_fence('trusted', 'x', 5)")
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                bob.execute("SELECT advlock_fence_reset('trusted', 'x')")
        with connect("rel-dbowner", dbname=TRUSTED_DB, user=DBOWNER) as owner:
            assert owner.execute("SELECT advlock_fence_reset('trusted', 'x')").fetchone()[0] == 5
            owner.execute("REVOKE INSERT, UPDATE ON advlock_fences FROM PUBLIC")
        with connect("rel-bob", dbname=TRUSTED_DB, user="rel_bob") as bob:
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                bob.execute("SELECT advlock_fence('trusted', 'x', 6)")
        # And using it with a hostile search_path calls none of the lookalikes either.
        notices = run_victim_calls(TRUSTED_DB, "evil, public, pg_catalog", key)
        assert not [n.message_primary for n in notices if "hijacked" in (n.message_primary or "")]
        assert hijack_count(TRUSTED_DB) == 0
    finally:
        with connect("rel-sec-admin", dbname="postgres") as admin:
            admin.execute(f"DROP DATABASE IF EXISTS {TRUSTED_DB} WITH (FORCE)")


def test_no_security_definer_functions(admin):
    rows = admin.execute("""
        SELECT p.oid::regprocedure::text, p.prosecdef
          FROM pg_proc p
          JOIN pg_depend d ON d.classid = 'pg_proc'::regclass AND d.objid = p.oid AND d.deptype = 'e'
                          AND d.refclassid = 'pg_extension'::regclass
          JOIN pg_extension e ON e.oid = d.refobjid AND e.extname = 'advlock'""").fetchall()
    # (A test build of the extension adds members: require the 16 public functions among them.)
    assert len([r for r in rows if r[0].startswith("advlock_")]) >= 16, sorted(rows)
    assert [r[0] for r in rows if r[1]] == []
    # Nor does any member function change the role it runs as.
    configs = admin.execute("""
        SELECT p.oid::regprocedure::text, cfg
          FROM pg_proc p, unnest(p.proconfig) AS cfg
         WHERE p.proname LIKE 'advlock%'""").fetchall()
    assert all(cfg == "search_path=pg_catalog, pg_temp" for _, cfg in configs), configs


# --- privileges between roles -------------------------------------------------------------

def test_unprivileged_role_can_read_holders(hostile):
    """Like pg_locks and pg_stat_activity, the view and its functions are for everyone."""
    with connect("rel-bob", user="rel_bob") as bob:
        assert bob.execute("SELECT has_table_privilege('advlock_holders', 'SELECT')").fetchone()[0] is True
        bob.execute("SELECT * FROM advlock_holders").fetchall()
        bob.execute("SELECT * FROM advlock_idle_holders()").fetchall()
        assert bob.execute("SELECT advlock_leak_count()").fetchone()[0] == 0
        bob.execute("SELECT * FROM advlock_terminate_idle_holders('1 hour')").fetchall()


def _idle_holder(user, key, app):
    conn = connect(app, user=user)
    assert conn.execute("SELECT advlock_try_with_timeout(%s, 0, 'session')", (key,)).fetchone()[0]
    conn.execute("SELECT 'holding'")  # the query others may or may not see
    return conn


def test_unprivileged_role_sees_what_pg_stat_activity_shows(hostile, key):
    alice = _idle_holder("rel_alice", key, "rel-alice")
    try:
        with connect("rel-bob", user="rel_bob") as bob:
            assert bob.execute("SELECT advlock_try_with_timeout(%s, 0, 'session')", (key + 1,)).fetchone()[0]
            rows = {r[0]: r[1:] for r in bob.execute(
                "SELECT pid, key, usename, application_name, backend_state, query, idle_for, is_idle_holder "
                "FROM advlock_holders").fetchall()}
            ap, bp = alice.info.backend_pid, bob.info.backend_pid
            # Another role's session: the lock and who, but no state or query text; whether it is
            # an idle holder is unknown (NULL), not "no".
            assert rows[ap] == (key, "rel_alice", "rel-alice", None, "<insufficient privilege>", None, None)
            # Its own: everything.
            assert rows[bp][:4] == (key + 1, "rel_bob", "rel-bob", "active")
            assert "advlock_holders" in rows[bp][4]
            # Without the state, alice is not listed (nor terminated) as an idle holder, and the blind
            # spot is said: a WARNING from the listing functions, 42501 from the leak count.
            bob.notices.clear()
            assert bob.execute("SELECT count(*) FROM advlock_idle_holders('0')").fetchone()[0] == 0
            assert [(n.severity, n.message_primary) for n in bob.notices] == [
                ("WARNING", "advlock_idle_holders cannot see the activity of 1 backend holding advisory locks")]
            assert "GRANT pg_monitor TO rel_bob" in bob.notices[0].message_hint
            with pytest.raises(psycopg.errors.InsufficientPrivilege) as leak_error:
                bob.execute("SELECT advlock_leak_count('0')")
            assert "cannot see the activity of 1 backend" in str(leak_error.value)
            assert bob.execute("SELECT * FROM advlock_terminate_idle_holders('0', dry_run => false)").fetchall() == []
            assert bob.execute("SELECT advlock_unlock(%s)", (key + 1,)).fetchone()[0] is True
        with connect("rel-watcher", user="rel_watcher") as watcher:  # pg_read_all_stats sees everything
            row = watcher.execute("SELECT backend_state, query, is_idle_holder FROM advlock_holders "
                                  "WHERE pid = %s", (alice.info.backend_pid,)).fetchone()
            assert row[0] == "idle" and row[1] == "SELECT 'holding'"
            # With pg_read_all_stats nothing is hidden: a real count, no warning.
            watcher.notices.clear()
            assert watcher.execute("SELECT advlock_leak_count('0')").fetchone()[0] >= 1
            assert watcher.execute("SELECT count(*) FROM advlock_idle_holders('0') WHERE pid = %s",
                                   (alice.info.backend_pid,)).fetchone()[0] == 1
            assert [n for n in watcher.notices if n.severity == "WARNING"] == []
    finally:
        alice.close()


def test_terminate_needs_the_right_privileges(hostile, admin, key):
    alice = _idle_holder("rel_alice", key, "rel-alice")
    su_holder = _idle_holder("postgres", key + 1, "rel-superuser-holder")
    ap, sp = alice.info.backend_pid, su_holder.info.backend_pid
    try:
        # pg_read_all_stats without pg_signal_backend: listed, not terminated, WARNING.
        with connect("rel-watcher", user="rel_watcher") as watcher:
            rows = watcher.execute("SELECT pid, keys, terminated FROM advlock_terminate_idle_holders('0', false) "
                                   "ORDER BY pid").fetchall()
            assert rows == sorted([(ap, [key], False), (sp, [key + 1], False)])
            warnings = [n.message_primary for n in watcher.notices if n.severity == "WARNING"]
            assert sorted(warnings) == sorted([f"not allowed to terminate PID {ap} (application_name 'rel-alice')",
                                               f"not allowed to terminate PID {sp} (application_name "
                                               f"'rel-superuser-holder')"])
            # The HINT fits the backend: pg_signal_backend would help for alice's, never for a superuser's.
            hints = {n.message_primary: n.message_hint for n in watcher.notices if n.severity == "WARNING"}
            assert "pg_signal_backend" in hints[f"not allowed to terminate PID {ap} (application_name 'rel-alice')"]
            assert hints[f"not allowed to terminate PID {sp} (application_name 'rel-superuser-holder')"] == \
                "That backend runs as a superuser: only a superuser can terminate it."
        assert [r.pid for r in advisory_locks(admin, ap)] == [ap]
        assert alice.execute("SELECT 1").fetchone()[0] == 1

        # pg_signal_backend: terminates the non-superuser, not the superuser.
        with connect("rel-killer", user="rel_killer") as killer:
            rows = killer.execute("SELECT pid, terminated FROM advlock_terminate_idle_holders('0', false) "
                                  "ORDER BY pid").fetchall()
            assert rows == sorted([(ap, True), (sp, False)])
            assert [n.message_primary for n in killer.notices if n.severity == "WARNING"] == \
                [f"not allowed to terminate PID {sp} (application_name 'rel-superuser-holder')"]
            assert [n.message_hint for n in killer.notices if n.severity == "WARNING"] == \
                ["That backend runs as a superuser: only a superuser can terminate it."]
        wait_until(lambda: not advisory_locks(admin, ap), what="the terminated holder's lock to vanish")
        with pytest.raises(psycopg.OperationalError):
            alice.execute("SELECT 1")
        assert [r.pid for r in advisory_locks(admin, sp)] == [sp]
        assert su_holder.execute("SELECT advlock_unlock(%s)", (key + 1,)).fetchone()[0] is True
    finally:
        alice.close()
        su_holder.close()


def test_member_of_the_role_may_terminate(hostile, admin, key):
    alice = _idle_holder("rel_alice", key, "rel-alice")
    ap = alice.info.backend_pid
    try:
        with connect("rel-bob", user="rel_bob") as bob:  # no membership: cannot even see the state
            assert bob.execute("SELECT * FROM advlock_terminate_idle_holders('0', false)").fetchall() == []
        with connect("rel-member", user="rel_member") as member:  # member of rel_alice
            assert member.execute("SELECT pid, terminated FROM advlock_terminate_idle_holders('0', false)"
                                  ).fetchall() == [(ap, True)]
        wait_until(lambda: not advisory_locks(admin, ap), what="the terminated holder's lock to vanish")
    finally:
        alice.close()
