-- A PostgreSQL 17 database that uses advlock the way applications do: a generated key column
-- with an index on it, session and transaction locks taken, statistics counted (preloaded).
\set ON_ERROR_STOP 1
CREATE EXTENSION advlock;
CREATE TABLE jobs (
    id      bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    queue   text   NOT NULL,
    job_id  text   NOT NULL,
    lock_key bigint GENERATED ALWAYS AS (advlock_key(queue, job_id)) STORED
);
CREATE INDEX jobs_lock_key ON jobs (lock_key);
INSERT INTO jobs (queue, job_id)
SELECT (ARRAY['billing', 'emails', 'rollup', 'Ünïcødé ☃'])[1 + g % 4], 'job-' || g
  FROM generate_series(1, 20000) g;
SELECT advlock_try_with_timeout('billing', 'job-4', 100, scope => 'session') AS took_session;
BEGIN;
SELECT advlock_lock_with_timeout(advlock_key('emails', 'job-1'), 100, scope => 'xact', mode => 'shared');
COMMIT;
SELECT advlock_unlock('billing', 'job-4') AS released;
-- A fence passed (docs/fences.md): an ordinary row of advlock_fences, which must come through.
SELECT advlock_fence('billing', 'ledger', 42);
