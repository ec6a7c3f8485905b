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
use crate::lock_request::{Id, Mode, Scope, Target};
use crate::server_text::ServerTextOut;
use crate::{keys, lockmgr, shmem};
use core::sync::atomic::{fence, AtomicI32, AtomicI64, AtomicU32, AtomicU64, AtomicU8, Ordering};
use pgrx::pg_sys;
use pgrx::prelude::*;
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::sync::atomic::AtomicPtr;

/// Labels are truncated to this many bytes (at a character boundary).
pub const LABEL_BYTES: usize = 127;

const NIL: u32 = u32::MAX;
const FLAG_SHARED: u32 = 1;
const FLAG_SESSION: u32 = 2;
/// Bound on CAS retries on the free list; reaching it counts a dropped entry.
const MAX_CAS_RETRIES: u32 = 10_000;

#[repr(C)]
struct Header {
    /// Free-list head: (ABA tag << 32) | slot index, NIL when empty.
    free: AtomicU64,
    dropped: AtomicU64,
    capacity: u32,
}

#[repr(C)]
struct Slot {
    /// Even: stable; odd: the owner is writing. Bumped twice per change.
    seq: AtomicU32,
    /// Next free slot while on the free list.
    next: AtomicU32,
    /// Owner's pid; 0 when free.
    pid: AtomicI32,
    procno: AtomicI32,
    key: AtomicI64,
    since: AtomicI64,
    database: AtomicU32,
    role: AtomicU32,
    flags: AtomicU32,
    len: AtomicU32,
    label: [AtomicU8; LABEL_BYTES],
}

struct Table {
    header: &'static Header,
    slots: &'static [Slot],
}

static TABLE: AtomicPtr<Header> = AtomicPtr::new(core::ptr::null_mut());

pub fn shmem_size() -> usize {
    let capacity = crate::gucs::MAX_LABELS.get().max(1) as usize;
    size_of::<Header>() + capacity * size_of::<Slot>()
}

/// # Safety
/// Only from `shmem::shmem_startup`, under AddinShmemInitLock.
pub unsafe fn shmem_attach() {
    let capacity = crate::gucs::MAX_LABELS.get().max(1) as u32;
    // SAFETY: the size was requested in shmem_request; alignment of ShmemInitStruct results
    // is at least MAXALIGN (8), enough for Header and Slot (all fields align <= 8).
    unsafe {
        let (ptr, found) = shmem::init_struct(c"advlock labels", shmem_size());
        let header = ptr.cast::<Header>();
        if !found {
            // Fresh shared memory: zero it, then chain every slot onto the free list.
            core::ptr::write_bytes(ptr, 0, shmem_size());
            (*header).capacity = capacity;
            let slots = ptr.add(size_of::<Header>()).cast::<Slot>();
            for i in 0..capacity {
                let next = if i + 1 < capacity { i + 1 } else { NIL };
                (*slots.add(i as usize)).next.store(next, Ordering::Relaxed);
            }
            (*header).free.store(0, Ordering::Relaxed); // tag 0, index 0
        }
        TABLE.store(header, Ordering::Release);
    }
}

fn table() -> Option<Table> {
    let header = TABLE.load(Ordering::Acquire);
    if header.is_null() {
        return None;
    }
    // SAFETY: set once in shmem_attach to shared memory that lives as long as this process;
    // `capacity` slots follow the header.
    unsafe {
        let capacity = (*header).capacity as usize;
        let slots = header.cast::<u8>().add(size_of::<Header>()).cast::<Slot>();
        Some(Table {
            header: &*header,
            slots: core::slice::from_raw_parts(slots, capacity),
        })
    }
}

/// A consistent copy of one slot.
struct Snapshot {
    seq: u32,
    pid: i32,
    procno: i32,
    key: i64,
    since: i64,
    database: u32,
    role: u32,
    flags: u32,
    label: Vec<u8>,
}

