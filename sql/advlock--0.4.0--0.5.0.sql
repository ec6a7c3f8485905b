-- advlock 0.4.0 -> 0.5.0. The objects of a fresh 0.5.0 install, reached from 0.4.0
-- (pg_test/upgrade compares the two catalog by catalog).
--
-- New: fences in the database (docs/fences.md): advlock_fence and advlock_fence_reset (three key
-- forms each, PL/pgSQL of sql/fence.sql), the table advlock_fences with its guard trigger and
-- its rows in pg_dump (sql/fence_table.sql); advlock_lease_check (sql/lease_check.sql) and its
-- feed advlock_lease_expiry.
-- The generated section and the comments after it are written by scripts/upgrade_sections.py 0.5.0.

-- advlock_metrics gains idle_terminations (advlock.idle_session_lock_timeout): its feed returns
-- one more column, so the view and its function are made anew in the generated section.
DROP VIEW @extschema@.advlock_metrics;
DROP FUNCTION @extschema@.advlock_metrics();

-- <generated: new objects>
-- advlock::election::advlock_campaign
CREATE  FUNCTION "advlock_campaign"(
	"key" bigint, /* Option < i64 > */
	"ttl_ms" INT, /* Option < i32 > */
	"timeout_ms" INT, /* Option < i32 > */
	"candidate" text /* Option < ServerText > */
) RETURNS bigint /* Option < i64 > */
VOLATILE PARALLEL UNSAFE 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'campaign_key_wrapper';

-- advlock::election::advlock_campaign
CREATE  FUNCTION "advlock_campaign"(
	"ns" text, /* Option < ServerText > */
	"id" bigint, /* Option < i64 > */
	"ttl_ms" INT, /* Option < i32 > */
	"timeout_ms" INT, /* Option < i32 > */
	"candidate" text /* Option < ServerText > */
) RETURNS bigint /* Option < i64 > */
VOLATILE PARALLEL UNSAFE 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'campaign_int_wrapper';

-- advlock::election::advlock_campaign
CREATE  FUNCTION "advlock_campaign"(
	"ns" text, /* Option < ServerText > */
	"id" text, /* Option < ServerText > */
	"ttl_ms" INT, /* Option < i32 > */
	"timeout_ms" INT, /* Option < i32 > */
	"candidate" text /* Option < ServerText > */
) RETURNS bigint /* Option < i64 > */
VOLATILE PARALLEL UNSAFE 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'campaign_text_wrapper';

-- advlock::election::advlock_leader
CREATE  FUNCTION "advlock_leader"(
	"key" bigint /* Option < i64 > */
) RETURNS TABLE (
	"term" bigint,  /* i64 */
	"candidate" text,  /* Option < ServerTextOut > */
	"since" timestamp with time zone,  /* Option < TimestampWithTimeZone > */
	"expires_at" timestamp with time zone,  /* Option < TimestampWithTimeZone > */
	"pid" INT,  /* i32 */
	"application_name" text  /* Option < ServerTextOut > */
)
VOLATILE PARALLEL RESTRICTED 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'leader_key_wrapper';

-- advlock::election::advlock_leader
CREATE  FUNCTION "advlock_leader"(
	"ns" text, /* Option < ServerText > */
	"id" bigint /* Option < i64 > */
) RETURNS TABLE (
	"term" bigint,  /* i64 */
	"candidate" text,  /* Option < ServerTextOut > */
	"since" timestamp with time zone,  /* Option < TimestampWithTimeZone > */
	"expires_at" timestamp with time zone,  /* Option < TimestampWithTimeZone > */
	"pid" INT,  /* i32 */
	"application_name" text  /* Option < ServerTextOut > */
)
VOLATILE PARALLEL RESTRICTED 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'leader_int_wrapper';

-- advlock::election::advlock_leader
CREATE  FUNCTION "advlock_leader"(
	"ns" text, /* Option < ServerText > */
	"id" text /* Option < ServerText > */
) RETURNS TABLE (
	"term" bigint,  /* i64 */
	"candidate" text,  /* Option < ServerTextOut > */
	"since" timestamp with time zone,  /* Option < TimestampWithTimeZone > */
	"expires_at" timestamp with time zone,  /* Option < TimestampWithTimeZone > */
	"pid" INT,  /* i32 */
	"application_name" text  /* Option < ServerTextOut > */
)
VOLATILE PARALLEL RESTRICTED 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'leader_text_wrapper';

-- advlock::leases::advlock_lease_candidates
CREATE  FUNCTION "advlock_lease_candidates"() RETURNS TABLE (
	"lease" bigint,  /* i64 */
	"candidate" text  /* ServerTextOut */
)
STRICT VOLATILE PARALLEL RESTRICTED
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'advlock_lease_candidates_wrapper';

-- advlock::leases::advlock_lease_expiry
CREATE  FUNCTION "advlock_lease_expiry"(
	"lease" bigint, /* Option < i64 > */
	"caller" text DEFAULT 'advlock_lease_expiry' /* Option < ServerText > */
) RETURNS timestamp with time zone /* Option < TimestampWithTimeZone > */
VOLATILE PARALLEL RESTRICTED
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'advlock_lease_expiry_wrapper';

-- advlock::metrics::advlock_metrics
CREATE  FUNCTION "advlock_metrics"() RETURNS TABLE (
	"ns" text,  /* Option < ServerTextOut > */
	"holders" INT,  /* i32 */
	"locks" INT,  /* i32 */
	"leaked_holders" INT,  /* i32 */
	"leaked_locks" INT,  /* i32 */
	"idle_in_transaction_holders" INT,  /* i32 */
	"hidden_holders" INT,  /* i32 */
	"waiters" INT,  /* i32 */
	"oldest_wait_seconds" double precision,  /* Option < f64 > */
	"oldest_hold_seconds" double precision,  /* Option < f64 > */
	"acquisitions" bigint,  /* Option < i64 > */
	"immediate" bigint,  /* Option < i64 > */
	"waits" bigint,  /* Option < i64 > */
	"timeouts" bigint,  /* Option < i64 > */
	"wait_seconds" double precision,  /* Option < f64 > */
	"preloaded" bool,  /* bool */
	"idle_terminations" bigint  /* Option < i64 > */
)
STRICT VOLATILE PARALLEL RESTRICTED
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'advlock_metrics_wrapper';

