//! The shared table of leases and of the backends waiting for one (see `crate::leases` for the
//! SQL API and the rules).
//!
//! Locking: one LWLock (`shmem::lwlock(shmem::LEASES_LOCK)`) guards everything here, taken
//! exclusively to change anything and shared to read (the views, an observer that only looks).
//! Nothing under it waits for another backend or raises (two paths, `free_entry` and
//! `forget_backend`, collect the keys to settle in a `Vec`: Rust's allocator, not palloc, so no
//! ERROR under the lock): each operation is a bounded scan of fixed arrays, sized at server
//! start by `advlock.max_leases` and `MaxBackends` (one waiter entry per backend: a backend waits
//! for at most one lease at a time). That is also why this is not pgrx's
//! `PgLwLock<T>`/`pg_shmem_init!`:
//! those hold a type whose size is known at compile time, and these arrays are sized by settings.
//! The one exception is WAL insertion (`lease_wal`): a change to a held lease is logged under the
//! lock, so that the WAL's order is the table's, and may wait for WAL buffer space as a heap
//! change under a buffer lock does; the grant's flush waits after the lock is released.
//!
//! Grants: `settle` is the only place a lease is granted. It runs whenever a key's holders or
//! waiters may have changed (a wait begins or ends, a lease is released, renewed too late or
//! found expired), frees expired leases of the key, and reserves free slots for the key's oldest
//! waiters (by ticket: first come, first served, so a waiter for one slot is never overtaken),
//! setting each one's latch. A reserved (PENDING) lease is owned by its waiter, which draws the
//! token outside the lock and confirms it (`confirm`); it cannot expire before that, so for a key
//! with one slot each grant starts after the previous lease ended, after that lease's token was
//! drawn: tokens of successive holders grow.
//!
//! Observers (`crate::election`): a backend waiting for a key's leader to change registers an
//! observer entry (one per backend, like waiter entries) and sleeps on its latch. Every path that
//! changes who holds a key — a grant confirmed (a new term), a release, an expiry noticed, a
//! reservation given up — sets the latches of the key's observers (`wake_observers`); the
//! observer itself also wakes at the leader's expiry and settles the key, so an expiry that
//! nobody else notices still ends the term on time.
use crate::backend;
use crate::preload::lease_wal::{self, Reader};
use crate::preload::shmem;
use pgrx::pg_sys;
use std::sync::atomic::{AtomicPtr, Ordering};

pub const APP_NAME_BYTES: usize = 64;
/// A candidate description (`advlock_campaign`): at most this many bytes in the server encoding.
pub const CANDIDATE_BYTES: usize = 128;
/// A lease's label is an advisory lock label, as `labels::label_text` composes it.
const LABEL_BYTES: usize = crate::preload::labels::LABEL_BYTES;
const NONE: i32 = -1;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[repr(u32)]
enum State {
    Free = 0,
    /// Reserved by `settle` for a waiter, which has not drawn its token yet.
    Pending = 1,
    Held = 2,
}

#[repr(C)]
struct Header {
    lease_capacity: u32,
    waiter_capacity: u32,
    next_ticket: u64,
    counters: Counters,
    /// Where the last snapshot record ended (`lease_wal`): a checkpoint whose redo pointer is
    /// past it makes the next logged change log a new one. 0: none since the table was
    /// (re)built, so the next change logs one.
    last_snapshot_end: u64,
    /// After a promotion with `advlock.lease_lock_delay`: no lease is granted before this.
    grants_paused_until: i64,
}

/// Totals since the server started, for `advlock_lease_stats`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct Counters {
    pub granted: u64,
    pub released: u64,
    pub expired: u64,
    pub renewed: u64,
    pub timed_out: u64,
    /// Leases taken by `advlock_campaign` (terms), and how they ended.
    pub terms_started: u64,
    pub terms_expired: u64,
    pub terms_resigned: u64,
}

/// One lease entry. Its fields are this module's: the rest of advlock reads a lease through the
/// accessors below and changes one only through `Table`'s operations, so what "live" and
/// "expired" mean, and what ending or renewing a lease does, is written once, here.
#[repr(C)]
pub struct Lease {
    state: State,
    database: u32,
    key: i64,
    slots: u32,
    /// The lease id and fencing token; 0 while pending.
    id: i64,
    role: u32,
    ttl_ms: i32,
    granted_at: i64,
    expires_at: i64,
    renewed_at: i64,
    /// The backend that took or last renewed it (for a pending lease: its waiter).
    pid: i32,
    procno: i32,
    app_len: u32,
    app: [u8; APP_NAME_BYTES],
    label_len: u32,
    label: [u8; LABEL_BYTES],
    /// The candidate of a term (`advlock_campaign`); 0 bytes for a plain lease.
    candidate_len: u32,
    candidate: [u8; CANDIDATE_BYTES],
}

impl Lease {
    /// Whether this lease is a term of an election (taken by `advlock_campaign`).
    pub fn is_term(&self) -> bool {
        self.candidate_len > 0
    }

    /// Held and within its TTL. A lease past its expiry is over even before someone frees its
    /// entry: views, statistics and leadership count only live leases.
    pub fn is_live(&self, now: i64) -> bool {
        self.state == State::Held && self.expires_at > now
    }

