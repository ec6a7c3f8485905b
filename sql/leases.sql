-- advlock_leases: leases held and awaited in this database (src/leases.rs), from the shared
-- lease table; empty without shared_preload_libraries. Same conventions as holders.sql:
-- schema-qualified, no SECURITY DEFINER.

CREATE VIEW @extschema@.advlock_leases AS
SELECT e.key, e.label, e.slots, e.lease, e.granted,
       pg_catalog.pg_get_userbyid(e.role) AS role,
       e.pid, e.application_name, e.granted_at, e.renewed_at, e.expires_at, e.waiting_since
  FROM @extschema@.advlock_lease_entries() e;

COMMENT ON VIEW @extschema@.advlock_leases IS
  'advlock: one row per lease held (lease id = fencing token, role, who took or last renewed it, expires_at) and per backend waiting for one (waiting_since) in this database; needs shared_preload_libraries';

CREATE VIEW @extschema@.advlock_lease_stats AS
SELECT s.capacity, s.held, s.waiting, s.granted, s.released, s.expired, s.renewed, s.timed_out
  FROM @extschema@.advlock_lease_stats() s;

COMMENT ON VIEW @extschema@.advlock_lease_stats IS
  'advlock: lease table use (capacity = advlock.max_leases, held, waiting) and totals since the server started, all databases: granted, released, expired (not renewed in time), renewed, timed_out waits; needs shared_preload_libraries';

-- Readable by everyone, like advlock_holders and pg_locks.
GRANT SELECT ON @extschema@.advlock_leases, @extschema@.advlock_lease_stats TO PUBLIC;
