//! Labels (preloaded only): for every lock taken through an `(ns, id)` form, a shared-memory
//! entry with the label `ns:id`, scope, acquiring backend and acquisition time, read by
//! `advlock_labels()` and joined into `advlock_holders`.
//!
//! Layout: a fixed array of `advlock.max_labels` slots plus a lock-free free list (a Treiber
//! stack whose head carries an ABA tag). Only the backend that claimed a slot writes it, under a
//! per-slot sequence counter (a seqlock) that readers use to take consistent snapshots. Nothing
//! here waits: claiming is a bounded CAS loop, and when no slot is free the lock is taken
//! anyway and `labels_dropped` counts the entry that could not be recorded.
//!
//! Each backend keeps its own map (key, mode) -> slot + hold counts, and removes entries
//! * on `advlock_unlock` (session holds),
//! * after the lock manager released transaction locks (resource-release callback, top level),
//!   and after a subtransaction abort, dropping every entry whose lock it no longer holds
//!   (this also catches `pg_advisory_unlock_all()`, `DISCARD ALL`, or `pg_advisory_unlock`
//!   behind advlock's back, at the end of that transaction),
//! * at backend exit (`before_shmem_exit`, which also runs for `pg_terminate_backend`).
//!
//! A crashed backend makes the postmaster reinitialise all shared memory, so the table starts
//! empty again. Readers still never trust an entry alone: `advlock_labels()` skips entries
//! whose backend is gone, and `advlock_holders` only shows a label next to a granted
//! `pg_locks` row of the same pid, key and mode, so a stale entry can never show as held.
mod holds;
mod table;

use crate::backend;
use crate::lock_mode::Mode;
use crate::server_text::ServerTextOut;
use core::sync::atomic::Ordering;
pub use holds::{acquired, label_text, released_session, token_issued};
use pgrx::prelude::*;
use std::collections::HashMap;
use table::*;
pub use table::{LABEL_BYTES, SEGMENT};

/// (labels in use, capacity, dropped) for `advlock_stats_info`.
pub fn usage() -> Option<(i64, i64, i64)> {
    let table = table()?;
    Some((
        table.in_use(),
        table.slots.len() as i64,
        table.header.dropped.load(Ordering::Relaxed) as i64,
    ))
}

/// Labels advlock recorded for locks in the current database: one row per backend, key and
/// mode. No rows without preload. The label is NULL unless the caller may see that backend's
/// activity (same role, or pg_read_all_stats), as for `pg_stat_activity.query`.
#[pg_extern(volatile, parallel_restricted)]
#[allow(clippy::type_complexity)]
fn advlock_labels() -> TableIterator<
    'static,
    (
        name!(pid, i32),
        name!(key, i64),
        name!(mode, &'static str),
        name!(scope, &'static str),
        name!(held_since, Option<TimestampWithTimeZone>),
        name!(label, Option<ServerTextOut>),
    ),
> {
    let Some(table) = table() else {
        return TableIterator::empty();
    };
    // SAFETY: backend-local globals and a catalog check, in a transaction.
    let (database, me, all_stats) = unsafe {
        let me = pg_sys::GetUserId();
        (
            crate::backend::database(),
            me,
            pg_sys::has_privs_of_role(me, pg_sys::Oid::from(pg_sys::ROLE_PG_READ_ALL_STATS)),
        )
    };
    let mut rows = Vec::new();
    let mut may_see: HashMap<u32, bool> = HashMap::new();
    for index in 0..table.slots.len() {
        let Some(s) = table.read(index) else { continue };
        if s.database != database || !backend::backend_alive(s.procno, s.pid) {
            continue;
        }
        let visible = all_stats
            || *may_see.entry(s.role).or_insert_with(|| {
                // SAFETY: catalog lookup of role membership, in a transaction.
                unsafe { pg_sys::has_privs_of_role(me, pg_sys::Oid::from(s.role)) }
            });
        rows.push((
            s.pid,
            s.key,
            Mode::of_shared(s.flags & FLAG_SHARED != 0).word(),
            if s.flags & FLAG_SESSION != 0 {
                "session"
            } else {
                "xact"
            },
            backend::timestamptz(s.since),
            // An entry of a bare key (kept for its token) has no label.
            (visible && !s.label.is_empty()).then_some(ServerTextOut(s.label)),
        ));
    }
    TableIterator::new(rows)
}

/// One recorded hold, for `advlock_metrics`: whose, which lock, its namespace, since when.
pub struct RecordedHold {
    pub pid: i32,
    pub key: i64,
    pub shared: bool,
    /// The namespace in the server encoding; empty for a bare key's entry (kept for its token).
    pub ns: Vec<u8>,
    pub since: pg_sys::TimestampTz,
}

/// The holds recorded in the current database, or None without preload. Entries of backends
/// that are gone are skipped; callers match them against the lock table anyway.
pub fn recorded_holds() -> Option<Vec<RecordedHold>> {
    let table = table()?;
    // SAFETY: backend-local global, set at backend start.
    let database = crate::backend::database();
    let mut out = Vec::new();
    for index in 0..table.slots.len() {
        let Some(s) = table.read(index) else { continue };
        if s.database != database || !backend::backend_alive(s.procno, s.pid) {
            continue;
        }
        out.push(RecordedHold {
            pid: s.pid,
            key: s.key,
            shared: s.flags & FLAG_SHARED != 0,
            ns: s.label[..s.ns_len].to_vec(),
            since: s.since,
        });
    }
    Some(out)
}

/// Fencing tokens of the locks held in the current database through `advlock_try_with_token`:
/// one row per backend, key and mode, with the token of its latest such acquisition. No rows
/// without preload. (A separate function, not a column of `advlock_labels`, so that databases
/// upgraded from 0.2.0 keep that function's signature.) Tokens are not secret: anyone can
/// see the lock itself in pg_locks.
#[pg_extern(volatile, parallel_restricted)]
fn advlock_tokens() -> TableIterator<
    'static,
    (
        name!(pid, i32),
        name!(key, i64),
        name!(mode, &'static str),
        name!(token, i64),
    ),
> {
    let Some(table) = table() else {
        return TableIterator::empty();
    };
    // SAFETY: backend-local global, set at backend start.
    let database = crate::backend::database();
    let mut rows = Vec::new();
    for index in 0..table.slots.len() {
        let Some(s) = table.read(index) else { continue };
        if s.token == 0 || s.database != database || !backend::backend_alive(s.procno, s.pid) {
            continue;
        }
        let mode = Mode::of_shared(s.flags & FLAG_SHARED != 0).word();
        rows.push((s.pid, s.key, mode, s.token));
    }
    TableIterator::new(rows)
}
