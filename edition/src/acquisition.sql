-- advlock SQL edition: advlock_try_with_timeout, advlock_lock_with_timeout, advlock_unlock.
--
-- Same names, signatures, defaults, checks and messages as src/acquisition.rs,
-- src/lock_request.rs and src/errors.rs. The lock itself is the built-ins' (pg_try_advisory_*,
-- pg_advisory_*): the same lock tags, re-entrancy and counting as the extension.

-- An argument as the extension's messages show it (ServerText::display): at most 64
-- characters, then the size.
CREATE OR REPLACE FUNCTION @extschema@.advlock_edition_display(value pg_catalog.text)
RETURNS pg_catalog.text
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
RETURN CASE WHEN pg_catalog.char_length(value) OPERATOR(pg_catalog.>) 64
            THEN pg_catalog.left(value, 64) OPERATOR(pg_catalog.||) '... ('
                 OPERATOR(pg_catalog.||) pg_catalog.octet_length(value) OPERATOR(pg_catalog.||) ' bytes)'
            ELSE value END;

-- Whether this backend holds the advisory lock on key in this mode right now (any scope):
-- the truth after a wait ended in an error, when the grant may have raced it.
CREATE OR REPLACE FUNCTION @extschema@.advlock_edition_held(key pg_catalog.int8, shared pg_catalog.bool)
RETURNS pg_catalog.bool
LANGUAGE sql VOLATILE
BEGIN ATOMIC
    SELECT EXISTS (
        SELECT 1 FROM pg_catalog.pg_locks l
         WHERE l.locktype OPERATOR(pg_catalog.=) 'advisory'
           AND l.pid OPERATOR(pg_catalog.=) pg_catalog.pg_backend_pid()
           AND l.granted
           AND l.objsubid OPERATOR(pg_catalog.=) 1
           AND l.database OPERATOR(pg_catalog.=) (SELECT d.oid FROM pg_catalog.pg_database d
                                                   WHERE d.datname OPERATOR(pg_catalog.=) pg_catalog.current_database())
           AND l.classid OPERATOR(pg_catalog.=) ((key OPERATOR(pg_catalog.>>) 32) OPERATOR(pg_catalog.&) 4294967295)::pg_catalog.oid
           AND l.objid OPERATOR(pg_catalog.=) (key OPERATOR(pg_catalog.&) 4294967295)::pg_catalog.oid
           AND l.mode OPERATOR(pg_catalog.=) CASE WHEN shared THEN 'ShareLock' ELSE 'ExclusiveLock' END);
END;

-- The bounded wait, entered only when the no-wait try found the lock busy and timeout_ms > 0.
-- The SET lock_timeout clause gives this function its own GUC nest level, as the extension
-- opens one (src/lockmgr.rs): whatever the body sets is undone when the function exits, on
-- every path, so the caller's lock_timeout (session value, SET LOCAL or a function's SET) is
-- unchanged afterwards. The exception block is plpgsql's subtransaction: when lock_timeout
-- fires, its rollback leaves the wait queue.
CREATE OR REPLACE FUNCTION @extschema@.advlock_edition_wait(key pg_catalog.int8, session pg_catalog.bool,
                                                           shared pg_catalog.bool, timeout_ms pg_catalog.int4)
RETURNS pg_catalog.bool
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
SET lock_timeout = 0
AS $fn$
DECLARE
    held boolean;
BEGIN
    BEGIN
        PERFORM set_config('lock_timeout', timeout_ms::text, true);
        IF session THEN
            IF shared THEN PERFORM pg_advisory_lock_shared(key); ELSE PERFORM pg_advisory_lock(key); END IF;
        ELSE
            IF shared THEN PERFORM pg_advisory_xact_lock_shared(key); ELSE PERFORM pg_advisory_xact_lock(key); END IF;
        END IF;
        -- The lock can be granted just as lock_timeout fires: the wait returns and the
        -- timeout's cancel stays pending until the next interrupt check, which plpgsql makes
        -- before each statement. This one takes it here, inside the block, where it is handled
        -- below instead of escaping after we reported true.
        held := true;
        PERFORM set_config('lock_timeout', '0', true);
    EXCEPTION
        WHEN lock_not_available THEN
            -- Timed out, or the grant raced the timeout. The rollback released an xact lock
            -- taken in the block; a session lock survives it. Report what is true now.
            RETURN @extschema@.advlock_edition_held(key, shared);
        WHEN query_canceled OR deadlock_detected THEN
            -- Cancel, statement_timeout, deadlock: the call fails, and a session lock granted
            -- during this wait must not outlive it (it was not held before: the try failed).
            IF session AND @extschema@.advlock_edition_held(key, shared) THEN
                IF shared THEN PERFORM pg_advisory_unlock_shared(key); ELSE PERFORM pg_advisory_unlock(key); END IF;
            END IF;
            RAISE;
    END;
    RETURN held;