-- advlock::election::advlock_observe_leader
CREATE  FUNCTION "advlock_observe_leader"(
	"key" bigint, /* Option < i64 > */
	"timeout_ms" INT, /* Option < i32 > */
	"known_term" bigint DEFAULT NULL /* Option < i64 > */
) RETURNS TABLE (
	"changed" bool,  /* bool */
	"term" bigint,  /* Option < i64 > */
	"candidate" text,  /* Option < ServerTextOut > */
	"since" timestamp with time zone,  /* Option < TimestampWithTimeZone > */
	"expires_at" timestamp with time zone,  /* Option < TimestampWithTimeZone > */
	"pid" INT,  /* Option < i32 > */
	"application_name" text  /* Option < ServerTextOut > */
)
VOLATILE PARALLEL UNSAFE 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'observe_key_wrapper';

-- advlock::election::advlock_observe_leader
CREATE  FUNCTION "advlock_observe_leader"(
	"ns" text, /* Option < ServerText > */
	"id" bigint, /* Option < i64 > */
	"timeout_ms" INT, /* Option < i32 > */
	"known_term" bigint DEFAULT NULL /* Option < i64 > */
) RETURNS TABLE (
	"changed" bool,  /* bool */
	"term" bigint,  /* Option < i64 > */
	"candidate" text,  /* Option < ServerTextOut > */
	"since" timestamp with time zone,  /* Option < TimestampWithTimeZone > */
	"expires_at" timestamp with time zone,  /* Option < TimestampWithTimeZone > */
	"pid" INT,  /* Option < i32 > */
	"application_name" text  /* Option < ServerTextOut > */
)
VOLATILE PARALLEL UNSAFE 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'observe_int_wrapper';

-- advlock::election::advlock_observe_leader
CREATE  FUNCTION "advlock_observe_leader"(
	"ns" text, /* Option < ServerText > */
	"id" text, /* Option < ServerText > */
	"timeout_ms" INT, /* Option < i32 > */
	"known_term" bigint DEFAULT NULL /* Option < i64 > */
) RETURNS TABLE (
	"changed" bool,  /* bool */
	"term" bigint,  /* Option < i64 > */
	"candidate" text,  /* Option < ServerTextOut > */
	"since" timestamp with time zone,  /* Option < TimestampWithTimeZone > */
	"expires_at" timestamp with time zone,  /* Option < TimestampWithTimeZone > */
	"pid" INT,  /* Option < i32 > */
	"application_name" text  /* Option < ServerTextOut > */
)
VOLATILE PARALLEL UNSAFE 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'observe_text_wrapper';

-- advlock::election::advlock_resign
CREATE  FUNCTION "advlock_resign"(
	"term" bigint /* Option < i64 > */
) RETURNS bool /* bool */
VOLATILE PARALLEL UNSAFE 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'resign_wrapper';

-- advlock::leases::advlock_term_stats
CREATE  FUNCTION "advlock_term_stats"() RETURNS TABLE (
	"terms_started" bigint,  /* i64 */
	"terms_expired" bigint,  /* i64 */
	"terms_resigned" bigint  /* i64 */
)
STRICT VOLATILE PARALLEL RESTRICTED
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'advlock_term_stats_wrapper';

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

-- The three forms share one body, written out for each: the checks run only when an argument
-- is missing or out of range, the refusal only when the upsert changed nothing.
CREATE FUNCTION @extschema@.advlock_fence(key pg_catalog.int8, token pg_catalog.int8)
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
         VALUES (advlock_fence.key, advlock_fence.token)
    ON CONFLICT ON CONSTRAINT advlock_fences_pkey DO UPDATE
           SET token = excluded.token, passed_at = excluded.passed_at, passed_by = excluded.passed_by
         WHERE f.token OPERATOR(pg_catalog.<=) excluded.token;
    IF NOT FOUND THEN
        -- Refused: the row is locked by the upsert above (ON CONFLICT DO UPDATE locks the
        -- conflicting row even when its WHERE is false), so this reads the token that refused it.
        SELECT f.token, f.passed_at, f.passed_by INTO passed
          FROM @extschema@.advlock_fences f WHERE f.key OPERATOR(pg_catalog.=) advlock_fence.key;
        RAISE EXCEPTION 'fence of % refused token %: token % has passed it',
                        'key ' OPERATOR(pg_catalog.||) advlock_fence.key,
                        advlock_fence.token, passed.token
            USING ERRCODE = 'LK001',
                  DETAIL = pg_catalog.format('Token %s passed it at %s (role "%s"); a token passes a fence only while no larger one has.',
                                             passed.token, passed.passed_at, passed.passed_by),
                  HINT = 'A newer holder has taken over this lock or lease: roll back and stop writing; take the lock again (a new token) before writing again.';
    END IF;
END
$fn$;

CREATE FUNCTION @extschema@.advlock_fence(ns pg_catalog.text, id pg_catalog.text, token pg_catalog.int8)
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
         VALUES (@extschema@.advlock_key(advlock_fence.ns, advlock_fence.id), advlock_fence.token, advlock_fence.ns, advlock_fence.id)
    ON CONFLICT ON CONSTRAINT advlock_fences_pkey DO UPDATE
           SET token = excluded.token, passed_at = excluded.passed_at, passed_by = excluded.passed_by
         WHERE f.token OPERATOR(pg_catalog.<=) excluded.token;
    IF NOT FOUND THEN
        -- Refused: the row is locked by the upsert above (ON CONFLICT DO UPDATE locks the
        -- conflicting row even when its WHERE is false), so this reads the token that refused it.
        SELECT f.token, f.passed_at, f.passed_by INTO passed
          FROM @extschema@.advlock_fences f WHERE f.key OPERATOR(pg_catalog.=) @extschema@.advlock_key(advlock_fence.ns, advlock_fence.id);
        RAISE EXCEPTION 'fence of % refused token %: token % has passed it',
                        'key ' OPERATOR(pg_catalog.||) @extschema@.advlock_key(advlock_fence.ns, advlock_fence.id) OPERATOR(pg_catalog.||) ' = advlock_key(''' OPERATOR(pg_catalog.||) pg_catalog.replace(advlock_fence.ns, '''', '''''')
                      OPERATOR(pg_catalog.||) ''', ' OPERATOR(pg_catalog.||) '''' OPERATOR(pg_catalog.||) pg_catalog.replace(advlock_fence.id, '''', '''''') OPERATOR(pg_catalog.||) '''' OPERATOR(pg_catalog.||) ')',
                        advlock_fence.token, passed.token
            USING ERRCODE = 'LK001',
                  DETAIL = pg_catalog.format('Token %s passed it at %s (role "%s"); a token passes a fence only while no larger one has.',
                                             passed.token, passed.passed_at, passed.passed_by),
                  HINT = 'A newer holder has taken over this lock or lease: roll back and stop writing; take the lock again (a new token) before writing again.';
    END IF;