    /// Held but past its expiry: it ended at `expires_at`, and its entry is freed (and counted
    /// as expired) by whoever notices first.
    fn has_expired(&self, now: i64) -> bool {
        self.state == State::Held && self.expires_at <= now
    }

    /// Held in `database`, live or expired but not freed yet: the leases a lease id can still
    /// name (to renew, release or check it).
    fn is_held_in(&self, database: u32) -> bool {
        self.state == State::Held && self.database == database
    }

    /// Starts (at a grant) or restarts (at a renewal) the TTL: it runs `ttl_ms` from `now`.
    fn run_ttl(&mut self, ttl_ms: i32, now: i64) {
        self.ttl_ms = ttl_ms;
        self.renewed_at = now;
        self.expires_at = now + backend::ms_to_us(ttl_ms);
    }

    pub fn key(&self) -> i64 {
        self.key
    }

    pub fn slots(&self) -> u32 {
        self.slots
    }

    /// The lease id, which is also its fencing token (and a term's number).
    pub fn id(&self) -> i64 {
        self.id
    }

    /// The role that took it (who may renew or release it, with its members).
    pub fn role(&self) -> u32 {
        self.role
    }

    /// The backend that took or last renewed it.
    pub fn pid(&self) -> i32 {
        self.pid
    }

    pub fn granted_at(&self) -> i64 {
        self.granted_at
    }

    pub fn renewed_at(&self) -> i64 {
        self.renewed_at
    }

    pub fn expires_at(&self) -> i64 {
        self.expires_at
    }

    /// The application_name of the backend that took or last renewed it (clipped).
    pub fn app(&self) -> &[u8] {
        &self.app[..self.app_len as usize]
    }

    /// Its advisory lock label (empty for a bare key).
    pub fn label(&self) -> &[u8] {
        &self.label[..self.label_len as usize]
    }

    /// The candidate of a term; empty for a plain lease.
    pub fn candidate(&self) -> &[u8] {
        &self.candidate[..self.candidate_len as usize]
    }
}

/// A held lease as the WAL and the state file carry it (`lease_wal`, `lease_recovery`): everything but the backend
/// that took or last renewed it (its pid and proc number name a process of the server that
/// logged it; a restored lease shows pid 0 until its holder renews it here).
pub struct Image<'a> {
    pub database: u32,
    pub key: i64,
    pub slots: u32,
    pub id: i64,
    pub role: u32,
    pub ttl_ms: i32,
    pub granted_at: i64,
    pub expires_at: i64,
    pub renewed_at: i64,
    pub app: &'a [u8],
    pub label: &'a [u8],
    pub candidate: &'a [u8],
}

impl<'a> Image<'a> {
    fn of(l: &'a Lease) -> Self {
        Image {
            database: l.database,
            key: l.key,
            slots: l.slots,
            id: l.id,
            role: l.role,
            ttl_ms: l.ttl_ms,
            granted_at: l.granted_at,
            expires_at: l.expires_at,
            renewed_at: l.renewed_at,
            app: l.app(),
            label: l.label(),
            candidate: l.candidate(),
        }
    }

    pub fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.database.to_le_bytes());
        out.extend_from_slice(&self.key.to_le_bytes());
        out.extend_from_slice(&self.slots.to_le_bytes());
        out.extend_from_slice(&self.id.to_le_bytes());
        out.extend_from_slice(&self.role.to_le_bytes());
        out.extend_from_slice(&self.ttl_ms.to_le_bytes());
        out.extend_from_slice(&self.granted_at.to_le_bytes());
        out.extend_from_slice(&self.expires_at.to_le_bytes());
        out.extend_from_slice(&self.renewed_at.to_le_bytes());
        for text in [self.app, self.label, self.candidate] {
            out.extend_from_slice(&(text.len() as u32).to_le_bytes());
            out.extend_from_slice(text);
        }
    }

    pub fn decode(r: &mut Reader<'a>) -> Option<Self> {
        let (database, key, slots, id) = (r.u32()?, r.i64()?, r.u32()?, r.i64()?);
        let (role, ttl_ms) = (r.u32()?, r.i32()?);
        let (granted_at, expires_at, renewed_at) = (r.i64()?, r.i64()?, r.i64()?);
        let mut text = |max: usize| {
            let len = r.u32()? as usize;
            (len <= max).then_some(())?;
            r.take(len)
        };
        let (app, label, candidate) = (
            text(APP_NAME_BYTES)?,
            text(LABEL_BYTES)?,
            text(CANDIDATE_BYTES)?,
        );
        (slots > 0 && ttl_ms > 0).then_some(Image {
            database,
            key,
            slots,
            id,
            role,
            ttl_ms,
            granted_at,
            expires_at,
            renewed_at,
            app,
            label,
            candidate,
        })
    }

    /// The lease entry this image describes.
    fn lease(&self) -> Lease {
        let mut l = Lease {
            state: State::Held,
            database: self.database,
            key: self.key,
            slots: self.slots,
            id: self.id,
            role: self.role,
            ttl_ms: self.ttl_ms,
            granted_at: self.granted_at,
            expires_at: self.expires_at,
            renewed_at: self.renewed_at,
            pid: 0,
            procno: NONE,
            app_len: 0,
            app: [0; APP_NAME_BYTES],
            label_len: 0,
            label: [0; LABEL_BYTES],
            candidate_len: 0,
            candidate: [0; CANDIDATE_BYTES],
        };
        l.app_len = copy_clipped(&mut l.app, self.app);
        l.label_len = copy_clipped(&mut l.label, self.label);
        l.candidate_len = copy_clipped(&mut l.candidate, self.candidate);
        l
    }
}

