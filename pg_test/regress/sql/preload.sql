-- Preloaded mode: labels, scope and held_since in advlock_holders; per-namespace statistics.
-- Expected output: preload.out with shared_preload_libraries = 'advlock', preload_1.out without.
-- Independent of advlock.max_labels / advlock.max_namespaces (the full-table checks fill
-- whatever capacity is configured), so it also runs with tiny capacities.
SELECT current_setting('advlock.max_labels', true) IS NOT NULL AS preloaded \gset
\pset null '(null)'

-- Without preload, locking works and the new columns are NULL.
BEGIN;
SELECT advlock_try_with_timeout('orders', 'o-1', 0);
SELECT label, scope, held_since IS NOT NULL AS has_held_since
  FROM advlock_holders WHERE pid = pg_backend_pid();
COMMIT;
-- advlock_holders.label (from holders.sql): the (ns, id) of an advlock call, nothing for the
-- built-ins' keys; NULL for every lock without preload.
BEGIN;
SELECT advlock_try_with_timeout('billing', 'invoice-17', 0);
SELECT pg_advisory_xact_lock_shared(-1);
SELECT pg_advisory_xact_lock(3, -4);
SELECT key, key1, key2, label FROM advlock_holders WHERE pid = pg_backend_pid() ORDER BY key NULLS LAST;
COMMIT;
-- The statistics need the shared memory; without it they say so (55000).
\set VERBOSITY default
SELECT count(*) >= 0 AS readable FROM advlock_stats;
SELECT :'LAST_ERROR_SQLSTATE' AS sqlstate;
SELECT max_labels > 0 AS has_capacity FROM advlock_stats_info;
SELECT advlock_stats_reset() IS NOT NULL AS reset;
\set VERBOSITY terse
\if :preloaded
\else
\quit
\endif

-- Start from empty statistics for this database.
SELECT advlock_stats_reset() <= clock_timestamp() AS reset;

-- xact scope: the label appears with the lock and is gone after COMMIT and ROLLBACK.
BEGIN;
SELECT advlock_try_with_timeout('orders', 'o-1', 0);
SELECT advlock_try_with_timeout('orders', 17, 0, mode => 'shared');
SELECT label, scope, mode, held_since BETWEEN xact_start AND clock_timestamp() AS held_since_ok
  FROM advlock_holders WHERE pid = pg_backend_pid() ORDER BY label;
COMMIT;
SELECT count(*) AS entries_after_commit FROM advlock_labels() WHERE pid = pg_backend_pid();
BEGIN;
SELECT advlock_lock_with_timeout('orders', 'o-2', 100);
SELECT label, scope FROM advlock_holders WHERE pid = pg_backend_pid();
ROLLBACK;
SELECT count(*) AS entries_after_rollback FROM advlock_labels() WHERE pid = pg_backend_pid();
-- Outside a transaction block the xact lock (and its label) lasts one statement.
SELECT advlock_try_with_timeout('orders', 'o-3', 0);
SELECT count(*) AS entries_after_statement FROM advlock_labels() WHERE pid = pg_backend_pid();

-- A savepoint rolled back releases its xact locks, and their labels.
BEGIN;
SELECT advlock_try_with_timeout('orders', 'kept', 0);
SAVEPOINT s;
SELECT advlock_try_with_timeout('orders', 'rolled-back', 0);
ROLLBACK TO SAVEPOINT s;
SELECT label FROM advlock_labels() WHERE pid = pg_backend_pid();
SELECT label FROM advlock_holders WHERE pid = pg_backend_pid();
COMMIT;

-- session scope: held (and labelled) across transactions until advlock_unlock.
SELECT advlock_try_with_timeout('orders', 42, 0, 'session');
SELECT label, scope, mode, held_since < clock_timestamp() AS held_since_ok
  FROM advlock_holders WHERE pid = pg_backend_pid();
SELECT advlock_unlock('orders', 42);
SELECT count(*) AS entries_after_unlock FROM advlock_labels() WHERE pid = pg_backend_pid();

