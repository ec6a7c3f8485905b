-- timeout_ms has no default, on purpose: an unbounded wait is what advlock exists to prevent,
-- and "try" without a bound would silently mean something. Left out, the (ns, id) calls resolve
-- to the (key bigint, timeout_ms) form, and PostgreSQL reports the namespace as a bad bigint
-- before advlock runs. advlock cannot catch that call with an overload of its own: any overload
-- that the natural call would reach also captures advlock_try_with_timeout($1, $2) sent with
-- untyped parameters (asyncpg), which today correctly means (key, timeout_ms). The README says
-- so under "Leaving out timeout_ms"; these are the errors a user sees.
SELECT advlock_try_with_timeout('account', 42);
SELECT advlock_try_with_timeout('billing', 'invoice-17');
SELECT advlock_lock_with_timeout('account', 42);
-- An untyped NULL as timeout_ms resolves the same way (key bigint, timeout_ms, scope):
SELECT advlock_try_with_timeout('account', 42, NULL);
-- With timeout_ms (0 = try without waiting), every form works:
BEGIN;
SELECT advlock_try_with_timeout('account', 42, 0), advlock_try_with_timeout('billing', 'invoice-17', 0),
       advlock_try_with_timeout(advlock_key('account', 42), 0);
COMMIT;
