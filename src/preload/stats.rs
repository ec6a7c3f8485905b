//! Contention statistics per namespace (preloaded only): `advlock_stats`,
//! `advlock_stats_reset`, `advlock_stats_info`.
//!
//! Layout: an open-addressing hash table of `advlock.max_namespaces` entries (twice as many
//! buckets), keyed by (database, namespace); a bare bigint key counts under a NULL namespace.
//! One LWLock guards the table's layout: recording holds it in shared mode and bumps atomic
//! counters; only creating an entry or resetting takes it exclusively. Recording never
//! waits: it tries the lock a bounded number of times (LWLockConditionalAcquire) and, if that
//! fails or the table is full, counts a dropped sample instead.
use crate::backend;
use crate::lock_request::Target;
use crate::preload::labels;
use crate::preload::shmem;
use crate::server_text::{ServerText, ServerTextOut};
use core::sync::atomic::{AtomicI64, AtomicPtr, AtomicU64, Ordering};
use pgrx::pg_sys;
use pgrx::prelude::*;
use std::time::Instant;

/// Namespaces are truncated to this many bytes (at a character boundary) for counting.
pub const NS_BYTES: usize = labels::LABEL_BYTES;

/// Attempts at the LWLock before a sample is dropped.
const LOCK_ATTEMPTS: u32 = 1_000;

#[repr(C)]
struct Header {
    lock: *mut pg_sys::LWLock,
    capacity: u32,
    buckets: u32,
    /// Entries in use; changed only under the exclusive lock.
    used: u32,
    dropped: AtomicU64,
}

#[repr(C)]
struct Entry {
    // Identity: written only under the exclusive lock.
    used: u32,
    database: u32,
    has_ns: u32,
    ns_len: u32,
    ns: [u8; NS_BYTES],
    // Counters: atomics, bumped under the shared lock.
    since: AtomicI64,
    acquisitions: AtomicU64,
    immediate: AtomicU64,
    waits: AtomicU64,
    timeouts: AtomicU64,
    wait_us: AtomicU64,
    max_wait_us: AtomicU64,
}

static TABLE: AtomicPtr<Header> = AtomicPtr::new(core::ptr::null_mut());

fn buckets_for(capacity: usize) -> usize {
    (capacity * 2).next_power_of_two()
}

/// The shared memory of this feature, for `shmem::install_hooks`.
pub const SEGMENT: shmem::Segment = shmem::Segment {
    size: shmem_size,
    attach: shmem_attach,
};

pub fn shmem_size() -> usize {
    let capacity = crate::gucs::MAX_NAMESPACES.get().max(1) as usize;
    size_of::<Header>() + buckets_for(capacity) * size_of::<Entry>()
}

/// # Safety
/// Only from `shmem::shmem_startup`, under AddinShmemInitLock.
pub unsafe fn shmem_attach() {
    let capacity = crate::gucs::MAX_NAMESPACES.get().max(1) as usize;
    // SAFETY: the size was requested in shmem_request; the tranche was requested there too.
    unsafe {
        let (ptr, found) = shmem::init_struct(c"advlock namespace stats", shmem_size());
        let header = ptr.cast::<Header>();
        if !found {
            core::ptr::write_bytes(ptr, 0, shmem_size());
            (*header).lock =
                &raw mut (*pg_sys::GetNamedLWLockTranche(shmem::TRANCHE.as_ptr())).lock;
            (*header).capacity = capacity as u32;
            (*header).buckets = buckets_for(capacity) as u32;
        }
        TABLE.store(header, Ordering::Release);
    }
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
}

/// The table, only when preloaded.
struct Table(*mut Header);

fn table() -> Option<Table> {
    let header = TABLE.load(Ordering::Acquire);
    (!header.is_null()).then_some(Table(header))
}

struct Key<'a> {
    database: u32,
    ns: Option<&'a [u8]>,
    hash: u32,
}

impl<'a> Key<'a> {
    fn new(database: u32, ns: Option<&'a [u8]>) -> Self {
        // FNV-1a over database, presence and bytes.
        let mut h: u32 = 0x811c_9dc5;
        let mut eat = |b: u8| h = (h ^ b as u32).wrapping_mul(0x0100_0193);
        database.to_le_bytes().into_iter().for_each(&mut eat);
        eat(ns.is_some() as u8);
        ns.unwrap_or_default().iter().copied().for_each(&mut eat);
        Key {
            database,
            ns,
            hash: h,
        }
    }
}

impl Table {
    fn header(&self) -> &Header {
        // SAFETY: points into shared memory set up by shmem_attach for the process lifetime.
        unsafe { &*self.0 }
    }

    fn entry(&self, index: usize) -> *mut Entry {
        // SAFETY: `buckets` entries follow the header (see shmem_size).
        unsafe {
            self.0
                .cast::<u8>()
                .add(size_of::<Header>())
                .cast::<Entry>()
                .add(index)
        }
    }

