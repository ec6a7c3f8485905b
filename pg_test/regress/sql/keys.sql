-- advlock_key(ns, id): stable namespaced keys (contract v1, never changes).
-- The golden values from the specification:
SELECT advlock_key('rollup', 'nightly');
SELECT advlock_key('account', 42);
SELECT advlock_key('migrate');

-- An integer id hashes as its decimal text, so account 42 and '42' agree:
SELECT advlock_key('account', 42) = advlock_key('account', '42') AS same_key;
-- The namespace separates features that use the same ids:
SELECT advlock_key('billing', 42) <> advlock_key('shipping', 42) AS different_keys;
-- advlock_key(ns) is the singleton key advlock_key(ns, ''):
SELECT advlock_key('migrate') = advlock_key('migrate', '') AS same_key;

-- Non-ASCII text is hashed as UTF-8:
SELECT advlock_key('café', 'crème brûlée');

-- IMMUTABLE: usable in indexes and generated columns.
CREATE TABLE jobs (
  queue text NOT NULL,
  job_id bigint NOT NULL,
  lock_key bigint GENERATED ALWAYS AS (advlock_key(queue, job_id)) STORED
);
INSERT INTO jobs VALUES ('emails', 1), ('emails', 2);
SELECT queue, job_id, lock_key FROM jobs ORDER BY job_id;
DROP TABLE jobs;

-- A NULL never flows silently into the lock manager: it is an error naming the argument.
SELECT advlock_key(NULL, 'x');
SELECT advlock_key('billing', NULL::text);
SELECT advlock_key('billing', NULL::bigint);
SELECT advlock_key(NULL);
-- An empty namespace is rejected too:
SELECT advlock_key('', 'x');
-- The SQLSTATEs, for clients that branch on them:
DO $$
BEGIN
  PERFORM advlock_key(NULL, 'x');
EXCEPTION WHEN null_value_not_allowed THEN RAISE NOTICE 'NULL ns: SQLSTATE %', SQLSTATE;
END $$;
DO $$
BEGIN
  PERFORM advlock_key('', 'x');
EXCEPTION WHEN invalid_parameter_value THEN RAISE NOTICE 'empty ns: SQLSTATE %', SQLSTATE;
END $$;
