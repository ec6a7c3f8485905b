//! The only module that calls PostgreSQL's lock manager, subtransaction and GUC internals,
//! behind small safe functions. (Other modules' unsafe code reads PostgreSQL state of their own
//! concern -- shared memory in `preload/`, backend status in `activity`, the backend's own facts
//! in `backend` -- each block with its SAFETY comment; none of it touches the lock manager.)
//!
//! Tags are built exactly as `lockfuncs.c` builds them for `pg_advisory_*(bigint)`
//! (SET_LOCKTAG_INT64: field4 = 1), so advlock and the built-ins see each other's locks.
use crate::lock_mode::{Mode, Scope};
use core::ffi::CStr;
use pgrx::pg_guard;
use pgrx::pg_sys;
use pgrx::pg_sys::errcodes::PgSqlErrorCode;
use pgrx::pg_sys::panic::CaughtError;
use pgrx::PgTryBuilder;
use std::cell::Cell;

/// `LOCKTAG` for an int8 advisory key in the current database.
fn advisory_tag(key: i64) -> pg_sys::LOCKTAG {
    pg_sys::LOCKTAG {
        locktag_field1: crate::backend::database(),
        locktag_field2: ((key as u64) >> 32) as u32,
        locktag_field3: key as u32,
        locktag_field4: 1,
        locktag_type: pg_sys::LockTagType::LOCKTAG_ADVISORY as u8,
        locktag_lockmethodid: pg_sys::USER_LOCKMETHOD as u8,
    }
}

fn lockmode(mode: Mode) -> pg_sys::LOCKMODE {
    match mode {
        Mode::Exclusive => pg_sys::ExclusiveLock as pg_sys::LOCKMODE,
        Mode::Shared => pg_sys::ShareLock as pg_sys::LOCKMODE,
    }
}

/// Advisory locks are not transferable to parallel workers: a lock taken by a worker would be
/// released when the worker exits. PostgreSQL's own `pg_advisory_*` functions are PARALLEL
/// UNSAFE, so the planner never runs them in a worker (lockfuncs.c dropped its explicit check
/// in PostgreSQL 13); advlock's are too, and this check keeps the error should one be reached in
/// parallel mode anyway (say, through a PARALLEL SAFE wrapper a user wrote).
pub fn prevent_in_parallel_mode() {
    // SAFETY: reads backend-local transaction state.
    if unsafe { pg_sys::IsInParallelMode() } {
        crate::errors::Report::new(
            PgSqlErrorCode::ERRCODE_INVALID_TRANSACTION_STATE,
            "cannot use advisory locks during a parallel operation",
        )
        .raise();
    }
}

pub fn in_transaction_block() -> bool {
    // SAFETY: reads backend-local transaction state.
    unsafe { pg_sys::IsTransactionBlock() }
}

pub fn in_read_only_transaction() -> bool {
    // SAFETY: reads backend-local transaction state.
    unsafe { pg_sys::XactReadOnly }
}

pub fn in_recovery() -> bool {
    // SAFETY: RecoveryInProgress only reads shared memory state under its own spinlock.
    unsafe { pg_sys::RecoveryInProgress() }
}

/// Tries to take the lock without waiting. True when held (newly or re-entrantly).
pub fn try_acquire(key: i64, mode: Mode, scope: Scope) -> bool {
    let tag = advisory_tag(key);
    // SAFETY: a valid tag and mode for USER_LOCKMETHOD; with dontWait the call never sleeps.
    // An ERROR (e.g. out of shared memory) longjmps into pgrx's guard and becomes a panic.
    let result =
        unsafe { pg_sys::LockAcquire(&tag, lockmode(mode), scope == Scope::Session, true) };
    result != pg_sys::LockAcquireResult::LOCKACQUIRE_NOT_AVAIL
}

