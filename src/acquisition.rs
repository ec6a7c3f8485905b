//! Bounded server-side acquisition: `advlock_try_with_timeout`, `advlock_lock_with_timeout`,
//! and `advlock_unlock`, each with `(key)`, `(ns, id text)` and `(ns, id bigint)` forms.
use crate::diagnostics::describe_holders;
use crate::errors::Report;
use crate::gucs;
use crate::lock_request::{key_forms, Mode, Request, Scope, Target};
use crate::lockmgr;
use crate::lockmgr::Taken;
use crate::preload::labels;
use crate::preload::stats::{self, Outcome};
use crate::provisional;
use crate::server_text::ServerText;
use pgrx::pg_sys::errcodes::PgSqlErrorCode;
use pgrx::prelude::*;
use std::time::{Duration, Instant};

const TRY: &str = "advlock_try_with_timeout";
const LOCK: &str = "advlock_lock_with_timeout";
const UNLOCK: &str = "advlock_unlock";

/// The checks every acquisition makes before touching the lock manager.
pub(crate) fn preflight(function: &str, scope: Scope) {
    lockmgr::prevent_in_parallel_mode();
    if lockmgr::in_recovery() && !gucs::ALLOW_ON_STANDBY.get() {
        Report::new(
            PgSqlErrorCode::ERRCODE_READ_ONLY_SQL_TRANSACTION,
            format!("{function} cannot run on a hot standby"),
        )
        .detail("Advisory locks taken on a standby coordinate only sessions on that standby, not with the primary.")
        .hint("Take the lock on the primary, or SET advlock.allow_on_standby = on if standby-local locking is what you want.")
        .raise();
    }
    if scope == Scope::Xact && !lockmgr::in_transaction_block() {
        Report::new(
            PgSqlErrorCode::ERRCODE_WARNING,
            format!("{function} with scope 'xact' outside a transaction block: the lock is released when this statement ends"),
        )
        .hint("Call it between BEGIN and COMMIT, or use scope => 'session' and advlock_unlock().")
        .warn();
    }
}

/// The whole acquisition: checks, a no-wait try, then (only if busy) a bounded wait.
/// The uncontended path opens no subtransaction. When preloaded, the outcome is counted per
/// namespace (`stats`) and an `(ns, id)` lock gets a label (`labels`); neither waits or fails.
pub(crate) fn acquire(
    function: &str,
    target: &Target,
    timeout_ms: i32,
    scope: Scope,
    mode: Mode,
) -> bool {
    preflight(function, scope);
    let acquired = take_one(target, scope, mode, timeout_ms).is_some();
    if acquired {
        took(target, scope, mode);
    }
    acquired
}

/// The one acquisition algorithm, for a single key and for each key of a set: a no-wait try,
/// then (only if busy and `wait_ms` > 0) a wait in the lock manager's queue, each outcome
/// counted per namespace when preloaded. None when the lock was not obtained.
pub(crate) fn take_one(target: &Target, scope: Scope, mode: Mode, wait_ms: i32) -> Option<Taken> {
    if lockmgr::try_acquire(target.key, mode, scope) {
        stats::count(target, Outcome::Immediate);
        return Some(Taken::AtOnce);
    }
    if wait_ms == 0 {
        stats::count(target, Outcome::Busy);
        return None;
    }
    // Counted however the wait ends, an error (deadlock, cancel) included.
    let wait = stats::Wait::start(target);
    let acquired = lockmgr::acquire_within(target.key, mode, scope, wait_ms);
    wait.end(acquired);
    acquired.then_some(Taken::AfterWait)
}

/// 55P03, the one error of a bounded wait that ran out: what was asked (`asked`, after "could
/// not obtain <mode> "), how long it waited, what was busy (`busy`, appended when the call asked
/// for several keys), and in the DETAIL who holds the busy key, then `also`.
pub(crate) fn lock_not_available(
    mode: Mode,
    asked: &str,
    busy: Option<&Target>,
    busy_key: i64,
    timeout_ms: i32,
    waited: Duration,
    also: &str,
) -> ! {
    let busy = busy.map_or(String::new(), |t| format!(": {} is busy", t.describe()));
    Report::new(
        PgSqlErrorCode::ERRCODE_LOCK_NOT_AVAILABLE,
        format!(
            "could not obtain {} {asked} within {timeout_ms} ms (waited {} ms){busy}",
            mode.word(),
            waited.as_millis()
        ),
    )
    .detail(format!("{}{also}", describe_holders(busy_key, mode)))
    .hint("Retry later or with a larger timeout_ms; SELECT * FROM advlock_holders shows who holds which lock.")
    .raise()
}

