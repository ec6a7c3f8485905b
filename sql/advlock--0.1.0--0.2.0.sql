-- advlock 0.1.0 -> 0.2.0: preloaded mode (labels in advlock_holders, per-namespace statistics).
-- The objects of a fresh 0.2.0 install, in the same form (pg_test/upgrade compares the two):
-- function definitions as `cargo pgrx schema` generates them, SQL from sql/holders.sql and
-- sql/stats.sql verbatim. CREATE OR REPLACE VIEW keeps advlock_holders' privileges and comment
-- and appends the new columns scope and held_since; label is now filled when preloaded.

CREATE  FUNCTION "advlock_labels"() RETURNS TABLE (
	"pid" INT,  /* i32 */
	"key" bigint,  /* i64 */
	"mode" TEXT,  /* & '_ str */
	"scope" TEXT,  /* & '_ str */
	"held_since" timestamp with time zone,  /* Option < TimestampWithTimeZone > */
	"label" text  /* Option < ServerTextOut > */
)
STRICT VOLATILE PARALLEL RESTRICTED
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'advlock_labels_wrapper';

CREATE OR REPLACE VIEW @extschema@.advlock_holders AS
-- Backends first, once each: joining pg_stat_activity per lock row would look up the role of
-- the same backend thousands of times.
WITH backends AS MATERIALIZED (
    SELECT a.pid, a.application_name, a.usename, a.client_addr, a.state, a.state_change,
           a.xact_start, a.query_start, a.query
      FROM pg_catalog.pg_stat_activity a
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
    -- idle for at least advlock.idle_threshold.
    COALESCE(l.granted
             AND a.state OPERATOR(pg_catalog.=) 'idle'
             AND i.idle_for OPERATOR(pg_catalog.>=) (SELECT @extschema@.advlock_idle_threshold()),
             false)                                                                     AS is_idle_holder,
    l.waiting_since,
    -- pg_blocking_pids takes every lock-partition lock: only call it for waiters.
    CASE WHEN NOT l.granted THEN pg_catalog.pg_blocking_pids(l.pid) END                 AS blocked_by,
    -- Preloaded only (NULL otherwise): what advlock recorded when it granted this lock.
    lb.label,
    lb.scope,
    lb.held_since
-- advlock_lock_entries(): pg_lock_status() filtered to this database's advisory locks in C,
-- before any tuple is built, so other locks cost next to nothing.
FROM @extschema@.advlock_lock_entries() l
LEFT JOIN backends a ON a.pid OPERATOR(pg_catalog.=) l.pid
-- A recorded label only ever shows next to a granted lock of the same backend, key and mode
-- that the lock manager reports right now: a stale entry matches nothing.
LEFT JOIN @extschema@.advlock_labels() lb
       ON l.granted
      AND lb.pid OPERATOR(pg_catalog.=) l.pid
      AND lb.key OPERATOR(pg_catalog.=) l.key
      AND lb.mode OPERATOR(pg_catalog.=) l.mode
-- idle_for is computed once per row so is_idle_holder and idle_for never disagree.
CROSS JOIN LATERAL (
    SELECT CASE WHEN a.state OPERATOR(pg_catalog.~~) 'idle%'
                THEN pg_catalog.clock_timestamp() OPERATOR(pg_catalog.-) a.state_change END AS idle_for
) i;

CREATE  FUNCTION "advlock_stats"() RETURNS TABLE (
	"ns" text,  /* Option < ServerTextOut > */
	"acquisitions" bigint,  /* i64 */
	"immediate" bigint,  /* i64 */
	"waits" bigint,  /* i64 */
	"timeouts" bigint,  /* i64 */
	"total_wait_time" double precision,  /* f64 */
	"max_wait_time" double precision,  /* f64 */
	"stats_since" timestamp with time zone  /* Option < TimestampWithTimeZone > */
)
STRICT VOLATILE PARALLEL SAFE
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'advlock_stats_wrapper';

CREATE  FUNCTION "advlock_stats_info"() RETURNS TABLE (
	"labels_in_use" bigint,  /* i64 */
	"max_labels" bigint,  /* i64 */
	"labels_dropped" bigint,  /* i64 */
	"namespaces_in_use" bigint,  /* i64 */
	"max_namespaces" bigint,  /* i64 */
	"stats_dropped" bigint  /* i64 */
)
STRICT VOLATILE PARALLEL SAFE
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'advlock_stats_info_wrapper';

CREATE  FUNCTION "advlock_stats_reset"(
	"ns" text DEFAULT NULL /* Option < ServerText > */
) RETURNS timestamp with time zone /* Option < TimestampWithTimeZone > */
VOLATILE PARALLEL UNSAFE
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'advlock_stats_reset_wrapper';

CREATE VIEW @extschema@.advlock_stats AS
SELECT s.ns, s.acquisitions, s.immediate, s.waits, s.timeouts,
       s.total_wait_time, s.max_wait_time, s.stats_since
  FROM @extschema@.advlock_stats() s;

COMMENT ON VIEW @extschema@.advlock_stats IS
  'advlock: per-namespace acquisitions, immediate grants, waits, timeouts and wait times (ms) in this database; needs shared_preload_libraries';

CREATE VIEW @extschema@.advlock_stats_info AS
SELECT i.labels_in_use, i.max_labels, i.labels_dropped,
       i.namespaces_in_use, i.max_namespaces, i.stats_dropped
  FROM @extschema@.advlock_stats_info() i;

COMMENT ON VIEW @extschema@.advlock_stats_info IS
  'advlock: fill level of the shared label and statistics tables (all databases) and the entries dropped because they were full; needs shared_preload_libraries';

-- Readable by everyone, like advlock_holders and pg_stat_statements (namespace names and
-- counts; no ids, no query text).
GRANT SELECT ON @extschema@.advlock_stats, @extschema@.advlock_stats_info TO PUBLIC;

-- Resetting forgets counters other roles rely on: superusers only, unless granted.
REVOKE ALL ON FUNCTION @extschema@.advlock_stats_reset(pg_catalog.text) FROM PUBLIC;