/// Whether this backend holds the lock in exactly this mode (in any scope).
pub fn held_by_me(key: i64, mode: Mode) -> bool {
    let tag = advisory_tag(key);
    // PostgreSQL 17 added `orstronger`; false keeps the exact-mode meaning of earlier majors.
    #[cfg(any(feature = "pg15", feature = "pg16"))]
    // SAFETY: reads this backend's local lock table.
    let held = unsafe { pg_sys::LockHeldByMe(&tag, lockmode(mode)) };
    #[cfg(not(any(feature = "pg15", feature = "pg16")))]
    // SAFETY: reads this backend's local lock table.
    let held = unsafe { pg_sys::LockHeldByMe(&tag, lockmode(mode), false) };
    held
}

/// Releases one session-level hold. False when this backend holds no such session lock; the
/// lock manager's own WARNING then ("you don't own a lock of type ExclusiveLock", which names
/// neither the key nor what is held instead) is kept from the client and the log, so that the
/// caller can say what this session does hold (`pg_advisory_unlock` still warns as before).
pub fn release_session(key: i64, mode: Mode) -> bool {
    let tag = advisory_tag(key);
    let _quiet = QuietLockRelease::begin();
    // SAFETY: a valid tag; LockRelease only touches this backend's holds.
    unsafe { pg_sys::LockRelease(&tag, lockmode(mode), true) }
}

thread_local! {
    /// Set only while `release_session` runs LockRelease.
    static QUIET_LOCK_RELEASE: Cell<bool> = const { Cell::new(false) };
    static PREVIOUS_EMIT_LOG_HOOK: Cell<pg_sys::emit_log_hook_type> = const { Cell::new(None) };
}

/// Sets QUIET_LOCK_RELEASE for its lifetime (cleared on drop, also when an ERROR unwinds).
struct QuietLockRelease;

impl QuietLockRelease {
    fn begin() -> Self {
        QUIET_LOCK_RELEASE.with(|q| q.set(true));
        QuietLockRelease
    }
}

impl Drop for QuietLockRelease {
    fn drop(&mut self) {
        QUIET_LOCK_RELEASE.with(|q| q.set(false));
    }
}

/// Installs the hook behind `release_session`'s quiet release, chained to any earlier one.
/// From `_PG_init`, once per backend that loads the library.
pub fn install_log_hook() {
    // SAFETY: emit_log_hook is a backend-local global that loaded libraries chain; _PG_init
    // runs once per process, before any of our functions.
    unsafe {
        PREVIOUS_EMIT_LOG_HOOK.with(|p| p.set(pg_sys::emit_log_hook));
        pg_sys::emit_log_hook = Some(quiet_lock_release_warning);
    }
}

/// The one message it drops: a WARNING raised by LockRelease (lock.c) while `release_session`
/// runs, recognised by its function name, not its text (translated under lc_messages).
/// EmitErrorReport calls the hook only for a message bound for the server log, and honours
/// output_to_client / output_to_server cleared here; with log_min_messages above WARNING the
/// hook is not called and the lock manager's WARNING reaches the client as before.
#[pg_guard]
unsafe extern "C-unwind" fn quiet_lock_release_warning(edata: *mut pg_sys::ErrorData) {
    // SAFETY: EmitErrorReport passes the ErrorData being reported; funcname is NULL or a
    // static C string (__func__).
    unsafe {
        if QUIET_LOCK_RELEASE.with(|q| q.get())
            && (*edata).elevel == pg_sys::WARNING as i32
            && !(*edata).funcname.is_null()
            && CStr::from_ptr((*edata).funcname) == c"LockRelease"
        {
            (*edata).output_to_client = false;
            (*edata).output_to_server = false;
        }
        if let Some(previous) = PREVIOUS_EMIT_LOG_HOOK.with(|p| p.get()) {
            previous(edata);
        }
    }
}

