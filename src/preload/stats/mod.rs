//! Contention statistics per namespace (preloaded only): `advlock_stats`,
//! `advlock_stats_reset`, `advlock_stats_info`, and the counters of `advlock_metrics`.
//!
//! The shared table (`table`) holds one entry per (database, namespace); a bare bigint key
//! counts under a NULL namespace. Recording never waits: it tries the table's LWLock a bounded
//! number of times (LWLockConditionalAcquire) and, if that fails or the table is full, counts
//! a dropped sample instead.
mod table;

use crate::backend;
use crate::lock_request::Target;
use crate::preload::labels;
use crate::preload::shmem;
use crate::server_text::{ServerText, ServerTextOut};
use core::sync::atomic::Ordering;
use pgrx::pg_sys;
use pgrx::prelude::*;
use std::time::Instant;
pub use table::SEGMENT;
use table::{table, Key, Table, NS_BYTES};

/// One namespace's counters: the one shape in which they are read from the table, written back
/// when it is rebuilt, and shown by the views.
#[derive(Clone, Copy, Default)]
pub struct Counters {
    pub acquisitions: u64,
    pub immediate: u64,
    pub waits: u64,
    pub timeouts: u64,
    /// Total time waited, microseconds.
    pub wait_us: u64,
    pub max_wait_us: u64,
    /// Sessions terminated by advlock.idle_session_lock_timeout while holding a lock here.
    pub idle_terminations: u64,
}

/// One namespace of the current database (None: bare keys), with its counters and since when
/// they count.
pub struct NamespaceRow {
    pub ns: Option<Vec<u8>>,
    pub counters: Counters,
    pub since: pg_sys::TimestampTz,
}

/// What happened to one acquisition call.
#[derive(Clone, Copy)]
pub enum Outcome {
    /// Granted at the first, non-waiting attempt.
    Immediate,
    /// Busy and `timeout_ms = 0`: returned without the lock and without waiting.
    Busy,
    /// Waited in the lock queue; `acquired` tells how it ended.
    Waited { acquired: bool, micros: u64 },
    /// Waited, then an error ended the wait (deadlock, cancel, statement_timeout).
    WaitFailed { micros: u64 },
    /// Not an acquisition: a session holding a lock here was terminated by
    /// advlock.idle_session_lock_timeout.
    IdleTerminated,
}

/// The namespace as counted: server-encoding bytes, clipped to NS_BYTES.
fn clip(ns: &[u8]) -> &[u8] {
    if ns.len() <= NS_BYTES {
        return ns;
    }
    // SAFETY: pg_mbcliplen reads at most `ns.len()` bytes and returns a length <= NS_BYTES.
    let n = unsafe { pg_sys::pg_mbcliplen(ns.as_ptr().cast(), ns.len() as i32, NS_BYTES as i32) };
    &ns[..(n.max(0) as usize).min(NS_BYTES)]
}

/// Counts one acquisition call. Never fails and never waits; a no-op without preload.
pub fn count(target: &Target, outcome: Outcome) {
    count_in(target.label.as_ref().map(|(ns, _)| ns.as_bytes()), outcome);
}

/// Counts a session terminated by advlock.idle_session_lock_timeout under namespace `ns` (None:
/// locks without a recorded namespace). Never fails and never waits; a no-op without preload.
pub fn count_idle_termination(ns: Option<&[u8]>) {
    count_in(ns, Outcome::IdleTerminated);
}

fn count_in(ns: Option<&[u8]>, outcome: Outcome) {
    let Some(table) = table() else { return };
    let ns = ns.map(clip);
    let key = Key::new(backend::database(), ns);
    if table.try_lock(pg_sys::LWLockMode::LW_SHARED) {
        let (index, found) = table.probe(&key);
        if found {
            // The shared lock keeps the entry in place; counters are atomics.
            table.entry(index).counters.apply(outcome);
        }
        table.unlock();
        if found {
            return;
        }
        // A second attempt only if the table was full and entries of dropped databases could
        // be freed.
        for attempt in 0..2 {
            if attempt == 1 && !reclaim_dropped_databases(&table) {
                break;
            }
            if !table.try_lock(pg_sys::LWLockMode::LW_EXCLUSIVE) {
                break;
            }
            let (index, found) = table.probe(&key);
            let ok = found || table.insert(index, &key, backend::now(), &Counters::default());
            if ok {
                table.entry(index).counters.apply(outcome);
            }
            table.unlock();
            if ok {
                return;
            }
        }
    }
    table.header().dropped.fetch_add(1, Ordering::Relaxed);
}

thread_local! {
    static LAST_RECLAIM: core::cell::Cell<i64> = const { core::cell::Cell::new(0) };
}

/// The table is full: frees the entries of databases that no longer exist (a dropped database's
/// namespaces would otherwise hold their slots until restart). True when something was freed.
/// At most once a second per backend, and never while an error unwinds: the existence checks
/// are catalog lookups, made without holding the table's lock.
fn reclaim_dropped_databases(table: &Table) -> bool {
    const INTERVAL_US: i64 = 1_000_000;
    let now = backend::now();
    if std::thread::panicking() || now - LAST_RECLAIM.get() < INTERVAL_US {
        return false;
    }
    LAST_RECLAIM.set(now);
    if !table.try_lock(pg_sys::LWLockMode::LW_SHARED) {
        return false;
    }
    let mut databases: Vec<u32> = table.used_entries().map(|e| e.database).collect();
    table.unlock();
    databases.sort_unstable();
    databases.dedup();
    let gone: Vec<u32> = databases
        .into_iter()
        .filter(|&db| !backend::database_exists(db))
        .collect();
    if gone.is_empty() || !table.try_lock(pg_sys::LWLockMode::LW_EXCLUSIVE) {
        return false;
    }
    table.retain(|e| !gone.contains(&e.database));
    table.unlock();
    true
}

