-- advlock_metrics: what an exporter scrapes every 15-60 s (monitoring/postgres_exporter).
-- Computed in Rust (src/metrics.rs): one row per namespace plus the unknown-namespace row.
CREATE VIEW @extschema@.advlock_metrics AS
SELECT m.ns, m.holders, m.locks, m.leaked_holders, m.leaked_locks, m.idle_in_transaction_holders,
       m.hidden_holders, m.waiters, m.oldest_wait_seconds, m.oldest_hold_seconds,
       m.acquisitions, m.immediate, m.waits, m.timeouts, m.wait_seconds, m.preloaded,
       m.idle_terminations
  FROM @extschema@.advlock_metrics() m;

-- Readable by everyone, like advlock_holders; what it counts as hidden depends on the caller.
GRANT SELECT ON @extschema@.advlock_metrics TO PUBLIC;

COMMENT ON VIEW @extschema@.advlock_metrics IS
  'advlock: gauges per namespace (holders, leaked and idle-in-transaction holders, hidden holders, waiters, oldest wait and hold) and, preloaded, the acquisition counters; for exporters';
