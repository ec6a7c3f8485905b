"""Bad input: NULLs in every argument of every function, timeout bounds, unknown scope/mode
strings, empty namespaces, a 100 MB id, and databases in LATIN1 and SQL_ASCII."""
import re
import threading
import time

import psycopg
import pytest

from relsupport import advisory_locks, figure, advlock_key, connect, wait_for_waiter

EXTENSION_FUNCTIONS = """
    SELECT p.proname, p.oid::regprocedure::text, pg_get_function_arguments(p.oid),
           p.proisstrict, p.proretset, p.prorettype::regtype::text
      FROM pg_proc p
      JOIN pg_depend d ON d.classid = 'pg_proc'::regclass AND d.objid = p.oid
                      AND d.refclassid = 'pg_extension'::regclass AND d.deptype = 'e'
      JOIN pg_extension e ON e.oid = d.refobjid AND e.extname = 'advlock'
     WHERE p.proname LIKE 'advlock%' AND p.prokind = 'f'   -- procedures: pg_test/leases
       AND p.prorettype <> 'trigger'::regtype   -- advlock_fence_guard: called by its trigger only
     ORDER BY 2"""

ACQUIRING = ["advlock_try_with_timeout", "advlock_lock_with_timeout"]
# Functions whose messages name another: the function they raise for.
SPEAKS_AS = {"advlock_fence_checked": "advlock_fence"}


def parse_arguments(text):
    """'ns text, id bigint, mode text DEFAULT ...' → [(name, type, default or None)]."""
    out = []
    for part in (text.split(", ") if text else []):
        m = re.fullmatch(r"(\w+) ([\w ]+?(?:\[\])?)(?: DEFAULT (.*))?", part)
        assert m, part
        out.append((m.group(1), m.group(2), m.group(3)))
    return out


def valid_value(name, typ, key):
    values = {("key", "bigint"): str(key), ("ns", "text"): "'fuzz'", ("id", "text"): "'x'",
              ("id", "bigint"): "42", ("timeout_ms", "integer"): "0", ("scope", "text"): "'xact'",
              ("mode", "text"): "'exclusive'", ("older_than", "interval"): "'1 hour'",
              ("dry_run", "boolean"): "true", ("keys", "bigint[]"): f"ARRAY[{key}]",
              ("ids", "text[]"): "ARRAY['x']", ("ids", "bigint[]"): "ARRAY[42]",
              ("ttl_ms", "integer"): "1000", ("slots", "integer"): "1", ("lease", "bigint"): str(key),
              ("pids", "integer[]"): "ARRAY[0]", ("caller", "text"): "'fuzz'", ("token", "bigint"): "1",
              ("candidate", "text"): "'fuzz'", ("term", "bigint"): str(key), ("known_term", "bigint"): str(key)}
    return values[(name, typ)]


