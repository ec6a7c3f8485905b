-- advlock_lease_check: raises LK002 when a lease is no longer held, for a writer to call in its
-- write transaction (docs/fences.md); returns the lease's expiry otherwise. PL/pgSQL around the
-- Rust feed advlock_lease_expiry (src/leases.rs), for the SQLSTATE of advlock's own class LK,
-- which pgrx cannot raise. Extension only (the SQL edition has no leases). Same conventions as
-- holders.sql: schema-qualified, no SECURITY DEFINER.

CREATE FUNCTION @extschema@.advlock_lease_check(lease pg_catalog.int8)
RETURNS pg_catalog.timestamptz
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    expires timestamptz;
BEGIN
    IF lease IS NULL THEN
        RAISE EXCEPTION 'argument "lease" of advlock_lease_check must not be null'
            USING ERRCODE = 'null_value_not_allowed',
                  HINT = 'Pass the lease id advlock_lease returned.';
    END IF;
    expires := @extschema@.advlock_lease_expiry(lease, 'advlock_lease_check');
    IF expires IS NULL THEN
        RAISE EXCEPTION 'lease % is not held', lease
            USING ERRCODE = 'LK002',
                  DETAIL = 'No lease with this id is held in this database: it was released, or it expired and was taken over, or a failover lost its grant (or it was never taken here).',
                  HINT = 'Roll back and stop writing: another holder may have the key now. Take a new lease to go on.';
    END IF;
    IF expires <= clock_timestamp() THEN
        RAISE EXCEPTION 'lease % is not held', lease
            USING ERRCODE = 'LK002',
                  DETAIL = format('It expired at %s: it was not renewed within its TTL.', expires),
                  HINT = 'Roll back and stop writing: another holder may have the key now. Take a new lease to go on.';
    END IF;
    RETURN expires;
END
$fn$;