/// How a transaction-level hold was taken, which decides the resource owner that has it.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Taken {
    /// `try_acquire`: owned by CurrentResourceOwner (the portal's, during a statement).
    AtOnce,
    /// `acquire_within`: its subtransaction's commit handed the lock to the parent's
    /// CurTransactionResourceOwner.
    AfterWait,
}

/// Releases one transaction-level hold (an all-or-nothing call giving back what it took). The
/// lock manager counts holds per owner, so a hold the transaction had before the call stays.
pub fn release_xact(key: i64, mode: Mode, taken: Taken) {
    let tag = advisory_tag(key);
    // SAFETY: a valid tag; with sessionLock = false LockRelease releases one hold owned by
    // CurrentResourceOwner, so that is pointed, for this call only, at the owner the hold was
    // given to. LockRelease reports a missing hold as a WARNING and returns; the owner is
    // restored before anything else runs.
    unsafe {
        let caller_owner = pg_sys::CurrentResourceOwner;
        if taken == Taken::AfterWait {
            pg_sys::CurrentResourceOwner = pg_sys::CurTransactionResourceOwner;
        }
        pg_sys::LockRelease(&tag, lockmode(mode), false);
        pg_sys::CurrentResourceOwner = caller_owner;
    }
}

/// Waits in the lock manager's queue for at most `timeout_ms` (> 0). True when the lock is
/// held on return; false when the wait ran out and nothing is held or queued.
///
/// Mirrors plpgsql's exception block (`exec_stmt_block`): the wait runs inside an internal
/// subtransaction so that a lock-timeout ERROR can be caught and rolled back cleanly, and
/// `lock_timeout` is set under its own GUC nest level (GUC_ACTION_SAVE) so the caller's value
/// is restored on every path — `SET LOCAL` semantics would leak into the parent transaction.
/// Only 55P03 is caught; deadlocks (40P01), cancels and statement timeouts (57014) propagate.
pub fn acquire_within(key: i64, mode: Mode, scope: Scope, timeout_ms: i32) -> bool {
    debug_assert!(timeout_ms > 0);
    let tag = advisory_tag(key);
    let session = scope == Scope::Session;
    let timeout = std::ffi::CString::new(timeout_ms.to_string()).expect("digits contain no NUL");
    // SAFETY: we are inside a transaction (every SQL function call is). The sequence below is
    // the one plpgsql uses around a protected block; memory context and resource owner are
    // restored on both paths before returning control to the caller.
    unsafe {
        let caller_context = pg_sys::CurrentMemoryContext;
        let caller_owner = pg_sys::CurrentResourceOwner;
        pg_sys::BeginInternalSubTransaction(core::ptr::null());
        pg_sys::MemoryContextSwitchTo(caller_context);
        IN_WAIT_SUBTRANSACTION.set(true);

        PgTryBuilder::new(|| {
            let nest_level = pg_sys::NewGUCNestLevel();
            set_lock_timeout(timeout.as_c_str());
            pg_sys::LockAcquire(&tag, lockmode(mode), session, false);
            // The lock can be granted just as lock_timeout fires: ProcSleep returns success and
            // leaves the timeout's cancel pending. Take it here, inside the protected block, so
            // it is handled below rather than escaping after we have reported success.
            pg_sys::check_for_interrupts!();
            // GUC_ACTION_SAVE values are always restored at the end of their nest level.
            pg_sys::AtEOXact_GUC(true, nest_level);
            // Commit the subtransaction: an xact-scoped lock moves to the caller's owner.
            pg_sys::ReleaseCurrentSubTransaction();
            IN_WAIT_SUBTRANSACTION.set(false);
            pg_sys::MemoryContextSwitchTo(caller_context);
            pg_sys::CurrentResourceOwner = caller_owner;
            true
        })
        .catch_others(|error| {
            // pgrx's FFI guard already copied and flushed the error state.
            pg_sys::MemoryContextSwitchTo(caller_context);
            // Aborting the subtransaction restores lock_timeout (AtEOXact_GUC of its nest
            // levels), leaves the wait queue (LockErrorCleanup) and releases what the
            // subtransaction's owner held.
            pg_sys::RollbackAndReleaseCurrentSubTransaction();
            IN_WAIT_SUBTRANSACTION.set(false);
            pg_sys::MemoryContextSwitchTo(caller_context);
            pg_sys::CurrentResourceOwner = caller_owner;
            match &error {
                CaughtError::PostgresError(report)
                    if report.sql_error_code() == PgSqlErrorCode::ERRCODE_LOCK_NOT_AVAILABLE =>
                {
                    // The grant can race the timeout: LockErrorCleanup then records the
                    // granted lock. A session lock survives the subtransaction abort, an
                    // xact lock does not; either way report what is true now.
                    held_by_me(key, mode)
                }
                _ => {
                    // Any other error (cancel, statement_timeout, deadlock) fails the call: a
                    // session lock granted during this wait must not outlive it. (It was not
                    // held before: the no-wait try failed.)
                    if session && held_by_me(key, mode) {
                        release_session(key, mode);
                    }
                    error.rethrow()
                }
            }
        })
        .execute()
    }
}

