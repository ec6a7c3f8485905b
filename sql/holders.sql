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

-- The rows of advlock_holders, written once for the view and for advlock_idle_holders: the lock
-- rows from advlock_holder_entries(pids) (one snapshot of the lock table, blocked_by and the
-- recorded labels computed in Rust), each joined to its backend in pg_stat_activity (a second,
-- separate snapshot: the activity columns may be a moment apart). A SQL function the planner
-- inlines (LANGUAGE sql, STABLE, no SET): a query that reads few columns computes only those,
-- and one that reads no backend column (count(*), WHERE NOT granted) does not join at all,
-- since DISTINCT ON (pid) proves the join cannot duplicate a row.
-- older_than decides is_idle_holder (NULL: advlock.idle_threshold).
CREATE FUNCTION @extschema@.advlock_holder_rows(pids pg_catalog.int4[], older_than pg_catalog.interval)
RETURNS TABLE(key pg_catalog.int8, key1 pg_catalog.int4, key2 pg_catalog.int4, mode pg_catalog.text,
              granted pg_catalog.bool, pid pg_catalog.int4, application_name pg_catalog.text,
              usename pg_catalog.text, client_addr pg_catalog.inet, backend_state pg_catalog.text,
              state_change pg_catalog.timestamptz, xact_start pg_catalog.timestamptz,
              query_start pg_catalog.timestamptz, query pg_catalog.text, idle_for pg_catalog.interval,
              is_idle_holder pg_catalog.bool, waiting_since pg_catalog.timestamptz,
              blocked_by pg_catalog.int4[], label pg_catalog.text, scope pg_catalog.text,
              held_since pg_catalog.timestamptz, token pg_catalog.int8)
LANGUAGE sql STABLE PARALLEL RESTRICTED
BEGIN ATOMIC
SELECT
    l.key,                          -- int8 keys (pg_advisory_*(bigint), advlock); NULL otherwise
    l.key1,                         -- pg_advisory_*(int4, int4) keys; NULL otherwise
    l.key2,
    l.mode,                         -- 'exclusive' | 'shared'
    l.granted,
    l.pid,
    a.application_name,
    a.usename::pg_catalog.text,
    a.client_addr,
    a.state,
    a.state_change,
    a.xact_start,
    a.query_start,
    a.query,
    a.idle_for,
    -- The leak signal: granted, outside any transaction (so necessarily a session lock),
    -- idle for at least the threshold. NULL (unknown), not false, for a holder whose
    -- activity pg_stat_activity hides from the caller: a blind spot must not look healthy.
    CASE WHEN l.granted AND a.query OPERATOR(pg_catalog.=) '<insufficient privilege>' THEN NULL
         ELSE COALESCE(l.granted
                       AND a.state OPERATOR(pg_catalog.=) 'idle'
                       AND a.idle_for OPERATOR(pg_catalog.>=) (SELECT @extschema@.advlock_idle_threshold(older_than)),
                       false)
    END,
    l.waiting_since,
    l.blocked_by,
    -- Preloaded only (NULL otherwise): what advlock recorded when it granted this lock.
    l.label,
    l.scope,
    l.held_since,
    l.token                         -- the fencing token of the latest advlock_try_with_token hold
  FROM @extschema@.advlock_holder_entries(pids) l
  -- idle_for is computed once per backend, so is_idle_holder and idle_for never disagree.
  LEFT JOIN (SELECT DISTINCT ON (s.pid)
                    s.pid, s.application_name, s.usename, s.client_addr, s.state, s.state_change,
                    s.xact_start, s.query_start, s.query,
                    CASE WHEN s.state OPERATOR(pg_catalog.~~) 'idle%'
                         THEN pg_catalog.clock_timestamp() OPERATOR(pg_catalog.-) s.state_change END AS idle_for
               FROM pg_catalog.pg_stat_activity s
              ORDER BY s.pid) a
         ON a.pid OPERATOR(pg_catalog.=) l.pid;
END;

-- One row per advisory lock entry in the current database, holders and waiters alike, with
-- the backend behind it.
CREATE VIEW @extschema@.advlock_holders AS
SELECT h.key, h.key1, h.key2, h.mode, h.granted, h.pid, h.application_name,
       -- A role name, compared as pg_stat_activity.usename is (collation "C").
       h.usename COLLATE pg_catalog."C" AS usename,
       h.client_addr, h.backend_state, h.state_change, h.xact_start, h.query_start, h.query,
       h.idle_for, h.is_idle_holder, h.waiting_since, h.blocked_by, h.label, h.scope,
       h.held_since, h.token
  FROM @extschema@.advlock_holder_rows(NULL, NULL) h;

-- Like pg_locks and pg_stat_activity, readable by everyone; what each row shows is decided by
-- pg_stat_activity's own rules for the caller (no SECURITY DEFINER).
GRANT SELECT ON @extschema@.advlock_holders TO PUBLIC;

COMMENT ON VIEW @extschema@.advlock_holders IS
  'advlock: advisory locks in this database, holders and waiters, with their backends';

-- The backends advlock_idle_holders and advlock_terminate_idle_holders look at: those of this
-- database idle (outside any transaction) for at least older_than (NULL:
-- advlock.idle_threshold), from pg_stat_activity alone, so the lock table is read only for
-- them, and not at all when there are none. Validates older_than, and warns when
-- pg_stat_activity hides holders from the caller; `caller` names the function in messages.
-- plpgsql rather than SQL so the argument is validated even when no lock is held at all.
CREATE FUNCTION @extschema@.advlock_idle_holder_pids(older_than pg_catalog.interval, caller pg_catalog.text)
RETURNS pg_catalog.int4[]
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    threshold interval;
    hidden_pids int4[];
    hidden int;
BEGIN
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
        SELECT count(DISTINCT e.pid) INTO hidden FROM @extschema@.advlock_holder_entries(hidden_pids) e;
        IF hidden > 0 THEN
            RAISE WARNING '% cannot see the activity of % backend(s) holding advisory locks', caller, hidden
                USING DETAIL = format('pg_stat_activity hides their state from role %s: idle holders among them are not listed.', current_user),
                      HINT = format('Monitoring needs pg_read_all_stats (or pg_monitor): GRANT pg_monitor TO %s;', quote_ident(current_user));
        END IF;
    END IF;
    RETURN COALESCE((SELECT array_agg(a.pid)
                       FROM pg_stat_activity a
                      WHERE a.datname = current_database()
                        AND a.state = 'idle'
                        AND clock_timestamp() - a.state_change >= threshold), '{}');
END
$fn$;

-- The idle-holder rows, most idle first: granted locks of those backends, rechecked against the
-- rows' own activity (the same pg_stat_activity snapshot, one per transaction). A SQL function
-- the planner inlines into its callers.
CREATE FUNCTION @extschema@.advlock_idle_holder_rows(older_than pg_catalog.interval, caller pg_catalog.text)
RETURNS SETOF @extschema@.advlock_holders
LANGUAGE sql STABLE PARALLEL RESTRICTED
BEGIN ATOMIC
    SELECT h.*
      FROM @extschema@.advlock_holder_rows(@extschema@.advlock_idle_holder_pids(older_than, caller), older_than) h
     WHERE h.granted
       AND h.backend_state OPERATOR(pg_catalog.=) 'idle'
       AND h.idle_for OPERATOR(pg_catalog.>=) (SELECT @extschema@.advlock_idle_threshold(older_than))
     ORDER BY h.idle_for DESC, h.pid, h.key;
END;

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
