-- advlock SQL edition: all-or-nothing acquisition of a set of keys (src/key_set.rs):
-- advlock_try_all_with_timeout, advlock_lock_all_with_timeout and advlock_unlock_all, each with
-- (keys bigint[]), (ns, ids text[]) and (ns, ids bigint[]) forms; and advlock_holding
-- (src/holding.rs).
--
-- Every call takes its distinct keys in ascending order within one deadline, so callers of these
-- functions never deadlock each other: by advlock_edition_acquire (edition/src/acquisition.sql),
-- the routine of the single-key functions too, which takes a key set all or nothing.

-- The keys of an array argument, in the caller's order: the checks of targets_of_keys /
-- targets_of_*_ids (empty array 22023, NULL element 22004, naming its 1-based position).
CREATE OR REPLACE FUNCTION @extschema@.advlock_edition_check_set(fn pg_catalog.text, argument pg_catalog.text,
                                                                n pg_catalog.int4, first_null pg_catalog.int8)
RETURNS void
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
    IF n = 0 THEN
        RAISE EXCEPTION 'argument "%" of % must not be empty', argument, fn
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'Pass at least one key; an empty set would report success while locking nothing.';
    END IF;
    IF first_null IS NOT NULL THEN
        RAISE EXCEPTION 'element % of argument "%" of % must not be null', first_null, argument, fn
            USING ERRCODE = 'null_value_not_allowed',
                  HINT = 'A NULL key would lock nothing: remove it from the array or pass a value.';
    END IF;
END
$fn$;

-- The keys of one call, validated, in the caller's order (ns NULL: bare keys in keys; else
-- advlock_key(ns, id) of text_ids or of int_ids). Argument checks in the extension's order:
-- the array or ns first, then the elements.
CREATE OR REPLACE FUNCTION @extschema@.advlock_edition_set_keys(fn pg_catalog.text, keys pg_catalog.int8[],
                                                               ns pg_catalog.text, text_ids pg_catalog.text[],
                                                               int_ids pg_catalog.int8[], form pg_catalog.text)
RETURNS pg_catalog.int8[]
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    first_null bigint;
    result bigint[];
BEGIN
    IF form = 'keys' THEN
        IF keys IS NULL THEN
            PERFORM @extschema@.advlock_edition_null_key(fn, 'keys');
        END IF;
        SELECT min(i) INTO first_null FROM unnest(keys) WITH ORDINALITY u(v, i) WHERE v IS NULL;
        PERFORM @extschema@.advlock_edition_check_set(fn, 'keys', cardinality(keys), first_null);
        RETURN keys;
    END IF;
    IF ns IS NULL OR ns = '' THEN
        PERFORM @extschema@.advlock_edition_check_target(fn, ns, false);
    END IF;
    IF (form = 'text' AND text_ids IS NULL) OR (form = 'int' AND int_ids IS NULL) THEN
        RAISE EXCEPTION 'argument "ids" of % must not be null', fn
            USING ERRCODE = 'null_value_not_allowed',
                  HINT = 'A NULL key would lock nothing: pass a value for every part of the key.';
    END IF;
    IF form = 'text' THEN
        SELECT min(i) INTO first_null FROM unnest(text_ids) WITH ORDINALITY u(v, i) WHERE v IS NULL;
        PERFORM @extschema@.advlock_edition_check_set(fn, 'ids', cardinality(text_ids), first_null);
        SELECT array_agg(@extschema@.advlock_key(ns, v) ORDER BY i) INTO result
          FROM unnest(text_ids) WITH ORDINALITY u(v, i);
    ELSE
        SELECT min(i) INTO first_null FROM unnest(int_ids) WITH ORDINALITY u(v, i) WHERE v IS NULL;
        PERFORM @extschema@.advlock_edition_check_set(fn, 'ids', cardinality(int_ids), first_null);
        SELECT array_agg(@extschema@.advlock_key(ns, v) ORDER BY i) INTO result
          FROM unnest(int_ids) WITH ORDINALITY u(v, i);
    END IF;
    RETURN result;
END
$fn$;

-- Gives back one session hold of each of keys[1..n], newest first (the holds this call took).
CREATE OR REPLACE FUNCTION @extschema@.advlock_edition_give_back(keys pg_catalog.int8[], n pg_catalog.int4,
                                                                shared pg_catalog.bool)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
    FOR i IN REVERSE n..1 LOOP
        IF shared THEN PERFORM pg_advisory_unlock_shared(keys[i]); ELSE PERFORM pg_advisory_unlock(keys[i]); END IF;
    END LOOP;
