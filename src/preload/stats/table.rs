//! The shared table of namespace statistics: an open-addressing hash table of
//! `advlock.max_namespaces` entries (twice as many buckets, a power of two), keyed by
//! (database, namespace). One LWLock guards its layout: the identity of an entry is written only
//! under the exclusive lock; its counters are atomics, bumped under the shared lock.
use super::{Counters, Outcome};
use crate::preload::labels;
use crate::preload::shmem;
use core::sync::atomic::{AtomicI64, AtomicPtr, AtomicU64, Ordering};
use pgrx::pg_sys;

/// Namespaces are truncated to this many bytes (at a character boundary) for counting.
pub const NS_BYTES: usize = labels::LABEL_BYTES;

/// Attempts at the LWLock before a sample is dropped.
const LOCK_ATTEMPTS: u32 = 1_000;

#[repr(C)]
pub(super) struct Header {
    lock: *mut pg_sys::LWLock,
    pub(super) capacity: u32,
    buckets: u32,
    /// Entries in use; changed only under the exclusive lock.
    pub(super) used: u32,
    pub(super) dropped: AtomicU64,
}

/// The counters of one entry, in shared memory: the atomic twin of `Counters`.
#[repr(C)]
pub(super) struct AtomicCounters {
    acquisitions: AtomicU64,
    immediate: AtomicU64,
    waits: AtomicU64,
    timeouts: AtomicU64,
    wait_us: AtomicU64,
    max_wait_us: AtomicU64,
    idle_terminations: AtomicU64,
}

impl AtomicCounters {
    fn fields(&self) -> [&AtomicU64; 7] {
        [
            &self.acquisitions,
            &self.immediate,
            &self.waits,
            &self.timeouts,
            &self.wait_us,
            &self.max_wait_us,
            &self.idle_terminations,
        ]
    }

    pub(super) fn load(&self) -> Counters {
        let [acquisitions, immediate, waits, timeouts, wait_us, max_wait_us, idle_terminations] =
            self.fields().map(|c| c.load(Ordering::Relaxed));
        Counters {
            acquisitions,
            immediate,
            waits,
            timeouts,
            wait_us,
            max_wait_us,
            idle_terminations,
        }
    }

    fn store(&self, c: &Counters) {
        let values = [
            c.acquisitions,
            c.immediate,
            c.waits,
            c.timeouts,
            c.wait_us,
            c.max_wait_us,
            c.idle_terminations,
        ];
        for (field, value) in self.fields().into_iter().zip(values) {
            field.store(value, Ordering::Relaxed);
        }
    }

    /// Counts one acquisition call.
    pub(super) fn apply(&self, outcome: Outcome) {
        let add = |c: &AtomicU64, n: u64| {
            c.fetch_add(n, Ordering::Relaxed);
        };
        let waited = |micros: u64| {
            add(&self.waits, 1);
            add(&self.wait_us, micros);
            self.max_wait_us.fetch_max(micros, Ordering::Relaxed);
        };
        match outcome {
            Outcome::Immediate => {
                add(&self.acquisitions, 1);
                add(&self.immediate, 1);
            }
            Outcome::Busy => add(&self.timeouts, 1),
            Outcome::Waited { acquired, micros } => {
                waited(micros);
                add(
                    if acquired {
                        &self.acquisitions
                    } else {
                        &self.timeouts
                    },
                    1,
                );
            }
            Outcome::WaitFailed { micros } => waited(micros),
            Outcome::IdleTerminated => add(&self.idle_terminations, 1),
        }
    }
}

#[repr(C)]
pub(super) struct Entry {
    // Identity: written only under the exclusive lock.
    used: u32,
    pub(super) database: u32,
    has_ns: u32,
    ns_len: u32,
    ns: [u8; NS_BYTES],
    // Counters: atomics, bumped under the shared lock.
    pub(super) since: AtomicI64,
    pub(super) counters: AtomicCounters,
}

impl Entry {
    /// The namespace (None: bare keys).
    pub(super) fn ns(&self) -> Option<&[u8]> {
        (self.has_ns != 0).then(|| &self.ns[..self.ns_len as usize])
    }
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

fn shmem_size() -> usize {
    let capacity = crate::gucs::MAX_NAMESPACES.get().max(1) as usize;
    size_of::<Header>() + buckets_for(capacity) * size_of::<Entry>()
}

/// # Safety
/// Only from `shmem::shmem_startup`, under AddinShmemInitLock.
unsafe fn shmem_attach() {
    let capacity = crate::gucs::MAX_NAMESPACES.get().max(1) as usize;
    // SAFETY: the size was requested in shmem_request; the tranche was requested there too.
    unsafe {
        let (ptr, found) = shmem::init_struct(c"advlock namespace stats", shmem_size());
        let header = ptr.cast::<Header>();
        if !found {
            core::ptr::write_bytes(ptr, 0, shmem_size());
            (*header).lock = shmem::lwlock(shmem::STATS_LOCK);
            (*header).capacity = capacity as u32;
            (*header).buckets = buckets_for(capacity) as u32;
        }
        TABLE.store(header, Ordering::Release);
    }
}

/// The table, only when preloaded.
pub(super) struct Table(*mut Header);

pub(super) fn table() -> Option<Table> {
    let header = TABLE.load(Ordering::Acquire);
    (!header.is_null()).then_some(Table(header))
}

pub(super) struct Key<'a> {
    database: u32,
    ns: Option<&'a [u8]>,
    hash: u32,
}

