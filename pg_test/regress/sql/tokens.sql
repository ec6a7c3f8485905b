-- Fencing tokens: advlock_try_with_token takes the lock like advlock_try_with_timeout (default
-- scope 'session') and returns a number larger than every token issued before in this
-- database. (Across restart, crash and standby promotion: pg_test/reliability/test_zz_tokens.py;
-- the fenced write with real clients: pg_test/clients/test_fencing.py.)

SELECT advlock_try_with_token('report', 'daily', 1000) AS t1 \gset
SELECT advlock_holding('report', 'daily');
-- Re-entrant acquisitions get a new, larger token each:
SELECT advlock_try_with_token('report', 'daily', 0) AS t2 \gset
SELECT :t2 > :t1 AS increases;
-- The timeline sits above a 47-bit counter (so a promoted standby's tokens are larger):
SELECT :t1 >> 47 = (SELECT timeline_id FROM pg_control_checkpoint()) AS timeline_in_high_bits;
-- Preloaded, advlock_holders shows the latest token of the hold (without preload: NULL):
SELECT token = :t2 OR (token IS NULL AND current_setting('shared_preload_libraries') !~ 'advlock') AS holders_show_token
  FROM advlock_holders WHERE pid = pg_backend_pid();
SELECT advlock_unlock('report', 'daily'), advlock_unlock('report', 'daily');

-- All three forms; xact scope and shared mode too:
BEGIN;
SELECT advlock_try_with_token(99, 0, scope => 'xact') > :t2 AS key_form,
       advlock_try_with_token('report', 7, 0, 'xact', 'shared') > :t2 AS int_form;
COMMIT;
SELECT count(*) AS advisory_locks FROM pg_locks WHERE locktype = 'advisory';

-- The counter is the extension's, not the caller's: no privilege on it is needed.
CREATE ROLE advlock_token_user;
SET ROLE advlock_token_user;
SELECT advlock_try_with_token('report', 'hourly', 0) > :t2 AS unprivileged_caller;
SELECT advlock_unlock('report', 'hourly');
RESET ROLE;
DROP ROLE advlock_token_user;

-- Tokens need a writable transaction (a WAL-logged sequence): refused before any lock is taken.
BEGIN READ ONLY;
SELECT advlock_try_with_token('report', 'daily', 0);
ROLLBACK;
SELECT count(*) AS advisory_locks FROM pg_locks WHERE locktype = 'advisory';

-- Bad input, as for advlock_try_with_timeout:
SELECT advlock_try_with_token('report', 'daily', -5);
SELECT advlock_try_with_token(NULL::bigint, 0);
SELECT advlock_try_with_token('report', 'daily', 0, scope => 'forever');
SELECT count(*) AS advisory_locks FROM pg_locks WHERE locktype = 'advisory';
