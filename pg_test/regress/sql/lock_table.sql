-- advlock_lock_table: how full the shared lock table is, per database. Other backends
-- (autovacuum, checkpoints) take and drop locks of their own at any time, so only this
-- session's part is counted exactly; the rest is checked by its shape.
CREATE TABLE lock_table_t (i int);

-- The current database always has a row, and every row carries the same capacity: a multiple
-- of max_locks_per_transaction, at least max_locks_per_transaction x (max_connections +
-- max_prepared_transactions) (the background processes' slots add to it, per major).
SELECT count(*) FILTER (WHERE datname = current_database()) AS current_database_rows,
       count(DISTINCT capacity) AS capacities,
       min(capacity) % current_setting('max_locks_per_transaction')::bigint AS capacity_mod_max_locks,
       min(capacity) >= current_setting('max_locks_per_transaction')::bigint
         * (current_setting('max_connections')::bigint + current_setting('max_prepared_transactions')::bigint)
         AS capacity_covers_connections
  FROM advlock_lock_table;

-- A row other than the current database's exists only while it has entries; advisory locks
-- always belong to a database, so the NULL row (locks of no database) has none of them.
SELECT count(*) FILTER (WHERE datname IS DISTINCT FROM current_database() AND lock_entries < 1) AS empty_rows,
       count(*) FILTER (WHERE advisory_entries > lock_entries OR advisory_entries < 0) AS impossible_rows,
       count(*) FILTER (WHERE datname IS NULL AND advisory_entries <> 0) AS advisory_without_database
  FROM advlock_lock_table;

SELECT advisory_entries AS advisory_before FROM advlock_lock_table WHERE datname = current_database() \gset

BEGIN;
-- 100 advisory locks: 100 entries, whatever their mode or function.
SELECT count(pg_advisory_xact_lock(g)) AS taken FROM generate_series(1, 98) g;
SELECT pg_advisory_xact_lock_shared(1, 2);
SELECT advlock_try_with_timeout('lock_table', 'one', 0);
SELECT advisory_entries - :advisory_before AS advisory_taken
  FROM advlock_lock_table WHERE datname = current_database();
-- Taking a held lock again adds no entry.
SELECT pg_advisory_xact_lock(1);
SELECT advisory_entries - :advisory_before AS advisory_taken_again
  FROM advlock_lock_table WHERE datname = current_database();

-- A relation lock that is not fast-path (SHARE and stronger) takes an entry of the current
-- database too, counted in lock_entries and not as advisory: this session's own entries are
-- among lock_entries, whatever the other backends hold.
LOCK TABLE lock_table_t IN SHARE MODE;
SELECT locktype, mode, fastpath FROM pg_locks
 WHERE pid = pg_backend_pid() AND relation = 'lock_table_t'::regclass;
SELECT t.advisory_entries - :advisory_before AS advisory_with_relation_lock,
       t.lock_entries >= (SELECT count(*) FROM pg_locks l
                           WHERE l.pid = pg_backend_pid() AND NOT l.fastpath
                             AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database()))
         AS counts_my_entries
  FROM advlock_lock_table t WHERE t.datname = current_database();

-- A transaction id is locked by its transaction, and belongs to no database: the NULL row.
SELECT pg_current_xact_id() IS NOT NULL AS has_xid;
SELECT lock_entries >= 1 AS null_row_counts_my_xid, advisory_entries
  FROM advlock_lock_table WHERE datname IS NULL;
COMMIT;

-- COMMIT releases them all.
SELECT advisory_entries - :advisory_before AS advisory_after_commit
  FROM advlock_lock_table WHERE datname = current_database();

-- Session locks count the same, until unlocked.
SELECT count(pg_advisory_lock(g)) AS session_locks FROM generate_series(1, 10) g;
SELECT advisory_entries - :advisory_before AS advisory_session
  FROM advlock_lock_table WHERE datname = current_database();
SELECT pg_advisory_unlock_all();
SELECT advisory_entries - :advisory_before AS advisory_unlocked
  FROM advlock_lock_table WHERE datname = current_database();

-- Counts only: readable by a role without any privilege.
CREATE ROLE regress_lock_table_nobody;
SET ROLE regress_lock_table_nobody;
SELECT count(*) >= 1 AS readable FROM advlock_lock_table;
RESET ROLE;
DROP ROLE regress_lock_table_nobody;
DROP TABLE lock_table_t;

-- A full table: one key meets the error a key set does (53200, one message for both; the SQL
-- edition's single-key functions leave PostgreSQL's own). Plain session locks fill it first;
-- they survive the caught error, as session locks survive a rollback.
DO $$
BEGIN
    FOR i IN 1..1000000 LOOP
        PERFORM pg_advisory_lock(i);
    END LOOP;
    RAISE EXCEPTION 'the lock table never filled';
EXCEPTION WHEN out_of_memory THEN
    NULL;
END
$$;
SELECT advlock_try_with_timeout(-1, 0, scope => 'session');
BEGIN;
SELECT advlock_lock_with_timeout('lock_table', 'full', 100);
ROLLBACK;
SELECT pg_advisory_unlock_all();
SELECT count(*) AS advisory_locks FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid();
