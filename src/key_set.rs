//! All-or-nothing acquisition of a set of keys: `advlock_try_all_with_timeout`,
//! `advlock_lock_all_with_timeout` and `advlock_unlock_all`, each with `(keys bigint[])`,
//! `(ns, ids text[])` and `(ns, ids bigint[])` forms.
//!
//! Why a separate name rather than array overloads of `advlock_try_with_timeout`: an overload
//! `(bigint[], integer)` makes `advlock_try_with_timeout($1, $2)` with untyped parameters
//! (asyncpg, and any driver preparing without types) ambiguous between the array and the key
//! form, and `advlock_unlock($1)` likewise — calls that work today would start failing.
//!
//! Deadlock freedom: every call takes its distinct keys in ascending order, so a caller waiting
//! for key k holds only keys below k. In PostgreSQL's wait-for graph a waiter on k then points
//! either at a holder of k, which (if it waits at all) waits for a key above k, or at a waiter
//! queued ahead on k itself; keys never decrease along an edge and queue order is total, so no
//! cycle can form among callers of these functions.
use crate::acquisition::{self, lock_not_available, preflight, take_one};
use crate::errors::{invalid_argument, required, Report};
use crate::keys;
use crate::lock_request::{Id, Mode, Request, Scope, Target};
use crate::lockmgr::{self, Taken};
use crate::preload::labels;
use crate::provisional;
use crate::server_text::ServerText;
use pgrx::pg_sys::errcodes::PgSqlErrorCode;
use pgrx::pg_sys::panic::CaughtError;
use pgrx::prelude::*;
use pgrx::PgTryBuilder;
use std::cell::Cell;
use std::panic::AssertUnwindSafe;
use std::time::{Duration, Instant};

const TRY_ALL: &str = "advlock_try_all_with_timeout";
const LOCK_ALL: &str = "advlock_lock_all_with_timeout";
const UNLOCK_ALL: &str = "advlock_unlock_all";

/// The call's distinct keys in ascending order (the first label of a key kept for messages).
fn sorted_distinct(mut targets: Vec<Target>) -> Vec<Target> {
    targets.sort_by_key(|t| t.key);
    targets.dedup_by_key(|t| t.key);
    targets
}

fn not_empty(len: usize, function: &str, argument: &str) {
    if len == 0 {
        invalid_argument(
            format!("argument \"{argument}\" of {function} must not be empty"),
            "Pass at least one key; an empty set would report success while locking nothing.",
        );
    }
}

fn null_element(function: &str, argument: &str, position: usize) -> ! {
    Report::new(
        PgSqlErrorCode::ERRCODE_NULL_VALUE_NOT_ALLOWED,
        format!("element {position} of argument \"{argument}\" of {function} must not be null"),
    )
    .hint("A NULL key would lock nothing: remove it from the array or pass a value.")
    .raise()
}

fn targets_of_keys<'a>(keys: &'a Array<'_, i64>, function: &str) -> Vec<Target<'a>> {
    not_empty(keys.len(), function, "keys");
    keys.iter()
        .enumerate()
        .map(|(i, key)| match key {
            Some(key) => Target { key, label: None },
            None => null_element(function, "keys", i + 1),
        })
        .collect()
}

fn targets_of_text_ids<'a>(
    ns: ServerText<'a>,
    ids: &'a Array<'_, ServerText<'_>>,
    function: &str,
) -> Vec<Target<'a>> {
    not_empty(ids.len(), function, "ids");
    ids.iter()
        .enumerate()
        .map(|(i, id)| match id {
            Some(id) => Target {
                key: keys::key_of_text(&ns, &id),
                label: Some((ns, Id::Text(id))),
            },
            None => null_element(function, "ids", i + 1),
        })
        .collect()
}

fn targets_of_int_ids<'a>(
    ns: ServerText<'a>,
    ids: &'a Array<'_, i64>,
    function: &str,
) -> Vec<Target<'a>> {
    not_empty(ids.len(), function, "ids");
    ids.iter()
        .enumerate()
        .map(|(i, id)| match id {
            Some(id) => Target {
                key: keys::key_of_int(&ns, id),
                label: Some((ns, Id::Int(id))),
            },
            None => null_element(function, "ids", i + 1),
        })
        .collect()
}

/// Which key stopped an acquisition, and after how long.
struct Busy {
    index: usize,
    waited: Duration,
}

/// Takes every target (sorted, distinct) within one deadline, or none of them.
///
/// Holds taken so far are given back in reverse order when a key stays busy; holds the session
/// had before the call are untouched (the lock manager counts holds, and exactly the ones this
/// call added are released). Should an ERROR end the call instead (a deadlock with a caller of
/// the single-key functions, a cancel, a full lock table), PostgreSQL's abort releases the
/// transaction-level holds, and the session-level ones are released by the failed-statement
/// rule (`provisional`), so nothing this call took survives the error either.
fn acquire_all(
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
        // How each key was taken, for giving it back to the right resource owner.
        let mut how = Vec::with_capacity(targets.len());
        for (index, target) in targets.iter().enumerate() {
            let Some(taken_as) = acquire_before(target, deadline, scope, mode) else {
                give_back(&targets[..how.len()], &how, scope, mode);
                return Err(Busy {
                    index,
                    waited: started.elapsed(),
                });
            };
            if scope == Scope::Session {
                provisional::taken(target.key, mode);
            }
            how.push(taken_as);
            taken.set(how.len());
        }
        Ok(())
    })
    .catch_others(|error| match &error {
        // The lock manager's "out of shared memory" (53200, ERRCODE_OUT_OF_MEMORY): matched by
        // SQLSTATE, since the message is translated under another lc_messages.
        CaughtError::PostgresError(report)
            if report.sql_error_code() == PgSqlErrorCode::ERRCODE_OUT_OF_MEMORY =>
        {
            Report::new(
                PgSqlErrorCode::ERRCODE_OUT_OF_MEMORY,
                format!(
                    "the lock table has no room for {} keys",
                    targets.len()
                ),
            )
            .detail(format!(
                "It was full after {} of them. No key of this call is held: the error releases the ones it took.",
                taken.get()
            ))
            .hint("Lock fewer keys per call, or raise max_locks_per_transaction (a restart is needed): the shared lock table is sized for max_locks_per_transaction * (max_connections + max_prepared_transactions) locks, and holds more only while spare shared memory lasts.")
            .raise()
        }
        _ => error.rethrow(),
    })
    .execute();
    if outcome.is_ok() {
        for target in targets {
            labels::acquired(target, scope, mode);
        }
    }
    outcome
}

