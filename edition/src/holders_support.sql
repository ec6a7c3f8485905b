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

-- The rows of advlock_holders without the backend columns, as the extension's
-- advlock_holder_entries(pids) returns them: blocked_by for waiters, as pg_blocking_pids()
-- defines it but from the same pg_locks snapshot (holders of a conflicting mode of the same
-- lock, and waiters for a conflicting mode queued ahead: an earlier waitstart, one not yet
-- recorded joined last; should that order leave nobody, every conflicting waiter; a prepared
-- transaction as pid 0). No labels or tokens here (NULL), like the extension without preload.
-- pids: only the granted locks of those backends.
CREATE OR REPLACE FUNCTION @extschema@.advlock_holder_entries(pids pg_catalog.int4[] DEFAULT NULL)
RETURNS TABLE(key pg_catalog.int8, key1 pg_catalog.int4, key2 pg_catalog.int4, mode pg_catalog.text,
              granted pg_catalog.bool, pid pg_catalog.int4, waiting_since pg_catalog.timestamptz,
              blocked_by pg_catalog.int4[], label pg_catalog.text, scope pg_catalog.text,
              held_since pg_catalog.timestamptz, token pg_catalog.int8)
LANGUAGE sql VOLATILE PARALLEL RESTRICTED
BEGIN ATOMIC
    WITH entries AS MATERIALIZED (
        SELECT e.key, e.key1, e.key2, e.mode, e.granted, e.pid, e.waiting_since,
               CASE WHEN e.key IS NOT NULL THEN 1 ELSE 2 END AS kind,
               COALESCE(e.key, (e.key1::pg_catalog.int8 OPERATOR(pg_catalog.<<) 32)
                               OPERATOR(pg_catalog.|) (e.key2::pg_catalog.int8 OPERATOR(pg_catalog.&) 4294967295)) AS k
          FROM @extschema@.advlock_lock_entries() e
         WHERE pids IS NULL OR (e.granted AND e.pid OPERATOR(pg_catalog.=) ANY (pids))
    ),
    blocked AS (
        SELECT w.pid,
               COALESCE(
                   pg_catalog.array_agg(DISTINCT COALESCE(o.pid, 0) ORDER BY COALESCE(o.pid, 0))
                       FILTER (WHERE o.granted
                                  OR (o.waiting_since IS NOT NULL
                                      AND (w.waiting_since IS NULL
                                           OR o.waiting_since OPERATOR(pg_catalog.<) w.waiting_since))),
                   pg_catalog.array_agg(DISTINCT COALESCE(o.pid, 0) ORDER BY COALESCE(o.pid, 0))
                       FILTER (WHERE o.pid IS NOT NULL OR o.granted),
                   '{}'::pg_catalog.int4[]) AS blocked_by
          FROM entries w
          LEFT JOIN entries o
                 ON o.kind OPERATOR(pg_catalog.=) w.kind
                AND o.k OPERATOR(pg_catalog.=) w.k
                AND o.pid IS DISTINCT FROM w.pid
                AND (o.mode OPERATOR(pg_catalog.=) 'exclusive' OR w.mode OPERATOR(pg_catalog.=) 'exclusive')
         WHERE NOT w.granted
         GROUP BY w.pid
    )
    SELECT l.key, l.key1, l.key2, l.mode, l.granted, l.pid, l.waiting_since, b.blocked_by,
           NULL::pg_catalog.text, NULL::pg_catalog.text, NULL::pg_catalog.timestamptz, NULL::pg_catalog.int8
      FROM entries l
      LEFT JOIN blocked b ON NOT l.granted AND b.pid OPERATOR(pg_catalog.=) l.pid;
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