def test_null_in_every_argument(admin, key):
    functions = admin.execute(EXTENSION_FUNCTIONS).fetchall()
    # At least: 3 advlock_key, 3 x try/lock/unlock, idle_threshold, idle_holders, leak_count,
    # terminate_idle_holders (every function found is checked, new ones included).
    names = [f[0] for f in functions]
    assert all(names.count(n) == 3 for n in ["advlock_key", "advlock_try_with_timeout",
                                             "advlock_lock_with_timeout", "advlock_unlock"]), names
    assert {"advlock_idle_threshold", "advlock_idle_holders", "advlock_leak_count",
            "advlock_terminate_idle_holders"} <= set(names), names
    assert all(names.count(n) == 3 for n in ["advlock_try_all_with_timeout", "advlock_lock_all_with_timeout",
                                             "advlock_unlock_all", "advlock_try_with_token",
                                             "advlock_holding"]), names
    conn = connect("rel-nulls")
    pid = conn.info.backend_pid
    failures, checked = [], 0
    # Without shared_preload_libraries the statistics functions raise 55000 whatever their
    # arguments (pg_test/regress/sql/preload.sql checks that); they are checked when preloaded.
    preloaded = conn.execute("SELECT current_setting('advlock.max_labels', true) IS NOT NULL").fetchone()[0]
    for proname, signature, arguments, strict, retset, rettype in functions:
        if not preloaded and proname.startswith("advlock_stats"):
            continue
        # Leases check every argument first, then raise 55000 without preload: the NULL checks
        # apply, the call with valid arguments does not.
        needs_preload = (proname.startswith(("advlock_lease", "advlock_campaign", "advlock_leader",
                                             "advlock_observe_leader", "advlock_resign", "advlock_term_stats"))
                         and not preloaded)
        if strict and arguments:
            failures.append(f"{signature} is STRICT: a NULL argument returns NULL instead of an error")
        args = parse_arguments(arguments)
        for i, (name, typ, default) in enumerate(args):
            call_args = [f"NULL::{typ}" if j == i else f"{valid_value(n, t, key)}::{t}"
                         for j, (n, t, _) in enumerate(args)]
            call = f"{proname}({', '.join(call_args)})"
            sql = f"SELECT * FROM {call}" if retset else f"SELECT {call}"
            checked += 1
            conn.execute("BEGIN")
            try:
                rows = conn.execute(sql).fetchall()
            except psycopg.Error as e:
                d = e.diag
                if default == f"NULL::{typ}":
                    # (a default NULL that passes the checks reaches the preload check: 55000)
                    if not (needs_preload and d.sqlstate == "55000"):
                        failures.append(f"{call}: NULL means the default here, but raised {d.sqlstate} {d.message_primary}")
                elif d.sqlstate != "22004":
                    failures.append(f"{call}: {d.sqlstate} {d.message_primary} (expected 22004)")
                # advlock_fence_checked: the PL/pgSQL behind the Rust advlock_fence (src/fences.rs),
                # which raises for it, so it names advlock_fence
                elif (f'argument "{name}"' not in d.message_primary
                      or SPEAKS_AS.get(proname, proname) not in d.message_primary):
                    failures.append(f"{call}: message does not name the argument and function: {d.message_primary}")
                elif not d.message_hint:
                    failures.append(f"{call}: no HINT")
            else:
                if default != f"NULL::{typ}":
                    failures.append(f"{call}: no error, returned {rows}")
                elif not retset and (len(rows) != 1 or rows[0][0] is None):
                    failures.append(f"{call}: NULL (the default) returned {rows}")
            finally:
                conn.execute("ROLLBACK")
        # And with every argument valid the call works (so the errors above came from the NULL).
        if needs_preload:
            continue
        call = f"{proname}({', '.join(f'{valid_value(n, t, key)}::{t}' for n, t, _ in args)})"
        conn.execute("BEGIN")
        try:
            conn.execute(f"SELECT * FROM {call}" if retset else f"SELECT {call}").fetchall()
        except psycopg.Error as e:
            failures.append(f"{call}: valid call failed: {e.diag.sqlstate} {e.diag.message_primary}")
        finally:
            conn.execute("ROLLBACK")
    # Never a crash: same backend, still answering; nothing left locked.
    assert conn.execute("SELECT pg_backend_pid()").fetchone()[0] == pid
    conn.close()
    assert checked >= 40
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("call", [
    "advlock_try_all_with_timeout(ARRAY[1, NULL]::bigint[], 0)",
    "advlock_try_all_with_timeout('ns', ARRAY['a', NULL], 0)",
    "advlock_try_all_with_timeout('ns', ARRAY[1, NULL]::bigint[], 0)",
    "advlock_lock_all_with_timeout(ARRAY[1, NULL]::bigint[], 0)",
    "advlock_lock_all_with_timeout('ns', ARRAY['a', NULL], 0)",
    "advlock_lock_all_with_timeout('ns', ARRAY[1, NULL]::bigint[], 0)",
    "advlock_unlock_all(ARRAY[1, NULL]::bigint[])",
    "advlock_unlock_all('ns', ARRAY['a', NULL])",
    "advlock_unlock_all('ns', ARRAY[1, NULL]::bigint[])"])
def test_null_array_element(admin, call):
    """A NULL element of a key array: 22004 naming the element and the argument, nothing held
    (the first element, valid, is not taken either)."""
    with connect("rel-null-element") as conn:
        with pytest.raises(psycopg.Error) as err:
            conn.execute(f"SELECT {call}")
        d = err.value.diag
        assert d.sqlstate == "22004", (d.sqlstate, d.message_primary)
        assert 'element 2 of argument "' in d.message_primary and call.split("(")[0] in d.message_primary
        assert d.message_hint
        assert conn.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' "
                            "AND pid = pg_backend_pid()").fetchone()[0] == 0