thread_local! {
    /// Set while `acquire_within`'s own subtransaction is open, so that its abort (a timeout it
    /// handles itself) is not mistaken for the failure of the statement around it.
    static IN_WAIT_SUBTRANSACTION: Cell<bool> = const { Cell::new(false) };
}

/// True while a subtransaction event belongs to `acquire_within`'s own wait.
pub fn in_wait_subtransaction() -> bool {
    IN_WAIT_SUBTRANSACTION.get()
}

/// `lock_timeout = timeout` at the current GUC nest level, as a function's SET clause does.
unsafe fn set_lock_timeout(value: &CStr) {
    // SAFETY: lock_timeout is a built-in USERSET GUC; GUC_ACTION_SAVE records the old value
    // for AtEOXact_GUC at the nest level opened by the caller.
    unsafe {
        pg_sys::set_config_option(
            c"lock_timeout".as_ptr(),
            value.as_ptr(),
            pg_sys::GucContext::PGC_USERSET,
            pg_sys::GucSource::PGC_S_SESSION,
            pg_sys::GucAction::GUC_ACTION_SAVE,
            true,
            0,
            false,
        );
    }
}

/// An advisory lock key as the built-ins encode it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AdvisoryKey {
    /// `pg_advisory_*(bigint)` and advlock (locktag field4 = 1).
    Int8(i64),
    /// `pg_advisory_*(int4, int4)` (locktag field4 = 2).
    Int4Pair(i32, i32),
}

/// One row of the lock table for an advisory lock: a held mode or an awaited one.
pub struct AdvisoryEntry {
    pub key: AdvisoryKey,
    pub mode: EntryMode,
    pub granted: bool,
    /// 0 for a prepared transaction.
    pub pid: i32,
    /// 0 when not waiting (or the wait start was not yet recorded).
    pub wait_start: pg_sys::TimestampTz,
}

