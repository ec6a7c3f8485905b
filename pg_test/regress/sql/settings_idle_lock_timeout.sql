-- advlock.idle_session_lock_timeout: off by default, milliseconds, settable by any user (as
-- idle_session_timeout), negative values refused. What it does to sessions:
-- pg_test/clients/test_idle_lock_timeout.py; docs/idle-session-locks.md.
SELECT advlock_key('settings') IS NOT NULL AS loaded;
SELECT name, setting, unit, context, vartype, min_val, boot_val
  FROM pg_settings WHERE name = 'advlock.idle_session_lock_timeout';
SHOW advlock.idle_session_lock_timeout;
SET advlock.idle_session_lock_timeout = '5s';
SHOW advlock.idle_session_lock_timeout;
SET advlock.idle_session_lock_timeout = 250;
SHOW advlock.idle_session_lock_timeout;
-- Refused with 22023 (the message's wording differs between majors).
DO $$
BEGIN
    SET advlock.idle_session_lock_timeout = -1;
EXCEPTION WHEN invalid_parameter_value THEN
    RAISE NOTICE 'negative value refused: %', SQLSTATE;
END
$$;
SET advlock.idle_session_lock_timeout = 0;
SHOW advlock.idle_session_lock_timeout;
-- A role without any privilege may set it for itself (a leader's connection opting out).
CREATE ROLE advlock_idle_nobody;
SET ROLE advlock_idle_nobody;
SET advlock.idle_session_lock_timeout = 0;
RESET ROLE;
DROP ROLE advlock_idle_nobody;
RESET advlock.idle_session_lock_timeout;
