//! `advlock.idle_session_lock_timeout`: a session idle outside a transaction for longer than the
//! setting while it holds a session-level advisory lock is terminated (FATAL 57P05, like
//! PostgreSQL's own `idle_session_timeout`), which releases its locks.
//!
//! The mechanism runs inside each backend, reading its own value of the setting (so per
//! database, per role and per session values need nothing more), and costs one integer test per
//! transaction end while the setting is 0. PostgreSQL gives an extension no hook at the moment a
//! backend goes idle, nor a way into `ProcessInterrupts`, so:
//!
//! 1. At each top-level transaction end (commit, abort, prepare) a timeout (timeout.c,
//!    `RegisterTimeout`) is armed for the setting's value, unless it is armed already.
//! 2. When it fires, its handler (signal context: flags and a latch only) does what a sinval
//!    catch-up signal does (`HandleCatchupInterrupt`): it sets `catchupInterruptPending` and the
//!    latch. A backend idle in `ReadCommand` (DoingCommandRead, outside a transaction) answers
//!    that from `ProcessClientReadInterrupt` with `ProcessCatchupInterrupt`, which starts and
//!    commits an empty transaction; a busy backend just reads its sinval queue at its next
//!    `AcceptInvalidationMessages` (one extra `SICleanupQueue`).
//! 3. That transaction's pre-commit callback, seeing the timeout fired, checks in ordinary
//!    backend context: `pg_stat_activity`'s own state of this backend is `idle` (not in a
//!    transaction, not running), since `state_change` at least the setting, and this backend
//!    holds advisory locks (outside a transaction they can only be session-level). Then it
//!    raises FATAL naming the keys, which the client receives as PostgreSQL's idle timeouts
//!    send theirs; exit releases the locks. Idle for less (the timeout was armed at an earlier
//!    transaction end): re-armed for the rest. Holding nothing: not re-armed until the next
//!    transaction.
//!
//! Leases are not lock-manager locks and are never looked at. CONTRIBUTING.md ("Idle session
//! locks: why in the backend") has the measurements behind this choice.
use crate::backend;
use crate::errors::{counted, noun};
use crate::gucs::IDLE_SESSION_LOCK_TIMEOUT_MS;
use crate::lock_mode::Mode;
use crate::lockmgr::{self, AdvisoryKey};
use crate::preload::{labels, stats};
use core::ffi::{c_char, c_int, CStr};
use core::sync::atomic::{AtomicBool, Ordering};
use pgrx::pg_sys;
use pgrx::prelude::*;
use std::cell::Cell;
use std::collections::BTreeSet;

unsafe extern "C-unwind" {
    // utils/timeout.h (not in pgrx's bindings). TimeoutId is a C enum (an int).
    fn RegisterTimeout(id: c_int, handler: Option<unsafe extern "C" fn()>) -> c_int;
    fn enable_timeout_after(id: c_int, delay_ms: c_int);
    fn disable_timeout(id: c_int, keep_indicator: bool);
    fn get_timeout_active(id: c_int) -> bool;
    // utils/elog.h: pgrx keeps these to itself; FATAL with an SQLSTATE it has no variant for.
    fn errstart(elevel: c_int, domain: *const c_char) -> bool;
    fn errcode(sqlerrcode: c_int) -> c_int;
    fn errmsg(fmt: *const c_char, ...) -> c_int;
    fn errdetail(fmt: *const c_char, ...) -> c_int;
    fn errhint(fmt: *const c_char, ...) -> c_int;
    fn errfinish(filename: *const c_char, lineno: c_int, funcname: *const c_char);
}

/// timeout.c's USER_TIMEOUT: RegisterTimeout takes any id from it on as "the next free one".
#[cfg(any(feature = "pg15", feature = "pg16"))]
const USER_TIMEOUT: c_int = 12;
/// 17 added TRANSACTION_TIMEOUT before it.
#[cfg(not(any(feature = "pg15", feature = "pg16")))]
const USER_TIMEOUT: c_int = 13;

/// 57P05, ERRCODE_IDLE_SESSION_TIMEOUT (PostgreSQL 14+), which pgrx's enum lacks.
const IDLE_SESSION_TIMEOUT_SQLSTATE: c_int = {
    const fn six(c: u8) -> c_int {
        ((c - b'0') & 0x3f) as c_int
    }
    six(b'5') | (six(b'7') << 6) | (six(b'P') << 12) | (six(b'0') << 18) | (six(b'5') << 24)
};

/// At most this many keys are named in the message; the rest are counted.
const KEYS_NAMED: usize = 20;

/// Set by the timeout handler (signal context), taken by the next pre-commit callback.
static FIRED: AtomicBool = AtomicBool::new(false);