END
$fn$;

-- lock_all: the acquisition of a key set, and 55P03 naming the busy key (the first label given for
-- it) and its holders when the deadline passed.
CREATE OR REPLACE FUNCTION @extschema@.advlock_edition_lock_all(keys pg_catalog.int8[], ns pg_catalog.text,
                                                               text_ids pg_catalog.text[], int_ids pg_catalog.int8[],
                                                               timeout_ms pg_catalog.int4, scope pg_catalog.text,
                                                               mode pg_catalog.text)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    r record;
    k bigint;
    target text;
BEGIN
    r := @extschema@.advlock_edition_acquire('advlock_lock_all_with_timeout', keys, timeout_ms, scope, mode, true);
    IF r.busy_key IS NULL THEN
        RETURN;
    END IF;
    k := r.busy_key;
    IF ns IS NULL THEN
        target := @extschema@.advlock_edition_describe(k, NULL, NULL, NULL);
    ELSIF text_ids IS NOT NULL THEN
        SELECT @extschema@.advlock_edition_describe(k, ns, u.v, NULL) INTO target
          FROM unnest(keys, text_ids) WITH ORDINALITY u(key, v, i) WHERE u.key = k ORDER BY u.i LIMIT 1;
    ELSE
        SELECT @extschema@.advlock_edition_describe(k, ns, NULL, u.v) INTO target
          FROM unnest(keys, int_ids) WITH ORDINALITY u(key, v, i) WHERE u.key = k ORDER BY u.i LIMIT 1;
    END IF;
    RAISE EXCEPTION 'could not obtain % advisory locks on all % keys within % ms (waited % ms): % is busy',
                    mode, (SELECT count(DISTINCT v) FROM unnest(keys) v), timeout_ms, r.waited_ms, target
        USING ERRCODE = 'lock_not_available',
              DETAIL = @extschema@.advlock_edition_holders(k, mode) || ' No key of this call is held.',
              HINT = 'Retry later or with a larger timeout_ms; SELECT * FROM advlock_holders shows who holds which lock.';
END
$fn$;

-- unlock_all: one session hold of each distinct key released; true when every one was held,
-- a WARNING naming each that was not, as the extension names it: "key N", or "key N =
-- advlock_key('ns', id)" with the first id of the call that gave that key (ns NULL: bare keys;
-- else text_ids or int_ids, in the order of keys). 0.5.0 added ns and the ids (the WARNING named
-- only the number); an edition installed before loses its two-argument form here.
DROP FUNCTION IF EXISTS @extschema@.advlock_edition_unlock_all(pg_catalog.int8[], pg_catalog.text);
CREATE OR REPLACE FUNCTION @extschema@.advlock_edition_unlock_all(keys pg_catalog.int8[], ns pg_catalog.text,
                                                                 text_ids pg_catalog.text[], int_ids pg_catalog.int8[],
                                                                 mode pg_catalog.text)
RETURNS pg_catalog.bool
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    shared boolean := @extschema@.advlock_edition_mode('advlock_unlock_all', mode);
    every boolean := true;
    released boolean;
    k bigint;
    target text;
BEGIN
    FOR k, target IN
        SELECT DISTINCT ON (u.key) u.key,
               @extschema@.advlock_edition_describe(u.key, ns, u.t, u.n)
          FROM unnest(keys, text_ids, int_ids) WITH ORDINALITY u(key, t, n, i)
         ORDER BY u.key, u.i
    LOOP
        released := @extschema@.advlock_edition_release('advlock_unlock_all', k, shared, target);
        every := every AND released;
    END LOOP;
    RETURN every;
END
$fn$;

-- ---------------------------------------------------------------------------------------
-- The API: three forms each, defaults as the extension's.

CREATE OR REPLACE FUNCTION @extschema@.advlock_try_all_with_timeout(keys pg_catalog.int8[], timeout_ms pg_catalog.int4,
                                                                   scope pg_catalog.text DEFAULT 'xact',
                                                                   mode pg_catalog.text DEFAULT 'exclusive')
RETURNS pg_catalog.bool
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
    RETURN (@extschema@.advlock_edition_acquire('advlock_try_all_with_timeout',
        @extschema@.advlock_edition_set_keys('advlock_try_all_with_timeout', keys, NULL, NULL, NULL, 'keys'),
        timeout_ms, scope, mode, true)).busy_key IS NULL;
END
$fn$;

