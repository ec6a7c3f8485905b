-- Statistics entries of dropped databases are freed when their slots are needed, so a server
-- where databases come and go keeps counting new namespaces. In the test command's
-- tiny-capacity run (advlock.max_namespaces = 2) three dropped databases fill the table first.
-- Without preload every statistics call raises 55000 (the other expected file).
SELECT advlock_stats_reset() IS NOT NULL AS this_database_reset;
SELECT stats_dropped AS dropped_before FROM advlock_stats_info \gset

CREATE DATABASE advlock_gc_1;
\c advlock_gc_1
CREATE EXTENSION advlock;
BEGIN; SELECT advlock_try_with_timeout('gc-ns-1', 'x', 0); COMMIT;
\c advlock_regress
DROP DATABASE advlock_gc_1 WITH (FORCE);

CREATE DATABASE advlock_gc_2;
\c advlock_gc_2
CREATE EXTENSION advlock;
BEGIN; SELECT advlock_try_with_timeout('gc-ns-2', 'x', 0); COMMIT;
\c advlock_regress
DROP DATABASE advlock_gc_2 WITH (FORCE);

-- The table may now be full of entries whose databases are gone: they make room.
CREATE DATABASE advlock_gc_3;
\c advlock_gc_3
CREATE EXTENSION advlock;
BEGIN; SELECT advlock_try_with_timeout('gc-ns-3', 'x', 0); COMMIT;
SELECT ns, acquisitions FROM advlock_stats;
\c advlock_regress
DROP DATABASE advlock_gc_3 WITH (FORCE);

BEGIN; SELECT advlock_try_with_timeout('gc-final', 'x', 0); COMMIT;
SELECT ns, acquisitions FROM advlock_stats WHERE ns LIKE 'gc-%';
SELECT stats_dropped - :dropped_before AS samples_dropped FROM advlock_stats_info;