END
$fn$;

-- The timeout_ms argument (lock_request::timeout): not NULL, not negative.
CREATE OR REPLACE FUNCTION @extschema@.advlock_edition_check_timeout(fn pg_catalog.text, timeout_ms pg_catalog.int4)
RETURNS void
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
    IF timeout_ms IS NULL THEN
        RAISE EXCEPTION 'argument "timeout_ms" of % must not be null', fn
            USING ERRCODE = 'null_value_not_allowed',
                  HINT = 'Use 0 for a pure try (no wait) or a positive number of milliseconds to wait at most.';
    END IF;
    IF timeout_ms < 0 THEN
        RAISE EXCEPTION 'argument "timeout_ms" of % must not be negative: %', fn, timeout_ms
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'Use 0 for a pure try (no wait) or a positive number of milliseconds to wait at most.';
    END IF;
END
$fn$;

-- The checks every acquisition makes once its arguments are valid (preflight in
-- src/acquisition.rs): refused on a hot standby unless advlock.allow_on_standby is on, and a
-- WARNING for scope 'xact' outside a transaction block.
CREATE OR REPLACE FUNCTION @extschema@.advlock_edition_preflight(fn pg_catalog.text, session pg_catalog.bool)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
    IF pg_is_in_recovery()
       AND lower(coalesce(current_setting('advlock.allow_on_standby', true), 'off')) NOT IN ('on', 'true', 'yes', '1') THEN
        RAISE EXCEPTION '% cannot run on a hot standby', fn
            USING ERRCODE = 'read_only_sql_transaction',
                  DETAIL = 'Advisory locks taken on a standby coordinate only sessions on that standby, not with the primary.',
                  HINT = 'Take the lock on the primary, or SET advlock.allow_on_standby = on if standby-local locking is what you want.';
    END IF;
    -- SQL cannot ask IsTransactionBlock(): a statement that started its own transaction is
    -- taken as outside a block, unless its query string starts with BEGIN or START
    -- TRANSACTION ("BEGIN; SELECT advlock_...", sent as one string, is inside one). Other
    -- multi-statement strings without BEGIN warn here and not in the extension (their lock
    -- lasts until the end of the string, not of the statement).
    IF NOT session AND transaction_timestamp() = statement_timestamp()
       AND current_query() !~* '^\s*(begin|start\s+transaction)\M' THEN
        RAISE WARNING '% with scope ''xact'' outside a transaction block: the lock is released when this statement ends', fn
            USING HINT = 'Call it between BEGIN and COMMIT, or use scope => ''session'' and advlock_unlock().';
    END IF;
END
$fn$;

-- The acquisition, one routine for one key and for a set, as src/acquisition.rs's acquire: the
-- checks (timeout_ms, scope, mode; the keys were checked by the caller), then the distinct keys
-- in ascending order within one deadline of timeout_ms, each by a no-wait try and (only if busy)
-- the bounded wait. busy_key is NULL when every key is held, else the key that stayed busy (then
-- nothing this call took is held), with the time waited. fn names the function called.
--
-- A key set (key_set) is taken inside one exception block (a subtransaction): when a key stays
-- busy the block raises, and its abort gives back exactly the transaction-scope holds it took;
-- session-scope holds survive a subtransaction abort, so the handler releases those one by one
-- (one hold per key, so a hold the session had before the call stays). An ERROR during the call
-- (deadlock with a caller of the single-key functions, cancel, statement_timeout, a full lock
-- table) gives back the same way before it is raised again. A single-key call has nothing to give
-- back when its one key stays busy: it opens no block, so its uncontended path takes no
-- subtransaction, and a full lock table reaches its caller as PostgreSQL's own 53200
-- (docs/sql-edition.md).
DROP FUNCTION IF EXISTS @extschema@.advlock_edition_acquire(pg_catalog.text, pg_catalog.int8, pg_catalog.int4,
                                                           pg_catalog.text, pg_catalog.text);
DROP FUNCTION IF EXISTS @extschema@.advlock_edition_acquire_all(pg_catalog.text, pg_catalog.int8[], pg_catalog.int4,
                                                               pg_catalog.bool, pg_catalog.bool);