-- @forms ids: text, int
CREATE OR REPLACE FUNCTION @extschema@.advlock_try_all_with_timeout(ns pg_catalog.text, ids @id_type@[], timeout_ms pg_catalog.int4,
                                                                   scope pg_catalog.text DEFAULT 'xact',
                                                                   mode pg_catalog.text DEFAULT 'exclusive')
RETURNS pg_catalog.bool
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
    RETURN (@extschema@.advlock_edition_acquire('advlock_try_all_with_timeout',
        @extschema@.advlock_edition_set_keys('advlock_try_all_with_timeout', NULL, ns, @text_ids@, @int_ids@, '@form@'),
        timeout_ms, scope, mode, true)).busy_key IS NULL;
END
$fn$;
-- @end forms

CREATE OR REPLACE FUNCTION @extschema@.advlock_lock_all_with_timeout(keys pg_catalog.int8[], timeout_ms pg_catalog.int4,
                                                                    scope pg_catalog.text DEFAULT 'xact',
                                                                    mode pg_catalog.text DEFAULT 'exclusive')
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
    PERFORM @extschema@.advlock_edition_lock_all(
        @extschema@.advlock_edition_set_keys('advlock_lock_all_with_timeout', keys, NULL, NULL, NULL, 'keys'),
        NULL, NULL, NULL, timeout_ms, scope, mode);
END
$fn$;

-- @forms ids: text, int
CREATE OR REPLACE FUNCTION @extschema@.advlock_lock_all_with_timeout(ns pg_catalog.text, ids @id_type@[], timeout_ms pg_catalog.int4,
                                                                    scope pg_catalog.text DEFAULT 'xact',
                                                                    mode pg_catalog.text DEFAULT 'exclusive')
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
    PERFORM @extschema@.advlock_edition_lock_all(
        @extschema@.advlock_edition_set_keys('advlock_lock_all_with_timeout', NULL, ns, @text_ids@, @int_ids@, '@form@'),
        ns, @text_ids@, @int_ids@, timeout_ms, scope, mode);
END
$fn$;
-- @end forms

CREATE OR REPLACE FUNCTION @extschema@.advlock_unlock_all(keys pg_catalog.int8[], mode pg_catalog.text DEFAULT 'exclusive')
RETURNS pg_catalog.bool
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
    RETURN @extschema@.advlock_edition_unlock_all(
        @extschema@.advlock_edition_set_keys('advlock_unlock_all', keys, NULL, NULL, NULL, 'keys'), NULL, NULL, NULL, mode);
END
$fn$;

-- @forms ids: text, int
CREATE OR REPLACE FUNCTION @extschema@.advlock_unlock_all(ns pg_catalog.text, ids @id_type@[], mode pg_catalog.text DEFAULT 'exclusive')
RETURNS pg_catalog.bool
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
    RETURN @extschema@.advlock_edition_unlock_all(
        @extschema@.advlock_edition_set_keys('advlock_unlock_all', NULL, ns, @text_ids@, @int_ids@, '@form@'), ns, @text_ids@, @int_ids@, mode);
END
$fn$;
-- @end forms

-- ---------------------------------------------------------------------------------------
-- advlock_holding: whether this backend holds the lock in exactly this mode, any scope
-- (LockHeldByMe; here this backend's granted rows of pg_locks). VOLATILE, PARALLEL UNSAFE as
-- the extension's: a parallel worker has its own, empty, set of held locks.

CREATE OR REPLACE FUNCTION @extschema@.advlock_holding(key pg_catalog.int8, mode pg_catalog.text DEFAULT 'exclusive')
RETURNS pg_catalog.bool
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
    IF key IS NULL THEN
        PERFORM @extschema@.advlock_edition_null_key('advlock_holding', 'key');
    END IF;
    RETURN @extschema@.advlock_edition_held(key, @extschema@.advlock_edition_mode('advlock_holding', mode));
END
$fn$;

-- @forms id: text, int
CREATE OR REPLACE FUNCTION @extschema@.advlock_holding(ns pg_catalog.text, id @id_type@, mode pg_catalog.text DEFAULT 'exclusive')
RETURNS pg_catalog.bool
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
    IF ns IS NULL OR ns = '' OR id IS NULL THEN
        PERFORM @extschema@.advlock_edition_check_target('advlock_holding', ns, id IS NULL);
    END IF;
    RETURN @extschema@.advlock_edition_held(@extschema@.advlock_key(ns, id), @extschema@.advlock_edition_mode('advlock_holding', mode));
END
$fn$;
-- @end forms
