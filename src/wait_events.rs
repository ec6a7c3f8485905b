//! The name advlock's own waits show in `pg_stat_activity.wait_event`.
//!
//! The one wait advlock does itself (rather than in the lock manager, whose waits show as
//! `Lock` / `advisory`) is a lease wait: `advlock_lease(…, timeout_ms)` and
//! `CALL advlock_wait_lease(…)` sleep on the backend's latch until granted or timed out. PostgreSQL
//! 17 lets an extension name such a wait (`WaitEventExtensionNew`): it shows as
//! `wait_event_type = 'Extension'`, `wait_event = 'AdvlockLeaseWait'`, and is listed by the
//! `pg_wait_events` view once a backend of the server has registered it. On 15 and 16 it shows as
//! `Extension` / `Extension`, the generic extension wait.

/// The name of a lease wait (shorter than NAMEDATALEN, as WaitEventExtensionNew requires).
#[cfg(any(feature = "pg17", feature = "pg18"))]
pub const LEASE_WAIT: &core::ffi::CStr = c"AdvlockLeaseWait";

/// The wait event of a lease wait, for WaitLatch.
#[cfg(any(feature = "pg17", feature = "pg18"))]
pub fn lease_wait() -> u32 {
    use std::sync::atomic::{AtomicU32, Ordering};
    // WaitEventExtensionNew finds the name in a shared hash table (adding it the first time any
    // backend asks, under WaitEventExtensionLock): the id it returns is the server's for the
    // name until shutdown, so each backend asks once and keeps it (0 is never an id: the class
    // bits of PG_WAIT_EXTENSION are set).
    static ID: AtomicU32 = AtomicU32::new(0);
    let cached = ID.load(Ordering::Relaxed);
    if cached != 0 {
        return cached;
    }
    // SAFETY: a NUL-terminated static name shorter than NAMEDATALEN; called in a backend, with
    // no spinlock held (it takes an LWLock) and before the wait starts. It raises an ERROR when
    // the server's 128 custom wait events are used up: the caller's error handling gives the
    // wait up, as for a cancel.
    let id = unsafe { pgrx::pg_sys::WaitEventExtensionNew(LEASE_WAIT.as_ptr()) };
    ID.store(id, Ordering::Relaxed);
    id
}

/// The wait event of a lease wait, for WaitLatch: PostgreSQL 15 and 16 have no custom names.
#[cfg(any(feature = "pg15", feature = "pg16"))]
pub fn lease_wait() -> u32 {
    pgrx::pg_sys::PG_WAIT_EXTENSION
}