    fn try_lock(&self, mode: pg_sys::LWLockMode::Type) -> bool {
        for _ in 0..LOCK_ATTEMPTS {
            // SAFETY: a valid LWLock in shared memory; never waits.
            if unsafe { pg_sys::LWLockConditionalAcquire(self.header().lock, mode) } {
                return true;
            }
            for _ in 0..16 {
                core::hint::spin_loop();
            }
        }
        false
    }

    fn lock(&self, mode: pg_sys::LWLockMode::Type) {
        // SAFETY: a valid LWLock; only admin functions wait for it.
        unsafe { pg_sys::LWLockAcquire(self.header().lock, mode) };
    }

    fn unlock(&self) {
        // SAFETY: held by this backend (acquired just before by the caller).
        unsafe { pg_sys::LWLockRelease(self.header().lock) };
    }

    /// Index of the entry for `key`, or of the empty bucket where it would go.
    /// Caller holds the lock (either mode).
    fn probe(&self, key: &Key) -> (usize, bool) {
        let buckets = self.header().buckets as usize;
        let mut index = key.hash as usize & (buckets - 1);
        for _ in 0..buckets {
            // SAFETY: identity fields are stable while the caller holds the lock.
            let e = unsafe { &*self.entry(index) };
            if e.used == 0 {
                return (index, false);
            }
            if e.database == key.database
                && (e.has_ns != 0) == key.ns.is_some()
                && key.ns.is_none_or(|ns| &e.ns[..e.ns_len as usize] == ns)
            {
                return (index, true);
            }
            index = (index + 1) & (buckets - 1);
        }
        (usize::MAX, false)
    }

    /// Creates the entry at an empty bucket. Caller holds the lock exclusively.
    fn insert(&self, index: usize, key: &Key, since: i64) -> bool {
        let header = self.0;
        // SAFETY: exclusive lock held: no other backend reads or writes identity fields.
        unsafe {
            if index == usize::MAX || (*header).used >= (*header).capacity {
                return false;
            }
            let e = self.entry(index);
            (*e).used = 1;
            (*e).database = key.database;
            (*e).has_ns = key.ns.is_some() as u32;
            let ns = key.ns.unwrap_or_default();
            (*e).ns_len = ns.len() as u32;
            (&mut (*e).ns)[..ns.len()].copy_from_slice(ns);
            (*e).since.store(since, Ordering::Relaxed);
            for c in [
                &(*e).acquisitions,
                &(*e).immediate,
                &(*e).waits,
                &(*e).timeouts,
                &(*e).wait_us,
                &(*e).max_wait_us,
            ] {
                c.store(0, Ordering::Relaxed);
            }
            (*header).used += 1;
        }
        true
    }

    /// Keeps only the entries for which `keep` is true, re-inserting them so probing stays
    /// valid. Caller holds the lock exclusively.
    fn retain(&self, keep: impl Fn(&Entry) -> bool) {
        let buckets = self.header().buckets as usize;
        // (database, namespace, counters, since) of the entries that stay.
        #[allow(clippy::type_complexity)]
        let mut kept: Vec<(u32, Option<Vec<u8>>, [u64; 6], i64)> = Vec::new();
        for index in 0..buckets {
            // SAFETY: exclusive lock held.
            let e = unsafe { &*self.entry(index) };
            if e.used != 0 && keep(e) {
                kept.push((
                    e.database,
                    (e.has_ns != 0).then(|| e.ns[..e.ns_len as usize].to_vec()),
                    counters(e),
                    e.since.load(Ordering::Relaxed),
                ));
            }
        }
        // SAFETY: exclusive lock held; zeroing makes every bucket empty (used = 0).
        unsafe {
            core::ptr::write_bytes(self.entry(0), 0, buckets);
            (*self.0).used = 0;
        }
        for (database, ns, values, since) in kept {
            let key = Key::new(database, ns.as_deref());
            let (index, _) = self.probe(&key);
            if self.insert(index, &key, since) {
                // SAFETY: just inserted at `index`, exclusive lock held.
                let e = unsafe { &*self.entry(index) };
                let fields = [
                    &e.acquisitions,
                    &e.immediate,
                    &e.waits,
                    &e.timeouts,
                    &e.wait_us,
                    &e.max_wait_us,
                ];
                for (field, value) in fields.into_iter().zip(values) {
                    field.store(value, Ordering::Relaxed);
                }
            }
        }
    }
}

fn counters(e: &Entry) -> [u64; 6] {
    [
        e.acquisitions.load(Ordering::Relaxed),
        e.immediate.load(Ordering::Relaxed),
        e.waits.load(Ordering::Relaxed),
        e.timeouts.load(Ordering::Relaxed),
        e.wait_us.load(Ordering::Relaxed),
        e.max_wait_us.load(Ordering::Relaxed),
    ]
}