-- Both scopes on one key: one row; it says 'session' while a session hold remains.
BEGIN;
SELECT advlock_try_with_timeout('orders', 'both', 0);
SELECT advlock_try_with_timeout('orders', 'both', 0, 'session');
SELECT label, scope FROM advlock_holders WHERE pid = pg_backend_pid();
COMMIT;
SELECT label, scope FROM advlock_holders WHERE pid = pg_backend_pid();
SELECT advlock_unlock('orders', 'both');
SELECT count(*) AS entries FROM advlock_labels() WHERE pid = pg_backend_pid();

-- Released behind advlock's back: the view never shows a label without the lock, and the
-- entry is dropped when that transaction ends.
BEGIN;
SELECT advlock_try_with_timeout('orders', 44, 0, 'session');
SELECT pg_advisory_unlock(advlock_key('orders', 44));
SELECT count(*) AS rows_in_view FROM advlock_holders WHERE pid = pg_backend_pid();
COMMIT;
SELECT count(*) AS entries FROM advlock_labels() WHERE pid = pg_backend_pid();
SELECT advlock_try_with_timeout('orders', 45, 0, 'session');
SELECT pg_advisory_unlock_all();
SELECT count(*) AS entries FROM advlock_labels() WHERE pid = pg_backend_pid();
SELECT advlock_try_with_timeout('orders', 46, 0, 'session');
DISCARD ALL;
SELECT count(*) AS entries FROM advlock_labels() WHERE pid = pg_backend_pid();

-- Bare keys and the built-ins record no label (they have no (ns, id) to show).
BEGIN;
SELECT advlock_try_with_timeout(123456789, 0);
SELECT pg_advisory_xact_lock(advlock_key('orders', 'builtin'));
SELECT key = 123456789 AS bare, label, scope, held_since FROM advlock_holders
 WHERE pid = pg_backend_pid() ORDER BY key;
COMMIT;

-- Labels are truncated to 127 bytes at a character boundary ('orders:' + 60 two-byte 'é').
BEGIN;
SELECT advlock_try_with_timeout('orders', repeat('é', 100), 0);
SELECT octet_length(label), label = left('orders:' || repeat('é', 100), char_length(label)) AS prefix
  FROM advlock_holders WHERE pid = pg_backend_pid();
COMMIT;

-- Statistics per namespace: everything above, counted (one session: no waits or timeouts).
SELECT ns, acquisitions, immediate, waits, timeouts, total_wait_time, max_wait_time,
       stats_since <= clock_timestamp() AS since_ok
  FROM advlock_stats ORDER BY ns;
-- Reset one namespace, then everything (NULL: all namespaces, the bare-key row included).
SELECT advlock_stats_reset('orders') IS NOT NULL AS reset;
SELECT ns FROM advlock_stats ORDER BY ns;
BEGIN;
SELECT advlock_try_with_timeout('orders', 1, 0), advlock_try_with_timeout(1, 0);
SELECT ns, acquisitions FROM advlock_stats ORDER BY ns;
COMMIT;
SELECT advlock_stats_reset(NULL) IS NOT NULL AS reset;
SELECT count(*) AS rows FROM advlock_stats;
-- Not for everyone.
CREATE ROLE advlock_regress_nobody;
SET ROLE advlock_regress_nobody;
SELECT advlock_stats_reset();
RESET ROLE;
DROP ROLE advlock_regress_nobody;

-- Capacity: settings fixed at server start.
SELECT name, context FROM pg_settings WHERE name LIKE 'advlock.max%' ORDER BY name;
SET advlock.max_labels = 10;

-- Leases in the WAL (docs/reliability.md): advlock's resource manager, and its settings (the
-- lock delay is read at a promotion, from postgresql.conf).
SELECT rm_id, rm_name FROM pg_get_wal_resource_managers() WHERE NOT rm_builtin;
SELECT name, setting, unit, context FROM pg_settings
 WHERE name IN ('advlock.lease_lock_delay', 'advlock.wal_rmgr_id') ORDER BY name;
SET advlock.lease_lock_delay = '1s';