/// A backend waiting for the leader of a key to change (`crate::election`).
#[repr(C)]
struct Observer {
    /// 0 when the entry is free.
    pid: i32,
    procno: i32,
    database: u32,
    key: i64,
}

/// Who leads a key now, as an observer sees it.
pub enum Leadership<'t> {
    /// A live lease holds the key.
    Held(&'t Lease),
    /// A waiter was given the key and is drawing its token: a new term is about to start.
    Starting,
    /// Nobody holds the key.
    Vacant,
}

/// A backend waiting for a lease (one entry per backend). Read outside this module through the
/// accessors below, for the `advlock_leases` view.
#[repr(C)]
pub struct Waiter {
    /// 0 when the entry is free.
    pid: i32,
    procno: i32,
    database: u32,
    key: i64,
    slots: u32,
    ticket: u64,
    since: i64,
    /// Index of the lease `settle` reserved for it, or NONE.
    reserved: i32,
}

impl Waiter {
    pub fn key(&self) -> i64 {
        self.key
    }

    pub fn slots(&self) -> u32 {
        self.slots
    }

    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// When it began to wait.
    pub fn since(&self) -> i64 {
        self.since
    }
}

static TABLE: AtomicPtr<Header> = AtomicPtr::new(core::ptr::null_mut());

fn capacities() -> (usize, usize) {
    let leases = crate::gucs::MAX_LEASES.get().max(1) as usize;
    // SAFETY: MaxBackends is computed before shared memory is requested (PostgreSQL 15+).
    let backends = unsafe { pg_sys::MaxBackends }.max(1) as usize;
    (leases, backends)
}

pub fn shmem_size() -> usize {
    let (leases, waiters) = capacities();
    // One observer entry per backend, as for waiters.
    size_of::<Header>()
        + leases * size_of::<Lease>()
        + waiters * (size_of::<Waiter>() + size_of::<Observer>())
}

/// Creates or attaches the table; true when this call created it (`lease_recovery::SEGMENT`
/// then fills it from the state file in the postmaster).
///
/// # Safety
/// Only from `shmem::shmem_startup`, under AddinShmemInitLock.
pub unsafe fn shmem_attach() -> bool {
    let (leases, waiters) = capacities();
    // SAFETY: the size was requested in shmem_request; ShmemInitStruct's result is MAXALIGNed,
    // enough for every field here (align <= 8), and Lease/Waiter/Observer sizes are multiples
    // of 8.
    unsafe {
        let (ptr, found) = shmem::init_struct(c"advlock leases", shmem_size());
        let header = ptr.cast::<Header>();
        if !found {
            // Zero is a valid empty table: every State is Free (0), every observer pid 0, and
            // `reserved` is set whenever a waiter entry is claimed.
            core::ptr::write_bytes(ptr, 0, shmem_size());
            (*header).lease_capacity = leases as u32;
            (*header).waiter_capacity = waiters as u32;
        }
        TABLE.store(header, Ordering::Release);
        !found
    }
}

/// Every held lease, encoded as a snapshot record and the state file carry them.
pub fn encode_images<'a>(images: impl Iterator<Item = Image<'a>>) -> Vec<u8> {
    let mut out = vec![0u8; 4];
    let mut count = 0u32;
    for image in images {
        image.encode(&mut out);
        count += 1;
    }
    out[..4].copy_from_slice(&count.to_le_bytes());
    out
}

/// The inverse of `encode_images`; None for bytes this version cannot read.
pub fn decode_images(bytes: &[u8]) -> Option<Vec<Image<'_>>> {
    let mut r = Reader::new(bytes);
    let count = r.u32()?;
    let mut images = Vec::with_capacity(count.min(1 << 20) as usize);
    for _ in 0..count {
        images.push(Image::decode(&mut r)?);
    }
    r.is_empty().then_some(images)
}

/// The table, with the lock held for as long as it lives. Its entries are reached only through
/// its methods: the operations (grant, renew, end, expire) and read-only views of the entries.
pub struct Table {
    header: *mut Header,
    leases: &'static mut [Lease],
    waiters: &'static mut [Waiter],
    observers: &'static mut [Observer],
    exclusive: bool,
    /// In recovery (a hot standby, or the startup process replaying): held leases change only
    /// by replay, nothing is logged, granted, renewed or expired here.
    replica: bool,
}

/// Whether the table exists (advlock is preloaded).
pub fn available() -> bool {
    !TABLE.load(Ordering::Acquire).is_null()
}

