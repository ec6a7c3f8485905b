-- advlock SQL edition: advlock_leak_count and advlock_metrics() (src/metrics.rs), from
-- pg_locks and pg_stat_activity. The extension reads the lock table and the backend-status
-- snapshot in Rust; here both are SQL views, so these read the whole lock table (slower on a
-- server holding many locks). Same rules: a backend is a leaked holder when pg_stat_activity
-- shows it 'idle' (outside any transaction) for at least the threshold, a hidden holder when
-- it hides that backend's activity from the caller ('<insufficient privilege>').
-- sql/metrics.sql, the extension's view over advlock_metrics(), follows in the built script.

-- Backends holding advisory locks in this database while idle for at least older_than (NULL:
-- advlock.idle_threshold); 42501 when a holder's activity is hidden from the caller.
CREATE OR REPLACE FUNCTION @extschema@.advlock_leak_count(older_than pg_catalog.interval DEFAULT NULL)
RETURNS pg_catalog.int4
LANGUAGE plpgsql STABLE PARALLEL RESTRICTED
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    threshold interval;
    leaks int;
    hidden int;
BEGIN
    IF older_than < interval '0' THEN
        RAISE EXCEPTION 'argument "older_than" of advlock_leak_count must not be a negative interval'
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'Pass how long a holder must have been idle, e.g. interval ''5 minutes'', or NULL for advlock.idle_threshold.';
    END IF;
    threshold := @extschema@.advlock_idle_threshold(older_than);
    -- Only the candidates (hidden, or idle past the threshold) can make the answer non-zero:
    -- the lock table is joined to them alone.
    WITH candidates AS MATERIALIZED (
        SELECT a.pid, a.query = '<insufficient privilege>' AS hidden
          FROM pg_stat_activity a
         WHERE a.datname = current_database()
           AND (a.query = '<insufficient privilege>'
                OR (a.state = 'idle' AND clock_timestamp() - a.state_change >= threshold))
    )
    SELECT count(DISTINCT c.pid) FILTER (WHERE NOT c.hidden),
           count(DISTINCT c.pid) FILTER (WHERE c.hidden)
      INTO leaks, hidden
      FROM candidates c
     WHERE EXISTS (SELECT FROM pg_locks l
                    WHERE l.pid = c.pid AND l.locktype = 'advisory' AND l.granted
                      AND l.database = (SELECT d.oid FROM pg_database d WHERE d.datname = current_database()));
    -- A count that cannot see every holder must not read as "no leak".
    IF hidden > 0 THEN
        RAISE EXCEPTION 'advlock_leak_count cannot see the activity of % % holding advisory locks',
            hidden, CASE WHEN hidden = 1 THEN 'backend' ELSE 'backends' END
            USING ERRCODE = 'insufficient_privilege',
                  DETAIL = format('pg_stat_activity hides their state from role %s, so a leak among them could not be counted.', current_user),
                  HINT = format('Monitoring needs pg_read_all_stats (or pg_monitor): GRANT pg_monitor TO %s;', quote_ident(current_user));
    END IF;
    RETURN leaks;
END
$fn$;

-- 0.5.0 added idle_terminations to advlock_metrics(): a re-run over an older edition drops the
-- old function and its view first (CREATE OR REPLACE cannot change a result type); the view
-- is made again below.
DO $do$
BEGIN
    IF to_regprocedure('@extschema@.advlock_metrics()') IS NOT NULL
       AND NOT EXISTS (SELECT FROM pg_catalog.pg_proc p
                        WHERE p.oid OPERATOR(pg_catalog.=) to_regprocedure('@extschema@.advlock_metrics()')
                          AND 'idle_terminations' OPERATOR(pg_catalog.=) ANY (p.proargnames)) THEN
        DROP VIEW IF EXISTS @extschema@.advlock_metrics;
        DROP FUNCTION @extschema@.advlock_metrics();
    END IF;
END
$do$;

