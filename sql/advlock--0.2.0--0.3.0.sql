-- advlock 0.2.0 -> 0.3.0. The objects of a fresh 0.3.0 install, reached from 0.2.0
-- (pg_test/upgrade compares the two catalog by catalog).
--
-- PostgreSQL 15, 16, 17 and 18 from one source: no SQL-visible change. The same library serves
-- both versions' objects, so a cluster upgraded with pg_upgrade keeps working before this runs.
--
-- Every function gets a COMMENT (0.2.0 had them on the views only). Below: sql/comments.sql
-- verbatim, as a fresh install runs it.

-- One-line descriptions for \df+ and obj_description: every function and view of advlock has
-- one (pg_test/regress/sql/comments.sql fails when a new one lacks it). Runs last (finalize),
-- after every object exists. Each starts with "advlock:" so it is recognisable in \df+ output.

COMMENT ON FUNCTION @extschema@.advlock_key(pg_catalog.text, pg_catalog.text) IS
  'advlock: stable bigint lock key of (namespace, id), key spec v1 (SipHash-2-4 of ns || 0x00 || id in UTF-8); the same value in every client language and on every server';
COMMENT ON FUNCTION @extschema@.advlock_key(pg_catalog.text, pg_catalog.int8) IS
  'advlock: stable bigint lock key of (namespace, integer id); equals advlock_key(ns, id::text)';
COMMENT ON FUNCTION @extschema@.advlock_key(pg_catalog.text) IS
  'advlock: stable bigint lock key of a namespace alone; equals advlock_key(ns, '''')';

COMMENT ON FUNCTION @extschema@.advlock_try_with_timeout(pg_catalog.int8, pg_catalog.int4, pg_catalog.text, pg_catalog.text) IS
  'advlock: take the advisory lock on key, waiting at most timeout_ms in the lock manager''s queue; true when held, false when the wait ran out (scope xact|session, mode exclusive|shared)';
COMMENT ON FUNCTION @extschema@.advlock_try_with_timeout(pg_catalog.text, pg_catalog.text, pg_catalog.int4, pg_catalog.text, pg_catalog.text) IS
  'advlock: take the advisory lock on advlock_key(ns, id), waiting at most timeout_ms; true when held, false when the wait ran out (scope xact|session, mode exclusive|shared)';
COMMENT ON FUNCTION @extschema@.advlock_try_with_timeout(pg_catalog.text, pg_catalog.int8, pg_catalog.int4, pg_catalog.text, pg_catalog.text) IS
  'advlock: take the advisory lock on advlock_key(ns, id), waiting at most timeout_ms; true when held, false when the wait ran out (scope xact|session, mode exclusive|shared)';

COMMENT ON FUNCTION @extschema@.advlock_lock_with_timeout(pg_catalog.int8, pg_catalog.int4, pg_catalog.text, pg_catalog.text) IS
  'advlock: take the advisory lock on key, waiting at most timeout_ms; raises 55P03 naming the holder when the wait runs out';
COMMENT ON FUNCTION @extschema@.advlock_lock_with_timeout(pg_catalog.text, pg_catalog.text, pg_catalog.int4, pg_catalog.text, pg_catalog.text) IS
  'advlock: take the advisory lock on advlock_key(ns, id), waiting at most timeout_ms; raises 55P03 naming the holder when the wait runs out';
COMMENT ON FUNCTION @extschema@.advlock_lock_with_timeout(pg_catalog.text, pg_catalog.int8, pg_catalog.int4, pg_catalog.text, pg_catalog.text) IS
  'advlock: take the advisory lock on advlock_key(ns, id), waiting at most timeout_ms; raises 55P03 naming the holder when the wait runs out';

COMMENT ON FUNCTION @extschema@.advlock_unlock(pg_catalog.int8, pg_catalog.text) IS
  'advlock: release one session-scope hold of the advisory lock on key; false with a WARNING when none is held, like pg_advisory_unlock';
COMMENT ON FUNCTION @extschema@.advlock_unlock(pg_catalog.text, pg_catalog.text, pg_catalog.text) IS
  'advlock: release one session-scope hold of the advisory lock on advlock_key(ns, id); false with a WARNING when none is held';
COMMENT ON FUNCTION @extschema@.advlock_unlock(pg_catalog.text, pg_catalog.int8, pg_catalog.text) IS
  'advlock: release one session-scope hold of the advisory lock on advlock_key(ns, id); false with a WARNING when none is held';

COMMENT ON FUNCTION @extschema@.advlock_idle_threshold(pg_catalog.interval) IS
  'advlock: the idle threshold in effect: older_than, or the advlock.idle_threshold setting when NULL; rejects a negative interval';
COMMENT ON FUNCTION @extschema@.advlock_lock_entries() IS
  'advlock: the advisory locks of this database as the lock manager holds them (key, mode, granted, pid, waiting_since); the rows behind advlock_holders';
COMMENT ON FUNCTION @extschema@.advlock_labels() IS
  'advlock: the labels (ns/id), scopes and hold times advlock recorded for locks held in this database, one row per backend, key and mode; no rows unless advlock is in shared_preload_libraries';
COMMENT ON FUNCTION @extschema@.advlock_idle_holders(pg_catalog.interval) IS
  'advlock: advlock_holders rows of granted locks whose backend has been idle for at least older_than (NULL: advlock.idle_threshold)';
COMMENT ON FUNCTION @extschema@.advlock_leak_count(pg_catalog.interval) IS
  'advlock: number of backends holding advisory locks while idle for at least older_than (NULL: advlock.idle_threshold); alert when not 0';
COMMENT ON FUNCTION @extschema@.advlock_terminate_idle_holders(pg_catalog.interval, pg_catalog.bool) IS
  'advlock: list (dry_run => true, the default) or terminate (dry_run => false) the backends behind idle holders, with the caller''s own rights';

COMMENT ON FUNCTION @extschema@.advlock_stats() IS
  'advlock: per-namespace acquisition counters of this database, as in the advlock_stats view; needs shared_preload_libraries';
COMMENT ON FUNCTION @extschema@.advlock_stats_info() IS
  'advlock: fill level of the shared label and statistics tables, as in the advlock_stats_info view; needs shared_preload_libraries';
COMMENT ON FUNCTION @extschema@.advlock_stats_reset(pg_catalog.text) IS
  'advlock: reset the statistics of namespace ns in this database, or of every namespace when ns is NULL; returns the reset time; needs shared_preload_libraries';