DROP FUNCTION IF EXISTS @extschema@.advlock_edition_try_all(pg_catalog.text, pg_catalog.int8[], pg_catalog.int4,
                                                           pg_catalog.text, pg_catalog.text);
CREATE OR REPLACE FUNCTION @extschema@.advlock_edition_acquire(fn pg_catalog.text, keys pg_catalog.int8[],
                                                              timeout_ms pg_catalog.int4, scope pg_catalog.text,
                                                              mode pg_catalog.text, key_set pg_catalog.bool,
                                                              OUT busy_key pg_catalog.int8, OUT waited_ms pg_catalog.int8)
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    session boolean;
    shared boolean;
    started timestamptz;
    deadline timestamptz;
    sorted bigint[] := keys;
    taken int := 0;   -- how many of sorted (from the first) this call holds
    k bigint;
BEGIN
    PERFORM @extschema@.advlock_edition_check_timeout(fn, timeout_ms);
    session := @extschema@.advlock_edition_scope(fn, scope);
    shared := @extschema@.advlock_edition_mode(fn, mode);
    PERFORM @extschema@.advlock_edition_preflight(fn, session);
    started := clock_timestamp();
    IF NOT key_set THEN
        IF NOT @extschema@.advlock_edition_take(keys[1], session, shared, timeout_ms) THEN
            busy_key := keys[1];
            waited_ms := floor(extract(epoch FROM clock_timestamp() - started) * 1000);
        END IF;
        RETURN;
    END IF;
    deadline := started + timeout_ms * interval '1 millisecond';
    SELECT array_agg(DISTINCT v ORDER BY v) INTO sorted FROM unnest(keys) v;
    BEGIN
        FOREACH k IN ARRAY sorted LOOP
            -- What is left of the deadline (a key set shares one).
            IF NOT @extschema@.advlock_edition_take(k, session, shared,
                       least(floor(extract(epoch FROM deadline - clock_timestamp()) * 1000), 2147483647)::int) THEN
                busy_key := k;
                waited_ms := floor(extract(epoch FROM clock_timestamp() - started) * 1000);
                -- Leaves the block: its abort releases the transaction-scope holds taken in it.
                RAISE EXCEPTION USING ERRCODE = 'lock_not_available', MESSAGE = 'advlock: key set busy';
            END IF;
            taken := taken + 1;
        END LOOP;
    EXCEPTION
        WHEN lock_not_available THEN
            IF session THEN PERFORM @extschema@.advlock_edition_give_back(sorted, taken, shared); END IF;
            IF busy_key IS NULL THEN
                -- Not ours (a lock_timeout of the caller's firing elsewhere): re-raised.
                RAISE;
            END IF;
        WHEN out_of_memory THEN
            IF session THEN PERFORM @extschema@.advlock_edition_give_back(sorted, taken, shared); END IF;
            IF SQLERRM = 'out of shared memory' THEN
                RAISE EXCEPTION 'the lock table has no room for another advisory lock'
                    USING ERRCODE = 'out_of_memory',
                          DETAIL = format('Keys asked for: %s; taken before it was full: %s. None of them is held: the error releases the ones it took.', cardinality(sorted), taken),
                          HINT = 'Hold fewer locks at once (fewer keys per call, no session lock kept longer than needed), or raise max_locks_per_transaction (a restart is needed): the shared lock table is sized for max_locks_per_transaction * (max_connections + max_prepared_transactions) locks, and holds more only while spare shared memory lasts.';
            END IF;
            RAISE;
        WHEN query_canceled THEN   -- not among OTHERS
            IF session THEN PERFORM @extschema@.advlock_edition_give_back(sorted, taken, shared); END IF;
            RAISE;
        WHEN OTHERS THEN
            IF session THEN PERFORM @extschema@.advlock_edition_give_back(sorted, taken, shared); END IF;
            RAISE;
    END;
END
$fn$;

-- One key of an acquisition: a no-wait try, then (only if busy and wait_ms > 0) the bounded wait,
-- which reports true also when the grant raced the timeout, so a key taken is never reported busy.
CREATE OR REPLACE FUNCTION @extschema@.advlock_edition_take(key pg_catalog.int8, session pg_catalog.bool,
                                                           shared pg_catalog.bool, wait_ms pg_catalog.int4)
RETURNS pg_catalog.bool
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
    IF session THEN
        IF shared THEN IF pg_try_advisory_lock_shared(key) THEN RETURN true; END IF;
        ELSIF pg_try_advisory_lock(key) THEN RETURN true; END IF;
    ELSE
        IF shared THEN IF pg_try_advisory_xact_lock_shared(key) THEN RETURN true; END IF;
        ELSIF pg_try_advisory_xact_lock(key) THEN RETURN true; END IF;
    END IF;
    RETURN wait_ms > 0 AND @extschema@.advlock_edition_wait(key, session, shared, wait_ms);
END
$fn$;

-- scope => true for 'session', false for 'xact' (Scope::parse).
CREATE OR REPLACE FUNCTION @extschema@.advlock_edition_scope(fn pg_catalog.text, scope pg_catalog.text)
RETURNS pg_catalog.bool
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
    IF scope = 'xact' THEN RETURN false; END IF;
    IF scope = 'session' THEN RETURN true; END IF;
    IF scope IS NULL THEN
        RAISE EXCEPTION 'argument "scope" of % must not be null', fn
            USING ERRCODE = 'null_value_not_allowed',
                  HINT = 'Omit the argument to use its default, or pass one of the allowed values.';
    END IF;
    IF scope IN ('exclusive', 'shared') THEN
        RAISE EXCEPTION 'invalid value for argument "scope" of %: "%"', fn, scope
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = format('''%s'' is a mode: pass it by name, mode => ''%s'' (the argument after timeout_ms is scope: ''xact'' or ''session'').', scope, scope);
    END IF;
    RAISE EXCEPTION 'invalid value for argument "scope" of %: "%"', fn, @extschema@.advlock_edition_display(scope)
        USING ERRCODE = 'invalid_parameter_value',
              HINT = 'Allowed values are ''xact'' (released at commit or rollback) and ''session'' (held until advlock_unlock or disconnect).';
END
$fn$;

-- mode => true for 'shared', false for 'exclusive' (Mode::parse).
CREATE OR REPLACE FUNCTION @extschema@.advlock_edition_mode(fn pg_catalog.text, mode pg_catalog.text)
RETURNS pg_catalog.bool
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
    IF mode = 'exclusive' THEN RETURN false; END IF;
    IF mode = 'shared' THEN RETURN true; END IF;
    IF mode IS NULL THEN
        RAISE EXCEPTION 'argument "mode" of % must not be null', fn
            USING ERRCODE = 'null_value_not_allowed',
                  HINT = 'Omit the argument to use its default, or pass one of the allowed values.';
    END IF;
    RAISE EXCEPTION 'invalid value for argument "mode" of %: "%"', fn, @extschema@.advlock_edition_display(mode)
        USING ERRCODE = 'invalid_parameter_value',
              HINT = 'Allowed values are ''exclusive'' and ''shared''.';
END
$fn$;

-- advlock_lock_with_timeout's error when the wait ran out (src/acquisition.rs), with the
-- holders in the DETAIL as src/diagnostics.rs describes them. target: the key as
-- advlock_edition_describe writes it.
DROP FUNCTION IF EXISTS @extschema@.advlock_edition_raise_timeout(pg_catalog.int8, pg_catalog.text, pg_catalog.int4,
                                                                 pg_catalog.text, pg_catalog.timestamptz);
CREATE OR REPLACE FUNCTION @extschema@.advlock_edition_raise_timeout(key pg_catalog.int8, target pg_catalog.text,
                                                                    timeout_ms pg_catalog.int4, req_mode pg_catalog.text,
                                                                    waited pg_catalog.int8)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
    RAISE EXCEPTION 'could not obtain % advisory lock on % within % ms (waited % ms)', req_mode, target, timeout_ms, waited
        USING ERRCODE = 'lock_not_available',
              DETAIL = @extschema@.advlock_edition_holders(key, req_mode),
              HINT = 'Retry later or with a larger timeout_ms; SELECT * FROM advlock_holders shows who holds which lock.';
END
$fn$;

-- Who holds key in a mode that conflicts with req_mode, as a timeout error's DETAIL says it
-- (describe_holders in src/diagnostics.rs).
CREATE OR REPLACE FUNCTION @extschema@.advlock_edition_holders(key pg_catalog.int8, req_mode pg_catalog.text)
RETURNS pg_catalog.text
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    holders text;
BEGIN
    SELECT string_agg(format('PID %s (application_name %s, state %s)',
                             l.pid, quote_literal(a.application_name), quote_literal(a.state)),
                      ', ' ORDER BY l.pid)
      INTO holders
      FROM pg_locks l
      LEFT JOIN pg_stat_activity a ON a.pid = l.pid
     WHERE l.locktype = 'advisory'
       AND l.granted
       AND l.objsubid = 1
       AND l.database = (SELECT d.oid FROM pg_database d WHERE d.datname = current_database())
       AND l.classid::int8 = ((key >> 32) & 4294967295)
       AND l.objid::int8 = (key & 4294967295)
       AND (req_mode = 'exclusive' OR l.mode = 'ExclusiveLock')
       AND l.pid <> pg_backend_pid();
    RETURN CASE WHEN holders IS NULL THEN 'The holder released it after the wait ended.'
                ELSE format('Held by %s.', holders) END;
END
$fn$;

-- "key N" (ns NULL), or "key N = advlock_key('ns', 'id')" (Target::describe, the key description
-- of sql/messages.toml); id_text is NULL for an integer id.
CREATE OR REPLACE FUNCTION @extschema@.advlock_edition_describe(key pg_catalog.int8, ns pg_catalog.text,
                                                               id_text pg_catalog.text, id_int pg_catalog.int8)
RETURNS pg_catalog.text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN CASE WHEN ns IS NULL THEN pg_catalog.format('key %s', key)
            WHEN id_text IS NULL
            THEN pg_catalog.format('key %s = advlock_key(''%s'', %s)', key,
                                   pg_catalog.replace(@extschema@.advlock_edition_display(ns), '''', ''''''), id_int)
            ELSE pg_catalog.format('key %s = advlock_key(''%s'', ''%s'')', key,
                                   pg_catalog.replace(@extschema@.advlock_edition_display(ns), '''', ''''''),
                                   pg_catalog.replace(@extschema@.advlock_edition_display(id_text), '''', '''''')) END;

-- One session hold of key released by pg_advisory_unlock*, whose own WARNING on failure ("you
-- don't own a lock of type ...") is kept from the client: advlock_edition_release says more.
CREATE OR REPLACE FUNCTION @extschema@.advlock_edition_release_quietly(key pg_catalog.int8, shared pg_catalog.bool)
RETURNS pg_catalog.bool
LANGUAGE sql VOLATILE
SET client_min_messages = error
BEGIN ATOMIC
    SELECT CASE WHEN shared THEN pg_catalog.pg_advisory_unlock_shared(key) ELSE pg_catalog.pg_advisory_unlock(key) END;
END;

-- One session hold of key released (true), or false with the extension's WARNING: the key
-- (target, as advlock_edition_describe writes it) and what this session holds of it instead.
CREATE OR REPLACE FUNCTION @extschema@.advlock_edition_release(fn pg_catalog.text, key pg_catalog.int8,
                                                              shared pg_catalog.bool, target pg_catalog.text)
RETURNS pg_catalog.bool
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    asked text := CASE WHEN shared THEN 'shared' ELSE 'exclusive' END;
    other text := CASE WHEN shared THEN 'exclusive' ELSE 'shared' END;
    detail text;
    hint text;
BEGIN
    IF @extschema@.advlock_edition_release_quietly(key, shared) THEN
        RETURN true;
    END IF;
    IF @extschema@.advlock_edition_held(key, shared) THEN
        detail := 'This session holds it in transaction scope (scope => ''xact'', the default), which only the end of the transaction releases.';
        hint := 'COMMIT or ROLLBACK releases it; to release a lock early, take it with scope => ''session''.';
    ELSIF @extschema@.advlock_edition_held(key, NOT shared) THEN
        detail := format('This session holds that key in %s mode.', other);
        hint := format('Pass mode => ''%s'' to release that lock.', other);
    ELSE
        detail := 'This session holds no lock on that key: it never took it, or already released it.';
        hint := 'advlock_holders shows who holds the key.';
    END IF;
    RAISE WARNING 'this session holds no % session lock on %', asked, target
        USING DETAIL = detail, HINT = hint;
    RETURN false;
END
$fn$;

-- ---------------------------------------------------------------------------------------
-- The API: three forms each, defaults as the extension's.

CREATE OR REPLACE FUNCTION @extschema@.advlock_try_with_timeout(key pg_catalog.int8, timeout_ms pg_catalog.int4,
                                                               scope pg_catalog.text DEFAULT 'xact',
                                                               mode pg_catalog.text DEFAULT 'exclusive')
RETURNS pg_catalog.bool
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
    IF key IS NULL THEN
        PERFORM @extschema@.advlock_edition_null_key('advlock_try_with_timeout', 'key');
    END IF;
    RETURN (@extschema@.advlock_edition_acquire('advlock_try_with_timeout', ARRAY[key], timeout_ms, scope, mode, false)).busy_key IS NULL;
END
$fn$;

-- @forms id: text, int
CREATE OR REPLACE FUNCTION @extschema@.advlock_try_with_timeout(ns pg_catalog.text, id @id_type@, timeout_ms pg_catalog.int4,
                                                               scope pg_catalog.text DEFAULT 'xact',
                                                               mode pg_catalog.text DEFAULT 'exclusive')
RETURNS pg_catalog.bool
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
    IF ns IS NULL OR ns = '' OR id IS NULL THEN
        PERFORM @extschema@.advlock_edition_check_target('advlock_try_with_timeout', ns, id IS NULL);
    END IF;
    RETURN (@extschema@.advlock_edition_acquire('advlock_try_with_timeout', ARRAY[@extschema@.advlock_key(ns, id)],
                                                timeout_ms, scope, mode, false)).busy_key IS NULL;
END
$fn$;
-- @end forms

CREATE OR REPLACE FUNCTION @extschema@.advlock_lock_with_timeout(key pg_catalog.int8, timeout_ms pg_catalog.int4,
                                                                scope pg_catalog.text DEFAULT 'xact',
                                                                mode pg_catalog.text DEFAULT 'exclusive')
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    r record;
BEGIN
    IF key IS NULL THEN
        PERFORM @extschema@.advlock_edition_null_key('advlock_lock_with_timeout', 'key');
    END IF;
    r := @extschema@.advlock_edition_acquire('advlock_lock_with_timeout', ARRAY[key], timeout_ms, scope, mode, false);
    IF r.busy_key IS NOT NULL THEN
        PERFORM @extschema@.advlock_edition_raise_timeout(key, @extschema@.advlock_edition_describe(key, NULL, NULL, NULL),
                                                         timeout_ms, mode, r.waited_ms);
    END IF;
END
$fn$;

-- @forms id: text, int
CREATE OR REPLACE FUNCTION @extschema@.advlock_lock_with_timeout(ns pg_catalog.text, id @id_type@, timeout_ms pg_catalog.int4,
                                                                scope pg_catalog.text DEFAULT 'xact',
                                                                mode pg_catalog.text DEFAULT 'exclusive')
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    k bigint;
    r record;
BEGIN
    IF ns IS NULL OR ns = '' OR id IS NULL THEN
        PERFORM @extschema@.advlock_edition_check_target('advlock_lock_with_timeout', ns, id IS NULL);
    END IF;
    k := @extschema@.advlock_key(ns, id);
    r := @extschema@.advlock_edition_acquire('advlock_lock_with_timeout', ARRAY[k], timeout_ms, scope, mode, false);
    IF r.busy_key IS NOT NULL THEN
        PERFORM @extschema@.advlock_edition_raise_timeout(k, @extschema@.advlock_edition_describe(k, ns, @text_id@, @int_id@),
                                                         timeout_ms, mode, r.waited_ms);
    END IF;
END
$fn$;
-- @end forms

-- advlock_unlock: one session-scope hold; false with a WARNING naming the key when none is held.
CREATE OR REPLACE FUNCTION @extschema@.advlock_unlock(key pg_catalog.int8, mode pg_catalog.text DEFAULT 'exclusive')
RETURNS pg_catalog.bool
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
    IF key IS NULL THEN
        PERFORM @extschema@.advlock_edition_null_key('advlock_unlock', 'key');
    END IF;
    RETURN @extschema@.advlock_edition_release('advlock_unlock', key,
                                               @extschema@.advlock_edition_mode('advlock_unlock', mode),
                                               @extschema@.advlock_edition_describe(key, NULL, NULL, NULL));
END
$fn$;

-- @forms id: text, int
CREATE OR REPLACE FUNCTION @extschema@.advlock_unlock(ns pg_catalog.text, id @id_type@, mode pg_catalog.text DEFAULT 'exclusive')
RETURNS pg_catalog.bool
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
    IF ns IS NULL OR ns = '' OR id IS NULL THEN
        PERFORM @extschema@.advlock_edition_check_target('advlock_unlock', ns, id IS NULL);
    END IF;
    RETURN @extschema@.advlock_edition_release('advlock_unlock', @extschema@.advlock_key(ns, id),
                                               @extschema@.advlock_edition_mode('advlock_unlock', mode),
                                               @extschema@.advlock_edition_describe(@extschema@.advlock_key(ns, id), ns, @text_id@, @int_id@));
END
$fn$;
-- @end forms