@pytest.mark.parametrize("call", [
    "advlock_try_all_with_timeout(ARRAY[]::bigint[], 0)",
    "advlock_try_all_with_timeout('ns', ARRAY[]::text[], 0)",
    "advlock_lock_all_with_timeout('ns', ARRAY[]::bigint[], 0)",
    "advlock_unlock_all(ARRAY[]::bigint[])"])
def test_empty_key_array(admin, call):
    """An empty set would report success while locking nothing: 22023 naming the argument."""
    with connect("rel-empty-array") as conn:
        with pytest.raises(psycopg.Error) as err:
            conn.execute(f"SELECT {call}")
        d = err.value.diag
        assert d.sqlstate == "22023" and "must not be empty" in d.message_primary, (d.sqlstate, d.message_primary)
        assert d.message_hint


@pytest.mark.parametrize("timeout_ms", [-1, -2147483648])
@pytest.mark.parametrize("call", [
    "advlock_try_with_timeout(1::bigint, {t})", "advlock_try_with_timeout('ns', 'id', {t})",
    "advlock_try_with_timeout('ns', 1::bigint, {t})", "advlock_lock_with_timeout(1::bigint, {t})",
    "advlock_lock_with_timeout('ns', 'id', {t})", "advlock_lock_with_timeout('ns', 1::bigint, {t})"])
def test_negative_timeout_rejected(admin, call, timeout_ms):
    with pytest.raises(psycopg.Error) as info:
        admin.execute("SELECT " + call.format(t=timeout_ms))
    d = info.value.diag
    assert d.sqlstate == "22023"
    assert '"timeout_ms"' in d.message_primary and str(timeout_ms) in d.message_primary
    assert d.message_hint


def test_max_timeout_is_valid(admin, key):
    """2147483647 ms is a valid timeout (lock_timeout's own maximum): uncontended it returns at
    once; contended it waits and gets the lock when it is released; lock_timeout is untouched."""
    t0 = time.monotonic()
    assert admin.execute("SELECT advlock_try_with_timeout(%s, 2147483647, 'session')", (key,)).fetchone()[0]
    assert time.monotonic() - t0 < 5
    waiter = connect("rel-max-timeout")
    result = {}

    def wait():
        try:
            result["got"] = waiter.execute(
                "SELECT advlock_try_with_timeout(%s, 2147483647, 'session')", (key,)).fetchone()[0]
        except Exception as e:  # noqa: BLE001
            result["error"] = e
    t = threading.Thread(target=wait)
    t.start()
    try:
        wait_for_waiter(admin, waiter.info.backend_pid, key)
    finally:
        assert admin.execute("SELECT advlock_unlock(%s)", (key,)).fetchone()[0] is True
        t.join(timeout=30)
    assert result == {"got": True}
    assert waiter.execute("SHOW lock_timeout").fetchone()[0] == "0"
    assert waiter.execute("SELECT advlock_unlock(%s)", (key,)).fetchone()[0] is True
    waiter.close()


def test_zero_timeout_contended_returns_false_at_once(admin, key):
    assert admin.execute("SELECT advlock_try_with_timeout(%s, 0, 'session')", (key,)).fetchone()[0]
    with connect("rel-zero") as other:
        t0 = time.monotonic()
        assert other.execute("SELECT advlock_try_with_timeout(%s, 0, 'session')", (key,)).fetchone()[0] is False
        assert time.monotonic() - t0 < 1
        assert not advisory_locks(admin, other.info.backend_pid)
    assert admin.execute("SELECT advlock_unlock(%s)", (key,)).fetchone()[0]


CALLS_WITH_SCOPE_AND_MODE = [
    "advlock_try_with_timeout(1::bigint, 0, scope => {s}, mode => {m})",
    "advlock_try_with_timeout('ns', 'id', 0, scope => {s}, mode => {m})",
    "advlock_try_with_timeout('ns', 1::bigint, 0, scope => {s}, mode => {m})",
    "advlock_lock_with_timeout(1::bigint, 0, scope => {s}, mode => {m})",
    "advlock_lock_with_timeout('ns', 'id', 0, scope => {s}, mode => {m})",
    "advlock_lock_with_timeout('ns', 1::bigint, 0, scope => {s}, mode => {m})",
]
CALLS_WITH_MODE = ["advlock_unlock(1::bigint, mode => {m})", "advlock_unlock('ns', 'id', mode => {m})",
                   "advlock_unlock('ns', 1::bigint, mode => {m})"]
