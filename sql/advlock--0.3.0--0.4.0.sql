-- advlock 0.3.0 -> 0.4.0. The objects of a fresh 0.4.0 install, reached from 0.3.0
-- (pg_test/upgrade compares the two catalog by catalog).
--
-- The failed-statement rule under transaction control (a session lock kept through a ROLLBACK
-- its own statement asked for, released when a statement fails after a COMMIT inside it) lives
-- in the library: no SQL-visible change for it. New: leases and semaphores (advlock_lease,
-- advlock_lease_renew, advlock_lease_release, the advlock_leases and advlock_lease_stats views);
-- the lock table's use (the advlock_lock_table view). advlock_holders is now read in one pass
-- (advlock_holder_entries): the view and the idle-holder functions are replaced in place, their
-- columns and signatures unchanged.
-- The generated section is written by scripts/upgrade_sections.py 0.4.0.

-- <generated: new objects>
-- advlock::leases::advlock_lease
CREATE  FUNCTION "advlock_lease"(
	"key" bigint, /* Option < i64 > */
	"ttl_ms" INT, /* Option < i32 > */
	"timeout_ms" INT, /* Option < i32 > */
	"slots" INT DEFAULT 1 /* Option < i32 > */
) RETURNS bigint /* Option < i64 > */
VOLATILE PARALLEL UNSAFE 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'lease_key_wrapper';

-- advlock::leases::advlock_lease
CREATE  FUNCTION "advlock_lease"(
	"ns" text, /* Option < ServerText > */
	"id" text, /* Option < ServerText > */
	"ttl_ms" INT, /* Option < i32 > */
	"timeout_ms" INT, /* Option < i32 > */
	"slots" INT DEFAULT 1 /* Option < i32 > */
) RETURNS bigint /* Option < i64 > */
VOLATILE PARALLEL UNSAFE 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'lease_text_wrapper';

-- advlock::leases::advlock_lease
CREATE  FUNCTION "advlock_lease"(
	"ns" text, /* Option < ServerText > */
	"id" bigint, /* Option < i64 > */
	"ttl_ms" INT, /* Option < i32 > */
	"timeout_ms" INT, /* Option < i32 > */
	"slots" INT DEFAULT 1 /* Option < i32 > */
) RETURNS bigint /* Option < i64 > */
VOLATILE PARALLEL UNSAFE 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'lease_int_wrapper';

-- advlock::leases::advlock_lease_entries
CREATE  FUNCTION "advlock_lease_entries"() RETURNS TABLE (
	"key" bigint,  /* i64 */
	"label" text,  /* Option < ServerTextOut > */
	"slots" INT,  /* i32 */
	"lease" bigint,  /* Option < i64 > */
	"granted" bool,  /* bool */
	"role" oid,  /* Option < pg_sys :: Oid > */
	"pid" INT,  /* i32 */
	"application_name" text,  /* Option < ServerTextOut > */
	"granted_at" timestamp with time zone,  /* Option < TimestampWithTimeZone > */
	"renewed_at" timestamp with time zone,  /* Option < TimestampWithTimeZone > */
	"expires_at" timestamp with time zone,  /* Option < TimestampWithTimeZone > */
	"waiting_since" timestamp with time zone  /* Option < TimestampWithTimeZone > */
)
STRICT VOLATILE PARALLEL RESTRICTED
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'advlock_lease_entries_wrapper';

-- advlock::leases::advlock_lease_release
CREATE  FUNCTION "advlock_lease_release"(
	"lease" bigint /* Option < i64 > */
) RETURNS bool /* bool */
VOLATILE PARALLEL UNSAFE 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'lease_release_wrapper';

-- advlock::leases::advlock_lease_renew
CREATE  FUNCTION "advlock_lease_renew"(
	"lease" bigint, /* Option < i64 > */
	"ttl_ms" INT /* Option < i32 > */
) RETURNS bool /* bool */
VOLATILE PARALLEL UNSAFE 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'lease_renew_wrapper';

-- advlock::leases::advlock_lease_stats
CREATE  FUNCTION "advlock_lease_stats"() RETURNS TABLE (
	"capacity" bigint,  /* i64 */
	"held" bigint,  /* i64 */
	"waiting" bigint,  /* i64 */
	"granted" bigint,  /* i64 */
	"released" bigint,  /* i64 */
	"expired" bigint,  /* i64 */
	"renewed" bigint,  /* i64 */
	"timed_out" bigint  /* i64 */
)
STRICT VOLATILE PARALLEL RESTRICTED
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'advlock_lease_stats_wrapper';