END
$fn$;

CREATE FUNCTION @extschema@.advlock_fence(ns pg_catalog.text, id pg_catalog.int8, token pg_catalog.int8)
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
         VALUES (@extschema@.advlock_key(advlock_fence.ns, advlock_fence.id), advlock_fence.token, advlock_fence.ns, advlock_fence.id::pg_catalog.text)
    ON CONFLICT ON CONSTRAINT advlock_fences_pkey DO UPDATE
           SET token = excluded.token, passed_at = excluded.passed_at, passed_by = excluded.passed_by
         WHERE f.token OPERATOR(pg_catalog.<=) excluded.token;
    IF NOT FOUND THEN
        -- Refused: the row is locked by the upsert above (ON CONFLICT DO UPDATE locks the
        -- conflicting row even when its WHERE is false), so this reads the token that refused it.
        SELECT f.token, f.passed_at, f.passed_by INTO passed
          FROM @extschema@.advlock_fences f WHERE f.key OPERATOR(pg_catalog.=) @extschema@.advlock_key(advlock_fence.ns, advlock_fence.id);
        RAISE EXCEPTION 'fence of % refused token %: token % has passed it',
                        'key ' OPERATOR(pg_catalog.||) @extschema@.advlock_key(advlock_fence.ns, advlock_fence.id) OPERATOR(pg_catalog.||) ' = advlock_key(''' OPERATOR(pg_catalog.||) pg_catalog.replace(advlock_fence.ns, '''', '''''')
                      OPERATOR(pg_catalog.||) ''', ' OPERATOR(pg_catalog.||) advlock_fence.id::pg_catalog.text OPERATOR(pg_catalog.||) ')',
                        advlock_fence.token, passed.token
            USING ERRCODE = 'LK001',
                  DETAIL = pg_catalog.format('Token %s passed it at %s (role "%s"); a token passes a fence only while no larger one has.',
                                             passed.token, passed.passed_at, passed.passed_by),
                  HINT = 'A newer holder has taken over this lock or lease: roll back and stop writing; take the lock again (a new token) before writing again.';
    END IF;
END
$fn$;

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

CREATE FUNCTION @extschema@.advlock_fence_reset(ns pg_catalog.text, id pg_catalog.text)
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
        RAISE EXCEPTION 'permission denied to reset the fence of %', 'key ' || k || ' = advlock_key(''' || replace(ns, '''', '''''') || ''', ' || '''' || replace(id, '''', '''''') || '''' || ')'
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

CREATE FUNCTION @extschema@.advlock_fence_reset(ns pg_catalog.text, id pg_catalog.int8)
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
        RAISE EXCEPTION 'permission denied to reset the fence of %', 'key ' || k || ' = advlock_key(''' || replace(ns, '''', '''''') || ''', ' || id::text || ')'
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

-- The table's guard (BEFORE UPDATE, sql/fence_table.sql), fired only when an UPDATE would
-- lower a token or move a row to another key: what advlock_fence never does, but a role with
-- UPDATE on the table could try. Forgetting a fence is a DELETE (advlock_fence_reset).
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

-- advlock_fences: one row per fence (docs/fences.md), written by advlock_fence (sql/fence.sql).
-- The extension's; the SQL edition creates the same table in edition/src/fence_table.sql.
--
-- Who may do what, by the table's own privileges (no SECURITY DEFINER):
--  * pass a fence (advlock_fence): INSERT on key, token, ns, id and UPDATE on token, passed_at,
--    passed_by -- granted to PUBLIC, as every advlock function is; REVOKE them and grant them to
--    the writer roles to restrict it. passed_at and passed_by are filled by their defaults (the
--    statement's start, the current role): PUBLIC cannot insert other values (a role that
--    updates the table by hand can write others there: they are information, not the fence).
--    The guard trigger refuses an update that lowers a token or changes the key: that is a
--    reset, for those who may reset. (It checks nothing else: each condition of its WHEN is
--    evaluated on every pass of every fence -- comparing passed_by with the current role alone
--    cost a third of the upsert in bench case 11.)
--  * reset a fence (advlock_fence_reset): DELETE, which only the owner has -- the role that ran
--    CREATE EXTENSION (@extowner@: in a trusted install the database owner, not the bootstrap
--    superuser the script runs as) -- and superusers; they may grant it;
--  * read: everyone (SELECT to PUBLIC), like advlock_holders.
-- Its rows are part of pg_dump's output (pg_extension_config_dump), so a restored database
-- keeps its fences (and advlock_token_seq its position); a restore inserts them as the owner,
-- which has every column.

CREATE TABLE @extschema@.advlock_fences (
    key       pg_catalog.int8 NOT NULL,
    token     pg_catalog.int8 NOT NULL,
    ns        pg_catalog.text,
    id        pg_catalog.text,
    passed_at pg_catalog.timestamptz NOT NULL DEFAULT pg_catalog.statement_timestamp(),
    passed_by pg_catalog.text NOT NULL DEFAULT CURRENT_USER,
    CONSTRAINT advlock_fences_pkey PRIMARY KEY (key)
);

CREATE TRIGGER advlock_fences_guard BEFORE UPDATE ON @extschema@.advlock_fences FOR EACH ROW
    WHEN (NEW.token OPERATOR(pg_catalog.<) OLD.token OR NEW.key OPERATOR(pg_catalog.<>) OLD.key)
    EXECUTE FUNCTION @extschema@.advlock_fence_guard();

ALTER TABLE @extschema@.advlock_fences OWNER TO @extowner@;
GRANT SELECT, INSERT (key, token, ns, id), UPDATE (token, passed_at, passed_by)
   ON @extschema@.advlock_fences TO PUBLIC;
SELECT pg_catalog.pg_extension_config_dump('@extschema@.advlock_fences', '');