/// Times a wait in the lock queue. `end` records how it ended; dropping it without `end`
/// (an error unwound through the wait) records a wait that ended in an error.
pub struct Wait<'a, 'b> {
    target: &'a Target<'b>,
    started: Option<Instant>,
}

impl<'a, 'b> Wait<'a, 'b> {
    pub fn start(target: &'a Target<'b>) -> Self {
        Wait {
            target,
            started: table().map(|_| Instant::now()),
        }
    }

    fn micros(&self) -> Option<u64> {
        self.started.map(|t| t.elapsed().as_micros() as u64)
    }

    pub fn end(mut self, acquired: bool) {
        if let Some(micros) = self.micros() {
            count(self.target, Outcome::Waited { acquired, micros });
        }
        self.started = None;
    }
}

impl Drop for Wait<'_, '_> {
    fn drop(&mut self) {
        if let Some(micros) = self.micros() {
            // Runs while an error unwinds: recording only does atomics and a conditional
            // LWLock attempt, and must never turn into a second panic.
            let target = self.target;
            let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                count(target, Outcome::WaitFailed { micros })
            }));
        }
    }
}

/// Every namespace row of the current database, under the table's shared lock.
fn namespace_rows(table: &Table) -> Vec<NamespaceRow> {
    let database = backend::database();
    table.lock(pg_sys::LWLockMode::LW_SHARED);
    let rows = table
        .used_entries()
        .filter(|e| e.database == database)
        .map(|e| NamespaceRow {
            ns: e.ns().map(<[u8]>::to_vec),
            counters: e.counters.load(),
            since: e.since.load(Ordering::Relaxed),
        })
        .collect();
    table.unlock();
    rows
}

/// The counters of every namespace of this database, for `advlock_metrics`; None without
/// preload.
pub fn namespace_counters() -> Option<Vec<NamespaceRow>> {
    table().map(|table| namespace_rows(&table))
}

fn require(function: &str) -> Table {
    table().unwrap_or_else(|| shmem::require_preload(function))
}

/// One row per namespace used in this database since counting started (NULL: bare keys).
#[pg_extern(volatile, parallel_safe)]
#[allow(clippy::type_complexity)]
fn advlock_stats() -> TableIterator<
    'static,
    (
        name!(ns, Option<ServerTextOut>),
        name!(acquisitions, i64),
        name!(immediate, i64),
        name!(waits, i64),
        name!(timeouts, i64),
        name!(total_wait_time, f64),
        name!(max_wait_time, f64),
        name!(stats_since, Option<TimestampWithTimeZone>),
    ),
> {
    let table = require("advlock_stats");
    let mut rows = namespace_rows(&table);
    // By namespace, the bare-key (NULL) row last, as ORDER BY ns would.
    rows.sort_by(|a, b| (a.ns.is_none(), &a.ns).cmp(&(b.ns.is_none(), &b.ns)));
    TableIterator::new(rows.into_iter().map(|row| {
        let c = row.counters;
        (
            row.ns.map(ServerTextOut),
            c.acquisitions as i64,
            c.immediate as i64,
            c.waits as i64,
            c.timeouts as i64,
            c.wait_us as f64 / 1000.0,
            c.max_wait_us as f64 / 1000.0,
            backend::timestamptz(row.since),
        )
    }))
}

/// Forgets the counters of namespace `ns` in this database, or of every namespace (the
/// bare-key row included) when `ns` is NULL. Returns the reset time.
#[pg_extern(volatile, parallel_unsafe)]
fn advlock_stats_reset(ns: default!(Option<ServerText>, "NULL")) -> Option<TimestampWithTimeZone> {
    let table = require("advlock_stats_reset");
    let database = backend::database();
    let ns = ns.as_ref().map(|ns| clip(ns.as_bytes()));
    table.lock(pg_sys::LWLockMode::LW_EXCLUSIVE);
    match ns {
        None => table.retain(|e| e.database != database),
        Some(ns) => {
            let key = Key::new(database, Some(ns));
            if table.probe(&key).1 {
                table.retain(|e| !(e.database == database && e.ns() == Some(ns)));
            }
        }
    }
    table.unlock();
    backend::timestamptz(backend::now())
}

/// Capacity and overflow of the shared tables (all databases).
#[pg_extern(volatile, parallel_safe)]
fn advlock_stats_info() -> TableIterator<
    'static,
    (
        name!(labels_in_use, i64),
        name!(max_labels, i64),
        name!(labels_dropped, i64),
        name!(namespaces_in_use, i64),
        name!(max_namespaces, i64),
        name!(stats_dropped, i64),
    ),
> {
    let table = require("advlock_stats_info");
    let (labels_in_use, max_labels, labels_dropped) = labels::usage().unwrap_or((0, 0, 0));
    table.lock(pg_sys::LWLockMode::LW_SHARED);
    let header = table.header();
    let (used, capacity) = (header.used as i64, header.capacity as i64);
    table.unlock();
    TableIterator::once((
        labels_in_use,
        max_labels,
        labels_dropped,
        used,
        capacity,
        header.dropped.load(Ordering::Relaxed) as i64,
    ))
}

pgrx::extension_sql_file!(
    "../../../sql/stats.sql",
    name = "stats",
    requires = [advlock_stats, advlock_stats_reset, advlock_stats_info]
);
