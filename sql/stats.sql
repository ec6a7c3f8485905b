-- advlock_stats: contention per namespace, counted in shared memory when advlock is loaded
-- through shared_preload_libraries (like pg_stat_statements). Without preload, reading these
-- views raises 55000 "advlock must be loaded via "shared_preload_libraries"".
-- Same conventions as holders.sql: schema-qualified, no SECURITY DEFINER.

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