-- Full label table: locks are still taken, the overflow is counted, nothing blocks.
CREATE TEMP TABLE before AS SELECT * FROM advlock_stats_info;
SELECT labels_in_use FROM before;
BEGIN;
SELECT count(*) FILTER (WHERE advlock_try_with_timeout('fill', g, 0)) = max_labels + 2 AS all_locked
  FROM before, generate_series(1, before.max_labels + 2) g GROUP BY max_labels;
SELECT (SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid())
         = max_labels + 2 AS locks_held,
       (SELECT count(*) FROM advlock_labels() WHERE pid = pg_backend_pid()) = max_labels AS labelled
  FROM before;
SELECT i.labels_in_use = i.max_labels AS full, i.labels_dropped - b.labels_dropped AS dropped
  FROM advlock_stats_info i, before b;
COMMIT;
-- ... and the table empties with the locks.
SELECT i.labels_in_use AS in_use_after, i.labels_dropped - b.labels_dropped AS dropped
  FROM advlock_stats_info i, before b;
-- A label is recorded again as soon as there is room.
BEGIN;
SELECT advlock_try_with_timeout('fill', 'again', 0);
SELECT label FROM advlock_holders WHERE pid = pg_backend_pid();
COMMIT;

-- Full namespace table: acquisitions in new namespaces still work and count as dropped.
SELECT advlock_stats_reset() IS NOT NULL AS reset;
DROP TABLE before;
CREATE TEMP TABLE before AS SELECT * FROM advlock_stats_info;
BEGIN;
SELECT count(*) FILTER (WHERE advlock_try_with_timeout('ns-' || g, 'x', 0)) = n + 2 AS all_locked
  FROM (SELECT max_namespaces - namespaces_in_use AS n FROM before) f,
       generate_series(1, f.n + 2) g GROUP BY n;
SELECT i.namespaces_in_use = i.max_namespaces AS full, i.stats_dropped - b.stats_dropped AS dropped
  FROM advlock_stats_info i, before b;
COMMIT;
SELECT advlock_stats_reset() IS NOT NULL AS reset;
SELECT i.namespaces_in_use = b.namespaces_in_use AS emptied FROM advlock_stats_info i, before b;
DROP TABLE before;

-- Several keys at once (advlock_try_all_with_timeout): each key gets its label and counts in
-- its namespace, as a single acquisition would.
SELECT advlock_stats_reset() IS NOT NULL AS reset;
BEGIN;
SELECT advlock_try_all_with_timeout('transfer', ARRAY['acct-42', 'acct-17'], 0);
SELECT label, scope, mode FROM advlock_holders WHERE pid = pg_backend_pid() ORDER BY label;
COMMIT;
SELECT advlock_try_all_with_timeout('batch', ARRAY[1, 2]::bigint[], 0, scope => 'session');
SELECT label, scope FROM advlock_holders WHERE pid = pg_backend_pid() ORDER BY label;
SELECT advlock_unlock_all('batch', ARRAY[1, 2]::bigint[]);
SELECT count(*) AS entries_after_unlock_all FROM advlock_labels() WHERE pid = pg_backend_pid();
SELECT ns, acquisitions, immediate FROM advlock_stats WHERE ns IN ('transfer', 'batch') ORDER BY ns;

-- Fencing tokens: advlock_holders shows each holder's latest token; a bare key's hold gets an
-- entry without a label so its token shows too.
SELECT advlock_try_with_token('leader', 'rollup', 0) AS t1 \gset
SELECT advlock_try_with_token(4242, 0) AS t2 \gset
SELECT key = advlock_key('leader', 'rollup') AS leader_key, label, token = :t1 AS token_t1, token = :t2 AS token_t2
  FROM advlock_holders WHERE pid = pg_backend_pid() ORDER BY token;
SELECT count(*) AS token_rows FROM advlock_tokens() WHERE pid = pg_backend_pid();
SELECT advlock_unlock('leader', 'rollup'), advlock_unlock(4242);
SELECT count(*) AS token_rows_after_unlock FROM advlock_tokens() WHERE pid = pg_backend_pid();
