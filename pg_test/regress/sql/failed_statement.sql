-- A session lock taken by a statement that then fails is released with it: the client got an
-- error and cannot know it holds anything. Holds taken by statements that completed (the client
-- saw true) keep PostgreSQL's behaviour and survive ROLLBACK.
CREATE FUNCTION my_advisory_locks() RETURNS bigint LANGUAGE sql
  AS $$ SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid() $$;

-- Outside a transaction block: an error later in the same statement.
SELECT advlock_try_with_timeout('edge', 'a', 0, scope => 'session'), 1/0;
SELECT my_advisory_locks();
SELECT advlock_lock_with_timeout(advlock_key('edge', 'a'), 10, scope => 'session'), 1/0;
SELECT my_advisory_locks();

-- A cancel after advlock returned, before the statement completed (here statement_timeout).
SET statement_timeout = '100ms';
SELECT advlock_try_with_timeout('edge', 'a', 0, scope => 'session'), pg_sleep(5);
RESET statement_timeout;
SELECT my_advisory_locks();

-- The statement completed: the lock is the client's, a later failure does not touch it.
SELECT advlock_try_with_timeout('edge', 'a', 0, scope => 'session');
SELECT 1/0;
SELECT my_advisory_locks();
SELECT advlock_unlock('edge', 'a');

-- Inside a transaction block: the failing statement's hold goes at the error...
BEGIN;
SELECT advlock_try_with_timeout('edge', 'b', 0, scope => 'session'), 1/0;
ROLLBACK;
SELECT my_advisory_locks();
-- ...while a hold from an earlier, completed statement survives ROLLBACK as documented.
BEGIN;
SELECT advlock_try_with_timeout('edge', 'c', 0, scope => 'session');
SELECT 1/0;
ROLLBACK;
SELECT my_advisory_locks();
SELECT advlock_unlock('edge', 'c');

-- Inside a savepoint: undone when the statement fails; a completed one survives ROLLBACK TO.
BEGIN;
SAVEPOINT s1;
SELECT advlock_try_with_timeout('edge', 'd', 0, scope => 'session'), 1/0;
ROLLBACK TO s1;
SELECT my_advisory_locks();
SAVEPOINT s2;
SELECT advlock_try_with_timeout('edge', 'e', 0, scope => 'session');
ROLLBACK TO s2;
SELECT my_advisory_locks();
COMMIT;
SELECT advlock_unlock('edge', 'e');

-- A plpgsql exception block is a subtransaction: its failed work, the hold included, is undone.
DO $$
BEGIN
  BEGIN
    PERFORM advlock_try_with_timeout('edge', 'g', 0, scope => 'session');
    PERFORM 1/0;
  EXCEPTION WHEN division_by_zero THEN
    RAISE NOTICE 'holds after the failed block: %', my_advisory_locks();
  END;
END $$;

-- Only the holds the failing statement added: one held before stays (held twice, then once).
SELECT advlock_try_with_timeout('edge', 'f', 0, scope => 'session');
SELECT advlock_try_with_timeout('edge', 'f', 0, scope => 'session'),
       advlock_try_with_timeout('edge', 'f', 0, scope => 'session'), 1/0;
SELECT advlock_unlock('edge', 'f');
SELECT advlock_unlock('edge', 'f');

-- Given back within the failing statement: nothing is left to undo, and nothing is warned.
SELECT advlock_try_with_timeout('edge', 'h', 0, scope => 'session'), advlock_unlock('edge', 'h'), 1/0;
SELECT my_advisory_locks();

-- Transaction-scope locks need no rule: every abort releases them.
BEGIN;
SELECT advlock_try_with_timeout('edge', 'x', 0), 1/0;
ROLLBACK;
SELECT my_advisory_locks();

-- Preloaded, the labels go with the holds.
SELECT count(*) AS labels_left FROM advlock_labels() WHERE pid = pg_backend_pid();
DROP FUNCTION my_advisory_locks();