/// Runs `f` with the table locked (exclusively, or shared for reading). None when not preloaded.
pub fn with_table<R>(exclusive: bool, f: impl FnOnce(&mut Table) -> R) -> Option<R> {
    let header = TABLE.load(Ordering::Acquire);
    if header.is_null() {
        return None;
    }
    let lock = shmem::lwlock(shmem::LEASES_LOCK);
    let mode = if exclusive {
        pg_sys::LWLockMode::LW_EXCLUSIVE
    } else {
        pg_sys::LWLockMode::LW_SHARED
    };
    let replica = lease_wal::is_replica();
    // SAFETY: the LWLock serialises every access: the table is handed out only while it is
    // held (shared: read only, by contract of `f`). LWLockAcquire holds off interrupts until
    // LWLockRelease, and an ERROR inside `f` would release it in AbortTransaction.
    unsafe {
        pg_sys::LWLockAcquire(lock, mode);
        let mut table = table_at(header, exclusive, replica);
        let result = f(&mut table);
        pg_sys::LWLockRelease(lock);
        Some(result)
    }
}

/// The table's arrays behind `header`.
///
/// # Safety
/// `header` was attached in shmem_attach (it lives as long as the process, the arrays follow it
/// with the capacities it records), and the caller holds the table's lock or is alone (the
/// postmaster at start and at exit).
unsafe fn table_at(header: *mut Header, exclusive: bool, replica: bool) -> Table {
    // SAFETY: see the function contract.
    unsafe {
        let leases_ptr = header.cast::<u8>().add(size_of::<Header>()).cast::<Lease>();
        let leases = core::slice::from_raw_parts_mut(leases_ptr, (*header).lease_capacity as usize);
        let waiters_ptr = leases_ptr.add(leases.len()).cast::<Waiter>();
        let waiters =
            core::slice::from_raw_parts_mut(waiters_ptr, (*header).waiter_capacity as usize);
        let observers_ptr = waiters_ptr.add(waiters.len()).cast::<Observer>();
        let observers =
            core::slice::from_raw_parts_mut(observers_ptr, (*header).waiter_capacity as usize);
        Table {
            header,
            leases,
            waiters,
            observers,
            exclusive,
            replica,
        }
    }
}

/// The postmaster's view of the table, with no other process alive: at start (after the
/// table was created) and at exit.
fn alone<R>(f: impl FnOnce(&mut Table) -> R) -> Option<R> {
    let header = TABLE.load(Ordering::Acquire);
    if header.is_null() {
        return None;
    }
    // SAFETY: the header is attached, and no other process uses the table (the contract of
    // this function's callers: `restore_unlocked`, `snapshot_unlocked`).
    let mut table = unsafe { table_at(header, true, true) };
    Some(f(&mut table))
}

/// At server start, in the postmaster (`lease_recovery::read_state_file`): the leases of the state
/// file, live until at least `now` + their TTL.
pub fn restore_unlocked(images: &[Image], now: i64) {
    alone(|t| {
        t.restore_snapshot(images, 0);
        t.promote(now, 0);
    });
}

