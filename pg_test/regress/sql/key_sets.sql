-- All-or-nothing acquisition of several keys, single session. (Contention between sessions —
-- all or nothing on timeout, overlapping sets never deadlocking, order of grants — is in
-- pg_test/isolation/specs/key-sets-*.spec.)

-- Moving money between accounts 42 and 17: both locks or neither, in one call.
BEGIN;
SELECT advlock_try_all_with_timeout('account', ARRAY[42, 17], timeout_ms => 2000);
-- Each is the lock advlock_key names, taken exactly once:
SELECT count(*) AS held,
       bool_and((classid::int8 << 32) | objid::int8 IN (advlock_key('account', 42), advlock_key('account', 17))) AS the_right_keys
  FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid();
COMMIT;
SELECT count(*) AS advisory_locks FROM pg_locks WHERE locktype = 'advisory';

-- Three forms: bare keys, (ns, text ids), (ns, bigint ids). Duplicates collapse: one hold each.
SELECT advlock_try_all_with_timeout(ARRAY[3, 1, 2, 2, 3], 0, scope => 'session');
SELECT objid, count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()
 GROUP BY objid ORDER BY objid;
SELECT advlock_unlock_all(ARRAY[1, 2, 3]);
SELECT advlock_try_all_with_timeout('batch', ARRAY['job-1', 'job-2', 'job-1'], 0, scope => 'session');
SELECT advlock_holding('batch', 'job-1'), advlock_holding('batch', 'job-2'), advlock_holding('batch', 'job-3');
SELECT advlock_unlock_all('batch', ARRAY['job-2', 'job-1']);
SELECT advlock_try_all_with_timeout('batch', ARRAY[1, 2]::bigint[], 0, scope => 'session', mode => 'shared');
SELECT advlock_holding('batch', 1, 'shared'), advlock_holding('batch', '1', 'shared'), advlock_holding('batch', 1);
SELECT advlock_unlock_all('batch', ARRAY[1, 2]::bigint[], 'shared');
SELECT count(*) AS advisory_locks FROM pg_locks WHERE locktype = 'advisory';

-- advlock_lock_all_with_timeout returns nothing when it gets them all:
BEGIN;
SELECT advlock_lock_all_with_timeout(ARRAY[10, 11], 100);
SELECT count(*) AS held FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid();
ROLLBACK;

-- Holds the session had before a call stay when it gives back (counted like the built-ins):
SELECT advlock_try_with_timeout(5, 0, scope => 'session');
SELECT advlock_try_all_with_timeout(ARRAY[5, 6], 0, scope => 'session');
SELECT advlock_unlock_all(ARRAY[5, 6]);
SELECT advlock_holding(5) AS still_held_once;
SELECT advlock_unlock(5);

-- advlock_unlock_all releases what is held and says false, with a WARNING naming
-- each key that was not:
SELECT advlock_try_with_timeout(20, 0, scope => 'session');
SELECT advlock_unlock_all(ARRAY[20, 21]);
SELECT advlock_holding(20);
-- ... naming an (ns, id) key as advlock_key(ns, id), with the first id of the call that gave
-- it (the SQL edition's WARNING named only the number before 0.5.0):
SELECT advlock_try_with_timeout('batch', 'job-1', 0, scope => 'session');
SELECT advlock_unlock_all('batch', ARRAY['job-2', 'job-1', 'job-2']);
SELECT advlock_unlock_all('batch', ARRAY[7]::bigint[], 'shared');

-- The lock table has a finite size (max_locks_per_transaction × (max_connections +
-- max_prepared_transactions)): asking for more is an error, and nothing stays held. (Terse:
-- how far it got depends on the configuration.)
\set VERBOSITY terse
SELECT advlock_try_all_with_timeout(ARRAY(SELECT generate_series(1, 100000)::bigint), 0, scope => 'session');
SELECT count(*) AS advisory_locks FROM pg_locks WHERE locktype = 'advisory';
BEGIN;
SELECT advlock_lock_all_with_timeout('big', ARRAY(SELECT generate_series(1, 100000)::bigint), 0);
ROLLBACK;
SELECT count(*) AS advisory_locks FROM pg_locks WHERE locktype = 'advisory';
-- ... also when the caller catches the error:
DO $$
BEGIN
    PERFORM advlock_try_all_with_timeout(ARRAY(SELECT generate_series(1, 100000)::bigint), 0, 'session');
EXCEPTION WHEN out_of_memory THEN
    RAISE NOTICE 'caught: %', SQLERRM;
END
$$;
\set VERBOSITY default
SELECT count(*) AS advisory_locks FROM pg_locks WHERE locktype = 'advisory';

-- Bad input: the argument is named, nothing is locked.
SELECT advlock_try_all_with_timeout(ARRAY[]::bigint[], 0);
SELECT advlock_try_all_with_timeout(ARRAY[1, NULL], 0);
SELECT advlock_lock_all_with_timeout('batch', ARRAY['a', NULL, 'c'], 0);
SELECT advlock_unlock_all('batch', ARRAY[NULL]::bigint[]);
SELECT advlock_try_all_with_timeout(NULL::bigint[], 0);
SELECT advlock_try_all_with_timeout('', ARRAY['a'], 0);
SELECT advlock_try_all_with_timeout(ARRAY[1], -1);
SELECT advlock_try_all_with_timeout(ARRAY[1], NULL);
SELECT advlock_try_all_with_timeout(ARRAY[1], 0, scope => 'transaction');
SELECT advlock_lock_all_with_timeout(ARRAY[1], 0, mode => 'share');
SELECT advlock_holding(1, 'update');
SELECT advlock_holding(NULL::bigint);
SELECT count(*) AS advisory_locks FROM pg_locks WHERE locktype = 'advisory';

-- The single-key functions keep their meaning for untyped parameters (drivers such as asyncpg
-- prepare without types): the all-or-nothing functions have their own names for this reason.
PREPARE untyped(unknown, unknown) AS SELECT advlock_try_with_timeout($1, $2);
BEGIN;
EXECUTE untyped('8', '0');
COMMIT;
DEALLOCATE untyped;
SELECT advlock_try_with_timeout(8, 0, scope => 'session');
PREPARE untyped_unlock(unknown) AS SELECT advlock_unlock($1);
EXECUTE untyped_unlock('8');
DEALLOCATE untyped_unlock;