impl Table {
    fn pop_free(&self) -> Option<u32> {
        for _ in 0..MAX_CAS_RETRIES {
            let head = self.header.free.load(Ordering::Acquire);
            let index = head as u32;
            if index == NIL {
                return None;
            }
            // May read a stale `next` if another backend pops concurrently; the tag makes the
            // CAS below fail in that case.
            let next = self.slots[index as usize].next.load(Ordering::Relaxed);
            let tag = (head >> 32).wrapping_add(1);
            let new = (tag << 32) | next as u64;
            if self
                .header
                .free
                .compare_exchange_weak(head, new, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
            {
                return Some(index);
            }
            core::hint::spin_loop();
        }
        None
    }

    fn push_free(&self, index: u32) {
        loop {
            let head = self.header.free.load(Ordering::Acquire);
            self.slots[index as usize]
                .next
                .store(head as u32, Ordering::Relaxed);
            let tag = (head >> 32).wrapping_add(1);
            let new = (tag << 32) | index as u64;
            if self
                .header
                .free
                .compare_exchange_weak(head, new, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
            {
                return;
            }
            core::hint::spin_loop();
        }
    }

    /// Writes a claimed slot and publishes it (pid != 0 under an even sequence number).
    fn fill(&self, index: u32, key: i64, flags: u32, since: i64, label: &[u8]) {
        let slot = &self.slots[index as usize];
        slot.seq.fetch_add(1, Ordering::Relaxed);
        fence(Ordering::Release);
        // SAFETY: backend-local globals, set at backend start.
        let (pid, procno, database, role) = unsafe {
            (
                pg_sys::MyProcPid,
                crate::shmem::my_proc_number(),
                pg_sys::MyDatabaseId.to_u32(),
                pg_sys::GetSessionUserId().to_u32(),
            )
        };
        slot.procno.store(procno, Ordering::Relaxed);
        slot.key.store(key, Ordering::Relaxed);
        slot.since.store(since, Ordering::Relaxed);
        slot.database.store(database, Ordering::Relaxed);
        slot.role.store(role, Ordering::Relaxed);
        slot.flags.store(flags, Ordering::Relaxed);
        slot.len.store(label.len() as u32, Ordering::Relaxed);
        for (dst, &b) in slot.label.iter().zip(label) {
            dst.store(b, Ordering::Relaxed);
        }
        slot.pid.store(pid, Ordering::Relaxed);
        slot.seq.fetch_add(1, Ordering::Release);
    }

    fn set_flags(&self, index: u32, flags: u32) {
        let slot = &self.slots[index as usize];
        slot.seq.fetch_add(1, Ordering::Relaxed);
        fence(Ordering::Release);
        slot.flags.store(flags, Ordering::Relaxed);
        slot.seq.fetch_add(1, Ordering::Release);
    }

    /// Unpublishes an owned slot and returns it to the free list.
    fn free(&self, index: u32) {
        let slot = &self.slots[index as usize];
        slot.seq.fetch_add(1, Ordering::Relaxed);
        fence(Ordering::Release);
        slot.pid.store(0, Ordering::Relaxed);
        slot.seq.fetch_add(1, Ordering::Release);
        self.push_free(index);
    }

    /// Seqlock read; None when free or when the owner kept changing it.
    fn read(&self, index: usize) -> Option<Snapshot> {
        let slot = &self.slots[index];
        for _ in 0..8 {
            let seq = slot.seq.load(Ordering::Acquire);
            if seq % 2 == 1 {
                core::hint::spin_loop();
                continue;
            }
            let pid = slot.pid.load(Ordering::Relaxed);
            if pid == 0 {
                fence(Ordering::Acquire);
                if slot.seq.load(Ordering::Relaxed) == seq {
                    return None;
                }
                continue;
            }
            let len = (slot.len.load(Ordering::Relaxed) as usize).min(LABEL_BYTES);
            let snapshot = Snapshot {
                seq,
                pid,
                procno: slot.procno.load(Ordering::Relaxed),
                key: slot.key.load(Ordering::Relaxed),
                since: slot.since.load(Ordering::Relaxed),
                database: slot.database.load(Ordering::Relaxed),
                role: slot.role.load(Ordering::Relaxed),
                flags: slot.flags.load(Ordering::Relaxed),
                label: slot.label[..len]
                    .iter()
                    .map(|b| b.load(Ordering::Relaxed))
                    .collect(),
            };
            fence(Ordering::Acquire);
            if slot.seq.load(Ordering::Relaxed) == seq {
                return Some(snapshot);
            }
        }
        None
    }

    /// Frees slots whose owner backend no longer exists (defensive; see the module comment).
    /// Claims each with a CAS on its sequence number so concurrent sweepers cannot both free it.
    fn reclaim_dead(&self) -> usize {
        let mut reclaimed = 0;
        for index in 0..self.slots.len() {
            let Some(s) = self.read(index) else { continue };
            if shmem::backend_alive(s.procno, s.pid) {
                continue;
            }
            let slot = &self.slots[index];
            if slot
                .seq
                .compare_exchange(
                    s.seq,
                    s.seq.wrapping_add(1),
                    Ordering::AcqRel,
                    Ordering::Relaxed,
                )
                .is_ok()
            {
                slot.pid.store(0, Ordering::Relaxed);
                slot.seq.fetch_add(1, Ordering::Release);
                self.push_free(index as u32);
                reclaimed += 1;
            }
        }
        reclaimed
    }

    fn in_use(&self) -> i64 {
        (0..self.slots.len())
            .filter(|&i| self.slots[i].pid.load(Ordering::Relaxed) != 0)
            .count() as i64
    }
}

/// What this backend recorded for one (key, mode).
struct Hold {
    slot: u32,
    xact: u32,
    session: u32,
    since: i64,
}

impl Hold {
    fn flags(&self, mode: u32) -> u32 {
        mode | if self.session > 0 { FLAG_SESSION } else { 0 }
    }
}

/// The backend's map hasher: keys are already SipHash outputs (advlock_key), so one multiply
/// mixes enough; std's SipHash was a visible share of an uncontended acquire.
#[derive(Default)]
struct KeyHasher(u64);

impl core::hash::Hasher for KeyHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(b as u64);
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0.rotate_left(5) ^ n).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
    fn write_i64(&mut self, n: i64) {
        self.write_u64(n as u64);
    }
    fn write_u32(&mut self, n: u32) {
        self.write_u64(n as u64);
    }
}

