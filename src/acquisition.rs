//! Bounded server-side acquisition, one routine for one key and for a set of keys:
//! `advlock_try_with_timeout`, `advlock_lock_with_timeout` and `advlock_unlock`, each with
//! `(key)`, `(ns, id text)` and `(ns, id bigint)` forms, call it with one key; the key-set
//! functions (`key_set`) with their sorted, distinct keys; `advlock_try_with_token` and
//! `CALL advlock_wait_lock` with one key too.
use crate::diagnostics::describe_holders;
use crate::errors::Report;
use crate::gucs;
use crate::lock_request::{key_forms, Mode, Request, Scope, Target};
use crate::lockmgr::{self, Taken};
use crate::preload::labels;
use crate::preload::stats::{self, Outcome};
use crate::provisional;
use crate::server_text::ServerText;
use pgrx::pg_sys::errcodes::PgSqlErrorCode;
use pgrx::pg_sys::panic::CaughtError;
use pgrx::prelude::*;
use pgrx::PgTryBuilder;
use std::cell::Cell;
use std::panic::AssertUnwindSafe;
use std::slice;
use std::time::{Duration, Instant};

const TRY: &str = "advlock_try_with_timeout";
const LOCK: &str = "advlock_lock_with_timeout";
const UNLOCK: &str = "advlock_unlock";

