-- Leases in one session: arguments, renew and release, semaphores, the failed-statement rule,
-- the views. Without advlock preloaded every lease function raises 55000 (leases.out); the
-- preloaded run's output is leases_1.out. Between sessions: pg_test/leases and the
-- lease-handoff isolation spec.
\set VERBOSITY terse
SELECT advlock_lease('report', 'daily', 60000, 0) AS lease \gset
SELECT :'lease'::bigint > 0 AS got_one;
-- Taken: a second try on the key gets nothing (NULL), as does any slot count but 1.
SELECT advlock_lease('report', 'daily', 60000, 0) IS NULL AS busy;
SELECT advlock_lease('report', 'daily', 60000, 0, slots => 2);
SELECT key = advlock_key('report', 'daily') AS key_matches, label, slots, granted, role,
       pid = pg_backend_pid() AS taken_here, expires_at - granted_at AS ttl
  FROM advlock_leases;
SELECT advlock_lease_renew(:'lease', 120000);
SELECT expires_at - renewed_at AS ttl FROM advlock_leases WHERE lease = :'lease';
SELECT advlock_lease_release(:'lease'), advlock_lease_release(:'lease') AS again;
SELECT advlock_lease_renew(:'lease', 1000) AS renew_released;
SELECT count(*) FROM advlock_leases;

-- A semaphore: three slots, a fourth lease waits (here: none, timeout 0).
SELECT count(advlock_lease(7, 60000, 0, slots => 3)) AS taken FROM generate_series(1, 4);
SELECT count(*) FROM advlock_leases WHERE key = 7;
SELECT bool_and(advlock_lease_release(lease)) FROM advlock_leases WHERE key = 7;

-- A statement that fails after the grant never returned the id: the lease ends with it.
-- (It fails at run time, and only while the lease is held.)
SELECT advlock_lease(8, 60000, 0) > 0, 1 / ((SELECT count(*) FROM advlock_leases WHERE key = 8 AND granted) = 0)::int;
SELECT count(*) AS left_after_failure FROM advlock_leases WHERE key = 8;
-- Released in the same failing statement: nothing left to undo.
SELECT advlock_lease_release(advlock_lease(9, 60000, 0)), 1 / (random() * 0)::int;
SELECT count(*) FROM advlock_leases WHERE key = 9;

-- Arguments.
SELECT advlock_lease(1, 0, 0);
SELECT advlock_lease(1, 1000, -1);
SELECT advlock_lease(1, 1000, 0, slots => 0);
SELECT advlock_lease(NULL::bigint, 1000, 0);
SELECT advlock_lease('', 'x', 1000, 0);
SELECT advlock_lease('ns', NULL::text, 1000, 0);
SELECT advlock_lease(1, NULL, 0);
SELECT advlock_lease(1, 1000, NULL);
SELECT advlock_lease(1, 1000, 0, slots => NULL);
SELECT advlock_lease_renew(NULL, 1000);
SELECT advlock_lease_renew(1, 0);
SELECT advlock_lease_release(NULL);
SELECT advlock_lease_release(12345) AS unknown_id;
-- The totals move with the calls above.
SELECT capacity, held, waiting, granted >= 5 AS granted, released >= 4 AS released FROM advlock_lease_stats;

-- advlock_lease_check (for a fenced write transaction): the lease's expires_at while it is
-- held; LK002 once it was released or expired (the id masked in the message), or for an id
-- never taken; 22004 for NULL. Without preload: 55000 naming advlock_lease_check.
SET datestyle = ISO;
CREATE FUNCTION pg_temp.check_error(lease bigint) RETURNS text LANGUAGE plpgsql AS $$
DECLARE st text; msg text; det text;
BEGIN
    PERFORM advlock_lease_check(lease);
    RETURN 'held';
EXCEPTION WHEN OTHERS THEN
    GET STACKED DIAGNOSTICS st = RETURNED_SQLSTATE, msg = MESSAGE_TEXT, det = PG_EXCEPTION_DETAIL;
    RETURN st || ': ' || replace(msg, lease::text, '<lease>') || E'\n'
              || regexp_replace(det, '\d{4}-\d\d-\d\d [0-9:.+-]+', '<time>');
END $$;
SELECT advlock_lease('report', 'checked', 60000, 0) AS checked \gset
SELECT advlock_lease_check(:'checked') = expires_at AS returns_expiry FROM advlock_leases WHERE lease = :'checked';
SELECT pg_temp.check_error(:'checked');
SELECT advlock_lease_release(:'checked');
SELECT pg_temp.check_error(:'checked');
-- Expired: not renewed within its 1 ms TTL (its entry is not freed yet: nobody waits).
SELECT advlock_lease('report', 'expiring', 1, 0) AS expiring \gset
SELECT pg_sleep(0.05);
SELECT pg_temp.check_error(:'expiring');
-- Renewed too late it is not revived (it ended at its expiry): the renewal frees its entry.
SELECT advlock_lease_renew(:'expiring', 60000) AS renewed_too_late;
SELECT advlock_lease_expiry(:'expiring') IS NULL AS freed;
SELECT pg_temp.check_error(12345);
SELECT advlock_lease_check(NULL);