-- The rows of the advlock_metrics view, as the extension without shared_preload_libraries
-- returns them: one row, ns NULL (no namespace is known), the counters and oldest_hold_seconds
-- NULL, preloaded false, idle_terminations NULL. Holders are backends (a prepared transaction
-- counts as pid 0).
CREATE OR REPLACE FUNCTION @extschema@.advlock_metrics()
RETURNS TABLE(ns pg_catalog.text, holders pg_catalog.int4, locks pg_catalog.int4,
              leaked_holders pg_catalog.int4, leaked_locks pg_catalog.int4,
              idle_in_transaction_holders pg_catalog.int4, hidden_holders pg_catalog.int4,
              waiters pg_catalog.int4, oldest_wait_seconds pg_catalog.float8,
              oldest_hold_seconds pg_catalog.float8, acquisitions pg_catalog.int8,
              immediate pg_catalog.int8, waits pg_catalog.int8, timeouts pg_catalog.int8,
              wait_seconds pg_catalog.float8, preloaded pg_catalog.bool,
              idle_terminations pg_catalog.int8)
LANGUAGE sql VOLATILE STRICT PARALLEL RESTRICTED   -- STRICT as the extension's (pgrx marks argument-less functions so)
BEGIN ATOMIC
    WITH params AS MATERIALIZED (
        SELECT pg_catalog.clock_timestamp() AS now, @extschema@.advlock_idle_threshold() AS threshold
    ),
    backends AS MATERIALIZED (
        SELECT a.pid,
               a.query OPERATOR(pg_catalog.=) '<insufficient privilege>' AS hidden,
               a.state OPERATOR(pg_catalog.=) 'idle'
                   AND (p.now OPERATOR(pg_catalog.-) a.state_change) OPERATOR(pg_catalog.>=) p.threshold AS leaked,
               a.state OPERATOR(pg_catalog.~~) 'idle in transaction%' AS idle_in_transaction
          FROM pg_catalog.pg_stat_activity a CROSS JOIN params p
         WHERE a.datid OPERATOR(pg_catalog.=) (SELECT d.oid FROM pg_catalog.pg_database d
                                                WHERE d.datname OPERATOR(pg_catalog.=) pg_catalog.current_database())
    ),
    entries AS MATERIALIZED (
        SELECT e.granted, COALESCE(e.pid, 0) AS pid, e.waiting_since,
               COALESCE(b.hidden, false) AS hidden,
               COALESCE(b.leaked, false) AS leaked,
               COALESCE(b.idle_in_transaction, false) AS idle_in_transaction
          FROM @extschema@.advlock_lock_entries() e
          LEFT JOIN backends b ON b.pid OPERATOR(pg_catalog.=) e.pid
    )
    SELECT NULL::pg_catalog.text,
           (pg_catalog.count(DISTINCT e.pid) FILTER (WHERE e.granted))::pg_catalog.int4,
           (pg_catalog.count(*) FILTER (WHERE e.granted))::pg_catalog.int4,
           (pg_catalog.count(DISTINCT e.pid) FILTER (WHERE e.granted AND e.leaked))::pg_catalog.int4,
           (pg_catalog.count(*) FILTER (WHERE e.granted AND e.leaked))::pg_catalog.int4,
           (pg_catalog.count(DISTINCT e.pid) FILTER (WHERE e.granted AND e.idle_in_transaction))::pg_catalog.int4,
           (pg_catalog.count(DISTINCT e.pid) FILTER (WHERE e.granted AND e.hidden))::pg_catalog.int4,
           (pg_catalog.count(*) FILTER (WHERE NOT e.granted))::pg_catalog.int4,
           pg_catalog.max(GREATEST(pg_catalog.date_part('epoch', p.now OPERATOR(pg_catalog.-) e.waiting_since), 0::pg_catalog.float8))
               FILTER (WHERE NOT e.granted AND e.waiting_since IS NOT NULL),
           NULL::pg_catalog.float8,
           NULL::pg_catalog.int8, NULL::pg_catalog.int8, NULL::pg_catalog.int8, NULL::pg_catalog.int8,
           NULL::pg_catalog.float8,
           false,
           NULL::pg_catalog.int8   -- advlock.idle_session_lock_timeout is the extension's only
      FROM params p
      LEFT JOIN entries e ON true
     GROUP BY p.now;
END;