type Holds = HashMap<(i64, u32), Hold, core::hash::BuildHasherDefault<KeyHasher>>;

thread_local! {
    /// (key, FLAG_SHARED or 0) -> hold. Backends are single-threaded; callbacks never run
    /// while this is borrowed (no PostgreSQL call inside a borrow can end a transaction).
    static HOLDS: RefCell<Holds> = RefCell::new(Holds::default());
    static CALLBACKS: Cell<bool> = const { Cell::new(false) };
    static LAST_SWEEP: Cell<i64> = const { Cell::new(i64::MIN / 2) };
}

/// Rate limit for the full-table sweep: true at most once per second per backend.
fn sweep_due() -> bool {
    const INTERVAL_US: i64 = 1_000_000;
    let now = shmem::now();
    LAST_SWEEP.with(|last| {
        if now - last.get() < INTERVAL_US {
            return false;
        }
        last.set(now);
        true
    })
}

fn mode_flag(mode: Mode) -> u32 {
    match mode {
        Mode::Exclusive => 0,
        Mode::Shared => FLAG_SHARED,
    }
}

fn mode_of(flag: u32) -> Mode {
    if flag & FLAG_SHARED != 0 {
        Mode::Shared
    } else {
        Mode::Exclusive
    }
}

/// `ns:id`, truncated to LABEL_BYTES at a character boundary of the server encoding.
fn compose(ns: &[u8], id: &[u8], out: &mut [u8; LABEL_BYTES + 8]) -> usize {
    let mut n = 0;
    for &b in ns.iter().chain(b":").chain(id) {
        if n == out.len() {
            break;
        }
        out[n] = b;
        n += 1;
    }
    if ns.len() + 1 + id.len() <= LABEL_BYTES {
        return n;
    }
    // SAFETY: `out[..n]` is initialised; pg_mbcliplen reads at most `n` bytes (the first byte
    // of each character decides its length) and returns a length <= LABEL_BYTES.
    let clipped =
        unsafe { pg_sys::pg_mbcliplen(out.as_ptr().cast(), n as i32, LABEL_BYTES as i32) };
    (clipped.max(0) as usize).min(LABEL_BYTES)
}

/// After a successful acquisition: record (or re-count) the label of an `(ns, id)` lock.
/// Never fails and never waits; a no-op without preload or for bare keys.
pub fn acquired(target: &Target, scope: Scope, mode: Mode) {
    let Some((ns, id)) = &target.label else {
        return;
    };
    let Some(table) = table() else { return };
    register_callbacks();
    let mode = mode_flag(mode);
    HOLDS.with(|holds| {
        let Ok(mut holds) = holds.try_borrow_mut() else {
            return;
        };
        let hold = holds.entry((target.key, mode)).or_insert_with(|| Hold {
            slot: NIL,
            xact: 0,
            session: 0,
            since: shmem::now(),
        });
        let had_session = hold.session > 0;
        match scope {
            Scope::Xact => hold.xact += 1,
            Scope::Session => hold.session += 1,
        }
        if hold.slot != NIL {
            if !had_session && hold.session > 0 {
                table.set_flags(hold.slot, hold.flags(mode));
            }
            return;
        }
        let (since, flags) = (hold.since, hold.flags(mode));
        let mut slot = table.pop_free();
        if slot.is_none() && sweep_due() {
            // Full: return what this backend no longer holds and what vanished backends left
            // behind, then try once more. Both scans are O(entries), so at most once a second.
            prune(&table, &mut holds, |_| true);
            table.reclaim_dead();
            slot = table.pop_free();
        }
        let Some(index) = slot else {
            table.header.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        };
        let mut buf = [0u8; LABEL_BYTES + 8];
        let mut digits = [0u8; 20];
        let id_bytes: &[u8] = match id {
            Id::Text(text) => text.as_bytes(),
            Id::Int(n) => keys::decimal(*n, &mut digits),
        };
        let len = compose(ns.as_bytes(), id_bytes, &mut buf);
        table.fill(index, target.key, flags, since, &buf[..len]);
        if let Some(hold) = holds.get_mut(&(target.key, mode)) {
            hold.slot = index;
        }
    });
}

