-- advlock.* settings in the three configurations, as PostgreSQL treats any extension's settings.
--
-- 1. This session, as the test command starts it: advlock is in shared_preload_libraries (the
--    preloaded runs: settings_1.out) or not loaded until its first use (settings.out). Until the
--    library is loaded, PostgreSQL keeps advlock.* assignments as unchecked placeholders.
SELECT count(*) AS advlock_settings_defined FROM pg_settings WHERE name LIKE 'advlock.%';
SET advlock.idle_treshold = '1s';
SET advlock.idle_threshold = 'abc';
-- The first advlock call loads the library: a misspelt placeholder is removed with a WARNING and
-- a bad value falls back to the default with a WARNING (PostgreSQL's own behaviour at load).
SELECT advlock_key('settings') IS NOT NULL AS loaded;
SHOW advlock.idle_threshold;
-- From now on (and from the start when preloaded) the prefix is reserved and values are checked.
SET advlock.idle_treshold = '1s';
SET advlock.idle_threshold = 'abc';
SET advlock.idle_threshold = '30s';
SHOW advlock.idle_threshold;
RESET advlock.idle_threshold;

-- 2. session_preload_libraries (here per database): checked from the first statement on.
CREATE DATABASE advlock_settings;
ALTER DATABASE advlock_settings SET session_preload_libraries = 'advlock';
\c advlock_settings
SELECT count(*) AS advlock_settings_defined FROM pg_settings WHERE name IN ('advlock.idle_threshold', 'advlock.allow_on_standby');
SET advlock.idle_treshold = '1s';
SET advlock.idle_threshold = 'abc';
-- ALTER DATABASE / ALTER ROLE ... SET are checked by the session that runs them: with advlock
-- loaded there, a misspelt name or a bad value is refused instead of stored.
ALTER DATABASE advlock_settings SET advlock.idle_treshold = '1s';
ALTER DATABASE advlock_settings SET advlock.idle_threshold = 'abc';
ALTER DATABASE advlock_settings SET advlock.idle_threshold = '5min';
\c advlock_regress
DROP DATABASE advlock_settings;
