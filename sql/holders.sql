-- advlock_holders: one row per advisory lock entry in the current database, holders and
-- waiters alike, with the backend behind it.
--
-- Written for the extension script, which may run as a superuser for a database owner
-- (trusted extension): every reference is schema-qualified, operators included, and function
-- bodies are parsed at creation (BEGIN ATOMIC) or run with a fixed search_path.
-- No SECURITY DEFINER anywhere: pg_stat_activity's own rules decide what a caller sees.

-- The label and token functions return a handful of rows (what advlock recorded), not the
-- default estimate of 1000: with it the planner sorts every lock row for a merge join.
ALTER FUNCTION @extschema@.advlock_labels() ROWS 10;
ALTER FUNCTION @extschema@.advlock_tokens() ROWS 10;

CREATE VIEW @extschema@.advlock_holders AS
-- Backends first, once each: joining pg_stat_activity per lock row would look up the role of
-- the same backend thousands of times.
WITH backends AS MATERIALIZED (
    SELECT a.pid, a.application_name, a.usename, a.client_addr, a.state, a.state_change,
           a.xact_start, a.query_start, a.query
      FROM pg_catalog.pg_stat_activity a
),
-- One snapshot of the lock table (advlock_lock_entries() copies it under every partition lock):
-- rows, holders and blockers all come from it, so a waiter is never shown blocked by nobody.
-- pg_stat_activity is a second, separate snapshot: the activity columns may be a moment apart.
entries AS MATERIALIZED (
    SELECT e.key, e.key1, e.key2, e.mode, e.granted, e.pid, e.waiting_since,
           -- One hashable join key per lock: (kind, k) with kind 1 for int8 keys, 2 for int4 pairs.
           CASE WHEN e.key IS NOT NULL THEN 1 ELSE 2 END AS kind,
           COALESCE(e.key, (e.key1::pg_catalog.int8 OPERATOR(pg_catalog.<<) 32)
                           OPERATOR(pg_catalog.|) (e.key2::pg_catalog.int8 OPERATOR(pg_catalog.&) 4294967295)) AS k
      FROM @extschema@.advlock_lock_entries() e
),
-- Waiters only (a backend waits for one lock at a time, so one row per waiting pid): who blocks
-- them, as pg_blocking_pids() defines it but from the same snapshot. Holders of a conflicting
-- mode of the same lock, and waiters for a conflicting mode queued ahead (earlier waiting_since;
-- one whose wait start is not yet recorded joined last). Should that order leave nobody (two
-- wait starts recorded out of queue order), every conflicting waiter: in a consistent snapshot
-- a waiter always has a conflicting holder or waiter. A prepared transaction shows as pid 0,
-- as in pg_blocking_pids(). A hash join on (kind, k): no per-row work when nobody waits.
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
SELECT
    l.key,                          -- int8 keys (pg_advisory_*(bigint), advlock); NULL otherwise
    l.key1,                         -- pg_advisory_*(int4, int4) keys; NULL otherwise
    l.key2,
    l.mode,                         -- 'exclusive' | 'shared'
    l.granted,
    l.pid,
    a.application_name,
    a.usename::pg_catalog.text                                                          AS usename,
    a.client_addr,
    a.state                                                                             AS backend_state,
    a.state_change,
    a.xact_start,
    a.query_start,
    a.query,
    i.idle_for,
    -- The leak signal: granted, outside any transaction (so necessarily a session lock),
    -- idle for at least advlock.idle_threshold. NULL (unknown), not false, for a holder whose
    -- activity pg_stat_activity hides from the caller: a blind spot must not look healthy.
    CASE WHEN l.granted AND a.query OPERATOR(pg_catalog.=) '<insufficient privilege>' THEN NULL
         ELSE COALESCE(l.granted
                       AND a.state OPERATOR(pg_catalog.=) 'idle'
                       AND i.idle_for OPERATOR(pg_catalog.>=) (SELECT @extschema@.advlock_idle_threshold()),
                       false)
    END                                                                                 AS is_idle_holder,
    l.waiting_since,
    b.blocked_by,
    -- Preloaded only (NULL otherwise): what advlock recorded when it granted this lock.
    lb.label,
    lb.scope,
    lb.held_since,
    tk.token                        -- the fencing token of the latest advlock_try_with_token hold
-- advlock_lock_entries(): pg_lock_status() filtered to this database's advisory locks in C,
-- before any tuple is built, so other locks cost next to nothing.
FROM entries l
LEFT JOIN backends a ON a.pid OPERATOR(pg_catalog.=) l.pid
LEFT JOIN blocked b ON NOT l.granted AND b.pid OPERATOR(pg_catalog.=) l.pid
-- A recorded label only ever shows next to a granted lock of the same backend, key and mode
-- that the lock manager reports right now: a stale entry matches nothing.
LEFT JOIN @extschema@.advlock_labels() lb
       ON l.granted
      AND lb.pid OPERATOR(pg_catalog.=) l.pid
      AND lb.key OPERATOR(pg_catalog.=) l.key
      AND lb.mode OPERATOR(pg_catalog.=) l.mode
LEFT JOIN @extschema@.advlock_tokens() tk
       ON l.granted
      AND tk.pid OPERATOR(pg_catalog.=) l.pid
      AND tk.key OPERATOR(pg_catalog.=) l.key
      AND tk.mode OPERATOR(pg_catalog.=) l.mode
