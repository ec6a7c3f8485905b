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
