-- Fences in the database (docs/fences.md): a writer calls advlock_fence(key, token) in its
-- write transaction; the call raises LK001 when a larger token has already passed that fence,
-- and otherwise records the token in advlock_fences (sql/fence_table.sql). The row is written
-- and locked by the writer's own transaction: the check commits or rolls back with the write,
-- and a second writer's call waits for the first one's transaction to end, then decides on the
-- token that committed.
--
-- Shared with the SQL edition as written (scripts/build_edition.py): plain PL/pgSQL. The same
-- conventions as holders.sql for the extension script: every reference schema-qualified,
-- operators included; no SECURITY DEFINER: the caller's own privileges on advlock_fences decide
-- who may pass (INSERT, UPDATE) and reset (DELETE) a fence. advlock_fence has no SET clause:
-- it is on every fenced write's path, and a function-level setting costs a GUC save and restore
-- per call; every name in it is qualified instead (pg_test/reliability/test_security.py calls
-- it under hostile search_paths).

-- The argument errors of advlock_fence and advlock_fence_reset (the fast path only tests
-- whether there is one): 22004 for a NULL, 22023 for an empty namespace or a token < 1.
CREATE FUNCTION @extschema@.advlock_fence_check(fn pg_catalog.text, ns pg_catalog.text, id_is_null pg_catalog.bool,
                                                 token pg_catalog.int8, key_form pg_catalog.bool)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    what text := CASE WHEN fn = 'advlock_fence_reset' THEN 'reset' ELSE 'fence' END;
BEGIN
    IF key_form AND id_is_null THEN
        RAISE EXCEPTION 'argument "key" of % must not be null', fn
            USING ERRCODE = 'null_value_not_allowed',
                  HINT = format('A NULL key would %s nothing: pass a value for every part of the key.', what);
    END IF;
    IF NOT key_form AND ns IS NULL THEN
        RAISE EXCEPTION 'argument "ns" of % must not be null', fn
            USING ERRCODE = 'null_value_not_allowed',
                  HINT = format('A NULL key would %s nothing: pass a value for every part of the key.', what);
    END IF;
    IF NOT key_form AND ns = '' THEN
        RAISE EXCEPTION 'argument "ns" of % must not be empty', fn
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'Name the feature the lock belongs to, e.g. advlock_key(''billing'', 42): the namespace keeps features from colliding.';
    END IF;
    IF NOT key_form AND id_is_null THEN
        RAISE EXCEPTION 'argument "id" of % must not be null', fn
            USING ERRCODE = 'null_value_not_allowed',
                  HINT = format('A NULL key would %s nothing: pass a value for every part of the key.', what);
    END IF;
    IF fn = 'advlock_fence' AND token IS NULL THEN
        RAISE EXCEPTION 'argument "token" of % must not be null', fn
            USING ERRCODE = 'null_value_not_allowed',
                  HINT = 'Pass this writer''s fencing token: the lease id advlock_lease returned, or the token of advlock_try_with_token.';
    END IF;
    IF fn = 'advlock_fence' AND token < 1 THEN
        RAISE EXCEPTION 'argument "token" of % must be positive: %', fn, token
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'advlock''s fencing tokens (lease ids, advlock_try_with_token) are positive; so must be a token of your own.';
    END IF;
END
$fn$;

-- The refusal (LK001), on the slow path only: the fence's row is locked by the caller's upsert
-- (ON CONFLICT DO UPDATE locks the conflicting row even when its WHERE is false), so the token
-- read here is the one that refused it. ns is NULL for the key form; id_int for (ns, id bigint).
CREATE FUNCTION @extschema@.advlock_fence_refuse(key pg_catalog.int8, ns pg_catalog.text, id_text pg_catalog.text,
                                                  id_int pg_catalog.int8, token pg_catalog.int8)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    target text := 'key ' || key;
    passed record;
BEGIN
    IF ns IS NOT NULL THEN
        target := target || ' = advlock_key(''' || replace(ns, '''', '''''') || ''', '
                  || CASE WHEN id_text IS NULL THEN id_int::text
                          ELSE '''' || replace(id_text, '''', '''''') || '''' END || ')';
    END IF;
    SELECT f.token, f.passed_at, f.passed_by INTO passed
      FROM @extschema@.advlock_fences f WHERE f.key = advlock_fence_refuse.key;
    RAISE EXCEPTION 'fence of % refused token %: token % has passed it', target, token, passed.token
        USING ERRCODE = 'LK001',
              DETAIL = format('Token %s passed it at %s (role "%s"); a token passes a fence only while no larger one has.',
                              passed.token, passed.passed_at, passed.passed_by),
              HINT = 'A newer holder has taken over this lock or lease: roll back and stop writing; take the lock again (a new token) before writing again.';