/// At the postmaster's exit (`lease_recovery::write_state_file`): `encode` applied to every held
/// lease.
pub fn snapshot_unlocked<R>(
    encode: impl FnOnce(&mut dyn Iterator<Item = Image<'_>>) -> R,
) -> Option<R> {
    alone(|t| encode(&mut t.held_images()))
}

impl Table {
    pub fn counters(&self) -> Counters {
        // SAFETY: the header is valid while the lock is held.
        unsafe { (*self.header).counters }
    }

    fn counters_mut(&mut self) -> &mut Counters {
        debug_assert!(self.exclusive);
        // SAFETY: the header is valid and exclusively locked.
        unsafe { &mut (*self.header).counters }
    }

    /// Claims a waiter entry for this backend, with the next ticket. None when all are in use
    /// (cannot happen: one entry per backend, and a backend waits for one lease at a time).
    pub fn enqueue(
        &mut self,
        me: Me,
        database: u32,
        key: i64,
        slots: u32,
        now: i64,
    ) -> Option<usize> {
        let at = self.waiters.iter().position(|w| w.pid == 0)?;
        // SAFETY: the header is valid and exclusively locked.
        let ticket = unsafe {
            (*self.header).next_ticket += 1;
            (*self.header).next_ticket
        };
        self.waiters[at] = Waiter {
            pid: me.pid,
            procno: me.procno,
            database,
            key,
            slots,
            ticket,
            since: now,
            reserved: NONE,
        };
        Some(at)
    }

    /// Frees a waiter entry; a lease reserved for it but not confirmed is freed too.
    pub fn dequeue(&mut self, waiter: usize) {
        let reserved = self.waiters[waiter].reserved;
        if reserved != NONE && self.leases[reserved as usize].state == State::Pending {
            self.leases[reserved as usize].state = State::Free;
            // Observers waiting for the term this reservation would have started look again.
            let (database, key) = (self.waiters[waiter].database, self.waiters[waiter].key);
            self.wake_observers(database, key);
        }
        self.waiters[waiter].pid = 0;
        self.waiters[waiter].reserved = NONE;
    }

    /// The slot count the key's current leases and waiters use, if any.
    pub fn slots_in_use(&self, database: u32, key: i64) -> Option<u32> {
        self.leases
            .iter()
            .find(|l| l.state != State::Free && l.database == database && l.key == key)
            .map(|l| l.slots)
            .or_else(|| {
                self.waiters
                    .iter()
                    .find(|w| w.pid != 0 && w.database == database && w.key == key)
                    .map(|w| w.slots)
            })
    }

    /// The earliest expiry among the key's held leases (an expired one not freed yet included).
    pub fn next_expiry(&self, database: u32, key: i64) -> Option<i64> {
        self.held_in(database)
            .filter(|l| l.key == key)
            .map(|l| l.expires_at)
            .min()
    }

    /// The held leases of `database`, live or expired but not freed yet (see `Lease::is_held_in`).
    pub fn held_in(&self, database: u32) -> impl Iterator<Item = &Lease> {
        self.leases.iter().filter(move |l| l.is_held_in(database))
    }

    /// Held lease `id` of `database`, live or expired but not freed yet.
    pub fn held(&self, database: u32, id: i64) -> Option<&Lease> {
        self.held_in(database).find(|l| l.id == id)
    }

    /// The live leases of every database.
    pub fn live(&self, now: i64) -> impl Iterator<Item = &Lease> {
        self.leases.iter().filter(move |l| l.is_live(now))
    }

    /// The live leases of `database`.
    pub fn live_in(&self, database: u32, now: i64) -> impl Iterator<Item = &Lease> {
        self.live(now).filter(move |l| l.database == database)
    }

    /// The waiter entries in use, of every database.
    pub fn waiting(&self) -> impl Iterator<Item = &Waiter> {
        self.waiters.iter().filter(|w| w.pid != 0)
    }

    /// The waiter entries in use in `database`.
    pub fn waiting_in(&self, database: u32) -> impl Iterator<Item = &Waiter> {
        self.waiting().filter(move |w| w.database == database)
    }

    /// How many lease entries there are (`advlock.max_leases`).
    pub fn capacity(&self) -> usize {
        self.leases.len()
    }

    /// Grants what can be granted on `key` (see the module comment). Returns whether a free
    /// slot of the key could not be reserved because the lease table is full.
    pub fn settle(&mut self, database: u32, key: i64, now: i64) -> bool {
        if self.replica {
            // A standby's leases end only by replay; nobody is granted one there.
            return false;
        }
        // One pass over the key's leases: free the expired and those reserved for a vanished
        // waiter (defensive: exit callbacks remove those), count the rest.
        let (mut live, mut slots, mut expired, mut terms_expired) = (0u32, None, 0u64, 0u64);
        let mut vanished = false;
        for l in self.leases.iter_mut() {
            if l.state == State::Free || l.database != database || l.key != key {
                continue;
            }
            if l.has_expired(now) {
                l.state = State::Free;
                lease_wal::log_end(l.database, l.id);
                expired += 1;
                terms_expired += u64::from(l.is_term());
            } else if l.state == State::Pending && !backend::backend_alive(l.procno, l.pid) {
                l.state = State::Free;
                vanished = true;
            } else {
                live += 1;
                slots = Some(l.slots);
            }
        }
        self.counters_mut().expired += expired;
        self.counters_mut().terms_expired += terms_expired;
        if expired > 0 || vanished {
            // The key's holders changed: its observers look again.
            self.wake_observers(database, key);
        }
        if expired > 0 {
            self.snapshot_if_due();
        }
        for w in self.waiters.iter_mut() {
            if w.pid == 0 || w.database != database || w.key != key {
                continue;
            }
            if backend::backend_alive(w.procno, w.pid) {
                slots = slots.or(Some(w.slots));
            } else {
                w.pid = 0;
                w.reserved = NONE;
            }
        }
        let Some(slots) = slots else {
            return false;
        };
        if self.grants_paused_until(now).is_some() {
            // The lock delay after a promotion: the waiters wake when it ends.
            return false;
        }
        while live < slots {
            let Some(next) = self
                .waiters
                .iter()
                .enumerate()
                .filter(|(_, w)| {
                    w.pid != 0 && w.database == database && w.key == key && w.reserved == NONE
                })
                .min_by_key(|(_, w)| w.ticket)
                .map(|(i, _)| i)
            else {
                break;
            };
            let Some(free) = self.free_entry(now) else {
                return true;
            };
            let w = &mut self.waiters[next];
            w.reserved = free as i32;
            self.leases[free] = Lease {
                state: State::Pending,
                database,
                key,
                slots,
                id: 0,
                role: 0,
                ttl_ms: 0,
                granted_at: 0,
                expires_at: 0,
                renewed_at: 0,
                pid: w.pid,
                procno: w.procno,
                app_len: 0,
                app: [0; APP_NAME_BYTES],
                label_len: 0,
                label: [0; LABEL_BYTES],
                candidate_len: 0,
                candidate: [0; CANDIDATE_BYTES],
            };
            set_latch_of(w.procno);
            live += 1;
        }
        // The oldest waiter still without a slot sleeps until the next expiry: tell it when the
        // holders changed, so it can recompute.
        if let Some(head) = self
            .waiters
            .iter()
            .filter(|w| w.pid != 0 && w.database == database && w.key == key && w.reserved == NONE)
            .min_by_key(|w| w.ticket)
        {
            set_latch_of(head.procno);
        }
        false
    }

    /// A free lease entry. Leases of other keys that expired unnoticed (nobody asked for their key
    /// since) still occupy theirs: when none is free, those are freed first.
    fn free_entry(&mut self, now: i64) -> Option<usize> {
        if let Some(free) = self.leases.iter().position(|l| l.state == State::Free) {
            return Some(free);
        }
        let (mut expired, mut terms_expired, mut keys) = (0, 0, Vec::new());
        for l in self.leases.iter_mut() {
            if l.has_expired(now) {
                l.state = State::Free;
                lease_wal::log_end(l.database, l.id);
                expired += 1;
                if l.is_term() {
                    terms_expired += 1;
                    keys.push((l.database, l.key));
                }
            }
        }
        self.counters_mut().expired += expired;
        self.counters_mut().terms_expired += terms_expired;
        for (database, key) in keys {
            self.wake_observers(database, key);
        }
        if expired > 0 {
            self.snapshot_if_due();
        }
        self.leases.iter().position(|l| l.state == State::Free)
    }

    /// The lease reserved for `waiter`, if `settle` gave it one.
    pub fn reservation(&self, waiter: usize) -> Option<usize> {
        let r = self.waiters[waiter].reserved;
        (r != NONE).then_some(r as usize)
    }

    /// Whether `waiter` is the key's oldest waiter without a slot (it watches the next expiry).
    pub fn is_head(&self, waiter: usize) -> bool {
        let me = &self.waiters[waiter];
        !self.waiters.iter().any(|w| {
            w.pid != 0
                && w.database == me.database
                && w.key == me.key
                && w.reserved == NONE
                && w.ticket < me.ticket
        })
    }

    /// Turns the reservation of `waiter` into a held lease with its token, and logs the grant:
    /// returns the WAL position to flush (`lease_wal::flush`, outside the lock) before the id
    /// reaches the client.
    pub fn confirm(&mut self, waiter: usize, grant: Grant, now: i64) -> u64 {
        let index = self.waiters[waiter].reserved as usize;
        self.dequeue_keeping(waiter);
        let l = &mut self.leases[index];
        l.state = State::Held;
        l.id = grant.id;
        l.role = grant.role;
        l.granted_at = now;
        l.run_ttl(grant.ttl_ms, now);
        l.app_len = copy_clipped(&mut l.app, grant.app);
        l.label_len = copy_clipped(&mut l.label, grant.label);
        l.candidate_len = copy_clipped(&mut l.candidate, grant.candidate);
        let (database, key, term) = (l.database, l.key, l.is_term());
        let mut image = Vec::with_capacity(128);
        Image::of(l).encode(&mut image);
        let lsn = lease_wal::log_grant(&image);
        self.counters_mut().granted += 1;
        if term {
            self.counters_mut().terms_started += 1;
        }
        // A new holder: the key's observers see the new term.
        self.wake_observers(database, key);
        self.snapshot_if_due();
        lsn
    }

    fn dequeue_keeping(&mut self, waiter: usize) {
        self.waiters[waiter].pid = 0;
        self.waiters[waiter].reserved = NONE;
    }

    /// The entry of held lease `id` of `database` (live or expired but not freed yet).
    fn find(&self, database: u32, id: i64) -> Option<usize> {
        self.leases
            .iter()
            .position(|l| l.is_held_in(database) && l.id == id)
    }

    /// Renews lease `id` of `database` for `ttl_ms` from `now`, as `me` (with application_name
    /// `app`): `advlock_lease_renew`. A lease renewed too late is not revived: it ended at its
    /// expiry, and is freed now (counted as expired, its key settled).
    pub fn renew(
        &mut self,
        database: u32,
        id: i64,
        ttl_ms: i32,
        me: Me,
        app: &[u8],
        now: i64,
    ) -> Renewal {
        let Some(index) = self.find(database, id) else {
            return Renewal::NotFound;
        };
        if self.leases[index].has_expired(now) {
            // Too late: it ended at expires_at even if nobody noticed until now.
            self.free(index, now);
            return Renewal::Expired;
        }
        let l = &mut self.leases[index];
        let (key, before) = (l.key, l.expires_at);
        l.run_ttl(ttl_ms, now);
        l.pid = me.pid;
        l.procno = me.procno;
        l.app_len = copy_clipped(&mut l.app, app);
        let earlier = l.expires_at < before;
        lease_wal::log_renewal(database, id, ttl_ms, l.renewed_at, l.expires_at);
        self.snapshot_if_due();
        self.counters_mut().renewed += 1;
        // A shorter TTL moves the next expiry earlier: the key's oldest waiter recomputes, and
        // so do its observers (they wake at the leader's expiry).
        self.settle(database, key, now);
        if earlier {
            self.wake_observers(database, key);
        }
        Renewal::Renewed
    }

    /// Ends lease `id` of `database` and lets the key's next waiters have it; `Ended::NotFound`
    /// when no entry holds it (never taken, or already freed).
    pub fn end(&mut self, database: u32, id: i64, now: i64) -> Ended {
        match self.find(database, id) {
            Some(index) => self.free(index, now),
            None => Ended::NotFound,
        }
    }

    /// Frees held lease entry `index` and counts how it ended: expired (its TTL had run out, so it
    /// ended then) or released (a term: resigned). Then the key's observers look again and its
    /// waiters are settled. The one place a held lease is freed on request.
    fn free(&mut self, index: usize, now: i64) -> Ended {
        let l = &mut self.leases[index];
        let (database, key, term, expired) = (l.database, l.key, l.is_term(), l.has_expired(now));
        l.state = State::Free;
        lease_wal::log_end(database, l.id);
        self.snapshot_if_due();
        if expired {
            self.counters_mut().expired += 1;
            if term {
                self.counters_mut().terms_expired += 1;
            }
        } else {
            self.counters_mut().released += 1;
            if term {
                self.counters_mut().terms_resigned += 1;
            }
        }
        self.wake_observers(database, key);
        self.settle(database, key, now);
        if expired {
            Ended::Expired
        } else {
            Ended::Released
        }
    }

    /// After a logged change: a snapshot of every held lease when a checkpoint began since the
    /// last one (see `lease_wal`), so that replay from that checkpoint finds them all.
    /// Returns the snapshot record's end when one was logged.
    pub fn snapshot_if_due(&mut self) -> Option<u64> {
        // SAFETY: the header is valid and exclusively locked.
        let last = unsafe { (*self.header).last_snapshot_end };
        if self.replica || !lease_wal::snapshot_due(last) {
            return None;
        }
        // An empty table needs no record: replay after a crash starts from an empty table.
        let logged = if self.held_images().next().is_none() {
            None
        } else {
            Some(lease_wal::log_snapshot(&encode_images(self.held_images())))
        };
        let end = logged.unwrap_or_else(lease_wal::insert_position);
        // SAFETY: as above.
        unsafe { (*self.header).last_snapshot_end = end };
        logged
    }

    /// Every held lease (live or expired but not freed yet), as the WAL carries it.
    fn held_images(&self) -> impl Iterator<Item = Image<'_>> {
        self.leases
            .iter()
            .filter(|l| l.state == State::Held)
            .map(Image::of)
    }

    /// Redo of a grant (or one lease of a snapshot): the lease held as the record says. None
    /// when no entry is free (a standby with a smaller `advlock.max_leases`).
    pub fn restore(&mut self, image: &Image) -> Option<()> {
        let index = match self.find(image.database, image.id) {
            Some(index) => index,
            None => self.leases.iter().position(|l| l.state == State::Free)?,
        };
        self.leases[index] = image.lease();
        self.wake_observers(image.database, image.key);
        Some(())
    }

    /// Redo of a renewal; nothing when the lease is not held (its grant came before a snapshot
    /// that did not have it any more).
    pub fn restore_renewal(
        &mut self,
        database: u32,
        id: i64,
        ttl_ms: i32,
        renewed_at: i64,
        expires_at: i64,
    ) {
        if let Some(index) = self.find(database, id) {
            let l = &mut self.leases[index];
            (l.ttl_ms, l.renewed_at, l.expires_at) = (ttl_ms, renewed_at, expires_at);
            let key = l.key;
            self.wake_observers(database, key);
        }
    }

    /// Redo of an end (release, resignation, expiry).
    pub fn restore_end(&mut self, database: u32, id: i64) {
        if let Some(index) = self.find(database, id) {
            self.leases[index].state = State::Free;
            let key = self.leases[index].key;
            self.wake_observers(database, key);
        }
    }

    /// Redo of a snapshot: the held leases are exactly `images`. `end` is where the record ended
    /// (0 for the state file): a checkpoint before it needs no new snapshot after promotion.
    pub fn restore_snapshot(&mut self, images: &[Image], end: u64) -> Option<()> {
        for i in 0..self.leases.len() {
            if self.leases[i].state == State::Held {
                self.leases[i].state = State::Free;
                let (database, key) = (self.leases[i].database, self.leases[i].key);
                self.wake_observers(database, key);
            }
        }
        for image in images {
            self.restore(image)?;
        }
        // SAFETY: the header is valid and exclusively locked (or the postmaster is alone).
        unsafe { (*self.header).last_snapshot_end = end };
        Some(())
    }

    /// The end of recovery (a crash restart, a promotion) or a start from the state file: every
    /// held lease is live again until at least `now` + its TTL, as etcd's lessor.Promote does,
    /// so that its holder, who could not renew while the server was down or changing, can now.
    /// `lock_delay` (microseconds, after a promotion): no lease is granted before it passed,
    /// since the old primary may have granted leases whose WAL never reached this server. The
    /// next logged change logs a snapshot (this server's next crash recovery may begin after
    /// every record replayed here).
    pub fn promote(&mut self, now: i64, lock_delay: i64) {
        for i in 0..self.leases.len() {
            let l = &mut self.leases[i];
            if l.state == State::Held {
                l.expires_at = l.expires_at.max(now + backend::ms_to_us(l.ttl_ms));
                let (database, key) = (l.database, l.key);
                self.wake_observers(database, key);
            }
        }
        // SAFETY: the header is valid and exclusively locked (or the postmaster is alone).
        unsafe {
            (*self.header).last_snapshot_end = 0;
            (*self.header).grants_paused_until = if lock_delay > 0 { now + lock_delay } else { 0 };
        }
    }

    /// The end of the lock delay after a promotion, while it runs.
    pub fn grants_paused_until(&self, now: i64) -> Option<i64> {
        // SAFETY: the header is valid while the lock is held.
        let until = unsafe { (*self.header).grants_paused_until };
        (until > now).then_some(until)
    }

    pub fn count_timed_out(&mut self) {
        self.counters_mut().timed_out += 1;
    }

    /// Sets the latch of every backend observing `key` of `database` (its leader changed or may
    /// have).
    fn wake_observers(&self, database: u32, key: i64) {
        for o in self.observers.iter() {
            if o.pid != 0 && o.database == database && o.key == key {
                set_latch_of(o.procno);
            }
        }
    }

    /// Claims an observer entry for this backend. None when all are in use (cannot happen: one
    /// entry per backend, and a backend observes one key at a time).
    pub fn observe(&mut self, me: Me, database: u32, key: i64) -> Option<usize> {
        let at = self.observers.iter().position(|o| o.pid == 0)?;
        self.observers[at] = Observer {
            pid: me.pid,
            procno: me.procno,
            database,
            key,
        };
        Some(at)
    }

    pub fn unobserve(&mut self, observer: usize) {
        self.observers[observer].pid = 0;
    }

    /// Who leads `key` now. A lease past its expiry leads no more (even before someone frees
    /// it); among several live leases (a key used with slots > 1, not an election) the newest.
    pub fn leadership(&self, database: u32, key: i64, now: i64) -> Leadership<'_> {
        let mut held: Option<&Lease> = None;
        let mut starting = false;
        for l in self.leases.iter() {
            if l.database != database || l.key != key {
                continue;
            }
            if l.is_live(now) {
                if held.is_none_or(|h| h.id < l.id) {
                    held = Some(l);
                }
            } else if l.state == State::Pending {
                starting = true;
            }
        }
        match held {
            Some(l) => Leadership::Held(l),
            None if starting => Leadership::Starting,
            None => Leadership::Vacant,
        }
    }

    /// Everything of this backend, at exit or after an error: its waiter entry and any lease
    /// reserved for it and not yet confirmed. Returns the keys to settle.
    pub fn forget_backend(&mut self, pid: i32) -> Vec<(u32, i64)> {
        let mut keys = Vec::new();
        for o in self.observers.iter_mut() {
            if o.pid == pid {
                o.pid = 0;
            }
        }
        for i in 0..self.waiters.len() {
            if self.waiters[i].pid == pid {
                keys.push((self.waiters[i].database, self.waiters[i].key));
                self.dequeue(i);
            }
        }
        for l in self.leases.iter_mut() {
            if l.state == State::Pending && l.pid == pid {
                keys.push((l.database, l.key));
                l.state = State::Free;
            }
        }
        for &(database, key) in &keys {
            self.wake_observers(database, key);
        }
        keys
    }
}