/// One key, within what is left of the deadline (`acquisition::take_one`).
fn acquire_before(target: &Target, deadline: Instant, scope: Scope, mode: Mode) -> Option<Taken> {
    let left_ms = deadline
        .saturating_duration_since(Instant::now())
        .as_millis()
        .min(i32::MAX as u128) as i32;
    take_one(target, scope, mode, left_ms)
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

fn try_all(
    function: &str,
    targets: Vec<Target>,
    timeout_ms: Option<i32>,
    scope: Option<ServerText>,
    mode: Option<ServerText>,
) -> bool {
    let r = Request::parse(function, timeout_ms, scope, mode);
    acquire_all(
        function,
        &sorted_distinct(targets),
        r.timeout_ms,
        r.scope,
        r.mode,
    )
    .is_ok()
}

fn lock_all(
    targets: Vec<Target>,
    timeout_ms: Option<i32>,
    scope: Option<ServerText>,
    mode: Option<ServerText>,
) {
    let Request {
        timeout_ms,
        scope,
        mode,
    } = Request::parse(LOCK_ALL, timeout_ms, scope, mode);
    let targets = sorted_distinct(targets);
    if let Err(busy) = acquire_all(LOCK_ALL, &targets, timeout_ms, scope, mode) {
        let target = &targets[busy.index];
        let asked = format!("advisory locks on all {} keys", targets.len());
        lock_not_available(
            mode,
            &asked,
            Some(target),
            target.key,
            timeout_ms,
            busy.waited,
            " No key of this call is held.",
        );
    }
}

/// Releases one session hold of each distinct key. True when every one was held; each key not
/// held gets its WARNING naming it, as from `advlock_unlock`, and the others are released.
fn unlock_all(targets: Vec<Target>, mode: Option<ServerText>) -> bool {
    let mode = Mode::parse(mode, UNLOCK_ALL);
    let mut all = true;
    for target in sorted_distinct(targets) {
        all &= acquisition::release_session(&target, mode);
    }
    all
}

/// Declares the three key forms of a key-set function at once: `(keys bigint[], …)`,
/// `(ns text, ids text[], …)` and `(ns text, ids bigint[], …)`, under the Rust names given (the
/// C symbols derive from them: they never change). Each checks its array (not NULL, not empty, no
/// NULL element) and binds the call's targets, in the order given, to `$targets` for `$body`;
/// the other arguments, attributes and return type are spliced as in `lock_request::key_forms`.
macro_rules! key_set_forms {
    (
        $(#[$attr:meta])*
        fn [$keys_fn:ident, $text_fn:ident, $int_fn:ident]($($args:tt)*) $(-> [$($ret:tt)*])?
        for $function:expr, |$targets:ident| $body:expr
    ) => {
        $(#[$attr])*
        fn $keys_fn(keys: Option<Array<i64>>, $($args)*) $(-> $($ret)*)? {
            let keys = required(keys, $function, "keys");
            let $targets = targets_of_keys(&keys, $function);
            $body
        }

        $(#[$attr])*
        fn $text_fn(ns: Option<ServerText>, ids: Option<Array<ServerText>>, $($args)*) $(-> $($ret)*)? {
            let ns = keys::namespace(ns, $function);
            let ids = required(ids, $function, "ids");
            let $targets = targets_of_text_ids(ns, &ids, $function);
            $body
        }

        $(#[$attr])*
        fn $int_fn(ns: Option<ServerText>, ids: Option<Array<i64>>, $($args)*) $(-> $($ret)*)? {
            let ns = keys::namespace(ns, $function);
            let ids = required(ids, $function, "ids");
            let $targets = targets_of_int_ids(ns, &ids, $function);
            $body
        }
    };
}

key_set_forms! {
    #[pg_extern(name = "advlock_try_all_with_timeout")]
    fn [try_all_keys, try_all_text, try_all_int](
        timeout_ms: Option<i32>,
        scope: default!(Option<ServerText>, "'xact'"),
        mode: default!(Option<ServerText>, "'exclusive'"),
    ) -> [bool]
    for TRY_ALL, |targets| try_all(TRY_ALL, targets, timeout_ms, scope, mode)
}

key_set_forms! {
    #[pg_extern(name = "advlock_lock_all_with_timeout")]
    fn [lock_all_keys, lock_all_text, lock_all_int](
        timeout_ms: Option<i32>,
        scope: default!(Option<ServerText>, "'xact'"),
        mode: default!(Option<ServerText>, "'exclusive'"),
    )
    for LOCK_ALL, |targets| lock_all(targets, timeout_ms, scope, mode)
}

key_set_forms! {
    #[pg_extern(name = "advlock_unlock_all")]
    fn [unlock_all_keys, unlock_all_text, unlock_all_int](
        mode: default!(Option<ServerText>, "'exclusive'"),
    ) -> [bool]
    for UNLOCK_ALL, |targets| unlock_all(targets, mode)
}