UNKNOWN = ["bogus", "", "transaction", "share", "exclusive ", "xact;", "session\n", "ＸＡＣＴ"]


@pytest.mark.parametrize("value", UNKNOWN, ids=repr)
def test_unknown_scope_and_mode(admin, value):
    """22023 naming the argument, with the allowed values in the HINT (value bound as text)."""
    failures = []

    def check(call, argument, allowed):
        admin.execute("BEGIN")
        try:
            admin.execute("SELECT " + call, (value,))
            failures.append(f"{call}: accepted")
        except psycopg.Error as e:
            d = e.diag
            if d.sqlstate != "22023" or f'"{argument}"' not in d.message_primary:
                failures.append(f"{call}: {d.sqlstate} {d.message_primary}")
            elif not all(f"'{a}'" in (d.message_hint or "") for a in allowed):
                failures.append(f"{call}: HINT does not list {allowed}: {d.message_hint}")
        finally:
            admin.execute("ROLLBACK")

    for call in CALLS_WITH_SCOPE_AND_MODE:
        check(call.format(s="%s::text", m="'exclusive'"), "scope", ["xact", "session"])
        check(call.format(s="'xact'", m="%s::text"), "mode", ["exclusive", "shared"])
    for call in CALLS_WITH_MODE:
        check(call.format(m="%s::text"), "mode", ["exclusive", "shared"])
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("call", [
    "advlock_key('')", "advlock_key('', 'x')", "advlock_key('', 7::bigint)",
    "advlock_try_with_timeout('', 'x', 0)", "advlock_try_with_timeout('', 7::bigint, 0)",
    "advlock_lock_with_timeout('', 'x', 0)", "advlock_lock_with_timeout('', 7::bigint, 0)",
    "advlock_unlock('', 'x')", "advlock_unlock('', 7::bigint)"])
def test_empty_namespace_rejected(admin, call):
    with pytest.raises(psycopg.Error) as info:
        admin.execute("SELECT " + call)
    d = info.value.diag
    assert d.sqlstate == "22023"
    assert '"ns"' in d.message_primary and "empty" in d.message_primary
    assert d.message_hint
    assert not advisory_locks(admin)


def test_empty_id_is_the_singleton_key(admin):
    row = admin.execute("SELECT advlock_key('solo'), advlock_key('solo', '')").fetchone()
    assert row[0] == row[1] == advlock_key("solo", "") == advlock_key("solo")


@pytest.mark.late  # its pure-Python reference is computed in the background meanwhile
def test_100mb_id(admin, huge_id_reference):
    size, reference = huge_id_reference
    t0 = time.monotonic()
    key = admin.execute("SELECT advlock_key('huge', repeat('x', %s))", (size,)).fetchone()[0]
    figure(f"100 MB id: advlock_key over {size} bytes took {time.monotonic() - t0:.2f} s (server, debug build)")
    assert key == reference
    # The same key locks and unlocks through the (ns, id) forms.
    assert admin.execute("SELECT advlock_try_with_timeout('huge', repeat('x', %s), 0, 'session')",
                         (size,)).fetchone()[0] is True
    assert [(r.key, r.granted) for r in advisory_locks(admin, admin.info.backend_pid)] == [(reference, True)]
    assert admin.execute("SELECT advlock_unlock(%s)", (reference,)).fetchone()[0] is True
    assert not advisory_locks(admin)


def test_lock_timeout_message_is_bounded(admin, key):
    size = 1024 * 1024
    assert admin.execute("SELECT advlock_try_with_timeout('big', repeat('y', %s), 0, 'session')", (size,)).fetchone()[0]
    try:
        with connect("rel-big-message") as other:
            with pytest.raises(psycopg.errors.LockNotAvailable) as info:
                other.execute("SELECT advlock_lock_with_timeout('big', repeat('y', %s), 0)", (size,))
        message = info.value.diag.message_primary
        assert str(advlock_key("big", "y" * size)) in message
        assert len(message) < 4096, f"message of {len(message)} characters"
    finally:
        assert admin.execute("SELECT advlock_unlock('big', repeat('y', %s))", (size,)).fetchone()[0]