impl<'a> Key<'a> {
    pub(super) fn new(database: u32, ns: Option<&'a [u8]>) -> Self {
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
    pub(super) fn header(&self) -> &Header {
        // SAFETY: points into shared memory set up by shmem_attach for the process lifetime.
        unsafe { &*self.0 }
    }

    fn entry_ptr(&self, index: usize) -> *mut Entry {
        // SAFETY: `buckets` entries follow the header (see shmem_size).
        unsafe {
            self.0
                .cast::<u8>()
                .add(size_of::<Header>())
                .cast::<Entry>()
                .add(index)
        }
    }

    /// The entry at `index`. Caller holds the lock (either mode), which keeps its identity
    /// fields stable.
    pub(super) fn entry(&self, index: usize) -> &Entry {
        // SAFETY: a bucket of the table (index < buckets, from probe or used_entries).
        unsafe { &*self.entry_ptr(index) }
    }

    /// The entries in use. Caller holds the lock (either mode).
    pub(super) fn used_entries(&self) -> impl Iterator<Item = &Entry> + '_ {
        (0..self.header().buckets as usize)
            .map(|index| self.entry(index))
            .filter(|e| e.used != 0)
    }

    pub(super) fn try_lock(&self, mode: pg_sys::LWLockMode::Type) -> bool {
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

    pub(super) fn lock(&self, mode: pg_sys::LWLockMode::Type) {
        // SAFETY: a valid LWLock; only admin functions wait for it.
        unsafe { pg_sys::LWLockAcquire(self.header().lock, mode) };
    }

    pub(super) fn unlock(&self) {
        // SAFETY: held by this backend (acquired just before by the caller).
        unsafe { pg_sys::LWLockRelease(self.header().lock) };
    }

    /// Index of the entry for `key`, or of the empty bucket where it would go.
    /// Caller holds the lock (either mode).
    pub(super) fn probe(&self, key: &Key) -> (usize, bool) {
        let buckets = self.header().buckets as usize;
        let mut index = key.hash as usize & (buckets - 1);
        for _ in 0..buckets {
            let e = self.entry(index);
            if e.used == 0 {
                return (index, false);
            }
            if e.database == key.database && e.ns() == key.ns {
                return (index, true);
            }
            index = (index + 1) & (buckets - 1);
        }
        (usize::MAX, false)
    }

    /// Creates the entry at an empty bucket, with `counters`. Caller holds the lock
    /// exclusively.
    pub(super) fn insert(&self, index: usize, key: &Key, since: i64, counters: &Counters) -> bool {
        let header = self.0;
        // SAFETY: exclusive lock held: no other backend reads or writes identity fields.
        unsafe {
            if index == usize::MAX || (*header).used >= (*header).capacity {
                return false;
            }
            let e = self.entry_ptr(index);
            (*e).used = 1;
            (*e).database = key.database;
            (*e).has_ns = key.ns.is_some() as u32;
            let ns = key.ns.unwrap_or_default();
            (*e).ns_len = ns.len() as u32;
            (&mut (*e).ns)[..ns.len()].copy_from_slice(ns);
            (*e).since.store(since, Ordering::Relaxed);
            (*e).counters.store(counters);
            (*header).used += 1;
        }
        true
    }

    /// Keeps only the entries for which `keep` is true, re-inserting them so probing stays
    /// valid. Caller holds the lock exclusively.
    pub(super) fn retain(&self, keep: impl Fn(&Entry) -> bool) {
        // (database, namespace, since, counters) of the entries that stay.
        let kept: Vec<(u32, Option<Vec<u8>>, i64, Counters)> = self
            .used_entries()
            .filter(|e| keep(e))
            .map(|e| {
                (
                    e.database,
                    e.ns().map(<[u8]>::to_vec),
                    e.since.load(Ordering::Relaxed),
                    e.counters.load(),
                )
            })
            .collect();
        // SAFETY: exclusive lock held; zeroing makes every bucket empty (used = 0).
        unsafe {
            core::ptr::write_bytes(self.entry_ptr(0), 0, self.header().buckets as usize);
            (*self.0).used = 0;
        }
        for (database, ns, since, counters) in kept {
            let key = Key::new(database, ns.as_deref());
            let (index, _) = self.probe(&key);
            self.insert(index, &key, since, &counters);
        }
    }
}
