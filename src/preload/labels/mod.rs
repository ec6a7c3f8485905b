//! Labels (preloaded only): for every lock taken through an `(ns, id)` form, a shared-memory
//! entry with the label `ns:id`, scope, acquiring backend and acquisition time, read by
//! `advlock_labels()` and looked up, lock by lock, by `advlock_holder_entries()` (the rows of
//! `advlock_holders`), `advlock_metrics()` and the reclaiming sweep.
//!
//! Layout: a fixed array of `advlock.max_labels` slots, a bitmap of the published ones (what
//! readers scan), and a lock-free free list (a Treiber
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
//! whose backend is gone, and `advlock_holders` only shows a label next to a granted lock of
//! the same pid, key and mode in the lock table (`advlock_holder_entries` reads both from one
//! snapshot), so a stale entry can never show as held.
mod holds;
mod table;

use crate::backend;
use crate::lock_mode::{Mode, Scope};
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

/// The recorded entries of the current database whose backend is still alive: the one walk over
/// the label slots behind every reader below. Stale entries of a vanished backend are skipped
/// (readers match entries against the lock table anyway).
/// `part`: how much of each label to copy.
fn live_in_my_database(
    table: &Table,
    part: LabelPart,
) -> impl Iterator<Item = (usize, Snapshot)> + '_ {
    let database = backend::database();
    table
        .occupied_slots()
        .filter_map(move |index| table.read_part(index, part).map(|s| (index, s)))
        .filter(move |(_, s)| s.database == database && backend::backend_alive(s.procno, s.pid))
}

/// Whether the caller may see the label of an entry taken by `role`: pg_read_all_stats, or the
/// privileges of that role, as for `pg_stat_activity.query` (one catalog check per role).
struct LabelVisibility {
    me: pg_sys::Oid,
    all_stats: bool,
    by_role: HashMap<u32, bool>,
}

impl LabelVisibility {
    fn new() -> Self {
        // SAFETY: a backend-local global and a catalog check, in a transaction.
        let (me, all_stats) = unsafe {
            let me = pg_sys::GetUserId();
            let all_stats =
                pg_sys::has_privs_of_role(me, pg_sys::Oid::from(pg_sys::ROLE_PG_READ_ALL_STATS));
            (me, all_stats)
        };
        LabelVisibility {
            me,
            all_stats,
            by_role: HashMap::new(),
        }
    }

    fn may_see(&mut self, role: u32) -> bool {
        let me = self.me;
        self.all_stats
            || *self.by_role.entry(role).or_insert_with(|| {
                // SAFETY: catalog lookup of role membership, in a transaction.
                unsafe { pg_sys::has_privs_of_role(me, pg_sys::Oid::from(role)) }
            })
    }
}

fn scope_word(flags: u32) -> &'static str {
    if flags & FLAG_SESSION != 0 {
        Scope::Session.word()
    } else {
        Scope::Xact.word()
    }
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
    let mut visibility = LabelVisibility::new();
    let rows: Vec<_> = live_in_my_database(&table, LabelPart::Whole)
        .map(|(_, s)| {
            let visible = visibility.may_see(s.role);
            (
                s.pid,
                s.key,
                Mode::of_shared(s.flags & FLAG_SHARED != 0).word(),
                scope_word(s.flags),
                backend::timestamptz(s.since),
                // An entry of a bare key (kept for its token) has no label.
                (visible && !s.label.is_empty()).then_some(ServerTextOut(s.label)),
            )
        })
        .collect();
    TableIterator::new(rows)
}

/// What advlock recorded of one granted lock, for `advlock_holders`.
pub struct Recorded {
    /// NULL unless the caller may see it (see `advlock_labels`), and for a bare key's entry.
    pub label: Option<Vec<u8>>,
    pub scope: &'static str,
    pub since: pg_sys::TimestampTz,
    /// 0 when the lock was not taken through `advlock_try_with_token`.
    pub token: i64,
}

/// The recorded entries of the current database, found by (pid, key, shared): `advlock_holders`
/// looks each granted lock up here. Built from the entries' identities alone; a label is copied
/// only for a lock that is looked up.
pub struct RecordedLocks {
    table: Table,
    slot_of: HashMap<(i32, i64, bool), usize>,
    visibility: LabelVisibility,
}

/// None without preload, or when nothing is recorded in this database.
pub fn recorded_locks() -> Option<RecordedLocks> {
    let table = table()?;
    let slot_of: HashMap<_, _> = live_in_my_database(&table, LabelPart::Nothing)
        .map(|(index, s)| ((s.pid, s.key, s.flags & FLAG_SHARED != 0), index))
        .collect();
    if slot_of.is_empty() {
        return None;
    }
    Some(RecordedLocks {
        table,
        slot_of,
        visibility: LabelVisibility::new(),
    })
}

impl RecordedLocks {
    /// What was recorded for this backend's hold of `key` in this mode, read afresh from its
    /// slot: None when nothing was, or when the slot has been reused since the lookup table was
    /// built (a stale entry matches nothing).
    pub fn get(&mut self, pid: i32, key: i64, shared: bool) -> Option<Recorded> {
        let &index = self.slot_of.get(&(pid, key, shared))?;
        let s = self.table.read(index)?;
        if s.pid != pid || s.key != key || (s.flags & FLAG_SHARED != 0) != shared {
            return None;
        }
        let visible = self.visibility.may_see(s.role);
        Some(Recorded {
            scope: scope_word(s.flags),
            since: s.since,
            token: s.token,
            label: (visible && !s.label.is_empty()).then_some(s.label),
        })
    }
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
    Some(
        live_in_my_database(&table, LabelPart::Namespace)
            .map(|(_, s)| RecordedHold {
                pid: s.pid,
                key: s.key,
                shared: s.flags & FLAG_SHARED != 0,
                ns: s.label,
                since: s.since,
            })
            .collect(),
    )
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
    let rows: Vec<_> = live_in_my_database(&table, LabelPart::Nothing)
        .filter(|(_, s)| s.token != 0)
        .map(|(_, s)| {
            let mode = Mode::of_shared(s.flags & FLAG_SHARED != 0).word();
            (s.pid, s.key, mode, s.token)
        })
        .collect();
    TableIterator::new(rows)
}