-- advlock_lease_check: raises LK002 when a lease is no longer held, for a writer to call in its
-- write transaction (docs/fences.md); returns the lease's expiry otherwise. PL/pgSQL around the
-- Rust feed advlock_lease_expiry (src/leases.rs), for the SQLSTATE of advlock's own class LK,
-- which pgrx cannot raise. Extension only (the SQL edition has no leases). Same conventions as
-- holders.sql: schema-qualified, no SECURITY DEFINER.

CREATE FUNCTION @extschema@.advlock_lease_check(lease pg_catalog.int8)
RETURNS pg_catalog.timestamptz
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    expires timestamptz;
BEGIN
    IF lease IS NULL THEN
        RAISE EXCEPTION 'argument "lease" of advlock_lease_check must not be null'
            USING ERRCODE = 'null_value_not_allowed',
                  HINT = 'Pass the lease id advlock_lease returned.';
    END IF;
    expires := @extschema@.advlock_lease_expiry(lease, 'advlock_lease_check');
    IF expires IS NULL THEN
        RAISE EXCEPTION 'lease % is not held', lease
            USING ERRCODE = 'LK002',
                  DETAIL = 'No lease with this id is held in this database: it was released, or it expired and was taken over, or a restart ended it (or it was never taken here).',
                  HINT = 'Roll back and stop writing: another holder may have the key now. Take a new lease to go on.';
    END IF;
    IF expires <= clock_timestamp() THEN
        RAISE EXCEPTION 'lease % is not held', lease
            USING ERRCODE = 'LK002',
                  DETAIL = format('It expired at %s: it was not renewed within its TTL.', expires),
                  HINT = 'Roll back and stop writing: another holder may have the key now. Take a new lease to go on.';
    END IF;
    RETURN expires;
END
$fn$;

-- advlock_metrics: what an exporter scrapes every 15-60 s (monitoring/postgres_exporter).
-- Computed in Rust (src/metrics.rs): one row per namespace plus the unknown-namespace row.
CREATE VIEW @extschema@.advlock_metrics AS
SELECT m.ns, m.holders, m.locks, m.leaked_holders, m.leaked_locks, m.idle_in_transaction_holders,
       m.hidden_holders, m.waiters, m.oldest_wait_seconds, m.oldest_hold_seconds,
       m.acquisitions, m.immediate, m.waits, m.timeouts, m.wait_seconds, m.preloaded,
       m.idle_terminations
  FROM @extschema@.advlock_metrics() m;

-- Readable by everyone, like advlock_holders; what it counts as hidden depends on the caller.
GRANT SELECT ON @extschema@.advlock_metrics TO PUBLIC;

COMMENT ON VIEW @extschema@.advlock_metrics IS
  'advlock: gauges per namespace (holders, leaked and idle-in-transaction holders, hidden holders, waiters, oldest wait and hold) and, preloaded, the acquisition counters; for exporters';

-- requires:
--   snapshot_free_wait


-- Leader election's snapshot-free waits (src/election.rs), C functions declared like the above.
CREATE PROCEDURE @extschema@.advlock_wait_campaign(
    key bigint, ttl_ms integer, timeout_ms integer, candidate text, INOUT term bigint DEFAULT NULL)
  LANGUAGE c AS 'MODULE_PATHNAME', 'advlock_wait_campaign';
CREATE PROCEDURE @extschema@.advlock_wait_leader(
    key bigint, timeout_ms integer, known_term bigint DEFAULT NULL,
    INOUT term bigint DEFAULT NULL, INOUT changed boolean DEFAULT NULL, INOUT candidate text DEFAULT NULL)
  LANGUAGE c AS 'MODULE_PATHNAME', 'advlock_wait_leader';

CREATE OR REPLACE VIEW @extschema@.advlock_leases AS
SELECT e.key, e.label, e.slots, e.lease, e.granted,
       pg_catalog.pg_get_userbyid(e.role) AS role,
       e.pid, e.application_name, e.granted_at, e.renewed_at, e.expires_at, e.waiting_since,
       c.candidate
  FROM @extschema@.advlock_lease_entries() e
  LEFT JOIN @extschema@.advlock_lease_candidates() c ON c.lease = e.lease;
CREATE OR REPLACE VIEW @extschema@.advlock_lease_stats AS
SELECT s.capacity, s.held, s.waiting, s.granted, s.released, s.expired, s.renewed, s.timed_out,
       t.terms_started, t.terms_expired, t.terms_resigned
  FROM @extschema@.advlock_lease_stats() s
 CROSS JOIN @extschema@.advlock_term_stats() t;

CREATE OR REPLACE FUNCTION @extschema@.advlock_idle_holder_rows(older_than pg_catalog.interval DEFAULT NULL,
                                                      caller pg_catalog.text DEFAULT 'advlock_idle_holder_rows')
RETURNS SETOF @extschema@.advlock_holders
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    threshold interval;
    hidden_pids int4[];
    hidden int;
    idle int4[];
BEGIN
    IF caller IS NULL THEN
        RAISE EXCEPTION 'argument "caller" of advlock_idle_holder_rows must not be null'
            USING ERRCODE = 'null_value_not_allowed',
                  HINT = 'Pass the name of the function to name in messages, or omit it.';
    END IF;
    IF older_than < interval '0' THEN
        RAISE EXCEPTION 'argument "older_than" of % must not be a negative interval', caller
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'Pass how long a holder must have been idle, e.g. interval ''5 minutes'', or NULL for advlock.idle_threshold.';
    END IF;
    threshold := @extschema@.advlock_idle_threshold(older_than);
    SELECT array_agg(a.pid) INTO hidden_pids
      FROM pg_stat_activity a
     WHERE a.datname = current_database() AND a.query = '<insufficient privilege>';
    IF hidden_pids IS NOT NULL THEN
        -- Only those backends' lock lists are read.
        SELECT count(DISTINCT e.pid) INTO hidden FROM @extschema@.advlock_holder_entries(hidden_pids) e;
        IF hidden > 0 THEN
            RAISE WARNING '% cannot see the activity of % % holding advisory locks',
                caller, hidden, CASE WHEN hidden = 1 THEN 'backend' ELSE 'backends' END
                USING DETAIL = format('pg_stat_activity hides their state from role %s: idle holders among them are not listed.', current_user),
                      HINT = format('Monitoring needs pg_read_all_stats (or pg_monitor): GRANT pg_monitor TO %s;', quote_ident(current_user));
        END IF;
    END IF;
    SELECT array_agg(a.pid) INTO idle
      FROM pg_stat_activity a
     WHERE a.datname = current_database()
       AND a.state = 'idle'
       AND clock_timestamp() - a.state_change >= threshold;
    IF idle IS NULL THEN
        RETURN;
    END IF;
    -- Rechecked against the rows' own activity: the same pg_stat_activity snapshot (one per
    -- transaction).
    RETURN QUERY
        SELECT h.key, h.key1, h.key2, h.mode, h.granted, h.pid, h.application_name, h.usename,
               h.client_addr, h.backend_state, h.state_change, h.xact_start, h.query_start, h.query,
               h.idle_for, true, h.waiting_since, h.blocked_by, h.label, h.scope, h.held_since, h.token
          FROM @extschema@.advlock_holders h
         WHERE h.pid = ANY (idle)
           AND h.granted
           AND h.backend_state = 'idle'
           AND h.idle_for >= threshold
         ORDER BY h.idle_for DESC, h.pid, h.key;
