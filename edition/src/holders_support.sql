-- advlock SQL edition: the three functions sql/holders.sql reads, which the extension
-- implements in Rust (src/diagnostics.rs, src/preload/labels). sql/holders.sql itself follows
-- unchanged in the built script.

-- The effective idle threshold: older_than, or the advlock.idle_threshold setting when NULL.
-- Without the library PostgreSQL keeps advlock.* settings as unchecked placeholders, so the
-- value is read as text, with the units a GUC in milliseconds accepts (a bare number is ms);
-- unset, empty or unreadable means the extension's default, 1 minute.
CREATE OR REPLACE FUNCTION @extschema@.advlock_idle_threshold(older_than pg_catalog.interval DEFAULT NULL)
RETURNS pg_catalog.interval
LANGUAGE plpgsql STABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    setting text;
BEGIN
    IF older_than IS NOT NULL THEN
        IF older_than < interval '0' THEN
            RAISE EXCEPTION 'argument "older_than" of advlock_idle_threshold must not be a negative interval'
                USING ERRCODE = 'invalid_parameter_value',
                      HINT = 'Pass how long a holder must have been idle, e.g. interval ''5 minutes''.';
        END IF;
        RETURN older_than;
    END IF;
    setting := btrim(current_setting('advlock.idle_threshold', true));
    IF setting IS NULL OR setting = '' THEN
        RETURN interval '1 minute';
    END IF;
    IF setting ~ '^[0-9]+$' THEN
        RETURN setting::bigint * interval '1 millisecond';
    END IF;
    BEGIN
        RETURN greatest(setting::interval, interval '0');
    EXCEPTION WHEN OTHERS THEN
        RETURN interval '1 minute';
    END;
END
$fn$;

-- The advisory locks of the current database (held and awaited), decoded as the extension's
-- advlock_lock_entries() decodes them; read from pg_locks (the extension filters
-- pg_lock_status() in C before building rows, here the whole lock table is materialized).
CREATE OR REPLACE FUNCTION @extschema@.advlock_lock_entries()
RETURNS TABLE(key pg_catalog.int8, key1 pg_catalog.int4, key2 pg_catalog.int4, mode pg_catalog.text,
              granted pg_catalog.bool, pid pg_catalog.int4, waiting_since pg_catalog.timestamptz)
LANGUAGE sql VOLATILE STRICT   -- STRICT as the extension's (pgrx marks argument-less functions so)
BEGIN ATOMIC
    SELECT CASE WHEN l.objsubid OPERATOR(pg_catalog.=) 1
                THEN (l.classid::pg_catalog.int8 OPERATOR(pg_catalog.<<) 32)
                     OPERATOR(pg_catalog.|) l.objid::pg_catalog.int8 END,
           -- An oid above 2^31 is the negative int4 it was passed as.
           CASE WHEN l.objsubid OPERATOR(pg_catalog.=) 2
                THEN (l.classid::pg_catalog.int8 OPERATOR(pg_catalog.-)
                      CASE WHEN l.classid::pg_catalog.int8 OPERATOR(pg_catalog.>=) 2147483648 THEN 4294967296 ELSE 0 END)::pg_catalog.int4 END,
           CASE WHEN l.objsubid OPERATOR(pg_catalog.=) 2
                THEN (l.objid::pg_catalog.int8 OPERATOR(pg_catalog.-)
                      CASE WHEN l.objid::pg_catalog.int8 OPERATOR(pg_catalog.>=) 2147483648 THEN 4294967296 ELSE 0 END)::pg_catalog.int4 END,
           CASE l.mode WHEN 'ExclusiveLock' THEN 'exclusive' WHEN 'ShareLock' THEN 'shared' ELSE l.mode END,
           l.granted,
           l.pid,
           CASE WHEN NOT l.granted THEN l.waitstart END
      FROM pg_catalog.pg_locks l
     WHERE l.locktype OPERATOR(pg_catalog.=) 'advisory'
       AND l.database OPERATOR(pg_catalog.=) (SELECT d.oid FROM pg_catalog.pg_database d
                                               WHERE d.datname OPERATOR(pg_catalog.=) pg_catalog.current_database());
END;

-- Labels exist only when the extension is preloaded: the edition has none, like the
-- extension without shared_preload_libraries (no rows; label, scope, held_since are NULL).
CREATE OR REPLACE FUNCTION @extschema@.advlock_labels()
RETURNS TABLE(pid pg_catalog.int4, key pg_catalog.int8, mode pg_catalog.text, scope pg_catalog.text,
              held_since pg_catalog.timestamptz, label pg_catalog.text)
LANGUAGE sql VOLATILE STRICT PARALLEL RESTRICTED
BEGIN ATOMIC
    SELECT NULL::pg_catalog.int4, NULL::pg_catalog.int8, NULL::pg_catalog.text, NULL::pg_catalog.text,
           NULL::pg_catalog.timestamptz, NULL::pg_catalog.text
     WHERE false;
END;

-- Fencing tokens of held locks are recorded only when the extension is preloaded: none here,
-- like the extension without shared_preload_libraries (no rows; advlock_holders.token is NULL).
CREATE OR REPLACE FUNCTION @extschema@.advlock_tokens()
RETURNS TABLE(pid pg_catalog.int4, key pg_catalog.int8, mode pg_catalog.text, token pg_catalog.int8)
LANGUAGE sql VOLATILE STRICT PARALLEL RESTRICTED
BEGIN ATOMIC
    SELECT NULL::pg_catalog.int4, NULL::pg_catalog.int8, NULL::pg_catalog.text, NULL::pg_catalog.int8
     WHERE false;
END;
