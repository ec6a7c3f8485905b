-- What the upsert of advlock_fence raises is PostgreSQL's own error, as from a C function: a
-- role without INSERT and UPDATE on advlock_fences gets "permission denied for table
-- advlock_fences" (42501) with the statement that raised it as CONTEXT, and no DETAIL (through
-- pgrx's guard the CONTEXT was lost, and a server run with RUST_BACKTRACE set appended a Rust
-- backtrace to the DETAIL). The SQL edition's advlock_fence is PL/pgSQL: its CONTEXT names its
-- own statement and function (pg_test/edition/expected/fence_errors.out). A statement timeout
-- while waiting for the fence's row, and a serialization failure: the fence-errors isolation spec.
\set SHOW_CONTEXT errors
CREATE ROLE regress_fence_nopriv;
-- Every role passes fences (INSERT, UPDATE to PUBLIC): taken away for this transaction only.
BEGIN;
REVOKE INSERT, UPDATE ON advlock_fences FROM PUBLIC;
SET ROLE regress_fence_nopriv;
SELECT advlock_fence('orders', '42', 1);
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
-- The same in a subtransaction, each form: the error leaves it as from C (the SPI connection it
-- left open is closed by the subtransaction's abort), and the next call passes.
BEGIN;
REVOKE INSERT, UPDATE ON advlock_fences FROM PUBLIC;
SAVEPOINT keyed;
SET ROLE regress_fence_nopriv;
SELECT advlock_fence(12345, 1);
\echo :LAST_ERROR_SQLSTATE
ROLLBACK TO SAVEPOINT keyed;
SAVEPOINT numbered;
SET ROLE regress_fence_nopriv;
SELECT advlock_fence('orders', 7, 1);
\echo :LAST_ERROR_SQLSTATE
ROLLBACK TO SAVEPOINT numbered;
SELECT current_user = session_user AS owner_again;
SELECT advlock_fence(12345, 1), advlock_fence('orders', 7, 1), advlock_fence('orders', '42', 1);
SELECT count(*) AS passed FROM advlock_fences;
ROLLBACK;
SELECT count(*) AS left_behind FROM advlock_fences;
DROP ROLE regress_fence_nopriv;
