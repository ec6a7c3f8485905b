//! The shared-memory mechanism under the preloaded features. It exists only when advlock is
//! loaded through `shared_preload_libraries`, as for pg_stat_statements: `_PG_init` then
//! installs `shmem_request_hook` (reserve each segment's space and one LWLock) and
//! `shmem_startup_hook` (create or attach each segment). This module knows the segments only
//! by their `Segment` description; it calls no feature by name.
//!
//! Not pgrx's `pg_shmem_init!`: it reserves statics whose size is fixed at compile time
//! (`PgLwLock<T>` of heapless collections), while advlock's tables are sized by settings read
//! when shared memory is requested (`advlock.max_labels`, `advlock.max_namespaces`,
//! `advlock.max_leases`), and its features share one LWLock tranche (`TRANCHE`). So the hooks
//! are installed by hand, as pg_stat_statements does.
use crate::errors::Report;
use pgrx::pg_sys;
use pgrx::pg_sys::errcodes::PgSqlErrorCode;
use pgrx::prelude::*;

/// Name of the LWLock tranche: lock 0 guards the namespace table's layout (stats), lock 1 the
/// lease table (leases).
pub const TRANCHE: &core::ffi::CStr = c"advlock";
const TRANCHE_LOCKS: i32 = 2;
pub const STATS_LOCK: usize = 0;
pub const LEASES_LOCK: usize = 1;

/// One of the tranche's LWLocks.
pub fn lwlock(index: usize) -> *mut pg_sys::LWLock {
    debug_assert!(index < TRANCHE_LOCKS as usize);
    // SAFETY: the tranche was requested with TRANCHE_LOCKS locks in shmem_request (this is only
    // called where the preloaded segments exist); GetNamedLWLockTranche returns its array.
    unsafe { &raw mut (*pg_sys::GetNamedLWLockTranche(TRANCHE.as_ptr()).add(index)).lock }
}

static mut PREV_SHMEM_REQUEST_HOOK: pg_sys::shmem_request_hook_type = None;
static mut PREV_SHMEM_STARTUP_HOOK: pg_sys::shmem_startup_hook_type = None;
/// The segments handed to `install_hooks` (set once, in the postmaster, before any child exists).
static mut SEGMENTS: &[Segment] = &[];

/// One feature's piece of shared memory.
pub struct Segment {
    /// Bytes to reserve (read in the shmem_request hook, after the settings are loaded).
    pub size: fn() -> usize,
    /// Create or attach the structure. Called only from the shmem_startup hook, under
    /// AddinShmemInitLock.
    pub attach: unsafe fn(),
}

/// True while `_PG_init` runs as part of `shared_preload_libraries`.
pub fn preloading() -> bool {
    // SAFETY: a plain global set by the postmaster (or a backend) around library preloading.
    unsafe { pg_sys::process_shared_preload_libraries_in_progress }
}

/// Called from `_PG_init` when preloading: chain our hooks in front of the previous ones.
pub fn install_hooks(segments: &'static [Segment]) {
    // SAFETY: _PG_init runs single-threaded in the postmaster before any child exists; the
    // previous hook values are saved and called first, as every extension does.
    unsafe {
        SEGMENTS = segments;
        PREV_SHMEM_REQUEST_HOOK = pg_sys::shmem_request_hook;
        pg_sys::shmem_request_hook = Some(shmem_request);
        PREV_SHMEM_STARTUP_HOOK = pg_sys::shmem_startup_hook;
        pg_sys::shmem_startup_hook = Some(shmem_startup);
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn shmem_request() {
    // SAFETY: called by the postmaster from process_shmem_requests(), the only time
    // RequestAddinShmemSpace / RequestNamedLWLockTranche are allowed.
    unsafe {
        if let Some(prev) = PREV_SHMEM_REQUEST_HOOK {
            prev();
        }
        for segment in SEGMENTS {
            pg_sys::RequestAddinShmemSpace((segment.size)());
        }
        pg_sys::RequestNamedLWLockTranche(TRANCHE.as_ptr(), TRANCHE_LOCKS);
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn shmem_startup() {
    // SAFETY: called once per shared memory (re)initialisation in the postmaster (and in every
    // backend under EXEC_BACKEND). AddinShmemInitLock (MainLWLockArray[21]) serialises
    // ShmemInitStruct's "found" decision exactly as in pg_stat_statements and pgrx.
    unsafe {
        if let Some(prev) = PREV_SHMEM_STARTUP_HOOK {
            prev();
        }
        let addin_shmem_init_lock = &raw mut (*pg_sys::MainLWLockArray.add(21)).lock;
        pg_sys::LWLockAcquire(addin_shmem_init_lock, pg_sys::LWLockMode::LW_EXCLUSIVE);
        for segment in SEGMENTS {
            (segment.attach)();
        }
        pg_sys::LWLockRelease(addin_shmem_init_lock);
    }
}

/// `ShmemInitStruct(name, size)`: the address and whether it already existed.
///
/// # Safety
/// Only from `shmem_startup`, under AddinShmemInitLock, for a size requested in `shmem_request`.
pub unsafe fn init_struct(name: &core::ffi::CStr, size: usize) -> (*mut u8, bool) {
    let mut found = false;
    // SAFETY: see the function contract; ShmemInitStruct raises ERROR if space ran out.
    let ptr = unsafe { pg_sys::ShmemInitStruct(name.as_ptr(), size, &mut found) };
    (ptr.cast(), found)
}

/// The statistics functions' error without preload, worded like pg_stat_statements'.
#[track_caller]
pub fn require_preload(function: &str) -> ! {
    Report::new(
        PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
        "advlock must be loaded via \"shared_preload_libraries\"",
    )
    .detail(format!("{function} needs advlock's shared memory, which exists only when the library is preloaded."))
    .hint("Add advlock to shared_preload_libraries in postgresql.conf and restart the server.")
    .raise()
}
