-- The range error of advlock.idle_threshold (from holders.sql). PostgreSQL 17 added the unit to
-- the bounds: settings_range.out is 17 and later, settings_range_1.out 15 and 16.
-- The first advlock call loads the library (until then advlock.* values are not checked).
SELECT advlock_key('settings') IS NOT NULL AS loaded;
SET advlock.idle_threshold = -1;