/// The advisory locks of the current database, held and awaited, like `pg_lock_status()` but
/// filtered before any tuple is built: one entry per held mode plus one for an awaited mode.
///
/// `GetLockStatusData()` walks every bucket of the shared lock hash tables, which are sized for
/// `max_locks_per_transaction × max_connections` locks whether or not they are used (≈ 5 ms at
/// max_locks_per_transaction = 4096 on an almost empty table). Instead this walks, for each
/// backend of this database, its own list of held and awaited locks (`myProcLocks`, one per
/// lock partition): the cost follows the locks actually held by this database's backends.
/// Every partition lock is held (shared, in order, as GetLockStatusData takes them) while
/// reading, so the result is one consistent snapshot of the whole lock table.
/// `only`: when given, only the backends whose pid it accepts are read.
pub fn advisory_entries_in_my_database_of(
    only: Option<&dyn Fn(i32) -> bool>,
) -> Vec<AdvisoryEntry> {
    let mut entries = Vec::new();
    // SAFETY: ProcGlobal->allProcs is fixed for the life of shared memory. A backend's
    // myProcLocks[p] list, and the PROCLOCKs and LOCKs on it, may be read while holding the
    // lock of partition p (lock.c: "protected by the partition lock"); a waiter's waitProcLock
    // and waitLockMode likewise, for the partition of the lock it waits for. Every partition
    // lock is taken in ascending order (the lock manager's own order) and released before
    // returning; nothing in between can raise an ERROR.
    unsafe {
        let global = pg_sys::ProcGlobal;
        let procs = std::slice::from_raw_parts((*global).allProcs, (*global).allProcCount as usize);
        let my_db = pg_sys::Oid::from(crate::backend::database());
        let mine: Vec<*const pg_sys::PGPROC> = procs
            .iter()
            .filter(|p| p.databaseId == my_db && only.is_none_or(|f| f(p.pid)))
            .map(|p| p as *const pg_sys::PGPROC)
            .collect();
        for i in 0..pg_sys::NUM_LOCK_PARTITIONS {
            pg_sys::LWLockAcquire(partition_lock(i), pg_sys::LWLockMode::LW_SHARED);
        }
        for &proc in &mine {
            for partition in 0..pg_sys::NUM_LOCK_PARTITIONS {
                for_each_proclock(proc, partition, |proclock| {
                    push_advisory(&mut entries, proc, proclock, my_db)
                });
            }
        }
        for i in (0..pg_sys::NUM_LOCK_PARTITIONS).rev() {
            pg_sys::LWLockRelease(partition_lock(i));
        }
    }
    entries
}

/// The LWLock of lock-table partition `i` (lock.c's LockHashPartitionLockByIndex).
///
/// # Safety
/// `i < NUM_LOCK_PARTITIONS`; shared memory is attached (any backend running SQL).
unsafe fn partition_lock(i: u32) -> *mut pg_sys::LWLock {
    // SAFETY: MainLWLockArray is fixed for the life of shared memory and has
    // LOCK_MANAGER_LWLOCK_OFFSET + NUM_LOCK_PARTITIONS entries and more.
    unsafe {
        core::ptr::addr_of_mut!(
            (*pg_sys::MainLWLockArray.add((pg_sys::LOCK_MANAGER_LWLOCK_OFFSET + i) as usize)).lock
        )
    }
}

/// The first node of a lock-manager list head: the same two-pointer shape {prev, next} as a
/// SHM_QUEUE (before 16) and a dlist_head (16 and after); NULL for a never-used dlist.
///
/// # Safety
/// `head` points to such a list head, read under the lock that protects it.
unsafe fn list_first(head: *const u8) -> *const u8 {
    // SAFETY: see the function's contract.
    unsafe { (*(head as *const [*const u8; 2]))[1] }
}

/// Calls `f` with each PROCLOCK on `proc`'s list for lock partition `partition`: the locks it
/// holds or awaits there.
///
/// # Safety
/// The caller holds that partition's lock (which protects the list and its PROCLOCKs), and
/// `proc` is a PGPROC of ProcGlobal->allProcs.
unsafe fn for_each_proclock(
    proc: *const pg_sys::PGPROC,
    partition: u32,
    mut f: impl FnMut(*const pg_sys::PROCLOCK),
) {
    let link = core::mem::offset_of!(pg_sys::PROCLOCK, procLink);
    // SAFETY: see the function's contract.
    unsafe {
        let head = core::ptr::addr_of!((*proc).myProcLocks[partition as usize]) as *const u8;
        let mut node = list_first(head);
        while !node.is_null() && node != head {
            let proclock = node.sub(link) as *const pg_sys::PROCLOCK;
            node = list_first(node);
            f(proclock);
        }
    }
}