fn apply(e: &Entry, outcome: Outcome) {
    let add = |c: &AtomicU64, n: u64| {
        c.fetch_add(n, Ordering::Relaxed);
    };
    let waited = |micros: u64| {
        add(&e.waits, 1);
        add(&e.wait_us, micros);
        e.max_wait_us.fetch_max(micros, Ordering::Relaxed);
    };
    match outcome {
        Outcome::Immediate => {
            add(&e.acquisitions, 1);
            add(&e.immediate, 1);
        }
        Outcome::Busy => add(&e.timeouts, 1),
        Outcome::Waited { acquired, micros } => {
            waited(micros);
            add(
                if acquired {
                    &e.acquisitions
                } else {
                    &e.timeouts
                },
                1,
            );
        }
        Outcome::WaitFailed { micros } => waited(micros),
    }
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

fn current_database() -> u32 {
    crate::backend::database()
}

/// Counts one acquisition call. Never fails and never waits; a no-op without preload.
pub fn count(target: &Target, outcome: Outcome) {
    let Some(table) = table() else { return };
    let ns = target.label.as_ref().map(|(ns, _)| clip(ns.as_bytes()));
    let key = Key::new(current_database(), ns);
    if table.try_lock(pg_sys::LWLockMode::LW_SHARED) {
        let (index, found) = table.probe(&key);
        if found {
            // SAFETY: the shared lock keeps the entry in place; counters are atomics.
            apply(unsafe { &*table.entry(index) }, outcome);
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
            let ok = found || table.insert(index, &key, backend::now());
            if ok {
                // SAFETY: exclusive lock held.
                apply(unsafe { &*table.entry(index) }, outcome);
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
    let mut databases: Vec<u32> = (0..table.header().buckets as usize)
        // SAFETY: identity fields are stable while the lock is held.
        .map(|index| unsafe { &*table.entry(index) })
        .filter(|e| e.used != 0)
        .map(|e| e.database)
        .collect();
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

/// (namespace, [acquisitions, immediate, waits, timeouts], total wait µs, max wait µs, since)
type Row = (Option<Vec<u8>>, [u64; 4], u64, u64, i64);

/// Every namespace row of the current database, under the table's shared lock.
fn namespace_rows(table: &Table) -> Vec<Row> {
    let database = current_database();
    let mut rows = Vec::new();
    table.lock(pg_sys::LWLockMode::LW_SHARED);
    for index in 0..table.header().buckets as usize {
        // SAFETY: shared lock held: identity fields are stable.
        let e = unsafe { &*table.entry(index) };
        if e.used == 0 || e.database != database {
            continue;
        }
        let [acq, imm, waits, timeouts, wait_us, max_us] = counters(e);
        rows.push((
            (e.has_ns != 0).then(|| e.ns[..e.ns_len as usize].to_vec()),
            [acq, imm, waits, timeouts],
            wait_us,
            max_us,
            e.since.load(Ordering::Relaxed),
        ));
    }
    table.unlock();
    rows
}

/// Counters of one namespace (None: bare keys) for `advlock_metrics`.
pub struct NamespaceCounters {
    pub ns: Option<Vec<u8>>,
    pub acquisitions: u64,
    pub immediate: u64,
    pub waits: u64,
    pub timeouts: u64,
    pub wait_us: u64,
}

/// The counters of every namespace of this database; None without preload.
pub fn namespace_counters() -> Option<Vec<NamespaceCounters>> {
    let table = table()?;
    Some(
        namespace_rows(&table)
            .into_iter()
            .map(
                |(ns, [acquisitions, immediate, waits, timeouts], wait_us, _, _)| {
                    NamespaceCounters {
                        ns,
                        acquisitions,
                        immediate,
                        waits,
                        timeouts,
                        wait_us,
                    }
                },
            )
            .collect(),
    )
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
    rows.sort_by(|a, b| (a.0.is_none(), &a.0).cmp(&(b.0.is_none(), &b.0)));
    TableIterator::new(rows.into_iter().map(
        |(ns, [acq, imm, waits, timeouts], wait_us, max_us, since)| {
            (
                ns.map(ServerTextOut),
                acq as i64,
                imm as i64,
                waits as i64,
                timeouts as i64,
                wait_us as f64 / 1000.0,
                max_us as f64 / 1000.0,
                backend::timestamptz(since),
            )
        },
    ))
}

/// Forgets the counters of namespace `ns` in this database, or of every namespace (the
/// bare-key row included) when `ns` is NULL. Returns the reset time.
#[pg_extern(volatile, parallel_unsafe)]
fn advlock_stats_reset(ns: default!(Option<ServerText>, "NULL")) -> Option<TimestampWithTimeZone> {
    let table = require("advlock_stats_reset");
    let database = current_database();
    let ns = ns.as_ref().map(|ns| clip(ns.as_bytes()));
    table.lock(pg_sys::LWLockMode::LW_EXCLUSIVE);
    match ns {
        None => table.retain(|e| e.database != database),
        Some(ns) => {
            let key = Key::new(database, Some(ns));
            if table.probe(&key).1 {
                table.retain(|e| {
                    !(e.database == database && e.has_ns != 0 && &e.ns[..e.ns_len as usize] == ns)
                });
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
    "../../sql/stats.sql",
    name = "stats",
    requires = [advlock_stats, advlock_stats_reset, advlock_stats_info]
);
