-- advlock_holders: who holds which advisory lock, decoded.
-- The label column is checked in preload.sql (preload-only), the range error of SET advlock.idle_threshold = -1 in settings_range.sql (its wording is per major).
\x on
BEGIN;
SET LOCAL application_name = 'billing-worker';
SELECT advlock_try_with_timeout('billing', 'invoice-17', 0);
SELECT pg_advisory_xact_lock_shared(-1);          -- negative keys come back negative
SELECT pg_advisory_xact_lock(3, -4);              -- two-int4 keys show as key1/key2
-- Every column, for this session's locks (times and pids vary, so show their shape):
SELECT key, key1, key2, mode, granted,
       pid = pg_backend_pid() AS is_me, application_name, usename = current_user AS usename_ok,
       backend_state, state_change IS NOT NULL AS has_state_change,
       xact_start IS NOT NULL AS in_xact, query_start IS NOT NULL AS has_query_start,
       query LIKE 'SELECT key, key1%' AS query_ok, idle_for, is_idle_holder,
       waiting_since, blocked_by
  FROM advlock_holders ORDER BY key NULLS LAST;
\x off
-- "Who holds this lock?" — ask by the same (ns, id) the application uses:
SELECT pid = pg_backend_pid() AS is_me, application_name, mode, backend_state, is_idle_holder
  FROM advlock_holders WHERE key = advlock_key('billing', 'invoice-17');
COMMIT;
SELECT count(*) AS rows_after_commit FROM advlock_holders;

-- Idle holders (leaked session locks) need another session to observe; see
-- pg_test/isolation/specs. Here: the threshold and the helpers' contracts.
SHOW advlock.idle_threshold;
SET advlock.idle_threshold = '30s';
SELECT advlock_idle_threshold(), advlock_idle_threshold('5 minutes');
RESET advlock.idle_threshold;
SELECT advlock_leak_count(), advlock_leak_count('0');
SELECT * FROM advlock_idle_holders();
SELECT * FROM advlock_terminate_idle_holders('10 minutes');
-- Bad input:
SELECT * FROM advlock_terminate_idle_holders(NULL);
SELECT * FROM advlock_terminate_idle_holders('-1 minute');
SELECT advlock_leak_count('-1 second');
SELECT * FROM advlock_idle_holders('-1 second');
SELECT advlock_idle_threshold('-1 second');
SET advlock.idle_treshold = '1s';
