-- advlock_holders: one row per advisory lock entry in the current database, holders and
-- waiters alike, with the backend behind it.
--
-- Written for the extension script, which may run as a superuser for a database owner
-- (trusted extension): every reference is schema-qualified, operators included, and function
-- bodies are parsed at creation (BEGIN ATOMIC) or run with a fixed search_path.
-- No SECURITY DEFINER anywhere: pg_stat_activity's own rules decide what a caller sees.

-- The label and token functions return a handful of rows (what advlock recorded), not the
-- default estimate of 1000, so a query that joins them with the lock table (they are
-- diagnostics of their own since 0.4.0: advlock_holders reads labels and tokens itself) is not
-- planned for a thousand.
ALTER FUNCTION @extschema@.advlock_labels() ROWS 10;
ALTER FUNCTION @extschema@.advlock_tokens() ROWS 10;

-- One row per advisory lock entry in the current database, holders and waiters alike, with the
-- backend behind it: the lock rows from advlock_holder_entries() (one snapshot of the lock
-- table; blocked_by and the recorded labels computed there, in Rust), each joined to its
-- backend in pg_stat_activity (a second, separate snapshot: the activity columns may be a moment
-- apart). The planner computes only the columns a query reads, and a query that reads no backend
-- column (count(*), WHERE NOT granted, WHERE key = ...) does not join at all: DISTINCT ON (pid)
-- proves the join cannot duplicate a row. (A plain view, not a view over a SQL function: the
-- planner inlines a function body by re-checking every column of its joins, which costs more
-- than the whole query at a thousand locks.)
CREATE VIEW @extschema@.advlock_holders AS
SELECT
    l.key,                          -- int8 keys (pg_advisory_*(bigint), advlock); NULL otherwise
    l.key1,                         -- pg_advisory_*(int4, int4) keys; NULL otherwise
    l.key2,
    l.mode,                         -- 'exclusive' | 'shared'
    l.granted,
    l.pid,
    a.application_name,
    -- A role name, compared as pg_stat_activity.usename is (collation "C").
    a.usename::pg_catalog.text COLLATE pg_catalog."C"                                   AS usename,
    a.client_addr,
    a.state                                                                             AS backend_state,
    a.state_change,
    a.xact_start,
    a.query_start,
    a.query,
    a.idle_for,
    -- The leak signal: granted, outside any transaction (so necessarily a session lock),
    -- idle for at least advlock.idle_threshold. NULL (unknown), not false, for a holder whose
    -- activity pg_stat_activity hides from the caller: a blind spot must not look healthy.
    CASE WHEN l.granted AND a.query OPERATOR(pg_catalog.=) '<insufficient privilege>' THEN NULL
         ELSE COALESCE(l.granted
                       AND a.state OPERATOR(pg_catalog.=) 'idle'
                       AND a.idle_for OPERATOR(pg_catalog.>=) (SELECT @extschema@.advlock_idle_threshold()),
                       false)
    END                                                                                 AS is_idle_holder,
    l.waiting_since,
    l.blocked_by,
    -- Preloaded only (NULL otherwise): what advlock recorded when it granted this lock.
    l.label,
    l.scope,
    l.held_since,
    l.token                         -- the fencing token of the latest advlock_try_with_token hold
  FROM @extschema@.advlock_holder_entries() l
  -- idle_for is computed once per backend, so is_idle_holder and idle_for never disagree.
  LEFT JOIN (SELECT DISTINCT ON (s.pid)
                    s.pid, s.application_name, s.usename, s.client_addr, s.state, s.state_change,
                    s.xact_start, s.query_start, s.query,
                    CASE WHEN s.state OPERATOR(pg_catalog.~~) 'idle%'
                         THEN pg_catalog.clock_timestamp() OPERATOR(pg_catalog.-) s.state_change END AS idle_for
               FROM pg_catalog.pg_stat_activity s
              ORDER BY s.pid) a
         ON a.pid OPERATOR(pg_catalog.=) l.pid;

-- Like pg_locks and pg_stat_activity, readable by everyone; what each row shows is decided by
-- pg_stat_activity's own rules for the caller (no SECURITY DEFINER).
GRANT SELECT ON @extschema@.advlock_holders TO PUBLIC;

COMMENT ON VIEW @extschema@.advlock_holders IS
  'advlock: advisory locks in this database, holders and waiters, with their backends';

-- The idle-holder rows, most idle first: granted locks on backends of this database idle
-- (outside any transaction) for at least older_than (NULL: advlock.idle_threshold), for
-- advlock_idle_holders and advlock_terminate_idle_holders, whose name `caller` is in every
-- message. pg_stat_activity first (one row per backend): the lock table is not read at all when
-- no backend is idle long enough or hidden from the caller; is_idle_holder is true on every row
-- (decided by older_than, not by the setting). plpgsql, so the argument is validated even when
-- no lock is held at all, and the query is planned once per session.
CREATE FUNCTION @extschema@.advlock_idle_holder_rows(older_than pg_catalog.interval DEFAULT NULL,
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

-- The idle holders; is_idle_holder is true on every row (decided by older_than, not by the
-- setting).
CREATE FUNCTION @extschema@.advlock_idle_holders(older_than pg_catalog.interval DEFAULT NULL)
RETURNS SETOF @extschema@.advlock_holders
LANGUAGE sql STABLE PARALLEL RESTRICTED
BEGIN ATOMIC
    SELECT * FROM @extschema@.advlock_idle_holder_rows(older_than, 'advlock_idle_holders');
END;

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
          FROM @extschema@.advlock_idle_holder_rows(older_than, 'advlock_terminate_idle_holders') h
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