END
$fn$;

COMMENT ON VIEW @extschema@.advlock_holders IS
  'advlock: advisory locks in this database, holders and waiters, with their backends';
COMMENT ON VIEW @extschema@.advlock_stats IS
  'advlock: per-namespace acquisitions, immediate grants, waits, timeouts and wait times (ms) in this database; needs shared_preload_libraries';
COMMENT ON VIEW @extschema@.advlock_stats_info IS
  'advlock: fill level of the shared label and statistics tables (all databases) and the entries dropped because they were full; needs shared_preload_libraries';
COMMENT ON VIEW @extschema@.advlock_metrics IS
  'advlock: gauges per namespace (holders, leaked and idle-in-transaction holders, hidden holders, waiters, oldest wait and hold) and, preloaded, the acquisition counters; for exporters';
COMMENT ON VIEW @extschema@.advlock_leases IS
  'advlock: one row per lease held (lease id = fencing token, role, who took or last renewed it, expires_at, the candidate of an election term) and per backend waiting for one (waiting_since) in this database; needs shared_preload_libraries';
COMMENT ON VIEW @extschema@.advlock_lease_stats IS
  'advlock: lease table use (capacity = advlock.max_leases, held, waiting) and totals since the server started, all databases: granted, released, expired (not renewed in time), renewed, timed_out waits; election terms started, expired and resigned; needs shared_preload_libraries';
COMMENT ON VIEW @extschema@.advlock_lock_table IS
  'advlock: shared lock table use per database (datname NULL: locks of no database, e.g. transaction ids): lock_entries of every type, advisory_entries among them, and the capacity max_locks_per_transaction * (max_connections + autovacuum, background and WAL sender slots + max_prepared_transactions); for exporters';
-- </generated: new objects>

-- One-line descriptions for \df+ and obj_description: every function and view of advlock has
-- one (pg_test/regress/sql/comments.sql fails when a new one lacks it). Runs last (finalize),
-- after every object exists. Each starts with "advlock:" so it is recognisable in \df+ output.

COMMENT ON FUNCTION @extschema@.advlock_key(pg_catalog.text, pg_catalog.text) IS
  'advlock: stable bigint lock key of (namespace, id), key spec v1 (SipHash-2-4 of ns || 0x00 || id in UTF-8); the same value in every client language and on every server';
COMMENT ON FUNCTION @extschema@.advlock_key(pg_catalog.text, pg_catalog.int8) IS
  'advlock: stable bigint lock key of (namespace, integer id); equals advlock_key(ns, id::text)';