-- advlock::lock_table::advlock_lock_table_entries
CREATE  FUNCTION "advlock_lock_table_entries"() RETURNS TABLE (
	"datname" text,  /* Option < ServerTextOut > */
	"lock_entries" bigint,  /* i64 */
	"advisory_entries" bigint,  /* i64 */
	"capacity" bigint  /* i64 */
)
STRICT VOLATILE PARALLEL SAFE
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'advlock_lock_table_entries_wrapper';


-- Waits that hold no snapshot (src/snapshot_free_wait.rs): procedures, so that they can commit
-- before waiting. C functions of the library, declared here (pgrx declares functions only).
CREATE PROCEDURE @extschema@.advlock_wait_lock(
    key bigint, timeout_ms integer, mode text DEFAULT 'exclusive', INOUT acquired boolean DEFAULT NULL)
  LANGUAGE c AS 'MODULE_PATHNAME', 'advlock_wait_lock';
CREATE PROCEDURE @extschema@.advlock_wait_lease(
    key bigint, ttl_ms integer, timeout_ms integer, slots integer DEFAULT 1, INOUT lease bigint DEFAULT NULL)
  LANGUAGE c AS 'MODULE_PATHNAME', 'advlock_wait_lease';


-- advlock_holders' feed (src/diagnostics.rs): a C function of the library, declared here.
CREATE FUNCTION @extschema@.advlock_holder_entries(pids integer[] DEFAULT NULL)
RETURNS TABLE(key bigint, key1 integer, key2 integer, mode text, granted boolean, pid integer,
              waiting_since timestamp with time zone, blocked_by integer[], label text,
              scope text, held_since timestamp with time zone, token bigint)
VOLATILE PARALLEL RESTRICTED
LANGUAGE c AS 'MODULE_PATHNAME', 'advlock_holder_entries';

-- advlock_leases: leases held and awaited in this database (src/leases.rs), from the shared
-- lease table; empty without shared_preload_libraries. Same conventions as holders.sql:
-- schema-qualified, no SECURITY DEFINER.

CREATE VIEW @extschema@.advlock_leases AS
SELECT e.key, e.label, e.slots, e.lease, e.granted,
       pg_catalog.pg_get_userbyid(e.role) AS role,
       e.pid, e.application_name, e.granted_at, e.renewed_at, e.expires_at, e.waiting_since
  FROM @extschema@.advlock_lease_entries() e;

COMMENT ON VIEW @extschema@.advlock_leases IS
  'advlock: one row per lease held (lease id = fencing token, role, who took or last renewed it, expires_at) and per backend waiting for one (waiting_since) in this database; needs shared_preload_libraries';

CREATE VIEW @extschema@.advlock_lease_stats AS
SELECT s.capacity, s.held, s.waiting, s.granted, s.released, s.expired, s.renewed, s.timed_out
  FROM @extschema@.advlock_lease_stats() s;

COMMENT ON VIEW @extschema@.advlock_lease_stats IS
  'advlock: lease table use (capacity = advlock.max_leases, held, waiting) and totals since the server started, all databases: granted, released, expired (not renewed in time), renewed, timed_out waits; needs shared_preload_libraries';

-- Readable by everyone, like advlock_holders and pg_locks.
GRANT SELECT ON @extschema@.advlock_leases, @extschema@.advlock_lease_stats TO PUBLIC;

-- One row per advisory lock entry in the current database, holders and waiters alike, with the
-- backend behind it: the lock rows from advlock_holder_entries() (one snapshot of the lock
-- table; blocked_by and the recorded labels computed there, in Rust), each joined to its
-- backend in pg_stat_activity (a second, separate snapshot: the activity columns may be a moment
-- apart). The planner computes only the columns a query reads, and a query that reads no backend
-- column (count(*), WHERE NOT granted, WHERE key = ...) does not join at all: DISTINCT ON (pid)
-- proves the join cannot duplicate a row. (A plain view, not a view over a SQL function: the
-- planner inlines a function body by re-checking every column of its joins, which costs more
-- than the whole query at a thousand locks.)
CREATE OR REPLACE VIEW @extschema@.advlock_holders AS
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
            RAISE WARNING '% cannot see the activity of % backend(s) holding advisory locks', caller, hidden
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
CREATE OR REPLACE FUNCTION @extschema@.advlock_idle_holders(older_than pg_catalog.interval DEFAULT NULL)
RETURNS SETOF @extschema@.advlock_holders
LANGUAGE sql STABLE PARALLEL RESTRICTED
BEGIN ATOMIC
    SELECT * FROM @extschema@.advlock_idle_holder_rows(older_than, 'advlock_idle_holders');