thread_local! {
    /// The timeout's id once registered in this backend (timeouts are per process and are reset
    /// by InitializeTimeouts after fork, so registering in a preloading postmaster would not do).
    static TIMEOUT_ID: Cell<Option<c_int>> = const { Cell::new(None) };
    /// The pre-commit check of this transaction decided the timeout stays as it left it.
    static KEEP_TIMER: Cell<bool> = const { Cell::new(false) };
}

/// From `_PG_init`: the transaction callback that arms and checks. Costs one integer test per
/// transaction end while the setting is 0.
pub fn init() {
    // SAFETY: the registration is palloc'd in TopMemoryContext (inherited across fork when
    // preloaded) and lives as long as the process.
    unsafe { pg_sys::RegisterXactCallback(Some(on_xact_event), core::ptr::null_mut()) };
}

/// The timeout's handler, in signal context: only flags and the latch, as
/// `HandleCatchupInterrupt` (sinval.c) does for a catch-up signal.
unsafe extern "C" fn on_timeout() {
    FIRED.store(true, Ordering::Relaxed);
    // SAFETY: catchupInterruptPending is a sig_atomic_t PostgreSQL itself sets from a signal
    // handler; SetLatch is async-signal-safe; MyLatch is set for the life of the backend.
    unsafe {
        pg_sys::catchupInterruptPending = 1;
        pg_sys::SetLatch(pg_sys::MyLatch);
    }
}

/// A client backend under the postmaster, not exiting: the only processes the setting governs.
fn applies_here() -> bool {
    // SAFETY: backend-local globals set at process start.
    unsafe {
        pg_sys::MyBackendType == pg_sys::BackendType::B_BACKEND
            && pg_sys::IsUnderPostmaster
            && !pg_sys::proc_exit_inprogress
    }
}

fn timeout_id() -> c_int {
    TIMEOUT_ID.get().unwrap_or_else(|| {
        // SAFETY: timeouts are initialised in every backend before its first transaction.
        let id = unsafe { RegisterTimeout(USER_TIMEOUT, Some(on_timeout)) };
        TIMEOUT_ID.set(Some(id));
        id
    })
}

fn arm_after(ms: i32) {
    // SAFETY: a registered timeout id; outside signal context.
    unsafe { enable_timeout_after(timeout_id(), ms.max(1)) };
}