/// Bookkeeping of one granted hold: its label, and (session scope) its release should the
/// statement fail (`provisional`).
pub(crate) fn took(target: &Target, scope: Scope, mode: Mode) {
    labels::acquired(target, scope, mode);
    if scope == Scope::Session {
        provisional::taken(target.key, mode);
    }
}

fn try_with_timeout(
    target: Target,
    timeout_ms: Option<i32>,
    scope: Option<ServerText>,
    mode: Option<ServerText>,
) -> bool {
    let r = Request::parse(TRY, timeout_ms, scope, mode);
    acquire(TRY, &target, r.timeout_ms, r.scope, r.mode)
}

fn lock_with_timeout(
    target: Target,
    timeout_ms: Option<i32>,
    scope: Option<ServerText>,
    mode: Option<ServerText>,
) {
    let Request {
        timeout_ms,
        scope,
        mode,
    } = Request::parse(LOCK, timeout_ms, scope, mode);
    let started = Instant::now();
    if !acquire(LOCK, &target, timeout_ms, scope, mode) {
        let asked = format!("advisory lock on {}", target.describe());
        lock_not_available(
            mode,
            &asked,
            None,
            target.key,
            timeout_ms,
            started.elapsed(),
            "",
        );
    }
}

fn unlock(target: Target, mode: Option<ServerText>) -> bool {
    let mode = Mode::parse(mode, UNLOCK);
    release_session(&target, mode)
}

/// Releases one session hold of `target` in `mode` (advlock_unlock, and each key of
/// advlock_unlock_all). When this session holds no such session lock: false, and a WARNING
/// naming the key and saying what this session holds of it instead.
pub fn release_session(target: &Target, mode: Mode) -> bool {
    if lockmgr::release_session(target.key, mode) {
        labels::released_session(target.key, mode);
        provisional::released(target.key, mode);
        return true;
    }
    let other = mode.other();
    let (detail, hint) = if lockmgr::held_by_me(target.key, mode) {
        (
            "This session holds it in transaction scope (scope => 'xact', the default), which only the end of the transaction releases.".to_string(),
            "COMMIT or ROLLBACK releases it; to release a lock early, take it with scope => 'session'.".to_string(),
        )
    } else if lockmgr::held_by_me(target.key, other) {
        (
            format!("This session holds that key in {} mode.", other.word()),
            format!("Pass mode => '{}' to release that lock.", other.word()),
        )
    } else {
        (
            "This session holds no lock on that key: it never took it, or already released it."
                .to_string(),
            "advlock_holders shows who holds the key.".to_string(),
        )
    };
    Report::new(
        PgSqlErrorCode::ERRCODE_WARNING,
        format!(
            "this session holds no {} session lock on {}",
            mode.word(),
            target.describe()
        ),
    )
    .detail(detail)
    .hint(hint)
    .warn();
    false
}

key_forms! {
    #[pg_extern(name = "advlock_try_with_timeout")]
    fn [try_with_timeout_key, try_with_timeout_text, try_with_timeout_int](
        timeout_ms: Option<i32>,
        scope: default!(Option<ServerText>, "'xact'"),
        mode: default!(Option<ServerText>, "'exclusive'"),
    ) -> [bool]
    for TRY, |target| try_with_timeout(target, timeout_ms, scope, mode)
}

key_forms! {
    #[pg_extern(name = "advlock_lock_with_timeout")]
    fn [lock_with_timeout_key, lock_with_timeout_text, lock_with_timeout_int](
        timeout_ms: Option<i32>,
        scope: default!(Option<ServerText>, "'xact'"),
        mode: default!(Option<ServerText>, "'exclusive'"),
    )
    for LOCK, |target| lock_with_timeout(target, timeout_ms, scope, mode)
}

key_forms! {
    #[pg_extern(name = "advlock_unlock")]
    fn [unlock_key, unlock_text, unlock_int](
        mode: default!(Option<ServerText>, "'exclusive'"),
    ) -> [bool]
    for UNLOCK, |target| unlock(target, mode)
}