END;

-- advlock_leak_count is in Rust (src/metrics.rs): it reads the lock table only when a backend
-- is idle past the threshold, so the healthy case costs a look at the backends.

-- The blunt last resort: terminate the backends behind idle holders, with the caller's own
-- rights (pg_terminate_backend checks them), never the caller's own backend.
CREATE OR REPLACE FUNCTION @extschema@.advlock_terminate_idle_holders(older_than pg_catalog.interval,
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

-- advlock_lock_table: how full the shared lock table is, per database (src/lock_table.rs).
-- Every advisory lock takes an entry; so does every other lock that is not a fast-path
-- relation lock. When the table is full, every query that needs a new entry fails with 53200
-- "out of shared memory". Same conventions as holders.sql: schema-qualified, no SECURITY DEFINER.

CREATE VIEW @extschema@.advlock_lock_table AS
SELECT t.datname::pg_catalog.name AS datname, t.lock_entries, t.advisory_entries, t.capacity
  FROM @extschema@.advlock_lock_table_entries() t;

COMMENT ON VIEW @extschema@.advlock_lock_table IS
  'advlock: shared lock table use per database (datname NULL: locks of no database, e.g. transaction ids): lock_entries of every type, advisory_entries among them, and the capacity max_locks_per_transaction * (max_connections + autovacuum, background and WAL sender slots + max_prepared_transactions); for exporters';

-- Counts only, like pg_locks: readable by everyone.
GRANT SELECT ON @extschema@.advlock_lock_table TO PUBLIC;
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

COMMENT ON FUNCTION @extschema@.advlock_holding(pg_catalog.int8, pg_catalog.text) IS
  'advlock: whether this backend holds the advisory lock on key in mode (any scope); the check a leader runs before each unit of work';
COMMENT ON FUNCTION @extschema@.advlock_holding(pg_catalog.text, pg_catalog.text, pg_catalog.text) IS
  'advlock: whether this backend holds the advisory lock on advlock_key(ns, id) in mode (any scope)';
COMMENT ON FUNCTION @extschema@.advlock_holding(pg_catalog.text, pg_catalog.int8, pg_catalog.text) IS
  'advlock: whether this backend holds the advisory lock on advlock_key(ns, id) in mode (any scope)';

COMMENT ON FUNCTION @extschema@.advlock_idle_threshold(pg_catalog.interval) IS
  'advlock: the idle threshold in effect: older_than, or the advlock.idle_threshold setting when NULL; rejects a negative interval';
COMMENT ON FUNCTION @extschema@.advlock_lock_entries() IS
  'advlock (internal, feeds the advlock_holders view; may change): the advisory locks of this database as the lock manager holds them (key, mode, granted, pid, waiting_since)';
COMMENT ON FUNCTION @extschema@.advlock_lock_table_entries() IS
  'advlock (internal, feeds the advlock_lock_table view; may change): shared lock table entries per database (by name), advisory entries among them, and the table''s capacity';
COMMENT ON FUNCTION @extschema@.advlock_holder_entries(pg_catalog.int4[]) IS
  'advlock (internal, feeds the advlock_holders view; may change): the advisory locks of this database from one snapshot of the lock table, with blocked_by for waiters and, preloaded, the recorded label, scope, held_since and token; pids: only the granted locks of those backends';
COMMENT ON FUNCTION @extschema@.advlock_idle_holder_rows(pg_catalog.interval, pg_catalog.text) IS
  'advlock (internal, behind advlock_idle_holders and advlock_terminate_idle_holders; may change): the idle-holder rows, most idle first; validates older_than and warns about hidden holders, naming caller';
COMMENT ON FUNCTION @extschema@.advlock_labels() IS
  'advlock (internal, feeds advlock_holders.label, scope and held_since; may change): the labels (ns/id), scopes and hold times recorded for locks held in this database, one row per backend, key and mode; no rows unless advlock is in shared_preload_libraries';
COMMENT ON FUNCTION @extschema@.advlock_tokens() IS
  'advlock (internal, feeds advlock_holders.token; may change): the fencing tokens of locks held in this database through advlock_try_with_token, one row per backend, key and mode (the latest token); no rows unless advlock is in shared_preload_libraries';
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