/// How full the shared lock table is: its entries (one per locked object, whatever its holders
/// and waiters; fast-path relation locks take none) by database, and how many of them are
/// advisory locks.
pub struct LockTableUsage {
    /// (database OID, 0 for locks of no database: transaction ids, shared catalogs) →
    /// (entries, advisory entries).
    pub by_database: std::collections::HashMap<u32, (i64, i64)>,
    /// What the table is sized for: max_locks_per_transaction × (MaxBackends +
    /// max_prepared_transactions), lock.c's NLOCKENTS(). More fit only while the spare shared
    /// memory lasts; then every lock request that needs a new entry fails with 53200.
    pub capacity: i64,
}

/// Counts the shared lock table's entries, one partition at a time (each under its own lock,
/// shared, as GetLockStatusData takes them), by walking every PGPROC's list of the locks it
/// holds or awaits in that partition. A lock is counted once, at the first PROCLOCK of its own
/// list. The cost follows the locks in use, not the table's size; partitions are read one
/// after another, so the totals are not one instant (a count, not a snapshot).
pub fn lock_table_usage() -> LockTableUsage {
    let mut by_database = std::collections::HashMap::new();
    // SAFETY: as in advisory_entries_in_my_database_of: ProcGlobal->allProcs is fixed for the
    // life of shared memory; a backend's myProcLocks[p] list, the PROCLOCKs on it, their LOCK and
    // that LOCK's procLocks list are protected by the lock of partition p (a LOCK and all its
    // PROCLOCKs hash to the same partition). Each partition lock is released before the next is
    // taken; nothing in between can raise an ERROR.
    unsafe {
        let global = pg_sys::ProcGlobal;
        let procs = std::slice::from_raw_parts((*global).allProcs, (*global).allProcCount as usize);
        for partition in 0..pg_sys::NUM_LOCK_PARTITIONS {
            pg_sys::LWLockAcquire(partition_lock(partition), pg_sys::LWLockMode::LW_SHARED);
            for proc in procs {
                for_each_proclock(proc, partition, |proclock| {
                    let lock = (*proclock).tag.myLock;
                    let first = list_first(core::ptr::addr_of!((*lock).procLocks) as *const u8);
                    if first != core::ptr::addr_of!((*proclock).lockLink) as *const u8 {
                        return;
                    }
                    let tag = &(*lock).tag;
                    let counts = by_database.entry(database_of(tag)).or_insert((0, 0));
                    counts.0 += 1;
                    if tag.locktag_type == pg_sys::LockTagType::LOCKTAG_ADVISORY as u8 {
                        counts.1 += 1;
                    }
                });
            }
            pg_sys::LWLockRelease(partition_lock(partition));
        }
    }
    // SAFETY: a setting fixed at server start (PGC_POSTMASTER), set in every backend.
    let per_backend = unsafe { pg_sys::max_locks_per_xact } as i64;
    // SAFETY: computed by the postmaster before any backend starts, never changed afterwards.
    let backends = unsafe { pg_sys::MaxBackends } as i64;
    LockTableUsage {
        by_database,
        capacity: per_backend * (backends + max_prepared_transactions()),
    }
}

/// The database a lock tag belongs to (lock.h's SET_LOCKTAG_* put it in field1), or 0.
fn database_of(tag: &pg_sys::LOCKTAG) -> u32 {
    use pg_sys::LockTagType::*;
    match tag.locktag_type as pg_sys::LockTagType::Type {
        LOCKTAG_TRANSACTION
        | LOCKTAG_VIRTUALTRANSACTION
        | LOCKTAG_SPECULATIVE_TOKEN
        | LOCKTAG_USERLOCK => 0,
        _ => tag.locktag_field1,
    }
}

