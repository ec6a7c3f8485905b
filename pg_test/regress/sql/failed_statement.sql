-- A session lock taken by a client statement that then fails is released with it: the client
-- got an error and cannot know it holds anything. Holds taken by statements that completed
-- keep PostgreSQL's behaviour and survive ROLLBACK; so do holds a statement keeps through a
-- ROLLBACK it asked for itself (in the message, or a procedure's). A client statement is one
-- Query message (psql's \; joins several statements into one) or one CALL / DO, whatever
-- COMMIT, SAVEPOINT or ROLLBACK runs inside it.
--
-- Every failure below happens at run time, and only after the lock was taken: fail_holding(k)
-- divides by zero only while this session holds key k, so an ERROR from it proves advlock ran
-- and granted the lock before the statement failed. The built-in pg_try_advisory_lock runs
-- beside each case with key + 1000: it keeps its lock (PostgreSQL's own behaviour).
CREATE FUNCTION holds(k bigint) RETURNS bigint LANGUAGE sql VOLATILE
  AS $$ SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()
        AND granted AND ((classid::int8 << 32) | objid::int8) = k $$;
CREATE FUNCTION fail_holding(k bigint) RETURNS int LANGUAGE sql VOLATILE
  AS $$ SELECT 1 / (holds(k) = 0)::int $$;
CREATE FUNCTION my_advisory_locks() RETURNS bigint LANGUAGE sql VOLATILE
  AS $$ SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid() $$;

-- Outside a transaction block: an error later in the same statement.
SELECT advlock_try_with_timeout(1, 0, scope => 'session'), fail_holding(1);
SELECT pg_try_advisory_lock(1001), fail_holding(1001);
SELECT holds(1) AS advlock, holds(1001) AS builtin;
SELECT pg_advisory_unlock(1001);
SELECT advlock_lock_with_timeout(2, 10, scope => 'session'), fail_holding(2);
SELECT holds(2);

-- A cancel after advlock returned, before the statement completed (here statement_timeout).
SET statement_timeout = '100ms';
SELECT advlock_try_with_timeout(3, 0, scope => 'session'), pg_sleep(5);
RESET statement_timeout;
SELECT holds(3);

-- The statement completed: the lock is the client's, a later failure does not touch it.
SELECT advlock_try_with_timeout(4, 0, scope => 'session');
SELECT fail_holding(4);
SELECT holds(4);
SELECT advlock_unlock(4);

-- Inside a transaction block: the failing statement's hold goes at the error...
BEGIN;
SELECT advlock_try_with_timeout(5, 0, scope => 'session'), fail_holding(5);
ROLLBACK;
SELECT holds(5);
-- ...while a hold from an earlier, completed statement survives ROLLBACK as documented.
BEGIN;
SELECT advlock_try_with_timeout(6, 0, scope => 'session');
SELECT fail_holding(6);
ROLLBACK;
SELECT holds(6);
SELECT advlock_unlock(6);

-- Inside a savepoint: undone when the statement fails; a completed one survives ROLLBACK TO.
BEGIN;
SAVEPOINT s1;
SELECT advlock_try_with_timeout(7, 0, scope => 'session'), fail_holding(7);
ROLLBACK TO s1;
SELECT holds(7);
SAVEPOINT s2;
SELECT advlock_try_with_timeout(8, 0, scope => 'session');
ROLLBACK TO s2;
SELECT holds(8);
COMMIT;
SELECT advlock_unlock(8);

-- A plpgsql exception block is a subtransaction: its failed work, the hold included, is undone;
-- a hold taken before the block stays.
DO $$
BEGIN
  PERFORM advlock_try_with_timeout(9, 0, scope => 'session');
  BEGIN
    PERFORM advlock_try_with_timeout(10, 0, scope => 'session');
    PERFORM fail_holding(10);
  EXCEPTION WHEN division_by_zero THEN
    RAISE NOTICE 'after the failed block: key 9 %, key 10 %', holds(9), holds(10);
  END;
END $$;
SELECT holds(9), holds(10);
SELECT advlock_unlock(9);

-- Only the holds the failing statement added: one held before stays (held twice, then once).
SELECT advlock_try_with_timeout(11, 0, scope => 'session');
SELECT advlock_try_with_timeout(11, 0, scope => 'session'),
       advlock_try_with_timeout(11, 0, scope => 'session'), fail_holding(11);
SELECT advlock_unlock(11);
SELECT advlock_unlock(11);

-- Given back within the failing statement: nothing is left to undo, and nothing is warned.
SELECT advlock_try_with_timeout(12, 0, scope => 'session'), advlock_unlock(12), 1 / (holds(12) + holds(12))::int;
SELECT holds(12);

-- Transaction-scope locks need no rule: every abort releases them.
BEGIN;
SELECT advlock_try_with_timeout(13, 0), fail_holding(13);
ROLLBACK;
SELECT holds(13);

-- Transaction control inside one statement. A ROLLBACK the statement asks for is not a failure:
-- the hold the code was given survives it, as the built-in's does.
CREATE PROCEDURE take_then_rollback(k bigint) LANGUAGE plpgsql AS $$
BEGIN
  PERFORM advlock_try_with_timeout(k, 0, scope => 'session');
  PERFORM pg_try_advisory_lock(k + 1000);
  ROLLBACK;
END $$;
CALL take_then_rollback(20);
SELECT holds(20) AS advlock, holds(1020) AS builtin;
SELECT advlock_unlock(20), pg_advisory_unlock(1020);
DO $$
BEGIN
  PERFORM advlock_try_with_timeout(21, 0, scope => 'session');
  ROLLBACK;
  PERFORM advlock_try_with_timeout(22, 0, scope => 'session');
  COMMIT;
  PERFORM advlock_try_with_timeout(23, 0, scope => 'session');
  ROLLBACK;
END $$;
SELECT holds(21), holds(22), holds(23);
SELECT advlock_unlock(21), advlock_unlock(22), advlock_unlock(23);
-- One Query message: BEGIN, the lock, ROLLBACK. The client saw t, and keeps the lock.
BEGIN \; SELECT advlock_try_with_timeout(24, 0, scope => 'session'), pg_try_advisory_lock(1024) \; ROLLBACK;
SELECT holds(24) AS advlock, holds(1024) AS builtin;
SELECT advlock_unlock(24), pg_advisory_unlock(1024);
-- ROLLBACK TO SAVEPOINT in the same message: likewise kept.
BEGIN;
SAVEPOINT s3 \; SELECT advlock_try_with_timeout(25, 0, scope => 'session') \; ROLLBACK TO s3;
SELECT holds(25);
ROLLBACK;
SELECT holds(25);
SELECT advlock_unlock(25);

-- A statement that fails after a COMMIT, SAVEPOINT or ROLLBACK inside it releases what it took
-- (the built-in keeps its lock in each case).
SELECT advlock_try_with_timeout(30, 0, scope => 'session'), pg_try_advisory_lock(1030) \; COMMIT \; SELECT fail_holding(30);
SELECT holds(30) AS advlock, holds(1030) AS builtin;
SELECT pg_advisory_unlock(1030);
CREATE PROCEDURE take_commit_fail(k bigint) LANGUAGE plpgsql AS $$
BEGIN
  PERFORM advlock_try_with_timeout(k, 0, scope => 'session');
  PERFORM pg_try_advisory_lock(k + 1000);
  COMMIT;
  PERFORM fail_holding(k);
END $$;
CALL take_commit_fail(31);
SELECT holds(31) AS advlock, holds(1031) AS builtin;
SELECT pg_advisory_unlock(1031);
CREATE PROCEDURE take_rollback_fail(k bigint) LANGUAGE plpgsql AS $$
BEGIN
  PERFORM advlock_try_with_timeout(k, 0, scope => 'session');
  ROLLBACK;
  PERFORM fail_holding(k);
END $$;
CALL take_rollback_fail(32);
SELECT holds(32);
BEGIN;
SELECT advlock_try_with_timeout(33, 0, scope => 'session'), pg_try_advisory_lock(1033) \; SAVEPOINT s \; SELECT fail_holding(33);
ROLLBACK;
SELECT holds(33) AS advlock, holds(1033) AS builtin;
SELECT pg_advisory_unlock(1033);

-- Nested CALLs are one statement: the inner procedure's COMMIT does not end it.
CREATE PROCEDURE inner_take_commit(k bigint) LANGUAGE plpgsql AS $$
BEGIN
  PERFORM advlock_try_with_timeout(k, 0, scope => 'session');
  COMMIT;
END $$;
CREATE PROCEDURE outer_call(k bigint, fail boolean) LANGUAGE plpgsql AS $$
BEGIN
  CALL inner_take_commit(k);
  COMMIT;
  IF fail THEN PERFORM fail_holding(k); END IF;
END $$;
CALL outer_call(34, true);
SELECT holds(34);
CALL outer_call(35, false);
SELECT holds(35);
SELECT advlock_unlock(35);

-- A commit that fails ends the statement in an error: a deferred constraint checked at the
-- COMMIT of the same message, or at the end of a single statement's implicit transaction.
CREATE TABLE deferred_unique (x int UNIQUE DEFERRABLE INITIALLY DEFERRED);
BEGIN \; INSERT INTO deferred_unique VALUES (1), (1) \; SELECT advlock_try_with_timeout(36, 0, scope => 'session') \; COMMIT;
SELECT holds(36);
WITH ins AS (INSERT INTO deferred_unique VALUES (2), (2) RETURNING x)
SELECT advlock_try_with_timeout(37, 0, scope => 'session') FROM (SELECT count(*) FROM ins) AS done;
SELECT holds(37);
-- A completed statement's hold survives the failed COMMIT of its transaction (a later message).
BEGIN;
INSERT INTO deferred_unique VALUES (3), (3);
SELECT advlock_try_with_timeout(38, 0, scope => 'session');
COMMIT;
SELECT holds(38);
SELECT advlock_unlock(38);
DROP TABLE deferred_unique;

SELECT my_advisory_locks() AS left_over;
-- Preloaded, the labels go with the holds.
SELECT count(*) AS labels_left FROM advlock_labels() WHERE pid = pg_backend_pid();
DROP PROCEDURE take_then_rollback(bigint), take_commit_fail(bigint), take_rollback_fail(bigint),
  inner_take_commit(bigint), outer_call(bigint, boolean);
DROP FUNCTION fail_holding(bigint), holds(bigint), my_advisory_locks();