# --- databases in other encodings -------------------------------------------------------

LATIN1_TEXTS = ["café", "crème brûlée", "Ñandú", "naïve façade", "ÆØÅ æøå ß ÿ", "¡¿«»°±²³µ¶·¸¹º¼½¾×÷",
                "plain ascii"]
NON_LATIN1_TEXTS = ["Ωμέγα", "日本語", "emoji 🔒", "€uro"]


@pytest.fixture(scope="module")
def encoded_databases():
    made = []
    with connect("rel-enc-admin", dbname="postgres") as adm:
        for name, encoding in (("advlock_rel_latin1", "LATIN1"), ("advlock_rel_sqlascii", "SQL_ASCII")):
            adm.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
            adm.execute(f"CREATE DATABASE {name} ENCODING '{encoding}' LC_COLLATE 'C' LC_CTYPE 'C' "
                        "TEMPLATE template0")
            made.append(name)
            with connect("rel-enc", dbname=name) as c:
                c.execute("CREATE EXTENSION advlock")
        yield {"LATIN1": made[0], "SQL_ASCII": made[1]}
        for name in made:
            adm.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def keys_in(conn, texts):
    return [conn.execute("SELECT advlock_key(%s, %s), advlock_key(%s), advlock_key(%s, 42::bigint)",
                         (t, t, t, t)).fetchone() for t in texts]


def reference_keys(texts):
    return [(advlock_key(t, t), advlock_key(t), advlock_key(t, 42)) for t in texts]


def test_latin1_database_same_keys(admin, encoded_databases):
    with connect("rel-latin1", dbname=encoded_databases["LATIN1"], client_encoding="UTF8") as conn:
        assert conn.execute("SHOW server_encoding").fetchone()[0] == "LATIN1"
        got = keys_in(conn, LATIN1_TEXTS)
        assert got == keys_in(admin, LATIN1_TEXTS) == reference_keys(LATIN1_TEXTS)
        # Not representable in LATIN1: the client conversion rejects it, as for any text.
        for text in NON_LATIN1_TEXTS:
            with pytest.raises(psycopg.errors.UntranslatableCharacter):
                conn.execute("SELECT advlock_key('ns', %s)", (text,))
        # The acquisition functions lock the same key (converted, not the LATIN1 bytes).
        assert conn.execute("SELECT advlock_try_with_timeout('café', 'crème brûlée', 0, 'session')").fetchone()[0]
        held = conn.execute("SELECT (classid::int8 << 32) | objid::int8 FROM pg_locks "
                            "WHERE locktype = 'advisory' AND pid = pg_backend_pid()").fetchall()
        assert held == [(advlock_key("café", "crème brûlée"),)]
        assert conn.execute("SELECT advlock_unlock(%s)", (advlock_key("café", "crème brûlée"),)).fetchone()[0]


def test_sql_ascii_database_same_keys(admin, encoded_databases):
    texts = LATIN1_TEXTS + NON_LATIN1_TEXTS
    with connect("rel-sqlascii", dbname=encoded_databases["SQL_ASCII"], client_encoding="UTF8") as conn:
        assert conn.execute("SHOW server_encoding").fetchone()[0] == "SQL_ASCII"
        # The server stores the client's UTF-8 bytes as they are: same keys, every character.
        assert keys_in(conn, texts) == keys_in(admin, texts) == reference_keys(texts)


def test_latin1_messages_show_the_id_without_mojibake(encoded_databases):
    """Messages reach the server as text in its encoding; outside UTF-8 advlock shows non-ASCII
    characters of ns/id as \\uXXXX escapes rather than handing it mis-encoded bytes."""
    db = encoded_databases["LATIN1"]
    with connect("rel-latin1-a", dbname=db, client_encoding="UTF8") as a, \
            connect("rel-latin1-b", dbname=db, client_encoding="UTF8") as b:
        assert a.execute("SELECT advlock_try_with_timeout('café', 'crème brûlée', 0, 'session')").fetchone()[0]
        with pytest.raises(psycopg.errors.LockNotAvailable) as info:
            b.execute("SELECT advlock_lock_with_timeout('café', 'crème brûlée', 0)")
        message = info.value.diag.message_primary
        assert "advlock_key('caf\\u00E9', 'cr\\u00E8me br\\u00FBl\\u00E9e')" in message, message
        assert "Ã" not in message