/// max_prepared_transactions, which twophase.h declares but pgrx does not bind: read as the
/// setting's text, like SHOW.
fn max_prepared_transactions() -> i64 {
    // SAFETY: a built-in setting that always exists (missing_ok false cannot fail for it); the
    // returned string is the GUC's own, valid until the setting changes (never: PGC_POSTMASTER).
    unsafe {
        let value = pg_sys::GetConfigOption(c"max_prepared_transactions".as_ptr(), false, false);
        CStr::from_ptr(value)
            .to_str()
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    }
}

/// Every advisory lock of the current database (see `advisory_entries_in_my_database_of`).
pub fn advisory_entries_in_my_database() -> Vec<AdvisoryEntry> {
    advisory_entries_in_my_database_of(None)
}

/// The entries of one PROCLOCK if it is an advisory lock of `my_db`.
///
/// # Safety
/// The caller holds the partition lock of the PROCLOCK's lock; `proc` owns the PROCLOCK.
unsafe fn push_advisory(
    entries: &mut Vec<AdvisoryEntry>,
    proc: *const pg_sys::PGPROC,
    proclock: *const pg_sys::PROCLOCK,
    my_db: pg_sys::Oid,
) {
    // SAFETY: see the function's contract.
    unsafe {
        let tag = &(*(*proclock).tag.myLock).tag;
        if tag.locktag_type != pg_sys::LockTagType::LOCKTAG_ADVISORY as u8
            || tag.locktag_field1 != my_db.to_u32()
        {
            return;
        }
        let key = match tag.locktag_field4 {
            1 => AdvisoryKey::Int8(
                (((tag.locktag_field2 as u64) << 32) | tag.locktag_field3 as u64) as i64,
            ),
            _ => AdvisoryKey::Int4Pair(tag.locktag_field2 as i32, tag.locktag_field3 as i32),
        };
        let pid = (*proc).pid;
        let hold_mask = (*proclock).holdMask;
        for mode in 1..pg_sys::MAX_LOCKMODES as pg_sys::LOCKMODE {
            if hold_mask & (1 << mode) != 0 {
                entries.push(AdvisoryEntry {
                    key,
                    mode: EntryMode(mode),
                    granted: true,
                    pid,
                    wait_start: 0,
                });
            }
        }
        if core::ptr::eq((*proc).waitProcLock, proclock) {
            entries.push(AdvisoryEntry {
                key,
                mode: EntryMode((*proc).waitLockMode),
                granted: false,
                pid,
                // Written by the waiter without the partition lock; an atomic 64-bit read.
                wait_start: core::ptr::read_volatile(core::ptr::addr_of!((*proc).waitStart.value))
                    as i64,
            });
        }
    }
}

/// The mode of an advisory lock-table entry: one of advlock's two (`Mode`) for every lock taken
/// through advlock or `pg_advisory_*`, but the lock manager lets any code take any mode on an
/// advisory tag, so the snapshot keeps the lock manager's number.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct EntryMode(pg_sys::LOCKMODE);

impl EntryMode {
    pub fn of(mode: Mode) -> EntryMode {
        EntryMode(lockmode(mode))
    }

    /// Any lock-manager mode (the tests' other modes).
    #[cfg(any(test, feature = "pg_test"))]
    pub fn raw(mode: pg_sys::LOCKMODE) -> EntryMode {
        EntryMode(mode)
    }

    /// advlock's mode, when it is one of the two.
    pub fn advlock(self) -> Option<Mode> {
        [Mode::Exclusive, Mode::Shared]
            .into_iter()
            .find(|&m| lockmode(m) == self.0)
    }

