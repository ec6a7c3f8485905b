-- Fences (sql/fence.sql, docs/fences.md) in one session: passing and refusing, equal tokens,
-- the three key forms, the refusal taking the transaction with it, reset, the table's guard,
-- privileges, argument errors. The same output in the extension (preloaded or not) and in the
-- SQL edition. Between sessions: the fence-race and fence-stale-writer isolation specs.
\set SHOW_CONTEXT never
SET datestyle = ISO;
-- Runs a statement; returns its error (SQLSTATE, message, DETAIL with times masked, HINT) or 'ok'.
CREATE FUNCTION pg_temp.try(statement text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE st text; msg text; det text; hnt text;
BEGIN
    EXECUTE statement;
    RETURN 'ok';
EXCEPTION WHEN OTHERS THEN
    GET STACKED DIAGNOSTICS st = RETURNED_SQLSTATE, msg = MESSAGE_TEXT, det = PG_EXCEPTION_DETAIL, hnt = PG_EXCEPTION_HINT;
    RETURN st || ': ' || msg || E'\nDETAIL: ' || regexp_replace(det, '\d{4}-\d\d-\d\d [0-9:.+-]+', '<time>', 'g')
              || E'\nHINT: ' || hnt;
END $$;

-- The first pass records the fence; a larger token passes, an equal one too (a retry).
SELECT advlock_fence('orders', '42', 100);
SELECT key = advlock_key('orders', '42') AS key_matches, token, ns, id, passed_by = current_user AS by_me,
       passed_at <= statement_timestamp() AS passed_before_now
  FROM advlock_fences;
SELECT advlock_fence('orders', '42', 200);
SELECT advlock_fence('orders', '42', 200);
SELECT token FROM advlock_fences WHERE key = advlock_key('orders', '42');
-- A smaller token is refused: LK001 naming the fence and both tokens.
SELECT pg_temp.try($$SELECT advlock_fence('orders', '42', 150)$$);
-- ... and its transaction goes with it, what it wrote before the call included.
CREATE TABLE fenced_orders (id int PRIMARY KEY, status text NOT NULL);
BEGIN;
INSERT INTO fenced_orders VALUES (42, 'shipped by the stale holder');
\set VERBOSITY terse
SELECT advlock_fence('orders', '42', 150);
\set VERBOSITY default
COMMIT;
SELECT count(*) AS stale_rows FROM fenced_orders;
-- The holder of token 200 writes through the fence.
BEGIN;
SELECT advlock_fence('orders', '42', 200);
INSERT INTO fenced_orders VALUES (42, 'shipped');
COMMIT;
SELECT * FROM fenced_orders;

-- The three forms share fences by key: (ns, 7) and (ns, '7') are one fence, as their keys are.
SELECT advlock_fence('orders', 7, 5);
SELECT pg_temp.try($$SELECT advlock_fence('orders', '7', 4)$$);
SELECT pg_temp.try($$SELECT advlock_fence('orders', 7, 4)$$);
SELECT pg_temp.try($$SELECT advlock_fence(advlock_key('orders', 7), 4)$$);
SELECT advlock_fence(advlock_key('orders', 7), 6);
SELECT advlock_fence(12345, 1);
SELECT advlock_fence(12345, 1) AS equal_passes_again;
SELECT key, token, ns, id FROM advlock_fences ORDER BY token;

-- Reset forgets a fence: it returns the token it had (NULL: none), and any token passes next.
SELECT advlock_fence_reset('orders', '42');
SELECT advlock_fence_reset('orders', '42');
SELECT advlock_fence('orders', '42', 1);
SELECT advlock_fence_reset('orders', 7), advlock_fence_reset(12345), advlock_fence_reset('orders', '42');
SELECT count(*) FROM advlock_fences;

-- The table's guard: nobody lowers a token or moves a fence to another key by hand, not even
-- the owner: forgetting a fence is a reset (DELETE). Raising one by hand is passing it.
SELECT advlock_fence('orders', '42', 300);
SELECT pg_temp.try($$UPDATE advlock_fences SET token = 299$$);
SELECT pg_temp.try($$UPDATE advlock_fences SET key = 1$$);
SELECT pg_temp.try($$UPDATE advlock_fences SET token = 301$$);
SELECT token FROM advlock_fences;

-- Privileges: any role passes fences (INSERT, UPDATE to PUBLIC) and reads them; resetting
-- needs DELETE, which the owner has; a new fence's passed_by is its inserter.
CREATE ROLE regress_fence_writer;
GRANT CREATE, USAGE ON SCHEMA public TO regress_fence_writer;
SET ROLE regress_fence_writer;
SELECT advlock_fence('orders', '42', 400);
SELECT token, passed_by FROM advlock_fences;
SELECT pg_temp.try($$SELECT advlock_fence_reset('orders', '42')$$);
SELECT pg_temp.try($$DELETE FROM advlock_fences$$);
SELECT pg_temp.try($$INSERT INTO advlock_fences (key, token, passed_by) VALUES (98, 1, 'postgres')$$);
SELECT pg_temp.try($$UPDATE advlock_fences SET token = 399$$);
RESET ROLE;
SELECT has_table_privilege('regress_fence_writer', 'advlock_fences', 'DELETE') AS writer_may_reset,
       has_table_privilege(current_user, 'advlock_fences', 'DELETE') AS owner_may_reset;
SELECT advlock_fence_reset('orders', '42');
REVOKE CREATE, USAGE ON SCHEMA public FROM regress_fence_writer;
DROP ROLE regress_fence_writer;

-- A read-only transaction cannot pass a fence (it writes).
BEGIN READ ONLY;
SELECT advlock_fence('orders', '42', 500);
ROLLBACK;

-- Arguments.
SELECT advlock_fence(NULL::bigint, 1);
SELECT advlock_fence(1, NULL);
SELECT advlock_fence(1, 0);
SELECT advlock_fence(1, -5);
SELECT advlock_fence(NULL, 'x', 1);
SELECT advlock_fence('', 'x', 1);
SELECT advlock_fence('orders', NULL::text, 1);
SELECT advlock_fence('orders', NULL::bigint, 1);
SELECT advlock_fence('orders', 'x', NULL);
SELECT advlock_fence('orders', 7, 0);
SELECT advlock_fence_reset(NULL::bigint);
SELECT advlock_fence_reset(NULL, 'x');
SELECT advlock_fence_reset('', 7);
SELECT advlock_fence_reset('orders', NULL::text);
SELECT count(*) FROM advlock_fences;
DROP TABLE fenced_orders;