/// The checks every acquisition makes before touching the lock manager.
fn preflight(function: &str, scope: Scope) {
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

/// Which key of the call stayed busy, and after how long.
pub(crate) struct Busy {
    index: usize,
    waited: Duration,
}

/// Why the loop over the keys stopped short.
enum Stop {
    Busy(Busy),
    /// The lock manager found no free entry (53200).
    NoRoom,
}

/// The whole acquisition: checks, then each target (sorted and distinct when there are several)
/// within one deadline — all of them, or none.
///
/// Each key: a no-wait try, then (only if busy and time is left) a wait in the lock manager's
/// queue; the uncontended path opens no subtransaction. When preloaded, each outcome is counted
/// per namespace (`stats`) and, once every key is held, each `(ns, id)` hold gets a label
/// (`labels`); neither waits or fails.
///
/// Holds taken so far are given back in reverse order when a key stays busy; holds the session
/// had before the call are untouched (the lock manager counts holds, and exactly the ones this
/// call added are released). Should an ERROR end the call instead (a deadlock, a cancel, a full
/// lock table), PostgreSQL's abort releases the transaction-level holds, and the session-level
/// ones are released by the failed-statement rule (`provisional`, recorded as each is taken), so
/// nothing this call took survives the error either. A full lock table is reported once, here,
/// for one key as for many (53200, `lock_table_full` in sql/messages.toml).
pub(crate) fn acquire(
    function: &str,
    targets: &[Target],
    timeout_ms: i32,
    scope: Scope,
    mode: Mode,
) -> Result<(), Busy> {
    preflight(function, scope);
    let started = Instant::now();
    let deadline = started + Duration::from_millis(timeout_ms as u64);
    // Read by the error handler: how far the call got.
    let taken = AssertUnwindSafe(Cell::new(0usize));
    let outcome = PgTryBuilder::new(|| {
        // How each key was taken, for giving it back to the right resource owner should a later
        // key stay busy; so not the last key's (a single key allocates nothing).
        let mut how = Vec::new();
        for (index, target) in targets.iter().enumerate() {
            // The first key waits the whole timeout_ms, read from no clock.
            let wait_ms = if index == 0 {
                timeout_ms
            } else {
                ms_left(deadline)
            };
            let Some(taken_as) = take_one(target, scope, mode, wait_ms) else {
                give_back(&targets[..index], &how, scope, mode);
                return Err(Stop::Busy(Busy {
                    index,
                    waited: started.elapsed(),
                }));
            };
            if scope == Scope::Session {
                provisional::taken(target.key, mode);
            }
            if index + 1 < targets.len() {
                how.push(taken_as);
            }
            taken.set(index + 1);
        }
        Ok(())
    })
    // The handler captures nothing, so registering it allocates nothing; the error is raised
    // after the builder, where the call's numbers are at hand.
    .catch_others(|error| match &error {
        // The lock manager's "out of shared memory" (53200, ERRCODE_OUT_OF_MEMORY): matched by
        // SQLSTATE, since the message is translated under another lc_messages.
        CaughtError::PostgresError(report)
            if report.sql_error_code() == PgSqlErrorCode::ERRCODE_OUT_OF_MEMORY =>
        {
            Err(Stop::NoRoom)
        }
        _ => error.rethrow(),
    })
    .execute();
    match outcome {
        Ok(()) => {
            for target in targets {
                labels::acquired(target, scope, mode);
            }
            Ok(())
        }
        Err(Stop::Busy(busy)) => Err(busy),
        Err(Stop::NoRoom) => Report::new(
            PgSqlErrorCode::ERRCODE_OUT_OF_MEMORY,
            "the lock table has no room for another advisory lock",
        )
        .detail(format!(
            "Keys asked for: {}; taken before it was full: {}. None of them is held: the error releases the ones it took.",
            targets.len(),
            taken.get()
        ))
        .hint("Hold fewer locks at once (fewer keys per call, no session lock kept longer than needed), or raise max_locks_per_transaction (a restart is needed): the shared lock table is sized for max_locks_per_transaction * (max_connections + max_prepared_transactions) locks, and holds more only while spare shared memory lasts.")
        .raise(),
    }
}

/// `acquire` for a single key: whether it was granted.
pub(crate) fn acquire_one(
    function: &str,
    target: &Target,
    timeout_ms: i32,
    scope: Scope,
    mode: Mode,
) -> bool {
    acquire(function, slice::from_ref(target), timeout_ms, scope, mode).is_ok()
}

/// What is left of the deadline for a later key of a set, in whole milliseconds rounded up (so
/// a fraction of a millisecond left still waits), 0 once it passed.
fn ms_left(deadline: Instant) -> i32 {
    let left_us = deadline
        .saturating_duration_since(Instant::now())
        .as_micros();
    left_us.div_ceil(1000).min(i32::MAX as u128) as i32
}

/// One key: a no-wait try, then (only if busy and `wait_ms` > 0) a bounded wait, each outcome
/// counted per namespace when preloaded. None when the lock was not obtained.
fn take_one(target: &Target, scope: Scope, mode: Mode, wait_ms: i32) -> Option<Taken> {
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

/// Releases one hold of each target, newest first.
fn give_back(targets: &[Target], how: &[Taken], scope: Scope, mode: Mode) {
    for (target, &taken) in targets.iter().zip(how).rev() {
        match scope {
            Scope::Session => {
                lockmgr::release_session(target.key, mode);
                provisional::released(target.key, mode);
            }
            Scope::Xact => lockmgr::release_xact(target.key, mode, taken),
        }
    }
}

/// How a call named what it asked for in its 55P03: one key, or a set of keys (even when the
/// set holds one distinct key).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Asked {
    OneKey,
    KeySet,
}

/// The try functions: true when every target was granted within `timeout_ms`.
pub(crate) fn try_acquire(
    function: &str,
    targets: &[Target],
    timeout_ms: Option<i32>,
    scope: Option<ServerText>,
    mode: Option<ServerText>,
) -> bool {
    let r = Request::parse(function, timeout_ms, scope, mode);
    acquire(function, targets, r.timeout_ms, r.scope, r.mode).is_ok()
}

/// The lock functions: every target granted within `timeout_ms`, or 55P03, the one error of a
/// bounded wait that ran out: what was asked, how long it waited, (for a set) which key was
/// busy, and in the DETAIL who holds that key.
pub(crate) fn lock(
    function: &str,
    asked: Asked,
    targets: &[Target],
    timeout_ms: Option<i32>,
    scope: Option<ServerText>,
    mode: Option<ServerText>,
) {
    let Request {
        timeout_ms,
        scope,
        mode,
    } = Request::parse(function, timeout_ms, scope, mode);
    let Err(busy) = acquire(function, targets, timeout_ms, scope, mode) else {
        return;
    };
    let target = &targets[busy.index];
    let (asked, busy_key, also) = match asked {
        Asked::OneKey => (
            format!("advisory lock on {}", target.describe()),
            String::new(),
            "",
        ),
        Asked::KeySet => (
            format!("advisory locks on all {} keys", targets.len()),
            format!(": {} is busy", target.describe()),
            " No key of this call is held.",
        ),
    };
    Report::new(
        PgSqlErrorCode::ERRCODE_LOCK_NOT_AVAILABLE,
        format!(
            "could not obtain {} {asked} within {timeout_ms} ms (waited {} ms){busy_key}",
            mode.word(),
            busy.waited.as_millis()
        ),
    )
    .detail(format!("{}{also}", describe_holders(target.key, mode)))
    .hint("Retry later or with a larger timeout_ms; SELECT * FROM advlock_holders shows who holds which lock.")
    .raise()
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
    for TRY, |target| try_acquire(TRY, slice::from_ref(&target), timeout_ms, scope, mode)
}

key_forms! {
    #[pg_extern(name = "advlock_lock_with_timeout")]
    fn [lock_with_timeout_key, lock_with_timeout_text, lock_with_timeout_int](
        timeout_ms: Option<i32>,
        scope: default!(Option<ServerText>, "'xact'"),
        mode: default!(Option<ServerText>, "'exclusive'"),
    )
    for LOCK, |target| lock(LOCK, Asked::OneKey, slice::from_ref(&target), timeout_ms, scope, mode)
}

key_forms! {
    #[pg_extern(name = "advlock_unlock")]
    fn [unlock_key, unlock_text, unlock_int](
        mode: default!(Option<ServerText>, "'exclusive'"),
    ) -> [bool]
    for UNLOCK, |target| unlock(target, mode)
}
