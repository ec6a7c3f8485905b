//! Facts about this backend and its peers that several modules need: its database, pid and
//! proc number, the clock, whether another backend is still alive, whether a database exists.
//! Small safe functions over PostgreSQL's backend-local globals and the PGPROC array, so that
//! other modules need no `unsafe` block to read these facts, and the latch waits of the lease
//! and election waits (`reset_latch`, `sleep_on_latch`). Two uses stay where they are: the
//! idle-lock timeout's signal handler (`idle_lock_timeout.rs`) sets `MyLatch`, and the
//! lock-table walk (`lockmgr.rs`) reads `ProcGlobal` under the partition locks it holds.
use pgrx::pg_sys;
use pgrx::prelude::*;

/// The current database's OID (MyDatabaseId).
pub fn database() -> u32 {
    // SAFETY: MyDatabaseId is set once at backend start, before any SQL function runs.
    unsafe { pg_sys::MyDatabaseId }.to_u32()
}

/// This backend's pid (MyProcPid).
pub fn pid() -> i32 {
    // SAFETY: a backend-local global set at backend start.
    unsafe { pg_sys::MyProcPid }
}

/// This backend's index into `ProcGlobal->allProcs` (what `backend_alive` takes).
pub fn proc_number() -> i32 {
    // PostgreSQL 17 renamed the index to MyProcNumber (and dropped PGPROC.pgprocno); before,
    // MyBackendId is a different, 1-based sinval index, so read pgprocno from MyProc.
    #[cfg(any(feature = "pg15", feature = "pg16"))]
    // SAFETY: MyProc is set at backend start, before any SQL runs, and never changes after.
    let number = unsafe { (*pg_sys::MyProc).pgprocno };
    #[cfg(not(any(feature = "pg15", feature = "pg16")))]
    // SAFETY: a backend-local global set at backend start.
    let number = unsafe { pg_sys::MyProcNumber };
    number
}

/// Cheap liveness check of another backend: its PGPROC (by proc number) still carries `pid`.
/// Used to skip and reclaim entries a vanished backend could not remove (defensive: exit
/// callbacks remove them, and a crash reinitialises shared memory).
pub fn backend_alive(procno: i32, pid: i32) -> bool {
    let Some(proc_) = proc_at(procno) else {
        return false;
    };
    // SAFETY: a PGPROC's pid is an int written only by its owner and the proc-array code,
    // read here as a snapshot.
    unsafe { core::ptr::read_volatile(&raw const (*proc_).pid) == pid }
}

/// The PGPROC at `procno` in `ProcGlobal->allProcs`, when that index exists.
pub fn proc_at(procno: i32) -> Option<*mut pg_sys::PGPROC> {
    // SAFETY: ProcGlobal and allProcs are fixed for the life of shared memory; the index is
    // checked against allProcCount before it is used.
    unsafe {
        let global = pg_sys::ProcGlobal;
        if global.is_null() || procno < 0 || procno as u32 >= (*global).allProcCount {
            return None;
        }
        Some((*global).allProcs.add(procno as usize))
    }
}

/// Whether a database with this OID exists (pg_database, through the syscache). Used to free
/// statistics entries of dropped databases; needs a transaction (catalog access).
pub fn database_exists(oid: u32) -> bool {
    // SAFETY: a syscache probe by OID, from inside a transaction; takes no lock of ours.
    unsafe {
        pg_sys::SearchSysCacheExists(
            pg_sys::SysCacheIdentifier::DATABASEOID as i32,
            pg_sys::Datum::from(oid),
            pg_sys::Datum::from(0),
            pg_sys::Datum::from(0),
            pg_sys::Datum::from(0),
        )
    }
}

/// The name of a database by OID (the catalog cache, as current_database() reads it), in the
/// server encoding, or None when there is none (dropped). Needs a transaction.
pub fn database_name(oid: u32) -> Option<Vec<u8>> {
    // SAFETY: a syscache lookup by OID from inside a transaction; the result is a palloc'd
    // C string (or NULL), copied before it is freed.
    unsafe {
        let name = pg_sys::get_database_name(pg_sys::Oid::from(oid));
        if name.is_null() {
            return None;
        }
        let owned = core::ffi::CStr::from_ptr(name).to_bytes().to_vec();
        pg_sys::pfree(name.cast());
        Some(owned)
    }
}

/// Resets this backend's latch: call before looking at what a wait waits for, so a change made
/// after the look sets the latch and the next `sleep_on_latch` returns at once (no lost wake-up).
pub fn reset_latch() {
    // SAFETY: MyLatch is this backend's own latch; reset before checking, as WaitLatch wants.
    unsafe { pg_sys::ResetLatch(pg_sys::MyLatch) };
}

/// Sleeps on this backend's latch until it is set or `until` (a `TimestampTz`, rounded up to
/// whole milliseconds, at least one) is reached, showing `wait_event` in pg_stat_activity, then
/// handles interrupts (cancel, terminate, statement_timeout raise from here, through the
/// caller's catch).
pub fn sleep_on_latch(until: pg_sys::TimestampTz, now: pg_sys::TimestampTz, wait_event: u32) {
    let ms = (until - now + 999) / 1000;
    // SAFETY: waits on this backend's latch; WL_EXIT_ON_PM_DEATH ends the process if the
    // postmaster dies.
    unsafe {
        pg_sys::WaitLatch(
            pg_sys::MyLatch,
            (pg_sys::WL_LATCH_SET | pg_sys::WL_TIMEOUT | pg_sys::WL_EXIT_ON_PM_DEATH) as i32,
            ms.clamp(1, i64::from(i32::MAX)) as _,
            wait_event,
        );
    }
    pg_sys::check_for_interrupts!();
}

/// `GetCurrentTimestamp()`.
pub fn now() -> pg_sys::TimestampTz {
    // SAFETY: reads the clock; no side effects.
    unsafe { pg_sys::GetCurrentTimestamp() }
}

/// `ms` milliseconds in `TimestampTz` units (microseconds): how a TTL, timeout or threshold
/// given in milliseconds is added to or compared with `now()`.
pub fn ms_to_us(ms: i32) -> i64 {
    i64::from(ms) * 1000
}

/// A `TimestampTz` as the SQL type.
pub fn timestamptz(value: pg_sys::TimestampTz) -> Option<TimestampWithTimeZone> {
    TimestampWithTimeZone::try_from(value).ok()
}
