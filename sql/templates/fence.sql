-- The source of sql/fence.sql, which scripts/build_edition.sh writes out: edit this file, then rebuild.
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
--
-- The PL/pgSQL advlock_fence is named by a placeholder below (build_edition.py's TEMPLATE_NAMES):
-- in the SQL edition advlock_fence itself; in the extension advlock_fence_checked, behind the Rust
-- advlock_fence (src/fences.rs), which runs the same upsert through a kept plan and calls this
-- function for everything but a pass -- a missing or non-positive argument, a refusal -- so
-- every message is raised here, in both. (The PL/pgSQL alone cost 1.5x the single-row upsert it
-- replaces, bench case 11.)

-- The bare key's form is written out; the (ns, id text) and (ns, id bigint) forms are one
-- template, which scripts/build_edition.sh writes out once per form into sql/fence.sql (the form
-- templates of scripts/build_edition.py, as in edition/src). The checks run only when an argument
-- is missing or out of range, the refusal only when the upsert changed nothing.
CREATE FUNCTION @extschema@.@fence@(key pg_catalog.int8, token pg_catalog.int8)
RETURNS void
LANGUAGE plpgsql VOLATILE
AS $fn$
DECLARE
    passed record;
BEGIN
    IF key IS NULL OR token IS NULL OR token OPERATOR(pg_catalog.<) 1 THEN
        IF key IS NULL THEN
            RAISE EXCEPTION 'argument "key" of advlock_fence must not be null'
                USING ERRCODE = 'null_value_not_allowed', HINT = 'A NULL key would fence nothing: pass a value for every part of the key.';
        ELSIF token IS NULL THEN
            RAISE EXCEPTION 'argument "token" of advlock_fence must not be null'
                USING ERRCODE = 'null_value_not_allowed', HINT = 'Pass this writer''s fencing token: the lease id advlock_lease returned, or the token of advlock_try_with_token.';
        ELSE
            RAISE EXCEPTION 'argument "token" of advlock_fence must be positive: %', token
                USING ERRCODE = 'invalid_parameter_value', HINT = 'advlock''s fencing tokens (lease ids, advlock_try_with_token) are positive; so must be a token of your own.';
        END IF;
    END IF;
    INSERT INTO @extschema@.advlock_fences AS f (key, token)
         VALUES (@fence@.key, @fence@.token)
    ON CONFLICT ON CONSTRAINT advlock_fences_pkey DO UPDATE
           SET token = excluded.token, passed_at = excluded.passed_at, passed_by = excluded.passed_by
         WHERE f.token OPERATOR(pg_catalog.<=) excluded.token;
    IF NOT FOUND THEN
        -- Refused: the row is locked by the upsert above (ON CONFLICT DO UPDATE locks the
        -- conflicting row even when its WHERE is false), so this reads the token that refused it.
        SELECT f.token, f.passed_at, f.passed_by INTO passed
          FROM @extschema@.advlock_fences f WHERE f.key OPERATOR(pg_catalog.=) @fence@.key;
        RAISE EXCEPTION 'fence of % refused token %: token % has passed it',
                        'key ' OPERATOR(pg_catalog.||) @fence@.key,
                        @fence@.token, passed.token
            USING ERRCODE = 'LK001',
                  DETAIL = pg_catalog.format('Token %s passed it at %s (role "%s"); a token passes a fence only while no larger one has.',
                                             passed.token, passed.passed_at, passed.passed_by),
                  HINT = 'A newer holder has taken over this lock or lease: roll back and stop writing; take the lock again (a new token) before writing again.';
    END IF;
END
$fn$;

-- @forms id: text, int
CREATE FUNCTION @extschema@.@fence@(ns pg_catalog.text, id @id_type@, token pg_catalog.int8)
RETURNS void
LANGUAGE plpgsql VOLATILE
AS $fn$
DECLARE
    passed record;
BEGIN
    IF ns IS NULL OR ns OPERATOR(pg_catalog.=) '' OR id IS NULL OR token IS NULL OR token OPERATOR(pg_catalog.<) 1 THEN
        IF ns IS NULL THEN
            RAISE EXCEPTION 'argument "ns" of advlock_fence must not be null'
                USING ERRCODE = 'null_value_not_allowed', HINT = 'A NULL key would fence nothing: pass a value for every part of the key.';
        ELSIF ns OPERATOR(pg_catalog.=) '' THEN
            RAISE EXCEPTION 'argument "ns" of advlock_fence must not be empty'
                USING ERRCODE = 'invalid_parameter_value', HINT = 'Name the feature the lock belongs to, e.g. advlock_key(''billing'', 42): the namespace keeps features from colliding.';
        ELSIF id IS NULL THEN
            RAISE EXCEPTION 'argument "id" of advlock_fence must not be null'
                USING ERRCODE = 'null_value_not_allowed', HINT = 'A NULL key would fence nothing: pass a value for every part of the key.';
        ELSIF token IS NULL THEN
            RAISE EXCEPTION 'argument "token" of advlock_fence must not be null'
                USING ERRCODE = 'null_value_not_allowed', HINT = 'Pass this writer''s fencing token: the lease id advlock_lease returned, or the token of advlock_try_with_token.';
        ELSE
            RAISE EXCEPTION 'argument "token" of advlock_fence must be positive: %', token
                USING ERRCODE = 'invalid_parameter_value', HINT = 'advlock''s fencing tokens (lease ids, advlock_try_with_token) are positive; so must be a token of your own.';
        END IF;
    END IF;
    INSERT INTO @extschema@.advlock_fences AS f (key, token, ns, id)
         VALUES (@extschema@.advlock_key(@fence@.ns, @fence@.id), @fence@.token, @fence@.ns, @fence@.id)  -- @only text
         VALUES (@extschema@.advlock_key(@fence@.ns, @fence@.id), @fence@.token, @fence@.ns, @fence@.id::pg_catalog.text)  -- @only int
    ON CONFLICT ON CONSTRAINT advlock_fences_pkey DO UPDATE
           SET token = excluded.token, passed_at = excluded.passed_at, passed_by = excluded.passed_by
         WHERE f.token OPERATOR(pg_catalog.<=) excluded.token;
    IF NOT FOUND THEN
        -- Refused: the row is locked by the upsert above (ON CONFLICT DO UPDATE locks the
        -- conflicting row even when its WHERE is false), so this reads the token that refused it.
        SELECT f.token, f.passed_at, f.passed_by INTO passed
          FROM @extschema@.advlock_fences f WHERE f.key OPERATOR(pg_catalog.=) @extschema@.advlock_key(@fence@.ns, @fence@.id);
        RAISE EXCEPTION 'fence of % refused token %: token % has passed it',
                        'key ' OPERATOR(pg_catalog.||) @extschema@.advlock_key(@fence@.ns, @fence@.id) OPERATOR(pg_catalog.||) ' = advlock_key(''' OPERATOR(pg_catalog.||) pg_catalog.replace(@fence@.ns, '''', '''''')
                      OPERATOR(pg_catalog.||) ''', ' OPERATOR(pg_catalog.||) '''' OPERATOR(pg_catalog.||) pg_catalog.replace(@fence@.id, '''', '''''') OPERATOR(pg_catalog.||) '''' OPERATOR(pg_catalog.||) ')',  -- @only text
                      OPERATOR(pg_catalog.||) ''', ' OPERATOR(pg_catalog.||) @fence@.id::pg_catalog.text OPERATOR(pg_catalog.||) ')',  -- @only int
                        @fence@.token, passed.token
            USING ERRCODE = 'LK001',
                  DETAIL = pg_catalog.format('Token %s passed it at %s (role "%s"); a token passes a fence only while no larger one has.',
                                             passed.token, passed.passed_at, passed.passed_by),
                  HINT = 'A newer holder has taken over this lock or lease: roll back and stop writing; take the lock again (a new token) before writing again.';
    END IF;
END
$fn$;
-- @end forms

-- Forgets a fence (its row): the next advlock_fence on the key passes with any token. Needs
-- DELETE on advlock_fences: its owner (the role that installed advlock) and superusers have
-- it, and may grant it. Returns the token the fence had, or NULL when there was none.
CREATE FUNCTION @extschema@.advlock_fence_reset(key pg_catalog.int8)
RETURNS pg_catalog.int8
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    had bigint;
    k bigint;
BEGIN
    IF key IS NULL THEN
        RAISE EXCEPTION 'argument "key" of advlock_fence_reset must not be null'
                USING ERRCODE = 'null_value_not_allowed', HINT = 'A NULL key would reset nothing: pass a value for every part of the key.';
    END IF;
    k := key;
    IF NOT has_table_privilege('@extschema@.advlock_fences'::regclass, 'DELETE') THEN
        RAISE EXCEPTION 'permission denied to reset the fence of %', 'key ' || k
            USING ERRCODE = 'insufficient_privilege',
                  DETAIL = format('advlock_fence_reset needs DELETE on advlock_fences, which role %s does not have.',
                                  quote_ident(current_user)),
                  HINT = format('Ask the owner of advlock_fences (role %s) or a superuser to reset it, or to run: GRANT DELETE ON advlock_fences TO %s;',
                                quote_ident((SELECT r.rolname FROM pg_class c JOIN pg_roles r ON r.oid = c.relowner
                                              WHERE c.oid = '@extschema@.advlock_fences'::regclass)),
                                quote_ident(current_user));
    END IF;
    DELETE FROM @extschema@.advlock_fences f WHERE f.key = k RETURNING f.token INTO had;
    RETURN had;
END
$fn$;

-- @forms id: text, int
CREATE FUNCTION @extschema@.advlock_fence_reset(ns pg_catalog.text, id @id_type@)
RETURNS pg_catalog.int8
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    had bigint;
    k bigint;
BEGIN
    IF ns IS NULL THEN
        RAISE EXCEPTION 'argument "ns" of advlock_fence_reset must not be null'
                USING ERRCODE = 'null_value_not_allowed', HINT = 'A NULL key would reset nothing: pass a value for every part of the key.';
    ELSIF ns = '' THEN
        RAISE EXCEPTION 'argument "ns" of advlock_fence_reset must not be empty'
                USING ERRCODE = 'invalid_parameter_value', HINT = 'Name the feature the lock belongs to, e.g. advlock_key(''billing'', 42): the namespace keeps features from colliding.';
    ELSIF id IS NULL THEN
        RAISE EXCEPTION 'argument "id" of advlock_fence_reset must not be null'
                USING ERRCODE = 'null_value_not_allowed', HINT = 'A NULL key would reset nothing: pass a value for every part of the key.';
    END IF;
    k := @extschema@.advlock_key(ns, id);
    IF NOT has_table_privilege('@extschema@.advlock_fences'::regclass, 'DELETE') THEN
        RAISE EXCEPTION 'permission denied to reset the fence of %', 'key ' || k || ' = advlock_key(''' || replace(ns, '''', '''''') || ''', ' || '''' || replace(id, '''', '''''') || '''' || ')'  -- @only text
        RAISE EXCEPTION 'permission denied to reset the fence of %', 'key ' || k || ' = advlock_key(''' || replace(ns, '''', '''''') || ''', ' || id::text || ')'  -- @only int
            USING ERRCODE = 'insufficient_privilege',
                  DETAIL = format('advlock_fence_reset needs DELETE on advlock_fences, which role %s does not have.',
                                  quote_ident(current_user)),
                  HINT = format('Ask the owner of advlock_fences (role %s) or a superuser to reset it, or to run: GRANT DELETE ON advlock_fences TO %s;',
                                quote_ident((SELECT r.rolname FROM pg_class c JOIN pg_roles r ON r.oid = c.relowner
                                              WHERE c.oid = '@extschema@.advlock_fences'::regclass)),
                                quote_ident(current_user));
    END IF;
    DELETE FROM @extschema@.advlock_fences f WHERE f.key = k RETURNING f.token INTO had;
    RETURN had;
END
$fn$;
-- @end forms

-- The table's guard (BEFORE UPDATE, sql/fence_table.sql), fired only when an UPDATE would
-- lower a token or move a row to another key: what advlock_fence never does, but a role with
-- UPDATE on the table could try. Forgetting a fence is a DELETE (advlock_fence_reset). The SQL
-- edition's trigger calls it under a WHEN clause; the extension's calls the Rust
-- advlock_fence_update_check (src/fences.rs), which checks the same two conditions without a
-- WHEN (PostgreSQL parses and plans a WHEN anew in every statement) and calls this function
-- when one of them holds.
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
    RAISE EXCEPTION 'the fence of key % cannot move to key %', OLD.key, NEW.key
        USING ERRCODE = 'insufficient_privilege',
              HINT = 'Reset the fence (advlock_fence_reset) and pass the other key''s with advlock_fence.';
END
$fn$;
