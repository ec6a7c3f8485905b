-- Every function and view of advlock carries a one-line COMMENT, shown by \df+ and \dv+ and
-- returned by obj_description. A new object without one makes the first query return a row.
SELECT e.classid::regclass AS catalog, pg_describe_object(e.classid, e.objid, 0) AS object
  FROM pg_depend e
 WHERE e.refclassid = 'pg_extension'::regclass
   AND e.refobjid = (SELECT oid FROM pg_extension WHERE extname = 'advlock')
   AND e.deptype = 'e'
   AND e.classid IN ('pg_proc'::regclass, 'pg_class'::regclass)
   AND obj_description(e.objid, e.classid::regclass::text) IS NULL;

-- What psql users read:
SELECT p.oid::regprocedure AS function, obj_description(p.oid, 'pg_proc') AS description
  FROM pg_proc p
 WHERE p.proname LIKE 'advlock\_%'
 ORDER BY p.oid::regprocedure::text;

SELECT c.oid::regclass AS view, obj_description(c.oid, 'pg_class') AS description
  FROM pg_class c
 WHERE c.relname LIKE 'advlock\_%' AND c.relkind = 'v'
 ORDER BY c.oid::regclass::text;