END
$fn$;

CREATE FUNCTION @extschema@.advlock_fence(key pg_catalog.int8, token pg_catalog.int8)
RETURNS void
LANGUAGE plpgsql VOLATILE
AS $fn$
BEGIN
    IF key IS NULL OR token IS NULL OR token OPERATOR(pg_catalog.<) 1 THEN
        PERFORM @extschema@.advlock_fence_check('advlock_fence', NULL, key IS NULL, token, true);
    END IF;
    INSERT INTO @extschema@.advlock_fences AS f (key, token)
         VALUES (advlock_fence.key, advlock_fence.token)
    ON CONFLICT ON CONSTRAINT advlock_fences_pkey DO UPDATE
           SET token = excluded.token, passed_at = excluded.passed_at, passed_by = excluded.passed_by
         WHERE f.token OPERATOR(pg_catalog.<=) excluded.token;
    IF NOT FOUND THEN
        PERFORM @extschema@.advlock_fence_refuse(advlock_fence.key, NULL, NULL, NULL, advlock_fence.token);
    END IF;
END
$fn$;

CREATE FUNCTION @extschema@.advlock_fence(ns pg_catalog.text, id pg_catalog.text, token pg_catalog.int8)
RETURNS void
LANGUAGE plpgsql VOLATILE
AS $fn$
BEGIN
    IF ns IS NULL OR ns OPERATOR(pg_catalog.=) '' OR id IS NULL OR token IS NULL OR token OPERATOR(pg_catalog.<) 1 THEN
        PERFORM @extschema@.advlock_fence_check('advlock_fence', ns, id IS NULL, token, false);
    END IF;
    INSERT INTO @extschema@.advlock_fences AS f (key, token, ns, id)
         VALUES (@extschema@.advlock_key(advlock_fence.ns, advlock_fence.id), advlock_fence.token,
                 advlock_fence.ns, advlock_fence.id)
    ON CONFLICT ON CONSTRAINT advlock_fences_pkey DO UPDATE
           SET token = excluded.token, passed_at = excluded.passed_at, passed_by = excluded.passed_by
         WHERE f.token OPERATOR(pg_catalog.<=) excluded.token;
    IF NOT FOUND THEN
        PERFORM @extschema@.advlock_fence_refuse(@extschema@.advlock_key(advlock_fence.ns, advlock_fence.id),
                                                 advlock_fence.ns, advlock_fence.id, NULL, advlock_fence.token);
    END IF;
END
$fn$;

CREATE FUNCTION @extschema@.advlock_fence(ns pg_catalog.text, id pg_catalog.int8, token pg_catalog.int8)
RETURNS void
LANGUAGE plpgsql VOLATILE
AS $fn$
BEGIN
    IF ns IS NULL OR ns OPERATOR(pg_catalog.=) '' OR id IS NULL OR token IS NULL OR token OPERATOR(pg_catalog.<) 1 THEN
        PERFORM @extschema@.advlock_fence_check('advlock_fence', ns, id IS NULL, token, false);
    END IF;
    INSERT INTO @extschema@.advlock_fences AS f (key, token, ns, id)
         VALUES (@extschema@.advlock_key(advlock_fence.ns, advlock_fence.id), advlock_fence.token,
                 advlock_fence.ns, advlock_fence.id::pg_catalog.text)
    ON CONFLICT ON CONSTRAINT advlock_fences_pkey DO UPDATE
           SET token = excluded.token, passed_at = excluded.passed_at, passed_by = excluded.passed_by
         WHERE f.token OPERATOR(pg_catalog.<=) excluded.token;
    IF NOT FOUND THEN
        PERFORM @extschema@.advlock_fence_refuse(@extschema@.advlock_key(advlock_fence.ns, advlock_fence.id),
                                                 advlock_fence.ns, NULL, advlock_fence.id, advlock_fence.token);
    END IF;
END
$fn$;