-- idle_for is computed once per row so is_idle_holder and idle_for never disagree.
CROSS JOIN LATERAL (
    SELECT CASE WHEN a.state OPERATOR(pg_catalog.~~) 'idle%'
                THEN pg_catalog.clock_timestamp() OPERATOR(pg_catalog.-) a.state_change END AS idle_for
) i;

-- Like pg_locks and pg_stat_activity, readable by everyone; what each row shows is decided by
-- pg_stat_activity's own rules for the caller (no SECURITY DEFINER).
GRANT SELECT ON @extschema@.advlock_holders TO PUBLIC;

COMMENT ON VIEW @extschema@.advlock_holders IS
  'advlock: advisory locks in this database, holders and waiters, with their backends';

-- The idle-holder rows: granted session locks on backends idle (outside any transaction)
-- for at least older_than (NULL: advlock.idle_threshold). plpgsql rather than SQL so the
-- argument is validated even when no lock is held at all.
CREATE FUNCTION @extschema@.advlock_idle_holders(older_than pg_catalog.interval DEFAULT NULL)
RETURNS SETOF @extschema@.advlock_holders
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    threshold interval;
    hidden int;
BEGIN
    IF older_than < interval '0' THEN
        RAISE EXCEPTION 'argument "older_than" of advlock_idle_holders must not be a negative interval'
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'Pass how long a holder must have been idle, e.g. interval ''5 minutes'', or NULL for advlock.idle_threshold.';
    END IF;
    threshold := @extschema@.advlock_idle_threshold(older_than);
    SELECT count(DISTINCT h.pid) INTO hidden
      FROM @extschema@.advlock_holders h
     WHERE h.granted AND h.query = '<insufficient privilege>';
    IF hidden > 0 THEN
        RAISE WARNING 'advlock_idle_holders cannot see the activity of % backend(s) holding advisory locks', hidden
            USING DETAIL = format('pg_stat_activity hides their state from role %s: idle holders among them are not listed.', current_user),
                  HINT = format('Monitoring needs pg_read_all_stats (or pg_monitor): GRANT pg_monitor TO %s;', quote_ident(current_user));
    END IF;
    RETURN QUERY
        SELECT h.*
          FROM @extschema@.advlock_holders h
         WHERE h.granted
           AND h.backend_state = 'idle'
           AND h.idle_for >= threshold
         ORDER BY h.idle_for DESC, h.pid, h.key;
END
$fn$;

-- advlock_leak_count is in Rust (src/metrics.rs): it reads the lock table only when a backend
-- is idle past the threshold, so the healthy case costs a look at the backends.

-- The blunt last resort: terminate the backends behind idle holders, with the caller's own
-- rights (pg_terminate_backend checks them), never the caller's own backend.
CREATE FUNCTION @extschema@.advlock_terminate_idle_holders(older_than pg_catalog.interval,
                                                            dry_run pg_catalog.bool DEFAULT true)
RETURNS TABLE(pid pg_catalog.int4, application_name pg_catalog.text,
              keys pg_catalog.int8[], terminated pg_catalog.bool)
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $fn$
#variable_conflict use_column
DECLARE
    r record;
BEGIN
    IF older_than IS NULL THEN
        RAISE EXCEPTION 'argument "older_than" of advlock_terminate_idle_holders must not be null'
            USING ERRCODE = 'null_value_not_allowed',
                  HINT = 'Pass how long a holder must have been idle, e.g. interval ''10 minutes''; there is no default on purpose.';
    END IF;
    IF older_than < interval '0' THEN
        RAISE EXCEPTION 'argument "older_than" of advlock_terminate_idle_holders must not be a negative interval'
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'Pass how long a holder must have been idle, e.g. interval ''10 minutes''.';
    END IF;
    IF dry_run IS NULL THEN
        RAISE EXCEPTION 'argument "dry_run" of advlock_terminate_idle_holders must not be null'
            USING ERRCODE = 'null_value_not_allowed',
                  HINT = 'Use dry_run => true to list, dry_run => false to terminate.';
    END IF;
    FOR r IN
        SELECT h.pid AS holder_pid,
               min(h.application_name) AS holder_app,
               coalesce(array_agg(DISTINCT h.key ORDER BY h.key) FILTER (WHERE h.key IS NOT NULL),
                        '{}'::int8[]) AS holder_keys
          FROM @extschema@.advlock_idle_holders(older_than) h
         WHERE h.pid <> pg_backend_pid()
         GROUP BY h.pid
         ORDER BY h.pid
    LOOP
        pid := r.holder_pid;
        application_name := r.holder_app;
        keys := r.holder_keys;
        terminated := false;
        IF NOT dry_run THEN
            BEGIN
                terminated := pg_terminate_backend(r.holder_pid);
            EXCEPTION WHEN insufficient_privilege THEN
                -- pg_signal_backend never reaches a superuser's backend: say so instead.
                RAISE WARNING 'not allowed to terminate PID % (application_name %)',
                    r.holder_pid, quote_literal(r.holder_app)
                    USING HINT = CASE WHEN (SELECT ro.rolsuper FROM pg_stat_activity a
                                              JOIN pg_roles ro ON ro.oid = a.usesysid
                                             WHERE a.pid = r.holder_pid)
                                      THEN 'That backend runs as a superuser: only a superuser can terminate it.'
                                      ELSE 'Terminating another role''s backend needs that role''s privileges or pg_signal_backend.'
                                 END;
            END;
        END IF;
        RETURN NEXT;
    END LOOP;
END
$fn$;