    /// "exclusive", "shared", or the lock manager's own name for any other mode.
    pub fn name(self) -> &'static str {
        match self.advlock() {
            Some(mode) => mode.word(),
            // SAFETY: lock.c's lock_mode_names is a static array of static ASCII strings.
            None => unsafe {
                CStr::from_ptr(pg_sys::GetLockmodeName(
                    pg_sys::USER_LOCKMETHOD as u16,
                    self.0,
                ))
            }
            .to_str()
            .unwrap_or("unknown"),
        }
    }

    /// Whether a hold in one of the two modes blocks a request for the other (conflict is
    /// symmetric): the user lock method's own conflict table, which lock.c consults, so that
    /// every "who blocks this key" answer agrees with the lock manager.
    pub fn conflicts(self, other: EntryMode) -> bool {
        let tag = advisory_tag(0);
        // SAFETY: GetLockTagsMethodTable only reads the tag's lock method id (USER_LOCKMETHOD)
        // and returns lock.c's static LockMethod, whose conflictTab has numLockModes + 1
        // entries; both modes come from the lock table (or `lockmode`), so they are in range.
        unsafe {
            let method = pg_sys::GetLockTagsMethodTable(&tag);
            *(*method).conflictTab.add(self.0 as usize) & (1 << other.0) != 0
        }
    }
}

/// When the running client message began (`statement_timestamp()`). postgres.c stamps every
/// Query, Parse, Bind and Execute message before running it; nothing inside a message (a
/// procedure's COMMIT, a statement of a multi-statement Query) changes it.
pub fn message_start() -> pg_sys::TimestampTz {
    // SAFETY: reads a backend-local timestamp set by postgres.c.
    unsafe { pg_sys::GetCurrentStatementStartTimestamp() }
}

/// When the current transaction began (`transaction_timestamp()`): the first message of an
/// implicit transaction, so every Execute of one extended-protocol batch (up to its Sync) shares it.
pub fn transaction_start() -> pg_sys::TimestampTz {
    // SAFETY: reads a backend-local timestamp set by xact.c.
    unsafe { pg_sys::GetCurrentTransactionStartTimestamp() }
}

/// True when postgres.c is not running any message's SQL: between messages (the commit at an
/// extended-protocol Sync) or while it recovers from an error that reached the top level, whose
/// handler clears `error_context_stack` and `debug_query_string` before `AbortCurrentTransaction`.
/// Inside a message postgres.c has set `debug_query_string` to its text, and PL/pgSQL and SPI
/// keep an error context callback pushed, so a procedure's ROLLBACK or a caught error's
/// subtransaction abort is never taken for one.
pub fn outside_client_statement() -> bool {
    // SAFETY: reads two backend-local globals.
    unsafe { pg_sys::debug_query_string.is_null() && pg_sys::error_context_stack.is_null() }
}

/// True while the client's own ROLLBACK or ROLLBACK TO SAVEPOINT is carried out: xact.c has put
/// the block in an abort-pending state, which `TransactionBlockStatusCode` reports as 'E'. (An
/// error aborts a block that is still in progress: 'T'.)
pub fn explicit_rollback_in_progress() -> bool {
    // SAFETY: reads backend-local transaction state.
    unsafe { pg_sys::TransactionBlockStatusCode() as u8 == b'E' }
}

/// The top-level transaction's own subtransaction id (xact.c's TopSubTransactionId).
pub const TOP_SUBTRANSACTION: pg_sys::SubTransactionId = 1;

/// The current subtransaction (the top level is 1).
pub fn current_subtransaction() -> pg_sys::SubTransactionId {
    // SAFETY: reads backend-local transaction state; valid inside any transaction.
    unsafe { pg_sys::GetCurrentSubTransactionId() }
}

/// Registers transaction and subtransaction end callbacks for this backend (once per backend).
pub fn register_transaction_callbacks(
    xact: pg_sys::XactCallback,
    subxact: pg_sys::SubXactCallback,
) {
    // SAFETY: the registrations are palloc'd in TopMemoryContext and live as long as the
    // backend; called from inside a transaction, never from a callback.
    unsafe {
        pg_sys::RegisterXactCallback(xact, core::ptr::null_mut());
        pg_sys::RegisterSubXactCallback(subxact, core::ptr::null_mut());
    }
}