/// At a transaction end: arm the timeout unless it is armed (or the setting is 0).
fn arm() {
    let ms = IDLE_SESSION_LOCK_TIMEOUT_MS.get();
    if ms <= 0 {
        if let Some(id) = TIMEOUT_ID.get() {
            // SAFETY: a registered timeout id.
            unsafe {
                if get_timeout_active(id) {
                    disable_timeout(id, false);
                }
            }
        }
        return;
    }
    if !applies_here() {
        return;
    }
    // SAFETY: a registered timeout id.
    if !unsafe { get_timeout_active(timeout_id()) } {
        arm_after(ms);
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn on_xact_event(
    event: pg_sys::XactEvent::Type,
    _arg: *mut core::ffi::c_void,
) {
    use pg_sys::XactEvent::*;
    if event == XACT_EVENT_PRE_COMMIT {
        // Taken whatever happens next: a fired timeout is looked at once.
        if FIRED.swap(false, Ordering::Relaxed) && applies_here() {
            KEEP_TIMER.set(check());
        }
    } else if matches!(
        event,
        XACT_EVENT_COMMIT | XACT_EVENT_ABORT | XACT_EVENT_PREPARE
    ) && !KEEP_TIMER.replace(false)
    {
        arm();
    }
}

/// This backend as pg_stat_activity shows it: idle outside a transaction, since when.
fn idle_since() -> Option<pg_sys::TimestampTz> {
    // SAFETY: MyBEEntry is this backend's own status entry, written only by this backend.
    unsafe {
        let me = pg_sys::MyBEEntry;
        (!me.is_null() && (*me).st_state == pg_sys::BackendState::STATE_IDLE)
            .then(|| (*me).st_state_start_timestamp)
    }
}

/// The timeout fired and this transaction is about to commit. True when the timer is to be
/// left as this leaves it (re-armed for the rest, or off while nothing is held).
fn check() -> bool {
    let timeout_ms = IDLE_SESSION_LOCK_TIMEOUT_MS.get();
    if timeout_ms <= 0 {
        return false;
    }
    // Running a statement (the timeout fired while busy): armed again at this transaction's end.
    let Some(since) = idle_since() else {
        return false;
    };
    let idle_us = backend::now().saturating_sub(since);
    let timeout_us = backend::ms_to_us(timeout_ms);
    if idle_us < timeout_us {
        arm_after(((timeout_us - idle_us + 999) / 1000) as i32);
        return true;
    }
    let me = backend::pid();
    let held: Vec<_> = lockmgr::advisory_entries_in_my_database_of(Some(&|pid| pid == me))
        .into_iter()
        .filter(|e| e.granted && e.pid == me)
        .collect();
    if held.is_empty() {
        // Idle holding nothing: the next transaction (which any new lock needs) arms it again.
        return true;
    }
    terminate(&held, idle_us, timeout_ms)
}

/// Raises FATAL 57P05 naming the keys; counts the termination under each namespace held.
fn terminate(held: &[lockmgr::AdvisoryEntry], idle_us: i64, timeout_ms: i32) -> ! {
    let me = backend::pid();
    let mut recorded = labels::recorded_locks();
    // The namespace of each labelled hold of this backend (empty: a bare key's token entry).
    let ns_of: std::collections::HashMap<(i64, bool), Vec<u8>> = labels::recorded_holds()
        .into_iter()
        .flatten()
        .filter(|h| h.pid == me && !h.ns.is_empty())
        .map(|h| ((h.key, h.shared), h.ns))
        .collect();
    let mut names = Vec::with_capacity(held.len());
    let mut namespaces: BTreeSet<Option<Vec<u8>>> = BTreeSet::new();
    for e in held {
        let shared = e.mode.advlock() == Some(Mode::Shared);
        let (name, ns) = match e.key {
            AdvisoryKey::Int8(key) => {
                let label = recorded
                    .as_mut()
                    .and_then(|r| r.get(me, key, shared))
                    .and_then(|r| r.label);
                let ns = ns_of.get(&(key, shared)).cloned();
                match label {
                    Some(label) => (server_bytes_text(label), ns),
                    None => (key.to_string(), ns),
                }
            }
            AdvisoryKey::Int4Pair(a, b) => (format!("({a},{b})"), None),
        };
        namespaces.insert(ns);
        names.push(if shared {
            format!("{name} (shared)")
        } else {
            name
        });
    }
    names.sort();
    let more = names.len().saturating_sub(KEYS_NAMED);
    names.truncate(KEYS_NAMED);
    let mut keys = names.join(", ");
    if more > 0 {
        keys.push_str(&format!(" and {more} more"));
    }
    for ns in &namespaces {
        stats::count_idle_termination(ns.as_deref());
    }
    // SAFETY: application_name is the GUC's current value (never NULL after startup).
    let application_name = unsafe {
        let p = pg_sys::application_name;
        if p.is_null() {
            String::new()
        } else {
            crate::server_text::catalog_name(CStr::from_ptr(p))
        }
    };
    let idle = format!("{:.3} s", idle_us as f64 / 1e6);
    let message = format!(
        "terminating connection due to advlock.idle_session_lock_timeout: pid {me} (application_name \"{application_name}\") idle for {idle} holding session advisory {} {keys}",
        noun(held.len(), "lock", "locks")
    );
    let detail = format!(
        "{} held while idle outside a transaction for {idle}; advlock.idle_session_lock_timeout is {timeout_ms} ms. Exiting releases them.",
        counted(held.len(), "session-level advisory lock", "session-level advisory locks")
    );
    let hint = "Release session locks before a connection goes idle or back to a pool. A connection that holds a lock on purpose (a leader, a migration runner) opts out with SET advlock.idle_session_lock_timeout = 0, or uses a lease.";
    fatal(&message, &detail, hint)
}

/// Server-encoding bytes (a label) as UTF-8 text.
fn server_bytes_text(mut bytes: Vec<u8>) -> String {
    bytes.retain(|&b| b != 0);
    let c = std::ffi::CString::new(bytes).expect("NUL removed");
    crate::server_text::catalog_name(&c)
}

/// ereport(FATAL, errcode(57P05), ...): never returns (proc_exit).
fn fatal(message: &str, detail: &str, hint: &str) -> ! {
    let c = |s: &str| {
        std::ffi::CString::new(crate::errors::for_server(s.replace('\0', ""))).expect("NUL removed")
    };
    let (message, detail, hint) = (c(message), c(detail), c(hint));
    // SAFETY: the elog.h sequence pgrx itself uses (do_ereport); "%s" formats; the CStrings
    // outlive errfinish, which for FATAL exits the process and does not return.
    unsafe {
        if errstart(pg_sys::FATAL as c_int, c"advlock".as_ptr()) {
            errcode(IDLE_SESSION_TIMEOUT_SQLSTATE);
            errmsg(c"%s".as_ptr(), message.as_ptr());
            errdetail(c"%s".as_ptr(), detail.as_ptr());
            errhint(c"%s".as_ptr(), hint.as_ptr());
            errfinish(
                c"idle_lock_timeout.rs".as_ptr(),
                line!() as c_int,
                c"terminate".as_ptr(),
            );
        }
    }
    unreachable!("ereport(FATAL) returned")
}