-- Forgets a fence (its row): the next advlock_fence on the key passes with any token. Needs
-- DELETE on advlock_fences: its owner (the role that installed advlock) and superusers have
-- it, and may grant it. Returns the token the fence had, or NULL when there was none.
CREATE FUNCTION @extschema@.advlock_fence_reset_key(key pg_catalog.int8, target pg_catalog.text)
RETURNS pg_catalog.int8
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    had bigint;
BEGIN
    IF NOT has_table_privilege('@extschema@.advlock_fences'::regclass, 'DELETE') THEN
        RAISE EXCEPTION 'permission denied to reset the fence of %', target
            USING ERRCODE = 'insufficient_privilege',
                  DETAIL = format('advlock_fence_reset needs DELETE on advlock_fences, which role %s does not have.',
                                  quote_ident(current_user)),
                  HINT = format('Ask the owner of advlock_fences (role %s) or a superuser to reset it, or to run: GRANT DELETE ON advlock_fences TO %s;',
                                quote_ident((SELECT r.rolname FROM pg_class c JOIN pg_roles r ON r.oid = c.relowner
                                              WHERE c.oid = '@extschema@.advlock_fences'::regclass)),
                                quote_ident(current_user));
    END IF;
    DELETE FROM @extschema@.advlock_fences f WHERE f.key = advlock_fence_reset_key.key RETURNING f.token INTO had;
    RETURN had;
END
$fn$;

CREATE FUNCTION @extschema@.advlock_fence_reset(key pg_catalog.int8)
RETURNS pg_catalog.int8
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
    IF key IS NULL THEN
        PERFORM @extschema@.advlock_fence_check('advlock_fence_reset', NULL, true, NULL, true);
    END IF;
    RETURN @extschema@.advlock_fence_reset_key(key, 'key ' || key);
END
$fn$;

CREATE FUNCTION @extschema@.advlock_fence_reset(ns pg_catalog.text, id pg_catalog.text)
RETURNS pg_catalog.int8
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
    IF ns IS NULL OR ns = '' OR id IS NULL THEN
        PERFORM @extschema@.advlock_fence_check('advlock_fence_reset', ns, id IS NULL, NULL, false);
    END IF;
    RETURN @extschema@.advlock_fence_reset_key(@extschema@.advlock_key(ns, id),
        'key ' || @extschema@.advlock_key(ns, id) || ' = advlock_key(''' || replace(ns, '''', '''''') || ''', '''
        || replace(id, '''', '''''') || ''')');
END
$fn$;

CREATE FUNCTION @extschema@.advlock_fence_reset(ns pg_catalog.text, id pg_catalog.int8)
RETURNS pg_catalog.int8
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
    IF ns IS NULL OR ns = '' OR id IS NULL THEN
        PERFORM @extschema@.advlock_fence_check('advlock_fence_reset', ns, id IS NULL, NULL, false);
    END IF;
    RETURN @extschema@.advlock_fence_reset_key(@extschema@.advlock_key(ns, id),
        'key ' || @extschema@.advlock_key(ns, id) || ' = advlock_key(''' || replace(ns, '''', '''''') || ''', '
        || id || ')');
END
$fn$;

-- The table's guard (BEFORE UPDATE, sql/fence_table.sql), fired only when an UPDATE would
-- lower a token, move a row to another key, or write another role or time than the caller's:
-- what advlock_fence never does, but a role with UPDATE on the table could try.
CREATE FUNCTION @extschema@.advlock_fence_guard()
RETURNS trigger
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
    IF NEW.token < OLD.token THEN
        RAISE EXCEPTION 'fence of key % refused token %: token % has passed it', OLD.key, NEW.token, OLD.token
            USING ERRCODE = 'LK001',
                  DETAIL = 'The token of a fence only grows.',
                  HINT = 'advlock_fence_reset forgets a fence (it needs DELETE on advlock_fences).';
    END IF;
    RAISE EXCEPTION 'the fence of key % may only get a larger token, passed by the current role at the statement''s start', OLD.key
        USING ERRCODE = 'insufficient_privilege',
              DETAIL = format('The update would write key %s, passed_by %s, passed_at %s.', NEW.key,
                              quote_literal(NEW.passed_by), NEW.passed_at),
              HINT = 'Pass a fence with advlock_fence, which records who passed it and when.';
END
$fn$;
