-- Bounded server-side acquisition, single session. (Blocking, wake-up, timeouts between
-- sessions, deadlocks and cancels are in pg_test/isolation.)

-- A transaction-scoped lock, taken at once because nobody holds it:
BEGIN;
SELECT advlock_try_with_timeout('account', 42, timeout_ms => 0);
-- It is the same lock the built-ins take for advlock_key('account', 42):
SELECT locktype, mode, granted, objsubid,
       (classid::int8 << 32) | objid::int8 = advlock_key('account', 42) AS same_key
  FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid();
COMMIT;
-- Released at commit:
SELECT count(*) AS advisory_locks FROM pg_locks WHERE locktype = 'advisory';

-- Named arguments read well; a session lock outlives its transaction:
SELECT advlock_try_with_timeout('rollup', 'nightly', timeout_ms => 2000, scope => 'session');
SELECT count(*) AS advisory_locks FROM pg_locks WHERE locktype = 'advisory';
-- Re-entrant and counted like pg_advisory_lock: two takes need two unlocks.
SELECT advlock_try_with_timeout('rollup', 'nightly', 0, scope => 'session');
SELECT advlock_unlock('rollup', 'nightly');
SELECT advlock_unlock('rollup', 'nightly');
-- Unlocking what is not held returns false with a WARNING that names the key and says what
-- this session holds of it instead (the built-in says "you don't own a lock of type ..."):
SELECT advlock_unlock('rollup', 'nightly');
-- held, but in transaction scope (the default), which advlock_unlock cannot release:
BEGIN;
SELECT advlock_try_with_timeout('rollup', 'nightly', 0);
SELECT advlock_unlock('rollup', 'nightly');
SELECT advlock_holding('rollup', 'nightly') AS still_held;
COMMIT;
-- held, but in the other mode:
SELECT advlock_try_with_timeout('rollup', 'nightly', 0, scope => 'session', mode => 'shared');
SELECT advlock_unlock('rollup', 'nightly');
SELECT advlock_unlock('rollup', 'nightly', mode => 'shared');
-- pg_advisory_unlock keeps the built-in's own WARNING:
SELECT pg_advisory_unlock(advlock_key('rollup', 'nightly'));

-- Shared locks are compatible with each other:
SELECT advlock_try_with_timeout(7, 0, scope => 'session', mode => 'shared');
SELECT advlock_try_with_timeout(7, 0, scope => 'session', mode => 'shared');
SELECT mode, count(*) FROM pg_locks WHERE locktype = 'advisory' GROUP BY mode;
SELECT advlock_unlock(7, 'shared'), advlock_unlock(7, mode => 'shared');

-- advlock_lock_with_timeout returns nothing when it gets the lock, raises when it cannot:
BEGIN;
SELECT advlock_lock_with_timeout('billing', 'invoice-17', 500);
COMMIT;

-- The caller's lock_timeout is never changed:
SET lock_timeout = '3s';
BEGIN;
SELECT advlock_try_with_timeout(1, 100);
SHOW lock_timeout;
COMMIT;
SHOW lock_timeout;
RESET lock_timeout;

-- The classic trap: an xact-scoped lock outside a transaction block ends with the statement.
-- advlock does what was asked, and says so:
SELECT advlock_try_with_timeout('report', 'daily', 0);

-- Bad input is an error naming the argument, with the allowed values in the HINT:
SELECT advlock_try_with_timeout(NULL::bigint, 100);
SELECT advlock_try_with_timeout(1, NULL);
SELECT advlock_try_with_timeout(1, -1);
SELECT advlock_try_with_timeout(1, 0, scope => 'transaction');
SELECT advlock_try_with_timeout(1, 0, mode => 'share');
-- A mode where the scope goes: the HINT says to pass it by name.
SELECT advlock_try_with_timeout(1, 100, 'shared');
SELECT advlock_try_with_timeout('', 'x', 0);
SELECT advlock_lock_with_timeout('jobs', NULL::text, 0);
SELECT advlock_unlock(1, mode => NULL);
-- ... and nothing was locked on the way:
SELECT count(*) AS advisory_locks FROM pg_locks WHERE locktype = 'advisory';