COMMENT ON FUNCTION @extschema@.advlock_key(pg_catalog.text) IS
  'advlock: stable bigint lock key of a namespace alone; equals advlock_key(ns, '''')';

COMMENT ON FUNCTION @extschema@.advlock_try_with_timeout(pg_catalog.int8, pg_catalog.int4, pg_catalog.text, pg_catalog.text) IS
  'advlock: take the advisory lock on key, waiting at most timeout_ms in the lock manager''s queue; true when held, false when the wait ran out (scope xact|session, mode exclusive|shared)';
COMMENT ON FUNCTION @extschema@.advlock_try_with_timeout(pg_catalog.text, pg_catalog.text, pg_catalog.int4, pg_catalog.text, pg_catalog.text) IS
  'advlock: take the advisory lock on advlock_key(ns, id), waiting at most timeout_ms; true when held, false when the wait ran out (scope xact|session, mode exclusive|shared)';
COMMENT ON FUNCTION @extschema@.advlock_try_with_timeout(pg_catalog.text, pg_catalog.int8, pg_catalog.int4, pg_catalog.text, pg_catalog.text) IS
  'advlock: take the advisory lock on advlock_key(ns, id), waiting at most timeout_ms; true when held, false when the wait ran out (scope xact|session, mode exclusive|shared)';

COMMENT ON FUNCTION @extschema@.advlock_lock_with_timeout(pg_catalog.int8, pg_catalog.int4, pg_catalog.text, pg_catalog.text) IS
  'advlock: take the advisory lock on key, waiting at most timeout_ms; raises 55P03 naming the holder when the wait runs out';
COMMENT ON FUNCTION @extschema@.advlock_lock_with_timeout(pg_catalog.text, pg_catalog.text, pg_catalog.int4, pg_catalog.text, pg_catalog.text) IS
  'advlock: take the advisory lock on advlock_key(ns, id), waiting at most timeout_ms; raises 55P03 naming the holder when the wait runs out';
COMMENT ON FUNCTION @extschema@.advlock_lock_with_timeout(pg_catalog.text, pg_catalog.int8, pg_catalog.int4, pg_catalog.text, pg_catalog.text) IS
  'advlock: take the advisory lock on advlock_key(ns, id), waiting at most timeout_ms; raises 55P03 naming the holder when the wait runs out';

COMMENT ON FUNCTION @extschema@.advlock_unlock(pg_catalog.int8, pg_catalog.text) IS
  'advlock: release one session-scope hold of the advisory lock on key; false with a WARNING when none is held, like pg_advisory_unlock';
COMMENT ON FUNCTION @extschema@.advlock_unlock(pg_catalog.text, pg_catalog.text, pg_catalog.text) IS
  'advlock: release one session-scope hold of the advisory lock on advlock_key(ns, id); false with a WARNING when none is held';
COMMENT ON FUNCTION @extschema@.advlock_unlock(pg_catalog.text, pg_catalog.int8, pg_catalog.text) IS
  'advlock: release one session-scope hold of the advisory lock on advlock_key(ns, id); false with a WARNING when none is held';

COMMENT ON FUNCTION @extschema@.advlock_try_all_with_timeout(pg_catalog.int8[], pg_catalog.int4, pg_catalog.text, pg_catalog.text) IS
  'advlock: take the advisory locks on all keys (distinct, in ascending key order, so callers never deadlock each other) within one deadline of timeout_ms; true when every one is held, false (nothing taken by this call left held) when the deadline passed';
COMMENT ON FUNCTION @extschema@.advlock_try_all_with_timeout(pg_catalog.text, pg_catalog.text[], pg_catalog.int4, pg_catalog.text, pg_catalog.text) IS
  'advlock: take the advisory locks on all advlock_key(ns, id) for each id (distinct, in ascending key order, so callers never deadlock each other) within one deadline of timeout_ms; true when every one is held, false (nothing taken by this call left held) when the deadline passed';
COMMENT ON FUNCTION @extschema@.advlock_try_all_with_timeout(pg_catalog.text, pg_catalog.int8[], pg_catalog.int4, pg_catalog.text, pg_catalog.text) IS
  'advlock: take the advisory locks on all advlock_key(ns, id) for each id (distinct, in ascending key order, so callers never deadlock each other) within one deadline of timeout_ms; true when every one is held, false (nothing taken by this call left held) when the deadline passed';

COMMENT ON FUNCTION @extschema@.advlock_lock_all_with_timeout(pg_catalog.int8[], pg_catalog.int4, pg_catalog.text, pg_catalog.text) IS
  'advlock: take the advisory locks on all keys within one deadline of timeout_ms, or none: raises 55P03 naming the busy key and its holder';
COMMENT ON FUNCTION @extschema@.advlock_lock_all_with_timeout(pg_catalog.text, pg_catalog.text[], pg_catalog.int4, pg_catalog.text, pg_catalog.text) IS
  'advlock: take the advisory locks on all advlock_key(ns, id) for each id within one deadline of timeout_ms, or none: raises 55P03 naming the busy key and its holder';
COMMENT ON FUNCTION @extschema@.advlock_lock_all_with_timeout(pg_catalog.text, pg_catalog.int8[], pg_catalog.int4, pg_catalog.text, pg_catalog.text) IS
  'advlock: take the advisory locks on all advlock_key(ns, id) for each id within one deadline of timeout_ms, or none: raises 55P03 naming the busy key and its holder';

COMMENT ON FUNCTION @extschema@.advlock_unlock_all(pg_catalog.int8[], pg_catalog.text) IS
  'advlock: release one session-scope hold of each distinct key of keys; true when every one was held (a WARNING for each that was not)';
COMMENT ON FUNCTION @extschema@.advlock_unlock_all(pg_catalog.text, pg_catalog.text[], pg_catalog.text) IS
  'advlock: release one session-scope hold of each distinct key of advlock_key(ns, id) for each id; true when every one was held (a WARNING for each that was not)';
COMMENT ON FUNCTION @extschema@.advlock_unlock_all(pg_catalog.text, pg_catalog.int8[], pg_catalog.text) IS
  'advlock: release one session-scope hold of each distinct key of advlock_key(ns, id) for each id; true when every one was held (a WARNING for each that was not)';

COMMENT ON FUNCTION @extschema@.advlock_try_with_token(pg_catalog.int8, pg_catalog.int4, pg_catalog.text, pg_catalog.text) IS
  'advlock: take the advisory lock on key like advlock_try_with_timeout (default scope session) and return a fencing token, larger than every token issued before in this database, across restarts, crashes and standby promotions; NULL when the wait ran out';
COMMENT ON FUNCTION @extschema@.advlock_try_with_token(pg_catalog.text, pg_catalog.text, pg_catalog.int4, pg_catalog.text, pg_catalog.text) IS
  'advlock: take the advisory lock on advlock_key(ns, id) (default scope session) and return a fencing token that only ever grows; NULL when the wait ran out';
COMMENT ON FUNCTION @extschema@.advlock_try_with_token(pg_catalog.text, pg_catalog.int8, pg_catalog.int4, pg_catalog.text, pg_catalog.text) IS
  'advlock: take the advisory lock on advlock_key(ns, id) (default scope session) and return a fencing token that only ever grows; NULL when the wait ran out';

COMMENT ON FUNCTION @extschema@.advlock_lease(pg_catalog.int8, pg_catalog.int4, pg_catalog.int4, pg_catalog.int4) IS
  'advlock: take a lease on key for ttl_ms, waiting at most timeout_ms (first come, first served; slots => N lets N leases hold the key); returns the lease id, which is its fencing token, or NULL when the wait ran out; needs shared_preload_libraries';
COMMENT ON FUNCTION @extschema@.advlock_lease(pg_catalog.text, pg_catalog.text, pg_catalog.int4, pg_catalog.int4, pg_catalog.int4) IS
  'advlock: take a lease on advlock_key(ns, id) for ttl_ms, waiting at most timeout_ms; returns the lease id (its fencing token) or NULL when the wait ran out; needs shared_preload_libraries';
COMMENT ON FUNCTION @extschema@.advlock_lease(pg_catalog.text, pg_catalog.int8, pg_catalog.int4, pg_catalog.int4, pg_catalog.int4) IS
  'advlock: take a lease on advlock_key(ns, id) for ttl_ms, waiting at most timeout_ms; returns the lease id (its fencing token) or NULL when the wait ran out; needs shared_preload_libraries';
COMMENT ON FUNCTION @extschema@.advlock_lease_renew(pg_catalog.int8, pg_catalog.int4) IS
  'advlock: extend the lease to ttl_ms from now, from any connection of this database; false when it already ended (expired or released): the caller has lost it';
COMMENT ON FUNCTION @extschema@.advlock_lease_release(pg_catalog.int8) IS
  'advlock: end the lease now and hand its key to the next waiter; false when it had already ended';
COMMENT ON PROCEDURE @extschema@.advlock_wait_lock(pg_catalog.int8, pg_catalog.int4, pg_catalog.text, boolean) IS
  'advlock: CALL outside a transaction block: commit, then wait at most timeout_ms for a session lock on key holding no snapshot (so CREATE INDEX CONCURRENTLY does not wait for the waiter); acquired says whether it was granted';
COMMENT ON PROCEDURE @extschema@.advlock_wait_lease(pg_catalog.int8, pg_catalog.int4, pg_catalog.int4, pg_catalog.int4, pg_catalog.int8) IS
  'advlock: CALL outside a transaction block: commit, then wait at most timeout_ms for a lease on key holding no snapshot; lease is its id (fencing token) or NULL when the wait ran out; needs shared_preload_libraries';
COMMENT ON FUNCTION @extschema@.advlock_lease_entries() IS
  'advlock (internal, feeds the advlock_leases view; may change): one row per lease held or awaited in this database';
COMMENT ON FUNCTION @extschema@.advlock_lease_stats() IS
  'advlock (internal, feeds the advlock_lease_stats view; may change): lease table use and totals';
COMMENT ON FUNCTION @extschema@.advlock_lease_candidates() IS
  'advlock (internal, feeds advlock_leases.candidate; may change): the candidate of each election term held in this database, by lease id';
COMMENT ON FUNCTION @extschema@.advlock_term_stats() IS
  'advlock (internal, feeds the terms_* columns of advlock_lease_stats; may change): election terms started, expired and resigned since the server started';

COMMENT ON FUNCTION @extschema@.advlock_campaign(pg_catalog.int8, pg_catalog.int4, pg_catalog.int4, pg_catalog.text) IS
  'advlock: campaign for leadership of key: wait at most timeout_ms for its one-slot lease (first come, first served) and hold it for ttl_ms as candidate; returns the term (the lease id, a fencing token larger than every earlier term) or NULL when the wait ran out; renew with advlock_lease_renew, end with advlock_resign; needs shared_preload_libraries';
COMMENT ON FUNCTION @extschema@.advlock_campaign(pg_catalog.text, pg_catalog.text, pg_catalog.int4, pg_catalog.int4, pg_catalog.text) IS
  'advlock: campaign for leadership of advlock_key(ns, id) as candidate for ttl_ms, waiting at most timeout_ms; returns the term (lease id, fencing token) or NULL when the wait ran out; needs shared_preload_libraries';
COMMENT ON FUNCTION @extschema@.advlock_campaign(pg_catalog.text, pg_catalog.int8, pg_catalog.int4, pg_catalog.int4, pg_catalog.text) IS
  'advlock: campaign for leadership of advlock_key(ns, id) as candidate for ttl_ms, waiting at most timeout_ms; returns the term (lease id, fencing token) or NULL when the wait ran out; needs shared_preload_libraries';
COMMENT ON FUNCTION @extschema@.advlock_leader(pg_catalog.int8) IS
  'advlock: the leader of key now: term, candidate, since, expires_at and the pid and application_name of its last renewal; no row when nobody leads; needs shared_preload_libraries';
COMMENT ON FUNCTION @extschema@.advlock_leader(pg_catalog.text, pg_catalog.text) IS
  'advlock: the leader of advlock_key(ns, id) now (term, candidate, since, expires_at, pid, application_name); no row when nobody leads; needs shared_preload_libraries';
COMMENT ON FUNCTION @extschema@.advlock_leader(pg_catalog.text, pg_catalog.int8) IS
  'advlock: the leader of advlock_key(ns, id) now (term, candidate, since, expires_at, pid, application_name); no row when nobody leads; needs shared_preload_libraries';
COMMENT ON FUNCTION @extschema@.advlock_observe_leader(pg_catalog.int8, pg_catalog.int4, pg_catalog.int8) IS
  'advlock: wait at most timeout_ms, without polling, until the leader of key differs from known_term (NULL: no leader), woken by a grant, a resignation or an expiry; one row: changed (false when the wait ran out) and the leader now (term NULL: none); needs shared_preload_libraries';
COMMENT ON FUNCTION @extschema@.advlock_observe_leader(pg_catalog.text, pg_catalog.text, pg_catalog.int4, pg_catalog.int8) IS
  'advlock: wait at most timeout_ms until the leader of advlock_key(ns, id) differs from known_term (NULL: no leader); one row: changed and the leader now (term NULL: none); needs shared_preload_libraries';
COMMENT ON FUNCTION @extschema@.advlock_observe_leader(pg_catalog.text, pg_catalog.int8, pg_catalog.int4, pg_catalog.int8) IS
  'advlock: wait at most timeout_ms until the leader of advlock_key(ns, id) differs from known_term (NULL: no leader); one row: changed and the leader now (term NULL: none); needs shared_preload_libraries';
COMMENT ON FUNCTION @extschema@.advlock_resign(pg_catalog.int8) IS
  'advlock: end the term now (release its lease) and hand the key to the next candidate; false when it had already ended (expired or released)';
COMMENT ON PROCEDURE @extschema@.advlock_wait_campaign(pg_catalog.int8, pg_catalog.int4, pg_catalog.int4, pg_catalog.text, pg_catalog.int8) IS
  'advlock: CALL outside a transaction block: commit, then campaign like advlock_campaign holding no snapshot; term is the term won or NULL when the wait ran out; needs shared_preload_libraries';
COMMENT ON PROCEDURE @extschema@.advlock_wait_leader(pg_catalog.int8, pg_catalog.int4, pg_catalog.int8, pg_catalog.int8, boolean, pg_catalog.text) IS
  'advlock: CALL outside a transaction block: commit, then observe like advlock_observe_leader holding no snapshot (for long waits: no xmin held back); term and candidate of the leader after the wait, changed whether it differs from known_term; needs shared_preload_libraries';

COMMENT ON FUNCTION @extschema@.advlock_holding(pg_catalog.int8, pg_catalog.text) IS
  'advlock: whether this backend holds the advisory lock on key in mode (any scope); the check a leader runs before each unit of work';
COMMENT ON FUNCTION @extschema@.advlock_holding(pg_catalog.text, pg_catalog.text, pg_catalog.text) IS
  'advlock: whether this backend holds the advisory lock on advlock_key(ns, id) in mode (any scope)';
COMMENT ON FUNCTION @extschema@.advlock_holding(pg_catalog.text, pg_catalog.int8, pg_catalog.text) IS
  'advlock: whether this backend holds the advisory lock on advlock_key(ns, id) in mode (any scope)';

COMMENT ON FUNCTION @extschema@.advlock_idle_threshold(pg_catalog.interval) IS
  'advlock: the idle threshold in effect: older_than, or the advlock.idle_threshold setting when NULL; rejects a negative interval';
COMMENT ON FUNCTION @extschema@.advlock_lock_entries() IS
  'advlock (internal, may change): the advisory locks of this database as the lock manager holds them (key, mode, granted, pid, waiting_since), one row per lock entry; the 0.3.0 feed, kept for the SQL edition''s metrics and the benchmarks (advlock_holders reads advlock_holder_entries)';
COMMENT ON FUNCTION @extschema@.advlock_lock_table_entries() IS
  'advlock (internal, feeds the advlock_lock_table view; may change): shared lock table entries per database (by name), advisory entries among them, and the table''s capacity';
COMMENT ON FUNCTION @extschema@.advlock_holder_entries(pg_catalog.int4[]) IS
  'advlock (internal, feeds the advlock_holders view; may change): the advisory locks of this database from one snapshot of the lock table, with blocked_by for waiters and, preloaded, the recorded label, scope, held_since and token; pids: only the granted locks of those backends';
COMMENT ON FUNCTION @extschema@.advlock_idle_holder_rows(pg_catalog.interval, pg_catalog.text) IS
  'advlock (internal, behind advlock_idle_holders and advlock_terminate_idle_holders; may change): the idle-holder rows, most idle first; validates older_than and warns about hidden holders, naming caller';
COMMENT ON FUNCTION @extschema@.advlock_labels() IS
  'advlock (internal, may change): the labels (ns/id), scopes and hold times recorded for locks held in this database, one row per backend, key and mode (advlock_holder_entries looks each lock''s label up itself); no rows unless advlock is in shared_preload_libraries';
COMMENT ON FUNCTION @extschema@.advlock_tokens() IS
  'advlock (internal, may change): the fencing tokens of locks held in this database through advlock_try_with_token, one row per backend, key and mode (the latest token; advlock_holder_entries looks each lock''s token up itself); no rows unless advlock is in shared_preload_libraries';
COMMENT ON SEQUENCE @extschema@.advlock_token_seq IS
  'advlock: the counter behind fencing tokens (advlock_try_with_token); do not change it by hand';
COMMENT ON FUNCTION @extschema@.advlock_idle_holders(pg_catalog.interval) IS
  'advlock: advlock_holders rows of granted locks whose backend has been idle for at least older_than (NULL: advlock.idle_threshold)';
COMMENT ON FUNCTION @extschema@.advlock_metrics() IS
  'advlock (internal, feeds the advlock_metrics view; may change): gauges per namespace and, preloaded, the acquisition counters, computed from the lock table and backend status without joining pg_stat_activity';
COMMENT ON FUNCTION @extschema@.advlock_leak_count(pg_catalog.interval) IS
  'advlock: number of backends holding advisory locks while idle for at least older_than (NULL: advlock.idle_threshold); alert when not 0';
COMMENT ON FUNCTION @extschema@.advlock_terminate_idle_holders(pg_catalog.interval, pg_catalog.bool) IS
  'advlock: list (dry_run => true, the default) or terminate (dry_run => false) the backends behind idle holders, with the caller''s own rights';

COMMENT ON FUNCTION @extschema@.advlock_stats() IS
  'advlock (internal, feeds the advlock_stats view; may change): per-namespace acquisition counters of this database; needs shared_preload_libraries';
COMMENT ON FUNCTION @extschema@.advlock_stats_info() IS
  'advlock (internal, feeds the advlock_stats_info view; may change): fill level of the shared label and statistics tables; needs shared_preload_libraries';
COMMENT ON FUNCTION @extschema@.advlock_stats_reset(pg_catalog.text) IS
  'advlock: reset the statistics of namespace ns in this database, or of every namespace when ns is NULL; returns the reset time; needs shared_preload_libraries';

COMMENT ON TABLE @extschema@.advlock_fences IS
  'advlock: one row per fence: the largest token that passed advlock_fence for key (ns, id as first given), when (passed_at: the statement''s start) and by which role; in pg_dump''s output';
COMMENT ON FUNCTION @extschema@.advlock_fence(pg_catalog.int8, pg_catalog.int8) IS
  'advlock: in a write transaction, let token pass the fence of key: raises LK001 when a larger token has passed it, else records token (an equal one passes again: retries); the fence''s row stays locked until the transaction ends, so the check commits or rolls back with the write';
COMMENT ON FUNCTION @extschema@.advlock_fence(pg_catalog.text, pg_catalog.text, pg_catalog.int8) IS
  'advlock: in a write transaction, let token pass the fence of advlock_key(ns, id): raises LK001 when a larger token has passed it, else records token until the transaction ends';
COMMENT ON FUNCTION @extschema@.advlock_fence(pg_catalog.text, pg_catalog.int8, pg_catalog.int8) IS
  'advlock: in a write transaction, let token pass the fence of advlock_key(ns, id): raises LK001 when a larger token has passed it, else records token until the transaction ends';
COMMENT ON FUNCTION @extschema@.advlock_fence_reset(pg_catalog.int8) IS
  'advlock: forget the fence of key (any token passes next); needs DELETE on advlock_fences (its owner, superusers); returns the token it had, or NULL';
COMMENT ON FUNCTION @extschema@.advlock_fence_reset(pg_catalog.text, pg_catalog.text) IS
  'advlock: forget the fence of advlock_key(ns, id); needs DELETE on advlock_fences; returns the token it had, or NULL';
COMMENT ON FUNCTION @extschema@.advlock_fence_reset(pg_catalog.text, pg_catalog.int8) IS
  'advlock: forget the fence of advlock_key(ns, id); needs DELETE on advlock_fences; returns the token it had, or NULL';
COMMENT ON FUNCTION @extschema@.advlock_fence_guard() IS
  'advlock (internal, trigger of advlock_fences; may change): refuses an update that lowers a token or changes the key';
COMMENT ON FUNCTION @extschema@.advlock_lease_check(pg_catalog.int8) IS
  'advlock: in a write transaction, raise LK002 when lease is no longer held (released, expired, ended by a restart); returns its expires_at otherwise; needs shared_preload_libraries';
COMMENT ON FUNCTION @extschema@.advlock_lease_expiry(pg_catalog.int8, pg_catalog.text) IS
  'advlock (internal, behind advlock_lease_check; may change): expires_at of lease while an entry of the lease table holds it (possibly past), else NULL; needs shared_preload_libraries, naming caller';
