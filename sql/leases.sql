-- advlock_leases: leases held and awaited in this database (src/leases.rs), from the shared
-- lease table; empty without shared_preload_libraries. Same conventions as holders.sql:
-- schema-qualified, no SECURITY DEFINER. The election's columns (candidate, terms_*) come from
-- functions of their own, joined last, so that 0.4.0 installs get them with CREATE OR REPLACE VIEW.

CREATE VIEW @extschema@.advlock_leases AS
SELECT e.key, e.label, e.slots, e.lease, e.granted,
       pg_catalog.pg_get_userbyid(e.role) AS role,
       e.pid, e.application_name, e.granted_at, e.renewed_at, e.expires_at, e.waiting_since,
       c.candidate
  FROM @extschema@.advlock_lease_entries() e
  LEFT JOIN @extschema@.advlock_lease_candidates() c ON c.lease = e.lease;

COMMENT ON VIEW @extschema@.advlock_leases IS
  'advlock: one row per lease held (lease id = fencing token, role, who took or last renewed it, expires_at, the candidate of an election term) and per backend waiting for one (waiting_since) in this database; needs shared_preload_libraries';

CREATE VIEW @extschema@.advlock_lease_stats AS
SELECT s.capacity, s.held, s.waiting, s.granted, s.released, s.expired, s.renewed, s.timed_out,
       t.terms_started, t.terms_expired, t.terms_resigned
  FROM @extschema@.advlock_lease_stats() s
 CROSS JOIN @extschema@.advlock_term_stats() t;

COMMENT ON VIEW @extschema@.advlock_lease_stats IS
  'advlock: lease table use (capacity = advlock.max_leases, held, waiting) and totals since the server started, all databases: granted, released, expired (not renewed in time), renewed, timed_out waits; election terms started, expired and resigned; needs shared_preload_libraries';

-- Readable by everyone, like advlock_holders and pg_locks.
GRANT SELECT ON @extschema@.advlock_leases, @extschema@.advlock_lease_stats TO PUBLIC;
