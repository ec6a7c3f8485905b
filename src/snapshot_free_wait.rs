//! Waits that hold no snapshot: `CALL advlock_wait_lock(…)`, `CALL advlock_wait_lease(…)`, and for
//! leader election `CALL advlock_wait_campaign(…)` and `CALL advlock_wait_leader(…)` (a follower
//! observes for minutes: a snapshot held that long would also hold back VACUUM's horizon).
//!
//! A backend waiting for a lock inside a statement holds that statement's snapshot, and
//! `CREATE INDEX CONCURRENTLY` waits for every backend whose snapshot is older than its own
//! (`WaitForOlderSnapshots`, which skips only backends with no xmin). So when the holder of an
//! advisory lock builds an index concurrently — the migration that pods wait for — CIC waits for
//! the waiters, the waiters wait for the holder: the deadlock detector kills one (40P01), or, for
//! a lease waiter that the lock manager cannot see, CIC stalls for the waiter's whole timeout.
//! Even a waiter with no statement snapshot keeps the catalog snapshot of its name lookups.
//!
//! A procedure called with `CALL` outside a transaction block runs in a non-atomic context and
//! may commit. These four commit first (`SPI_commit`: the caller's transaction ends, the portal's
//! snapshots are forgotten and the catalog snapshot is invalidated), so the wait that follows runs
//! in a fresh transaction with no snapshot at all, and CIC does not wait for it. Everything they
//! need after the commit — the key, the arguments — was evaluated by `CALL` before. Inside a
//! transaction block (an atomic context) they cannot commit and refuse with 25001.
//!
//! The entry points themselves are in `fmgr`, with the library's other hand-written ones; this
//! module holds what makes them snapshot-free, and declares them.
use crate::errors::Report;
use pgrx::pg_sys;
use pgrx::pg_sys::errcodes::PgSqlErrorCode;

pub const WAIT_LOCK: &str = "advlock_wait_lock";
pub const WAIT_LEASE: &str = "advlock_wait_lease";
pub const WAIT_CAMPAIGN: &str = "advlock_wait_campaign";
pub const WAIT_LEADER: &str = "advlock_wait_leader";

/// Ends the caller's transaction so that nothing of it (snapshots included) is held while
/// waiting, or raises 25001 where `CALL` runs atomically (inside a transaction block:
/// `nonatomic` false). Returns with SPI connected; [`finish`] disconnects.
pub fn commit_first(nonatomic: bool, function: &str) {
    if !nonatomic {
        Report::new(
            PgSqlErrorCode::ERRCODE_ACTIVE_SQL_TRANSACTION,
            format!("{function} must be called with CALL outside a transaction block"),
        )
        .detail("It commits before waiting, so that the wait holds no snapshot (CREATE INDEX CONCURRENTLY waits for snapshots).")
        .hint("Run CALL on its own (autocommit); inside a transaction use the functions, which wait with the transaction's snapshot.")
        .raise();
    }
    // SAFETY: a non-atomic procedure context (checked above by the caller's call context), as
    // SPI_commit requires; SPI errors raise.
    unsafe {
        pg_sys::SPI_connect_ext(pg_sys::SPI_OPT_NONATOMIC as i32);
        pg_sys::SPI_commit();
    }
}

/// Disconnects SPI, connected by [`commit_first`]: the current memory context is the caller's
/// again (SPI's procedure context, and anything built in it, is freed).
pub fn finish() {
    // SAFETY: SPI is connected by commit_first, in this call.
    unsafe {
        pg_sys::SPI_finish();
    }
}

pgrx::extension_sql!(
    r#"
-- Waits that hold no snapshot (src/snapshot_free_wait.rs): procedures, so that they can commit
-- before waiting. C functions of the library, declared here (pgrx declares functions only).
CREATE PROCEDURE @extschema@.advlock_wait_lock(
    key bigint, timeout_ms integer, mode text DEFAULT 'exclusive', INOUT acquired boolean DEFAULT NULL)
  LANGUAGE c AS 'MODULE_PATHNAME', 'advlock_wait_lock';
CREATE PROCEDURE @extschema@.advlock_wait_lease(
    key bigint, ttl_ms integer, timeout_ms integer, slots integer DEFAULT 1, INOUT lease bigint DEFAULT NULL)
  LANGUAGE c AS 'MODULE_PATHNAME', 'advlock_wait_lease';
"#,
    name = "snapshot_free_wait",
);

pgrx::extension_sql!(
    r#"
-- Leader election's snapshot-free waits (src/election.rs), C functions declared like the above.
CREATE PROCEDURE @extschema@.advlock_wait_campaign(
    key bigint, ttl_ms integer, timeout_ms integer, candidate text, INOUT term bigint DEFAULT NULL)
  LANGUAGE c AS 'MODULE_PATHNAME', 'advlock_wait_campaign';
CREATE PROCEDURE @extschema@.advlock_wait_leader(
    key bigint, timeout_ms integer, known_term bigint DEFAULT NULL,
    INOUT term bigint DEFAULT NULL, INOUT changed boolean DEFAULT NULL, INOUT candidate text DEFAULT NULL)
  LANGUAGE c AS 'MODULE_PATHNAME', 'advlock_wait_leader';
"#,
    name = "election_waits",
    requires = ["snapshot_free_wait"],
);