/// After `advlock_unlock` released one session hold.
pub fn released_session(key: i64, mode: Mode) {
    let Some(table) = table() else { return };
    let mode = mode_flag(mode);
    HOLDS.with(|holds| {
        let Ok(mut holds) = holds.try_borrow_mut() else {
            return;
        };
        let Some(hold) = holds.get_mut(&(key, mode)) else {
            return;
        };
        hold.session = hold.session.saturating_sub(1);
        if hold.session > 0 {
            return;
        }
        if hold.xact > 0 && lockmgr::held_by_me(key, mode_of(mode)) {
            if hold.slot != NIL {
                table.set_flags(hold.slot, hold.flags(mode));
            }
            return;
        }
        if hold.slot != NIL {
            table.free(hold.slot);
        }
        holds.remove(&(key, mode));
    });
}

/// Drops every hold for which `consider` is true and whose lock this backend no longer holds.
fn prune(table: &Table, holds: &mut Holds, consider: impl Fn(&Hold) -> bool) {
    holds.retain(|&(key, mode), hold| {
        if !consider(hold) || lockmgr::held_by_me(key, mode_of(mode)) {
            return true;
        }
        if hold.slot != NIL {
            table.free(hold.slot);
        }
        false
    });
}

/// Top-level transaction end, after the lock manager released transaction-level locks.
fn end_of_transaction(table: &Table, holds: &mut Holds) {
    holds.retain(|&(key, mode), hold| {
        let was_session_only = hold.xact == 0;
        hold.xact = 0;
        if hold.session > 0 && lockmgr::held_by_me(key, mode_of(mode)) {
            if !was_session_only && hold.slot != NIL {
                table.set_flags(hold.slot, hold.flags(mode));
            }
            return true;
        }
        if hold.slot != NIL {
            table.free(hold.slot);
        }
        false
    });
}

fn register_callbacks() {
    CALLBACKS.with(|done| {
        if done.get() {
            return;
        }
        // SAFETY: registration allocates in TopMemoryContext / the exit-callback array; done
        // once per backend, from a function running inside a transaction.
        unsafe {
            pg_sys::RegisterResourceReleaseCallback(
                Some(on_resource_release),
                core::ptr::null_mut(),
            );
            pg_sys::before_shmem_exit(Some(on_exit), pg_sys::Datum::from(0));
        }
        done.set(true);
    });
}

#[pg_guard]
unsafe extern "C-unwind" fn on_resource_release(
    phase: pg_sys::ResourceReleasePhase::Type,
    is_commit: bool,
    is_top_level: bool,
    _arg: *mut core::ffi::c_void,
) {
    if phase != pg_sys::ResourceReleasePhase::RESOURCE_RELEASE_AFTER_LOCKS {
        return;
    }
    let Some(table) = table() else { return };
    HOLDS.with(|holds| {
        let Ok(mut holds) = holds.try_borrow_mut() else {
            return;
        };
        if holds.is_empty() {
            return;
        }
        if is_top_level {
            // SAFETY: reads backend-local globals; during ResourceOwnerRelease,
            // CurrentResourceOwner is the owner being released.
            let top =
                unsafe { pg_sys::CurrentResourceOwner == pg_sys::TopTransactionResourceOwner };
            if top {
                end_of_transaction(&table, &mut holds);
            }
        } else if !is_commit {
            // A subtransaction aborted: its transaction-level locks are gone now.
            prune(&table, &mut holds, |hold| hold.xact > 0);
        }
    });
}

#[pg_guard]
unsafe extern "C-unwind" fn on_exit(_code: i32, _arg: pg_sys::Datum) {
    let Some(table) = table() else { return };
    HOLDS.with(|holds| {
        let Ok(mut holds) = holds.try_borrow_mut() else {
            return;
        };
        for (_, hold) in holds.drain() {
            if hold.slot != NIL {
                table.free(hold.slot);
            }
        }
    });
}

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
            pg_sys::MyDatabaseId.to_u32(),
            me,
            pg_sys::has_privs_of_role(me, pg_sys::Oid::from(pg_sys::ROLE_PG_READ_ALL_STATS)),
        )
    };
    let mut rows = Vec::new();
    let mut may_see: HashMap<u32, bool> = HashMap::new();
    for index in 0..table.slots.len() {
        let Some(s) = table.read(index) else { continue };
        if s.database != database || !shmem::backend_alive(s.procno, s.pid) {
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
            if s.flags & FLAG_SHARED != 0 {
                "shared"
            } else {
                "exclusive"
            },
            if s.flags & FLAG_SESSION != 0 {
                "session"
            } else {
                "xact"
            },
            shmem::timestamptz(s.since),
            visible.then_some(ServerTextOut(s.label)),
        ));
    }
    TableIterator::new(rows)
}
