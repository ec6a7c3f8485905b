//! All-or-nothing acquisition of a set of keys (by `acquisition::acquire`, the routine the
//! single-key functions use, given the set's keys sorted and distinct): `advlock_try_all_with_timeout`,
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
use crate::acquisition::{self, lock, try_acquire, Asked};
use crate::errors::{invalid_argument, required, Report};
use crate::keys;
use crate::lock_request::{Mode, Target};
use crate::server_text::ServerText;
use pgrx::pg_sys::errcodes::PgSqlErrorCode;
use pgrx::prelude::*;

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

/// The targets of an array argument, in the caller's order: the array not empty (22023) and no
/// element NULL (22004, naming its 1-based position); each element made a target by `target`
/// (`Target::of_key`, `of_text`, `of_int`: the same targets as the single-key forms).
fn targets_of<'a, T>(
    elements: impl Iterator<Item = Option<T>>,
    len: usize,
    function: &str,
    argument: &str,
    target: impl Fn(T) -> Target<'a>,
) -> Vec<Target<'a>> {
    not_empty(len, function, argument);
    elements
        .enumerate()
        .map(|(i, element)| match element {
            Some(element) => target(element),
            None => null_element(function, argument, i + 1),
        })
        .collect()
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
            let $targets = targets_of(keys.iter(), keys.len(), $function, "keys", Target::of_key);
            $body
        }

        $(#[$attr])*
        fn $text_fn(ns: Option<ServerText>, ids: Option<Array<ServerText>>, $($args)*) $(-> $($ret)*)? {
            let ns = keys::namespace(ns, $function);
            let ids = required(ids, $function, "ids");
            let $targets = targets_of(ids.iter(), ids.len(), $function, "ids", |id| Target::of_text(ns, id));
            $body
        }

        $(#[$attr])*
        fn $int_fn(ns: Option<ServerText>, ids: Option<Array<i64>>, $($args)*) $(-> $($ret)*)? {
            let ns = keys::namespace(ns, $function);
            let ids = required(ids, $function, "ids");
            let $targets = targets_of(ids.iter(), ids.len(), $function, "ids", |id| Target::of_int(ns, id));
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
    for TRY_ALL, |targets| try_acquire(TRY_ALL, &sorted_distinct(targets), timeout_ms, scope, mode)
}

key_set_forms! {
    #[pg_extern(name = "advlock_lock_all_with_timeout")]
    fn [lock_all_keys, lock_all_text, lock_all_int](
        timeout_ms: Option<i32>,
        scope: default!(Option<ServerText>, "'xact'"),
        mode: default!(Option<ServerText>, "'exclusive'"),
    )
    for LOCK_ALL, |targets| lock(LOCK_ALL, Asked::KeySet, &sorted_distinct(targets), timeout_ms, scope, mode)
}

key_set_forms! {
    #[pg_extern(name = "advlock_unlock_all")]
    fn [unlock_all_keys, unlock_all_text, unlock_all_int](
        mode: default!(Option<ServerText>, "'exclusive'"),
    ) -> [bool]
    for UNLOCK_ALL, |targets| unlock_all(targets, mode)
}
