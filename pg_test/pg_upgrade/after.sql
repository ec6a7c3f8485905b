-- The same database after pg_upgrade to the new major (psql variable new_major): every advlock
-- function still works, the generated keys and their index are intact. Each check raises on failure.
\set ON_ERROR_STOP 1
SELECT set_config('advlock_test.new_major', :'new_major', false) IS NOT NULL AS new_major_set;
DO $$ BEGIN
  ASSERT current_setting('server_version_num')::int / 10000 = current_setting('advlock_test.new_major')::int,
         'not the new major';
END $$;
-- The stored keys are what advlock_key computes now, on PostgreSQL 18.
DO $$ BEGIN
  ASSERT (SELECT count(*) FROM jobs WHERE lock_key IS DISTINCT FROM advlock_key(queue, job_id)) = 0,
         'a stored key differs from advlock_key() after the upgrade';
  ASSERT (SELECT count(*) FROM jobs) = 20000, 'rows lost';
END $$;
-- The index is valid and consistent with the heap (amcheck, every tuple).
CREATE EXTENSION amcheck;
DO $$ BEGIN
  ASSERT (SELECT indisvalid AND indisready FROM pg_index WHERE indexrelid = 'jobs_lock_key'::regclass), 'index not valid';
END $$;
SELECT bt_index_check('jobs_lock_key', heapallindexed => true);
SET enable_seqscan = off; SET enable_bitmapscan = off;
DO $$ DECLARE plan text; BEGIN
  EXECUTE 'EXPLAIN (COSTS OFF) SELECT id FROM jobs WHERE lock_key = advlock_key(''rollup'', ''job-2'')' INTO plan;
  ASSERT plan LIKE 'Index Scan using jobs_lock_key%', 'lookup does not use the index: ' || plan;
  ASSERT (SELECT id FROM jobs WHERE lock_key = advlock_key('rollup', 'job-2')) = 2, 'index lookup found the wrong row';
END $$;
RESET enable_seqscan; RESET enable_bitmapscan;
-- The fence came through: its token is kept, a smaller one is still refused, a larger passes.
DO $$ BEGIN
  ASSERT (SELECT token FROM advlock_fences WHERE key = advlock_key('billing', 'ledger')) = 42, 'fence lost';
  BEGIN
    PERFORM advlock_fence('billing', 'ledger', 41);
    RAISE EXCEPTION 'a smaller token passed the fence after the upgrade';
  EXCEPTION WHEN SQLSTATE 'LK001' THEN NULL;
  END;
  PERFORM advlock_fence('billing', 'ledger', 43);
END $$;
-- Every function of the extension.
DO $$ BEGIN
  ASSERT advlock_key('rollup', 'nightly') = 2132624222628149741, 'golden key';
  ASSERT advlock_key('account', 42) = 7700915891107303510, 'integer id';
  ASSERT advlock_key('migrate') = -4880605526533726798, 'namespace only';
  ASSERT advlock_try_with_timeout('rollup', 'nightly', 100, scope => 'session');
  ASSERT advlock_try_with_timeout('account', 42, 100, scope => 'session', mode => 'shared');
  ASSERT advlock_try_with_timeout(advlock_key('x'), 0, scope => 'session');
  PERFORM advlock_lock_with_timeout('rollup', 'weekly', 100, scope => 'session');
  PERFORM advlock_lock_with_timeout('account', 7, 100, scope => 'session');
  PERFORM advlock_lock_with_timeout(advlock_key('y'), 100, scope => 'session');
  ASSERT (SELECT count(*) FROM advlock_holders WHERE pid = pg_backend_pid()) = 6, 'holders';
  -- Preloaded: the four (ns, id) acquisitions carry a label, the two bare keys none.
  ASSERT (SELECT count(*) FROM advlock_holders WHERE pid = pg_backend_pid() AND label IS NOT NULL) = 4, 'labels (preloaded)';
  ASSERT (SELECT count(*) FROM advlock_labels() WHERE pid = pg_backend_pid() AND label IS NOT NULL) = 4, 'advlock_labels()';
  ASSERT (SELECT count(*) FROM advlock_lock_entries()) >= 6, 'advlock_lock_entries()';
  ASSERT advlock_idle_threshold() = interval '45 seconds', 'advlock.idle_threshold from postgresql.conf';
  ASSERT (SELECT count(*) FROM advlock_idle_holders()) = 0;
  ASSERT advlock_leak_count() = 0;
  ASSERT (SELECT count(*) FROM advlock_terminate_idle_holders('1 hour')) = 0;
  ASSERT advlock_unlock('rollup', 'nightly') AND advlock_unlock('account', 42, mode => 'shared')
     AND advlock_unlock(advlock_key('x')) AND advlock_unlock('rollup', 'weekly')
     AND advlock_unlock('account', 7) AND advlock_unlock(advlock_key('y')), 'unlock';
  ASSERT (SELECT count(*) FROM advlock_holders WHERE pid = pg_backend_pid()) = 0, 'released';
  ASSERT (SELECT sum(acquisitions) FROM advlock_stats WHERE ns = 'rollup') >= 2, 'stats';
  ASSERT (SELECT count(*) FROM advlock_stats_info) = 1;
  ASSERT advlock_stats_reset() IS NOT NULL;
END $$;
SELECT 'all advlock functions work after pg_upgrade' AS result;