/// How `end` found a lease.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Ended {
    /// It was live: ended now.
    Released,
    /// Its TTL had run out: it had ended then (freed now).
    Expired,
    /// No such lease (never, or already freed).
    NotFound,
}

/// How `Table::renew` found a lease.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Renewal {
    /// It was live: its TTL runs again from now.
    Renewed,
    /// Its TTL had run out: it had ended then (freed now, counted as expired).
    Expired,
    /// No such lease (never, or already freed).
    NotFound,
}

/// Ends lease `id` of `database` (`Table::end`) under the lock. The one path for
/// `advlock_lease_release` and for a lease whose statement failed.
pub fn end(database: u32, id: i64) -> Ended {
    with_table(true, |t| t.end(database, id, backend::now())).unwrap_or(Ended::NotFound)
}

/// What the granted backend writes into its lease.
pub struct Grant<'a> {
    pub id: i64,
    pub role: u32,
    pub ttl_ms: i32,
    pub app: &'a [u8],
    pub label: &'a [u8],
    /// Empty for a plain lease.
    pub candidate: &'a [u8],
}

/// This backend, as the table records it.
#[derive(Clone, Copy)]
pub struct Me {
    pub pid: i32,
    pub procno: i32,
}

pub fn me() -> Me {
    Me {
        pid: backend::pid(),
        procno: backend::proc_number(),
    }
}

/// Copies at most `dst.len()` bytes, cut at a UTF-8 character boundary.
fn copy_clipped(dst: &mut [u8], src: &[u8]) -> u32 {
    let mut n = src.len().min(dst.len());
    while n > 0 && n < src.len() && (src[n] & 0xC0) == 0x80 {
        n -= 1;
    }
    dst[..n].copy_from_slice(&src[..n]);
    n as u32
}

/// Wakes a backend sleeping on its latch (a waiter whose lease was reserved or whose key changed).
/// Never this backend's own latch: it is the one checking, and a set latch would turn its next
/// WaitLatch into a busy loop.
fn set_latch_of(procno: i32) {
    if procno == backend::proc_number() {
        return;
    }
    if let Some(proc_) = backend::proc_at(procno) {
        // SAFETY: a PGPROC of shared memory; SetLatch on another process's latch is how the
        // lock manager wakes waiters, and is allowed while holding an LWLock.
        unsafe { pg_sys::SetLatch(&raw mut (*proc_).procLatch) };
    }
}
